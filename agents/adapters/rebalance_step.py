"""What an engine plugin does at each of the engine's own rebalances, the same for vLLM's EPLB policy
(vllm/policy.py) and SGLang's live hook (sglang/live_plugin.py): count the call (per model, from 0 in every engine
life), record the load it was passed (the recording rank only, state_dir.py), and pick the placement armed for
this call, epoch and model (arming.py), checked to keep every expert and to fit the model's layers.

Whatever of this fails (the directory full, gone or torn; an armed table that does not fit) is counted by cause
(faults.py) and None returned: the caller then answers with the engine's own layout. The callers keep their own
guard around the engine-specific parts (tensors in, the engine's layout type out).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from agents.adapters import state_dir as state
from agents.adapters.arming import ArmedPlacement, in_force
from agents.adapters.coverage import check_covers_every_expert
from agents.adapters.errors import PlacementRefused
from agents.adapters.faults import Faults


class RebalanceStep:
    """One engine process's plugin state: its call counters (model -> next call) and where it records.
    engine: the record's key for the engine's version ("vllm", "sglang"); epoch: the engine's life (epoch.py)."""

    def __init__(self, directory: Path, *, engine: str, epoch: str, version: str, faults: Faults,
                 is_recording_rank: Callable[[], bool], log: logging.Logger):
        self.directory, self.engine, self.epoch, self.version = Path(directory), engine, epoch, version
        self.faults, self.is_recording_rank, self.log = faults, is_recording_rank, log
        self.lock = threading.Lock()
        self.calls: dict[str, int] = {}
        self.took: dict[str, float] = {}  # model -> seconds its last call took, where the caller timed it

    def timed(self, shape: tuple[int, int], seconds: float) -> None:
        """The engine's call for a load of `shape` took `seconds`: the model's next record says so, as
        `previous_seconds` (its own is written before the call has run)."""
        with self.lock:
            self.took[state.model_key(*shape)] = seconds

    def __call__(self, load: np.ndarray, *, current: np.ndarray | None, num_replicas: int | None,
                 num_ranks: int | None) -> ArmedPlacement | None:
        """load: [num_layers, num_logical_experts] tokens the engine passed; current: [num_layers, num_slots] the
        map in force (None before the engine has one); num_replicas: the engine's physical slots a layer (None:
        current's width, else the armed table's). -> the armed placement in force, its table checked (int64), or
        None: the engine's own answer."""
        model = state.model_key(*load.shape)
        with self.lock:
            call = self.calls[model] = self.calls.get(model, -1) + 1
            took = self.took.pop(model, None)
        if self.is_recording_rank():
            try:
                state.write_load(self.directory, {
                    "epoch": self.epoch, "model": model, "call": call, "at": time.time(),
                    "weight": np.asarray(load, dtype=np.int64).tolist(),
                    "current": None if current is None else np.asarray(current).tolist(),
                    "num_replicas": None if num_replicas is None else int(num_replicas),
                    "num_ranks": None if num_ranks is None else int(num_ranks),
                    "faults": self.faults.snapshot(), self.engine: self.version}
                    | ({} if took is None else {"previous_seconds": round(took, 6)}))
            except (OSError, ValueError) as exc:
                self.faults.record("load not recorded", exc)
        armed = in_force(state.read_armed(self.directory, faults=self.faults), call, epoch=self.epoch, model=model)
        if armed is None:
            return None
        try:
            num_slots = num_replicas if num_replicas is not None else armed.table.shape[1]
            table = check_covers_every_expert(armed.table, load.shape[1], int(num_slots))
            if table.shape[0] != load.shape[0]:
                raise PlacementRefused(f"placement has {table.shape[0]} layers, {self.engine} {load.shape[0]}")
        except PlacementRefused as exc:
            self.faults.record(f"placement v{armed.version} refused", exc)
            return None
        self.log.info("%s rebalance %d: placement v%d", self.engine, call, armed.version)
        return dataclasses.replace(armed, table=table)
