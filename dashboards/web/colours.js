// One colour scale for every load view: tokens relative to the mean, on a log scale centred on 1.
// Diverging (blue = idle, white = mean, red = overworked) because the question is "who is off the mean,
// and which way", not "how many tokens"; log because 0.5x and 2x are equally far from balanced.

const STOPS = [ // t in [-1, 1] -> rgb
  [-1.0, [33, 64, 154]], [-0.5, [103, 169, 207]], [0.0, [247, 247, 247]],
  [0.35, [253, 174, 97]], [0.7, [215, 48, 39]], [1.0, [103, 0, 13]],
];
const RANGE = 2; // log2 units either side of the mean: 0.25x .. 4x
export const LUT_SIZE = 256;

// a 256-entry lookup table as one Uint8Array (rgb triples): one multiply-add per cell when drawing
export const LUT = (() => {
  const lut = new Uint8Array(LUT_SIZE * 3);
  for (let i = 0; i < LUT_SIZE; i++) {
    const t = (i / (LUT_SIZE - 1)) * 2 - 1;
    let k = 0;
    while (k < STOPS.length - 2 && t > STOPS[k + 1][0]) k++;
    const [t0, c0] = STOPS[k], [t1, c1] = STOPS[k + 1];
    const f = Math.min(1, Math.max(0, (t - t0) / (t1 - t0)));
    for (let j = 0; j < 3; j++) lut[i * 3 + j] = Math.round(c0[j] + f * (c1[j] - c0[j]));
  }
  return lut;
})();

/** Index into LUT for a load ratio (value / mean); 0 and below map to the idle end. */
export function lutIndex(ratio) {
  if (!(ratio > 0)) return 0;
  const t = Math.log2(ratio) / RANGE;
  const clamped = t < -1 ? -1 : t > 1 ? 1 : t;
  return Math.round(((clamped + 1) / 2) * (LUT_SIZE - 1));
}

export function cssColour(ratio) {
  const i = lutIndex(ratio) * 3;
  return `rgb(${LUT[i]},${LUT[i + 1]},${LUT[i + 2]})`;
}

/** Paints the scale into a small canvas (the legend). */
export function drawLegend(canvas) {
  const ctx = canvas.getContext("2d");
  const img = ctx.createImageData(LUT_SIZE, 1);
  for (let i = 0; i < LUT_SIZE; i++) {
    img.data.set([LUT[i * 3], LUT[i * 3 + 1], LUT[i * 3 + 2], 255], i * 4);
  }
  canvas.width = LUT_SIZE; canvas.height = 1;
  ctx.putImageData(img, 0, 0);
  canvas.title = "0.25x mean … 1x … 4x mean and more";
}

export const fmtInt = (v) => (v === null || v === undefined ? "–" : Math.round(v).toLocaleString("en-US"));
export const fmt = (v, digits = 2) => (v === null || v === undefined || Number.isNaN(v) ? "–" : Number(v).toFixed(digits));
export const pct = (v, digits = 0) => (v === null || v === undefined ? "–" : `${(100 * v).toFixed(digits)}%`);

/** Sizes a canvas's backing store to its CSS box times the pixel ratio; returns {ctx, w, h} in CSS px. */
export function fitCanvas(canvas) {
  const ratio = window.devicePixelRatio || 1;
  const w = Math.max(1, canvas.clientWidth), h = Math.max(1, canvas.clientHeight);
  if (canvas.width !== Math.round(w * ratio) || canvas.height !== Math.round(h * ratio)) {
    canvas.width = Math.round(w * ratio); canvas.height = Math.round(h * ratio);
  }
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, w, h);
  return { ctx, w, h };
}

/** Places a tooltip next to the pointer, inside its positioned parent. */
export function showTip(tip, event, text) {
  tip.textContent = text;
  tip.hidden = false;
  const box = tip.parentElement.getBoundingClientRect();
  const x = event.clientX - box.left, y = event.clientY - box.top;
  const left = x + 14 + tip.offsetWidth > box.width ? x - 14 - tip.offsetWidth : x + 14;
  tip.style.left = `${Math.max(0, left)}px`;
  tip.style.top = `${Math.max(0, y + 12)}px`;
}
