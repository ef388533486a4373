"""What reconcile records for people, not for a knob: findings on the audit trail, where the dashboard's
timeline shows them (an MTP diagnosis, prefix hits under their floor, a group limit not honoured).
Each is recorded at most once an hour; nothing here changes the pool."""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session

from controlplane.desired import Policy
from controlplane.observed.pool import PoolState
from controlplane.plan.diagnose import Cause, MtpDiagnosis, diagnose_prefix_hits
from controlplane.plan.routing_reach import RoutingReach, check_routing_limit
from controlplane.store import actions, tokens
from controlplane.store.tables import Deployment, Pool

log = logging.getLogger("moectl.reconcile")
ROUTING_LIMIT_VIOLATION = "routing_limit_violation"  # the action kind of a group limit found not in effect


def record_findings(session: Session, deployment: Deployment, pool: Pool, state: PoolState, policy: Policy,
                    now: float, mtp: MtpDiagnosis | None) -> None:
    """Findings go to the audit trail, where the dashboard's timeline shows them: each at most once an hour,
    an MTP diagnosis also whenever its cause changes."""
    recent = [a for a in actions.of_pool(session, pool, since=now - 3600.0, statuses=(actions.RECORDED,))
              if a.kind == "diagnosis"]  # newest first
    last_mtp = next((a for a in recent if a.inputs.get("cause") in set(Cause)), None)
    if mtp is not None and (last_mtp is None or last_mtp.inputs["cause"] != mtp.cause.value):
        actions.record(session, deployment=deployment, pool=pool, kind="diagnosis", trigger="loop",
                       mode=policy.mode.value, status=actions.RECORDED, reason=mtp.reason,
                       inputs=mtp.evidence | {"cause": mtp.cause.value}, predicted={}, created_by=tokens.LOOP, now=now)
    diagnosis = diagnose_prefix_hits(policy, state)
    if diagnosis is None or any(a.inputs.get("cause") == "prefix_hits" for a in recent):
        return
    finding, ratios = diagnosis
    actions.record(session, deployment=deployment, pool=pool, kind="diagnosis", trigger="loop",
                   mode=policy.mode.value, status=actions.RECORDED, reason=finding,
                   inputs={"prefix_hit_ratio": [round(r, 4) for r in ratios], "cause": "prefix_hits"}, predicted={},
                   created_by=tokens.LOOP, now=now)


def record_routing_reach(session: Session, deployment: Deployment, pool: Pool, state: PoolState, policy: Policy,
                         now: float) -> RoutingReach:
    """A group limit configured but not honoured is recorded (at most once an hour, with the windows that show
    it) for people: no knob of the loop fixes a code path that bypasses it."""
    reach = check_routing_limit(policy, state)
    if reach.is_violated and actions.open_for(session, pool, since=now - 3600.0, kind=ROUTING_LIMIT_VIOLATION,
                                              statuses=(actions.RECORDED,)) is None:
        actions.record(session, deployment=deployment, pool=pool, kind=ROUTING_LIMIT_VIOLATION, trigger="loop",
                       mode=policy.mode.value, status=actions.RECORDED, reason=reach.reason,
                       inputs=reach.evidence(), predicted={}, created_by=tokens.LOOP, now=now)
        log.warning("%s/%s: %s", deployment.name, pool.role, reach.reason)
    return reach
