"""Where a DeepSeek-sized post and reconcile pass spend their time, in one process without HTTP: each window's
group posts (`moectl.v2`) parsed, ingested and answered by the route functions themselves, then a reconcile
pass (the planner in-process), under cProfile, with the SQL statements counted and timed.

The clock is passed in (no waiting): `--windows` windows are ingested back to back, a pass after each from
`--profile-from` on (the windows before fill the history a pass reads).

    python -m benchmarks.scale_profile [--gpus 320] [--database sqlite|postgres] [--windows 8] [--top 25]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import pathlib
import pstats
import sys
import tempfile
import time
from collections import Counter

import numpy as np
from sqlalchemy import event

from benchmarks.scale_fleet import WINDOW_SECONDS, Fleet

REPO = pathlib.Path(__file__).resolve().parents[1]


class Statements:
    """Counts and times the SQL statements an engine runs, by their first 60 characters."""

    def __init__(self, engine) -> None:  # noqa: ANN001
        self.count: Counter[str] = Counter()
        self.seconds: Counter[str] = Counter()
        event.listen(engine, "before_cursor_execute", self._before)
        event.listen(engine, "after_cursor_execute", self._after)

    def _before(self, conn, cursor, statement, parameters, context, executemany) -> None:  # noqa: ANN001
        conn.info["started"] = time.perf_counter()

    def _after(self, conn, cursor, statement, parameters, context, executemany) -> None:  # noqa: ANN001
        key = " ".join(statement.split())[:60]
        self.count[key] += 1
        self.seconds[key] += time.perf_counter() - conn.info.pop("started", time.perf_counter())

    def report(self, top: int) -> str:
        lines = [f"{self.seconds[k]:8.3f}s {self.count[k]:6d}x  {k}" for k, _ in self.seconds.most_common(top)]
        self.count.clear()
        self.seconds.clear()
        return "\n".join(lines)


def _profile_text(profile: cProfile.Profile, top: int) -> str:
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.scale_profile")
    p.add_argument("--gpus", type=int, default=320)
    p.add_argument("--database", choices=["sqlite", "postgres"], default="sqlite")
    p.add_argument("--windows", type=int, default=8)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--profile-from", type=int, default=2,
                   help="the first window profiled, and passed (earlier ones only fill the history)")
    args = p.parse_args(argv)
    sys.path.insert(0, str(REPO / "tests"))
    from support import servers

    from agents.protocol import GroupSnapshot
    from controlplane.api.deps import Caller
    from controlplane.api.routes.agents import post_group_snapshot
    from controlplane.config import Settings
    from controlplane.desired import Mode, Policy
    from controlplane.loop.reconcile import Reconciler
    from controlplane.store import db, deployments

    with tempfile.TemporaryDirectory(prefix="moectl-profile-") as tmp, \
            (servers.postgres() if args.database == "postgres" else contextlib.nullcontext()) as pg:
        url = f"sqlite:///{tmp}/moectl.db" if pg is None else servers.create_database(*pg, "profile")
        settings = Settings(database_url=url, window_seconds=WINDOW_SECONDS, leader_election=False)
        db.upgrade(url)
        engine = db.make_engine(url, timeout_seconds=5.0)
        sessions, statements = db.make_sessions(engine), Statements(engine)
        fleet = Fleet(args.gpus, "v2")
        start = (time.time() // WINDOW_SECONDS) * WINDOW_SECONDS
        with sessions() as session, session.begin():
            deployments.create(session, name=fleet.instances[0].deployment, model=fleet.instances[0].model,
                               policy=Policy(mode=Mode.auto, cooldown_seconds=60), created_by="bench", now=start)
        caller = Caller("bench", "agent")
        post_profile, pass_profile = cProfile.Profile(), cProfile.Profile()
        post_seconds, pass_seconds = [], []
        for k in range(args.windows):
            window_start = start + k * WINDOW_SECONDS
            now = window_start + WINDOW_SECONDS * 1.05
            answers = {}
            for instance, body in fleet.render(window_start):
                started = time.perf_counter()
                with post_profile if k >= args.profile_from else contextlib.nullcontext():
                    group = GroupSnapshot.model_validate_json(body)
                    with sessions() as session:
                        answer = post_group_snapshot(group, session, settings, now, caller)
                    answers.setdefault(instance, answer.model_dump_json(exclude_none=True).encode())
                post_seconds.append((k, time.perf_counter() - started))
            fleet.apply(answers)
            if k < args.profile_from:
                if k == args.profile_from - 1:
                    statements.report(0)
                continue
            started = time.perf_counter()
            with pass_profile:
                result = Reconciler(settings).run_pass(sessions, now=now + WINDOW_SECONDS / 2)
            pass_seconds.append(time.perf_counter() - started)
            print(f"window {k}: posts {[round(s, 3) for i, s in post_seconds if i == k]} s, pass "
                  f"{pass_seconds[-1]:.2f} s {[p.decision.value for p in result.plans]}", flush=True)
        print(f"\nSQL of windows {args.profile_from}-{args.windows - 1} (posts and passes):\n"
              f"{statements.report(args.top)}")
        posts = np.array([s for k, s in post_seconds if k >= args.profile_from])
        print(f"\npost s: median {np.median(posts):.3f} max {posts.max():.3f}; pass s: median "
              f"{np.median(pass_seconds):.2f} max {max(pass_seconds):.2f}")
        print("\n== posts ==\n" + _profile_text(post_profile, args.top))
        print("\n== passes ==\n" + _profile_text(pass_profile, args.top))
        engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
