/* The heatmap: a cell per query (row) and key (column), coloured by its weight; hover or arrow keys pick cells. */

import { setActive } from "./cursor.js";
import { $, svg, svgText } from "./dom.js";
import { color, label, short, textWidth } from "./format.js";
import { state } from "./state.js";

export function drawHeatmap(view) {
  const box = $("heatmap");
  const { matrix, rows, cols } = view;
  const rowW = textWidth(rows.map(label)) + 10;
  const colW = textWidth(cols.map(label));
  const avail = Math.max(box.clientWidth - 2, 160);
  const fit = (slant) => Math.floor(Math.min(36, Math.max(12, (avail - rowW - (slant ? colW * 0.71 + 4 : 4)) / cols.length)));
  let slant = true;
  let cell = fit(true);
  if (cell < 17) {
    slant = false;
    cell = fit(false);
  }
  const top = Math.ceil(slant ? colW * 0.71 + 12 : colW + 10);
  const width = Math.ceil(rowW + cols.length * cell + (slant ? colW * 0.71 + 4 : 4));
  const height = top + rows.length * cell + 2;
  const root = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, "aria-hidden": "true" });

  const rowLabels = rows.map((t, i) =>
    svgText(root, rowW - 6, top + i * cell + cell / 2, label(t), {
      class: "row-label", "data-row": i, "text-anchor": "end", "dominant-baseline": "central",
    }, t));
  const colLabels = cols.map((t, j) => {
    const x = rowW + j * cell + cell / 2;
    return svgText(root, 0, 0, label(t), {
      class: "col-label", "data-col": j, "dominant-baseline": "central",
      transform: `translate(${x},${top - 6}) rotate(${slant ? -45 : -90})`,
    }, t);
  });
  const cells = matrix.map((row, i) =>
    row.map((w, j) =>
      svg("rect", {
        class: "cell", x: rowW + j * cell, y: top + i * cell, width: cell, height: cell, fill: color(w),
        "data-row": i, "data-col": j, "data-weight": String(w),
      }, root)));
  const rowHl = svg("rect", { class: "hl", x: rowW, width: cols.length * cell, height: cell, visibility: "hidden" }, root);
  const colHl = svg("rect", { class: "hl", y: top, width: cell, height: rows.length * cell, visibility: "hidden" }, root);
  const cursor = svg("rect", { class: "cursor", width: cell, height: cell, visibility: "hidden" }, root);
  const values = svg("g", {}, root);

  root.addEventListener("mouseover", (e) => {
    const d = e.target.dataset || {};
    const row = d.row === undefined ? null : Number(d.row);
    const col = d.col === undefined ? null : Number(d.col);
    if (row !== null || col !== null) setActive(row, col);
  });
  root.addEventListener("mouseleave", () => setActive(null, null));
  box.replaceChildren(root);
  state.heat = { rowW, top, cell, cells, rowLabels, colLabels, rowHl, colHl, cursor, values };
}

/** Marks the active row, column or cell, and writes its weights into the cells when they are big enough. */
export function paintHeatmap() {
  const h = state.heat;
  if (!h) return;
  const { row, col } = state.active || { row: null, col: null };
  const m = state.view.matrix;
  h.rowLabels.forEach((el, i) => el.classList.toggle("active-label", i === row));
  h.colLabels.forEach((el, j) => el.classList.toggle("active-label", j === col));
  h.rowHl.setAttribute("visibility", row === null ? "hidden" : "visible");
  h.colHl.setAttribute("visibility", col === null ? "hidden" : "visible");
  if (row !== null) h.rowHl.setAttribute("y", h.top + row * h.cell);
  if (col !== null) h.colHl.setAttribute("x", h.rowW + col * h.cell);
  const both = row !== null && col !== null;
  h.cursor.setAttribute("visibility", both ? "visible" : "hidden");
  if (both) {
    h.cursor.setAttribute("x", h.rowW + col * h.cell);
    h.cursor.setAttribute("y", h.top + row * h.cell);
  }
  h.values.replaceChildren();
  if (h.cell < 20 || (row === null && col === null)) return;
  const put = (i, j) => {
    const w = m[i][j];
    svgText(h.values, h.rowW + j * h.cell + h.cell / 2, h.top + i * h.cell + h.cell / 2, short(w), {
      class: w > 0.55 ? "value on-dark" : "value", "text-anchor": "middle", "dominant-baseline": "central",
    });
  };
  if (row !== null) m[row].forEach((_, j) => put(row, j));
  else m.forEach((_, i) => put(i, col));
}

/** Arrow keys, Home/End and PageUp/PageDown move the cell; Escape clears. */
export function heatmapKeys(e) {
  if (!state.view) return;
  const nR = state.view.rows.length;
  const nC = state.view.cols.length;
  let { row, col } = state.active || {};
  row = row ?? 0;
  col = col ?? 0;
  const moves = {
    ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1],
    Home: [0, -nC], End: [0, nC], PageUp: [-nR, 0], PageDown: [nR, 0],
  };
  if (e.key === "Escape") {
    setActive(null, null);
  } else if (moves[e.key]) {
    const [dr, dc] = state.active && state.active.row !== null && state.active.col !== null ? moves[e.key] : [0, 0];
    setActive(Math.min(nR - 1, Math.max(0, row + dr)), Math.min(nC - 1, Math.max(0, col + dc)));
  } else {
    return;
  }
  e.preventDefault();
}
