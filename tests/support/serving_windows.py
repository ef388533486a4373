"""Serving windows as a PD deployment's agents and router post them: per rank, the snapshot with its
serving counters (support.store's model: EP groups of 2 ranks), and the router's window."""

from __future__ import annotations

import json

from agents.protocol import NUM_PROMPT_BUCKETS, LatencySummary, RouterWindow, ServingCounters
from support.auth import agent
from support.store import identity, snapshot

WINDOW = 10.0


def latency(p90: float, count: int = 100) -> LatencySummary:
    return LatencySummary(count=count, sum=count * p90 * 0.6, p50=p90 * 0.6, p90=p90, p99=p90 * 1.4)


def post_window(client, start: float, *, rate: float = 5.0, itl: float = 0.03, ttft: float = 0.3,
                threshold: int | None = 256, instances: dict[str, list[str]] | None = None,
                prompt_buckets: tuple[int, ...] | None = None) -> None:
    """One window of the deployment 'tiny': every instance's ranks (role -> instance names; default one
    prefill and one decode instance) and one router, carrying `rate` requests/s (prompt_buckets: the router's
    prompt-length counts, None: it does not count them)."""
    instances = instances or {"prefill": ["tiny-prefill-0"], "decode": ["tiny-decode-0"]}
    arrivals = int(rate * WINDOW)
    for role, names in instances.items():
        for name in names:
            for rank in range(2):
                serving = ServingCounters(busy_seconds=4.0, prefill_tokens=arrivals * 200 if role == "prefill" else 400,
                                          num_prefilled=arrivals if role == "prefill" else 2, queued_tokens=0,
                                          num_waiting=0, batch_mean=rate * 3 / 2, kv_tokens_mean=rate * 300,
                                          kv_capacity_tokens=8192, max_batch=32)
                body = snapshot(window_start=start, rank=rank, seed=rank) \
                    .model_copy(update={"identity": identity(rank, role=role).model_copy(update={"instance": name}),
                                        "serving": serving, "num_steps": 100, "ttft": latency(ttft),
                                        "itl": latency(itl, 500)})
                answer = client.post("/v1/agents/snapshot", content=body.model_dump_json(),
                                     headers=agent() | {"Content-Type": "application/json"})
                assert answer.status_code == 200, answer.text
    window = RouterWindow(deployment="tiny", router="router-0", window_start=start, window_seconds=WINDOW,
                          num_arrivals=arrivals, num_local=arrivals // 5, input_tokens=arrivals * 200,
                          num_finished=arrivals, output_tokens=arrivals * 32, ttft=latency(ttft, arrivals),
                          ttft_local=latency(ttft, arrivals // 5), ttft_remote=latency(ttft, arrivals - arrivals // 5),
                          itl=latency(itl, arrivals * 31), request_seconds=latency(2.0, arrivals),
                          kv_transfer=latency(0.01, arrivals), local_prefill_threshold=threshold,
                          prompt_buckets=prompt_buckets)
    answer = client.post("/v1/agents/router-window", content=window.model_dump_json(),
                         headers=agent() | {"Content-Type": "application/json"})
    assert answer.status_code == 200, answer.text


def prompt_buckets(**counts: int) -> tuple[int, ...]:
    """A router window's `prompt_buckets`: NUM_PROMPT_BUCKETS counts, `b<i>=n` setting bucket i, the rest 0."""
    out = [0] * NUM_PROMPT_BUCKETS
    for name, count in counts.items():
        out[int(name[1:])] = count
    return tuple(out)


def router_window_body(start: float, **overrides) -> dict:
    return json.loads(RouterWindow(deployment="tiny", router="router-0", window_start=start,
                                   window_seconds=WINDOW).model_dump_json()) | overrides
