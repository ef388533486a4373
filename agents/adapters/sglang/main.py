"""`moectl adapter sglang`: the sidecar beside one SGLang server (one per EP group). Wiring only: flags ->
the server, the placement store and restarter, the agent's poster, and the loop (sidecar.py)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import signal
import threading
from pathlib import Path

from agents.adapters.group_window import Where
from agents.adapters.sglang.model import deepseek_model
from agents.adapters.sglang.placement_store import DirectoryStore
from agents.adapters.sglang.restart import CommandRestart, KubeConfigMapStore, KubeEvictRestart
from agents.adapters.sglang.server import SGLangServer
from agents.adapters.sglang.server_check import ServerRefused
from agents.adapters.sglang.sidecar import Sidecar
from agents.protocol import Role
from agents.telemetry.poster import ControllerLink, Registration, SnapshotPoster


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="moectl adapter sglang", description=__doc__)
    p.add_argument("--engine", required=True, help="the SGLang server's URL (rank 0 of the EP group)")
    p.add_argument("--engine-api-key", default=os.environ.get("SGLANG_API_KEY", ""))
    p.add_argument("--controller", required=True, help="the moectl controller's URL")
    p.add_argument("--agent-token", default=os.environ.get("MOECTL_AGENT_TOKEN", ""))
    p.add_argument("--api-token", default=os.environ.get("MOECTL_API_TOKEN", ""),
                   help="optional: registers the deployment (engine sglang) when the controller does not know it")
    p.add_argument("--deployment", required=True)
    p.add_argument("--instance", required=True, help="this EP group's name (e.g. the pod or leader's name)")
    p.add_argument("--role", choices=[r.value for r in Role], default="unified")
    p.add_argument("--model-config", required=True, type=Path, help="the model's Hugging Face config.json")
    p.add_argument("--model-name", default="", help="default: the config's directory name")
    p.add_argument("--dump-dir", required=True, type=Path,
                   help="SGLang's $SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR, shared with this sidecar")
    p.add_argument("--placement-dir", type=Path, help="where SGLang's --init-expert-location file is written")
    p.add_argument("--configmap", help="on Kubernetes: the ConfigMap holding it (mounted into the SGLang pod)")
    p.add_argument("--restart-command", help="runs to restart the group after a placement was written")
    p.add_argument("--evict-selector", help="on Kubernetes: label selector of the group's pods, evicted (the "
                                            "PodDisruptionBudget is respected) to restart the group")
    p.add_argument("--namespace", default=os.environ.get("POD_NAMESPACE", "default"))
    p.add_argument("--live", type=Path, metavar="DIR",
                   help="apply placements live through moectl's sglang.srt.plugins plugin (SGLang started with "
                        "--enable-eplb and MOECTL_SGLANG_STATE_DIR=DIR): no restarts")
    p.add_argument("--window-seconds", type=float, default=10.0)
    p.add_argument("--min-restart-seconds", type=float, default=600.0)
    p.add_argument("--gpus-per-node", type=int, default=8)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = json.loads(args.model_config.read_text())
    model = deepseek_model(config, name=args.model_name or args.model_config.parent.name or "model")
    if args.configmap or args.evict_selector:
        from kubernetes import client
        from kubernetes import config as kube_config

        kube_config.load_incluster_config()
        core = client.CoreV1Api()
    store = KubeConfigMapStore(core, args.namespace, args.configmap) if args.configmap else \
        DirectoryStore(args.placement_dir or args.dump_dir)
    restarter = KubeEvictRestart(core, args.namespace, args.evict_selector) if args.evict_selector else \
        CommandRestart(shlex.split(args.restart_command or "true"))
    server = SGLangServer(args.engine, api_key=args.engine_api_key)
    sidecar: Sidecar | None = None
    poster = SnapshotPoster(ControllerLink(args.controller, args.agent_token), on_answer=lambda a: sidecar.on_answer(a),
                            on_failure=lambda reason: sidecar.faults.record(f"post failed ({reason})", reason),
                            registration=Registration(args.api_token, model.shape, engine="sglang"),
                            running_placement=lambda v: sidecar.running_placement(v))
    sidecar = Sidecar(server, model, Where(args.deployment, args.instance, Role(args.role), args.gpus_per_node),
                      args.dump_dir, store, restarter, poster.submit, window_seconds=args.window_seconds,
                      min_restart_seconds=args.min_restart_seconds, live_dir=args.live)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    poster.start()
    try:
        sidecar.run(stopping)
    except ServerRefused as exc:
        logging.getLogger("moectl.adapter.sglang").error("%s", exc)
        return 2
    except KeyboardInterrupt:
        pass
    finally:
        poster.stop()
        server.close()
    return 0
