"""The Grafana dashboards: well-formed, and every PromQL expression in them (panel targets, annotations,
variable queries) is valid and returns data on a real Prometheus (Debian `prometheus`) that scrapes
- simulated EP ranks: the real agent (agents.telemetry.agent.Agent, its Exporter) over agents.sim.engine.SimEngine,
  each rank's registry on its own /metrics, posting its windows to
- a real controller (its /metrics, with the reconcile loop deciding and rebalancing, and sizing the pools
  from the windows of a router: the router's own window code, fed requests here), and
- a stand-in for vLLM and SGLang engines exporting their native metric names (those
  dashboards/grafana/moectl-native-engines.json queries),
with dashboards/prometheus/moectl-rules.yml loaded, so the recording-rule queries return data too.
"""

from __future__ import annotations

import json
import math
import random
import re
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, start_http_server
from support.servers import free_port, require_binary, wait_http

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "dashboards" / "grafana"
RULES = ROOT / "dashboards" / "prometheus" / "moectl-rules.yml"
DASHBOARDS = sorted(GRAFANA.glob("*.json"))
ADMIN, AGENT = "grafana-test-admin", "grafana-test-agent"
# what Grafana would put in for its variables: every value, and a rate window several scrapes long
VARIABLES = {"$__rate_interval": "10s", "$__interval": "5m", "$deployment": ".+", "$role": ".+",
             "$model_name": ".+"}
DS = {"type": "prometheus", "uid": "${datasource}"}


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def walk(node, found: list[dict]) -> list[dict]:
    """Every object with an `expr` (panel targets, annotations), however deeply nested (rows)."""
    if isinstance(node, dict):
        if isinstance(node.get("expr"), str):
            found.append(node)
        for value in node.values():
            walk(value, found)
    elif isinstance(node, list):
        for value in node:
            walk(value, found)
    return found


def substitute(expr: str) -> str:
    for name in sorted(VARIABLES, key=len, reverse=True):  # $__rate_interval before $__interval
        expr = expr.replace("${" + name[1:] + "}", VARIABLES[name]).replace(name, VARIABLES[name])
    assert "$" not in expr, f"an unknown variable is left in {expr!r}"
    return expr


def queries() -> list[tuple[str, str, str]]:
    """(dashboard file, where, PromQL) for every expression in every dashboard."""
    out = []
    for path in DASHBOARDS:
        board = load(path)
        panels = {id(p): p for p in board["panels"]}
        for target in walk(board["panels"], []):
            panel = next((p for p in panels.values() if target in p.get("targets", [])), {})
            out.append((path.name, f"panel {panel.get('title', '?')!r} {target.get('refId', '')}", target["expr"]))
        for annotation in walk(board["annotations"], []):
            out.append((path.name, f"annotation {annotation['name']!r}", annotation["expr"]))
    return out


def variable_queries() -> list[tuple[str, str, str]]:
    return [(path.name, v["name"], v["definition"]) for path in DASHBOARDS for v in load(path)["templating"]["list"]
            if v["type"] == "query"]


def test_the_dashboards_are_well_formed():
    assert {p.name for p in DASHBOARDS} >= {"moectl-overview.json", "moectl-experts.json",
                                             "moectl-native-engines.json"}
    uids = [load(p)["uid"] for p in DASHBOARDS]
    assert len(set(uids)) == len(uids)
    for path in DASHBOARDS:
        board = load(path)
        variables = {v["name"]: v for v in board["templating"]["list"]}
        assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
        ids = [p["id"] for p in board["panels"]]
        assert len(set(ids)) == len(ids), f"{path.name}: duplicate panel ids"
        for panel in board["panels"]:
            grid = panel["gridPos"]
            assert grid["x"] + grid["w"] <= 24 and grid["h"] > 0, f"{path.name}: {panel['title']} overflows"
            if panel["type"] == "row":
                continue
            assert panel["datasource"] == DS, f"{path.name}: {panel['title']} must use ${{datasource}}"
            assert panel.get("description"), f"{path.name}: {panel['title']} says nothing about what it shows"
            for target in panel["targets"]:
                assert target["datasource"] == DS and target["expr"].strip()
        for annotation in board["annotations"]["list"]:
            if "expr" in annotation:
                assert annotation["datasource"] == DS
        used = {m for name, _, expr in queries() if name == path.name for m in re.findall(r"\$\{?(\w+)", expr)}
        assert used <= {"__rate_interval", "__interval", *variables}, used - set(variables)
    # no colons in our own metric names: colons belong to recording rules (and to vLLM/SGLang, who know)
    ours = [expr for name, _, expr in queries() if name != "moectl-native-engines.json"]
    assert all(re.search(r"\b(vllm|sglang):", e) is None for e in ours)


# ---- the live stack -------------------------------------------------------------------------------


class NativeEngines:
    """A vLLM engine and an SGLang scheduler, reduced to their /metrics: the names, types and labels
    of the real exporters, with values that move like a serving engine's."""

    def __init__(self):
        self.registry = CollectorRegistry()
        self.v = {"model_name": "deepseek-v3", "engine": "0"}  # vLLM: model_name, engine (DP index)
        self.s = {"model_name": "deepseek-v3-sgl", "engine_type": "decode", "tp_rank": "0", "moe_ep_rank": "0"}
        vllm, sgl = self.v, self.s
        self.gauges = {key: self.child(Gauge, name, labels) for key, name, labels in (
            ("running", "vllm:num_requests_running", vllm), ("waiting", "vllm:num_requests_waiting", vllm),
            ("kv", "vllm:kv_cache_usage_perc", vllm), ("s_running", "sglang:num_running_reqs", sgl),
            ("s_queue", "sglang:num_queue_reqs", sgl), ("s_usage", "sglang:token_usage", sgl),
            ("s_hit", "sglang:cache_hit_rate", sgl), ("s_accept_rate", "sglang:spec_accept_rate", sgl),
            ("s_accept_length", "sglang:spec_accept_length", sgl), ("s_throughput", "sglang:gen_throughput", sgl))}
        # prometheus_client adds `_total` on exposition, as it does for vLLM and SGLang themselves
        self.counters = {name: self.child(Counter, name, vllm) for name in (
            "vllm:prefix_cache_queries", "vllm:prefix_cache_hits", "vllm:spec_decode_num_drafts",
            "vllm:spec_decode_num_draft_tokens", "vllm:spec_decode_num_accepted_tokens", "vllm:prompt_tokens",
            "vllm:generation_tokens", "vllm:num_preemptions")}
        self.counters |= {name: self.child(Counter, name, sgl) for name in ("sglang:cached_tokens",
                                                                            "sglang:prompt_tokens")}
        per_pos = Counter("vllm:spec_decode_num_accepted_tokens_per_pos", "per position", [*vllm, "position"],
                          registry=self.registry)
        self.per_pos = [per_pos.labels(**vllm, position=str(i)) for i in range(2)]
        self.hist = {key: self.child(Histogram, name, labels, buckets=buckets) for key, name, labels, buckets in (
            ("ttft", "vllm:time_to_first_token_seconds", vllm, (0.01, 0.02, 0.04, 0.08, 0.1, 0.25, 0.5, 1.0)),
            ("itl", "vllm:inter_token_latency_seconds", vllm, (0.01, 0.025, 0.05, 0.075, 0.1, 0.15)),
            ("queue", "vllm:request_queue_time_seconds", vllm, (0.3, 0.5, 0.8, 1, 1.5, 2)),
            ("s_ttft", "sglang:time_to_first_token_seconds", sgl, (0.1, 0.2, 0.4, 0.6, 0.8, 1)),
            ("s_itl", "sglang:inter_token_latency_seconds", sgl, (0.002, 0.005, 0.01, 0.02, 0.04, 0.06)))}
        # SGLang's EPLB heatmap: a per-layer histogram whose buckets are GPU ranks
        eplb = Histogram("sglang:eplb_gpu_physical_count", "tokens per GPU rank", [*sgl, "layer"],
                         buckets=tuple(range(8)), registry=self.registry)
        self.eplb = [eplb.labels(**sgl, layer=str(layer)) for layer in range(4)]
        self.rng = random.Random(5)

    def child(self, kind, name: str, labels: dict, **kwargs):
        return kind(name, name, list(labels), registry=self.registry, **kwargs).labels(**labels)

    def step(self) -> None:
        rng = self.rng
        for key, value in (("running", rng.randint(20, 40)), ("waiting", rng.randint(0, 6)), ("kv", rng.random()),
                           ("s_running", rng.randint(10, 30)), ("s_queue", rng.randint(0, 4)),
                           ("s_usage", rng.random()), ("s_hit", rng.uniform(0.4, 0.6)),
                           ("s_accept_rate", rng.uniform(0.7, 0.9)), ("s_accept_length", rng.uniform(2.4, 2.8)),
                           ("s_throughput", rng.uniform(900, 1100))):
            self.gauges[key].set(value)
        queries = rng.randint(500, 1000)
        drafts = rng.randint(20, 40)
        for name, amount in (("vllm:prefix_cache_queries", queries), ("vllm:prefix_cache_hits", queries // 2),
                             ("vllm:spec_decode_num_drafts", drafts), ("vllm:spec_decode_num_draft_tokens", 2 * drafts),
                             ("vllm:spec_decode_num_accepted_tokens", int(1.6 * drafts)),
                             ("vllm:prompt_tokens", queries), ("vllm:generation_tokens", 3 * drafts),
                             ("vllm:num_preemptions", rng.randint(0, 1)), ("sglang:prompt_tokens", queries),
                             ("sglang:cached_tokens", queries // 3)):
            self.counters[name].inc(amount)
        self.per_pos[0].inc(int(0.9 * drafts))
        self.per_pos[1].inc(int(0.7 * drafts))
        for key, scale in (("ttft", 0.1), ("itl", 0.03), ("queue", 0.5), ("s_ttft", 0.3), ("s_itl", 0.01)):
            for _ in range(3):
                self.hist[key].observe(rng.expovariate(1 / scale))
        for layer in self.eplb:
            for _ in range(16):
                layer.observe(min(7, int(rng.expovariate(0.4))))  # rank 0 is the hot one


class RouterFeed:
    """The router's window (agents.router.window) over made-up requests, posted as the router posts it."""

    def __init__(self, controller_url: str):
        from agents.router.window import RouterWindows

        self.url, self.rng = controller_url, random.Random(3)
        self.windows = RouterWindows("sim-g", "router-0", 1.0, time.time())

    def step(self) -> None:
        for _ in range(self.rng.randint(1, 3)):
            kind = "local" if self.rng.random() < 0.3 else "pd"
            self.windows.arrived(kind, self.rng.randint(50, 400))
            self.windows.first_token(kind, self.rng.expovariate(1 / 0.2))
            self.windows.tokens(self.rng.expovariate(1 / 0.02), 16)
            self.windows.finished(16, self.rng.uniform(0.4, 1.0), is_failed=False)
        closed = self.windows.roll(time.time(), threshold=64)
        if closed is not None:
            httpx.post(f"{self.url}/v1/agents/router-window", content=closed.model_dump_json(),
                       headers={"Authorization": f"Bearer {AGENT}", "Content-Type": "application/json"}, timeout=5)


class LocalGroup:
    """An EP group whose ranks step in one thread, in lockstep: agreement is trivially reached."""

    def __init__(self, rank: int, size: int):
        self.rank, self.size = rank, size

    def agree_max(self, values: list[int]) -> list[int]:
        return list(values)


class SimRanks:
    """Simulated EP ranks with the real agent embedded: steps, windows, /metrics, snapshots posted."""

    def __init__(self, controller_url: str):
        from agents.protocol import Identity, ModelShape, Role
        from agents.sim.engine import SimConfig, SimEngine
        from agents.telemetry.agent import Agent
        from agents.telemetry.engine import RuntimeInfo
        from agents.telemetry.poster import ControllerLink, Registration

        model = ModelShape(name="sim-moe-32e", num_layers=4, num_experts=32, num_groups=4, top_k=4)
        self.ranks, self.targets, self.servers = [], [], []
        for role, ep_size, slots in (("prefill", 2, 20), ("decode", 4, 10)):
            for rank in range(ep_size):
                cfg = SimConfig(num_layers=4, num_experts=32, num_groups=4, top_k=4, ep_size=ep_size, ep_rank=rank,
                                slots_per_rank=slots, is_paced=False, seed=11)
                engine = SimEngine(cfg, group=LocalGroup(rank, ep_size))
                registry = CollectorRegistry()
                identity = Identity(deployment="sim-g", instance=f"sim-g-{role}-0", role=Role(role), rank=rank,
                                    ep_size=ep_size, slots_per_rank=slots, node=f"{role}-node0",
                                    gpu_uuid=f"GPU-{role}-{rank}")
                agent = Agent(engine, identity=identity, model=model, registry=registry,
                              link=ControllerLink(controller_url, AGENT),
                              registration=Registration(ADMIN, model, {"mode": "auto", "cooldown_seconds": 0}),
                              window_seconds=1.0, runtime=RuntimeInfo("sim", cfg.num_speculative_tokens))
                port = free_port()
                server, _ = start_http_server(port, addr="127.0.0.1", registry=registry)
                self.ranks.append((engine, agent))
                self.servers.append(server)
                self.targets.append(f"127.0.0.1:{port}")

    def step(self, n: int) -> None:
        for engine, agent in self.ranks:
            if n % 4 == 0:  # a few real requests besides the synthetic batch: TTFT, ITL and queue samples
                engine.add_request(list(range(1, 40)), _params(max_tokens=6))
            _, stats = engine.step()
            agent.on_step(stats)
            agent.tick()

    def close(self) -> None:
        for _, agent in self.ranks:
            agent.close()
        for server in self.servers:
            server.shutdown()


def serve_text_exposition(registry: CollectorRegistry) -> tuple[ThreadingHTTPServer, int]:
    """/metrics in the classic text format, names as written. (prometheus_client's own server negotiates
    OpenMetrics with Prometheus and then escapes `vllm:x` to `vllm_x`; vLLM and SGLang scrapes show colons.)"""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            body = generate_latest(registry)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


def _params(**kwargs):
    from agents.runtime.sequence import SamplingParams

    return SamplingParams(**kwargs)


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    binary = require_binary("prometheus", "prometheus")
    pytest.importorskip("torch", reason="the simulated engine's stats carry torch tensors (the runtime extra)")
    from controlplane.cmd.serve import Controller
    from controlplane.config import Settings

    tmp = tmp_path_factory.mktemp("grafana")
    controller = Controller(Settings(database_url=f"sqlite:///{tmp / 'c.db'}", port=free_port(), api_token=ADMIN,
                                     agent_token=AGENT, window_seconds=1.0, reconcile_seconds=0.5))
    controller.start()
    # registered up front with the policy this test wants (auto, no cooldown: a placement change lands within
    # seconds, so the placement-change annotation has data), rather than by whichever agent posts first
    model = {"name": "sim-moe-32e", "num_layers": 4, "num_experts": 32, "num_groups": 4, "top_k": 4}
    # a latency SLO: the pool planner sizes its pools (no scaler here: the sizes are recorded, the ranks stay)
    policy = {"mode": "auto", "cooldown_seconds": 0, "slo": {"ttft_p90_seconds": 1.0, "itl_p90_seconds": 0.1},
              "pool_predictive_interval_seconds": 10}
    registered = httpx.put(f"{controller.url}/v1/deployments/sim-g", headers={"Authorization": f"Bearer {ADMIN}"},
                           json={"model": model, "policy": policy})
    assert registered.status_code == 200, registered.text
    ranks = SimRanks(controller.url)
    router = RouterFeed(controller.url)
    engines = NativeEngines()
    engines_server, engines_port = serve_text_exposition(engines.registry)
    stop = threading.Event()

    def drive() -> None:
        n = 0
        while not stop.is_set():
            ranks.step(n)
            if n % 4 == 0:
                router.step()
            engines.step()
            n += 1
            stop.wait(0.05)

    driver = threading.Thread(target=drive, name="sim-driver", daemon=True)
    driver.start()

    port = free_port()
    config = tmp / "prometheus.yml"
    config.write_text(json.dumps({  # JSON is YAML
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [
            {"job_name": "moectl-agents", "static_configs": [{"targets": ranks.targets}]},
            {"job_name": "moectl-controller", "static_configs": [{"targets": [controller.url.split("//")[1]]}]},
            {"job_name": "engines", "static_configs": [{"targets": [f"127.0.0.1:{engines_port}"]}]},
        ]}))
    log = open(tmp / "prometheus.log", "w")  # noqa: SIM115 (closed below)
    process = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'data'}",
                                f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                               stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/-/ready", timeout=30)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=20)
        log.close()
        stop.set()
        driver.join(timeout=10)
        ranks.close()
        engines_server.shutdown()
        controller.stop()


def _query(url: str, expr: str) -> tuple[str | None, list]:
    """(error, result) of an instant query."""
    answer = httpx.get(f"{url}/api/v1/query", params={"query": expr}, timeout=10).json()
    if answer["status"] != "success":
        return f"{answer.get('errorType')}: {answer.get('error')}", []
    return None, answer["data"]["result"]


def _has_finite_value(result: list) -> bool:
    return any(math.isfinite(float(series["value"][1])) for series in result)


@pytest.mark.slow
def test_every_query_is_valid_and_returns_data(prometheus):
    pending = {(name, where): substitute(expr) for name, where, expr in queries()}
    assert len(pending) >= 50
    # the predicted-latency panel has data once the planner has fitted a latency model on enough warm windows:
    # 20-45 s alone, and over 90 s beside another suite (load average ~8)
    invalid, deadline = {}, time.monotonic() + 240
    while pending and time.monotonic() < deadline:
        for key, expr in list(pending.items()):
            error, result = _query(prometheus, expr)
            if error and "parse error" in error:
                invalid[key] = error  # waiting will not fix this
                del pending[key]
            elif not error and _has_finite_value(result):
                del pending[key]
        time.sleep(1)
    assert not invalid, "invalid PromQL:\n" + "\n".join(f"{k}: {v}" for k, v in invalid.items())
    assert not pending, "no data after 240s:\n" + "\n".join(f"{k[0]} {k[1]}: {v}" for k, v in pending.items())


@pytest.mark.slow
def test_every_variable_query_lists_values(prometheus):
    for name, variable, definition in variable_queries():
        match = re.fullmatch(r"label_values\((?:(.+),\s*)?(\w+)\)", definition)
        assert match, f"{name}: variable {variable}: {definition!r} is not label_values(...)"
        selector, label = match.groups()
        params = {"match[]": substitute(selector)} if selector else {}
        deadline = time.monotonic() + 30
        while True:
            values = httpx.get(f"{prometheus}/api/v1/label/{label}/values", params=params, timeout=10).json()["data"]
            if values or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert values, f"{name}: variable {variable} ({definition}) lists nothing"
