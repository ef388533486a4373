"""The `vllm.general_plugins` entry point: vLLM's EPLB policy, wrapped. Runs in every vLLM process.

vLLM looks its policy up in a hard-coded registry (`EPLB_POLICIES = {"default": ...}`, `EPLBConfig.policy` is
Literal["default"]). So `register` replaces that entry, in place, with a class that does three things:
1. Records the `weight` it is passed at each rearrange (global logical load [num_moe_layers,
   num_logical_experts], the same on every rank) for the sidecar.
2. Returns the controller's placement when one is armed for this rearrange (arming.py: the same
   on every rank), checked to keep every expert.
3. Otherwise, or when the armed table does not fit, returns what vLLM's own policy returns.
vLLM's rearrange then moves the weights, as it does for its own maps.
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
from agents.adapters.errors import PlacementRefused
from agents.adapters.vllm import names

log = logging.getLogger("moectl.adapter.vllm")


def _is_recording_rank() -> bool:
    """EP rank 0 records (every rank holds the same weight); without torch.distributed, this process."""
    import torch.distributed as dist

    return not dist.is_available() or not dist.is_initialized() or dist.get_rank() == 0


def wrap_policy(inner: type, state_dir: Path, *, version: str = "", is_recording_rank=_is_recording_rank) -> type:
    """A policy class with `inner`'s signature (names.POLICY_ARGS) that records, then returns the armed placement
    or `inner`'s. Counts its calls from 0, as every rank does."""
    import torch

    lock = threading.Lock()
    calls = {"next": 0}

    class MoectlEplbPolicy(inner):  # type: ignore[misc, valid-type]
        @classmethod
        def rebalance_experts(cls, weight, num_replicas, num_groups, num_nodes, num_ranks,
                              old_global_expert_indices=None):  # noqa: ANN001 (vLLM's signature)
            with lock:
                call, calls["next"] = calls["next"], calls["next"] + 1
            load = weight.detach().cpu().numpy()
            if is_recording_rank():
                current = None if old_global_expert_indices is None else \
                    old_global_expert_indices.detach().cpu().numpy().tolist()
                state.write_load(state_dir, {"call": call, "at": time.time(), "weight": load.astype(np.int64).tolist(),
                                             "current": current, "num_replicas": int(num_replicas),
                                             "num_ranks": int(num_ranks), "vllm": version})
            armed = in_force(state.read_armed(state_dir), call)
            if armed is not None:
                try:
                    table = check_covers_every_expert(armed.table, load.shape[1], int(num_replicas))
                    if table.shape[0] != load.shape[0]:
                        raise PlacementRefused(f"placement has {table.shape[0]} layers, vLLM {load.shape[0]}")
                    return torch.from_numpy(table.copy())
                except PlacementRefused as exc:
                    log.error("placement v%d not used at rearrange %d: %s", armed.version, call, exc)
            return inner.rebalance_experts(weight, num_replicas, num_groups, num_nodes, num_ranks,
                                           old_global_expert_indices)

    MoectlEplbPolicy.__name__ = f"Moectl{inner.__name__}"
    return MoectlEplbPolicy


def register() -> None:
    """The entry point vLLM calls in each of its processes (maybe more than once: the second is a no-op)."""
    import importlib

    import vllm

    registry = getattr(importlib.import_module(names.POLICY_MODULE), names.POLICY_REGISTRY)
    inner = registry[names.POLICY_NAME]
    if inner.__name__.startswith("Moectl"):
        return
    state_dir = Path(os.environ.get(names.STATE_DIR_ENV, "/tmp/moectl-vllm"))
    registry[names.POLICY_NAME] = wrap_policy(inner, state_dir, version=vllm.__version__)
