// Derived views of one pool's load (GET .../pools/{role}/load), computed once per fetch into typed
// arrays: every panel reads the same numbers, and hover handlers only index, never recompute.
// At 58 layers x 256 experts x 320 GPUs (x 9 slots) this is ~170k slots, a few milliseconds.

export const HOT_RATIO = 2; // an expert with >= 2x its layer's mean tokens is "hot"

export function derive(load) {
  const L = load.expert_tokens.length;
  const E = L ? load.expert_tokens[0].length : 0;
  const G = load.ep_size, spr = load.slots_per_rank, S = G * spr;
  const placement = load.slot_to_expert || [];
  const previous = load.previous_slot_to_expert;
  const hasPlacement = placement.length === L && L > 0 && placement[0].length === S;

  const tokens = new Float64Array(L * E); // [L][E] expert tokens
  const ratio = new Float32Array(L * E); // tokens / layer mean
  const replicas = new Uint16Array(L * E); // slots holding each expert under the issued placement
  const layerMean = new Float64Array(L);
  let total = 0, maxRatio = 0, hot = 0, replicated = 0;
  for (let l = 0; l < L; l++) {
    const row = load.expert_tokens[l];
    let sum = 0;
    for (let e = 0; e < E; e++) { tokens[l * E + e] = row[e]; sum += row[e]; }
    total += sum;
    const mean = E ? sum / E : 0;
    layerMean[l] = mean;
    for (let e = 0; e < E; e++) {
      const r = mean > 0 ? row[e] / mean : 0;
      ratio[l * E + e] = r;
      if (r > maxRatio) maxRatio = r;
      if (r >= HOT_RATIO) hot++;
    }
    if (hasPlacement) {
      const slots = placement[l];
      for (let s = 0; s < S; s++) replicas[l * E + slots[s]]++;
    }
  }
  for (let i = 0; i < L * E; i++) if (replicas[i] > 1) replicated++;

  // measured per-GPU tokens (the window's own placement) and the mean/max over layers
  const measured = new Float64Array(L * G);
  const gpuTotal = new Float64Array(G);
  const hasGpu = load.gpu_tokens.length === L && L > 0 && load.gpu_tokens[0].length === G;
  if (hasGpu) {
    for (let l = 0; l < L; l++) {
      const row = load.gpu_tokens[l];
      for (let g = 0; g < G; g++) { measured[l * G + g] = row[g]; gpuTotal[g] += row[g]; }
    }
  }

  // predicted per-GPU tokens under the issued placement: each expert's tokens split evenly over its slots
  // (the controller's slot_share may differ a little; this is for "what would the bars look like")
  const predicted = new Float64Array(L * G);
  const predictedTotal = new Float64Array(G);
  if (hasPlacement) {
    for (let l = 0; l < L; l++) {
      const slots = placement[l];
      for (let s = 0; s < S; s++) {
        const e = slots[s], g = (s / spr) | 0;
        const v = tokens[l * E + e] / replicas[l * E + e];
        predicted[l * G + g] += v;
        predictedTotal[g] += v;
      }
    }
  }

  // what the last placement change moved: slots whose expert differs from the version before
  const movedPerLayer = new Uint32Array(L);
  const moved = new Uint8Array(hasPlacement ? L * S : 0);
  let movedTotal = 0;
  if (hasPlacement && previous && previous.length === L && previous[0].length === S) {
    for (let l = 0; l < L; l++) {
      const a = placement[l], b = previous[l];
      for (let s = 0; s < S; s++) {
        if (a[s] !== b[s]) { moved[l * S + s] = 1; movedPerLayer[l]++; movedTotal++; }
      }
    }
  }

  return {
    L, E, G, S, spr, gpusPerNode: load.gpus_per_node || 8, tokens, ratio, replicas, layerMean, total, maxRatio, hot,
    replicated, measured, gpuTotal, hasGpu, predicted, predictedTotal, hasPlacement, placement, previous,
    moved, movedPerLayer, movedTotal, hasPrevious: !!previous,
    windowIndex: load.window_index, windowStart: load.window_start,
    windowVersion: load.window_placement_version, version: load.placement_version,
  };
}

/** GPUs (by rank) holding expert e in layer l under the issued placement. */
export function gpusOf(d, l, e) {
  const out = [];
  if (!d.hasPlacement) return out;
  const slots = d.placement[l];
  for (let s = 0; s < d.S; s++) if (slots[s] === e) out.push((s / d.spr) | 0);
  return out;
}

/** Per-layer max/mean over GPUs of an [L][G] array: the straggler factor the controller plans on. */
export function maxToMean(values, L, G, layer) {
  const layers = layer === null ? [...Array(L).keys()] : [layer];
  let acc = 0, n = 0;
  for (const l of layers) {
    let sum = 0, max = 0;
    for (let g = 0; g < G; g++) { const v = values[l * G + g]; sum += v; if (v > max) max = v; }
    if (sum > 0) { acc += max / (sum / G); n++; }
  }
  return n ? acc / n : null;
}
