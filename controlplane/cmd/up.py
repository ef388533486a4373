"""`moectl up` (what `make run` calls): the whole system on one machine, started and stopped together.

By default: the controller (SQLite, this process) + a prefill and a decode instance of the bundled
runtime (EP groups of local processes, agents embedded) + the router + a workload generator. The
agent-side processes are started as `python -m agents.<module>`: the controller imports no agent
code. The pools' instances belong to the local pool scaler (controlplane/actuate/local.py), so the pool
planner can add and drain them; the router learns them through its admin API. `--sim` runs the simulated
fleet (`python -m agents.sim`) instead of workers, router and workload.
Prints one `name: URL` line per service; Ctrl-C (or SIGTERM) stops everything, children first, and
leaves no process behind. The database (MOECTL_DATABASE_URL, else the default every command shares) is
kept across runs: policies, tokens and the audit trail survive a restart; `--fresh` clears it first. On a
kept database the deployment keeps its policy (`--policy` registers a new deployment's only). Each pool starts
with one instance, and the loop brings it to the size moectl last decided. The new instances are named apart
from the earlier run's (`LocalScaler` run), whose agents go stale and then gone.
"""

from __future__ import annotations

import json
import os
import secrets

from controlplane.actuate.local import LocalScaler, LocalWorkers
from controlplane.cmd.local_stack import LocalStack, Processes, serve_until_stopped, start_controller, stop_on_signals
from controlplane.config import Settings

DEPLOYMENT = "tiny"  # what the workers report as (agents/worker/main.py)
# the embedded deployment's pool policy (README, "make run"): latency targets the tiny model meets on two shared
# cores, one prefill instance, one or two decode instances; a decode rank batches at most MAX_NUM_SEQS sequences,
# so the workload's peak needs more batch slots than one decode instance has (the worker's default is 32)
POOL_POLICY = {"mode": "auto", "slo": {"ttft_p90_seconds": 3.0, "itl_p90_seconds": 0.5},
               "replicas": {"prefill": {"min": 1, "max": 1}, "decode": {"min": 1, "max": 2}},
               "pool_cooldown_seconds": 40.0, "pool_predictive_interval_seconds": 20.0}
MAX_NUM_SEQS = 4
STARTUP_SECONDS = 15.0  # a local instance serves about this long after it is started (2 cores)


def up(settings: Settings, *, ep_size: int, router_port: int | None = None, pool_policy: dict | None = None,
       loadgen_args: tuple[str, ...] | None = ("--rate", "4"), max_num_seqs: int | None = None,
       is_fresh: bool = False) -> int:
    """pool_policy: the policy fields the deployment registers with (default POOL_POLICY); loadgen_args: the
    workload generator's rate or schedule (None: no workload); max_num_seqs: sequences a worker rank batches at
    most (default MAX_NUM_SEQS)."""
    stack = LocalStack.bind(settings, router_port)
    if stack is None:
        return 1
    workers = LocalWorkers(DEPLOYMENT, {"prefill": ep_size, "decode": ep_size}, env=stack.env,
                           run=f"{secrets.token_hex(2)}-",
                           args=["--controller", stack.url, "--window-seconds", f"{settings.window_seconds:g}",
                                 "--max-num-seqs", str(max_num_seqs or MAX_NUM_SEQS)])
    scaler = LocalScaler(workers, router=stack.router_url, admin_token=stack.admin_token)
    # the first instances start before the loop: on a kept database its first pass would otherwise start the
    # size moectl last decided beside them (the workers retry until the controller answers). The decode instance
    # registers the deployment (its model shape is the runtime's to say) with the pool policy; the prefill
    # instance retries its first windows until it exists
    policy = json.dumps(POOL_POLICY if pool_policy is None else pool_policy)
    first = [scaler.start("prefill"), scaler.start("decode", env={"MOECTL_API_TOKEN": settings.api_token},
                                                    args=("--policy", policy))]

    def bring_up() -> None:
        stack.wait_ready([u for instance in first for u in instance.urls], timeout=180)
        stack.start_router(DEPLOYMENT)
        stack.wait_serving(scaler, ("prefill", "decode"), timeout=60)
        print(f"router: {stack.router_url}", flush=True)
        print("workers: " + " | ".join(f"{i.role} {' '.join(i.urls)}" for i in first) + " (/metrics each; the pool "
              "planner adds and drains decode instances)", flush=True)

    return stack.run(scaler, startup_seconds=STARTUP_SECONDS, is_fresh=is_fresh, bring_up=bring_up,
                     loadgen_args=loadgen_args)


def up_sim(settings: Settings, *, num_deployments: int, ep_size: int, is_fresh: bool = False) -> int:
    """The simulated fleet as one child process: hundreds of GPUs' worth of snapshots, no model."""
    controller, thread = start_controller(settings, is_fresh=is_fresh)
    processes = Processes(os.environ | {"MOECTL_API_TOKEN": settings.api_token,
                                        "MOECTL_AGENT_TOKEN": settings.agent_token, "PYTHONUNBUFFERED": "1"})
    stop = stop_on_signals()
    processes.start("sim", "agents.sim", "--url", controller.url, "--deployments", str(num_deployments),
                    "--ep-size", str(ep_size), "--slots-per-rank", str(max(2, 80 // ep_size)),
                    "--window-seconds", f"{settings.window_seconds:g}", "--mode", "auto")
    print(f"sim: {num_deployments} deployments x {ep_size} ranks, {settings.window_seconds:g}s windows", flush=True)
    print("press Ctrl-C to stop", flush=True)
    try:
        serve_until_stopped(processes, thread, stop)
    finally:
        controller.stop_reconciling()
        processes.stop()
        controller.stop()
        thread.join(timeout=10)
        print("stopped", flush=True)
    return 0
