"""MTP acceptance under real `moectl up` (ep 2, prefill and decode instances, KV hand-off, router) against
one in-process rank on the same prompts: greedy, max_tokens 32, draft depth k = the worker's default.

Usage: python benchmarks/mtp_under_up.py local|up [--chat-share 0.2] [-n 24]
Prompts are drawn like agents/loadgen/main.py's: a system prefix + 40-400 or 40-100 chars of stdlib text.
Results: benchmarks/results/mtp-under-up-2026-11-30.md.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import random
import re
import signal
import subprocess
import sys

import httpx

from agents.loadgen.main import SYSTEM_PREFIXES, load_texts
from agents.worker.main import parse_args as worker_args

K = worker_args([]).num_speculative_tokens
BATCH = 8
MAX_TOKENS = 32


def prompts(n: int, min_chars: int, max_chars: int, seed: int) -> list[str]:
    rng, texts, out = random.Random(seed), load_texts(), []
    for _ in range(n):
        kind = rng.choice(["code", "prose"])
        text, length = rng.choice(texts[kind]), rng.randint(min_chars, max_chars)
        start = rng.randrange(0, len(text) - length)
        out.append(rng.choice(SYSTEM_PREFIXES[kind]) + text[start:start + length].encode("ascii", "ignore").decode())
    return out


def scrape(urls: list[str]) -> dict[str, float]:
    """Summed speculative-decoding counters of the ranks' /metrics (by_position_<i> per draft position)."""
    total: dict[str, float] = {}
    for url in urls:
        for name, labels, value in re.findall(r"^moectl_spec_decode_(\w+)_total(\{[^}]*\})? (\S+)$",
                                              httpx.get(url + "/metrics", timeout=10).text, re.M):
            position = re.search(r'position="(\d+)"', labels or "")
            key = f"by_position_{position.group(1)}" if position else name
            total[key] = total.get(key, 0.0) + float(value)
    return total


def acceptance(before: dict[str, float], after: dict[str, float]) -> tuple[float, list[float]]:
    d = {k: after[k] - before.get(k, 0.0) for k in after}
    positions = sorted(k for k in d if k.startswith("by_position_"))
    return d["accepted_tokens"] / d["draft_tokens"], [round(d[p] / d["drafts"], 3) for p in positions]


def run_up(sets: dict[str, list[str]], chat_share: float, port: int = 18611) -> None:
    process = subprocess.Popen([sys.executable, "-m", "controlplane", "up", "--port", str(port), "--ep-size", "2",
                                "--no-loadgen", "--database-url", "sqlite:///.moectl/mtp-under-up.db"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    router = workers = token = None
    try:
        while router is None or workers is None:
            line = process.stdout.readline()
            if not line:
                raise RuntimeError("moectl up exited")
            if line.startswith("router: "):
                router = line.split()[1]
            elif line.startswith("api token: "):
                token = line.split()[2]
            elif line.startswith("workers: "):
                workers = re.findall(r"http://[0-9.:]+", line)
        # observe mode: the routing limit stays the model's own while we measure
        httpx.put(f"http://127.0.0.1:{port}/v1/deployments/tiny/policy", json={"mode": "observe"},
                  headers={"Authorization": f"Bearer {token}"}).raise_for_status()
        rng = random.Random(1)
        with httpx.Client(base_url=router, timeout=300) as client, \
                concurrent.futures.ThreadPoolExecutor(BATCH) as pool:
            def one(prompt: str) -> int:
                if rng.random() < chat_share:
                    body = {"messages": [{"role": "user", "content": prompt}]}
                    return client.post("/v1/chat/completions", json=body | {"max_tokens": MAX_TOKENS}).status_code
                return client.post("/v1/completions", json={"prompt": prompt, "max_tokens": MAX_TOKENS}).status_code

            for name, batch in sets.items():
                before, routes_before = scrape(workers), client.get("/metrics").text
                codes = list(pool.map(one, batch))
                routes = {r: float(v) - float(re.search(rf'routes_total{{route="{r}"}} (\S+)', routes_before)[1])
                          for r, v in re.findall(r'moectl_router_routes_total\{route="(\w+)"\} (\S+)',
                                                 client.get("/metrics").text)}
                accepted, by_position = acceptance(before, scrape(workers))
                print(f"up    {name:34s} acceptance {accepted:.3f} by position {by_position} "
                      f"ok {codes.count(200)}/{len(codes)} routes {routes}", flush=True)
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=60)


def run_local(sets: dict[str, list[str]]) -> None:
    import torch

    from agents.runtime import EngineConfig, SamplingParams
    from agents.runtime.engine import Engine

    torch.set_num_threads(1)
    for name, batch in sets.items():
        engine = Engine(EngineConfig(num_speculative_tokens=K))
        drafts = draft_tokens = accepted = 0
        by_position = [0] * K
        for i in range(0, len(batch), BATCH):
            for prompt in batch[i:i + BATCH]:
                engine.add_request(prompt, SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS))
            while engine.has_unfinished_requests():
                _, stats = engine.step()
                drafts, draft_tokens = drafts + stats.spec_num_drafts, draft_tokens + stats.spec_draft_tokens
                accepted += stats.spec_accepted_tokens
                by_position = [a + b for a, b in zip(by_position, stats.spec_accepted_by_position, strict=False)]
        print(f"local {name:34s} acceptance {accepted / draft_tokens:.3f} by position "
              f"{[round(n / drafts, 3) for n in by_position]}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("where", choices=["local", "up"])
    p.add_argument("-n", type=int, default=24, help="prompts per set")
    p.add_argument("--chat-share", type=float, default=0.0, help="share of requests sent as chat (up only)")
    args = p.parse_args()
    sets = {"loadgen-like (prefix + 40-400)": prompts(args.n, 40, 400, 0),
            "prefix + 40-100": prompts(args.n, 40, 100, 1)}
    print(f"k = {K}, {args.n} prompts per set, batch {BATCH}, max_tokens {MAX_TOKENS}", flush=True)
    run_local(sets) if args.where == "local" else run_up(sets, args.chat_share)


if __name__ == "__main__":
    main()
