"""`moectl up --ep-size 4` for a few minutes, as a new user runs it: how many times the routing limit was tried and
how many placement changes were made, each with its price (predicted gain and cost) beside what it realised.

    python -m benchmarks.up_changes [--seconds 240] [--out FILE] (default: up-changes-DATE.md in benchmarks/results)

Issue 42 measured 6 routing-limit tries (each rolled back, "unparked: the token rate moved") and 17 placement
changes in 4.5 minutes before changes were priced and retries judged (controlplane/plan/retry.py).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

START_SECONDS = 300.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(seconds: float, extra: list[str]) -> tuple[list[dict], dict, list[str]]:
    """Starts `moectl up`, waits `seconds` once it is up, returns (its actions oldest first, the overview, the
    lines it printed)."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="moectl-up-changes-") as tmp:
        process = subprocess.Popen(
            [sys.executable, "-m", "controlplane", "up", "--port", str(port), "--ep-size", "4", *extra,
             "--database-url", f"sqlite:///{Path(tmp) / 'up.db'}"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
            env=os.environ | {"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"})
        lines: list[str] = []
        threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True).start()
        try:
            began = time.monotonic()
            while not any(line.startswith("up in ") for line in lines):
                if process.poll() is not None or time.monotonic() - began > START_SECONDS:
                    raise SystemExit("moectl up did not start:\n" + "".join(lines[-40:]))
                time.sleep(0.5)
            print(f"up after {time.monotonic() - began:.0f}s; running {seconds:.0f}s", flush=True)
            for elapsed in range(0, int(seconds), 30):
                time.sleep(min(30, seconds - elapsed))
                print(f"  {elapsed + 30}s", flush=True)
            url = f"http://127.0.0.1:{port}/v1/deployments/tiny"
            actions = list(reversed(httpx.get(f"{url}/actions", timeout=30).json()))
            overview = httpx.get(f"{url}/overview", timeout=30).json()
            return actions, overview, lines
        finally:
            os.killpg(process.pid, signal.SIGINT)
            try:
                process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)


def report(actions: list[dict], overview: dict, seconds: float, printed: list[str]) -> str:
    routing = [a for a in actions if a["kind"] == "routing"]
    placements = [a for a in actions if a["kind"] == "placement"]
    tries = ", ".join(f"{a['role']} {a['status']}" for a in routing) or "none"
    lines = [f"`moectl up --ep-size 4`, {seconds:.0f} s after it said it was up.", "",
             f"- routing-limit tries: {len(routing)} ({tries})",
             f"- placement changes: {len(placements)}",
             f"- balancer findings (balancer_stalled): {sum(a['kind'] == 'balancer_stalled' for a in actions)}"]
    # the loop's log line per pool and pass: what it decided and why (controlplane/loop/reconcile.py)
    for role in sorted({a["role"] for a in actions} | {p["role"] for p in overview["pools"]}):
        passes = [line for line in printed if any(f"tiny/{role}: {d} (" in line for d in ("keep", "hold", "rebalance"))]
        unpaid = [line for line in passes if "the change does not pay" in line]
        last = unpaid[-1].split("the change does not pay: ")[1].strip()[:300] if unpaid else ""
        lines.append(f"- {role}: {len(passes)} passes logged, {len(unpaid)} held because the change did not pay"
                     + (f"; the last: {last}" if last else ""))
    lines.append("")
    lines += ["| action | pool | status | predicted gain (s) | cost (s) | cost source | realised gain (s) |",
              "|---|---|---|---|---|---|---|"]
    for a in placements:
        price, realised = a["predicted"].get("price") or {}, (a.get("measured") or {}).get("realised") or {}
        lines.append(f"| {a['id']} | {a['role']} | {a['status']} | {price.get('gain_seconds', '–')} | "
                     f"{price.get('cost_seconds', '–')} | {price.get('cost_source', 'not priced')} | "
                     f"{realised.get('gain_seconds', '–')} |")
    lines += ["", "Each pool's change cost at the end:", ""]
    for pool in overview["pools"]:
        cost = pool.get("change_cost") or {}
        lines.append(f"- {pool['role']}: {cost.get('seconds')} s ({cost.get('source')}; "
                     f"{cost.get('num_measured', 0)} timed switches), parked: "
                     f"{[p['knob'] for p in pool.get('parked', [])] or 'none'}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=240.0)
    parser.add_argument("--out", type=Path, default=None, help="append the report to this markdown file")
    args, extra = parser.parse_known_args()
    actions, overview, printed = run(args.seconds, extra)
    text = report(actions, overview, args.seconds, printed)
    print(text)
    if args.out is not None:
        with args.out.open("a") as f:
            f.write(text)


if __name__ == "__main__":
    main()
