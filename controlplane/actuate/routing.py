"""The routing-limit knob: `topk_group` (max expert groups per token; None: none issued, the agents route with
the model's own), versioned per pool."""

from __future__ import annotations

from sqlalchemy.orm import Session

from controlplane.store import routing_limits, versions
from controlplane.store.tables import Action, Pool, RoutingLimit


class RoutingKnob:
    kind = "routing"

    def latest_version(self, session: Session, pool: Pool) -> int:
        return routing_limits.latest(session, pool).version

    def get(self, session: Session, pool: Pool, version: int) -> int | None:
        stored = routing_limits.get(session, pool, version)
        if stored is None:
            raise LookupError(f"pool {pool.id} has no routing limit v{version}")
        return stored.topk_group

    def add(self, session: Session, pool: Pool, *, version: int, value: int | None, action_id: int,
            now: float) -> None:
        routing_limits.add(session, pool=pool, version=version, topk_group=value, action_id=action_id, now=now)

    def keep_proposal(self, action: Action, value: int | None) -> None:
        pass  # a limit is one number: the action's predicted effect already holds it

    def take_proposal(self, action: Action) -> int | None:
        return action.predicted["topk_group_after"]

    def prune(self, session: Session, pool: Pool, *, before: float, keep: set[int], limit: int) -> int:
        return versions.prune(session, RoutingLimit, pool, before=before, keep=keep, limit=limit)


ROUTING = RoutingKnob()
