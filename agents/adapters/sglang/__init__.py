"""The SGLang adapter: a sidecar beside one SGLang server (one per EP group; it reads rank 0's dumps).

Load in: the `stat` expert-distribution recorder, started once and dumped on every window of the grid
(dump.py turns a dump into the window's counts). Serving in: `sglang:*` from `/metrics` (names.py).
Placement out: an `--init-expert-location` JSON (location_file.py) and a restart of the group (restart.py).
"""
