"""controlplane/plan/retry.py: a failed knob is retried only when its tries predict it would work now, after a
back-off that grows with each failed try."""

import numpy as np

from controlplane.observed.knob_park import KnobInputs
from controlplane.plan.retry import FailedTry, backoff_seconds, expected_share_at, retry_verdict


def inputs(rate: float, share: np.ndarray | None = None, policy_version: int = 1) -> KnobInputs:
    return KnobInputs("deepseek-v3", policy_version, rate, share)


def tried(at: float, rate: float, realised: float, predicted: float = -0.13) -> FailedTry:
    return FailedTry(at, inputs(rate), predicted, realised)


def test_the_back_off_doubles_with_each_failed_try_up_to_its_cap():
    waits = [backoff_seconds(n, 600.0, 3600.0) for n in range(6)]
    assert waits == [0.0, 600.0, 1200.0, 2400.0, 3600.0, 3600.0]


def test_a_higher_token_rate_alone_does_not_justify_retrying_a_limit_that_moved_nothing():
    """The routing limit tightened, the all-to-all share did not move: at twice the rate it will not either."""
    tries = [tried(0.0, 258.0, realised=0.0)]
    verdict = retry_verdict(tries, inputs(538.0), now=10_000.0)
    assert not verdict.is_justified and verdict.expected_share == 0.0
    assert "258/s to 538/s" in verdict.reason and "0%" in verdict.reason


def test_within_the_back_off_nothing_is_retried_and_the_wait_grows():
    one = retry_verdict([tried(0.0, 258.0, 0.0)], inputs(258.0 * 4), now=300.0, base_backoff_seconds=600.0)
    assert not one.is_justified and one.not_before == 600.0 and "backing off" in one.reason
    three = [tried(0.0, 258.0, 0.0), tried(700.0, 258.0, 0.0), tried(2000.0, 258.0, 0.0)]
    later = retry_verdict(three, inputs(258.0), now=2100.0, base_backoff_seconds=600.0)
    assert later.not_before == 2000.0 + 2400.0 and not later.is_justified


def test_tries_that_realised_more_at_higher_rates_justify_a_retry_at_a_higher_rate():
    tries = [tried(0.0, 100.0, realised=-0.01), tried(5000.0, 200.0, realised=-0.04)]  # 8%, then 31% of predicted
    assert expected_share_at(tries, 800.0) > 0.5
    verdict = retry_verdict(tries, inputs(800.0), now=100_000.0)
    assert verdict.is_justified and verdict.expected_share > 0.5
    assert not retry_verdict(tries, inputs(800.0), now=5100.0).is_justified  # still backing off


def test_nothing_material_changed_means_no_retry():
    verdict = retry_verdict([tried(0.0, 258.0, 0.0)], inputs(300.0), now=1e6)
    assert not verdict.is_justified and "nothing material" in verdict.reason


def test_another_policy_justifies_a_retry_at_once_and_a_moved_expert_load_after_the_back_off():
    assert retry_verdict([], inputs(1.0), now=0.0).is_justified
    tries = [tried(0.0, 258.0, 0.0)]
    assert retry_verdict(tries, inputs(258.0, policy_version=2), now=1.0).is_justified
    even, skewed = np.full((2, 4), 0.25), np.array([[0.7, 0.1, 0.1, 0.1]] * 2)
    placement_try = [FailedTry(0.0, inputs(258.0, even), -0.1, 0.0)]
    assert not retry_verdict(placement_try, inputs(258.0, skewed), now=10.0).is_justified
    moved = retry_verdict(placement_try, inputs(258.0, skewed), now=1e4)
    assert moved.is_justified and "expert load shifted" in moved.reason
