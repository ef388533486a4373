"""The PD-aware local-prefill threshold: versioned on a deployment's decode pool like placements. Version 0
(tokens None) means moectl has not set it: the policy's `local_prefill_threshold` is in force, else the
router's own default."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from controlplane.desired import Policy
from controlplane.store import versions
from controlplane.store.tables import Pool, PrefillThreshold
from controlplane.store.timestamps import seconds, utc

ROLE = "decode"  # the pool whose instances prefill the short prompts


@dataclass(frozen=True)
class StoredThreshold:
    version: int
    tokens: int | None
    created_at: float
    action_id: int | None


def stored(row: PrefillThreshold) -> StoredThreshold:
    return StoredThreshold(row.version, row.tokens, seconds(row.created_at), row.action_id)


def add(session: Session, *, pool: Pool, version: int, tokens: int | None, action_id: int | None, now: float) -> None:
    session.add(PrefillThreshold(pool_id=pool.id, version=version, tokens=tokens, action_id=action_id,
                                 created_at=utc(now)))
    session.flush()


def latest(session: Session, pool: Pool) -> StoredThreshold:
    return stored(versions.latest(session, PrefillThreshold, pool))


def get(session: Session, pool: Pool, version: int) -> StoredThreshold | None:
    row = versions.get(session, PrefillThreshold, pool, version)
    return None if row is None else stored(row)


def in_force(session: Session, decode: Pool | None, policy: Policy) -> int | None:
    """The threshold a deployment's routers and agents are told: moectl's latest on its decode pool (None:
    no decode pool yet), else the policy's."""
    return tokens_in_force(latest(session, decode) if decode is not None else None, policy)


def tokens_in_force(newest: StoredThreshold | None, policy: Policy) -> int | None:
    """`in_force` of the decode pool's newest threshold (None: no decode pool yet)."""
    tokens = newest.tokens if newest is not None else None
    return policy.local_prefill_threshold if tokens is None else tokens
