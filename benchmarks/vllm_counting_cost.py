"""What moectl's per-expert counting inside vLLM costs (agents/adapters/vllm/expert_counts.py): tokens/s of the
CPU vLLM server (tests/support/engines/vllm_cpu.py, the tiny DeepSeek-V3) with the counting and without it
(MOECTL_VLLM_COUNTING=0; the plugins otherwise the same), in one run. Both servers are up at once and measured in
alternating blocks, so load changes on a shared machine hit both alike; the ratio of medians is the result. Beside
it, the hook's own time per MoE layer and step (the counter called in a loop in the vLLM venv, one thread), which
says what the server ratio can show at most on this machine.

    python -m benchmarks.vllm_counting_cost [--blocks 6] [--streams 8] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.engines.vllm_server import VllmServer  # noqa: E402


def block(url: str, streams: int, requests_per_stream: int, prompt_len: int, max_tokens: int) -> float:
    """tokens/s (prompt + generated) of `streams` concurrent clients, each sending its requests in turn."""
    def client(seed: int) -> int:
        total = 0
        for i in range(requests_per_stream):
            prompt = [2 + (seed * 131 + i * 17 + j * 7) % 1000 for j in range(prompt_len)]
            answer = httpx.post(f"{url}/v1/completions", timeout=300, json={
                "model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True})
            total += answer.raise_for_status().json()["usage"]["total_tokens"]
        return total

    start = time.monotonic()
    with ThreadPoolExecutor(streams) as pool:
        tokens = sum(pool.map(client, range(streams)))
    return tokens / (time.monotonic() - start)


HOOK_COST = """
import sys, time, torch
from agents.adapters.vllm.expert_counts import ExpertCounter
torch.set_num_threads(1)
counter = ExpertCounter()
for num_tokens in (8, 64, 512):
    ids = torch.randint(0, 16, (num_tokens, 4), dtype=torch.int32)
    for _ in range(200):
        counter.guarded(1, 16, ids)
    start = time.perf_counter()
    for _ in range(20000):
        counter.guarded(1, 16, ids)
    print(f"| {num_tokens} | {(time.perf_counter() - start) / 20000 * 1e6:.1f} |")
"""


def hook_cost() -> str:
    """The counter's time per layer-step at 8, 64, 512 tokens (top-4 of 16), as table rows."""
    import subprocess

    from support.engines.vllm_server import REPO, require_vllm

    return subprocess.run([str(require_vllm()), "-c", HOOK_COST], capture_output=True, text=True, check=True,
                          env={"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}).stdout


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.vllm_counting_cost", description=__doc__.split("\n\n")[0])
    p.add_argument("--blocks", type=int, default=6, help="measured blocks per server")
    p.add_argument("--streams", type=int, default=8)
    p.add_argument("--requests", type=int, default=3, help="per stream and block")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="vllm-counting-"))
    servers = {"counting": VllmServer(root / "on"), "no counting": VllmServer(root / "off", extra_env={
        "MOECTL_VLLM_COUNTING": "0"})}
    rates: dict[str, list[float]] = {name: [] for name in servers}
    try:
        for name, server in servers.items():
            started = time.monotonic()
            server.start()
            print(f"==> {name}: healthy in {time.monotonic() - started:.0f}s", flush=True)
            block(server.url, args.streams, 1, 64, 16)  # warm-up
        for i in range(args.blocks):
            order = list(servers) if i % 2 == 0 else list(servers)[::-1]
            for name in order:
                rates[name].append(block(servers[name].url, args.streams, args.requests, 64, 64))
                print(f"block {i} {name}: {rates[name][-1]:.0f} tokens/s", flush=True)
        on = servers["counting"].state_dir
        assert list(on.glob("counts-*.json")), "the counting server handed no counts over"
        assert not list(servers["no counting"].state_dir.glob("counts-*.json")), "counting was not off"
    finally:
        for server in servers.values():
            server.stop()
    medians = {name: statistics.median(r) for name, r in rates.items()}
    ratio = medians["counting"] / medians["no counting"]
    lines = ["| server | tokens/s per block | median |", "|---|---|---|"]
    lines += [f"| {name} | {', '.join(f'{r:.0f}' for r in rates[name])} | {medians[name]:.0f} |" for name in rates]
    lines.append(f"\nratio counting / no counting (medians): **{ratio:.3f}**")
    lines += ["", "| tokens a step | hook, microseconds per MoE layer and step |", "|---|---|", hook_cost().strip()]
    print("\n".join(lines))
    if args.out:
        args.out.write_text(args.out.read_text() + "\n" + "\n".join(lines) + "\n" if args.out.exists()
                            else "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
