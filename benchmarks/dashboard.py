"""Web dashboard at DeepSeek-V3 decode scale: 58 MoE layers x 256 experts, 320 GPUs (EP320).

Serves dashboards/web as the controller does, with a synthetic read API at that size (Zipf expert load,
a placement with replicas of the hot experts and the one before it, 60 windows of history, 50 actions),
opens it in headless Debian chromium (Playwright, executable_path; nothing downloaded) and measures:
page load to first full render, fetch + JSON parse of the pool's load matrices, derive() (the typed
arrays every panel reads), one full render of heatmap + GPU bars + placement, one poll cycle, and
frame intervals while a pointer sweeps the heatmap and the page polls (every poll refetches the
matrices: the synthetic newest window advances each time, the worst case). Prints a markdown table
and writes it to benchmarks/results/dashboard-<date>.md.

    OMP_NUM_THREADS=1 python -m benchmarks.dashboard [--slots-per-rank 1 9] [--no-write]
"""

from __future__ import annotations

import argparse
import datetime
import json
import mimetypes
import pathlib
import platform
import statistics
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

from agents.protocol import PlacementTable

ROOT = pathlib.Path(__file__).resolve().parents[1]
WEB = ROOT / "dashboards" / "web"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
NUM_LAYERS, NUM_EXPERTS, EP_SIZE = 58, 256, 320
NAME = "deepseek-v3"


def synthetic_api(num_layers: int = NUM_LAYERS, num_experts: int = NUM_EXPERTS, ep_size: int = EP_SIZE,
                  slots_per_rank: int = 1, seed: int = 0) -> dict:
    """Read-API payloads (as the controller's schemas) for one deployment with a decode pool of this size
    and a small prefill pool. `load()` answers a new window each call, as a live controller does."""
    rng = np.random.default_rng(seed)
    num_slots = ep_size * slots_per_rank
    assert num_slots >= num_experts, "every expert needs a slot"
    exponent = rng.uniform(0.8, 1.2, num_layers)[:, None]
    ranks = np.stack([rng.permutation(num_experts) + 1.0 for _ in range(num_layers)])
    popularity = ranks**-exponent
    popularity /= popularity.sum(axis=1, keepdims=True)

    # the placement before: every expert once, the spare slots to the hottest experts, shuffled over GPUs;
    # the current one: a bounded move (~5% of slots) giving the hottest experts' spare slots to others
    previous = np.empty((num_layers, num_slots), dtype=np.int64)
    for layer in range(num_layers):
        hot = np.argsort(-popularity[layer])
        spare = hot[np.arange(num_slots - num_experts) % num_experts]
        previous[layer] = rng.permutation(np.concatenate([np.arange(num_experts), spare]))
    current = previous.copy()
    for layer in range(num_layers):
        counts = np.bincount(current[layer], minlength=num_experts)
        replicas = np.flatnonzero(counts[current[layer]] > 1)  # slots whose expert has another copy
        moved = rng.choice(replicas, size=min(len(replicas), max(1, num_slots // 20)), replace=False)
        current[layer, moved] = rng.choice(np.argsort(-popularity[layer])[:32], size=len(moved))

    state = {"index": 1_000}
    model = {"name": "deepseek-v3", "num_layers": num_layers, "num_experts": num_experts, "num_groups": 8,
             "top_k": 8}
    now = time.time()

    def load() -> dict:
        state["index"] += 1
        tokens = np.stack([rng.multinomial(400_000, p) for p in popularity])  # [L, E] tokens in the window
        gpu = PlacementTable(current).gpu_load(tokens, ep_size)
        return {"role": "decode", "ep_size": ep_size, "slots_per_rank": slots_per_rank, "gpus_per_node": 8,
                "window_index": state["index"], "window_start": now, "window_placement_version": 7,
                "placement_version": 7, "expert_tokens": tokens.astype(float).tolist(),
                "gpu_tokens": np.round(gpu, 1).tolist(), "slot_to_expert": current.tolist(),
                "previous_slot_to_expert": previous.tolist()}

    def history(n: int, start_index: int) -> list[dict]:
        return [{"index": start_index - n + i, "start": now - 5 * (n - i), "placement_version": 7 if i > 40 else 6,
                 "imbalance": float(1.1 + 0.8 * (i <= 40) + 0.05 * rng.random()),
                 "all2all_share": float(0.2 + 0.05 * rng.random()), "prefix_hit_ratio": 0.55,
                 "mtp_acceptance": float(0.8 + 0.03 * rng.random()), "tokens": 400_000} for i in range(n)]

    statuses = ["verified", "applied", "awaiting_approval", "rejected", "rolled_back", "planned", "superseded"]
    actions = [{"id": 50 - i, "role": "decode", "kind": "placement", "trigger": ["loop", "manual", "alert"][i % 3],
                "mode": "auto", "status": statuses[i % len(statuses)], "reason": "imbalance 1.92 > 1.15 for 2 windows",
                "inputs": {"measured_imbalance": [1.9, 1.92]},
                "predicted": {"imbalance_before": 1.92, "imbalance_after": 1.12, "moved_slots": 160},
                "measured": {"imbalance_after": 1.14} if i % 2 else {}, "placement_version": 7 - i // 8,
                "alerts": [], "created_by": "controller", "created_at": now - 30 * i, "updated_at": now - 30 * i}
               for i in range(50)]
    from controlplane.desired import Policy

    policy = {"version": 3, "policy": Policy(mode="auto").model_dump(mode="json"), "created_by": "admin",
              "created_at": now, "note": ""}

    def overview() -> dict:
        index = state["index"] + 1  # the next load() answers this window
        pools = [{"role": "decode", "ep_size": ep_size, "slots_per_rank": slots_per_rank, "placement_version": 7,
                  "applied_placement_version": 7, "imbalance": 1.12,
                  "agents": {"total": ep_size, "fresh": ep_size, "stale": 0}, "history": history(60, index)},
                 {"role": "prefill", "ep_size": 32, "slots_per_rank": 9, "placement_version": 4,
                  "applied_placement_version": 4, "imbalance": 1.05,
                  "agents": {"total": 32, "fresh": 32, "stale": 0}, "history": history(60, index)}]
        return {"deployment": NAME, "model": model, "mode": "auto", "policy_version": 3, "imbalance": 1.12,
                "all2all_share": 0.21, "prefix_hit_ratio": 0.55, "mtp_acceptance": 0.81,
                "queue": {"running": 9000, "waiting": 120}, "ttft_seconds": {"mean": 0.4, "p99": 1.9},
                "itl_seconds": {"mean": 0.03, "p99": 0.08}, "placement_version": {"decode": 7, "prefill": 4},
                "agents": {"total": ep_size + 32, "fresh": ep_size + 32, "stale": 0}, "pools": pools,
                "last_actions": actions[:10], "updated_at": time.time()}

    return {
        "/v1/whoami": lambda: {"name": "anonymous", "role": "viewer"},
        "/v1/deployments": lambda: [{"name": NAME, "model": model, "mode": "auto", "imbalance": 1.12,
                                     "agents": {"total": ep_size + 32, "fresh": ep_size + 32, "stale": 0}}],
        f"/v1/deployments/{NAME}/overview": overview,
        f"/v1/deployments/{NAME}/actions": lambda: actions,
        f"/v1/deployments/{NAME}/pools/decode/load": load,
        f"/v1/deployments/{NAME}/policy": lambda: policy,
        f"/v1/deployments/{NAME}/policy/versions": lambda: [policy],
    }


def openapi() -> dict:
    """The controller's own schema (the policy editor reads the Policy model from it)."""
    from sqlalchemy.orm import sessionmaker

    from controlplane.api.app import create_app
    from controlplane.config import Settings

    return create_app(Settings(), sessionmaker()).openapi()  # the schema only: no session is ever opened


def serve(api: dict) -> tuple[ThreadingHTTPServer, str]:
    """dashboards/web the way the controller serves it (/ and /web/...), plus the synthetic API."""
    schema = json.dumps(openapi()).encode()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            path = self.path.split("?")[0]
            headers = {}
            if path in api:
                body, kind = json.dumps(api[path]()).encode(), "application/json"
                headers = {"ETag": '"3"'} if path.endswith("/policy") else {}
            elif path == "/openapi.json":
                body, kind = schema, "application/json"
            else:
                name = "index.html" if path == "/" else path.removeprefix("/web/")
                file = (WEB / name).resolve()
                if not file.is_relative_to(WEB) or not file.is_file():
                    self.send_error(404)
                    return
                body = file.read_bytes()
                kind = mimetypes.guess_type(file.name)[0] or "application/octet-stream"
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def open_full_scale(browser, url: str, slots_per_rank: int, timeout_ms: int = 60_000):
    """A page showing the synthetic deployment, after its first full render; returns (page, seconds)."""
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    page.set_default_timeout(timeout_ms)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    started = time.perf_counter()
    page.goto(f"{url}/#deployment={NAME}&pool=decode")
    page.wait_for_selector(f"#heatmap[data-layers='{NUM_LAYERS}'][data-experts='{NUM_EXPERTS}']")
    page.wait_for_selector(f"#gpu-bars[data-gpus='{EP_SIZE}']")
    page.wait_for_selector(f"#placement-grid[data-slots='{EP_SIZE * slots_per_rank}']")
    seconds = time.perf_counter() - started
    page.errors = errors
    return page, seconds


REPEAT_JS = """async ([what, n]) => {
  const m = window.moectl, times = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    if (what === "derive") m.derive(m.state.load);
    else if (what === "render") m.renderLoad();
    else if (what === "fetch") {
      await (await fetch(`/v1/deployments/${m.state.deployment}/pools/${m.state.role}/load`)).json();
    } else if (what === "poll") {
      while (m.state.inFlight) await new Promise((r) => setTimeout(r, 10));
      m.state.loadKey = ""; await m.poll();
    }
    times.push(performance.now() - t0);
    await new Promise((r) => requestAnimationFrame(() => r()));
  }
  return times;
}"""

FRAMES_JS = """async (ms) => {
  const canvas = document.getElementById("heatmap"), box = canvas.getBoundingClientRect();
  const frames = [], longTasks = [];
  const observer = new PerformanceObserver((list) => list.getEntries().forEach((e) => longTasks.push(e.duration)));
  observer.observe({ entryTypes: ["longtask"] });
  let last = performance.now(), running = true, i = 0;
  const tick = (now) => {
    frames.push(now - last); last = now;
    // a pointer sweeping the heatmap: the hover readout works on every frame
    canvas.dispatchEvent(new MouseEvent("mousemove", { bubbles: true,
      clientX: box.left + 31 + ((i * 7) % (box.width - 36)), clientY: box.top + 3 + ((i * 3) % (box.height - 18)) }));
    i++;
    if (running) requestAnimationFrame(tick);
  };
  requestAnimationFrame(tick);
  await new Promise((r) => setTimeout(r, ms));
  running = false; observer.disconnect();
  return { frames: frames.slice(1), longTasks };
}"""


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def measure(browser, slots_per_rank: int, repeats: int, sweep_ms: int, shot: pathlib.Path | None = None) -> dict:
    api = synthetic_api(slots_per_rank=slots_per_rank)
    server, url = serve(api)
    try:
        page, load_s = open_full_scale(browser, url, slots_per_rank)
        size = len(json.dumps(api[f"/v1/deployments/{NAME}/pools/decode/load"]()).encode())
        out = {"slots_per_rank": slots_per_rank, "load_s": load_s, "payload_mb": size / 1e6}
        for what in ("fetch", "derive", "render", "poll"):
            out[what] = page.evaluate(REPEAT_JS, [what, repeats])
        sweep = page.evaluate(FRAMES_JS, sweep_ms)
        out["frames"], out["long_tasks"] = sweep["frames"], sweep["longTasks"]
        out["panel_ms"] = {k: float(page.get_attribute(f"#{k}", "data-render-ms"))
                           for k in ("heatmap", "gpu-bars", "placement-grid")}
        out["errors"] = page.errors
        if shot is not None:
            page.screenshot(path=str(shot), full_page=True)
        page.context.close()
        return out
    finally:
        server.shutdown()


NOTES = """Reading it:
- 1 slot per GPU is DeepSeek's decode layout (256 experts + 64 replicas on 320 GPUs); 9 slots per GPU
  (2,880 slots a layer, both placement tables 2 x 167k numbers) is a stress case for the placement view.
- derive() and the three canvas panels take milliseconds: no per-cell DOM, one ImageData for the heatmap.
  The cost that grows with size is fetching and parsing the JSON matrices on the main thread.
- "poll cycle" includes this script's Python server drawing a new synthetic window per request
  (multinomial over 58 x 256 and json.dumps), so it is an upper bound of what a controller adds.
- Frame intervals stay at 16.7 ms (60 Hz) while the pointer sweeps the heatmap; the max is the frame in
  which a poll's JSON parse and re-render ran (one long task at 9 slots per GPU, none at 1).
"""


def table(results: list[dict]) -> str:
    rows = ["| case | load JSON | page load → first render | fetch + parse | derive() | render (3 panels) | "
            "poll cycle | frame interval p50 / p95 / max (hover + polling) | long tasks > 50 ms |",
            "|---|---|---|---|---|---|---|---|---|"]
    def ms(values: list[float]) -> str:
        return f"{statistics.median(values):.1f} ms (p95 {pct(values, 95):.1f})"

    for r in results:
        rows.append(
            f"| {NUM_LAYERS}×{NUM_EXPERTS}, {EP_SIZE} GPUs × {r['slots_per_rank']} slots | {r['payload_mb']:.1f} MB "
            f"| {r['load_s'] * 1000:.0f} ms | {ms(r['fetch'])} | {ms(r['derive'])} | {ms(r['render'])} "
            f"| {ms(r['poll'])} "
            f"| {pct(r['frames'], 50):.1f} / {pct(r['frames'], 95):.1f} / {max(r['frames']):.1f} ms "
            f"| {len(r['long_tasks'])} (max {max(r['long_tasks'], default=0):.0f} ms) |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slots-per-rank", type=int, nargs="+", default=[1, 9],
                        help="1: DeepSeek's decode (256 experts + 64 replicas on 320 GPUs); 9: a stress case")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--sweep-ms", type=int, default=6000)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    artifacts = ROOT / "test-artifacts"
    artifacts.mkdir(exist_ok=True)
    with sync_playwright() as p, tempfile.TemporaryDirectory():
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=CHROMIUM_ARGS)
        results = [measure(browser, s, args.repeats, args.sweep_ms, artifacts / f"web-full-scale-{s}-slots.png")
                   for s in args.slots_per_rank]
        version = browser.version
        browser.close()
    for r in results:
        if r["errors"]:
            print(f"console errors with {r['slots_per_rank']} slots per rank: {r['errors']}")
    today = datetime.date.today().isoformat()
    text = (f"# Web dashboard at DeepSeek-V3 decode scale ({today})\n\n"
            f"{NUM_LAYERS} MoE layers × {NUM_EXPERTS} experts, {EP_SIZE} GPUs; synthetic read API served over local "
            f"HTTP; headless Chromium {version} (software rendering, --disable-gpu) on a shared "
            f"{platform.machine()} machine with 2 cores, viewport 1440×900. Median (p95) of {args.repeats} runs; "
            f"frames over a {args.sweep_ms / 1000:.0f} s pointer sweep of the heatmap while the page polls every "
            f"2 s and each poll refetches the matrices (worst case). Reproduce: "
            f"`OMP_NUM_THREADS=1 python -m benchmarks.dashboard`.\n\n{table(results)}\n\n{NOTES}")
    print(text)
    if not args.no_write:
        out = ROOT / "benchmarks" / "results" / f"dashboard-{today}.md"
        out.write_text(text)
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
