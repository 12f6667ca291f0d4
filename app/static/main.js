/* nmt-serve attention viewer: plain JavaScript modules, no build step, nothing fetched but this server's own
 * /info, /models (a many-to-many model's languages), /tokenize, /translate and /attention. This module is the entry
 * (index.html loads it as a module script): it wires the page's controls to the modules that do the work:
 *   api.js          the fetch helper, the API key and the model picked (what every call carries)
 *   state.js        the page's shared state
 *   info.js         /info: the model's facts; the model picker    languages.js  language names and pickers
 *   key.js          the API key panel                             status.js     body[data-state], errors, clearing
 *   translate.js    a sentence's three calls                      translation.js  the translation, score, n-best
 *   tokens.js       token chips                                   alignment.js  linked words, highlighted together
 *   attention.js    the pickers and the matrix they pick          heatmap.js, headview.js  its two drawings
 *   cursor.js       the active cell or token: detail, tooltip     dom.js, format.js  DOM and drawing helpers
 *   spans.js        the server's code-point offsets as JavaScript (UTF-16) indices; spans that overlap
 * The browser tests read ids and data-* attributes:
 * body[data-state] (idle, empty, loading, ready, error), #heatmap[data-checksum] (changes with the drawn
 * matrix), rect.cell[data-row][data-col][data-weight], #tooltip[data-weight] for the cell under the mouse,
 * #alternatives li[data-rank][data-score] for the n-best list, and [data-align][data-tokens] for the words and token
 * chips that alignment links (class "aligned" while they, or what they align with, are under the mouse). */

import { highlightAlignment } from "./alignment.js";
import { draw } from "./attention.js";
import { renderTooltip, setActive } from "./cursor.js";
import { $ } from "./dom.js";
import { headViewKeys } from "./headview.js";
import { heatmapKeys } from "./heatmap.js";
import { loadInfo, pickModel } from "./info.js";
import { forgetKey, saveKey } from "./key.js";
import { showPickedLanguages } from "./languages.js";
import { state } from "./state.js";
import { syncAlternatives, translate } from "./translate.js";

function start() {
  $("translate-form").addEventListener("submit", (e) => {
    e.preventDefault();
    translate();
  });
  for (const id of ["source", "reference"]) {
    $(id).addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        translate();
      }
    });
  }
  $("key-form").addEventListener("submit", saveKey);
  $("beam-size").addEventListener("change", syncAlternatives);
  for (const id of ["source-language", "target-language"]) $(id).addEventListener("change", showPickedLanguages);
  $("model-select").addEventListener("change", pickModel);
  syncAlternatives();
  $("output").addEventListener("mouseover", (e) => highlightAlignment(e.target.closest("[data-align]")));
  $("output").addEventListener("mouseleave", () => highlightAlignment(null));
  $("key-button").addEventListener("click", forgetKey);
  $("kind").addEventListener("change", (e) => {
    state.kind = e.target.value;
    draw();
  });
  $("layer").addEventListener("change", (e) => {
    state.layer = Number(e.target.value);
    draw();
  });
  $("head").addEventListener("change", (e) => {
    state.head = e.target.value;
    draw();
  });
  $("heatmap").addEventListener("keydown", heatmapKeys);
  $("heatmap").addEventListener("focus", () => {
    if (state.view && !(state.active && state.active.row !== null && state.active.col !== null)) setActive(0, 0);
  });
  $("headview").addEventListener("keydown", headViewKeys);
  $("headview").addEventListener("focus", () => {
    if (state.view && !state.active) setActive(0, null);
  });
  for (const id of ["heatmap", "headview"]) $(id).addEventListener("blur", () => setActive(null, null));
  for (const id of ["heatmap", "headview"]) $(id).addEventListener("scroll", renderTooltip, { passive: true });
  window.addEventListener("scroll", renderTooltip, { passive: true });
  let width = $("explorer").clientWidth;
  new ResizeObserver(() => {
    const now = $("explorer").clientWidth;
    if (now !== width && state.view) {
      width = now;
      const keep = state.active;
      draw();
      if (keep) setActive(keep.row, keep.col);
    }
  }).observe($("explorer"));

  const params = new URLSearchParams(window.location.search);
  if (params.get("text")) $("source").value = params.get("text");
  if (params.get("reference")) {
    $("reference").value = params.get("reference");
    $("reference-box").open = true;
  }
  loadInfo().then(() => {
    if (params.get("text") && $("key-panel").hidden) translate();
  });
  if (!params.get("text")) $("source").focus();
}

start();
