// Actions timeline: every decision the controller recorded, newest first: what triggered it, the plan
// and its reason, predicted vs measured effect, and its status. A strip above places them in time.
// Operators get approve/reject on plans that wait for a person; everyone else sees why they cannot.

import { fmt } from "./colours.js";

const STATUS_TEXT = { awaiting_approval: "awaiting approval", rolled_back: "rolled back" };

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "dataset") Object.assign(node.dataset, v);
    else if (k === "className") node.className = v;
    else node.setAttribute(k, v);
  }
  node.append(...children.filter((c) => c !== null && c !== undefined));
  return node;
}

const when = (t) => new Date(t * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });

const SIGNAL_TEXT = { imbalance: "imbalance", all2all_share: "all-to-all", routing_recall: "recall", mtp_acceptance: "MTP acceptance", dropped_share: "dropped" };
const limitText = (v) => (v === null || v === undefined ? "model's own" : String(v));

/** The change and the effect it aims at: which signal, which way, from what to what. */
function predicted(a) {
  const p = a.predicted || {};
  if (p.replicas_after !== undefined) {
    const slo = p.slo ? `; ${p.slo} ${(p.seconds * 1000).toFixed(0)} ms (target ${(p.target_seconds * 1000).toFixed(0)} ms)` : "";
    return `${p.replicas_before ?? "unsized"} → ${p.replicas_after} replicas${slo}`;
  }
  if (p.tokens_after !== undefined) return `local prefill below ${p.tokens_before} → ${p.tokens_after} tokens`;
  const cap = p.factor_after !== undefined ? `capacity ${p.factor_before ?? "none"} → ${p.factor_after ?? "none"}` : "";
  if (cap) return p.effect ? `${SIGNAL_TEXT[p.effect.signal] || p.effect.signal} ${fmt(p.effect.before)} → ${fmt(p.effect.predicted)} (${cap})` : cap;
  const e = p.effect;
  const knob = p.topk_group_after !== undefined ? `topk_group ${limitText(p.topk_group_before)} → ${limitText(p.topk_group_after)}`
    : p.moved_slots !== undefined ? `${p.moved_slots} slots` : "";
  if (e) return `${SIGNAL_TEXT[e.signal] || e.signal} ${fmt(e.before)} → ${fmt(e.predicted)}${knob ? ` (${knob})` : ""}`;
  if (p.imbalance_before !== undefined) return `${fmt(p.imbalance_before)} → ${fmt(p.imbalance_after)}${knob ? `, ${knob}` : ""}`;
  return knob || "–";
}

/** What happened, beside the prediction: the effect's signal measured under the change, and the verdict. */
function measured(a) {
  const m = a.measured || {};
  const e = (a.predicted || {}).effect;
  const parts = [];
  if (e && m[`${e.signal}_after`] !== undefined) {
    const ok = a.status === "verified" ? "✓" : a.status === "rolled_back" || a.status === "failed" ? "✗" : "";
    parts.push(`${ok} ${SIGNAL_TEXT[e.signal] || e.signal} ${fmt(m[`${e.signal}_after`])}`.trim());
  } else if (m.imbalance_after !== undefined) parts.push(`imbalance ${fmt(m.imbalance_after)}`);
  if (m.replicas_running !== undefined) parts.push(`${m.replicas_running} running`);
  if (m.leaving && m.leaving.length) parts.push(`drained: ${m.leaving.join(", ")}`);
  if (m.verdict) parts.push(m.verdict);
  if (m.parked) parts.push("knob parked");
  if (m.approved_by) parts.push(`approved by ${m.approved_by}`);
  if (m.rejected_by) parts.push(`rejected by ${m.rejected_by}`);
  if (m.reason) parts.push(m.reason);
  return parts.join(" · ") || "–";
}

export class Timeline {
  constructor(strip, tbody, { onApprove, onReject }) {
    this.strip = strip; this.tbody = tbody; this.onApprove = onApprove; this.onReject = onReject;
    this.actions = []; this.role = "viewer"; this.busy = new Set();
  }

  /** actions: newest first (as the API lists them); span: [t0, t1] seconds the strip covers. */
  setData(actions, span, role) {
    this.actions = actions; this.span = span; this.role = role;
    this.render();
  }

  /** Shows an action the server just answered with, without waiting for the next poll. */
  update(action) {
    const i = this.actions.findIndex((a) => a.id === action.id);
    if (i >= 0) this.actions[i] = action; else this.actions.unshift(action);
    this.render();
  }

  render() {
    const [t0, t1] = this.span || [0, 1];
    const canAct = this.role === "operator" || this.role === "admin";
    this.strip.replaceChildren(...this.actions.filter((a) => a.created_at >= t0).map((a) => {
      const left = t1 > t0 ? ((a.created_at - t0) / (t1 - t0)) * 100 : 100;
      const mark = el("button", { className: "mark", type: "button", dataset: { actionId: a.id, status: a.status, kind: a.kind },
        title: `#${a.id} ${a.trigger} · ${STATUS_TEXT[a.status] || a.status} · ${a.reason}` });
      mark.style.left = `${Math.min(100, Math.max(0, left))}%`;
      mark.addEventListener("click", () => this.select(a.id));
      return mark;
    }));
    if (!this.actions.length) {
      this.tbody.replaceChildren(el("tr", {}, el("td", { colspan: 9 }, "no actions yet: the loop records every plan here")));
      return;
    }
    this.tbody.replaceChildren(...this.actions.map((a) => {
      const waiting = a.status === "awaiting_approval";
      let buttons = null;
      if (waiting) {
        const why = canAct ? "" : "needs an operator token";
        const approve = el("button", { type: "button", className: "approve", title: why || "apply this plan now" }, "approve");
        const reject = el("button", { type: "button", className: "reject", title: why || "drop this plan" }, "reject");
        approve.disabled = reject.disabled = !canAct || this.busy.has(a.id);
        approve.addEventListener("click", () => this.act(a.id, this.onApprove));
        reject.addEventListener("click", () => this.act(a.id, this.onReject));
        buttons = el("span", { className: "buttons" }, approve, reject);
      }
      const inputs = a.inputs && Object.keys(a.inputs).length
        ? el("details", {}, el("summary", {}, "inputs"), el("pre", {}, JSON.stringify(a.inputs, null, 1))) : null;
      const alerts = a.alerts && a.alerts.length ? ` · ${a.alerts.length} alert${a.alerts.length > 1 ? "s" : ""}` : "";
      return el("tr", { dataset: { actionId: a.id, status: a.status, trigger: a.trigger, kind: a.kind } },
        el("td", {}, String(a.id)),
        el("td", { title: new Date(a.created_at * 1000).toISOString() }, when(a.created_at)),
        el("td", {}, a.role || "–"),
        el("td", {}, `${a.trigger}${alerts}`, el("br"), el("small", {}, `by ${a.created_by}`)),
        el("td", {}, el("span", { className: "status" }, STATUS_TEXT[a.status] || a.status),
          el("br"), el("small", {}, `${a.mode}${a.placement_version !== null ? ` · v${a.placement_version}` : ""}`)),
        el("td", {}, `${a.kind}: ${a.reason}`, inputs),
        el("td", {}, predicted(a)),
        el("td", {}, measured(a)),
        el("td", {}, buttons));
    }));
  }

  select(id) {
    for (const row of this.tbody.querySelectorAll("tr.selected")) row.classList.remove("selected");
    const row = this.tbody.querySelector(`tr[data-action-id="${id}"]`);
    if (row) { row.classList.add("selected"); row.scrollIntoView({ block: "nearest" }); }
  }

  async act(id, handler) {
    this.busy.add(id);
    this.render();
    try {
      const action = await handler(id);
      if (action) this.update(action);
    } finally {
      this.busy.delete(id);
      this.render();
    }
  }
}
