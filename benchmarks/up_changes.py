"""`moectl up --ep-size 4` for a few minutes, as a new user runs it: how many times the routing limit was tried and
how many placement changes were made, each with its price (predicted gain and cost) beside what it realised.

    python -m benchmarks.up_changes [--seconds 240] [--out FILE] (default: up-changes-DATE.md in benchmarks/results)

Issue 42 measured 6 routing-limit tries (each rolled back, "unparked: the token rate moved") and 17 placement
changes in 4.5 minutes before changes were priced and retries judged (controlplane/plan/retry.py).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
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
            actions = list(reversed(httpx.get(f"{url}/actions", params={"limit": 1000}, timeout=30).json()))
            overview = httpx.get(f"{url}/overview", timeout=30).json()
            return actions, overview, lines
        finally:
            os.killpg(process.pid, signal.SIGINT)
            try:
                process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)


# the loop's log line per pool and pass (controlplane/loop/reconcile.py `write`; the price's reason,
# controlplane/plan/change_price.py `price_change`), e.g. "07:50:01,123 INFO moectl: tiny/decode: hold (the change
# does not pay: gains 1.20% of the step (max/mean 1.300 -> 1.250, step 0.05s + 0.01s x max/mean) for ~60s = 0.72s
# of capacity < 1.25 x the change's 0.91s (prior: ...))"
PASS = re.compile(r"(\d\d:\d\d:\d\d)\S* .*tiny/(\w+): (keep|hold|rebalance) \((.*)\)$")
PRICE = re.compile(r"gains (?P<share>-?[\d.]+)% of the step \(max/mean (?P<now>\S+) -> (?P<planned>\S+), step "
                   r"(?P<fixed>\S+)s \+ (?P<slope>\S+)s x max/mean\) for ~(?P<horizon>\d+)s = (?P<gain>\S+)s of "
                   r"capacity (<|>=) (?P<margin>[\d.]+) x the change's (?P<cost>\S+)s \((?P<source>.*)\)$")
ENDS = {"under the threshold": "within threshold", "under min_gain": "< min_gain", "by price": "does not pay"}


def passes(printed: list[str]) -> dict[str, list[tuple[str, str, str]]]:
    """role -> its placement passes in order: (clock time, decision, reason)."""
    out: dict[str, list[tuple[str, str, str]]] = {}
    for line in printed:
        if (m := PASS.search(line.rstrip())) is not None:
            out.setdefault(m[2], []).append((m[1], m[3], m[4]))
    return out


def pass_end(decision: str, reason: str) -> str:
    if decision == "rebalance":
        return "made"
    return next((f"{decision} {end}" for end, text in ENDS.items() if text in reason), f"{decision} otherwise")


def report(actions: list[dict], overview: dict, seconds: float, printed: list[str]) -> str:
    routing = [a for a in actions if a["kind"] == "routing"]
    placements = [a for a in actions if a["kind"] == "placement"]
    tries = ", ".join(f"{a['role']} {a['status']}" for a in routing) or "none"
    lines = [f"`moectl up --ep-size 4`, {seconds:.0f} s after it said it was up.", "",
             f"- routing-limit tries: {len(routing)} ({tries})",
             f"- placement changes: {len(placements)}",
             f"- balancer findings (balancer_stalled): {sum(a['kind'] == 'balancer_stalled' for a in actions)}", "",
             "How each pool's placement passes ended:", ""]
    by_role, held = passes(printed), []
    for role in sorted(by_role):
        ends = Counter(pass_end(d, r) for _, d, r in by_role[role])
        others = Counter(re.sub(r"[\d.]+", "N", r)[:70] for _, d, r in by_role[role]
                         if pass_end(d, r) == "hold otherwise")
        lines.append(f"- {role}: {len(by_role[role])} passes: " + ", ".join(f"{n} {e}" for e, n in ends.most_common())
                     + "".join(f"; held otherwise x{n}: \"{why}\"" for why, n in others.most_common(3)))
        held += [(role, t, PRICE.search(r)) for t, _, r in by_role[role] if "does not pay" in r]
    if held:
        lines += ["", "Each pass held by its price (the loop's log: gain over the horizon < margin x the cost):", "",
                  "| pool | time (UTC) | max/mean now -> planned | step (s) = a + b x max/mean | gain share | "
                  "horizon (s) | gain (s) | margin x cost (s) |", "|---|---|---|---|---|---|---|---|"]
        lines += [f"| {role} | {t} | {m['now']} -> {m['planned']} | {m['fixed']} + {m['slope']} x | {m['share']}% | "
                  f"{m['horizon']} | {m['gain']} | {m['margin']} x {m['cost']} |" for role, t, m in held if m]
        sources = Counter(m["source"] for _, _, m in held if m)
        lines += ["", "Their cost: " + "; ".join(f"{source} (x{n})" for source, n in sources.most_common())]
    lines += ["", "Each change made: its price beside what it realised once verified (`measured.realised`, the "
              "measured imbalance before and after under the same step model and horizon):", "",
              "| action | pool | status | predicted gain share | horizon (s) | predicted gain (s) | cost (s) | "
              "realised gain share | realised gain (s) | imbalance before -> after |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for a in placements:
        price, measured = a["predicted"].get("price") or {}, a.get("measured") or {}
        realised = measured.get("realised") or {}
        lines.append(f"| {a['id']} | {a['role']} | {a['status']} | {price.get('gain_share', 'not priced')} | "
                     f"{price.get('horizon_seconds', '-')} | {price.get('gain_seconds', '-')} | "
                     f"{price.get('cost_seconds', '-')} | {realised.get('gain_share', '-')} | "
                     f"{realised.get('gain_seconds', '-')} | {measured.get('imbalance_before', '-')} -> "
                     f"{measured.get('imbalance_after', '-')} |")
    lines += ["", "Each pool's change cost at the end:", ""]
    for pool in overview["pools"]:
        cost = pool.get("change_cost") or {}
        lines.append(f"- {pool['role']}: {cost.get('seconds')} s ({cost.get('source')}; "
                     f"{cost.get('num_measured', 0)} timed switches, the newest {cost.get('last_seconds')} s), "
                     f"parked: {[p['knob'] for p in pool.get('parked', [])] or 'none'}")
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
