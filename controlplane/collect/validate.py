"""Checks a well-formed snapshot against the deployment it claims to belong to. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from agents.protocol import PLACEMENT_UNKNOWN, GroupSnapshot, ModelShape, Role, Snapshot

# a little clock skew between an agent and the controller is normal
MAX_FUTURE_SECONDS = 30.0


class SnapshotRejected(ValueError):
    """The snapshot is well-formed but does not fit; `status` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str, *, code: str | None = None):
        super().__init__(message)
        self.status = status
        self.code = code  # for the agent to act on, beside the message for people


@dataclass(frozen=True)
class PoolShape:
    ep_size: int
    slots_per_rank: int


def check_snapshot(snapshot: Snapshot, model: ModelShape, pool: PoolShape | None, latest_version: int,
                   now: float, max_age_seconds: float) -> None:
    """Raises SnapshotRejected naming the problem; returns None when the snapshot may be stored."""
    ident = snapshot.identity
    _check_fit(ident.deployment, ident.role, snapshot.model, model, pool,
               PoolShape(ident.ep_size, ident.slots_per_rank))
    _check_version(ident.role, "", snapshot.placement_version, snapshot.running_placement is not None, latest_version)
    check_window_time(snapshot.window_start, snapshot.window_seconds, now, max_age_seconds)


def check_group(group: GroupSnapshot, model: ModelShape, pool: PoolShape | None, latest_version: int,
                now: float, max_age_seconds: float) -> None:
    """check_snapshot for an EP group's snapshot (moectl.v2): the newest version any rank ran must have been
    issued, or come with the table it names."""
    _check_fit(group.deployment, group.role, group.model, model, pool, PoolShape(group.ep_size, group.slots_per_rank))
    ahead = max(group.ranks, key=lambda r: r.placement_version)
    _check_version(group.role, f"rank {ahead.rank} ran ", ahead.placement_version,
                   group.running_placement is not None, latest_version)
    check_window_time(group.window_start, group.window_seconds, now, max_age_seconds)


def _check_fit(deployment: str, role: Role, sent: ModelShape, model: ModelShape, pool: PoolShape | None,
               shape: PoolShape) -> None:
    if sent != model:
        diff = [f"{k}={getattr(sent, k)!r} (registered {getattr(model, k)!r})"
                for k in type(model).model_fields if getattr(sent, k) != getattr(model, k)]
        raise SnapshotRejected(409, f"model shape does not match deployment {deployment!r}: " + ", ".join(diff))
    if pool is not None and pool != shape:
        raise SnapshotRejected(409, f"pool {role} of {deployment!r} runs ep_size={pool.ep_size}, "
                                    f"slots_per_rank={pool.slots_per_rank}; the snapshot says "
                                    f"ep_size={shape.ep_size}, slots_per_rank={shape.slots_per_rank}")


def _check_version(role: Role, who: str, version: int, has_table: bool, latest_version: int) -> None:
    if version > latest_version and not has_table:
        # the controller's database was restored or replaced while the fleet ran on: the agent sends the
        # table it runs and the controller adopts it (api/routes/agents.py, actuate.change.adopt)
        raise SnapshotRejected(409, f"{who}placement_version {version} was never issued: the latest for pool "
                                    f"{role} is {latest_version} (was the controller's database restored or "
                                    f"replaced?); post the window again with running_placement, the table "
                                    f"it runs, and it is adopted", code=PLACEMENT_UNKNOWN)


def check_window_time(window_start: float, window_seconds: float, now: float, max_age_seconds: float) -> None:
    """A window (an agent's or a router's) neither too old to plan with nor from the future."""
    window_end = window_start + window_seconds
    if window_end < now - max_age_seconds:
        raise SnapshotRejected(422, f"window ended {now - window_end:.0f}s ago; the controller accepts "
                                    f"windows up to {max_age_seconds:.0f}s old")
    if window_start > now + MAX_FUTURE_SECONDS:
        raise SnapshotRejected(422, f"window starts {window_start - now:.0f}s in the future; "
                                    f"check the clock of the agent or router that sent it")
