"""How one reconcile pass walks the controller's modules: an 8-rank simulated deployment posts windows through the API
(SQLite, a hand-moved clock) until a pass makes a placement action; that pass's calls are counted under sys.setprofile.
Two walks: every call into a controlplane module, and the database session's (the calls handed the session).
Run: python -m benchmarks.pass_trace [--max-windows 12] [--top 10] [--calls]"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from agents.sim.fleet import SimInstance, make_fleet
from controlplane.api.app import create_app
from controlplane.config import Settings
from controlplane.store import db

try:
    from agents.sim.fleet_client import FleetClient
    from controlplane.loop import reconcile
except ImportError:  # a tree from before the stage packages (6b5362a), traced the same way for the before/after
    from agents.sim.fleet import FleetClient  # type: ignore[no-redef]
    from controlplane import reconcile  # type: ignore[no-redef]

PACKAGE = "controlplane."
WINDOW_SECONDS = 10.0
API_TOKEN, AGENT_TOKEN = "bench-operator-token", "bench-agent-token"
# cooldown 0: the first pass that sees enough skew rebalances, so the traced pass comes early
POLICY = {"mode": "auto", "cooldown_seconds": 0}
START = 1_800_000_000.0


class Clock:
    """Time the benchmark moves by hand: the API stamps posts with it, the passes are handed it."""

    def __init__(self, now: float = START):
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass
class Walk:
    """The arrivals of one traced call into controlplane modules, in order: (from, to), where `from` is the module
    of the nearest controlplane frame below the callee (None: the pass's own caller).
    `session_calls`: the calls handed the database session, in order, as (module, function); see `holds_session`."""

    arrivals: list[tuple[str | None, str]] = field(default_factory=list)
    session_calls: list[tuple[str, str]] = field(default_factory=list)

    def on_event(self, frame, event: str, arg) -> None:  # noqa: ANN001 (sys.setprofile's signature)
        if event != "call":  # c_call: C functions have no module of ours; return: going back is not an arrival
            return
        module = frame.f_globals.get("__name__", "")
        if not module.startswith(PACKAGE):
            return
        came_from = _controlplane_module(frame.f_back)
        if came_from != module:
            self.arrivals.append((came_from, module))
        if holds_session(frame):
            self.session_calls.append((module, frame.f_code.co_name))


def holds_session(frame) -> bool:  # noqa: ANN001
    """The call was handed the session: an argument is a Session, or holds one as `.session` (the pool's pass)."""
    code = frame.f_code
    num_args = code.co_argcount + code.co_kwonlyargcount
    values = frame.f_locals
    for name in code.co_varnames[:num_args]:
        value = values.get(name)
        if isinstance(value, Session) or isinstance(getattr(value, "session", None), Session):
            return True
    return False


def _controlplane_module(frame) -> str | None:  # noqa: ANN001
    """The module of the nearest controlplane frame from `frame` down: a call that comes back through a library
    (an SQLAlchemy event, a pydantic validator) arrives from the controlplane module that called the library."""
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.startswith(PACKAGE):
            return module
        frame = frame.f_back
    return None


def traced(call: Callable[[], object]) -> tuple[object, Walk]:
    """call() under the profiler, on this thread only (the API's posts run on the test client's own thread)."""
    walk = Walk()
    sys.setprofile(walk.on_event)
    try:
        result = call()
    finally:
        sys.setprofile(None)
    return result, walk


def stage(module: str) -> str:
    """controlplane.store.windows -> controlplane.store; a root module (controlplane.desired) is its own stage."""
    return ".".join(module.split(".")[:2])


@dataclass(frozen=True)
class SessionWalk:
    """The session's walk: where the pass reads and writes the store from. A stop is a call handed the session
    in another module than the call handed it before (calls in a row in one module are one stop)."""

    stops: int
    modules: int  # distinct modules handed the session
    returns: int  # stops in a module handed it earlier in the pass
    top: list[tuple[str, int]]  # modules by stops, most first
    path: list[str]  # each stop as module.function of its first call, in order


@dataclass(frozen=True)
class Summary:
    stops: int  # arrivals into a controlplane module from a different module (the first, from outside, included)
    modules: int  # distinct controlplane modules visited
    returns: int  # arrivals into a module already visited earlier in the pass
    stage_stops: int  # arrivals whose stage differs from the stage they came from (outside counts as a stage)
    top: list[tuple[str, int]]  # modules by arrivals, most first
    session: SessionWalk


def summarize(walk: Walk, top: int) -> Summary:
    stage_stops = sum(came_from is None or stage(came_from) != stage(module) for came_from, module in walk.arrivals)
    arrivals = Counter(module for _, module in walk.arrivals)
    calls = walk.session_calls
    first_calls = [(module, fn) for i, (module, fn) in enumerate(calls) if i == 0 or calls[i - 1][0] != module]
    session_stops = [module for module, _ in first_calls]
    session = SessionWalk(len(session_stops), len(set(session_stops)), count_returns(session_stops),
                          Counter(session_stops).most_common(top), [f"{m}.{fn}" for m, fn in first_calls])
    return Summary(len(walk.arrivals), len(arrivals), count_returns([m for _, m in walk.arrivals]), stage_stops,
                   arrivals.most_common(top), session)


def count_returns(stops: list[str]) -> int:
    """Stops in a module already stopped in earlier."""
    return len(stops) - len(set(stops))


def pass_function(settings: Settings) -> Callable[..., reconcile.PassResult]:
    """One reconcile pass: `Reconciler.run_pass` (`Reconciler.once` before #44's renames), or on a tree from before
    the reconciler, `reconcile_once` (same arguments)."""
    if hasattr(reconcile, "Reconciler"):
        reconciler = reconcile.Reconciler(settings)
        return getattr(reconciler, "run_pass", None) or reconciler.once
    return lambda sessions, *, now: reconcile.reconcile_once(sessions, settings, now=now)


def made_placement_action(result: reconcile.PassResult) -> bool:
    """A pool's placement action was made in this pass (not one in flight that it joined)."""
    return any(pool.action is not None and pool.is_new for pool in result.pools)


@dataclass(frozen=True)
class Found:
    passes: int  # passes run, the traced one included
    summary: Summary


def trace_first_rebalance(database: pathlib.Path, max_windows: int, top: int) -> Found | None:
    """Posts a window, then runs a pass traced, until a pass makes a placement action: every pass is traced
    alike, so the one kept is exactly the pass that rebalanced. None: no rebalance within max_windows."""
    url = f"sqlite:///{database}"
    # warmup 0: every posted window counts, as in the tests that drive this fleet
    settings = Settings(database_url=url, api_token=API_TOKEN, agent_token=AGENT_TOKEN,
                        window_seconds=WINDOW_SECONDS, warmup_windows=0, leader_election=False)
    db.upgrade(url)
    engine = db.make_engine(url, timeout_seconds=settings.db_timeout_seconds)
    sessions, clock = db.make_sessions(engine), Clock()
    run_pass = pass_function(settings)
    app = create_app(settings, sessions, clock=clock)  # its own metrics registry
    try:
        with TestClient(app) as client:
            fleet_client = FleetClient(client, api_token=API_TOKEN, agent_token=AGENT_TOKEN)
            # one deployment of 8 ranks x 10 slots; the simulator's Zipf load skews it past the threshold
            fleet = make_fleet(num_deployments=1, ep_size=8, slots_per_rank=10, seed=3)
            fleet_client.register(fleet, policy=POLICY)
            for k in range(1, max_windows + 1):
                now = post_window(fleet_client, fleet, clock)
                result, walk = traced(lambda now=now: run_pass(sessions, now=now))
                if made_placement_action(result):
                    return Found(k, summarize(walk, top))
    finally:
        engine.dispose()
    return None


def post_window(fleet_client: FleetClient, fleet: list[SimInstance], clock: Clock) -> float:
    """Every rank posts the window that starts now; returns when its pass runs: half a window after it closed,
    as the loop's grid runs it. The clock then stands at the next window's start."""
    start = clock.now
    clock.now = start + WINDOW_SECONDS  # the window is complete when it is posted
    fleet_client.post_window(fleet, start, WINDOW_SECONDS)
    return start + WINDOW_SECONDS * 1.5 + 0.1


def render(found: Found, seconds: float) -> str:
    s = found.summary
    lines = ["| stops | modules | returns to a module visited | stage-level stops |", "| ---: | ---: | ---: | ---: |",
             f"| {s.stops} | {s.modules} | {s.returns} | {s.stage_stops} |", "",
             "| module | arrivals |", "| --- | ---: |"]
    lines += [f"| {module} | {count} |" for module, count in s.top]
    w = s.session
    lines += ["", "The session's walk (calls handed the database session):", "",
              "| stops | modules | returns to a module visited |", "| ---: | ---: | ---: |",
              f"| {w.stops} | {w.modules} | {w.returns} |", "", "| module | session stops |", "| --- | ---: |"]
    lines += [f"| {module} | {count} |" for module, count in w.top]
    lines += ["", f"traced pass: pass {found.passes} (one pass after each window); run {seconds:.1f} s"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.pass_trace")
    p.add_argument("--max-windows", type=int, default=12, help="give up when no pass rebalanced by then")
    p.add_argument("--top", type=int, default=10, help="modules listed by arrivals")
    p.add_argument("--calls", action="store_true", help="also list the session's stops in order (first function)")
    args = p.parse_args(argv)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="moectl-pass-trace-") as tmp:
        found = trace_first_rebalance(pathlib.Path(tmp) / "moectl.db", args.max_windows, args.top)
    if found is None:
        print(f"no pass made a placement action within {args.max_windows} windows", file=sys.stderr)
        return 1
    print(render(found, time.perf_counter() - started))
    if args.calls:
        print("", *(f"{i}. {stop.removeprefix(PACKAGE)}" for i, stop in enumerate(found.summary.session.path, 1)),
              sep="\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
