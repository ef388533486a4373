"""A deliberately bad placement, applied the way the loop applies one, for tests of verification."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agents.protocol.placement import PlacementTable
from controlplane.actuate import change
from controlplane.desired import Policy
from controlplane.store import actions, deployments, pools
from controlplane.store.knobs import PLACEMENT
from support.auth import operator
from support.fleet import run_windows, start_fleet

BAD_PLAN = "a deliberately bad plan"


@dataclass(frozen=True)
class Applied:
    """prior: the imbalance measured before; table: [num_layers, num_slots] the bad placement;
    replaced: the placement it replaced."""

    action_id: int
    prior: float
    table: np.ndarray
    replaced: np.ndarray


def apply_bad_placement(sessions, settings, *, now: float, deployment: str = "sim-0") -> Applied:
    """Each layer's ten hottest experts all on GPU 0, spare slots on lukewarm experts (ep 8, 10 slots per
    rank): applied in auto mode, whatever the deployment's policy, from the pool's last complete window."""
    with sessions() as session, session.begin():
        row = deployments.get(session, deployment)
        pool = deployments.pools_of(session, row)[0]
        state = pools.read_state(session, row, pool, now=now + settings.window_seconds / 2 + 1, settings=settings)
        prior = state.windows[-1].imbalance(state.ep_size)
        order = np.argsort(-state.windows[-1].expert_tokens, axis=1)  # [L, E] hottest first
        table = np.concatenate([order, order[:, 10:26]], axis=1)  # slots 64..79 repeat ranks 10..25
        entry = actions.Entry(BAD_PLAN, inputs={"measured_imbalance": [prior]}, trigger="manual", created_by="test")
        action = change.propose(session, PLACEMENT, pool, PlacementTable(table), entry, policy=Policy(mode="auto"),
                                now=now)
        assert action.status == "applied" and np.any(table != state.slot_to_expert)
        return Applied(action.id, prior, table, state.slot_to_expert)


def fleet_on_a_bad_placement(client, sessions, settings, clock, policy: dict):
    """A simulated fleet that ran 3 windows with the loop off, then a bad placement applied and `policy`
    put in force. Returns the fleet and what was applied."""
    fleet = start_fleet(client, {"mode": "off"})
    run_windows(client, sessions, settings, clock, fleet, 3, reconcile=False)
    bad = apply_bad_placement(sessions, settings, now=clock.now)
    assert client.put("/v1/deployments/sim-0/policy", json=policy, headers=operator()).status_code == 200
    return fleet, bad
