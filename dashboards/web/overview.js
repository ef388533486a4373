// Overview of one deployment: the numbers the seeds' teams asked for on one screen (tiles), and how the
// straggler factor and the ratios moved over the stored windows (uPlot), with the controller's actions
// drawn on the imbalance chart so cause and effect sit on one time axis.

import uPlot from "./vendor/uplot-1.6.32/uPlot.esm.js";
import { fmt, pct } from "./colours.js";

const PLOT_HEIGHT = 150;
const POOL_COLOURS = ["#2f5fd0", "#d8763b", "#3ba86a", "#8a3ffc"];
const STATUS_COLOURS = { awaiting_approval: "#e0a800", applied: "#1e88e5", verified: "#2e7d32", planned: "#90a4ae",
  rolled_back: "#c62828", failed: "#c62828", rejected: "#9e9e9e", superseded: "#9e9e9e", recorded: "#6d4c41",
  adopted: "#00897b" };

function tile(label, value, { cls = "", sub = "", field = "" } = {}) {
  const div = document.createElement("div");
  div.className = `tile ${cls}`;
  const span = document.createElement("span"); span.textContent = label;
  const b = document.createElement("b"); b.textContent = value;
  if (String(value).length > 12) b.className = "long"; // lists (pools, versions) wrap less in a smaller font
  if (field) b.dataset.field = field;
  div.append(span, b);
  if (sub) { const small = document.createElement("small"); small.textContent = ` ${sub}`; div.append(small); }
  return div;
}

const seconds = (v) => (v === null || v === undefined ? "–" : v < 1 ? `${(v * 1000).toFixed(0)} ms` : `${v.toFixed(2)} s`);

/** Groups (and nodes) each pool's tokens reached against the group limit in force; red when the controller
 * finds the limit configured but not in effect (the seeds' incident), with its reason on hover. */
function reachTile(pools) {
  const reaches = pools.filter((x) => x.routing_reach).map((x) => ({ role: x.role, ...x.routing_reach }));
  const measured = reaches.filter((r) => r.groups_per_token_mean !== null && r.groups_per_token_mean !== undefined);
  const violated = reaches.filter((r) => r.is_violated);
  const value = measured.map((r) => `${r.role} ${fmt(r.groups_per_token_mean)}`
    + (r.nodes_per_token_mean === null ? "" : ` / ${fmt(r.nodes_per_token_mean)}`)).join(" · ") || "–";
  const limits = [...new Set(reaches.map((r) => r.topk_group).filter((v) => v !== null && v !== undefined))];
  const sub = violated.length ? `limit NOT in effect: ${violated.map((r) => r.role).join(", ")}`
    : limits.length ? `limit ${limits.join(" / ")} groups` : "no group limit";
  const cls = violated.length ? "bad" : measured.length && limits.length ? "good" : "";
  const div = tile("groups / nodes per token", value, { cls, sub, field: "routing_reach" });
  div.title = violated.map((r) => `${r.role}: ${r.reason}`).join("\n") || (reaches[0] ? reaches[0].reason : "");
  if (violated.length) div.dataset.violated = violated.map((r) => r.role).join(",");
  return div;
}

/** The dispatch-time split's per-step straggler of each pool's last window: with the split / with the window's
 * fixed shares, and the per-step bound no split beats; what the fast loop recovers under the placement. */
function stepTile(pools) {
  const rows = pools.map((x) => ({ role: x.role, s: x.history && x.history.length ? x.history[x.history.length - 1].step_imbalance : null }))
    .filter((r) => r.s);
  const value = rows.map((r) => `${r.role} ${fmt(r.s.split)} / ${fmt(r.s.shares)}`).join(" · ") || "–";
  const sub = rows.length ? `split / window shares · bound ${rows.map((r) => fmt(r.s.bound)).join(" / ")}`
    : "not measured (worker --dispatch-split)";
  return tile("per-step busiest / mean", value, { sub, field: "step_imbalance" });
}

export function renderTiles(root, o, policy) {
  const p = policy || {};
  const threshold = p.imbalance_threshold ?? 1.15;
  const imbalanceCls = o.imbalance === null ? "" : o.imbalance > threshold ? "bad" : o.imbalance > 1 + (threshold - 1) / 2 ? "warn" : "good";
  const a2aTarget = p.all2all_share_target ?? 0.3;
  const a2aCls = o.all2all_share === null ? "" : o.all2all_share > a2aTarget ? "bad" : "good";
  const mtpCls = o.mtp_acceptance === null || !p.mtp_acceptance_floor ? "" : o.mtp_acceptance < p.mtp_acceptance_floor ? "bad" : "good";
  // per draft position: where speculation stops paying shows up as a steep drop from one position to the next
  const byPosition = (o.mtp_acceptance_by_position || []).map((v, i) => `#${i + 1} ${pct(v)}`).join(" · ");
  const mtpSub = [byPosition, p.mtp_acceptance_floor ? `floor ${pct(p.mtp_acceptance_floor)}` : ""].filter(Boolean).join(" · ");
  const pools = o.pools.map((x) => `${x.role} EP${x.ep_size}×${x.slots_per_rank}`).join(" · ") || "none reporting";
  const versions = o.pools.map((x) => `${x.role} v${x.applied_placement_version ?? `${x.placement_version}…`}`).join(" · ") || "–";
  // knobs the loop leaves alone after a reverted change, with the evidence on hover
  const parked = o.pools.flatMap((x) => (x.parked || []).map((k) => ({ ...k, role: x.role })));
  const parkedTile = tile("parked knobs", parked.length ? parked.map((k) => `${k.role} ${k.knob}`).join(" · ") : "none",
    { cls: parked.length ? "warn" : "", sub: parked.length ? `since action #${parked.map((k) => k.action_id).join(", #")}` : "", field: "parked" });
  parkedTile.title = parked.map((k) => `${k.role} ${k.knob}: ${k.reason}`).join("\n");
  const diagnoses = o.pools.filter((x) => x.mtp_diagnosis).map((x) => ({ ...x.mtp_diagnosis, role: x.role }));
  const diagnosisTile = tile("MTP diagnosis", diagnoses.length ? diagnoses.map((d) => `${d.role}: ${d.cause.replaceAll("_", " ")}`).join(" · ") : "–",
    { cls: diagnoses.length ? "warn" : "", sub: diagnoses.length ? "" : (p.mtp_acceptance_floor ? "above its floor" : "no floor set"), field: "mtp_diagnosis" });
  diagnosisTile.title = diagnoses.map((d) => `${d.role}: ${d.reason}`).join("\n");
  // the floor of the pool shown: above the threshold no placement can meet it, and the pool's shape is the limit
  const worst = o.pools.filter((x) => x.imbalance !== null).sort((a, b) => b.imbalance - a.imbalance)[0];
  const floor = worst ? worst.imbalance_floor ?? null : null;
  const isShapeLimited = floor !== null && floor > threshold;
  const imbalanceTile = tile("busiest GPU / mean", fmt(o.imbalance), { cls: imbalanceCls,
    sub: `rebalance > ${fmt(threshold)}` + (floor === null ? "" : ` · floor ${fmt(floor)}`) + (isShapeLimited ? ": the shape's limit" : ""),
    field: "imbalance" });
  if (isShapeLimited) {
    imbalanceTile.dataset.shapeLimited = worst.role;
    imbalanceTile.title = `${worst.role}: no placement of its ${worst.ep_size * worst.slots_per_rank} slots gets under ` +
      `${fmt(floor)} on this load; more slots per GPU lift it (moectl slots ${o.deployment} --role ${worst.role})`;
  }
  // each pool's last priced placement change: what it was predicted to gain against its cost, and what it realised
  const priced = o.pools.filter((x) => (x.priced_changes || []).length).map((x) => ({ role: x.role, c: x.priced_changes[0] }));
  const gained = (r) => (r ? `${fmt(r.gain_seconds)}s` : "…");
  const priceTile = tile("last change: gain / cost → realised",
    priced.length ? priced.map(({ role, c }) => `${role} ${fmt(c.predicted.gain_seconds)}s / ${fmt(c.predicted.cost_seconds)}s → ${gained(c.realised)}`).join(" · ") : "none priced",
    { cls: priced.some(({ c }) => c.realised && !c.realised.is_paying) ? "warn" : "",
      sub: o.pools.map((x) => (x.change_cost ? `${x.role} a change costs ${fmt(x.change_cost.seconds)}s (${x.change_cost.num_measured ? "measured" : "prior"})` : "")).filter(Boolean).join(" · "),
      field: "priced_changes" });
  priceTile.title = o.pools.flatMap((x) => (x.priced_changes || []).map((c) =>
    `${x.role} #${c.action_id} ${c.status}: predicted ${fmt(c.predicted.gain_seconds)}s for ${fmt(c.predicted.cost_seconds)}s (${c.predicted.cost_source}); realised ${gained(c.realised)}`)).join("\n");
  root.replaceChildren(
    tile("mode", o.mode, { sub: `policy v${o.policy_version}`, field: "mode" }),
    imbalanceTile,
    stepTile(o.pools),
    tile("all-to-all share", pct(o.all2all_share), { cls: a2aCls, sub: `target ${pct(a2aTarget)}`, field: "all2all_share" }),
    tile("prefix cache hit", pct(o.prefix_hit_ratio), { field: "prefix_hit_ratio" }),
    tile("MTP acceptance", pct(o.mtp_acceptance), { cls: mtpCls, sub: mtpSub, field: "mtp_acceptance" }),
    diagnosisTile,
    tile("requests running / waiting", `${o.queue.running} / ${o.queue.waiting}`, { cls: o.queue.waiting > o.queue.running ? "warn" : "", field: "queue" }),
    tile("TTFT mean / p99", `${seconds(o.ttft_seconds.mean)} / ${seconds(o.ttft_seconds.p99)}`, { field: "ttft" }),
    tile("ITL mean / p99", `${seconds(o.itl_seconds.mean)} / ${seconds(o.itl_seconds.p99)}`, { field: "itl" }),
    tile("pools (GPUs × slots)", pools, { field: "pools" }),
    tile("placement running", versions, { field: "placement" }),
    tile("routing limit", o.pools.map((x) => `${x.role} ${x.topk_group ?? `${o.model.topk_group ?? "all"} (own)`}`).join(" · ") || "–",
      { sub: "groups per token", field: "topk_group" }),
    tile("expert capacity", o.pools.map((x) => `${x.role} ${x.expert_capacity_factor ?? "none"}`).join(" · ") || "–",
      { cls: o.pools.some((x) => x.dropped_share > 0.01) ? "warn" : "",
        sub: `× an even share; dropped ${o.pools.map((x) => pct(x.dropped_share, 2)).join(" · ") || "–"}`, field: "expert_capacity_factor" }),
    parkedTile,
    priceTile,
    tile("agents fresh / total", `${o.agents.fresh} / ${o.agents.total}`, { cls: o.agents.stale ? "bad" : o.agents.total ? "good" : "", sub: [o.agents.stale ? `${o.agents.stale} stale` : "", o.agents.gone ? `${o.agents.gone} gone` : ""].filter(Boolean).join(", "), field: "agents" }),
    reachTile(o.pools),
  );
}

/** Joins per-pool histories on window start: uPlot wants one x array and null gaps. */
function joinHistories(pools, key) {
  const xs = [...new Set(pools.flatMap((p) => p.history.map((h) => h.start)))].sort((a, b) => a - b);
  const index = new Map(xs.map((x, i) => [x, i]));
  const ys = pools.map((p) => {
    const y = new Array(xs.length).fill(null);
    for (const h of p.history) y[index.get(h.start)] = h[key];
    return y;
  });
  return [xs, ...ys];
}

class Chart {
  constructor(el, makeOpts) { this.el = el; this.makeOpts = makeOpts; this.u = null; this.key = ""; this.marks = []; }

  update(key, seriesMeta, data) {
    const width = Math.max(200, this.el.clientWidth), height = PLOT_HEIGHT;
    if (!this.u || key !== this.key) {
      if (this.u) this.u.destroy();
      this.u = new uPlot(this.makeOpts(seriesMeta, width, height, this), data, this.el);
      this.key = key;
      if (!this.observer) {
        // width follows the panel; height is fixed (the legend below the plot adds its own height)
        this.observer = new ResizeObserver(() => this.u && this.u.setSize({ width: Math.max(200, this.el.clientWidth), height: PLOT_HEIGHT }));
        this.observer.observe(this.el);
      }
    } else {
      this.u.setData(data);
    }
    this.el.dataset.points = data[0].length;
  }
}

function baseOpts(width, height, series, yRange) {
  return {
    width, height, series, legend: { live: true },
    scales: { x: { time: true }, y: { range: yRange } },
    axes: [{ size: 28, grid: { stroke: "#eef0f3" } }, { size: 44, grid: { stroke: "#eef0f3" } }],
    cursor: { points: { size: 5 } },
  };
}

export class OverviewCharts {
  constructor(imbalanceEl, ratiosEl) {
    this.threshold = 1.15;
    this.imbalance = new Chart(imbalanceEl, (meta, w, h, chart) => ({
      ...baseOpts(w, h, [{}, ...meta.map((m, i) => ({ label: m, stroke: POOL_COLOURS[i % POOL_COLOURS.length], width: 2, spanGaps: false,
        value: (u, v) => fmt(v) }))], (u, min, max) => [1, Math.max(2, (max || 1) * 1.05)]),
      hooks: { draw: [(u) => this.drawMarks(u, chart)] },
    }));
    this.ratios = new Chart(ratiosEl, (meta, w, h) => baseOpts(w, h, [{}, ...meta.map((m, i) => ({
      label: m, stroke: ["#8a3ffc", "#3ba86a", "#d8763b"][i], width: 2, value: (u, v) => pct(v, 1) }))], [0, 1]));
  }

  /** Actions as vertical lines at their time, coloured by status; the policy threshold as a dashed line. */
  drawMarks(u, chart) {
    const ctx = u.ctx, { left, top, width, height } = u.bbox;
    ctx.save();
    const y = u.valToPos(this.threshold, "y", true);
    if (y >= top && y <= top + height) {
      ctx.setLineDash([5, 4]); ctx.strokeStyle = "#b3261e"; ctx.lineWidth = 1;
      ctx.beginPath(); ctx.moveTo(left, y); ctx.lineTo(left + width, y); ctx.stroke(); ctx.setLineDash([]);
    }
    for (const a of chart.marks) {
      const x = u.valToPos(a.created_at, "x", true);
      if (x < left || x > left + width) continue;
      ctx.strokeStyle = STATUS_COLOURS[a.status] || "#555"; ctx.lineWidth = 2 * (window.devicePixelRatio || 1);
      ctx.beginPath(); ctx.moveTo(x, top); ctx.lineTo(x, top + height); ctx.stroke();
    }
    ctx.restore();
  }

  update(o, role, actions, policy) {
    this.threshold = (policy && policy.imbalance_threshold) || 1.15;
    const pools = o.pools;
    this.imbalance.marks = actions;
    this.imbalance.update(pools.map((p) => p.role).join(","), pools.map((p) => p.role), joinHistories(pools, "imbalance"));
    const pool = pools.find((p) => p.role === role) || pools[0];
    const chosen = pool ? [pool] : [];
    const data = [joinHistories(chosen, "all2all_share")[0]];
    for (const key of ["all2all_share", "prefix_hit_ratio", "mtp_acceptance"]) data.push(chosen.length ? joinHistories(chosen, key)[1] : []);
    this.ratios.update("ratios", ["all-to-all share", "prefix hit", "MTP acceptance"], data);
  }
}
