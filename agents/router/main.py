"""`moectl router`: the OpenAI-compatible front of a deployment, routing each request to worker ranks
(the app and its routing are in agents/router/app.py).

  python -m agents.router --port 8800 --prefill http://127.0.0.1:8701,http://127.0.0.1:8702 \
      --decode http://127.0.0.1:8711,http://127.0.0.1:8712
"""

from __future__ import annotations

import argparse
import logging
import sys

from prometheus_client import CollectorRegistry

from agents.router.app import Router, create_app
from agents.router.policy import Endpoint


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="moectl router", description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8800)
    for role in ("prefill", "decode", "unified"):
        p.add_argument(f"--{role}", default="", help=f"{role} rank URLs, comma separated")
    p.add_argument("--model", default="moectl-tiny", help="the model name clients ask for")
    p.add_argument("--local-prefill-threshold", type=int, default=64,
                   help="prompts with fewer uncached tokens prefill on the decode rank (until the controller says)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    import uvicorn
    from prometheus_client import disable_created_metrics

    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s router: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per proxied request drowns everything else
    disable_created_metrics()
    endpoints = [Endpoint(url.strip().rstrip("/"), role) for role in ("prefill", "decode", "unified")
                 for url in getattr(args, role).split(",") if url.strip()]
    if not endpoints:
        print("error: give --unified, or --prefill and --decode, rank URLs", file=sys.stderr)
        return 2
    router = Router(endpoints, model=args.model, local_prefill_threshold=args.local_prefill_threshold,
                    registry=CollectorRegistry())
    server = uvicorn.Server(uvicorn.Config(create_app(router), host=args.host, port=args.port, log_level="warning"))
    print(f"OpenAI API on http://{args.host}:{args.port}/v1", flush=True)
    try:
        server.run()
    except KeyboardInterrupt:  # uvicorn re-raises the signal it handled once it has shut down
        pass
    return 0

