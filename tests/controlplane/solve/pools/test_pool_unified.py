"""The unified pool's planner (controlplane/solve/pools/unified.py): up one under pressure the engine reports
(requests waiting, TTFT over its target) sustained, none while one starts, down one after a calm cooldown at a
rate well under the one that made it grow, and nothing within the cooldown of a change."""

from __future__ import annotations

from agents.protocol import LatencySummary
from controlplane.observed.serving import PoolWindow, ReplicaWindow
from controlplane.solve.pools.decision import DecisionKind, PoolDecision
from controlplane.solve.pools.unified import UnifiedRules, plan_unified
from controlplane.solve.pools.view import PoolSize, PoolsView, SloTarget

TTFT = SloTarget("ttft", 90, 2.0)
SECONDS = 2.0
RULES = UnifiedRules(cooldown_seconds=10.0, breach_windows=2)


def window(end: float, *, ttft: float, waiting: int = 0, arrivals: int = 2, replicas: int = 1) -> PoolWindow:
    summary = LatencySummary(count=5, sum=5 * ttft, p50=ttft, p90=ttft, p99=ttft)
    return PoolWindow(end, SECONDS, arrivals, 100.0, 32.0, 1.0, summary, None, replicas=tuple(
        ReplicaWindow(f"r{i}", "unified", 5, 1.0, num_waiting=waiting, ttft=summary) for i in range(replicas)))


def view(windows: list[PoolWindow], *, ready: int = 1, starting: int = 0,
         history: tuple[PoolDecision, ...] = ()) -> PoolsView:
    return PoolsView(now=windows[-1].end + 0.5, windows=tuple(windows),
                     pools={"unified": PoolSize(ready, starting, min_replicas=1, max_replicas=2)},
                     targets=(TTFT,), local_prefill_threshold=0, history=history)


def decision(v: PoolsView) -> PoolDecision:
    return plan_unified(v, RULES).decision("unified")


def test_waiting_requests_two_windows_running_add_one_replica():
    d = decision(view([window(t, ttft=0.3) for t in range(2, 20, 2)] + [window(22, ttft=0.5, waiting=3),
                                                                        window(24, ttft=0.6, waiting=2)]))
    assert (d.current, d.target, d.kind) == (1, 2, DecisionKind.reactive)
    assert "waiting" in d.reason and d.request_rate == 1.0


def test_one_pressed_window_is_noise_and_a_starting_replica_holds():
    calm = [window(t, ttft=0.3) for t in range(2, 20, 2)]
    assert decision(view(calm + [window(22, ttft=3.0)])).target == 1
    pressed = calm + [window(22, ttft=3.0), window(24, ttft=3.0)]
    assert decision(view(pressed)).target == 2
    held = decision(view(pressed, ready=1, starting=1))
    assert (held.target, held.kind) == (2, DecisionKind.hold)


def test_calm_for_the_cooldown_at_a_low_rate_removes_one():
    grew = PoolDecision(0.0, "unified", 1, 2, DecisionKind.reactive, "pressed", request_rate=6.0)
    calm = [window(t, ttft=0.3, arrivals=4, replicas=2) for t in range(40, 60, 2)]
    d = decision(view(calm, ready=2, history=(grew,)))
    assert (d.current, d.target, d.kind) == (2, 1, DecisionKind.consolidate)
    # still half the rate it grew at, or one window of waiting within the cooldown: it stays
    busy = [window(t, ttft=0.3, arrivals=8, replicas=2) for t in range(40, 60, 2)]
    assert decision(view(busy, ready=2, history=(grew,))).target == 2
    # a replica it grew by still starting: it holds (a step down would judge a pool that never ran)
    assert decision(view(calm, ready=1, starting=1, history=(grew,))).kind == DecisionKind.hold
    blip = calm[:-2] + [window(56, ttft=0.3, waiting=1, replicas=2), calm[-1]]
    assert decision(view(blip, ready=2, history=(grew,))).target == 2


def test_no_change_within_the_cooldown_of_the_last():
    recent = PoolDecision(50.0, "unified", 1, 2, DecisionKind.reactive, "pressed", request_rate=6.0)
    calm = [window(t, ttft=0.3, arrivals=1, replicas=2) for t in range(40, 60, 2)]
    d = decision(view(calm, ready=2, history=(recent,)))
    assert (d.target, d.kind) == (2, DecisionKind.hold)
