// Expert load heatmap: layers (rows) x experts (columns) on one canvas, no per-cell DOM.
// The cells go into an E x L ImageData through the colour LUT and are scaled up with smoothing off,
// so cost is O(cells) array work plus one drawImage; overlays (hot outlines, replica marks) are one
// path each. What was drawn is mirrored in data-* attributes, so tests check real data, not pixels alone.

import { HOT_RATIO, gpusOf } from "./derive.js";
import { LUT, fmt, fitCanvas, fmtInt, lutIndex, showTip } from "./colours.js";

const M = { left: 30, right: 4, top: 2, bottom: 14 }; // room for layer and expert ticks

export class Heatmap {
  constructor(canvas, tip, { onPickLayer } = {}) {
    this.canvas = canvas; this.tip = tip; this.onPickLayer = onPickLayer;
    this.d = null; this.layer = null;
    this.cells = document.createElement("canvas"); // E x L pixels, one per cell
    this.pending = null;
    canvas.addEventListener("mousemove", (ev) => {
      // hover work once per frame at most: mousemove can fire far faster than we paint
      this.pending = ev;
      if (!this.frame) this.frame = requestAnimationFrame(() => { this.frame = 0; this.hover(this.pending); });
    });
    canvas.addEventListener("mouseleave", () => { this.tip.hidden = true; });
    canvas.addEventListener("click", (ev) => {
      const cell = this.cellAt(ev);
      if (cell && this.onPickLayer) this.onPickLayer(cell.l === this.layer ? null : cell.l);
    });
  }

  setData(d, layer) { this.d = d; this.layer = layer; this.paintCells(); this.render(); }

  setLayer(layer) { this.layer = layer; this.render(); }

  paintCells() {
    const d = this.d;
    if (!d || !d.L || !d.E) return;
    this.cells.width = d.E; this.cells.height = d.L;
    const ctx = this.cells.getContext("2d");
    const img = ctx.createImageData(d.E, d.L);
    const px = img.data;
    for (let i = 0, n = d.L * d.E; i < n; i++) {
      const k = lutIndex(d.ratio[i]) * 3;
      px[i * 4] = LUT[k]; px[i * 4 + 1] = LUT[k + 1]; px[i * 4 + 2] = LUT[k + 2]; px[i * 4 + 3] = 255;
    }
    ctx.putImageData(img, 0, 0);
  }

  geometry() {
    const w = this.canvas.clientWidth, h = this.canvas.clientHeight;
    const pw = Math.max(1, w - M.left - M.right), ph = Math.max(1, h - M.top - M.bottom);
    return { w, h, pw, ph, cw: pw / this.d.E, ch: ph / this.d.L };
  }

  render() {
    const t0 = performance.now();
    const d = this.d, c = this.canvas;
    const { ctx, w, h } = fitCanvas(c);
    if (!d || !d.L || !d.E || d.total <= 0) {
      ctx.fillStyle = "#5b6575"; ctx.font = "12px system-ui";
      ctx.fillText("waiting for a complete window of expert load…", 10, 20);
      c.dataset.layers = d ? d.L : 0; c.dataset.experts = d ? d.E : 0; c.dataset.total = 0;
      return;
    }
    const { pw, ph, cw, ch } = this.geometry();
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(this.cells, M.left, M.top, pw, ph);

    // hot experts: outlined, so they stand out even for readers who cannot tell red from brown
    ctx.beginPath();
    let hot = 0;
    for (let l = 0; l < d.L; l++) {
      for (let e = 0; e < d.E; e++) {
        if (d.ratio[l * d.E + e] >= HOT_RATIO) {
          ctx.rect(M.left + e * cw + 0.5, M.top + l * ch + 0.5, Math.max(1, cw - 1), Math.max(1, ch - 1));
          hot++;
        }
      }
    }
    ctx.strokeStyle = "#111"; ctx.lineWidth = cw >= 4 && ch >= 4 ? 1.5 : 1; ctx.stroke();

    // replicated experts: a teal mark on the cell's top edge (the controller gave them more slots)
    ctx.fillStyle = "#00a3a3";
    const markH = Math.max(1, Math.min(3, ch / 3));
    for (let i = 0, n = d.L * d.E; i < n; i++) {
      if (d.replicas[i] > 1) {
        const l = (i / d.E) | 0, e = i - l * d.E;
        ctx.fillRect(M.left + e * cw, M.top + l * ch, Math.max(1, cw), markH);
      }
    }

    // the picked layer
    if (this.layer !== null && this.layer < d.L) {
      ctx.strokeStyle = "#2f5fd0"; ctx.lineWidth = 2;
      ctx.strokeRect(M.left - 1, M.top + this.layer * ch - 1, pw + 2, ch + 2);
    }

    // ticks: every layer when they fit, else every k-th; experts every 32 (a DeepSeek group is 32)
    ctx.fillStyle = "#5b6575"; ctx.font = "10px system-ui"; ctx.textAlign = "right"; ctx.textBaseline = "middle";
    const layerStep = Math.max(1, Math.ceil(11 / ch));
    for (let l = 0; l < d.L; l += layerStep) ctx.fillText(String(l), M.left - 3, M.top + (l + 0.5) * ch);
    ctx.textAlign = "center"; ctx.textBaseline = "top";
    const expertStep = d.E >= 128 ? 32 : d.E >= 32 ? 8 : 1;
    for (let e = 0; e < d.E; e += expertStep) ctx.fillText(String(e), M.left + (e + 0.5) * cw, h - M.bottom + 2);
    ctx.textAlign = "left";
    ctx.fillText("expert →", Math.min(w - 50, M.left + pw - 46), h - M.bottom + 2);

    const ms = performance.now() - t0;
    Object.assign(c.dataset, {
      layers: d.L, experts: d.E, total: Math.round(d.total), hot, replicated: d.replicated,
      maxRatio: d.maxRatio.toFixed(3), window: d.windowIndex ?? "", layer: this.layer ?? "",
      renderMs: ms.toFixed(2),
    });
  }

  cellAt(ev) {
    const d = this.d;
    if (!d || !d.L) return null;
    const box = this.canvas.getBoundingClientRect();
    const { pw, ph, cw, ch } = this.geometry();
    const x = ev.clientX - box.left - M.left, y = ev.clientY - box.top - M.top;
    if (x < 0 || y < 0 || x >= pw || y >= ph) return null;
    return { l: Math.min(d.L - 1, (y / ch) | 0), e: Math.min(d.E - 1, (x / cw) | 0) };
  }

  hover(ev) {
    const cell = this.cellAt(ev);
    if (!cell) { this.tip.hidden = true; return; }
    const d = this.d, i = cell.l * d.E + cell.e;
    const gpus = gpusOf(d, cell.l, cell.e);
    const where = gpus.length ? `\non GPU ${gpus.slice(0, 12).join(", ")}${gpus.length > 12 ? ", …" : ""}` : "";
    showTip(this.tip, ev, `layer ${cell.l} · expert ${cell.e}\n${fmtInt(d.tokens[i])} tokens = ${fmt(d.ratio[i])}× layer mean`
      + `\n${d.replicas[i]} slot${d.replicas[i] === 1 ? "" : "s"}${where}`);
  }
}
