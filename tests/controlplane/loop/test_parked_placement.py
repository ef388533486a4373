"""Issue 12, item 11: after a rollback the same placement plan was applied again after each cooldown. A plan
whose effect does not happen is rolled back and the placement parked: not retried until the load changes."""

from __future__ import annotations

from support.fleet import run_windows, start_fleet

from agents.sim.load import LoadModel


def placement_actions(overview: dict) -> list[dict]:
    return [a for a in reversed(overview["last_actions"]) if a["kind"] == "placement"]


def test_a_rolled_back_plan_is_not_retried_until_the_load_changes(client, sessions, settings, clock):
    fleet = start_fleet(client, {"mode": "auto", "cooldown_seconds": 0, "all2all_share_target": None})
    instance = fleet[0]
    # the ranks report each new version but keep the table they started with: whatever the controller
    # plans, the measured imbalance cannot move (a placement silently not in effect)
    def apply(desired):
        if desired.slot_to_expert is not None and desired.placement_version != instance.placement_version:
            instance.placement_version = desired.placement_version

    instance.apply = apply
    overviews = run_windows(client, sessions, settings, clock, fleet, 14)
    actions = placement_actions(overviews[-1])
    assert [a["status"] for a in actions] == ["rolled_back"], [(a["status"], a["reason"]) for a in actions]
    assert "did not move as intended" in actions[0]["measured"]["verdict"]
    pool = overviews[-1]["pools"][0]
    assert [p["knob"] for p in pool["parked"]] == ["placement"]
    assert overviews[-1]["imbalance"] > 1.8  # still imbalanced: the loop holds because it is parked
    # a different workload (other hot experts): the park is lifted and a new plan is tried
    instance.load = LoadModel(instance.model.num_layers, instance.model.num_experts, instance.model.top_k, seed=99)
    overviews = run_windows(client, sessions, settings, clock, fleet, 6)
    actions = placement_actions(overviews[-1])
    assert len(actions) == 2 and "unparked: the expert load shifted" in actions[1]["reason"], actions
