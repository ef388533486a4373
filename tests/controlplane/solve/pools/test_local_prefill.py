"""The local-prefill threshold's bounded step rule (controlplane/solve/pools/local_prefill.py)."""

from __future__ import annotations

import pytest
from support.pools import TARGETS, latency, window

from controlplane.solve.pools.decision import ThresholdDecision
from controlplane.solve.pools.local_prefill import ThresholdRules, step_threshold


def recent(**kwargs) -> tuple:
    return tuple(window(t, **kwargs) for t in range(130, 190, 10))


@pytest.mark.parametrize("windows, current, expected, reason", [
    (recent(itl=0.045), 512, 384, "decode ITL at 0.90"),  # decode near its ITL target: prompts back
    (recent(ttft=0.9, itl=0.02), 512, 640, "remote TTFT at 0.90"),  # prefill pressed, decode idle: more local
    (recent(ttft_local=latency(1.0)), 512, 384, "local prefill slower"),
    (recent(), 512, 512, "keep"),  # neither pool under pressure
    (recent(ttft=0.9, itl=0.02), 2048, 2048, ""),  # at the upper bound
    (recent(itl=0.045), 0, 0, ""),  # at the lower bound
    (recent(ttft=0.9, itl=0.035), 512, 512, "keep"),  # prefill pressed but decode has no ample headroom
])
def test_step(windows, current, expected, reason):
    decision = step_threshold(190.0, current, windows, TARGETS, ())
    assert decision.target == expected, decision.reason
    assert reason in decision.reason
    assert set(decision.measured) == {"itl_over_target", "ttft_remote_over_target", "ttft_local_p90",
                                      "ttft_remote_p90"}


def test_one_noisy_window_does_not_move_it():
    windows = recent()[:-1] + (window(190, itl=0.07),)
    assert step_threshold(190.0, 512, windows, TARGETS, ()).direction == 0


def test_no_reversal_within_its_cooldown():
    raised = ThresholdDecision(100.0, 384, 512, "earlier", {})
    held = step_threshold(190.0, 512, recent(itl=0.045), TARGETS, (raised,))
    assert held.direction == 0 and "cooldown" in held.reason
    later = step_threshold(500.0, 512, recent(itl=0.045), TARGETS, (raised,))
    assert later.target == 384


def test_holds_without_measurements():
    windows = tuple(window(t, ttft_remote=None) for t in range(130, 190, 10))
    decision = step_threshold(190.0, 512, windows, TARGETS, ())
    assert decision.direction == 0 and decision.reason.startswith("hold")


def test_step_size_and_bounds_are_rules():
    rules = ThresholdRules(step_tokens=256, max_tokens=600)
    assert step_threshold(190.0, 512, recent(ttft=0.9, itl=0.02), TARGETS, (), rules).target == 600
