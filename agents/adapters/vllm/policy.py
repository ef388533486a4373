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
import time
from pathlib import Path

from agents.adapters import state_dir as state
from agents.adapters.epoch import engine_epoch
from agents.adapters.faults import Faults
from agents.adapters.rebalance_step import RebalanceStep
from agents.adapters.vllm import names

log = logging.getLogger("moectl.adapter.vllm")


def _is_recording_rank() -> bool:
    """EP rank 0 records (every rank holds the same weight); without torch.distributed, this process."""
    import torch.distributed as dist

    return not dist.is_available() or not dist.is_initialized() or dist.get_rank() == 0


def wrap_policy(inner: type, state_dir: Path, *, epoch: str, version: str = "", is_recording_rank=_is_recording_rank,
                faults: Faults | None = None) -> type:
    """A policy class with `inner`'s signature (names.POLICY_ARGS) that records, then returns the armed placement
    or `inner`'s (rebalance_step.py: counts its calls from 0 for each model, as every rank does). `faults`: where
    ours are counted."""
    import torch

    faults = faults or Faults(log)
    step = RebalanceStep(state_dir, engine="vllm", epoch=epoch, version=version, faults=faults,
                         is_recording_rank=is_recording_rank, log=log)

    def placement(weight, num_replicas, num_ranks, old_global_expert_indices):  # noqa: ANN001
        current = None if old_global_expert_indices is None else old_global_expert_indices.detach().cpu().numpy()
        armed = step(weight.detach().cpu().numpy(), current=current, num_replicas=int(num_replicas),
                     num_ranks=int(num_ranks))
        return None if armed is None else torch.from_numpy(armed.table.copy())

    class MoectlEplbPolicy(inner):  # type: ignore[misc, valid-type]
        moectl_faults = faults

        @classmethod
        def rebalance_experts(cls, weight, num_replicas, num_groups, num_nodes, num_ranks,
                              old_global_expert_indices=None):  # noqa: ANN001 (vLLM's signature)
            started = time.perf_counter()  # what the call takes of the step it runs in: part of a change's cost
            try:
                ours = placement(weight, num_replicas, num_ranks, old_global_expert_indices)
            except Exception as exc:  # noqa: BLE001 (whatever of ours fails, vLLM's step goes on with its own map)
                faults.record(f"plugin failed ({type(exc).__name__})", exc)
                ours = None
            try:
                if ours is not None:
                    return ours
                return inner.rebalance_experts(weight, num_replicas, num_groups, num_nodes, num_ranks,
                                               old_global_expert_indices)
            finally:  # the next record of this model carries it (the record is written as the call starts)
                step.timed(tuple(weight.shape), time.perf_counter() - started)

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
