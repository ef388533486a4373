"""A controller for the scale benchmark (benchmarks/scale.py): the API (uvicorn) and the reconcile loop in one
process, on a clock the benchmark can move forward, writing each reconcile pass's duration to a file. With
`--api-only` it serves the API only, beside one that runs the loop: every process binds the port with
SO_REUSEPORT, and the kernel spreads connections over them.

It imports whichever `controlplane` comes first on PYTHONPATH, so the benchmark runs today's code (a tree
exported from a git ref) and this tree through the same launcher. It uses only the app factory, the reconcile
loop and the store's engine, which both keep stable.

    PYTHONPATH=TREE python benchmarks/scale_controller.py --database-url URL --port P --clock-file F --passes-file F
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import gc
import inspect
import json
import mmap
import os
import socket
import struct
import threading
import time


class FileClock:
    """time.time() plus an offset (seconds) that the benchmark writes into an 8-byte file it maps too."""

    def __init__(self, path: str):
        self.file = open(path, "r+b")  # noqa: SIM115 (kept open for the process's life)
        self.map = mmap.mmap(self.file.fileno(), 8)

    def __call__(self) -> float:
        return time.time() + struct.unpack("d", self.map[:8])[0]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--database-url", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--clock-file", required=True)
    p.add_argument("--passes-file", required=True)
    p.add_argument("--window-seconds", type=float, default=5.0)
    p.add_argument("--api-token", required=True)
    p.add_argument("--agent-token", required=True)
    p.add_argument("--api-only", action="store_true", help="serve the API only (another process runs the loop)")
    p.add_argument("--gc-file", default="", help="where to append the garbage collector's pauses over 5 ms")
    args = p.parse_args()
    faulthandler.enable()  # a controller that dies mid-run says where in its log
    if args.gc_file:
        _log_gc_pauses(args.gc_file)

    import uvicorn

    from controlplane.api.app import create_app
    from controlplane.config import Settings
    from controlplane.store import db

    settings = Settings(database_url=args.database_url, port=args.port, api_token=args.api_token,
                        agent_token=args.agent_token, window_seconds=args.window_seconds,
                        reconcile_seconds=args.window_seconds, leader_election=False)
    # 320 v1 posts at once queue on SQLite's one writer: they wait up to the agents' own 5 s, not the
    # controller's default db_timeout_seconds (2 s: on a loaded machine some of today's posts got a 503)
    extra = {"timeout_seconds": 5.0} if "timeout_seconds" in inspect.signature(db.make_engine).parameters else {}
    if not args.api_only:
        db.upgrade(settings.database_url)
    sessions = db.make_sessions(db.make_engine(settings.database_url, **extra))
    clock = FileClock(args.clock_file)
    app = create_app(settings, sessions, clock=clock)
    stop = threading.Event()
    if not args.api_only:
        _start_loop(args.passes_file, sessions, settings, stop, clock)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    listener.bind(("127.0.0.1", args.port))
    with contextlib.suppress(ImportError):  # this tree: the heap frozen before serving, as `serve` does
        from controlplane.cmd.startup_heap import freeze_startup_heap

        freeze_startup_heap()
    print(f"pid {os.getpid()} serving on {args.port}" + (" (API only)" if args.api_only else ""), flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[listener])
    stop.set()


def _log_gc_pauses(path: str) -> None:
    """Appends {"generation", "ms", "at"} for each collection over 5 ms: the interpreter is stopped meanwhile,
    every request in flight waiting (a full collection of a controller's heap took 125-370 ms before
    controlplane/cmd/startup_heap.py)."""
    out, started = open(path, "a", buffering=1), [0.0]  # noqa: SIM115 (kept open for the process's life)

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        elif (seconds := time.perf_counter() - started[0]) > 0.005:
            out.write(json.dumps({"generation": info["generation"], "ms": round(1e3 * seconds, 1),
                                  "at": time.time()}) + "\n")

    gc.callbacks.append(on_gc)


def _start_loop(passes_file: str, sessions, settings, stop: threading.Event, clock: FileClock) -> None:  # noqa: ANN001
    from controlplane.loop import reconcile

    passes = open(passes_file, "a", buffering=1)  # noqa: SIM115

    def on_pass(result) -> None:  # noqa: ANN001
        passes.write(json.dumps({"seconds": result.seconds, "errors": result.num_errors,
                                 "decisions": [p.decision.value for p in result.plans]}) + "\n")

    loop_kwargs = dict(sessions=sessions, stop=stop, clock=clock, on_pass=on_pass)
    if hasattr(reconcile, "Reconciler"):  # this tree: plans in a worker, as `serve` does
        from controlplane.loop.compute import WorkerProcess
        from controlplane.loop.liveness import LoopLiveness

        run = reconcile.Reconciler(settings, compute=WorkerProcess()).run_forever
        loop_kwargs["liveness"] = LoopLiveness.for_settings(settings)
    else:  # a baseline tree: the loop's function takes what it runs with
        run, loop_kwargs["settings"] = reconcile.run_forever, settings
        parameters = inspect.signature(run).parameters
        if "liveness" in parameters:  # main after issue 12
            from controlplane.loop.liveness import LoopLiveness

            loop_kwargs["liveness"] = LoopLiveness.for_settings(settings)
        if "compute" in parameters:
            from controlplane.loop.compute import WorkerProcess

            loop_kwargs["compute"] = WorkerProcess()
    threading.Thread(target=run, daemon=True, name="reconcile", kwargs=loop_kwargs).start()

if __name__ == "__main__":
    main()
