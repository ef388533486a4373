// Pools: the pool planner at a glance (prefill/decode pools, or a unified pool of vLLM servers). Replicas per pool (ready, starting, draining, bounds),
// each latency target against what the routers measured, the load the pools are sized for and the last
// forecast, the PD-aware threshold, and why each pool is as it is; over time, the request rate and the
// replicas that reported each window, with the scaling actions marked where they were made.

import uPlot from "./vendor/uplot-1.6.32/uPlot.esm.js";

const PLOT_HEIGHT = 150;
const seconds = (v) => (v === null || v === undefined ? "–" : v < 1 ? `${(v * 1000).toFixed(0)} ms` : `${v.toFixed(2)} s`);
const rate = (v) => (v === null || v === undefined ? "–" : `${v.toFixed(2)} req/s`);

function tile(label, value, { cls = "", sub = "", field = "" } = {}) {
  const div = document.createElement("div");
  div.className = `tile ${cls}`;
  const span = document.createElement("span"); span.textContent = label;
  const b = document.createElement("b"); b.textContent = value;
  if (field) b.dataset.field = field;
  div.append(span, b);
  if (sub) { const small = document.createElement("small"); small.textContent = ` ${sub}`; div.append(small); }
  return div;
}

export class PoolsPanel {
  constructor(section) {
    this.section = section;
    this.tiles = section.querySelector("#pool-tiles");
    this.reasons = section.querySelector("#pool-reasons");
    this.sub = section.querySelector("#pools-sub");
    this.chartEl = section.querySelector("#chart-pools");
    this.u = null; this.marks = [];
  }

  update(o, actions) {
    const plan = o.pool_plan;
    this.section.hidden = !plan;
    if (!plan) return;
    const m = plan.measured || {};
    this.sub.textContent = `planned ${new Date(plan.at * 1000).toLocaleTimeString()}`
      + (plan.gpu_budget ? ` · GPU budget ${plan.gpu_budget}` : "");
    const tiles = plan.pools.map((p) => tile(`${p.role} replicas`, `${p.ready + p.starting}`, {
      field: `replicas-${p.role}`, cls: p.unschedulable ? "bad" : p.starting || p.draining ? "warn" : "",
      sub: [`${p.ready} ready`, p.starting ? `${p.starting} starting` : "", p.draining ? `${p.draining} draining` : "",
        p.unschedulable ? `${p.unschedulable} unschedulable (cluster full)` : "",
        `bounds ${p.min}..${p.max}`].filter(Boolean).join(" · ") }));
    for (const [name, target] of Object.entries(plan.slo)) {
      const value = m[name];
      tiles.push(tile(name.replace("_", " "), seconds(value), { field: `slo-${name}`,
        cls: value === null || value === undefined ? "" : value > target ? "bad" : "good", sub: `target ${seconds(target)}` }));
    }
    tiles.push(tile("request rate", rate(m.request_rate), { field: "request-rate",
      sub: plan.load ? `sized for ${rate(plan.load.request_rate)}` : "" }));
    const f = plan.forecast;
    tiles.push(tile("forecast", f ? rate(f.request_rate) : "–", { field: "forecast",
      sub: f ? `${f.method}, next ${f.horizon_seconds.toFixed(0)} s${f.is_backtested ? "" : " (short history)"}` : "at the next predictive step" }));
    tiles.push(tile("local prefill below", plan.threshold.tokens === null ? "–" : `${plan.threshold.tokens} tok`,
      { field: "threshold", sub: m.local_prefill_share === null || m.local_prefill_share === undefined ? ""
        : `${(m.local_prefill_share * 100).toFixed(0)}% of requests` }));
    this.tiles.replaceChildren(...tiles);
    this.reasons.replaceChildren(...plan.pools.map((p) => {
      const li = document.createElement("li");
      li.dataset.role = p.role;
      const b = document.createElement("b"); b.textContent = `${p.role}: ${p.decision.kind}`;
      const pred = p.decision.predicted && p.decision.predicted.slo
        ? ` (predicted ${p.decision.predicted.slo} ${seconds(p.decision.predicted.seconds)} at ${p.decision.predicted.replicas})` : "";
      li.append(b, ` ${p.decision.current} → ${p.decision.target}: ${p.decision.reason}${pred}`);
      return li;
    }));
    this.marks = actions.filter((a) => a.kind === "pool_size" || a.kind === "local_prefill_threshold");
    this.chart(o.pool_history || []);
  }

  chart(points) {
    const xs = points.map((p) => p.end);
    const data = [xs, points.map((p) => p.request_rate), points.map((p) => p.replicas.prefill ?? null),
      points.map((p) => p.replicas.decode ?? null), points.map((p) => p.replicas.unified ?? null)];
    if (!this.u) {
      const width = Math.max(200, this.chartEl.clientWidth);
      this.u = new uPlot({
        width, height: PLOT_HEIGHT, legend: { live: true }, scales: { x: { time: true }, n: { range: (u, min, max) => [0, Math.max(3, max + 1)] } },
        series: [{}, { label: "requests/s", stroke: "#2f5fd0", width: 2 },
          { label: "prefill replicas", stroke: "#d8763b", width: 2, scale: "n", paths: uPlot.paths.stepped({ align: 1 }) },
          { label: "decode replicas", stroke: "#3ba86a", width: 2, scale: "n", paths: uPlot.paths.stepped({ align: 1 }) },
          { label: "unified replicas", stroke: "#7a4fd0", width: 2, scale: "n", paths: uPlot.paths.stepped({ align: 1 }) }],
        axes: [{ size: 28 }, { size: 44 }, { side: 1, scale: "n", size: 30, grid: { show: false } }],
        hooks: { draw: [(u) => this.drawMarks(u)] },
      }, data, this.chartEl);
      new ResizeObserver(() => this.u.setSize({ width: Math.max(200, this.chartEl.clientWidth), height: PLOT_HEIGHT })).observe(this.chartEl);
    } else {
      this.u.setData(data);
    }
    this.chartEl.dataset.points = xs.length;
  }

  /** Scaling actions as vertical lines where they were made. */
  drawMarks(u) {
    const ctx = u.ctx, { left, top, width, height } = u.bbox;
    ctx.save();
    for (const a of this.marks) {
      const x = u.valToPos(a.created_at, "x", true);
      if (x < left || x > left + width) continue;
      ctx.strokeStyle = a.kind === "pool_size" ? "#8a3ffc" : "#9a6700"; ctx.lineWidth = 2 * (window.devicePixelRatio || 1);
      ctx.setLineDash(a.status === "planned" || a.status === "awaiting_approval" ? [4, 4] : []);
      ctx.beginPath(); ctx.moveTo(x, top); ctx.lineTo(x, top + height); ctx.stroke();
    }
    ctx.restore();
  }
}
