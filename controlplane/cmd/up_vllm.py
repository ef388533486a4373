"""`moectl up --engine vllm`: the whole loop on one machine with real vLLM servers as the pool.

The controller (this process, SQLite, dashboard) + a pool of vLLM servers (the CPU build and the tiny DeepSeek-V3
that `make engines` caches; moectl's plugins in each; one sidecar each: agents/adapters/vllm/instance.py, started as
a process, never imported) owned by the local pool scaler (controlplane/actuate/local.py) + the OpenAI-compatible
router in front (`--engine vllm`: it reads each server's /metrics) + the drifting workload. One server at rest; the
pool planner sizes the pool from what the sidecars post of vLLM's own signals.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys

from controlplane.actuate.local import LocalScaler, LocalWorkers
from controlplane.cmd.local_stack import LocalStack
from controlplane.config import Settings

DEPLOYMENT = "tiny-vllm"  # apart from the bundled runtime's "tiny": one database may hold both
ROLE = "unified"  # a vLLM server prefills and decodes
SERVED_MODEL = "tiny"  # what the servers serve the checkpoint as (agents/adapters/vllm/server.py)
# one server at rest, two at most (two 4 GB servers fit beside the controller in 24 GiB; CPU is the limit). The
# SLO is what one server on two shared cores meets at rest and misses when the workload steps up
VLLM_POLICY = {"mode": "auto", "slo": {"ttft_p90_seconds": 2.0, "itl_p90_seconds": 0.5},
               "replicas": {ROLE: {"min": 1, "max": 2}},
               "pool_cooldown_seconds": 30.0, "pool_predictive_interval_seconds": 20.0}
# light: the servers share two cores with the controller, the router and the workload; prompts fit 512 tokens
WORKLOAD = ("--max-chars", "300", "--max-tokens", "32", "--max-concurrency", "16")
STARTUP_SECONDS = 60.0  # a vLLM server answers /health 23-60 s after it is started (2 cores)
STOP_SECONDS = 50.0  # an instance stops its vLLM (SIGTERM, SIGKILL 30 s later: agents/adapters/vllm/server.py)
MAX_START_SECONDS = 460.0  # its own bound (agents/adapters/vllm/server.py) and the sidecar's first window
CANNOT = ("moectl cannot move vLLM's experts on a CPU: vLLM refuses --enable-eplb there, so no placement is applied "
          "(moectl observes every expert's load and sizes the pool; placements apply on GPU servers with EPLB)")


def missing_setup() -> str | None:
    """What `make engines` has not built yet, in the vLLM venv's own words (agents/adapters/vllm/server.py, run as a
    process: the controller imports no agent code); None when it is all there."""
    result = subprocess.run([sys.executable, "-m", "agents.adapters.vllm.server"], capture_output=True, text=True)
    return None if result.returncode == 0 else (result.stdout + result.stderr).strip()


def up_vllm(settings: Settings, *, router_port: int | None = None, pool_policy: dict | None = None,
            loadgen_args: tuple[str, ...] | None = ("--rate", "1"), is_fresh: bool = False) -> int:
    """pool_policy: the policy the deployment registers with (default VLLM_POLICY); loadgen_args: the workload's
    rate or schedule (None: no workload)."""
    problem = missing_setup()
    if problem is not None:
        print(f"error: vLLM is {problem}", flush=True)
        return 3
    print(f"note: {CANNOT}", flush=True)
    stack = LocalStack.bind(settings, router_port)
    if stack is None:
        return 1
    workers = LocalWorkers(DEPLOYMENT, {ROLE: 1}, env=stack.env, run=f"{secrets.token_hex(2)}-",
                           args=["--controller", stack.url, "--window-seconds", f"{settings.window_seconds:g}"],
                           module="agents.adapters.vllm.instance", health_path="/health", load_path="",
                           stop_seconds=STOP_SECONDS)
    scaler = LocalScaler(workers, router=stack.router_url, admin_token=stack.admin_token,
                         start_timeout=MAX_START_SECONDS)
    # the first server registers the deployment (its model shape is the sidecar's to say) with the pool policy
    policy = json.dumps(VLLM_POLICY if pool_policy is None else pool_policy)
    first = scaler.start(ROLE, env={"MOECTL_API_TOKEN": settings.api_token}, args=("--policy", policy))
    print(f"vllm: starting {first.name} at {first.urls[0]} (23-60 s to serve on 2 cores)", flush=True)

    def bring_up() -> None:
        stack.start_router(DEPLOYMENT, "--engine", "vllm", "--model", SERVED_MODEL)
        print(f"router: {stack.router_url} (OpenAI API: {stack.router_url}/v1)", flush=True)
        stack.wait_serving(scaler, (ROLE,), timeout=MAX_START_SECONDS)
        print(f"vllm: {first.name} serving at {first.urls[0]} (/metrics; the pool planner adds and drains "
              f"servers, 1 to {json.loads(policy).get('replicas', {}).get(ROLE, {}).get('max', 1)})", flush=True)

    return stack.run(scaler, startup_seconds=STARTUP_SECONDS, is_fresh=is_fresh, bring_up=bring_up,
                     loadgen_args=None if loadgen_args is None else (*WORKLOAD, *loadgen_args))
