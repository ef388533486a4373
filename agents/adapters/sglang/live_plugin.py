"""The `sglang.srt.plugins` entry point: placements applied live, through SGLang's own EPLB rebalance.

With `--enable-eplb`, every rank's `EPLBManager.rebalance` dumps the recorder, computes the new layout in
`_compute_expert_location_metadata(logical_count, ...)` and moves the weights with SGLang's own
`update_expert_location_with_recovery`, chunk by chunk. This plugin wraps that one method (an AROUND hook in
SGLang's HookRegistry). It records the `logical_count` it is passed (rank 0, into the shared directory,
agents/adapters/state_dir.py, under the engine's epoch) for the sidecar. A placement may be armed for this
rebalance (armed ahead, as for vLLM: agents/adapters/arming.py, so every rank returns the same). Then it returns
SGLang's own `ExpertLocationMetadata.init_by_mapping` of it, after checking that every expert keeps a slot;
otherwise SGLang's own EPLB layout, as whenever something of ours fails (counted, logged once: faults.py). The
sidecar (`moectl adapter sglang --live`) reads the records and arms the placements: no restart.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np

from agents.adapters.epoch import engine_epoch
from agents.adapters.faults import Faults
from agents.adapters.rebalance_step import RebalanceStep

log = logging.getLogger("moectl.adapter.sglang.live")

TARGET = "sglang.srt.eplb.eplb_manager.EPLBManager._compute_expert_location_metadata"
STATE_DIR_ENV = "MOECTL_SGLANG_STATE_DIR"


def make_hook(directory: Path, *, epoch: str, version: str = "", is_recording_rank=None, faults: Faults | None = None):
    """The AROUND hook: hook(original, manager, logical_count, **kwargs) -> ExpertLocationMetadata. Whatever of ours
    fails is counted by cause, logged once, and SGLang's own layout returned (faults.py)."""
    faults = faults or Faults(log)

    def recording_rank() -> bool:
        if is_recording_rank is not None:
            return is_recording_rank()
        import torch.distributed as dist

        return not dist.is_initialized() or dist.get_rank() == 0

    step = RebalanceStep(directory, engine="sglang", epoch=epoch, version=version, faults=faults,
                         is_recording_rank=recording_rank, log=log)

    def ours(manager, logical_count):  # noqa: ANN001 (SGLang's types)
        counts = np.asarray(logical_count.detach().cpu().numpy() if hasattr(logical_count, "detach")
                            else logical_count, dtype=np.int64)
        load = counts.sum(axis=0) if counts.ndim == 3 else counts  # [buffer rows, layers, experts] -> [layers, ...]
        current = manager_current_map()
        armed = step(load, current=current, num_replicas=None if current is None else int(current.shape[1]),
                     num_ranks=None)
        if armed is None:
            return None
        from sglang.srt.eplb.expert_location import ExpertLocationMetadata

        return ExpertLocationMetadata.init_by_mapping(manager._model_config, physical_to_logical_map=armed.table)

    def hook(original, manager, logical_count, *args, **kwargs):  # noqa: ANN001 (SGLang's types)
        try:
            metadata = ours(manager, logical_count)
        except Exception as exc:  # noqa: BLE001 (whatever of ours fails, SGLang's rebalance goes on with its own)
            faults.record(f"plugin failed ({type(exc).__name__})", exc)
            metadata = None
        return metadata if metadata is not None else original(manager, logical_count, *args, **kwargs)

    hook.faults = faults
    return hook


def manager_current_map() -> np.ndarray | None:
    """[layers, num_physical] the layout SGLang runs now; None before it has one."""
    from sglang.srt.eplb.expert_location import get_global_expert_location_metadata

    metadata = get_global_expert_location_metadata()
    return None if metadata is None else metadata.physical_to_logical_map_cpu.numpy()


def register() -> None:
    """The entry point SGLang's plugin loader calls in each of its processes, before it applies the hooks. Without
    $MOECTL_SGLANG_STATE_DIR it does nothing: moectl installed beside SGLang changes nothing until asked."""
    if not os.environ.get(STATE_DIR_ENV):
        return
    import sglang
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    directory = Path(os.environ[STATE_DIR_ENV])
    HookRegistry.register(TARGET, make_hook(directory, epoch=engine_epoch(), version=sglang.__version__),
                          HookType.AROUND)
