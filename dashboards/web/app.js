// The dashboard: picks a deployment and pool, polls the controller, and hands the data to the panels.
// Polling rather than SSE: the controller's read API already serves everything, and a poll that fails
// just shows "cannot reach" and retries, which is the behaviour wanted when the controller restarts.
// The expert/GPU matrices are refetched only when a new window or placement exists: at 58 x 256 x 320
// they are the only large payload.

import { ApiError, api, can, token } from "./api.js";
import { drawLegend } from "./colours.js";
import { derive } from "./derive.js";
import { GpuBars } from "./gpuload.js";
import { Heatmap } from "./heatmap.js";
import { OverviewCharts, renderTiles } from "./overview.js";
import { PlacementView } from "./placement.js";
import { PolicyEditor } from "./policy.js";
import { PoolsPanel } from "./pools.js";
import { Timeline } from "./timeline.js";

const POLL_MS = 2000;
const LOAD_MAX_AGE_MS = 15000; // refetch matrices at least this often, in case a window was rewritten
const $ = (id) => document.getElementById(id);

const state = {
  me: { name: "anonymous", role: "viewer" },
  deployments: [], deployment: null, role: null, layer: null,
  overview: null, actions: [], load: null, derived: null, loadKey: "", loadFetchedAt: 0, policy: null,
  inFlight: false,
};

const heatmap = new Heatmap($("heatmap"), $("heatmap-tip"), { onPickLayer: (layer) => pickLayer(layer) });
const gpuBars = new GpuBars($("gpu-bars"), $("gpu-tip"));
const placement = new PlacementView($("placement-grid"), $("placement-tip"), $("placement-summary"), $("placement-gpu"));
const charts = new OverviewCharts($("chart-imbalance"), $("chart-ratios"));
const pools = new PoolsPanel($("pools"));
const policy = new PolicyEditor($("policy"), { onSaved: (saved) => { state.policy = saved.policy; poll(); } });
const timeline = new Timeline($("timeline-strip"), document.querySelector("#timeline tbody"), {
  onApprove: (id) => act(() => api.approve(id), `approved #${id}`),
  onReject: (id) => act(() => api.reject(id), `rejected #${id}`),
});

function showError(message) {
  const el = $("error");
  el.textContent = message || "";
  el.hidden = !message;
  $("live").className = message ? "live down" : "live ok";
}

function readHash() {
  const params = new URLSearchParams(location.hash.slice(1));
  const layer = params.get("layer");
  return { deployment: params.get("deployment"), role: params.get("pool"), layer: layer === null || layer === "" ? null : Number(layer) };
}

function writeHash() {
  const params = new URLSearchParams();
  if (state.deployment) params.set("deployment", state.deployment);
  if (state.role) params.set("pool", state.role);
  if (state.layer !== null) params.set("layer", String(state.layer));
  history.replaceState(null, "", `#${params}`);
}

// ---- who am I: the token decides which controls are live ----

async function refreshWhoami() {
  try {
    state.me = await api.whoami();
  } catch (err) {
    if (err instanceof ApiError && err.status === 401 && token.get()) {
      token.set("");
      showError(`that token was refused (${err.detail}); showing read-only`);
      state.me = await api.whoami().catch(() => ({ name: "anonymous", role: "viewer" }));
    } else {
      state.me = { name: "anonymous", role: "viewer" };
    }
  }
  const badge = $("whoami");
  const role = ["viewer", "operator", "admin"].includes(state.me.role) ? state.me.role : "viewer";
  badge.dataset.role = role;
  badge.textContent = role === "viewer" ? `read-only (${state.me.name})` : `${state.me.name}: ${role}`;
  document.body.dataset.role = role;
  for (const button of document.querySelectorAll(".needs-operator")) {
    button.disabled = !can(role, "operator");
    button.title = can(role, "operator") ? "" : "needs an operator token";
  }
  policy.setRole(role, state.me.name);
  timeline.role = role;
  timeline.render();
}

$("token-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  token.set($("token").value.trim());
  $("token").value = "";
  showError("");
  await refreshWhoami();
});
$("token-forget").addEventListener("click", async () => { token.set(""); await refreshWhoami(); });

// ---- operator actions ----

async function act(call, done) {
  const msg = $("actions-msg");
  msg.className = "msg"; msg.textContent = "…";
  try {
    const result = await call();
    msg.textContent = done;
    poll();
    return result;
  } catch (err) {
    msg.className = "msg bad";
    msg.textContent = err instanceof ApiError ? `${err.status}: ${err.detail}` : String(err);
    poll();
    return null;
  }
}

async function rebalance(dryRun) {
  const results = await act(() => api.rebalance(state.deployment, dryRun, null), dryRun ? "preview:" : "rebalance requested:");
  if (!results) return;
  $("actions-msg").textContent += " " + results.map((r) => {
    const p = r.predicted ? ` ${r.predicted.imbalance_before.toFixed(2)} → ${r.predicted.imbalance_after.toFixed(2)}, ${r.predicted.moved_slots} slots` : "";
    const a = r.action ? ` (action #${r.action.id}, ${r.action.status})` : "";
    return `${r.role}: ${r.decision}${p}${a} — ${r.reason}`;
  }).join("; ");
  for (const r of results) if (r.action) timeline.update(r.action);
}
$("rebalance").addEventListener("click", () => rebalance(false));
$("rebalance-dry").addEventListener("click", () => rebalance(true));

// ---- selection ----

function pickLayer(layer) {
  state.layer = layer;
  writeHash();
  renderLoad();
}

$("deployment").addEventListener("change", (ev) => {
  state.deployment = ev.target.value; state.role = null; state.layer = null; state.load = null; state.loadKey = "";
  writeHash(); poll(); // poll() loads the new deployment's policy
});
$("pool").addEventListener("change", (ev) => {
  state.role = ev.target.value; state.layer = null; state.loadKey = "";
  writeHash(); poll();
});

function fillSelect(select, values, current) {
  const same = select.options.length === values.length && [...select.options].every((o, i) => o.value === values[i]);
  if (!same) select.replaceChildren(...values.map((v) => new Option(v, v)));
  select.value = current ?? "";
}

// ---- rendering ----

function renderLoad() {
  const d = state.derived;
  if (!d) return;
  heatmap.setData(d, state.layer);
  gpuBars.setData(d, state.layer);
  placement.setData(d, state.layer);
  $("gpu-sub").textContent = gpuBars.caption();
  $("experts-sub").textContent = `${state.role} · ${d.L} layers × ${d.E} experts · window ${d.windowIndex ?? "–"}`
    + ` · ${d.hot} hot (≥ 2× layer mean), ${d.replicated} replicated`;
  $("placement-sub").textContent = `${state.role} · layer ${placement.layer}${state.layer === null ? " (auto: click the heatmap to pick)" : ""}`;
}

function renderOverview() {
  const o = state.overview;
  if (!o) return;
  renderTiles($("tiles"), o, state.policy);
  // engine: bundled, or SGLang / vLLM steered from outside by moectl's adapters (and how a change applies there)
  const engine = o.engine && o.engine !== "bundled" ? ` · engine ${o.engine} (${o.engine_applies})` : "";
  $("overview-sub").textContent = `${o.deployment} · ${o.model.name}: ${o.model.num_layers} MoE layers × ${o.model.num_experts} experts, top-${o.model.top_k}${engine}`;
  charts.update(o, state.role, state.actions, state.policy);
  pools.update(o, state.actions);
  const starts = o.pools.flatMap((p) => p.history.map((h) => h.start));
  const oldest = Math.min(...starts, ...state.actions.map((a) => a.created_at), o.updated_at - 60);
  timeline.setData(state.actions, [oldest, o.updated_at], state.me.role);
}

// ---- polling ----

async function poll() {
  if (state.inFlight || document.hidden) return;
  state.inFlight = true;
  try {
    state.deployments = await api.deployments();
    const names = state.deployments.map((d) => d.name);
    if (!names.length) {
      $("overview-sub").textContent = "no deployments registered yet: start workers or `moectl up`";
      fillSelect($("deployment"), [], null);
      showError("");
      return;
    }
    if (!names.includes(state.deployment)) state.deployment = names[0];
    fillSelect($("deployment"), names, state.deployment);

    const [overview, actions] = await Promise.all([api.overview(state.deployment), api.actions(state.deployment)]);
    state.overview = overview; state.actions = actions;
    const roles = overview.pools.map((p) => p.role);
    if (!roles.includes(state.role)) state.role = roles[0] || null;
    fillSelect($("pool"), roles, state.role);
    if (policy.deployment !== state.deployment) {
      await policy.load(state.deployment, true);
    } else {
      policy.notice(overview.policy_version);
    }
    state.policy = policy.currentPolicy || state.policy;
    renderOverview();

    const pool = overview.pools.find((p) => p.role === state.role);
    // a window's ranks post one by one: its token count still grows after it first appears
    const newest = pool && pool.history.length ? pool.history[pool.history.length - 1] : null;
    const key = `${state.deployment}/${state.role}/${newest && newest.index}/${newest && newest.tokens}/${pool ? pool.placement_version : ""}`;
    if (pool && (key !== state.loadKey || Date.now() - state.loadFetchedAt > LOAD_MAX_AGE_MS)) {
      const load = await api.load(state.deployment, state.role);
      state.load = load; state.derived = derive(load); state.loadKey = key; state.loadFetchedAt = Date.now();
      renderLoad();
    }
    $("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
    showError("");
    document.body.dataset.ready = "1"; // for tests and scripts: the first full render happened
  } catch (err) {
    showError(err instanceof ApiError ? (err.status ? `${err.status}: ${err.detail}` : err.detail) : String(err));
  } finally {
    state.inFlight = false;
  }
}

async function start() {
  drawLegend($("heatmap-legend"));
  Object.assign(state, readHash());
  await refreshWhoami();
  await poll();
  setInterval(poll, POLL_MS);
  document.addEventListener("visibilitychange", () => { if (!document.hidden) poll(); });
  // canvases follow the layout (window resize, panel reflow) without waiting for the next data
  let resizeFrame = 0;
  new ResizeObserver(() => {
    cancelAnimationFrame(resizeFrame);
    resizeFrame = requestAnimationFrame(() => { if (state.derived) { heatmap.render(); gpuBars.render(); placement.render(); } });
  }).observe($("main"));
}

// exposed for scripts and benchmarks (read-only use): the state and a way to re-render on demand
window.moectl = { state, heatmap, gpuBars, placement, poll, renderLoad, derive };
start();
