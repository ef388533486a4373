"""What the sidecar needs of the SGLang server it sits beside, read from `/server_info`. Pure.

A dump resets the recorder's buffer (`dump_record` calls `_reset()` in SGLang's `srt/eplb/expert_distribution.py`),
and SGLang's built-in EPLB dumps the same recorder on its own schedule: with both, each would read a part of
the other's window, and two planners would move experts. So the sidecar refuses a server with `--enable-eplb` on.
It reads `stat` dumps only.
"""

from __future__ import annotations

from dataclasses import dataclass

from agents.adapters.errors import EngineFormatError
from agents.adapters.sglang import names
from agents.adapters.sglang.model import EngineModel

DEFAULT_BUFFER_SIZE = 1000  # SGLang's --expert-distribution-recorder-buffer-size when unset


class ServerRefused(RuntimeError):
    """The server runs with settings the sidecar cannot work beside; the message says which flag to change."""


@dataclass(frozen=True)
class ServerLayout:
    """version: SGLang's; ep_size: GPUs of the EP group; num_slots: physical expert slots a layer
    (logical + redundant), slots_per_rank of them on each GPU; buffer_size: recorder rows."""

    version: str
    ep_size: int
    num_slots: int
    buffer_size: int

    @property
    def slots_per_rank(self) -> int:
        return self.num_slots // self.ep_size


def check_server(info: dict, model: EngineModel, *, is_live: bool = False) -> ServerLayout:
    """info: `/server_info`'s JSON; is_live: the sidecar applies placements through the live plugin
    (live_plugin.py), which needs SGLang's EPLB on, where dumping does not. Raises ServerRefused (a flag to
    change) or EngineFormatError (a field missing or of another type: another SGLang version)."""
    version = str(info.get("version", "unknown"))

    def field(name: str, kind: type | tuple[type, ...]):
        if name not in info:
            raise EngineFormatError("sglang", version, f"/server_info {name}", "missing")
        value = info[name]
        if not isinstance(value, kind):
            raise EngineFormatError("sglang", version, f"/server_info {name}", f"is {value!r}")
        return value

    is_eplb = field(names.ARG_ENABLE_EPLB, bool)
    if is_live and not is_eplb:
        raise ServerRefused("--live applies placements at SGLang's EPLB rebalance (the moectl plugin in "
                            "sglang.srt.plugins): start SGLang with --enable-eplb, or run the sidecar without --live")
    if is_eplb and not is_live:
        raise ServerRefused("SGLang runs with --enable-eplb: its EPLB dumps the expert-distribution recorder "
                            "too, and a dump resets the buffer, so neither would see a whole window (and two "
                            "planners would move experts). Restart SGLang without --enable-eplb: moectl places "
                            "the experts.")
    mode = field(names.ARG_RECORDER_MODE, (str, type(None)))
    if mode != "stat":
        raise ServerRefused(f"SGLang's expert-distribution recorder mode is {mode!r}: start it with "
                            f"--expert-distribution-recorder-mode stat (the sidecar reads stat dumps)")
    ep_size = field(names.ARG_EP_SIZE, int)
    redundant = field(names.ARG_REDUNDANT, int)
    buffer_size = field(names.ARG_BUFFER_SIZE, (int, type(None)))
    num_slots = model.shape.num_experts + redundant
    if ep_size < 1 or num_slots % ep_size:
        raise EngineFormatError("sglang", version, f"/server_info {names.ARG_EP_SIZE}",
                                f"{ep_size} GPUs cannot split {num_slots} expert slots evenly")
    return ServerLayout(version, ep_size, num_slots, DEFAULT_BUFFER_SIZE if buffer_size is None else buffer_size)
