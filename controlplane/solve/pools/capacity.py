"""Predicted TTFT and ITL of a pool at N replicas under a load, and the fewest replicas meeting targets.

Prefill: the prompt tokens/s the prefill pool gets, spread evenly, against the model's per-replica
TTFT. The routers' prompt-length buckets may give the mix of its prompts (`LoadForecast.remote_mix`, used with
PoolRules.size_prefill_by_mix). Then the model answers for the whole pool as a queue of that mix instead, and the
strictest TTFT target is also held at the model's tail percentile (the longest prompts, which barely may wait).
Decode: a replica's batch B settles where B = demand x ITL(B) (Little's law: sequences in the
batch = tokens/s they need x seconds per token). No settled B under the batch and KV limits means the
pool cannot carry the load at that size. B is averaged over time, idle included, while ITL is that of the
steps that run, at least one sequence each: under one sequence, B is the share of time the engine runs. The
model is any object with this module's `LatencyModel` shape (controlplane/learn/latency.py fits one).
Seconds, tokens, tokens/s, requests/s.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from controlplane.solve.pools.view import SloTarget, role_targets

KV_HEADROOM = 0.9  # plan to fill at most this share of a decode replica's KV cache
MAX_ITERATIONS = 60


@dataclass(frozen=True)
class PromptMix:
    """The prompts a pool prefills: `tokens` [K] lengths, each a `shares` [K] part of them (summing to 1)."""

    tokens: tuple[float, ...]
    shares: tuple[float, ...]

    def scaled(self, factor: float) -> PromptMix:
        """The same mix, every prompt `factor` x longer."""
        return replace(self, tokens=tuple(t * factor for t in self.tokens))


class LatencyModel(Protocol):
    kv_capacity_tokens: float  # per decode replica
    max_batch: int  # sequences per decode replica

    def prefill_ttft(self, percentile: int, tokens_per_second: float, mean_prompt_tokens: float,
                     mix: tuple | None = None, replicas: int = 1) -> float | None:
        """TTFT at `percentile` of a pool of `replicas` prefill replicas, each offered `tokens_per_second`;
        mix: (prompt tokens [K], shares [K]) of its prompts (None: only their mean is known); None: not fitted."""

    def decode_itl(self, statistic, batch: float, kv_tokens: float, local_tokens_per_second: float) -> float | None:
        """ITL ("mean", 90 or 99) of one decode replica at that batch; None: not fitted."""

    def prefill_tail(self, tokens_per_second: float, mix: tuple | None, replicas: int) -> float | None:
        """TTFT of the pool's slowest requests (a percentile past the targets', the model's), each replica offered
        `tokens_per_second` of the `mix`; None without a mix (a mean shows no tail) or a fit."""

    def with_prefill_limits(self, max_utilisation: float, tail_percentile: float | None) -> LatencyModel:
        """The same model, its prefill TTFT infinite past `max_utilisation` of a replica's capacity where only the
        mean prompt is known, and its prefill_tail read at `tail_percentile` (None: no tail)."""


@dataclass(frozen=True)
class LoadForecast:
    """The load to plan for: the highest over the forecast horizon, with the recent split between
    prompts prefilled remotely (prefill pool) and locally (on the decode pool). `hold_rate` is the
    highest rate until a scale-down made now could be undone (cooldown plus startup): what a
    consolidation must be safe for."""

    request_rate: float
    remote_share: float  # share of requests prefilled on the prefill pool
    remote_prompt_tokens: float  # mean prompt of those
    local_prompt_tokens: float  # mean prompt of the rest
    output_tokens: float
    horizon_seconds: float = 0.0
    method: str = ""
    is_backtested: bool = False  # the forecaster had history enough to be chosen by backtest
    hold_rate: float | None = None  # None: request_rate
    warm_rate: float | None = None  # while replicas asked for now warm up (None: request_rate)
    sure_rate: float | None = None  # measured: the rate the counts surely exceed (None: request_rate)
    remote_mix: PromptMix | None = None  # lengths of the prompts prefilled remotely (None: only their mean known)

    def scaled(self, factor: float) -> LoadForecast:
        """The same mix at `factor` times the rate (the load N replicas carry on N/M of them)."""
        return replace(self, request_rate=self.request_rate * factor, hold_rate=self.held * factor)

    @property
    def held(self) -> float:
        return self.request_rate if self.hold_rate is None else self.hold_rate

    def warming(self) -> LoadForecast:
        """This load at the rate replicas asked for now will meet while they warm up."""
        return self if self.warm_rate is None else replace(self, request_rate=self.warm_rate)

    @property
    def surely(self) -> float:
        """The rate the measured counts surely exceed: `sure_rate`, never above `request_rate`."""
        return self.request_rate if self.sure_rate is None else min(self.sure_rate, self.request_rate)

    def for_hold(self) -> LoadForecast:
        """This load at the rate a consolidation must be safe for."""
        return replace(self, request_rate=self.held)

    @property
    def prompt_tokens(self) -> float:
        return self.remote_share * self.remote_prompt_tokens + (1 - self.remote_share) * self.local_prompt_tokens


def predict_prefill(model: LatencyModel, load: LoadForecast, replicas: int,
                    targets: tuple[SloTarget, ...]) -> dict[str, float] | None:
    """target name -> predicted seconds with `replicas` prefill replicas; None without a prefill model.

    With the remote prompts' length mix known, the prediction is the queue of that mix (no utilisation ceiling).
    The strictest TTFT target (the bound a request that meets the SLO stays within) is then predicted at the
    model's tail percentile when that is later. A few long prompts that wait are the requests past it, which the
    p99 of the mix does not show."""
    tokens_per_second = load.request_rate * load.remote_share * load.remote_prompt_tokens / max(replicas, 1)
    mix = None if load.remote_mix is None else (np.asarray(load.remote_mix.tokens), np.asarray(load.remote_mix.shares))
    if mix is not None:  # the rate of tokens the mix's lengths carry
        tokens_per_second = load.request_rate * load.remote_share * float(mix[0] @ mix[1]) / max(replicas, 1)
    strictest = max((t for t in targets if t.metric == "ttft"), key=lambda t: t.percentile, default=None)
    out = {}
    for target in targets:
        if target.metric != "ttft":
            continue
        seconds = model.prefill_ttft(target.percentile, tokens_per_second, load.remote_prompt_tokens, mix,
                                     max(replicas, 1))
        if seconds is None:
            return None
        if target is strictest:  # the bound every request is held to: the longest prompts' wait, too
            seconds = max(seconds, model.prefill_tail(tokens_per_second, mix, max(replicas, 1)) or 0.0)
        out[target.name] = float("inf") if replicas < 1 else seconds
    return out


def settled_batch(model: LatencyModel, load: LoadForecast, replicas: int) -> float | None:
    """Sequences per decode replica at steady state; inf when it cannot settle; None without a model."""
    if replicas < 1:
        return float("inf")
    demand = load.request_rate * max(load.output_tokens - 1, 0.0) / replicas  # tokens/s per replica
    local = load.request_rate * (1 - load.remote_share) * load.local_prompt_tokens / replicas
    context = load.prompt_tokens + load.output_tokens / 2
    batch = 0.0
    for _ in range(MAX_ITERATIONS):
        running = max(batch, 1.0)
        itl = model.decode_itl("mean", running, running * context, local)
        if itl is None:
            return None
        following = demand * itl
        if following > model.max_batch:
            return float("inf")
        if abs(following - batch) < 1e-3:
            break
        batch = following
    return batch


def predict_decode(model: LatencyModel, load: LoadForecast, replicas: int,
                   targets: tuple[SloTarget, ...]) -> dict[str, float] | None:
    """target name -> predicted ITL seconds with `replicas` decode replicas (inf: the batch or the KV
    cache overflows); None without a decode model."""
    batch = settled_batch(model, load, replicas)
    if batch is None:
        return None
    context = load.prompt_tokens + load.output_tokens / 2
    is_full = batch * (load.prompt_tokens + load.output_tokens) > KV_HEADROOM * model.kv_capacity_tokens
    local = load.request_rate * (1 - load.remote_share) * load.local_prompt_tokens / max(replicas, 1)
    out = {}
    for target in targets:
        if target.metric != "itl":
            continue
        running = max(batch, 1.0)
        seconds = model.decode_itl(target.percentile, running, running * context, local)
        if seconds is None:
            return None
        out[target.name] = float("inf") if is_full or batch == float("inf") else seconds
    return out


def cold_itl(model: LatencyModel, load: LoadForecast, replicas: int, slowdown: float) -> float | None:
    """ITL p99 of a decode replica still warming up (`slowdown` x slower steps) that carries the per-replica
    batch of a pool of `replicas`; None without a decode model.

    The router balances requests in flight, so a new replica fills to the others' batch at once. Every request
    there must stay within the bound, so its tail is what counts."""
    batch = settled_batch(model, load, replicas)
    if batch is None or batch == float("inf"):
        return batch
    running = max(batch, 1.0)
    local = load.request_rate * (1 - load.remote_share) * load.local_prompt_tokens / replicas
    itl = model.decode_itl(99, running, running * (load.prompt_tokens + load.output_tokens / 2), local)
    return None if itl is None else slowdown * itl


def predict(role: str, model: LatencyModel, load: LoadForecast, replicas: int,
            targets: tuple[SloTarget, ...]) -> dict[str, float] | None:
    return (predict_prefill if role == "prefill" else predict_decode)(model, load, replicas, targets)


def worst(predicted: dict[str, float], targets: tuple[SloTarget, ...]) -> tuple[SloTarget, float]:
    """The binding target: (target, predicted/target), highest ratio first."""
    ratios = [(t, predicted[t.name] / t.seconds) for t in targets if t.name in predicted]
    return max(ratios, key=lambda item: item[1])


FLOOR_REPLICAS = 1_000_000  # "as many replicas as it takes": the latency a pool cannot go under
FLOOR_SLACK = 1.1


def replicas_needed(role: str, model: LatencyModel, load: LoadForecast, targets: tuple[SloTarget, ...],
                    margin: float, max_replicas: int) -> tuple[int, str] | None:
    """(fewest replicas, 1..max_replicas, whose every predicted percentile is within margin x target,
    why). A target the pool cannot reach at any size is met as well as it can be: within FLOOR_SLACK of that
    floor (long prompts' own prefill time, not queueing, sets it). The answer is max_replicas + 1 when even
    that is not reached, and None without a model for the pool."""
    mine = role_targets(role, targets)
    if not mine:
        return None
    floor = predict(role, model, load, FLOOR_REPLICAS, mine)
    if floor is None:
        return None
    goal = {t.name: max(margin * t.seconds, FLOOR_SLACK * floor[t.name]) for t in mine}
    unreachable = [t.name for t in mine if goal[t.name] > t.seconds]
    why = f"{', '.join(unreachable)} cannot be met at any size: as close as it gets" if unreachable else \
        f"every target within {margin:.0%}"
    for replicas in range(1, max_replicas + 1):
        predicted = predict(role, model, load, replicas, mine)
        if all(predicted[name] <= goal[name] for name in goal):
            return replicas, why
    return max_replicas + 1, why
