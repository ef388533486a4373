"""Adapters: moectl beside engines it does not embed in (SGLang, vLLM).

Each adapter reads an engine's own surfaces (its expert-load dumps or policy inputs, its `/metrics`), posts
the same `moectl.v2` group snapshot our agents post (agents/protocol/group.py), and hands the controller's
placement back in the form the engine accepts. Pure conversions (dump -> counts, placement table -> engine
file, metrics text -> serving counters) live in their own modules; HTTP and file I/O in thin ones beside
them. `python -m agents.adapters sglang|vllm ...` (`moectl adapter ...`) runs a sidecar.
"""
