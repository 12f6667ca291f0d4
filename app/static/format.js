/* How tokens and weights are shown in the drawings: clipped labels and their width, the colour ramp, numbers. */

const BLUES = [
  [247, 251, 255], [222, 235, 247], [198, 219, 239], [158, 202, 225], [107, 174, 214],
  [66, 146, 198], [33, 113, 181], [8, 81, 156], [8, 48, 107],
];
const LABEL_FONT = '11px "DejaVu Sans Mono", Menlo, Consolas, "Liberation Mono", monospace';
const MAX_LABEL_CHARS = 14;

export const label = (t) => ([...t].length > MAX_LABEL_CHARS ? `${[...t].slice(0, MAX_LABEL_CHARS - 1).join("")}…` : t);

let measurer = null;
/** The width in pixels of the widest of strings, drawn in the labels' font. */
export function textWidth(strings) {
  measurer = measurer || document.createElement("canvas").getContext("2d");
  measurer.font = LABEL_FONT;
  return Math.ceil(Math.max(0, ...strings.map((s) => measurer.measureText(s).width)));
}

/** A weight's colour on the ramp: 0 white, 1 dark blue. */
export function color(w) {
  const t = Math.min(1, Math.max(0, w)) * (BLUES.length - 1);
  const i = Math.min(BLUES.length - 2, Math.floor(t));
  const f = t - i;
  const c = BLUES[i].map((v, k) => Math.round(v + (BLUES[i + 1][k] - v) * f));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

export const fmt = (w) => w.toFixed(4);
export const short = (w) => (w >= 0.995 ? "1" : w.toFixed(2).replace(/^0/, ""));
