"""The timeline of one `moectl up --engine vllm` run (controlplane/cmd/up_vllm.py): the workload steps up and back,
and the pool planner sizes the pool of real vLLM servers (CPU build, tiny DeepSeek-V3) from what they report. Every
window it reads the controller's own view (`/v1/deployments/tiny-vllm/overview`: the pool plan's load, replicas
ready / starting / draining, TTFT p90 at the router and the decision) and the actions (`/actions`), and writes them as
a table, with the workload's own totals (requests done and failed).

    python -m benchmarks.vllm_pool_timeline [--schedule 0:1,10:12,240:0.5] [--seconds 420] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.up import moectl_up  # noqa: E402

from controlplane.cmd.up_vllm import DEPLOYMENT, VLLM_POLICY  # noqa: E402

SCHEDULE = "0:1,10:12,240:0.5"
POLICY = VLLM_POLICY | {"pool_cooldown_seconds": 20.0}


def row(t: float, overview: dict, actions: list[dict], seen: set[int]) -> str | None:
    plan = overview.get("pool_plan") or {}
    pool = next(iter(plan.get("pools") or []), None)
    if pool is None:
        return None
    measured = plan.get("measured") or {}
    rate, ttft = measured.get("request_rate"), measured.get("ttft_p90")
    said = "; ".join(f"#{a['id']} {a['kind']} {a['predicted'].get('replicas_before')}->"
                     f"{a['predicted'].get('replicas_after')} {a['status']}"
                     for a in sorted(actions, key=lambda a: a["id"]) if a["id"] not in seen)
    seen |= {a["id"] for a in actions}
    decision = pool["decision"]
    return (f"| {t:5.0f} | {'' if rate is None else f'{rate:.1f}'} | {pool['ready']} | {pool['starting']} | "
            f"{pool['draining']} | {'' if ttft is None else f'{ttft:.2f}'} | {decision['kind']} | {said} |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--schedule", default=SCHEDULE)
    p.add_argument("--seconds", type=float, default=420.0, help="how long to watch once `up` is up")
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "results" /
                   f"vllm-pool-timeline-{datetime.now(UTC):%Y-%m-%d}.md")
    args = p.parse_args(argv)
    rows, seen, statuses = [], set(), {}
    with tempfile.TemporaryDirectory(prefix="vllm-timeline-") as tmp, \
            moectl_up(Path(tmp), "--engine", "vllm", "--schedule", args.schedule, "--schedule-period", "100000",
                      "--policy", json.dumps(POLICY), "--fresh") as up:
        began = time.monotonic()
        up_in = re.search(r"^up in ([\d.]+)s", up.text(), re.M).group(1)
        while time.monotonic() - began < args.seconds:
            try:
                answers = [httpx.get(f"{up.url}/v1/deployments/{DEPLOYMENT}/{what}", timeout=10)
                           for what in ("overview", "actions")]
            except httpx.HTTPError:
                answers = []
            if [a.status_code for a in answers] != [200, 200]:  # the deployment is registered by its first server
                time.sleep(2)
                continue
            overview, actions = (a.json() for a in answers)
            line = row(time.monotonic() - began, overview, actions, seen)
            if line is not None and (not rows or line.split("|", 2)[2] != rows[-1].split("|", 2)[2]):
                rows.append(line)
                print(line, flush=True)
            statuses = {a["id"]: (a["kind"], a["status"], a["reason"]) for a in actions}
            sizes = [a for a in actions if a["kind"] == "pool_size"]
            if len(sizes) >= 2 and all(a["status"] == "verified" for a in sizes) and \
                    overview["pool_plan"]["pools"][0]["draining"] == 0:
                rows.append(f"| {time.monotonic() - began:5.0f} | | | | | | | both changes verified: stopped |")
                break
            time.sleep(2)
    totals = re.findall(r"loadgen total: .*", up.text())
    text = "\n".join([
        f"# One `moectl up --engine vllm` run, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        "",
        f"`python -m benchmarks.vllm_pool_timeline --schedule {args.schedule}`: vLLM 0.32.0 (CPU build) serving the "
        "tiny DeepSeek-V3, moectl's plugins and one sidecar per server, the router in front, 2-second windows, "
        f"on this shared 2-core machine. Policy: `{json.dumps(POLICY)}`. `up` was up (one server serving, the "
        f"workload started) in {up_in} s; t counts from there. Workload schedule (seconds:requests/s): "
        f"`{args.schedule}`; the load generator keeps at most 16 requests in flight (it skips arrivals beyond).",
        "",
        "Load and TTFT p90 are the routers' window as the pool planner read it; ready / starting / draining are the "
        "pool's servers; a row is written when any column changes.",
        "",
        "| t (s) | load (req/s) | ready | starting | draining | TTFT p90 (s) | decision | actions |",
        "|---:|---:|---:|---:|---:|---:|---|---|",
        *rows,
        "",
        "Actions at the end: " + "; ".join(f"#{i} {k} {s}: {r}" for i, (k, s, r) in sorted(statuses.items())),
        "",
        "Workload: " + ("; ".join(totals) or "(no total printed)"),
        ""])
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
