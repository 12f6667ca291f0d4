/* The head view (bertviz's shape): queries on the left, keys on the right, a line for each weight, its opacity the
 * weight; hover or the arrow keys pick a token. */

import { setActive } from "./cursor.js";
import { $, svg, svgText } from "./dom.js";
import { fmt, label, textWidth } from "./format.js";
import { state } from "./state.js";

export function drawHeadView(view) {
  const box = $("headview");
  const { matrix, rows, cols } = view;
  const lw = Math.max(textWidth(rows.map(label)), textWidth(["queries"])) + 8;
  const rw = Math.max(textWidth(cols.map(label)), textWidth(["keys"])) + 8;
  const width = Math.max(box.clientWidth - 2, lw + rw + 110);
  const step = 19;
  const head = 22;
  const height = head + Math.max(rows.length, cols.length) * step + 4;
  const x1 = lw + 4;
  const x2 = width - rw - 4;
  const y = (i) => head + i * step + step / 2;
  const root = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, "aria-hidden": "true" });
  svgText(root, lw, 11, "queries", { class: "axis-title", "text-anchor": "end" });
  svgText(root, width - rw, 11, "keys", { class: "axis-title" });
  const lines = [];
  const lineGroup = svg("g", {}, root);
  matrix.forEach((row, i) =>
    row.forEach((w, j) => {
      if (w < 0.005) return; // invisible anyway; keeps long sentences light
      const el = svg("line", {
        class: "hv-line", x1, y1: y(i), x2, y2: y(j), "stroke-opacity": w, "data-row": i, "data-col": j,
        "data-weight": String(w),
      }, lineGroup);
      lines.push({ el, i, j, w });
    }));
  const token = (side, i, t) => {
    const g = svg("g", { class: "hv-token", "data-side": side, "data-index": i }, root);
    const left = side === "query";
    svg("rect", { x: left ? 0 : x2 + 2, y: y(i) - step / 2 + 1, width: left ? lw + 2 : rw + 2, height: step - 2, rx: 3 }, g);
    svgText(g, left ? lw : x2 + 6, y(i), label(t), { "text-anchor": left ? "end" : "start", "dominant-baseline": "central" }, t);
    return g;
  };
  const queries = rows.map((t, i) => token("query", i, t));
  const keys = cols.map((t, j) => token("key", j, t));
  const numbers = svg("g", {}, root);
  root.addEventListener("mouseover", (e) => {
    const line = e.target.closest(".hv-line");
    const tok = e.target.closest(".hv-token");
    if (tok) {
      const i = Number(tok.dataset.index);
      state.hvSide = tok.dataset.side;
      setActive(tok.dataset.side === "query" ? i : null, tok.dataset.side === "key" ? i : null);
    } else if (line && (!state.active || state.active.row === null)) {
      setActive(Number(line.dataset.row), Number(line.dataset.col));
    }
  });
  root.addEventListener("mouseleave", () => setActive(null, null));
  box.replaceChildren(root);
  state.hv = { lines, queries, keys, numbers, x1, x2, y };
}

/** Shows only the active token's lines, with their weights written beside the tokens at their other ends. */
export function paintHeadView() {
  const hv = state.hv;
  if (!hv) return;
  const { row, col } = state.active || { row: null, col: null };
  const m = state.view.matrix;
  for (const { el, i, j, w } of hv.lines) {
    const shown = row !== null ? i === row : col !== null ? j === col : true;
    el.setAttribute("stroke-opacity", shown ? w : 0);
    el.classList.toggle("picked", row !== null && col !== null && i === row && j === col);
  }
  hv.queries.forEach((g, i) => g.classList.toggle("active", i === row));
  hv.keys.forEach((g, j) => g.classList.toggle("active", j === col));
  hv.numbers.replaceChildren();
  const attrs = { class: "hv-number", "dominant-baseline": "central" };
  if (row !== null) {
    m[row].forEach((w, j) => svgText(hv.numbers, hv.x2 - 3, hv.y(j), fmt(w).slice(0, 5), { ...attrs, "text-anchor": "end" }));
  } else if (col !== null) {
    m.forEach((r, i) => svgText(hv.numbers, hv.x1 + 3, hv.y(i), fmt(r[col]).slice(0, 5), attrs));
  }
}

/** Up and down move along a side, left and right switch between queries and keys; Escape clears. */
export function headViewKeys(e) {
  if (!state.view) return;
  const side = state.hvSide;
  const n = side === "query" ? state.view.rows.length : state.view.cols.length;
  const current = state.active ? (side === "query" ? state.active.row : state.active.col) : null;
  let next = current ?? 0;
  if (e.key === "ArrowUp") next = current === null ? 0 : Math.max(0, current - 1);
  else if (e.key === "ArrowDown") next = current === null ? 0 : Math.min(n - 1, current + 1);
  else if (e.key === "ArrowLeft" || e.key === "ArrowRight") {
    state.hvSide = e.key === "ArrowLeft" ? "query" : "key";
    const m = state.hvSide === "query" ? state.view.rows.length : state.view.cols.length;
    next = Math.min(current ?? 0, m - 1);
  } else if (e.key === "Escape") {
    setActive(null, null);
    e.preventDefault();
    return;
  } else {
    return;
  }
  e.preventDefault();
  if (state.hvSide === "query") setActive(next, null);
  else setActive(null, next);
}
