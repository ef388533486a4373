"""Expert placement, pure: which logical expert each physical slot holds, per MoE layer (`solver.solve_placement`)."""
