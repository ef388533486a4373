"""The vLLM adapter: a plugin package inside vLLM and a sidecar beside it.

Inside vLLM (entry points in pyproject.toml), `vllm.general_plugins` wraps the EPLB policy in every process
(policy.py). It records each load `weight` vLLM passes at a rearrange, and returns the controller's placement
when one is armed, else vLLM's own policy's. `vllm.endpoint_plugins` serves the records and takes placements
over HTTP (endpoint.py). Both meet in a directory (state.py). Beside vLLM: `moectl adapter vllm` (main.py)
posts each window's records and `vllm:*` metrics as a group snapshot and hands the answer to the endpoint.
"""
