"""`moectl loadgen`: Poisson arrivals against the router's OpenAI API, with a mix of text kinds that
drifts over time (code vs prose, so expert hotness moves) and shared system prefixes (so the prefix
cache hits). Prints throughput and TTFT/ITL percentiles every `--report-seconds`. `--schedule` changes
the rate over time (a step up in traffic and back), optionally repeating.

  python -m agents.loadgen --url http://127.0.0.1:8800 --rate 4
  python -m agents.loadgen --url http://127.0.0.1:8800 --schedule 0:2,60:8,180:2 --schedule-period 300
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np

SYSTEM_PREFIXES = {
    "code": ["# You are a careful Python reviewer. Complete the code below in the style of the\n"
             "# standard library: small functions, clear names, no surprises.\n\n",
             "# Module from the Python standard library, continued. Keep the existing style.\n\n"],
    "prose": ["You are the Python documentation. Answer in the reference manual's voice: precise,\n"
              "brief, with the exact names of the objects involved.\n\n",
              "The following is an excerpt from the Python language reference.\n\n"],
}


def load_texts() -> dict[str, list[str]]:
    """Text that ships with Python: stdlib sources (code) and pydoc topics (prose)."""
    from pydoc_data.topics import topics

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    code = [p.read_text(encoding="utf-8", errors="replace") for p in sorted(stdlib.glob("*.py"))[:200]]
    return {"code": [t for t in code if len(t) > 2000], "prose": [t for t in topics.values() if len(t) > 2000]}


@dataclass
class Stats:
    ttft: list[float] = field(default_factory=list)
    itl: list[float] = field(default_factory=list)
    num_done: int = 0
    num_failed: int = 0
    num_tokens: int = 0

    def line(self, seconds: float, code_share: float) -> str:
        def pct(values: list[float], q: float) -> str:
            return f"{np.quantile(values, q) * 1000:.0f}" if values else "-"

        return (f"loadgen: {self.num_done / seconds:.2f} req/s {self.num_tokens / seconds:.1f} chunks/s "
                f"failed {self.num_failed} | ttft ms p50 {pct(self.ttft, 0.5)} p90 {pct(self.ttft, 0.9)} "
                f"p99 {pct(self.ttft, 0.99)} | itl ms p50 {pct(self.itl, 0.5)} p99 {pct(self.itl, 0.99)} "
                f"| code share {code_share:.2f}")


MAX_FAILURES_SHOWN = 5  # per run
# what a chat request adds around the prompt (the router's "user: ...\nassistant:" layout), with room to spare
CHAT_OVERHEAD_BYTES = 24


class Workload:
    def __init__(self, seed: int, period_seconds: float, min_chars: int, max_chars: int,
                 max_context_bytes: int = 0, max_tokens: int = 0):
        """max_context_bytes: prompt (with its system prefix) + max_tokens stay within it; 0: no bound."""
        self.rng, self.period = random.Random(seed), period_seconds
        self.texts, self.min_chars, self.max_chars = load_texts(), min_chars, max_chars
        self.max_context_bytes, self.max_tokens = max_context_bytes, max_tokens
        self.started = time.monotonic()

    def code_share(self) -> float:
        """Swings between mostly code and mostly prose over one period."""
        return 0.5 + 0.4 * math.sin(2 * math.pi * (time.monotonic() - self.started) / self.period)

    def prompt(self) -> tuple[str, str]:
        kind = "code" if self.rng.random() < self.code_share() else "prose"
        text = self.rng.choice(self.texts[kind])
        prefix = self.rng.choice(SYSTEM_PREFIXES[kind])
        longest = self.max_chars
        if self.max_context_bytes:
            longest = min(longest, self.max_context_bytes - self.max_tokens - CHAT_OVERHEAD_BYTES - len(prefix))
        longest = max(1, longest)  # a prefix and max_tokens past the context leave one character, never fewer
        length = self.rng.randint(min(self.min_chars, longest), longest)
        start = self.rng.randrange(0, len(text) - length)
        return kind, prefix + text[start : start + length].encode("ascii", "ignore").decode()


async def one_request(client: httpx.AsyncClient, workload: Workload, sinks: tuple[Stats, ...],
                      max_tokens: int) -> None:
    """One streamed request; its outcome and latencies go to every Stats in `sinks` (this report's, the run's)."""
    kind, prompt = workload.prompt()
    is_chat = workload.rng.random() < 0.2
    path = "/v1/chat/completions" if is_chat else "/v1/completions"
    body = {"model": "moectl-tiny", "max_tokens": max_tokens, "stream": True}
    body |= {"messages": [{"role": "user", "content": prompt}]} if is_chat else {"prompt": prompt}
    started = last = time.perf_counter()
    ttft, itl = [], []

    def failed(why: str) -> None:
        for stats in sinks:
            stats.num_failed += 1
        if sinks[-1].num_failed <= MAX_FAILURES_SHOWN:  # why the first ones failed; the count says the rest
            print(f"loadgen: request failed after {time.perf_counter() - started:.1f}s: {why}", flush=True)

    try:
        async with client.stream("POST", path, json=body) as response:
            if response.status_code != 200:
                return failed(f"{response.status_code} {(await response.aread())[:300].decode(errors='replace')}")
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                if "error" in (chunk := json.loads(line[6:])):
                    return failed(f"error in stream after {len(ttft) + len(itl)} chunks: {chunk['error']}")
                now = time.perf_counter()
                (itl if ttft else ttft).append(now - (last if ttft else started))
                last = now
    except httpx.HTTPError as exc:
        return failed(f"{type(exc).__name__}: {exc}")
    for stats in sinks:
        stats.num_done += 1
        stats.num_tokens += len(ttft) + len(itl)
        stats.ttft += ttft
        stats.itl += itl


def parse_schedule(text: str) -> list[tuple[float, float]]:
    """"0:2,60:8" -> [(0, 2.0), (60, 8.0)]: from each time (seconds) on, that rate (requests/s)."""
    try:
        steps = sorted((float(at), float(rate)) for at, rate in (item.split(":") for item in text.split(",")))
    except ValueError:
        raise argparse.ArgumentTypeError(f"schedule {text!r}: want SECONDS:RATE,SECONDS:RATE,...") from None
    if not steps or steps[0][0] != 0 or any(rate <= 0 for _, rate in steps):
        raise argparse.ArgumentTypeError(f"schedule {text!r}: must start at 0 with rates > 0")
    return steps


def rate_at(seconds: float, schedule: list[tuple[float, float]], period: float) -> float:
    """The schedule's rate `seconds` after the start (repeating every `period` seconds when it is > 0)."""
    if period > 0:
        seconds %= period
    return next(rate for at, rate in reversed(schedule) if at <= seconds)


async def run(args: argparse.Namespace) -> int:
    workload = Workload(args.seed, args.period_seconds, args.min_chars, args.max_chars, args.max_context_bytes,
                        args.max_tokens)
    rng = random.Random(args.seed + 1)
    stats, since, total, num_skipped = Stats(), time.monotonic(), Stats(), 0
    started = time.monotonic()
    deadline = started + args.duration if args.duration else math.inf
    schedule = args.schedule or [(0.0, args.rate)]
    tasks: set[asyncio.Task] = set()
    limits = httpx.Limits(max_connections=args.max_concurrency)
    async with httpx.AsyncClient(base_url=args.url, timeout=args.timeout, limits=limits) as client:
        try:
            while time.monotonic() < deadline:
                rate = rate_at(time.monotonic() - started, schedule, args.schedule_period)
                await asyncio.sleep(rng.expovariate(rate))  # Poisson arrivals
                if len(tasks) < args.max_concurrency:
                    task = asyncio.create_task(one_request(client, workload, (stats, total), args.max_tokens))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                else:
                    num_skipped += 1
                if time.monotonic() - since >= args.report_seconds:
                    print(stats.line(time.monotonic() - since, workload.code_share()), flush=True)
                    stats, since = Stats(), time.monotonic()
        except asyncio.CancelledError:  # Ctrl-C (SIGINT): nothing new is sent; a second one stops at once
            print(f"loadgen: stopping; waiting for {len(tasks)} request(s) in flight", flush=True)
        await asyncio.gather(*tasks, return_exceptions=True)
    print(stats.line(max(1e-9, time.monotonic() - since), workload.code_share()), flush=True)
    print(f"loadgen total: {total.num_done} done, {total.num_failed} failed, {num_skipped} not sent "
          f"(--max-concurrency {args.max_concurrency} in flight)", flush=True)
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="moectl loadgen", description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:8800", help="router URL")
    p.add_argument("--rate", type=float, default=4.0, help="mean requests per second")
    p.add_argument("--schedule", type=parse_schedule, default=None,
                   help="rates over time, SECONDS:RATE,... from 0 (instead of --rate), e.g. 0:2,60:8,180:2")
    p.add_argument("--schedule-period", type=float, default=0, help="repeat the schedule every N seconds (0: no)")
    p.add_argument("--duration", type=float, default=0, help="seconds (0: until Ctrl-C)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds a request may take before it counts as failed")
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--min-chars", type=int, default=40)
    p.add_argument("--max-chars", type=int, default=400)
    # the bundled model was trained on 256-byte windows (agents/runtime/README.md): past them its MTP drafts fall
    # apart (0.89 accepted at prompts of 40-100 bytes, 0.55 at 300-400), so acceptance would measure the prompts,
    # not the serving; prompt + system prefix + max_tokens stay within it unless asked otherwise
    p.add_argument("--max-context-bytes", type=int, default=256,
                   help="keep prompt + max_tokens within this many bytes, the model's trained context (0: no bound)")
    p.add_argument("--max-concurrency", type=int, default=32)
    p.add_argument("--period-seconds", type=float, default=120.0, help="code <-> prose drift period")
    p.add_argument("--report-seconds", type=float, default=10.0)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    try:
        return asyncio.run(run(parse_args(argv)))
    except KeyboardInterrupt:
        return 0

