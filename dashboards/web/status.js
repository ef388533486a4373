// Status page: polls the read API and draws each deployment's imbalance over time and its actions.
"use strict";

const fmt = (v, digits = 2) => (v === null || v === undefined ? "–" : Number(v).toFixed(digits));
const pct = (v) => (v === null || v === undefined ? "–" : `${(100 * v).toFixed(0)}%`);

function drawHistory(canvas, pools) {
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth, height = canvas.clientHeight;
  canvas.width = width * ratio; canvas.height = height * ratio;
  const ctx = canvas.getContext("2d");
  ctx.scale(ratio, ratio);
  const points = pools.flatMap((p) => p.history.filter((h) => h.imbalance !== null));
  if (!points.length) { ctx.fillText("waiting for complete windows…", 10, 20); return; }
  const t0 = Math.min(...points.map((h) => h.start)), t1 = Math.max(...points.map((h) => h.start)) || t0 + 1;
  const yMax = Math.max(2.0, ...points.map((h) => h.imbalance)) * 1.05;
  const x = (t) => 40 + ((t - t0) / Math.max(t1 - t0, 1)) * (width - 50);
  const y = (v) => height - 20 - ((v - 1) / (yMax - 1)) * (height - 30);
  ctx.strokeStyle = "#ccd"; ctx.fillStyle = "#667"; ctx.font = "11px system-ui";
  for (const v of [1, 1.25, 1.5, 2, yMax >= 3 ? 3 : null].filter(Boolean)) {
    ctx.beginPath(); ctx.moveTo(40, y(v)); ctx.lineTo(width - 10, y(v)); ctx.stroke();
    ctx.fillText(v.toFixed(2), 4, y(v) + 4);
  }
  const colours = ["#3b6fd8", "#d8763b", "#3ba86a"];
  pools.forEach((pool, i) => {
    const series = pool.history.filter((h) => h.imbalance !== null);
    ctx.strokeStyle = colours[i % colours.length]; ctx.lineWidth = 2; ctx.beginPath();
    series.forEach((h, j) => (j ? ctx.lineTo(x(h.start), y(h.imbalance)) : ctx.moveTo(x(h.start), y(h.imbalance))));
    ctx.stroke();
    ctx.fillStyle = ctx.strokeStyle; ctx.fillText(`${pool.role} max/mean GPU load`, 50, 12 + 12 * i);
  });
}

function render(overviews) {
  const root = document.getElementById("deployments");
  if (!overviews.length) { root.textContent = "no deployments registered yet"; return; }
  root.replaceChildren(...overviews.map((o) => {
    const section = document.createElement("section");
    section.className = "deployment";
    section.dataset.deployment = o.deployment;
    const cls = o.imbalance !== null && o.imbalance > 1.3 ? "bad" : "good";
    const versions = Object.entries(o.placement_version).map(([r, v]) => `${r}: v${v ?? "mixed"}`).join(", ");
    section.innerHTML = `
      <h2>${o.deployment} <small>(${o.model.name}, mode ${o.mode})</small></h2>
      <div class="numbers">
        <div>imbalance<b class="${cls}" data-field="imbalance">${fmt(o.imbalance)}</b></div>
        <div>all-to-all share<b>${pct(o.all2all_share)}</b></div>
        <div>prefix hit<b>${pct(o.prefix_hit_ratio)}</b></div>
        <div>MTP acceptance<b>${pct(o.mtp_acceptance)}</b></div>
        <div>running / waiting<b>${o.queue.running} / ${o.queue.waiting}</b></div>
        <div>placement<b>${versions}</b></div>
        <div>agents fresh<b>${o.agents.fresh} / ${o.agents.total}</b></div>
      </div>
      <canvas></canvas>
      <table><thead><tr><th>#</th><th>when</th><th>trigger</th><th>status</th><th>predicted</th><th>measured</th><th>reason</th></tr></thead>
      <tbody>${o.last_actions.map((a) => `<tr><td>${a.id}</td><td>${new Date(a.created_at * 1000).toLocaleTimeString()}</td>
        <td>${a.trigger}</td><td>${a.status}</td>
        <td>${fmt(a.predicted.imbalance_before)} → ${fmt(a.predicted.imbalance_after)}</td>
        <td>${a.measured.imbalance_after === undefined ? "–" : fmt(a.measured.imbalance_after)}</td>
        <td>${a.reason}</td></tr>`).join("") || '<tr><td colspan="7">no actions yet</td></tr>'}</tbody></table>`;
    drawHistory(section.querySelector("canvas"), o.pools);
    return section;
  }));
}

async function refresh() {
  try {
    const list = await (await fetch("/v1/deployments")).json();
    const overviews = await Promise.all(list.map(async (d) => (await fetch(`/v1/deployments/${d.name}/overview`)).json()));
    render(overviews);
    document.getElementById("error").textContent = "";
  } catch (err) {
    document.getElementById("error").textContent = `cannot reach the controller: ${err}`;
  }
}

refresh();
setInterval(refresh, 2000);
