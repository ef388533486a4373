"""`moectl worker`: one runtime instance (an EP group of `--ep-size` rank processes) with a role.

Without `--rank` this process is the launcher: it starts one process per rank (gloo on 127.0.0.1)
and stops them all together. Each rank serves the internal API (agents/worker/app.py) on its own port,
runs its engine with the agent embedded, and exposes `/metrics`. Attention is data parallel, so
the router sends requests to ranks; expert parallelism happens inside the group.

  python -m agents.worker --role decode --ep-size 2 --ports 8701,8702 --controller http://127.0.0.1:8600
  python -m agents.worker --sim --role decode --ep-size 2 --ports 8711,8712 --controller ...
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from agents.processes import die_with_parent
from agents.protocol.http import KEEP_ALIVE_SECONDS, listening_socket

log = logging.getLogger("moectl.worker")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="moectl worker", description=__doc__.split("\n\n")[0])
    p.add_argument("--role", choices=["prefill", "decode", "unified"], default="unified")
    p.add_argument("--deployment", default="tiny", help="deployment name (a DNS label)")
    p.add_argument("--instance", help="instance name (default: DEPLOYMENT-ROLE-0)")
    p.add_argument("--ep-size", type=int, default=1)
    p.add_argument("--slots-per-rank", type=int, default=0, help="expert slots per rank (0: room for replicas)")
    p.add_argument("--dispatch-split", choices=("off", "measure", "on"), default="off",
                   help="the dispatch-time replica split: measure it, or route by it (bundled runtime only)")
    p.add_argument("--gpus-per-node", type=int, default=8,
                   help="EP ranks per node (nodes own consecutive ranks): how the nodes a token reached are counted")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--ports", default="8700", help="one HTTP port per rank, comma separated (or a first port)")
    p.add_argument("--fds", default="", help="inherited listening sockets, bound to --ports in order by the process "
                                             "that started this one (moectl up): no other process takes the ports")
    p.add_argument("--controller", default=os.environ.get("MOECTL_URL", ""), help="controller URL ('': none)")
    p.add_argument("--agent-token", default=os.environ.get("MOECTL_AGENT_TOKEN", ""))
    p.add_argument("--api-token", default=os.environ.get("MOECTL_API_TOKEN", ""),
                   help="operator token: registers the deployment if the controller does not know it")
    p.add_argument("--mode", default="auto", help="policy mode when this worker registers the deployment")
    p.add_argument("--policy", type=json.loads, default={},
                   help="more policy fields (JSON) when this worker registers the deployment")
    p.add_argument("--window-seconds", type=float, default=float(os.environ.get("MOECTL_WINDOW_SECONDS", 5.0)))
    p.add_argument("--checkpoint", default="", help="checkpoint directory (default: the shipped one)")
    # one MTP module drafts one token ahead (t+2), as DeepSeek-V3's does; a second draft chains the module past the
    # depth it was trained for and is accepted ~0.6x as often as the first
    # (benchmarks/results/mtp-under-up-2026-11-30.md)
    p.add_argument("--num-speculative-tokens", type=int, default=1,
                   help="draft tokens per step from the MTP module (1: the depth it was trained for)")
    p.add_argument("--num-kv-blocks", type=int, default=512)
    p.add_argument("--max-num-seqs", type=int, default=32)
    p.add_argument("--sim", action="store_true", help="a simulated engine (no model): the real agent over it")
    p.add_argument("--snapshots", choices=["group", "rank"], default="group",
                   help="group: rank 0 posts the EP group's window in one body (moectl.v2); rank: every rank "
                        "posts its own (moectl.v1, as agents before v2 did)")
    p.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    p.add_argument("--dist-port", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--dist-fd", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    ports = [int(x) for x in args.ports.split(",")]
    args.ports = ports if len(ports) == args.ep_size else [ports[0] + r for r in range(args.ep_size)]
    args.fds = [int(x) for x in args.fds.split(",") if x]
    if args.fds and len(args.fds) != args.ep_size:
        p.error(f"--fds: one socket per rank ({args.ep_size}), got {len(args.fds)}")
    args.instance = args.instance or f"{args.deployment}-{args.role}-0"
    args.slots_per_rank = args.slots_per_rank or -(-40 // args.ep_size)  # 32 experts + 8 spare slots
    return args


def launch(args: argparse.Namespace, argv: list[str]) -> int:
    """Starts every rank, waits; a rank that dies takes the group down (its peers would hang)."""
    # the group's rendezvous port is bound here and served by rank 0 (as the ranks' HTTP ports are by whoever
    # started this launcher): a port chosen free and bound later by the rank can be taken meanwhile
    with listening_socket() as rendezvous:
        procs = []
        for r in range(args.ep_size):
            rank_args = ["--rank", str(r), "--dist-port", str(rendezvous.getsockname()[1])]
            fds = args.fds[r:r + 1]  # its HTTP socket, when this launcher was handed them
            if r == 0:
                rank_args += ["--dist-fd", str(rendezvous.fileno())]
                fds = [rendezvous.fileno(), *fds]
            # tied to the launcher before exec: a launcher killed while a rank still starts up leaves no orphan
            procs.append(subprocess.Popen([sys.executable, "-m", "agents.worker", *argv, *rank_args], pass_fds=fds,
                                          preexec_fn=_start_rank))
    for fd in args.fds:  # the ranks hold them now
        os.close(fd)
    stopping = threading.Event()

    def stop(signum, _frame) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    code = 0
    while not stopping.is_set():
        exited = [(r, p.returncode) for r, p in enumerate(procs) if p.poll() is not None]
        if exited:
            code = next((c for _, c in exited if c), 0)
            if code:
                log.error("%s: rank %d exited with code %d; stopping the group", args.instance, *exited[0])
            break
        stopping.wait(0.2)
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)  # ranks agree on a step to stop at
    deadline = time.monotonic() + 15
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    return code


def _start_rank() -> None:
    """Runs in a rank before exec: it goes with the launcher, and ignores Ctrl-C, which reaches the terminal's
    whole group (its own, even while importing): the launcher stops its ranks together with SIGTERM."""
    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def run_rank(args: argparse.Namespace) -> int:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    die_with_parent()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # ignored: a launcher's rank (_start_rank)
        signal.signal(signal.SIGINT, lambda *_: stop.set())
    import torch
    import uvicorn
    from prometheus_client import CollectorRegistry, disable_created_metrics

    from agents.protocol import Identity, Role
    from agents.runtime.ep import init_ep_group
    from agents.telemetry.agent import Agent
    from agents.telemetry.engine import RuntimeInfo
    from agents.telemetry.poster import ControllerLink, Registration
    from agents.worker.app import create_app
    from agents.worker.build import build_engine
    from agents.worker.engine_loop import EngineLoop

    torch.set_num_threads(1)
    disable_created_metrics()  # a _created series per counter doubles the series for nothing
    group = init_ep_group(args.rank, args.ep_size, args.dist_port, listen_fd=args.dist_fd)
    built = build_engine(args, group)
    identity = Identity(deployment=args.deployment, instance=args.instance, role=Role(args.role), rank=args.rank,
                        ep_size=args.ep_size, slots_per_rank=args.slots_per_rank, gpus_per_node=args.gpus_per_node,
                        node=socket.gethostname(),
                        gpu_uuid=built.gpu_uuid)
    registry = CollectorRegistry()
    agent = Agent(built.engine, identity=identity, model=built.model, registry=registry,
                  link=ControllerLink(args.controller, args.agent_token) if args.controller else None,
                  registration=Registration(args.api_token, built.model, {"mode": args.mode, "cooldown_seconds":
                                                                          3 * args.window_seconds} | args.policy)
                  if args.rank == 0 else None,  # one registrant: no race to create it
                  window_seconds=args.window_seconds,
                  runtime=RuntimeInfo(built.runtime, args.num_speculative_tokens, built.max_batched_tokens),
                  group=group if args.snapshots == "group" else None)
    loop = EngineLoop(built.engine, agent)
    info = {"role": args.role, "instance": args.instance, "ep_rank": args.rank, "ep_size": args.ep_size,
            "model": built.model.name, "runtime": built.runtime}
    port = args.ports[args.rank]
    server = uvicorn.Server(uvicorn.Config(create_app(loop, registry, info), host=args.host, port=port,
                                           log_level="warning", timeout_keep_alive=KEEP_ALIVE_SECONDS))
    sockets = [socket.socket(fileno=args.fds[args.rank])] if args.fds else None
    server_thread = threading.Thread(target=server.run, kwargs={"sockets": sockets}, name="http", daemon=True)
    server_thread.start()
    while not server.started and server_thread.is_alive():
        time.sleep(0.02)
    print(f"worker: {args.instance} rank {args.rank} ({args.role}) http://{args.host}:{port}", flush=True)
    try:
        loop.run(stop)
    finally:
        server.should_exit = True
        agent.close()
        server_thread.join(timeout=5)
        if args.ep_size > 1:
            torch.distributed.destroy_process_group()
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s %(levelname)s {args.instance}: %(message)s")
    for noisy in ("httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if args.rank is None:
        return launch(args, argv)
    return run_rank(args)

