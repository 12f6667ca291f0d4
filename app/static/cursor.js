/* What is under the mouse or the keyboard cursor: the active row, column or cell, shown in both views, the source
 * tokens, the weights list below them and the tooltip (#tooltip[data-weight]). */

import { $ } from "./dom.js";
import { fmt } from "./format.js";
import { paintHeadView } from "./headview.js";
import { paintHeatmap } from "./heatmap.js";
import { state } from "./state.js";

/** row (a query), col (a key), either or both null. */
export function setActive(row, col) {
  const next = row === null && col === null ? null : { row, col };
  const same = JSON.stringify(next) === JSON.stringify(state.active);
  state.active = next;
  if (same) return;
  paintHeatmap();
  paintHeadView();
  for (const li of $("source-tokens").children) {
    const i = Number(li.dataset.index);
    const k = state.view && state.view.kind;
    const on = k && ((k.cols === "encoder" && i === col) || (k.rows === "encoder" && i === row));
    li.classList.toggle("active", Boolean(on));
  }
  renderDetail();
  renderTooltip();
}

/** The active row's or column's weights, a bar each. */
export function renderDetail() {
  const summary = $("detail-summary");
  const list = $("detail-weights");
  list.replaceChildren();
  const { row, col } = state.active || { row: null, col: null };
  if (!state.view || (row === null && col === null)) {
    summary.textContent = "Hover or focus a cell or a token to see its weights. Arrow keys move, Escape clears.";
    summary.classList.add("muted");
    return;
  }
  summary.classList.remove("muted");
  const { matrix, rows, cols } = state.view;
  let pairs;
  if (row !== null) {
    summary.textContent =
      col === null
        ? `Query “${rows[row]}” (row ${row}) attends to:`
        : `Query “${rows[row]}” (row ${row}) → key “${cols[col]}” (column ${col}): ${fmt(matrix[row][col])}. The whole row:`;
    pairs = cols.map((t, j) => [t, matrix[row][j], j === col]);
  } else {
    summary.textContent = `Key “${cols[col]}” (column ${col}) is attended to by:`;
    pairs = rows.map((t, i) => [t, matrix[i][col], false]);
  }
  list.replaceChildren(
    ...pairs.map(([t, w, picked]) => {
      const li = document.createElement("li");
      const name = document.createElement("span");
      name.textContent = t;
      if (picked) name.className = "picked";
      const bar = document.createElement("span");
      bar.className = "bar";
      bar.style.width = `${Math.round(w * 40)}px`;
      li.append(name, bar, fmt(w));
      return li;
    }),
  );
}

/** The active cell's query, key and weight beside it in the heatmap; hidden without one. */
export function renderTooltip() {
  const tip = $("tooltip");
  const a = state.active;
  if (!state.heat || !a || a.row === null || a.col === null) {
    tip.hidden = true;
    delete tip.dataset.weight;
    return;
  }
  const w = state.view.matrix[a.row][a.col];
  tip.replaceChildren();
  const b = (text) => {
    const el = document.createElement("b");
    el.textContent = text;
    return el;
  };
  const weight = document.createElement("span");
  weight.id = "tooltip-weight";
  weight.textContent = fmt(w);
  tip.append(b(state.view.rows[a.row]), " → ", b(state.view.cols[a.col]), document.createElement("br"), "weight ", weight);
  Object.assign(tip.dataset, { row: a.row, col: a.col, weight: String(w) });
  tip.hidden = false;
  const r = state.heat.cells[a.row][a.col].getBoundingClientRect();
  const tw = tip.offsetWidth;
  const th = tip.offsetHeight;
  // below and to the right of the cell, off its row and column; flipped where the window ends
  const left = r.right + 6 + tw > window.innerWidth ? r.left - 6 - tw : r.right + 6;
  const top = r.bottom + 6 + th > window.innerHeight ? r.top - 6 - th : r.bottom + 6;
  tip.style.left = `${Math.max(4, left)}px`;
  tip.style.top = `${Math.max(4, top)}px`;
}
