/* What the page is doing: body[data-state] and the status line, the error box, and the results cleared. */

import { renderDetail, renderTooltip } from "./cursor.js";
import { $ } from "./dom.js";
import { state } from "./state.js";

/** name: idle, empty, loading, ready or error (body[data-state], which the browser tests wait on). */
export function setState(name, message) {
  document.body.dataset.state = name;
  $("status").textContent = message || "";
}

export function showError(error) {
  state.lastError = error;
  $("error-title").textContent = error.status ? `Error ${error.status} (${error.type}):` : "Error:";
  $("error-message").textContent = error.message;
  $("error").dataset.type = error.type;
  $("error").hidden = false;
}

/** Empties the translation, the tokens and the attention views, which show placeholder. */
export function clearResults(placeholder) {
  $("error").hidden = true;
  state.lastError = null;
  $("translation").textContent = "—";
  $("translation").classList.add("placeholder");
  $("translation-meta").textContent = "";
  for (const id of ["source-text", "source-tokens", "target-tokens", "reference-tokens", "alternatives"]) {
    $(id).replaceChildren();
  }
  $("alternatives-box").hidden = $("align-hint").hidden = true;
  state.alignments = state.alignHover = state.sourceSpans = null;
  $("source-count").textContent = $("target-count").textContent = "";
  $("source-count").classList.remove("over");
  $("reference-tokens-box").hidden = true;
  state.attention = state.view = state.active = state.heat = state.hv = null;
  for (const id of ["kind", "layer", "head"]) $(id).disabled = true;
  $("explorer-note").textContent = "";
  for (const id of ["heatmap", "headview"]) {
    const p = document.createElement("p");
    p.className = "placeholder";
    p.textContent = placeholder;
    $(id).replaceChildren(p);
    delete $(id).dataset.checksum;
  }
  renderDetail();
  renderTooltip();
}
