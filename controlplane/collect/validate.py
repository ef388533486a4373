"""Checks a well-formed snapshot against the deployment it claims to belong to. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from agents.protocol import PLACEMENT_UNKNOWN, ModelShape, Snapshot

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
    if snapshot.model != model:
        diff = [f"{k}={getattr(snapshot.model, k)!r} (registered {getattr(model, k)!r})"
                for k in type(model).model_fields if getattr(snapshot.model, k) != getattr(model, k)]
        raise SnapshotRejected(409, f"model shape does not match deployment {ident.deployment!r}: "
                                    + ", ".join(diff))
    if pool is not None and (pool.ep_size, pool.slots_per_rank) != (ident.ep_size, ident.slots_per_rank):
        raise SnapshotRejected(409, f"pool {ident.role} of {ident.deployment!r} runs ep_size={pool.ep_size}, "
                                    f"slots_per_rank={pool.slots_per_rank}; the snapshot says "
                                    f"ep_size={ident.ep_size}, slots_per_rank={ident.slots_per_rank}")
    if snapshot.placement_version > latest_version and snapshot.running_placement is None:
        # the controller's database was restored or replaced while the fleet ran on: the agent sends the
        # table it runs and the controller adopts it (api/routes/agents.py, actuate.change.adopt)
        raise SnapshotRejected(409, f"placement_version {snapshot.placement_version} was never issued: the "
                                    f"latest for pool {ident.role} is {latest_version} (was the controller's "
                                    f"database restored or replaced?); post the window again with "
                                    f"running_placement, the table the rank runs, and it is adopted",
                               code=PLACEMENT_UNKNOWN)
    window_end = snapshot.window_start + snapshot.window_seconds
    if window_end < now - max_age_seconds:
        raise SnapshotRejected(422, f"window ended {now - window_end:.0f}s ago; the controller accepts "
                                    f"windows up to {max_age_seconds:.0f}s old")
    if snapshot.window_start > now + MAX_FUTURE_SECONDS:
        raise SnapshotRejected(422, f"window starts {snapshot.window_start - now:.0f}s in the future; "
                                    f"check the agent's clock")
