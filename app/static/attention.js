/* Attention: the /attention answer in the explorer's pickers (kind, layer, head), and the matrix they pick drawn as a
 * heatmap and a head view (#heatmap[data-checksum] changes with what is drawn). */

import { renderDetail, renderTooltip } from "./cursor.js";
import { $ } from "./dom.js";
import { drawHeadView } from "./headview.js";
import { drawHeatmap } from "./heatmap.js";
import { state } from "./state.js";
import { fillTokens } from "./tokens.js";

const KINDS = {
  cross: { field: "cross_attention", rows: "decoder", cols: "encoder", rowName: "target", colName: "source" },
  encoder: { field: "encoder_attention", rows: "encoder", cols: "encoder", rowName: "source", colName: "source" },
  decoder: { field: "decoder_attention", rows: "decoder", cols: "decoder", rowName: "target", colName: "target" },
};

/** a: the /attention answer; reference: the text it was teacher-forced on, if any; beam: the beam size whose
 * translation it was teacher-forced on, or "sentences" for a translation made sentence by sentence (0: the model's
 * own greedy translation of the text as one sequence). */
export function renderAttention(a, reference, beam) {
  state.attention = a;
  state.reference = reference;
  if (reference) {
    fillTokens($("reference-tokens"), a.decoder_tokens.slice(1));
    $("reference-tokens-box").hidden = false;
  }
  const layer = $("layer");
  layer.replaceChildren(...a.layers.map((l, i) => new Option(String(l), String(i))));
  state.layer = Math.min(state.layer, a.layers.length - 1);
  layer.value = String(state.layer);
  const head = $("head");
  head.replaceChildren(new Option("mean of all", "avg"), ...a.heads.map((h, i) => new Option(String(h), String(i))));
  if (state.head !== "avg" && Number(state.head) >= a.heads.length) state.head = "avg";
  head.value = state.head;
  $("kind").value = state.kind;
  for (const id of ["kind", "layer", "head"]) $(id).disabled = false;
  const start = state.languages ? "</s>, the target language's code" : "<s>"; // what the decoder is fed first
  $("explorer-note").textContent = reference
    ? `Teacher-forced on your reference: decoder rows are ${start} and the reference's tokens; row t predicted ` +
      "token t+1."
    : beam
      ? `Teacher-forced on the ${beam === "sentences" ? "translation, made sentence by sentence" : `beam search's ` +
        `translation (beam ${beam})`}: decoder rows are ${start} and its tokens; row t predicted token t+1.`
      : `Decoder rows are ${start} and the model's translation; row t is the step that predicted token t+1.`;
  draw();
}

/** The matrix the pickers choose: one head's weights, or the mean over the layer's heads. */
function currentView() {
  const a = state.attention;
  const kind = KINDS[state.kind];
  const heads = a[kind.field][state.layer]; // (H, Q, K)
  let matrix;
  if (state.head === "avg") {
    matrix = heads[0].map((row, q) => row.map((_, k) => heads.reduce((sum, h) => sum + h[q][k], 0) / heads.length));
  } else {
    matrix = heads[Number(state.head)];
  }
  const tokens = { encoder: a.encoder_tokens, decoder: a.decoder_tokens };
  return { matrix, rows: tokens[kind.rows], cols: tokens[kind.cols], kind };
}

function checksum(view) {
  let h = 0x811c9dc5; // FNV-1a over the drawn labels and weights (to 4 decimals, as the API rounds them)
  const feed = (n) => {
    h = Math.imul(h ^ (n & 0xffff), 16777619);
    h = Math.imul(h ^ (n >>> 16), 16777619);
  };
  for (const label of [...view.rows, "|", ...view.cols]) for (const ch of label) feed(ch.codePointAt(0));
  for (const row of view.matrix) for (const w of row) feed(Math.round(w * 1e4));
  return (h >>> 0).toString(16).padStart(8, "0");
}

/** Draws the picked matrix in both views, nothing under the cursor. */
export function draw() {
  if (!state.attention) return;
  const view = currentView();
  state.view = view;
  state.active = null;
  drawHeatmap(view);
  drawHeadView(view);
  const sum = checksum(view);
  const layer = String(state.attention.layers[state.layer]);
  for (const id of ["heatmap", "headview"]) {
    Object.assign($(id).dataset, {
      checksum: sum, kind: state.kind, layer, head: state.head, rows: view.rows.length, cols: view.cols.length,
    });
  }
  const what = { cross: "cross-attention", encoder: "encoder self-attention", decoder: "decoder self-attention" };
  $("heatmap-caption").textContent =
    `${what[state.kind]} · rows: ${view.kind.rowName} (queries) · columns: ${view.kind.colName} (keys)`;
  renderDetail();
  renderTooltip();
}
