"""What a pool's decisions ask to change, as the action rows will record it. Pure: each knob's moves
(`Decisions.moves`, from the knobs' planners, controlplane/plan/knob_plans.py) with who asked for them, one
`Proposal` per knob that moves. The pass's write phase (controlplane/loop/reconcile.py) writes them in one loop,
each through `actuate.change`."""

from __future__ import annotations

from dataclasses import dataclass

from controlplane.desired import KnobKind, Policy
from controlplane.observed.pool import PoolState
from controlplane.plan.decisions import Decisions
from controlplane.store import tokens
from controlplane.store.actions import Entry
from controlplane.store.tables import Request


@dataclass(frozen=True)
class Proposal:
    kind: KnobKind
    value: object  # the knob's new value: a PlacementTable, a group limit, replicas, tokens, a factor
    entry: Entry  # why, on what, predicting what, for whom
    summary: str  # the log line: the knob's move in words


def proposals(decisions: Decisions, policy: Policy, state: PoolState, role: str,
              pending: list[Request]) -> list[Proposal]:
    """pending: the requests this pass answers; a knob's first one's trigger and author go on its action, all
    their alerts. A knob nobody asked for is the loop's."""
    out = []
    for move in decisions.moves(policy, state, role):
        asked = [r for r in pending if r.knob == move.kind]
        trigger, created_by = (asked[0].trigger, asked[0].created_by) if asked else ("loop", tokens.LOOP)
        alerts = [alert for request in asked for alert in request.alerts]
        out.append(Proposal(move.kind, move.value, Entry(move.reason, move.inputs, move.predicted, trigger,
                                                         created_by, alerts), move.summary))
    return out
