"""The PD-aware local-prefill threshold knob: prompts up to this many uncached tokens prefill on the decode
instance. Versioned on the deployment's decode pool; its routers take it from their window's answer."""

from __future__ import annotations

from sqlalchemy.orm import Session

from controlplane.store import prefill_thresholds, versions
from controlplane.store.tables import Action, Pool, PrefillThreshold


class PrefillThresholdKnob:
    """Values are tokens; version 0 holds None: not set by moectl (the policy's or the router's default)."""

    kind = "local_prefill_threshold"

    def latest_version(self, session: Session, pool: Pool) -> int:
        return prefill_thresholds.latest(session, pool).version

    def get(self, session: Session, pool: Pool, version: int) -> int | None:
        stored = prefill_thresholds.get(session, pool, version)
        if stored is None:
            raise LookupError(f"pool {pool.id} has no local-prefill threshold v{version}")
        return stored.tokens

    def add(self, session: Session, pool: Pool, *, version: int, value: int | None, action_id: int,
            now: float) -> None:
        prefill_thresholds.add(session, pool=pool, version=version, tokens=value, action_id=action_id, now=now)

    def keep_proposal(self, action: Action, value: int | None) -> None:
        pass  # one number: the action's predicted effect holds it

    def take_proposal(self, action: Action) -> int | None:
        return action.predicted["tokens_after"]

    def prune(self, session: Session, pool: Pool, *, before: float, keep: set[int], limit: int) -> int:
        return versions.prune(session, PrefillThreshold, pool, before=before, keep=keep, limit=limit)


PREFILL_THRESHOLD = PrefillThresholdKnob()
