"""Parked knobs: one open park per pool and knob at most, kept with the inputs it was parked at."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.desired import Effect
from controlplane.observed.knob_park import FailedTry, KnobInputs, Parked
from controlplane.store.arrays import pack, unpack
from controlplane.store.batches import delete_some
from controlplane.store.tables import Action, KnobPark, Pool
from controlplane.store.timestamps import seconds, utc


def park(session: Session, *, pool: Pool, knob: str, action_id: int | None, reason: str, inputs: KnobInputs,
         now: float) -> None:
    """Parks the knob (a park already standing is released: this one has newer evidence)."""
    release(session, pool=pool, knob=knob, reason=f"parked again by action {action_id}", now=now)
    session.add(KnobPark(pool_id=pool.id, knob=knob, action_id=action_id, reason=reason, model_key=inputs.model,
                         policy_version=inputs.policy_version, tokens_per_second=inputs.tokens_per_second,
                         expert_share=None if inputs.expert_share is None else pack(inputs.expert_share),
                         created_at=utc(now), release_reason=""))
    session.flush()


def release(session: Session, *, pool: Pool, knob: str, reason: str, now: float) -> None:
    for row in _open(session, pool, knob):
        row.released_at, row.release_reason = utc(now), reason


def active(session: Session, pool: Pool) -> dict[str, Parked]:
    """knob -> its open park, with the knob's failed tries on the pool (each park it had, kept until pruned)."""
    parked = {}
    for row in _open(session, pool):
        parks = session.scalars(select(KnobPark).where(KnobPark.pool_id == pool.id, KnobPark.knob == row.knob)
                                .order_by(KnobPark.id)).all()
        reverted = {a.id: a for a in session.scalars(select(Action).where(
            Action.id.in_([p.action_id for p in parks if p.action_id is not None])))}
        tries = tuple(t for p in parks if (t := _failed_try(p, reverted.get(p.action_id))) is not None)
        parked[row.knob] = Parked(row.knob, seconds(row.created_at), row.action_id, row.reason, _inputs(row), tries)
    return parked


def _inputs(row: KnobPark) -> KnobInputs:
    return KnobInputs(row.model_key, row.policy_version, row.tokens_per_second,
                      None if row.expert_share is None else unpack(row.expert_share))


def _failed_try(park: KnobPark, action: Action | None) -> FailedTry | None:
    """The reverted change a park stands for: its signal's move as predicted and as measured (None where the action
    recorded either not: a floor broken, a bound enforced)."""
    effect = None if action is None else Effect.from_json(action.predicted.get("effect"))
    if effect is None:
        return None
    before, after = action.measured.get(f"{effect.signal}_before"), action.measured.get(f"{effect.signal}_after")
    if before is None or after is None:
        return None
    return FailedTry(seconds(park.created_at), _inputs(park), effect.predicted - effect.before, after - before)


def _open(session: Session, pool: Pool, knob: str | None = None) -> list[KnobPark]:
    query = select(KnobPark).where(KnobPark.pool_id == pool.id, KnobPark.released_at.is_(None))
    if knob is not None:
        query = query.where(KnobPark.knob == knob)
    return list(session.scalars(query.order_by(KnobPark.id)))


def prune(session: Session, *, before: float, limit: int) -> int:
    """Deletes parks released before `before` (a standing park always stays). Returns how many went."""
    return delete_some(session, KnobPark, KnobPark.released_at.is_not(None), KnobPark.released_at < utc(before),
                       limit=limit)
