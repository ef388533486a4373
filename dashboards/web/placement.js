// Placement view: for one layer, which expert each slot of each GPU holds (columns = GPUs, rows =
// slots), coloured by the load that slot takes (its expert's tokens / replicas, relative to the mean
// slot), with the slots the last change moved outlined. One canvas; hover and click read the arrays.

import { gpusOf } from "./derive.js";
import { cssColour, fitCanvas, fmt, fmtInt, showTip } from "./colours.js";

const STRIP = 7; // the "moved" strip under the grid, for when cells are too small to outline
const M = { left: 40, right: 4, top: 4, bottom: 14 + STRIP };

export class PlacementView {
  constructor(canvas, tip, summaryEl, gpuEl) {
    this.canvas = canvas; this.tip = tip; this.summaryEl = summaryEl; this.gpuEl = gpuEl;
    this.d = null; this.layer = 0; this.gpu = null;
    canvas.addEventListener("mousemove", (ev) => this.hover(ev));
    canvas.addEventListener("mouseleave", () => { this.tip.hidden = true; });
    canvas.addEventListener("click", (ev) => {
      const cell = this.cellAt(ev);
      this.gpu = cell ? cell.g : null;
      this.describeGpu();
      this.render();
    });
  }

  /** layer: the picked one, or null for "the layer the last change moved most, else the most imbalanced". */
  setData(d, layer) {
    this.d = d;
    this.layer = layer ?? this.autoLayer();
    this.render();
    this.summarise();
    this.describeGpu();
  }

  autoLayer() {
    const d = this.d;
    if (!d || !d.L) return 0;
    let best = 0;
    if (d.movedTotal > 0) {
      for (let l = 1; l < d.L; l++) if (d.movedPerLayer[l] > d.movedPerLayer[best]) best = l;
      return best;
    }
    let bestRatio = -1;
    for (let l = 0; l < d.L; l++) {
      let max = 0, sum = 0;
      for (let g = 0; g < d.G; g++) { const v = d.measured[l * d.G + g]; sum += v; if (v > max) max = v; }
      const r = sum > 0 ? max / (sum / d.G) : 0;
      if (r > bestRatio) { bestRatio = r; best = l; }
    }
    return best;
  }

  slotRatio(l, s) {
    const d = this.d, e = d.placement[l][s];
    const meanSlot = d.layerMean[l] * d.E / d.S; // the layer's tokens spread evenly over all slots
    return meanSlot > 0 ? d.tokens[l * d.E + e] / d.replicas[l * d.E + e] / meanSlot : 0;
  }

  render() {
    const t0 = performance.now();
    const d = this.d, c = this.canvas;
    const { ctx, w, h } = fitCanvas(c);
    if (!d || !d.hasPlacement) {
      ctx.fillStyle = "#5b6575"; ctx.font = "12px system-ui"; ctx.fillText("no placement issued yet", 10, 20);
      c.dataset.slots = 0;
      return;
    }
    const l = this.layer, pw = w - M.left - M.right, ph = h - M.top - M.bottom;
    const cw = pw / d.G, ch = ph / d.spr;
    const gap = cw >= 5 ? 1 : 0;
    // cells batched by colour: one fill per distinct colour instead of one per slot
    const byColour = new Map();
    for (let s = 0; s < d.S; s++) {
      const key = cssColour(this.slotRatio(l, s));
      if (!byColour.has(key)) byColour.set(key, []);
      byColour.get(key).push(s);
    }
    for (const [colour, slots] of byColour) {
      ctx.fillStyle = colour;
      for (const s of slots) {
        const g = (s / d.spr) | 0, k = s - g * d.spr;
        ctx.fillRect(M.left + g * cw, M.top + k * ch, Math.max(1, cw - gap), Math.max(1, ch - gap));
      }
    }
    // moved slots: outlined when cells are big enough to show an outline and their colour; at 320 GPUs a
    // column is ~2px wide, so instead a strip under the grid darkens each GPU by its share of moved slots
    let movedHere = 0;
    if (d.moved.length) {
      const outline = cw >= 5 && ch >= 5;
      const perGpu = new Uint16Array(d.G);
      ctx.beginPath();
      for (let s = 0; s < d.S; s++) {
        if (d.moved[l * d.S + s]) {
          const g = (s / d.spr) | 0, k = s - g * d.spr;
          if (outline) ctx.rect(M.left + g * cw + 0.75, M.top + k * ch + 0.75, cw - 1.5 - gap, ch - 1.5 - gap);
          perGpu[g]++;
          movedHere++;
        }
      }
      ctx.strokeStyle = "#111"; ctx.lineWidth = 1.5; ctx.stroke();
      if (!outline) {
        for (let g = 0; g < d.G; g++) {
          if (!perGpu[g]) continue;
          ctx.fillStyle = `rgba(17, 17, 17, ${0.35 + 0.65 * perGpu[g] / d.spr})`;
          ctx.fillRect(M.left + g * cw, M.top + ph + 2, Math.max(1, cw - gap), STRIP - 2);
        }
      }
    }
    ctx.strokeStyle = "#9aa5b5"; ctx.lineWidth = 1; // node boundaries
    for (let g = d.gpusPerNode; g < d.G; g += d.gpusPerNode) {
      ctx.beginPath(); ctx.moveTo(M.left + g * cw, M.top); ctx.lineTo(M.left + g * cw, M.top + ph); ctx.stroke();
    }
    if (this.gpu !== null && this.gpu < d.G) {
      ctx.strokeStyle = "#2f5fd0"; ctx.lineWidth = 2; ctx.strokeRect(M.left + this.gpu * cw - 1, M.top - 1, cw + 2, ph + 2);
    }
    ctx.fillStyle = "#5b6575"; ctx.font = "10px system-ui"; ctx.textAlign = "right"; ctx.textBaseline = "middle";
    ctx.fillText("slot", M.left - 4, M.top + 6);
    ctx.textAlign = "center"; ctx.textBaseline = "top";
    const step = d.G > 64 ? 32 : d.G > 16 ? 8 : 1;
    for (let g = 0; g < d.G; g += step) ctx.fillText(String(g), M.left + (g + 0.5) * cw, M.top + ph + STRIP + 1);
    ctx.textAlign = "left"; ctx.fillText("GPU →", Math.max(M.left, w - 40), M.top + ph + STRIP + 1);
    this.geom = { cw, ch, pw, ph };
    Object.assign(c.dataset, {
      layer: l, slots: d.S, gpus: d.G, moved: movedHere, movedTotal: d.movedTotal, version: d.version,
      renderMs: (performance.now() - t0).toFixed(2),
    });
  }

  summarise() {
    const d = this.d;
    if (!d || !d.hasPlacement) { this.summaryEl.textContent = ""; return; }
    const layers = d.movedPerLayer.reduce((n, m) => n + (m > 0 ? 1 : 0), 0);
    const head = `layer ${this.layer} of ${d.L} · ${d.G} GPUs × ${d.spr} slots · placement v${d.version}`;
    this.summaryEl.textContent = !d.hasPrevious ? `${head} · the default table, nothing moved yet`
      : `${head} · the change from v${d.version - 1} moved ${fmtInt(d.movedTotal)} of ${fmtInt(d.S * d.L)} slots `
        + `(${fmt((100 * d.movedTotal) / (d.S * d.L), 1)}%) in ${layers} layers, ${d.movedPerLayer[this.layer]} in this layer `
        + "(outlined, or dark under their GPU when cells are small)";
    this.canvas.dataset.summary = this.summaryEl.textContent;
  }

  describeGpu() {
    const d = this.d;
    if (!d || !d.hasPlacement || this.gpu === null || this.gpu >= d.G) {
      this.gpuEl.textContent = "click a GPU to list the experts it holds";
      return;
    }
    const l = this.layer, g = this.gpu, parts = [];
    for (let k = 0; k < d.spr; k++) {
      const s = g * d.spr + k, e = d.placement[l][s];
      const was = d.moved.length && d.moved[l * d.S + s] ? ` (was ${d.previous[l][s]})` : "";
      const reps = d.replicas[l * d.E + e] > 1 ? ` ×${d.replicas[l * d.E + e]}` : "";
      parts.push(`${e}${reps}${was}`);
    }
    this.gpuEl.textContent = `GPU ${g} (node ${Math.floor(g / d.gpusPerNode)}), layer ${l}: experts ${parts.join(", ")}`;
  }

  cellAt(ev) {
    const d = this.d;
    if (!d || !d.hasPlacement || !this.geom) return null;
    const box = this.canvas.getBoundingClientRect();
    const x = ev.clientX - box.left - M.left, y = ev.clientY - box.top - M.top;
    if (x < 0 || y < 0 || x >= this.geom.pw || y >= this.geom.ph) return null;
    const g = Math.min(d.G - 1, (x / this.geom.cw) | 0), k = Math.min(d.spr - 1, (y / this.geom.ch) | 0);
    return { g, k, s: g * d.spr + k };
  }

  hover(ev) {
    const cell = this.cellAt(ev);
    if (!cell) { this.tip.hidden = true; return; }
    const d = this.d, l = this.layer, e = d.placement[l][cell.s];
    const moved = d.moved.length && d.moved[l * d.S + cell.s] ? `\nmoved: held expert ${d.previous[l][cell.s]} before` : "";
    const others = gpusOf(d, l, e).filter((g) => g !== cell.g);
    showTip(this.tip, ev, `GPU ${cell.g} slot ${cell.k} · expert ${e}\n${fmt(this.slotRatio(l, cell.s))}× mean slot load`
      + (others.length ? `\nreplicas also on GPU ${others.slice(0, 10).join(", ")}` : "") + moved);
  }
}
