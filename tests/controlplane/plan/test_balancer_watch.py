"""The watchdog on the engine's own balancer, on plain windows: quiet while its acts arrive (or the engine idles),
stalled once they stop for k of its intervals while it serves (vLLM's rearranges; SGLang's dumps, whose windows
without one carry no load and only the engine's serving counters); a bundled group that does not take a placement it
was told is stalled, one that switched is not."""

from __future__ import annotations

import numpy as np
import pytest

from controlplane.observed.pool import PoolState
from controlplane.observed.window import Window
from controlplane.plan.balancer_watch import MAX_SILENT_INTERVALS, balancer_interval, watch_balancer
from tests.support.pool_states import loop_window, pool_state

SECONDS = 10.0


def balancer_window(index: int, acts: int | None, *, serving: bool = True, version: int = 1,
                    num_switched: int = 1) -> Window:
    """SECONDS from 1000 s + index * SECONDS; `acts` balancer acts reported (None: no balancer counters), tokens
    routed while `serving`, `num_switched` reports running placement `version`."""
    counters = {} if acts is None else {"balancer_events": float(acts), "balancer_reports": 1.0}
    tokens = np.full((2, 8), 5.0 if serving else 0.0)
    return loop_window(index, tokens, np.zeros((2, 8)), version=version, num_slot_reports=num_switched,
                       seconds=SECONDS, start=1000.0 + index * SECONDS, counters=counters)


def sglang_window(index: int, *, has_dump: bool, is_serving: bool = True) -> Window:
    """What the SGLang sidecar posts (agents/adapters/sglang/sidecar.py): a dump's load and 1 dump, or without
    one no tokens, 0 dumps and the engine's serving counters from its /metrics (requests running at the window's
    end, TTFT/ITL observations in it)."""
    serving = {"requests_running": 12.0, "ttft_count": 30.0, "itl_count": 900.0} if is_serving else {}
    counters = serving | {"balancer_events": float(has_dump), "balancer_reports": 1.0}
    tokens = np.full((2, 8), 5.0 if has_dump and is_serving else 0.0)
    return loop_window(index, tokens, np.zeros((2, 8)), seconds=SECONDS, start=1000.0 + index * SECONDS,
                       counters=counters)


def balancer_pool(windows, *, placement_version: int = 1, last_change_at: float | None = None) -> PoolState:
    return pool_state(np.zeros((2, 8), dtype=np.int64), 8, windows, ep=2, num_groups=1, gpus_per_node=1,
                      num_agents=1, num_fresh_agents=1, placement_version=placement_version,
                      last_change_at=last_change_at)


def every_third(num_windows: int) -> list[int]:
    """vLLM rearranging every 30 s on 10 s windows."""
    return [1 if i % 3 == 0 else 0 for i in range(num_windows)]


def test_the_interval_is_the_median_gap_between_acts():
    assert balancer_interval([balancer_window(i, a) for i, a in enumerate(every_third(12))]) == pytest.approx(30.0)
    # four a window: 2.5 s apart
    assert balancer_interval([balancer_window(0, 4), balancer_window(1, 4)]) == pytest.approx(2.5)
    assert balancer_interval([balancer_window(0, 1), balancer_window(1, 0)]) is None


def test_quiet_while_the_rearranges_arrive():
    watch = watch_balancer(balancer_pool(balancer_window(i, a) for i, a in enumerate(every_third(30))), "vllm")
    assert not watch.is_stalled and watch.interval_seconds == pytest.approx(30.0)
    assert watch.watched == "rearranges" and "acts every ~30s" in watch.reason


def test_stalled_once_the_rearranges_stop_for_k_intervals_while_serving():
    acts = every_third(10) + [0] * (MAX_SILENT_INTERVALS * 3 + 1)  # 100 s of serving without one, k=3 x 30 s
    watch = watch_balancer(balancer_pool(balancer_window(i, a) for i, a in enumerate(acts)), "vllm")
    assert watch.is_stalled and watch.silent_seconds == pytest.approx(100.0)
    assert "has stopped while the engine serves" in watch.reason
    assert watch.evidence()["interval_seconds"] == 30.0
    # a little less silence (k intervals exactly) is not yet a stall
    short = every_third(10) + [0] * (MAX_SILENT_INTERVALS * 3)
    assert not watch_balancer(balancer_pool(balancer_window(i, a) for i, a in enumerate(short)), "vllm").is_stalled


def test_idle_windows_do_not_count_as_silence():
    acts = every_third(12)
    windows = [balancer_window(i, a) for i, a in enumerate(acts)]
    windows += [balancer_window(len(acts) + i, 0, serving=False) for i in range(20)]  # no traffic: vLLM takes no step
    windows += [balancer_window(len(acts) + 20, 0)]
    assert not watch_balancer(balancer_pool(windows), "vllm").is_stalled


def test_not_judged_without_the_count_or_before_its_interval_is_known():
    assert watch_balancer(balancer_pool(balancer_window(i, None) for i in range(30)), "vllm").watched is None
    first_only = watch_balancer(balancer_pool(balancer_window(i, 1 if i == 0 else 0) for i in range(30)), "vllm")
    assert not first_only.is_stalled and "interval is not known" in first_only.reason


def test_sglang_quiet_while_its_dumps_arrive_stalled_once_they_stop_while_it_serves():
    arriving = [sglang_window(i, has_dump=True) for i in range(12)]
    watch = watch_balancer(balancer_pool(arriving), "sglang")
    assert not watch.is_stalled and watch.watched == "dumps" and watch.interval_seconds == pytest.approx(SECONDS)
    # one dump a window: k windows without one, serving, is not yet a stall; one more is
    missing = [sglang_window(12 + i, has_dump=False) for i in range(MAX_SILENT_INTERVALS + 1)]
    assert not watch_balancer(balancer_pool(arriving + missing[:-1]), "sglang").is_stalled
    stalled = watch_balancer(balancer_pool(arriving + missing), "sglang")
    assert stalled.is_stalled and stalled.silent_seconds == pytest.approx((MAX_SILENT_INTERVALS + 1) * SECONDS)
    assert "(dumps)" in stalled.reason and "has stopped while the engine serves" in stalled.reason
    # the dumps came back: quiet again
    back = watch_balancer(balancer_pool(arriving + missing + [sglang_window(30, has_dump=True)]), "sglang")
    assert not back.is_stalled


def test_sglang_idle_windows_without_a_dump_are_not_silence():
    arriving = [sglang_window(i, has_dump=True) for i in range(12)]
    idle = [sglang_window(12 + i, has_dump=False, is_serving=False) for i in range(20)]
    assert not watch_balancer(balancer_pool(arriving + idle), "sglang").is_stalled
    # serving again and still no dump: only the serving windows count
    serving = [sglang_window(32 + i, has_dump=False) for i in range(MAX_SILENT_INTERVALS + 1)]
    watch = watch_balancer(balancer_pool(arriving + idle + serving), "sglang")
    assert watch.is_stalled and watch.num_silent_windows == MAX_SILENT_INTERVALS + 1


def test_a_bundled_group_that_does_not_switch_when_told_is_stalled():
    told = 1000.0 + 5 * SECONDS  # v2 issued in window 5; the group runs v1 on
    stuck = [balancer_window(i, None, version=1) for i in range(12)]
    watch = watch_balancer(balancer_pool(stuck, placement_version=2, last_change_at=told), "bundled")
    assert watch.is_stalled and watch.watched == "switches" and "does not switch when told" in watch.reason
    switched = stuck[:7] + [balancer_window(i, None, version=2) for i in range(7, 12)]
    assert not watch_balancer(balancer_pool(switched, placement_version=2, last_change_at=told), "bundled").is_stalled
    just_told = watch_balancer(balancer_pool(stuck, placement_version=2, last_change_at=1000.0 + 10 * SECONDS),
                               "bundled")
    assert not just_told.is_stalled  # one window after: the agents take it with their next answer
    assert not watch_balancer(balancer_pool(stuck), "bundled").is_stalled  # nothing issued
    # stored under v2 (the controller's version), its report's slot load left out: it still ran v1
    unswitched = [balancer_window(i, None, version=2, num_switched=0) for i in range(12)]
    assert watch_balancer(balancer_pool(unswitched, placement_version=2, last_change_at=told), "bundled").is_stalled
