"""Whether a knob's failed tries justify another under the conditions now, and when at the earliest. Pure.

A parked knob (controlplane/plan/parking.py) is unparked when its inputs change materially. That alone tried the
routing limit six times in 4.5 minutes, each reverted, each "unparked: the token rate moved": the all-to-all share
did not move when the limit tightened, and a higher rate does not make it move. So a retry must be justified by what
the failed tries predict under the new conditions:

- another model or policy version: the tries say nothing of it, a retry is justified at once;
- otherwise not before a back-off that doubles with every failed try (`base_backoff_seconds` x 2^(n-1), at most
  `max_backoff_seconds`), and then only if
  - the expert load moved (total-variation distance >= parking.LOAD_SHIFT since the last try; placement), or
  - the token rate moved (>= parking.LOAD_RATE_FACTOR either way) and the tries predict the change would realise
    at least effect.MIN_SHARE_OF_PREDICTED of its prediction at the new rate: each try's realised share of its
    prediction, against the log of its rate, a least-squares line when the tries span a material rate range, else
    their mean (one rate says nothing of another: the effect is taken as the same).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from controlplane.observed.knob_park import FailedTry, KnobInputs
from controlplane.observed.pool import PoolState
from controlplane.plan.effect import MIN_SHARE_OF_PREDICTED
from controlplane.plan.parking import LOAD_RATE_FACTOR, LOAD_SHIFT, load_shift, material_change, material_reason

BASE_BACKOFF_SECONDS = 600.0
MAX_BACKOFF_SECONDS = 6 * 3600.0


@dataclass(frozen=True)
class RetryVerdict:
    """is_justified: try again now. not_before: the back-off's end (seconds, the clock passed in). expected_share:
    the share of its prediction the tries expect the change to realise now (None: not predicted from them)."""

    is_justified: bool
    reason: str
    not_before: float
    expected_share: float | None = None


def backoff_seconds(num_failed: int, base_seconds: float = BASE_BACKOFF_SECONDS,
                    max_seconds: float = MAX_BACKOFF_SECONDS) -> float:
    """The wait after `num_failed` failed tries: base, doubling with each, capped."""
    return 0.0 if num_failed <= 0 else min(base_seconds * 2.0 ** (num_failed - 1), max_seconds)


def expected_share_at(tries: Sequence[FailedTry], tokens_per_second: float) -> float:
    """The realised share of its prediction the tries expect at `tokens_per_second`."""
    rated = [(t.inputs.tokens_per_second, t.realised_share) for t in tries if t.inputs.tokens_per_second]
    if not rated:
        return float(np.mean([t.realised_share for t in tries]))
    logs = np.log([r for r, _ in rated])
    shares = np.array([s for _, s in rated])
    if float(logs.max() - logs.min()) < math.log(LOAD_RATE_FACTOR) - 1e-9:
        return float(shares.mean())
    slope, intercept = np.polyfit(logs, shares, 1)
    return float(intercept + slope * math.log(tokens_per_second))


def retry_verdict(tries: Sequence[FailedTry], now_inputs: KnobInputs, now: float, *,
                  base_backoff_seconds: float = BASE_BACKOFF_SECONDS,
                  max_backoff_seconds: float = MAX_BACKOFF_SECONDS) -> RetryVerdict:
    """Whether the knob may be tried again at `now`; tries: its failed tries, oldest first."""
    if not tries:
        return RetryVerdict(True, "no failed try", now)
    last = tries[-1]
    if now_inputs.model != last.inputs.model:
        return RetryVerdict(True, "the model changed since the last failed try", now)
    if now_inputs.policy_version != last.inputs.policy_version:
        return RetryVerdict(True, f"the policy changed (v{last.inputs.policy_version} -> "
                                  f"v{now_inputs.policy_version})", now)
    not_before = last.at + backoff_seconds(len(tries), base_backoff_seconds, max_backoff_seconds)
    if now < not_before:
        return RetryVerdict(False, f"{len(tries)} failed tries: backing off until {not_before - now:.0f}s from now",
                            not_before)
    before, after = last.inputs.expert_share, now_inputs.expert_share
    if before is not None and after is not None and before.shape == after.shape:
        shift = load_shift(before, after)
        if shift >= LOAD_SHIFT:
            return RetryVerdict(True, f"the expert load shifted (total-variation distance {shift:.2f} >= "
                                      f"{LOAD_SHIFT}) since the last failed try", not_before)
    rate, last_rate = now_inputs.tokens_per_second, last.inputs.tokens_per_second
    if not (rate and last_rate and max(rate / last_rate, last_rate / rate) >= LOAD_RATE_FACTOR):
        return RetryVerdict(False, "nothing material changed since the last failed try", not_before)
    share = expected_share_at(tries, rate)
    is_justified = share >= MIN_SHARE_OF_PREDICTED
    return RetryVerdict(is_justified, f"the token rate moved from {last_rate:.0f}/s to {rate:.0f}/s; the "
                                      f"{len(tries)} failed tries predict {share:.0%} of the effect there "
                                      f"({'>=' if is_justified else '<'} {MIN_SHARE_OF_PREDICTED:.0%})",
                        not_before, share)


def parked_reason(pool: PoolState, knob: str, *, with_expert_share: bool, now: float) -> tuple[str | None, str | None]:
    """(why the knob stays parked, why it no longer is): both None when it is not parked. Inputs that changed
    materially (controlplane/plan/parking.py) lift the park, except where only the token rate moved: then the knob's
    failed tries must justify another try at the new rate (`retry_verdict`: a growing back-off, and what the tries
    predict there). Another model, policy or hot set is a new problem, answered at once; a park without its tries
    (they were pruned) is lifted as before."""
    still, why = material_reason(pool, knob, with_expert_share=with_expert_share)
    parked = pool.parked.get(knob)
    if why is None or parked is None or not parked.tries:
        return still, why
    inputs = pool.knob_inputs(with_expert_share=with_expert_share)
    if material_change(parked.inputs, replace(inputs, tokens_per_second=parked.inputs.tokens_per_second)):
        return still, why  # not the rate alone
    verdict = retry_verdict(parked.tries, inputs, now)
    if verdict.is_justified:
        return None, f"{why}: {verdict.reason}"
    return f"{knob} parked since action {parked.action_id}: {parked.reason}; {why}, but {verdict.reason}", None
