"""`moectl router`: the OpenAI-compatible front of a deployment, routing each request to worker ranks (the app
in agents/router/app.py, the ranks and their routing in agents/router/router.py). With `--controller` it reports a
window of what it served to the controller each window and takes the PD-aware threshold from its answer. With
`--admin-token` instances can be added, drained and removed while it serves (agents/router/admin.py).

Example:

  python -m agents.router --port 8800 --prefill http://127.0.0.1:8701,http://127.0.0.1:8702 \
      --decode http://127.0.0.1:8711,http://127.0.0.1:8712
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import time

from prometheus_client import CollectorRegistry

from agents.protocol.http import KEEP_ALIVE_SECONDS
from agents.router.app import create_app
from agents.router.policy import Endpoint
from agents.router.report import WindowReporter
from agents.router.router import Router
from agents.router.window import RouterWindows


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="moectl router", description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8800)
    p.add_argument("--fd", type=int, help="serve on this inherited listening socket, bound to --port by the process "
                                          "that started the router (moectl up): no other process takes the port")
    for role in ("prefill", "decode", "unified"):
        p.add_argument(f"--{role}", default="", help=f"{role} rank URLs, comma separated")
    p.add_argument("--model", default="moectl-tiny", help="the model name clients ask for (and, with --engine vllm, "
                                                          "the name the vLLM servers serve it as)")
    p.add_argument("--engine", choices=["moectl", "vllm"], default="moectl",
                   help="what the ranks are: the bundled runtime's workers, or vLLM servers (OpenAI API, /metrics)")
    p.add_argument("--local-prefill-threshold", type=int, default=64,
                   help="prompts with fewer uncached tokens prefill on the decode rank (until the controller says)")
    p.add_argument("--deployment", default="tiny", help="the deployment it fronts, as its workers report it")
    p.add_argument("--name", default="", help="this router among the deployment's (default: HOST-PORT)")
    p.add_argument("--controller", default=os.environ.get("MOECTL_URL", ""),
                   help="controller URL to report windows to ('': none)")
    p.add_argument("--agent-token", default=os.environ.get("MOECTL_AGENT_TOKEN", ""))
    p.add_argument("--window-seconds", type=float, default=float(os.environ.get("MOECTL_WINDOW_SECONDS", 5.0)))
    p.add_argument("--admin-token", default=os.environ.get("MOECTL_ROUTER_ADMIN_TOKEN", ""),
                   help="bearer token of the admin API (instances added, drained, removed); '': the API is off")
    return p.parse_args(argv)


def inherited_listener(fd: int) -> socket.socket:
    """The listening TCP socket at descriptor `fd`; raises ValueError saying what is wrong with it."""
    try:
        listener = socket.socket(fileno=fd)
    except OSError as exc:  # EBADF: not open; ENOTSOCK: a file or a pipe
        raise ValueError(f"--fd {fd} is not an open socket ({exc.strerror or exc}): pass the descriptor of a "
                         "listening socket inherited from the process that started the router") from None
    if listener.type != socket.SOCK_STREAM or not listener.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
        listener.detach()  # not ours to close
        raise ValueError(f"--fd {fd} is a socket but not a listening TCP one: call listen() on it before passing it")
    return listener


def main(argv: list[str] | None = None) -> int:
    import uvicorn
    from prometheus_client import disable_created_metrics

    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s router: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per proxied request drowns everything else
    disable_created_metrics()
    endpoints = [Endpoint(url.strip().rstrip("/"), role) for role in ("prefill", "decode", "unified")
                 for url in getattr(args, role).split(",") if url.strip()]
    if not endpoints and not args.admin_token:
        print("error: give --unified, or --prefill and --decode, rank URLs (or --admin-token to add instances "
              "later)", file=sys.stderr)
        return 2
    try:
        listener = None if args.fd is None else inherited_listener(args.fd)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    windows = RouterWindows(args.deployment, args.name or f"{socket.gethostname()}-{args.port}"[:128],
                            args.window_seconds, time.time()) if args.controller else None
    router = Router(endpoints, model=args.model, local_prefill_threshold=args.local_prefill_threshold,
                    registry=CollectorRegistry(), windows=windows, engine=args.engine)
    reporter = WindowReporter(router, args.controller, args.agent_token) if args.controller else None
    app = create_app(router, admin_token=args.admin_token, reporter=reporter)
    server = uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port, log_level="warning",
                                           timeout_keep_alive=KEEP_ALIVE_SECONDS))
    print(f"OpenAI API on http://{args.host}:{args.port}/v1", flush=True)
    try:
        server.run(sockets=None if listener is None else [listener])
    except KeyboardInterrupt:  # uvicorn re-raises the signal it handled once it has shut down
        pass
    return 0

