"""An EP group's agents reporting as one (moectl.v2, agents/protocol/group.py), over the group's own collective.

Every rank's agent calls these at the same point of the same step (between steps, where the engine's ranks are
in lockstep), so the collectives line up. Each tick the ranks agree on the window to be in (the latest any rank's
clock says) and on whether rank 0 holds a new answer from the controller. When a window closes they sum its
expert-load matrix (an all-reduce, as SGLang's expert-distribution recorder does). Rank 0 then gathers each
rank's row and slot load, and posts one body. A new answer is broadcast from rank 0, so every rank stages the same
desired state at the same step. A tick costs one all-reduce of four integers; a window, one all-reduce of
[num_layers, num_experts] and one gather of a few kB per rank. Ranks that sum into different windows (they
started, or changed window length, on either side of a boundary) first move their sums to the same window.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
from torch import Tensor

from agents.protocol import DesiredState, GroupSnapshot, RankRow
from agents.telemetry.windows import ClosedWindow


class GroupCollective(Protocol):
    """What the agent needs of its EP group (agents/runtime/ep.py's EPGroup has it)."""

    rank: int
    size: int

    def agree_max(self, values: list[int]) -> list[int]:
        """Element-wise max over the group's ranks."""
        ...

    def all_reduce_sum(self, tensor: Tensor) -> Tensor:
        """Sum over the group's ranks, in place."""
        ...

    def gather_objects(self, obj: object) -> list | None:
        """Every rank's obj on rank 0 (rank order); None elsewhere."""
        ...

    def broadcast_object(self, obj: object) -> object:
        """Rank 0's obj on every rank."""
        ...


@dataclass(frozen=True)
class Agreement:
    """What the group's ranks agreed on at a tick: the latest of each rank's."""

    window_index: int  # the window the group is in
    answer_seq: int  # the newest answer rank 0 holds
    current_index: int  # the latest window any rank sums into
    is_aligned: bool  # every rank sums into the same window (not so at start, or after a length change)


class GroupReporter:
    def __init__(self, group: GroupCollective):
        self.group = group

    @property
    def is_poster(self) -> bool:
        return self.group.rank == 0

    def agree(self, window_index: int, answer_seq: int, current_index: int) -> Agreement:
        """window_index: the window this rank's clock says; current_index: the one it sums into."""
        index, seq, high, neg_low = self.group.agree_max([window_index, answer_seq, current_index, -current_index])
        return Agreement(index, seq, high, high == -neg_low)

    def share_answer(self, answer: DesiredState | None) -> DesiredState | None:
        """Rank 0's answer on every rank (sent as its JSON: the wire format, not a pickle of our classes)."""
        sent = self.group.broadcast_object(answer.model_dump_json() if self.is_poster and answer else None)
        return None if sent is None else DesiredState.model_validate_json(sent)

    def gather(self, closed: ClosedWindow) -> GroupSnapshot | None:
        """The group's snapshot of a window every rank just closed: on rank 0; None on the others."""
        total = self.group.all_reduce_sum(torch.from_numpy(np.array(closed.expert_tokens, dtype=np.int64)))
        parts = self.group.gather_objects((RankRow.of(closed.snapshot), closed.slot_tokens))
        if parts is None:
            return None
        return GroupSnapshot.assemble(closed.snapshot, [row for row, _ in parts], total.numpy(),
                                      [slots for _, slots in parts])
