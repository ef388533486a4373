"""Guards through the real controller on a simulated fleet: a placement change under which MTP acceptance drops
beyond the policy's tolerance is rolled back with that reason and the placement parked, though its imbalance fell;
one that keeps acceptance is verified. The guard's comparison itself: tests/controlplane/plan/test_change_guard.py."""

from __future__ import annotations

from support.fleet import run_windows, start_fleet

POLICY = {"mode": "auto", "cooldown_seconds": 0}


def placements(overview: dict) -> list[dict]:
    return [a for a in reversed(overview["last_actions"]) if a["kind"] == "placement"]  # oldest first


def test_a_change_that_drops_mtp_acceptance_is_rolled_back_with_that_reason_and_parked(client, sessions, settings,
                                                                                        clock):
    fleet = start_fleet(client, POLICY)
    instance, apply = fleet[0], fleet[0].apply

    def apply_and_lose_acceptance(desired):  # the SGLang case: acceptance falls after a rebalance
        if desired.slot_to_expert is not None and desired.placement_version != instance.placement_version:
            instance.mtp_acceptance = 0.6  # from 0.85
        apply(desired)

    instance.apply = apply_and_lose_acceptance
    overviews = run_windows(client, sessions, settings, clock, fleet, 12)
    first = placements(overviews[-1])[0]
    assert first["status"] == "rolled_back", first
    verdict = first["measured"]["verdict"]
    assert verdict.startswith("guard: mtp acceptance fell from") and "tolerance 5%" in verdict, verdict
    assert first["measured"]["imbalance_after"] < first["measured"]["imbalance_before"]  # the imbalance did fall
    guards = first["measured"]["guards"]["mtp_acceptance"]
    assert guards["after"] < 0.95 * guards["before"]
    assert "placement" in [p["knob"] for p in overviews[-1]["pools"][0]["parked"]]


def test_a_change_that_keeps_acceptance_is_verified_with_its_guards(client, sessions, settings, clock):
    fleet = start_fleet(client, POLICY)
    overviews = run_windows(client, sessions, settings, clock, fleet, 12)
    first = placements(overviews[-1])[0]
    assert first["status"] == "verified", first
    assert set(first["measured"]["guards"]) == {"mtp_acceptance", "ttft_mean_seconds"}
