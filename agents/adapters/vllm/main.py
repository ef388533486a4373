"""`moectl adapter vllm`: the sidecar beside one vLLM server with the moectl plugin (VLLM_PLUGINS=moectl)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import threading
from pathlib import Path

import httpx

from agents.adapters.group_window import Where
from agents.adapters.sglang.model import deepseek_model
from agents.adapters.vllm import names
from agents.adapters.vllm.sidecar import VllmSidecar
from agents.protocol import Role
from agents.telemetry.poster import ControllerLink, Registration, SnapshotPoster


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="moectl adapter vllm", description=__doc__)
    p.add_argument("--engine", required=True, help="vLLM's API server URL")
    p.add_argument("--engine-token", default=os.environ.get(names.TOKEN_ENV, ""))
    p.add_argument("--controller", required=True)
    p.add_argument("--agent-token", default=os.environ.get("MOECTL_AGENT_TOKEN", ""))
    p.add_argument("--api-token", default=os.environ.get("MOECTL_API_TOKEN", ""))
    p.add_argument("--deployment", required=True)
    p.add_argument("--instance", required=True)
    p.add_argument("--role", choices=[r.value for r in Role], default="unified")
    p.add_argument("--model-config", required=True, type=Path, help="the model's Hugging Face config.json")
    p.add_argument("--model-name", default="")
    p.add_argument("--window-seconds", type=float, default=10.0)
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--policy", type=json.loads, default=None,
                   help="policy fields (JSON) when this sidecar registers the deployment (with --api-token)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    model = deepseek_model(json.loads(args.model_config.read_text()), engine="vllm",
                           name=args.model_name or args.model_config.parent.name or "model").shape
    headers = {"Authorization": f"Bearer {args.engine_token}"} if args.engine_token else {}
    client = httpx.Client(base_url=args.engine, headers=headers, timeout=30)
    sidecar: VllmSidecar | None = None
    poster = SnapshotPoster(ControllerLink(args.controller, args.agent_token), on_answer=lambda a: sidecar.on_answer(a),
                            on_failure=lambda reason: sidecar.faults.record(f"post failed ({reason})", reason),
                            registration=Registration(args.api_token, model, args.policy, engine="vllm"),
                            running_placement=lambda v: sidecar.running_placement(v))
    sidecar = VllmSidecar(client, model, Where(args.deployment, args.instance, Role(args.role), args.gpus_per_node),
                          poster.submit, window_seconds=args.window_seconds)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    poster.start()
    try:
        sidecar.run(stopping)
    except KeyboardInterrupt:
        pass
    finally:
        poster.stop()
        client.close()
    return 0
