"""moectl control plane: collect, store, plan and actuate MoE serving knobs."""
