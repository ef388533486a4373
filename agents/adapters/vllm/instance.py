"""`python -m agents.adapters.vllm.instance`: one instance of `moectl up --engine vllm`'s pool, as the local pool
scaler (controlplane/actuate/local.py) starts it: a vLLM server (agents/adapters/vllm/server.py) with moectl's
plugins, and, once it answers /health and one warm-up request, its sidecar (agents/adapters/vllm/main.py) in this
process. SIGTERM stops both, and the server's leftovers (/tmp/vllm_dist_*, /dev/shm) go with it.

It takes the bundled worker's arguments (--deployment, --role, --instance, --ports, --fds): the local scaler binds
the port and hands it over; vLLM binds it itself, so it is closed here just before vLLM starts.
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import shutil
import signal
import sys
import tempfile
from pathlib import Path

import httpx

from agents.adapters.vllm import main as sidecar
from agents.adapters.vllm.server import VllmServer, model_dir


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m agents.adapters.vllm.instance", description=__doc__.split("\n\n")[0])
    p.add_argument("--deployment", required=True)
    p.add_argument("--role", default="unified")
    p.add_argument("--instance", required=True)
    p.add_argument("--ep-size", type=int, default=1, choices=[1], help="one vLLM server per instance")
    p.add_argument("--ports", required=True, help="the port vLLM serves on")
    p.add_argument("--fds", default="", help="the port's listening socket, bound by the caller: closed here")
    p.add_argument("--controller", required=True)
    p.add_argument("--window-seconds", type=float, default=10.0)
    p.add_argument("--policy", default="", help="policy fields (JSON) when this instance registers the deployment")
    return p.parse_args(argv)


def warm_up(server: VllmServer) -> None:
    """One short request before the sidecar starts: its first forward pass is slow (kernels, allocations), and the
    sidecar begins once the workers have counted (agents/adapters/vllm/sidecar.py `begin`): a new server the router
    sends nothing yet (the old one holds the prompts' cached blocks) still reports, empty windows, from the start."""
    httpx.post(f"{server.url}/v1/completions", json={"model": server.served_model_name, "prompt": [1, 2, 3, 4],
                                                     "max_tokens": 2}, timeout=120).raise_for_status()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request to vLLM drowns `moectl up`'s output
    root = Path(tempfile.mkdtemp(prefix=f"moectl-{args.instance}-"))
    # vLLM's CPU build binds its thread to the first core by default: every server of the pool on one core, and a
    # second server adds no capacity. Unbound, the kernel spreads them over the machine's cores
    server = VllmServer(root, token=secrets.token_urlsafe(16), port=int(args.ports), is_tied_to_parent=True,
                        extra_env={"VLLM_CPU_OMP_THREADS_BIND": "nobind"})

    def stop(*_):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)  # while vLLM starts; the sidecar installs its own after
    code = 1
    try:
        for fd in filter(None, args.fds.split(",")):
            os.close(int(fd))
        server.launch()
        print(f"{args.instance}: vLLM starting on {server.url} (log {server.log})", flush=True)
        server.wait_healthy()
        warm_up(server)
        print(f"{args.instance}: vLLM serving on {server.url}; its sidecar posts to {args.controller}", flush=True)
        code = sidecar.main(["--engine", server.url, "--engine-token", server.token, "--controller", args.controller,
                             "--deployment", args.deployment, "--instance", args.instance, "--role", args.role,
                             "--model-config", str(model_dir() / "config.json"), "--model-name", "tiny",
                             "--window-seconds", f"{args.window_seconds:g}", "--gpus-per-node", "1",
                             *(["--policy", args.policy] if args.policy else [])])
    except (RuntimeError, httpx.HTTPError) as exc:
        print(f"{args.instance}: {exc}", file=sys.stderr, flush=True)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the stop below is not interrupted by a second one
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
