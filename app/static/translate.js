/* Translate: the form's settings, and the three calls a sentence makes (/tokenize, /translate, /attention), each
 * shown as it answers. */

import { ApiError, api } from "./api.js";
import { renderAttention } from "./attention.js";
import { $ } from "./dom.js";
import { showKeyPanel } from "./key.js";
import { article, pickedLanguages } from "./languages.js";
import { state } from "./state.js";
import { clearResults, setState, showError } from "./status.js";
import { renderSourceTokens, renderTranslation } from "./translation.js";

export async function translate() {
  const text = $("source").value;
  const reference = $("reference").value.trim();
  const run = ++state.run;
  const current = () => run === state.run;
  $("translate").removeAttribute("aria-busy");
  if (!text.trim()) {
    clearResults("Translate a sentence to explore its attention.");
    const what = state.sourceName ? `${article(state.sourceName)} ${state.sourceName} sentence` : "a sentence";
    setState("empty", `Type ${what} first, then press Translate.`);
    $("source").focus();
    return;
  }
  clearResults("Computing attention…");
  setState("loading", "Translating…");
  $("translate").setAttribute("aria-busy", "true");
  const t0 = performance.now();
  const { beam, alternatives } = searchSettings();
  const picked = pickedLanguages(); // a many-to-many model: every call names the languages
  const tokenized = api("tokenize", { text, side: "source", ...(picked && { language: picked.source }) });
  const translated = api("translate", {
    text, return_tokens: true, return_scores: true, return_alignment: true, return_word_confidence: true,
    return_segments: true, beam_size: beam, num_hypotheses: alternatives, ...picked,
  });
  const attention = (body) =>
    api("attention", { ...body, ...(picked && { source_language: picked.source, target_language: picked.target }) });
  // /attention decodes the text greedily as one sequence: a greedy one-sentence translation is that, asked at once;
  // a beam search's, or one made sentence by sentence, is teacher-forced on instead
  const early = reference || beam > 1 ? null : attention({ text });
  early?.catch(() => {});
  let forced = 0; // what the translation was teacher-forced on: the beam's size, or "sentences"
  const attended = reference
    ? attention({ text, target: reference })
    : translated.then((r) => {
      const best = r.translations[0];
      const sentences = (best.segments?.length ?? 1) > 1;
      if (early && !sentences) return early;
      forced = beam > 1 ? beam : "sentences";
      return attention(best.text ? { text, target: best.text } : { text });
    });
  tokenized.then((r) => current() && renderSourceTokens(r.results[0].tokens, text), () => {});
  translated.then((r) => current() && renderTranslation(r, beam, text), () => {});
  attended.then((r) => current() && renderAttention(r, reference, forced), () => {});
  const settled = await Promise.allSettled([translated, attended, tokenized]);
  if (!current()) return;
  $("translate").removeAttribute("aria-busy");
  const failed = settled.find((s) => s.status === "rejected");
  if (failed) {
    const error = failed.reason instanceof ApiError ? failed.reason : new ApiError(String(failed.reason), "page_error", 0);
    showError(error);
    setState("error", "");
    for (const id of ["heatmap", "headview"]) {
      if (!state.attention) $(id).querySelector(".placeholder").textContent = "No attention to show: see the error above.";
    }
    if (error.status === 401) showKeyPanel(error.message);
    return;
  }
  setState("ready", `Done in ${((performance.now() - t0) / 1000).toFixed(2)} s.`);
}

/** The search settings from the form: a beam size of 1..8 and 1..beam alternatives. */
function searchSettings() {
  const beam = Math.min(8, Math.max(1, Number($("beam-size").value) || 1));
  return { beam, alternatives: Math.min(beam, Math.max(1, Number($("num-hypotheses").value) || 1)) };
}

/** Offers 1..beam alternatives, keeping the choice where it still fits. */
export function syncAlternatives() {
  const select = $("num-hypotheses");
  const { beam, alternatives } = searchSettings();
  select.replaceChildren(...Array.from({ length: beam }, (_, i) => new Option(String(i + 1), String(i + 1))));
  select.value = String(alternatives);
}
