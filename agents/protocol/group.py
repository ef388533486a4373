"""`moectl.v2`: one snapshot per EP group per window, where `moectl.v1` posts one per rank.

Rank 0 of an EP group gathers the window over the group's own collective (the expert-load matrix summed by an
all-reduce, each rank's slot load and counters gathered), as SGLang's expert-distribution recorder does, and
posts one `GroupSnapshot` to `POST /v2/agents/snapshot`. A 320-GPU decode instance then makes one request per
window instead of 320, and the body carries one [num_layers, num_experts] matrix instead of 320: the controller
only ever summed them. Everything else is per rank, in `ranks`, with the meaning it has in a v1 `Snapshot`
(each rank stays an agent of its own for freshness, placement versions and counters).

The answer is the `DesiredState` a v1 snapshot gets (its format is unchanged), for every rank of the group.
Rank 0 hands it to the others over the same collective. Snapshots of v1 are still accepted at
`POST /v1/agents/snapshot`; each endpoint refuses the other's body with a 422 naming the right one. A
controller may never have issued the newest placement version a rank ran (its database was restored or
replaced). It refuses that version as it refuses a v1 snapshot's (409, code PLACEMENT_UNKNOWN). Rank 0 then posts
the window again with `running_placement`, the whole group's table for that version, and the controller adopts it.
"""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
from pydantic import Field, StringConstraints, field_validator, model_serializer, model_validator

from agents.protocol.array import Array, check_counts
from agents.protocol.identity import Identity, ModelShape, Role
from agents.protocol.running import RunningPlacement, without_absent_table
from agents.protocol.snapshot import RankCounters, Snapshot
from agents.protocol.wire import MAX_COUNT, NAME_PATTERN, PRINTABLE, _Frozen

MAX_FAULT_CAUSES = 32
FaultCause = Annotated[str, StringConstraints(min_length=1, max_length=160, pattern=PRINTABLE)]

GROUP_PROTOCOL_VERSION = "moectl.v2"
# Snapshot's fields beyond a rank's counters: a group snapshot carries them once for the group
GROUP_FIELDS = frozenset({"protocol", "identity", "model", "window_start", "window_seconds", "expert_tokens",
                          "slot_tokens", "running_placement"})


class RankRow(RankCounters):
    """One rank's part of a group's window: its counters, as a v1 `Snapshot` carries them, its node and GPU."""

    rank: int = Field(ge=0)
    node: str = Identity.model_fields["node"]
    gpu_uuid: str = Identity.model_fields["gpu_uuid"]

    def _where(self) -> str:
        return f"rank {self.rank}: "

    @classmethod
    def of(cls, snapshot: Snapshot) -> RankRow:
        """The row of a rank's v1 snapshot (what rank 0 gathers from each rank)."""
        ident = snapshot.identity
        return cls(rank=ident.rank, node=ident.node, gpu_uuid=ident.gpu_uuid,
                   **{name: getattr(snapshot, name) for name in RankCounters.model_fields})


class GroupSnapshot(_Frozen):
    """One EP group's counters over one window.

    `expert_tokens`: [num_layers, num_experts] tokens the group's routers sent to each logical expert (summed
    over its ranks). `slot_tokens`: [num_layers, ep_size * slots_per_rank] tokens each slot of the group
    processed (rank r's slots at columns r * slots_per_rank ...). `ranks`: one row per rank, each rank once.
    """

    protocol: Literal["moectl.v2"] = GROUP_PROTOCOL_VERSION
    deployment: str = Field(pattern=NAME_PATTERN)
    instance: str = Identity.model_fields["instance"]
    role: Role
    ep_size: int = Identity.model_fields["ep_size"]
    slots_per_rank: int = Identity.model_fields["slots_per_rank"]
    gpus_per_node: int = Identity.model_fields["gpus_per_node"]
    model: ModelShape
    window_start: float = Field(gt=0, allow_inf_nan=False, description="unix seconds")
    window_seconds: float = Field(gt=0, le=3600, allow_inf_nan=False)
    expert_tokens: Array
    slot_tokens: Array
    ranks: list[RankRow] = Field(min_length=1, max_length=4096)
    running_placement: RunningPlacement | None = Field(
        default=None, description="the table the group's placement_version (its ranks' newest) names; sent only "
                                  "after a PLACEMENT_UNKNOWN refusal")
    adapter_faults: dict[FaultCause, Annotated[int, Field(ge=1, le=MAX_COUNT)]] | None = Field(
        default=None, max_length=MAX_FAULT_CAUSES,
        description="added 2026-12-06 (moectl.v2, optional): an engine adapter's failures since its last posted "
                    "window, cause -> count (agents/adapters/faults.py); sent only when there were some")

    @model_serializer(mode="wrap")
    def _omit_absent_table(self, handler):  # noqa: ANN001
        data = without_absent_table(handler(self), self.running_placement)
        if self.adapter_faults is None and isinstance(data, dict):
            data.pop("adapter_faults", None)  # reads as before the field existed, for controllers that predate it
        return data

    @property
    def placement_version(self) -> int:
        """The newest placement any rank of the group ran in the window: the one a controller must know."""
        return max(r.placement_version for r in self.ranks)

    @field_validator("protocol", mode="before")
    @classmethod
    def _known_protocol(cls, value: object) -> object:
        if value != GROUP_PROTOCOL_VERSION:
            raise ValueError(f"protocol {value!r} is not a group snapshot: post {GROUP_PROTOCOL_VERSION!r} group "
                             f"snapshots here, 'moectl.v1' rank snapshots to /v1/agents/snapshot")
        return value

    @model_validator(mode="after")
    def _check(self) -> GroupSnapshot:
        m = self.model
        check_counts("expert_tokens", self.expert_tokens, (m.num_layers, m.num_experts))
        check_counts("slot_tokens", self.slot_tokens, (m.num_layers, self.ep_size * self.slots_per_rank))
        if self.ep_size * self.slots_per_rank < m.num_experts:
            raise ValueError(f"ep_size x slots_per_rank = {self.ep_size * self.slots_per_rank} slots cannot hold "
                             f"{m.num_experts} experts")
        if sorted(r.rank for r in self.ranks) != list(range(self.ep_size)):
            raise ValueError(f"ranks must hold each rank 0..{self.ep_size - 1} of the group once; got "
                             f"{len(self.ranks)} rows")
        for r in self.ranks:
            r.check_per_token(m.top_k)
        if self.running_placement is not None:
            self.running_placement.check(m.num_layers, m.num_experts, self.ep_size * self.slots_per_rank)
        return self

    @classmethod
    def gather(cls, snapshots: list[Snapshot]) -> GroupSnapshot:
        """The group's snapshot from its ranks' v1 snapshots (one per rank, same window and instance)."""
        ordered = sorted(snapshots, key=lambda s: s.identity.rank)
        return cls.assemble(ordered[0], [RankRow.of(s) for s in ordered],
                            sum(s.expert_tokens.to_numpy() for s in ordered),
                            [s.slot_tokens.to_numpy() for s in ordered])

    @classmethod
    def assemble(cls, first: Snapshot, rows: list[RankRow], expert_tokens: np.ndarray,
                 slot_tokens: list[np.ndarray]) -> GroupSnapshot:
        """rows and slot_tokens ([num_layers, slots_per_rank] each) in rank order; expert_tokens: the group's
        sum; identity, model and window from `first` (a rank's snapshot of the same window)."""
        ident = first.identity
        return cls(deployment=ident.deployment, instance=ident.instance, role=ident.role, ep_size=ident.ep_size,
                   slots_per_rank=ident.slots_per_rank, gpus_per_node=ident.gpus_per_node, model=first.model,
                   window_start=first.window_start, window_seconds=first.window_seconds,
                   expert_tokens=Array.from_numpy(expert_tokens),
                   slot_tokens=Array.from_numpy(np.concatenate(slot_tokens, axis=1)), ranks=rows)
