"""`moectl up` (what `make run` calls): controller + simulated fleet + status page, on one machine.

Prints one `name: URL` line per service; Ctrl-C stops everything.
"""

from __future__ import annotations

import threading

from controlplane.config import Settings
from controlplane.serve import Controller
from controlplane.sim.run import run_sim


def up(settings: Settings, *, num_deployments: int, ep_size: int) -> int:
    controller = Controller(settings.model_copy(update={"reconcile_seconds": settings.window_seconds}))
    thread = controller.start()
    url = controller.url
    print(f"controller: {url}", flush=True)
    print(f"status page: {url}/", flush=True)
    print(f"api token: {settings.api_token}", flush=True)
    stop = threading.Event()
    sim = threading.Thread(target=run_sim, name="sim", daemon=True, kwargs=dict(
        url=url, api_token=settings.api_token, agent_token=settings.agent_token, num_deployments=num_deployments,
        ep_size=ep_size, slots_per_rank=max(2, 80 // ep_size), window_seconds=settings.window_seconds,
        mode="auto", stop=stop))
    sim.start()
    print(f"sim: {num_deployments} deployments x {ep_size} ranks, {settings.window_seconds:g}s windows", flush=True)
    print("press Ctrl-C to stop", flush=True)
    try:
        while thread.is_alive() and sim.is_alive():
            thread.join(timeout=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        sim.join(timeout=10)
        controller.stop()
        thread.join(timeout=10)
        print("stopped", flush=True)
    return 0
