"""What an agent's post is checked against and answered with, read in one query.

That is the deployment, its pool of the post's role and its decode pool, and the active policy. It is also the
newest placement and one-number knobs of the pool (`knobs.IN_POOL_STATE`: the routing limit, the capacity factor)
and local-prefill threshold of the decode pool. Each part is read
as its own module reads it (`deployments`, `policies`, `knobs`). It is one round trip instead of six, as
a DeepSeek-sized pool's posts arrive at once and each round trip waits on the database under load
(benchmarks/results/scale-2026-11-30.md)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from sqlalchemy import Select, and_, bindparam, select
from sqlalchemy.orm import Session, aliased

from agents.protocol.placement import PlacementTable
from controlplane.desired import Policy
from controlplane.store import policies, prefill_thresholds
from controlplane.store.decoded import unpack_for
from controlplane.store.knobs import IN_POOL_STATE, PLACEMENT, PREFILL_THRESHOLD, ROUTING
from controlplane.store.tables import Deployment, KnobVersion, Placement, Pool
from controlplane.store.tables import Policy as PolicyRow
from controlplane.store.versions import Version


@dataclass(frozen=True)
class InForce:
    """pool None: the deployment has no pool of the role yet (nor then a placement or routing limit)."""

    deployment: Deployment
    pool: Pool | None
    decode: Pool | None  # the deployment's decode pool (`pool` itself for a decode post)
    policy_version: int
    policy: Policy
    placement: Version[PlacementTable] | None  # its arrays read-only (decoded once for every post)
    local_prefill_threshold: int | None  # `prefill_thresholds.in_force`
    # kind -> the pool's one-number knobs in force (knobs.IN_POOL_STATE; None: none issued, or no pool yet)
    knobs: dict[str, int | float | None]

    @property
    def topk_group(self) -> int | None:
        """The pool's routing limit in force (None: none issued)."""
        return self.knobs[ROUTING.kind]


@functools.cache
def _query() -> Select:
    # built once: the statement object costs more Python to build (aliases, correlated subqueries) than the
    # database takes to answer it
    pool, decode = aliased(Pool), aliased(Pool)
    threshold = aliased(KnobVersion)
    numbers = [aliased(KnobVersion) for _ in IN_POOL_STATE]
    query = (select(Deployment, pool, decode, PolicyRow, Placement, threshold, *numbers)
             .outerjoin(pool, and_(pool.deployment_id == Deployment.id, pool.role == bindparam("role")))
             .outerjoin(decode, and_(decode.deployment_id == Deployment.id, decode.role == prefill_thresholds.ROLE))
             .outerjoin(PolicyRow, policies.is_active(Deployment.id))
             .outerjoin(Placement, PLACEMENT.versions.is_newest(Placement, pool.id))
             .outerjoin(threshold, PREFILL_THRESHOLD.versions.is_newest(threshold, decode.id)))
    for knob, rows in zip(IN_POOL_STATE, numbers, strict=True):
        query = query.outerjoin(rows, knob.versions.is_newest(rows, pool.id))
    return query.where(Deployment.name == bindparam("name"))


def read(session: Session, deployment_name: str, role: str) -> InForce | None:
    """None: no deployment of that name."""
    row = session.execute(_query(), {"name": deployment_name, "role": role}).one_or_none()
    if row is None:
        return None
    deployment, pool_row, decode_row, policy_row, placement, threshold, *numbers = row
    policy_version, policy = policies.of_row(policy_row)
    return InForce(deployment, pool_row, decode_row, policy_version, policy,
                   PLACEMENT.versions.of_row(placement, unpack_for(session)) if placement is not None else None,
                   prefill_thresholds.tokens_in_force(
                       PREFILL_THRESHOLD.versions.of_row(threshold) if threshold is not None else None, policy),
                   {knob.kind: knob.versions.of_row(number).value if number is not None else None
                    for knob, number in zip(IN_POOL_STATE, numbers, strict=True)})
