"""An in-process serving stack for tests: worker ranks (real engines, ep_size 1, seeded weights) and a
router, each on its own uvicorn server on a free 127.0.0.1 port."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

import torch
import uvicorn
from prometheus_client import CollectorRegistry

from agents.protocol import Identity, ModelShape, Role
from agents.router.app import create_app as router_app
from agents.router.policy import Endpoint
from agents.router.router import Router
from agents.runtime.config import EngineConfig, ModelConfig
from agents.runtime.engine import Engine
from agents.runtime.model import Transformer
from agents.telemetry.agent import Agent
from agents.telemetry.engine import RuntimeInfo
from agents.worker.app import create_app as worker_app
from agents.worker.engine_loop import EngineLoop
from support.servers import free_port

MODEL = ModelShape(name="tiny-test", num_layers=4, num_experts=32, num_groups=4, top_k=4)


def serve(app) -> tuple[uvicorn.Server, threading.Thread, str]:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
        time.sleep(0.02)
    return server, thread, f"http://127.0.0.1:{port}"


@contextmanager
def worker(role: str, instance: str = ""):
    torch.manual_seed(0)  # the same weights in every rank
    engine = Engine(EngineConfig(num_speculative_tokens=2, num_kv_blocks=128, max_num_seqs=8, slots_per_rank=40),
                    model=Transformer(ModelConfig(max_seq_len=512)))
    identity = Identity(deployment="tiny", instance=instance or f"tiny-{role}-0", role=Role(role), rank=0,
                        ep_size=1, slots_per_rank=40)
    registry = CollectorRegistry()
    loop = EngineLoop(engine, Agent(engine, identity=identity, model=MODEL, registry=registry,
                                    runtime=RuntimeInfo(num_speculative_tokens=2)))
    stop = threading.Event()
    engine_thread = threading.Thread(target=loop.run, args=(stop,), daemon=True)
    engine_thread.start()
    server, thread, url = serve(worker_app(loop, registry, {"role": role}))
    try:
        yield url, loop, registry
    finally:
        server.should_exit = True
        stop.set()
        engine_thread.join(timeout=10)
        thread.join(timeout=10)


@contextmanager
def router(endpoints: list[tuple[str, str]], threshold: int = 32, admin_token: str = ""):
    r = Router([Endpoint(url, role) for url, role in endpoints], model="moectl-tiny", local_prefill_threshold=threshold,
               registry=CollectorRegistry(), poll_seconds=0.2)
    server, thread, url = serve(router_app(r, admin_token=admin_token))
    try:
        yield url, r
    finally:
        server.should_exit = True
        thread.join(timeout=10)
