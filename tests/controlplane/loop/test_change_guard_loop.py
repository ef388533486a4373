"""Guards through the real controller on a simulated fleet: a placement change under which MTP acceptance drops
beyond the policy's tolerance is rolled back with that reason and the placement parked, though its imbalance fell;
one that keeps acceptance is verified. The guard's comparison itself on plain windows."""

from __future__ import annotations

import numpy as np
from support.fleet import run_windows, start_fleet

from controlplane.observed.window import Window
from controlplane.plan.change_guard import guard_change

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


def window(index: int, accepted: float, ttft_mean: float, num_requests: int = 200) -> Window:
    counters = {"spec_accepted_tokens": accepted * 1000, "spec_draft_tokens": 1000.0,
                "ttft_sum": ttft_mean * num_requests, "ttft_count": float(num_requests)}
    return Window(index=index, start=index * 5.0, seconds=5.0, placement_version=1, num_reports=1,
                  num_slot_reports=1, expert_tokens=np.ones((1, 4)), slot_tokens=np.ones((1, 4)), counters=counters)


def test_the_guard_compares_each_signal_against_its_tolerance():
    before = [window(0, 0.8, 0.2), window(1, 0.8, 0.2)]
    kept = guard_change(before, [window(2, 0.78, 0.24)], mtp_tolerance=0.05, latency_tolerance=0.25)
    assert not kept.is_breached and kept.measured["mtp_acceptance"] == {"before": 0.8, "after": 0.78}
    slower = guard_change(before, [window(2, 0.8, 0.3)], mtp_tolerance=0.05, latency_tolerance=0.25)
    assert slower.is_breached and "ttft mean seconds rose from 0.200 to 0.300" in slower.reason
    few = guard_change(before, [window(2, 0.8, 0.3, num_requests=5)], mtp_tolerance=0.05, latency_tolerance=0.25)
    assert not few.is_breached and "ttft_mean_seconds" not in few.measured  # 5 requests say nothing
    dropped = guard_change(before, [window(2, 0.7, 0.2)], mtp_tolerance=0.05, latency_tolerance=0.25)
    assert dropped.is_breached and "mtp acceptance fell from 0.800 to 0.700" in dropped.reason
    # a fall past the tolerance (5.6%) but within chance: 3 standard errors of the difference on 2000 and 1000
    # draft tokens are ~0.048
    chance = guard_change(before, [window(2, 0.755, 0.2)], mtp_tolerance=0.05, latency_tolerance=0.25)
    assert not chance.is_breached and chance.measured["mtp_acceptance"]["after"] == 0.755
