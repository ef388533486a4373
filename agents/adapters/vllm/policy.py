"""The `vllm.general_plugins` entry point: vLLM's EPLB policy, wrapped. Runs in every vLLM process.

vLLM looks its policy up in a hard-coded registry (`EPLB_POLICIES = {"default": ...}`, `EPLBConfig.policy` is
Literal["default"]). So `register` replaces that entry, in place, with a class that does three things:
1. Records the `weight` it is passed at each rearrange (global logical load [num_moe_layers,
   num_logical_experts], the same on every rank) for the sidecar, keyed by the engine's epoch and the model
   (vLLM calls the policy once per model: an MTP drafter's 1-layer weight is recorded apart, state_dir.py).
2. Returns the controller's placement when one is armed for this rearrange, epoch and model (arming.py: the
   same on every rank), checked to keep every expert.
3. Otherwise, or when the armed table does not fit, returns what vLLM's own policy returns.
Whatever of ours fails (the directory full, gone or torn; a placement that does not fit) is counted by cause,
logged once (faults.py) and vLLM's own answer returned: the plugin never stops vLLM's step.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

import numpy as np

from agents.adapters import state_dir as state
from agents.adapters.arming import in_force
from agents.adapters.coverage import check_covers_every_expert
from agents.adapters.epoch import engine_epoch
from agents.adapters.errors import PlacementRefused
from agents.adapters.faults import Faults
from agents.adapters.vllm import names

log = logging.getLogger("moectl.adapter.vllm")


def _is_recording_rank() -> bool:
    """EP rank 0 records (every rank holds the same weight); without torch.distributed, this process."""
    import torch.distributed as dist

    return not dist.is_available() or not dist.is_initialized() or dist.get_rank() == 0


def wrap_policy(inner: type, state_dir: Path, *, epoch: str, version: str = "", is_recording_rank=_is_recording_rank,
                faults: Faults | None = None) -> type:
    """A policy class with `inner`'s signature (names.POLICY_ARGS) that records, then returns the armed placement
    or `inner`'s. Counts its calls from 0 for each model, as every rank does. `faults`: where ours are counted."""
    import torch

    lock = threading.Lock()
    calls: dict[str, int] = {}
    faults = faults or Faults(log)

    def record(weight, num_replicas, num_ranks, old_global_expert_indices, seconds: float) -> None:  # noqa: ANN001
        """Rank 0 records the rearrange: the load it was passed and how long the policy's call took."""
        load = weight.detach().cpu().numpy()
        model = state.model_key(*load.shape)
        with lock:
            call = calls[model] = calls.get(model, -1) + 1
        if is_recording_rank():
            try:
                current = None if old_global_expert_indices is None else \
                    old_global_expert_indices.detach().cpu().numpy().tolist()
                state.write_load(state_dir, {
                    "epoch": epoch, "model": model, "call": call, "at": time.time(),
                    "weight": load.astype(np.int64).tolist(), "current": current, "num_replicas": int(num_replicas),
                    "num_ranks": int(num_ranks), "faults": faults.snapshot(), "vllm": version,
                    "seconds": round(seconds, 6)})
            except (OSError, ValueError) as exc:
                faults.record("load not recorded", exc)

    def placement(weight, num_replicas, num_ranks):  # noqa: ANN001
        load = weight.detach().cpu().numpy()
        model = state.model_key(*load.shape)
        with lock:
            call = calls.get(model, -1) + 1  # this rearrange's: recorded (and counted) once it returns
        armed = in_force(state.read_armed(state_dir, faults=faults), call, epoch=epoch, model=model)
        if armed is None:
            return None
        try:
            table = check_covers_every_expert(armed.table, load.shape[1], int(num_replicas))
            if table.shape[0] != load.shape[0]:
                raise PlacementRefused(f"placement has {table.shape[0]} layers, vLLM {load.shape[0]}")
        except PlacementRefused as exc:
            faults.record(f"placement v{armed.version} refused", exc)
            return None
        return torch.from_numpy(table.copy())

    class MoectlEplbPolicy(inner):  # type: ignore[misc, valid-type]
        moectl_faults = faults

        @classmethod
        def rebalance_experts(cls, weight, num_replicas, num_groups, num_nodes, num_ranks,
                              old_global_expert_indices=None):  # noqa: ANN001 (vLLM's signature)
            started = time.perf_counter()  # what the call takes of the step it runs in: part of a change's cost
            try:
                ours = placement(weight, num_replicas, num_ranks)
            except Exception as exc:  # noqa: BLE001 (whatever of ours fails, vLLM's step goes on with its own map)
                faults.record(f"plugin failed ({type(exc).__name__})", exc)
                ours = None
            try:
                if ours is not None:
                    return ours
                return inner.rebalance_experts(weight, num_replicas, num_groups, num_nodes, num_ranks,
                                               old_global_expert_indices)
            finally:
                try:
                    record(weight, num_replicas, num_ranks, old_global_expert_indices, time.perf_counter() - started)
                except Exception as exc:  # noqa: BLE001 (a record lost never fails vLLM's step)
                    faults.record(f"plugin failed ({type(exc).__name__})", exc)

    MoectlEplbPolicy.__name__ = f"Moectl{inner.__name__}"
    return MoectlEplbPolicy


def state_dir_from_env() -> Path:
    """$MOECTL_VLLM_STATE_DIR, else the private default (state_dir.default_dir): the policy's and the endpoint's."""
    return Path(os.environ.get(names.STATE_DIR_ENV) or state.default_dir("vllm"))


def register() -> None:
    """The entry point vLLM calls in each of its processes (maybe more than once: the second is a no-op)."""
    import importlib

    import vllm

    from agents.adapters.vllm.counting import register_counting, unsupported

    refusal = unsupported(vllm.__version__)
    if refusal is not None:
        log.error(refusal)
        return
    register_counting(state_dir_from_env(), vllm.__version__)
    registry = getattr(importlib.import_module(names.POLICY_MODULE), names.POLICY_REGISTRY)
    inner = registry[names.POLICY_NAME]
    if inner.__name__.startswith("Moectl"):
        return
    registry[names.POLICY_NAME] = wrap_policy(inner, state_dir_from_env(), epoch=engine_epoch(),
                                              version=vllm.__version__)
