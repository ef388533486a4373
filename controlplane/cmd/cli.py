"""`moectl`: one entry point, a subcommand per process. Settings are built here and passed down."""

from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import sys
import time

from controlplane.config import DEFAULT_DATABASE_URL

# agent-side commands run as their own processes: the controller never imports agent code
AGENT_COMMANDS = {"train": "agents.runtime.train", "worker": "agents.worker", "router": "agents.router",
                  "loadgen": "agents.loadgen", "sim": "agents.sim", "adapter": "agents.adapters"}


def _settings(args: argparse.Namespace, generated: dict[str, str] | None = None):
    """Settings from the environment and the flags; an empty bootstrap token is generated (and put in
    `generated`, for the entry point to show it once)."""
    from controlplane.config import Settings

    overrides = {k: v for k, v in {"database_url": getattr(args, "database_url", None),
                                   "host": getattr(args, "host", None), "port": getattr(args, "port", None),
                                   "window_seconds": getattr(args, "window_seconds", None)}.items() if v is not None}
    settings = Settings(**overrides)
    tokens = {name: secrets.token_urlsafe(24) for name in ("api_token", "agent_token") if not getattr(settings, name)}
    if generated is not None:
        generated.update(tokens)
    return settings.model_copy(update=tokens)


def cmd_serve(args: argparse.Namespace) -> int:
    from controlplane.cmd.serve import serve

    generated: dict[str, str] = {}
    settings = _settings(args, generated)
    return serve(settings, run_loop=not args.no_loop, generated_tokens=generated)


def cmd_up(args: argparse.Namespace) -> int:
    from controlplane.cmd.up import up, up_sim

    settings = _settings(args)
    if args.sim:
        return up_sim(settings, num_deployments=args.deployments, ep_size=args.ep_size or 8, is_fresh=args.fresh)
    loadgen = ("--rate", f"{args.rate:g}") if args.rate else ("--schedule", args.schedule, "--schedule-period",
                                                              f"{args.schedule_period:g}")
    if args.engine == "vllm":
        from controlplane.cmd.up_vllm import up_vllm

        return up_vllm(settings, router_port=args.router_port, pool_policy=args.policy,
                       loadgen_args=None if args.no_loadgen else loadgen, is_fresh=args.fresh)
    return up(settings, ep_size=args.ep_size or 2, router_port=args.router_port,
              loadgen_args=None if args.no_loadgen else loadgen, pool_policy=args.policy,
              max_num_seqs=args.max_num_seqs, is_fresh=args.fresh)


def cmd_status(args: argparse.Namespace) -> int:
    from controlplane.cmd.status import print_status

    return print_status(args.url, watch=args.watch)


def cmd_slots(args: argparse.Namespace) -> int:
    from controlplane.cmd.slots import print_slots

    return print_slots(args.url, args.deployment, args.role, args.max_slots_per_gpu)


def cmd_reconcile(args: argparse.Namespace) -> int:
    from controlplane.cmd.serve import reconcile_command

    return reconcile_command(_settings(args), once=args.once, dry_run=args.dry_run)


def cmd_prune(args: argparse.Namespace) -> int:
    from controlplane.cmd.serve import prune_command

    return prune_command(_settings(args))


def cmd_token(args: argparse.Namespace) -> int:
    from controlplane.cmd.tokens import token_command

    return token_command(_settings(args), action=args.action, name=args.name, role=args.role)


def cmd_migrate(args: argparse.Namespace) -> int:
    from controlplane.store.db import downgrade, upgrade

    settings = _settings(args)
    (upgrade if args.direction == "up" else downgrade)(settings.database_url, args.revision)
    print(f"migrated {args.direction} to {args.revision}")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="moectl", description="Control plane for Mixture-of-Experts serving.")
    p.add_argument("-v", "--verbose", action="store_true", help="log debug detail")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def db_args(q: argparse.ArgumentParser) -> None:
        q.add_argument("--database-url", help="SQLAlchemy URL (default: MOECTL_DATABASE_URL, else "
                                              f"{DEFAULT_DATABASE_URL} in the working directory: every command "
                                              "reaches the same database)")

    q = sub.add_parser("serve", help="run the controller (API + reconcile loop)")
    db_args(q)
    q.add_argument("--host"), q.add_argument("--port", type=int)
    q.add_argument("--window-seconds", type=float)
    q.add_argument("--no-loop", action="store_true",
                   help="serve the API only: no reconcile loop, and no part in leader election (with it, what is "
                        "asked here waits for the leader)")
    q.set_defaults(func=cmd_serve)

    q = sub.add_parser("up", help="the whole system on this machine: controller + prefill and decode workers "
                                  "+ router + workload + dashboard (--sim: a simulated fleet instead)")
    db_args(q)
    q.add_argument("--host"), q.add_argument("--port", type=int)
    q.add_argument("--window-seconds", type=float, default=2.0)
    q.add_argument("--ep-size", type=int, help="ranks per instance (default 2; 8 with --sim)")
    q.add_argument("--router-port", type=int, help="default: a free port")
    q.add_argument("--rate", type=float, help="workload requests per second, constant (instead of --schedule)")
    q.add_argument("--schedule", default="0:1.5,40:9,160:1.5",
                   help="workload rate over time, SECONDS:RATE,... (a step up and back: the pool planner acts)")
    q.add_argument("--schedule-period", type=float, default=300.0, help="repeat the schedule every N seconds")
    q.add_argument("--policy", type=json.loads,
                   help="the deployment's policy (JSON; default: auto, a latency SLO and pool bounds for this machine)")
    q.add_argument("--max-num-seqs", type=int,
                   help="sequences a worker rank batches at most (default 4): the capacity the pool planner sizes by")
    q.add_argument("--no-loadgen", action="store_true", help="no workload generator: bring your own clients")
    q.add_argument("--engine", choices=["moectl", "vllm"], default="moectl",
                   help="what serves: the bundled runtime, or real vLLM servers (the CPU build `make engines` "
                        "caches, the tiny DeepSeek-V3; moectl cannot move their experts on a CPU)")
    q.add_argument("--sim", action="store_true", help="a simulated fleet instead of real workers")
    q.add_argument("--deployments", type=int, default=2, help="simulated deployments (with --sim)")
    q.add_argument("--fresh", action="store_true", help="clear the database first (policies, tokens, the audit "
                                                         "trail); without it `up` carries on from what it holds")
    q.set_defaults(func=cmd_up)

    q = sub.add_parser("status", help="print each deployment's numbers")
    q.add_argument("--url", default=os.environ.get("MOECTL_URL", "http://127.0.0.1:8600"))
    q.add_argument("--watch", type=float, default=0, help="refresh every N seconds")
    q.set_defaults(func=cmd_status)

    q = sub.add_parser("slots", help="what each number of slots per GPU (redundant experts) would reach on a "
                                     "pool's measured load, beside the policy's imbalance threshold")
    q.add_argument("deployment")
    q.add_argument("--role", default="decode", choices=["prefill", "decode", "unified"])
    q.add_argument("--max-slots-per-gpu", type=int, help="default: 3 more than the pool runs")
    q.add_argument("--url", default=os.environ.get("MOECTL_URL", "http://127.0.0.1:8600"))
    q.set_defaults(func=cmd_slots)

    q = sub.add_parser("reconcile", help="run reconcile passes against the database (no API)")
    db_args(q)
    q.add_argument("--once", action="store_true", help="one pass, then exit")
    q.add_argument("--dry-run", action="store_true", help="plan and log, write nothing")
    q.set_defaults(func=cmd_reconcile)

    q = sub.add_parser("prune", help="delete what is past its retention (MOECTL_RETAIN_*), as the loop does "
                                     "every MOECTL_PRUNE_SECONDS; never what is in force")
    db_args(q)
    q.set_defaults(func=cmd_prune)

    q = sub.add_parser("token", help="create, list or revoke API tokens (writes the database directly)")
    db_args(q)
    q.add_argument("action", choices=["create", "list", "revoke"])
    q.add_argument("--name", help="who or what the token is for; recorded on every change it makes")
    q.add_argument("--role", choices=["viewer", "operator", "admin", "agent", "alerts"], default="viewer")
    q.set_defaults(func=cmd_token)

    q = sub.add_parser("migrate", help="apply or revert schema migrations")
    db_args(q)
    q.add_argument("direction", choices=["up", "down"])
    q.add_argument("revision", nargs="?", default=None, help="default: head for up, base for down")
    q.set_defaults(func=cmd_migrate)

    for name, module in AGENT_COMMANDS.items():
        q = sub.add_parser(name, help=f"run {module} (agent side; --help for its options)", add_help=False)
        q.set_defaults(func=None, module=module)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in AGENT_COMMANDS:
        # replaced, not a child: a SIGTERM to `moectl adapter ...` (a pod's stop, a test's) reaches the program
        # itself; a child left behind kept posting as an orphan
        sys.stdout.flush()
        os.execv(sys.executable, [sys.executable, "-m", AGENT_COMMANDS[argv[0]], *argv[1:]])
    args = parser().parse_args(argv)
    if getattr(args, "revision", "unset") is None:
        args.revision = "head" if args.direction == "up" else "base"
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.Formatter.converter = time.gmtime
    for noisy in ("httpx", "alembic"):  # one line per request or migration step drowns the loop's own log
        logging.getLogger(noisy).setLevel(logging.DEBUG if args.verbose else logging.WARNING)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return 130
