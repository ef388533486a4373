"""One controller for a DeepSeek-sized fleet: ingest, reconcile, memory and disk, with the load generator in the
same run, today's code side by side with this tree's.

The fleet is DeepSeek-V3-shaped (58 MoE layers x 256 experts, 8 groups, top-8, topk_group 4): 320 GPUs are one
decode instance (EP320, one slot per GPU: 256 experts and 64 redundant); 1,024 GPUs are three decode instances
and two prefill instances (EP32, 9 slots per GPU). Windows are 5 s. Each controller (benchmarks/scale_controller.py:
API and reconcile loop in one process, policy mode `auto`, the fleet applying what it is answered) runs on SQLite and on
PostgreSQL. Per configuration:

- real time: `--windows` windows posted as they end, every rank (v1: a snapshot per rank) or every EP group
  (v2: one group snapshot) through `--connections` keep-alive connections, all at once at the window's end, or
  (`--posts spread`) each at the moment an agent's poster sends it, spread over the next window's first tenth
  (agents/protocol/grid.py). Measured: the time to
  ingest a window (first post sent to last answer), each post's round trip, each reconcile pass (the loop's own
  timing), agents fresh at the end (the overview), the controller's RSS and the database's size.
- an hour (`--hour-windows`, 720 by default; for the codes in `--hour-codes`): the clock is moved forward
  window by window (the controller reads its time from a file the benchmark writes), so an hour of windows
  passes in minutes, each window posted once the last is answered; measured: ingest and post latency over all
  of them, the passes, RSS and database size every 60 windows and the largest tables at the end.

Prints markdown and writes benchmarks/results/scale-<date>.md.

    python -m benchmarks.scale [--ranks 320 1024] [--databases sqlite postgres] [--windows 6] [--baseline-ref REF]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import itertools
import os
import pathlib
import platform
import subprocess
import sys
import tempfile
import uuid

from benchmarks.scale_run import REPO, TESTS_DIR, export_tree, run_one
from benchmarks.scale_table import hour_table, ratios, table


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.scale")
    p.add_argument("--ranks", type=int, nargs="+", default=[320, 1024], help="GPUs in the fleet")
    p.add_argument("--databases", nargs="+", default=["sqlite", "postgres"], choices=["sqlite", "postgres"])
    p.add_argument("--codes", nargs="+", default=["today", "new"], choices=["today", "new"])
    p.add_argument("--protocols", nargs="+", default=["v2"], choices=["v1", "v2"],
                   help="what the new code is driven with")
    p.add_argument("--today-protocols", nargs="+", default=["v2"], choices=["v1", "v2"],
                   help="what today's code is driven with (v1 only for a ref before moectl.v2)")
    p.add_argument("--hour-codes", nargs="+", default=["today", "new"], choices=["today", "new"])
    p.add_argument("--windows", type=int, default=6, help="real-time windows per configuration")
    p.add_argument("--hour-windows", type=int, default=720, help="windows of the fast-forwarded hour (0: none)")
    p.add_argument("--connections", type=int, default=32)
    p.add_argument("--api-processes", type=int, nargs="+", default=[1],
                   help="API processes per controller (one also runs the loop); each count is a configuration")
    p.add_argument("--posts", nargs="+", default=["at-once", "spread"], choices=["at-once", "spread"],
                   help="a window's posts all at the window's end, or spread as the agents' posters send them")
    p.add_argument("--baseline-ref", default="", help="today's code (default: the merge base with main)")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    sys.path.insert(0, str(TESTS_DIR))
    from support import servers

    ref = args.baseline_ref or subprocess.run(["git", "-C", str(REPO), "merge-base", "HEAD", "main"], check=True,
                                              capture_output=True, text=True).stdout.strip()
    runs = []
    with tempfile.TemporaryDirectory(prefix="moectl-scale-") as tmp, \
            (servers.postgres() if "postgres" in args.databases else contextlib.nullcontext()) as pg:
        trees = {"today": export_tree(ref, pathlib.Path(tmp) / "today"), "new": REPO}
        for num_gpus in args.ranks:
            for database in args.databases:
                for code in args.codes:
                    for protocol, processes, posts in itertools.product(
                            args.today_protocols if code == "today" else args.protocols, args.api_processes,
                            args.posts):
                        workdir = pathlib.Path(tmp) / uuid.uuid4().hex[:8]
                        workdir.mkdir()
                        url = f"sqlite:///{workdir / 'moectl.db'}" if database == "sqlite" else \
                            servers.create_database(*pg, f"s{uuid.uuid4().hex[:12]}")
                        runs.append(run_one(code, trees[code], database, url, num_gpus, protocol,
                                            num_windows=args.windows,
                                            hour_windows=args.hour_windows if code in args.hour_codes else 0,
                                            connections=args.connections, workdir=workdir,
                                            api_processes=processes, spread=posts == "spread"))
    text = (f"# One controller at DeepSeek scale ({datetime.date.today()})\n\n"
            f"today = {ref[:10]}; {platform.machine()}, {os.cpu_count()} cores, load average "
            f"{os.getloadavg()[0]:.1f} at the end\n\n{table(runs)}\n\n{ratios(runs)}\n\n{hour_table(runs)}\n")
    print(text)
    if not args.no_write:
        path = REPO / "benchmarks" / "results" / f"scale-{datetime.date.today()}.md"
        path.write_text(text)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
