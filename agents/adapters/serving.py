"""An engine's `/metrics` over one window -> the counters a moectl rank row carries (agents/protocol/snapshot.py):
requests, prefix cache, MTP/speculative decoding, TTFT/ITL, and the serving work the pool planner sizes pools
from (`ServingCounters`, controlplane/plan/pools.py). Pure: two `Scrape`s in, field values out.

The engine's whole server is one row (rank 0's): its pages already sum the server's ranks, and the controller
adds an instance's rows up (controlplane/collect/serving.py). Counters are differences between the two reads
(an engine restart reads as a fresh start); gauges are the later read's. What an engine does not export stays at
the protocol's default (0, or None for `serving`'s means), never a guess; each engine's table says which.
"""

from __future__ import annotations

from dataclasses import dataclass

from agents.adapters.errors import EngineFormatError
from agents.adapters.histogram import window_summary
from agents.adapters.prom_text import Scrape
from agents.protocol import MAX_COUNT, ServingCounters


@dataclass(frozen=True)
class ServingNames:
    """Where one engine keeps each signal: sample names as its page shows them ("" where it has none)."""

    engine: str
    running: str  # gauge, requests
    waiting: str  # gauge, requests
    kv_usage: str  # gauge, 0..1 of the KV capacity
    kv_capacity: str  # gauge, tokens
    prompt_tokens: str  # counter, tokens
    prefix_queries: str  # counter, tokens looked up in the prefix cache
    prefix_hits: str  # counter, tokens found there
    busy: str  # counter, seconds inside forward passes
    ttft: str  # histogram, seconds
    itl: str  # histogram, seconds
    spec_drafts: str = ""
    spec_draft_tokens: str = ""
    spec_accepted: str = ""
    spec_accepted_by_position: str = ""  # counter labelled `position`
    # an info gauge whose labels carry each engine's KV cache as blocks (`num_gpu_blocks`, `block_size`, `engine`):
    # where set, the capacity is read from it instead of `kv_capacity` (vLLM)
    kv_blocks_info: str = ""

    @property
    def required(self) -> tuple[str, ...]:
        """What a page must show for a window to be posted at all: the gauges every window needs."""
        return self.running, self.waiting


def _delta(before: Scrape, after: Scrape, name: str) -> float:
    if not name:
        return 0.0
    now, then = after.total(name), before.total(name)
    return now if now < then else now - then  # a restart zeroed the counter


def _count(value: float) -> int:
    return min(MAX_COUNT, max(0, int(round(value))))


def _by_position(before: Scrape, after: Scrape, name: str) -> list[int]:
    if not name or not after.has(name):
        return []

    def per_position(scrape: Scrape) -> dict[int, float]:
        out: dict[int, float] = {}
        for labels, value in scrape.samples.get(name, []):
            position = int(labels.get("position", 0))
            out[position] = out.get(position, 0.0) + value
        return out

    now, then = per_position(after), per_position(before)
    return [_count(now[p] - then.get(p, 0.0) if now[p] >= then.get(p, 0.0) else now[p]) for p in sorted(now)][:16]


def _kv_tokens(names: ServingNames, after: Scrape) -> tuple[float, float]:
    """-> (KV tokens held, KV tokens the server can hold) at the read `after`, both summed over its engines.

    From blocks (`kv_blocks_info`): vLLM's usage is used / (num_gpu_blocks - 1) blocks (its block pool keeps one
    null block, vllm/v1/core/block_pool.py `get_usage`), so the tokens held are the used blocks x block_size, a
    block counted whole once any of its slots is. An engine whose labels do not say its blocks (`None` before vLLM
    sized its cache) adds nothing: no guess.
    """
    if not names.kv_blocks_info:
        capacity = after.largest(names.kv_capacity) if names.kv_capacity else 0.0
        return after.largest(names.kv_usage) * capacity, capacity
    usage = {labels.get("engine", ""): value for labels, value in after.samples.get(names.kv_usage, [])}
    held = capacity = 0.0
    for labels, _ in after.samples.get(names.kv_blocks_info, []):
        try:
            num_blocks, block_size = int(labels["num_gpu_blocks"]) - 1, int(labels["block_size"])
        except (KeyError, ValueError):
            continue
        if num_blocks > 0 and block_size > 0:
            held += round(usage.get(labels.get("engine", ""), 0.0) * num_blocks) * block_size
            capacity += num_blocks * block_size
    return held, capacity


def serving_fields(names: ServingNames, version: str, before: Scrape, after: Scrape) -> dict:
    """Two reads of one engine's page, `before` at the window's start and `after` at its end -> RankCounters
    field values (requests_running, requests_waiting, prefix_*, spec_*, ttft, itl, serving).

    Raises EngineFormatError naming the series and the engine's version where the later page lacks one every
    window needs (metrics off, or renamed by an engine upgrade).
    """
    for name in names.required:
        if not after.has(name):
            raise EngineFormatError(names.engine, version, name, "missing from /metrics (is the server started "
                                    "with metrics on? was the series renamed in this version?)")
    seconds = max(after.at - before.at, 1e-9)
    ttft = window_summary(before.buckets(names.ttft), after.buckets(names.ttft), before.total(f"{names.ttft}_sum"),
                          after.total(f"{names.ttft}_sum"))
    itl = window_summary(before.buckets(names.itl), after.buckets(names.itl), before.total(f"{names.itl}_sum"),
                         after.total(f"{names.itl}_sum"))
    kv_tokens, capacity = _kv_tokens(names, after)
    running, waiting = after.total(names.running), after.total(names.waiting)
    queries = _count(_delta(before, after, names.prefix_queries))
    hits = min(queries, _count(_delta(before, after, names.prefix_hits)))
    accepted = _count(_delta(before, after, names.spec_accepted))
    by_position = _by_position(before, after, names.spec_accepted_by_position)
    serving = ServingCounters(
        busy_seconds=min(seconds, _delta(before, after, names.busy)),
        prefill_tokens=_count(_delta(before, after, names.prompt_tokens) - _delta(before, after, names.prefix_hits)),
        num_prefilled=ttft.count, num_waiting=_count(waiting), batch_mean=running,
        kv_tokens_mean=kv_tokens, kv_capacity_tokens=_count(capacity))
    return {
        "requests_running": _count(running), "requests_waiting": _count(waiting),
        "prefix_query_tokens": queries, "prefix_hit_tokens": hits,
        "spec_drafts": _count(_delta(before, after, names.spec_drafts)),
        "spec_draft_tokens": max(accepted, _count(_delta(before, after, names.spec_draft_tokens))),
        "spec_accepted_tokens": accepted,
        "spec_accepted_by_position": by_position if sum(by_position) <= accepted else [],
        "ttft": ttft, "itl": itl, "serving": serving,
    }
