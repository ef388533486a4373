"""What reconcile records for people, not for a knob: the findings the plan made (controlplane/plan/decisions.py)
go on the audit trail, where the dashboard's timeline shows them (an MTP diagnosis, prefix hits under their
floor, a group limit not honoured). Each is recorded at most once an hour; nothing here changes the pool."""

from __future__ import annotations

import logging

from controlplane.actuate.pool_pass import PoolPass
from controlplane.plan.balancer_watch import BalancerWatch
from controlplane.plan.diagnose import Cause, MtpDiagnosis
from controlplane.plan.routing_reach import RoutingReach
from controlplane.store import actions

log = logging.getLogger("moectl.reconcile")
ROUTING_LIMIT_VIOLATION = "routing_limit_violation"  # the action kind of a group limit found not in effect
BALANCER_STALLED = "balancer_stalled"  # the action kind of an engine balancer found to have stopped


def record_findings(p: PoolPass, mtp: MtpDiagnosis | None, prefix_hits: tuple[str, list[float]] | None) -> None:
    """Findings go to the audit trail, where the dashboard's timeline shows them: each at most once an hour,
    an MTP diagnosis also whenever its cause changes."""
    recent = [a for a in actions.of_pool(p.session, p.pool, since=p.now - 3600.0, statuses=(actions.RECORDED,))
              if a.kind == "diagnosis"]  # newest first
    last_mtp = next((a for a in recent if a.inputs.get("cause") in set(Cause)), None)
    if mtp is not None and (last_mtp is None or last_mtp.inputs["cause"] != mtp.cause.value):
        _record(p, "diagnosis", actions.Entry(mtp.reason, inputs=mtp.evidence | {"cause": mtp.cause.value}))
    if prefix_hits is None or any(a.inputs.get("cause") == "prefix_hits" for a in recent):
        return
    finding, ratios = prefix_hits
    _record(p, "diagnosis", actions.Entry(finding, inputs={"prefix_hit_ratio": [round(r, 4) for r in ratios],
                                                           "cause": "prefix_hits"}))


def record_routing_reach(p: PoolPass, reach: RoutingReach) -> None:
    """A group limit configured but not honoured is recorded (at most once an hour, with the windows that show
    it) for people: no knob of the loop fixes a code path that bypasses it."""
    if reach.is_violated and actions.open_for(p.session, p.pool, since=p.now - 3600.0, kind=ROUTING_LIMIT_VIOLATION,
                                              statuses=(actions.RECORDED,)) is None:
        _record(p, ROUTING_LIMIT_VIOLATION, actions.Entry(reach.reason, inputs=reach.evidence()))
        log.warning("%s/%s: %s", p.deployment.name, p.pool.role, reach.reason)


def record_balancer(p: PoolPass, watch: BalancerWatch | None) -> None:
    """An engine balancer that stopped acting while the engine serves is recorded for people (at most once an hour,
    with its interval and silence): no knob of the loop restarts it."""
    if watch is not None and watch.is_stalled and actions.open_for(
            p.session, p.pool, since=p.now - 3600.0, kind=BALANCER_STALLED, statuses=(actions.RECORDED,)) is None:
        _record(p, BALANCER_STALLED, actions.Entry(watch.reason, inputs=watch.evidence()))
        log.warning("%s/%s: %s", p.deployment.name, p.pool.role, watch.reason)


def _record(p: PoolPass, kind: str, entry: actions.Entry) -> None:
    actions.record(p.session, p.pool, entry, kind=kind, mode=p.policy.mode.value, status=actions.RECORDED, now=p.now)
