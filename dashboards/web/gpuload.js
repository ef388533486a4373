// Per-GPU load bars: tokens each GPU's expert slots processed in the last window (all layers, or the
// picked layer). The busiest GPU is the straggler every MoE layer waits for, so it is drawn red and the
// mean is a dashed line. Ticks show what the issued placement would give for the same expert load,
// which is how an operator sees a rebalance coming before the next window measures it.

import { maxToMean } from "./derive.js";
import { fitCanvas, fmt, fmtInt, showTip } from "./colours.js";

const M = { left: 44, right: 4, top: 6, bottom: 14 };

export class GpuBars {
  constructor(canvas, tip) {
    this.canvas = canvas; this.tip = tip; this.d = null; this.layer = null;
    canvas.addEventListener("mousemove", (ev) => this.hover(ev));
    canvas.addEventListener("mouseleave", () => { this.tip.hidden = true; });
  }

  setData(d, layer) { this.d = d; this.layer = layer; this.render(); }

  values() {
    const d = this.d, G = d.G;
    if (this.layer === null) return { measured: d.gpuTotal, predicted: d.predictedTotal };
    const off = this.layer * G;
    return { measured: d.measured.subarray(off, off + G), predicted: d.predicted.subarray(off, off + G) };
  }

  render() {
    const t0 = performance.now();
    const d = this.d, c = this.canvas;
    const { ctx, w, h } = fitCanvas(c);
    if (!d || !d.hasGpu || !d.G) {
      ctx.fillStyle = "#5b6575"; ctx.font = "12px system-ui";
      ctx.fillText("no per-GPU load in the last window yet", 10, 20);
      c.dataset.gpus = 0;
      return;
    }
    const { measured, predicted } = this.values();
    const showPredicted = d.hasPlacement && d.windowVersion !== d.version;
    let max = 0, sum = 0, argmax = 0;
    for (let g = 0; g < d.G; g++) {
      sum += measured[g];
      if (measured[g] > max) { max = measured[g]; argmax = g; }
      if (showPredicted && predicted[g] > max) max = predicted[g];
    }
    const mean = sum / d.G;
    const pw = w - M.left - M.right, ph = h - M.top - M.bottom, bw = pw / d.G;
    const y = (v) => M.top + ph - (max > 0 ? (v / max) * ph : 0);

    // node boundaries: all-to-all inside a node is NVLink, across nodes the slower network
    ctx.fillStyle = "#f0f2f5";
    for (let g = 0; g < d.G; g += 2 * d.gpusPerNode) ctx.fillRect(M.left + g * bw, M.top, d.gpusPerNode * bw, ph);
    const gap = bw >= 4 ? 1 : 0;
    ctx.fillStyle = "#7f93b8";
    for (let g = 0; g < d.G; g++) {
      if (g !== argmax) ctx.fillRect(M.left + g * bw, y(measured[g]), Math.max(1, bw - gap), M.top + ph - y(measured[g]));
    }
    ctx.fillStyle = "#d73027";
    ctx.fillRect(M.left + argmax * bw, y(measured[argmax]), Math.max(1, bw - gap), M.top + ph - y(measured[argmax]));
    if (showPredicted) {
      ctx.fillStyle = "#111";
      for (let g = 0; g < d.G; g++) ctx.fillRect(M.left + g * bw, y(predicted[g]) - 1, Math.max(1, bw - gap), 2);
    }
    ctx.setLineDash([4, 3]); ctx.strokeStyle = "#1d2430"; ctx.lineWidth = 1;
    ctx.beginPath(); ctx.moveTo(M.left, y(mean)); ctx.lineTo(M.left + pw, y(mean)); ctx.stroke(); ctx.setLineDash([]);

    ctx.fillStyle = "#5b6575"; ctx.font = "10px system-ui"; ctx.textAlign = "right"; ctx.textBaseline = "middle";
    ctx.fillText(fmtInt(max), M.left - 3, M.top + 4); ctx.fillText("mean", M.left - 3, y(mean));
    ctx.textAlign = "center"; ctx.textBaseline = "top";
    const step = d.G > 64 ? 32 : d.G > 16 ? 8 : 1;
    for (let g = 0; g < d.G; g += step) ctx.fillText(String(g), M.left + (g + 0.5) * bw, h - M.bottom + 2);

    this.geom = { pw, bw };
    Object.assign(c.dataset, {
      gpus: d.G, maxToMean: (mean > 0 ? max / mean : 0).toFixed(3), straggler: argmax,
      layer: this.layer ?? "", predicted: showPredicted ? "1" : "0", renderMs: (performance.now() - t0).toFixed(2),
    });
  }

  /** A one-line caption for the panel heading. */
  caption() {
    const d = this.d;
    if (!d || !d.hasGpu) return "";
    const m = maxToMean(d.measured, d.L, d.G, this.layer);
    const where = this.layer === null ? "all layers" : `layer ${this.layer}`;
    const under = d.windowVersion === d.version ? `placement v${d.version}`
      : `measured under v${d.windowVersion}; ticks: v${d.version} (issued) on the same load`;
    return `${where} · busiest/mean ${fmt(m)} · ${d.G} GPUs · ${under}`;
  }

  hover(ev) {
    const d = this.d;
    if (!d || !d.hasGpu || !this.geom) return;
    const box = this.canvas.getBoundingClientRect();
    const g = Math.floor((ev.clientX - box.left - M.left) / this.geom.bw);
    if (g < 0 || g >= d.G) { this.tip.hidden = true; return; }
    const { measured, predicted } = this.values();
    let sum = 0;
    for (let k = 0; k < d.G; k++) sum += measured[k];
    const mean = sum / d.G;
    showTip(this.tip, ev, `GPU ${g} · node ${Math.floor(g / d.gpusPerNode)}\n${fmtInt(measured[g])} tokens = `
      + `${fmt(mean > 0 ? measured[g] / mean : 0)}× mean` + (d.hasPlacement ? `\nunder v${d.version}: ${fmtInt(predicted[g])}` : ""));
  }
}
