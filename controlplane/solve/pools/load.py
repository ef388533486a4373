"""The load a deployment carries, read from its windows: now (measured) and as series to forecast.

The split between prompts prefilled on the prefill pool and on the decode pool comes from where the
router sent them and what each pool's replicas prefilled, so it follows the threshold in force. A window that did not
measure arrivals is skipped, never read as no traffic. The lengths of the prompts the prefill pool gets (its mix)
come from the routers' prompt-length buckets over the last MIX_ARRIVALS arrivals at least: a p99 needs thousands.
"""

from __future__ import annotations

import math

import numpy as np

from agents.protocol import PROMPT_BUCKET_TOKENS
from controlplane.observed.serving import PoolWindow
from controlplane.solve.pools.capacity import LoadForecast, PromptMix

MIX_ARRIVALS = 3000  # arrivals the prompt mix is read over, at least (as many windows back as it takes)
# [NUM_PROMPT_BUCKETS] a bucket's prompt length before correction: the mean of a length spread evenly in log
# over the bucket, (hi - lo) / ln(hi / lo); the first bucket's half its bound, the open last one twice the last bound
_BOUNDS = np.asarray(PROMPT_BUCKET_TOKENS, np.float64)
_BUCKET_TOKENS = np.concatenate([[_BOUNDS[0] / 2], (_BOUNDS[1:] - _BOUNDS[:-1]) / np.log(_BOUNDS[1:] / _BOUNDS[:-1]),
                                 [2 * _BOUNDS[-1]]])


def remote_mix(windows: tuple[PoolWindow, ...], remote_share: float) -> PromptMix | None:
    """The prompt lengths the prefill pool gets.

    They are the routers' buckets over the newest windows that hold MIX_ARRIVALS arrivals (all of them if
    fewer), less the shortest (1 - remote_share) of the prompts. (Those are what the decode pool prefills
    locally: the prompts under the threshold.) Bucket lengths are scaled so that the mix's mean is
    the measured mean prompt. None when a window in that span has no buckets (a router that does not count them)
    or there is no remote prompt."""
    counts, tokens, arrivals = np.zeros(_BUCKET_TOKENS.size), 0.0, 0
    for w in reversed(windows):
        if not w.num_arrivals:
            continue
        if w.prompt_buckets is None or w.mean_input_tokens is None:
            return None
        counts += w.prompt_buckets
        tokens += w.mean_input_tokens * w.num_arrivals
        arrivals += w.num_arrivals
        if arrivals >= MIX_ARRIVALS:
            break
    if arrivals == 0 or remote_share <= 0:
        return None
    lengths = _BUCKET_TOKENS * tokens / float(counts @ _BUCKET_TOKENS)
    local = (1 - remote_share) * arrivals  # the shortest prompts, bucket by bucket from the first
    remote = counts - np.clip(local - np.concatenate([[0.0], np.cumsum(counts)[:-1]]), 0.0, counts)
    kept = remote > 0
    if not kept.any():
        return None
    return PromptMix(tuple(lengths[kept].tolist()), tuple((remote[kept] / remote[kept].sum()).tolist()))


def _mix(windows: tuple[PoolWindow, ...]) -> tuple[float, float, float, float] | None:
    """(remote share, mean remote prompt, mean local prompt, mean output) over `windows`. The share is
    of arrivals (what was sent where), the prompt means of what each pool prefilled: under overload a
    pool finishes fewer prompts than it is sent."""
    routed = [(w.num_arrivals, w.local_prefill_share) for w in windows
              if w.num_arrivals and w.local_prefill_share is not None]
    outputs = [w.mean_output_tokens for w in windows if w.mean_output_tokens is not None]
    if not routed or not outputs:
        return None
    arrivals = sum(n for n, _ in routed)
    share = 1.0 - sum(n * local for n, local in routed) / arrivals
    remote_tokens = sum(r.prefill_tokens for w in windows for r in w.of_role("prefill"))
    remote_count = sum(r.num_prefilled for w in windows for r in w.of_role("prefill"))
    local_tokens = sum(r.prefill_tokens for w in windows for r in w.of_role("decode"))
    local_count = sum(r.num_prefilled for w in windows for r in w.of_role("decode"))
    prompt = float(np.mean([w.mean_input_tokens for w in windows if w.mean_input_tokens is not None]))
    remote = remote_tokens / remote_count if remote_count else prompt
    local = local_tokens / local_count if local_count else 0.0
    return share, remote, local, float(np.mean(outputs))


def measured_load(windows: tuple[PoolWindow, ...], num_windows: int = 6) -> LoadForecast | None:
    """The load over the last `num_windows` measured windows; None when nothing was measured."""
    recent = tuple(w for w in windows if w.num_arrivals is not None)[-num_windows:]
    mix = _mix(recent)
    if not recent or mix is None:
        return None
    seconds = sum(w.seconds for w in recent)
    rate = sum(w.num_arrivals for w in recent) / seconds
    return LoadForecast(rate, *mix, horizon_seconds=0.0, method="measured", remote_mix=remote_mix(windows, mix[0]))


def sure_rate(windows: tuple[PoolWindow, ...], num_windows: int, sigmas: float, num_spans: int = 3) -> float | None:
    """requests/s the arrivals surely exceed: over the last `num_windows` measured windows, twice and four
    times as many (`num_spans` spans, each double the last), the highest of (arrivals - `sigmas` x
    sqrt(arrivals)) / seconds, a Poisson count less its standard error. A short span follows a jump, a long
    one counts enough arrivals to tell a small step from noise; None when nothing was measured."""
    measured = [w for w in windows if w.num_arrivals is not None]
    best = None
    for span in range(num_spans):
        recent = measured[-num_windows * 2**span:]
        if not recent:
            return best
        count = sum(w.num_arrivals for w in recent)
        rate = max(count - sigmas * math.sqrt(count), 0.0) / sum(w.seconds for w in recent)
        best = rate if best is None else max(best, rate)
    return best


def load_series(windows: tuple[PoolWindow, ...], bucket_seconds: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """([B] requests/s, [B] mean prompt tokens, [B] mean output tokens) per complete `bucket_seconds`
    bucket of measured windows, oldest first; a bucket without a length measurement repeats the
    previous one. The bucket still filling is left out: its rate would read low."""
    measured = [w for w in windows if w.num_arrivals is not None]
    if not measured:
        return np.zeros(0), np.zeros(0), np.zeros(0)
    buckets: dict[int, list[PoolWindow]] = {}
    for w in measured:
        buckets.setdefault(int((w.end - w.seconds / 2) // bucket_seconds), []).append(w)
    keys = sorted(buckets)
    if sum(w.seconds for w in buckets[keys[-1]]) < 0.99 * bucket_seconds:
        keys = keys[:-1]
    rate, prompt, output = [], [], []
    for key in keys:
        group = buckets[key]
        arrivals = sum(w.num_arrivals for w in group)
        rate.append(arrivals / sum(w.seconds for w in group))
        tokens = sum((w.mean_input_tokens or 0.0) * w.num_arrivals for w in group)
        prompt.append(tokens / arrivals if arrivals else (prompt[-1] if prompt else 0.0))
        outs = [w.mean_output_tokens for w in group if w.mean_output_tokens is not None]
        output.append(float(np.mean(outs)) if outs else (output[-1] if output else 0.0))
    return np.asarray(rate), np.asarray(prompt), np.asarray(output)


def burst_peak_rate(windows: tuple[PoolWindow, ...], seconds: float, bucket_seconds: float, min_rise: float,
                    rise_seconds: float) -> float | None:
    """requests/s: the highest burst rate over the last `seconds` of measured windows; None when there is none.

    A burst is a complete `bucket_seconds` bucket whose rate is at least `min_rise` x the lowest bucket in the
    `rise_seconds` before it. The rate jumped, and may jump again; a smooth rise or fall, as over a day, is no
    such peak."""
    rate, _, _ = load_series(windows, bucket_seconds)
    num_rise = max(1, math.ceil(rise_seconds / bucket_seconds))
    first = max(1, rate.size - max(1, math.ceil(seconds / bucket_seconds)))
    bursts = [rate[i] for i in range(first, rate.size) if rate[i] >= min_rise * rate[max(0, i - num_rise):i].min()]
    return float(max(bursts)) if bursts else None
