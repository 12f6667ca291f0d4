/* The translation and its source: the texts with their aligned words, the words the model was unsure of underlined,
 * the tokens, the score line and the n-best alternatives. */

import { linkedText } from "./alignment.js";
import { $ } from "./dom.js";
import { utf16Offsets } from "./spans.js";
import { state } from "./state.js";
import { fillTokens } from "./tokens.js";

/** Below this probability a word of the translation is marked unsure (class "unsure"). */
const UNSURE = 0.5;

/** tokens: /tokenize's, their spans code-point offsets into text. */
export function renderSourceTokens(tokens, text) {
  state.sourceSpans = tokens.map((t) => [t.start, t.end]); // what alignments' source spans are matched against
  const titles = tokens.map((t) => `id ${t.id} · characters ${t.start}–${t.end}`);
  fillTokens($("source-tokens"), tokens.map((t) => t.text), titles, { align: "source" });
  const words = tokens.map((t, i) => ({ index: i, start: t.start, end: t.end, title: `source token ${i}: ${t.text}` }));
  linkedText($("source-text"), text, words.filter((_, i) => !tokens[i].special), { align: "source" });
  const limit = state.info ? state.info.limits.max_input_tokens : Infinity;
  $("source-count").textContent = `${tokens.length}${limit === Infinity ? "" : ` (limit ${limit})`}`;
  $("source-count").classList.toggle("over", tokens.length > limit);
}

export function renderTranslation(response, beam, source) {
  const t = response.translations[0];
  const hyps = t.hypotheses || [];
  state.alignments = {};
  showTarget($("translation"), t, "t", source);
  $("translation").classList.toggle("placeholder", !t.text);
  if (!t.text) $("translation").textContent = "(empty)";
  const ended = t.finish_reason === "eos" ? "ended with </s>" : "stopped at the length limit";
  const score = t.score === undefined || t.score === null ? "" : ` · mean log-prob ${t.score.toFixed(3)}`;
  const search = beam > 1 ? ` · beam ${beam}` : "";
  const judged = t.confidence === undefined || t.confidence === null ? "" : ` · confidence ${t.confidence.toFixed(2)}`
    + (response.calibrated ? "" : " (not calibrated)") + (t.flags.length ? ` · flagged: ${t.flags.join(", ")}` : "");
  $("translation-meta").textContent = `${response.usage.output_tokens} tokens, ${ended}${score}${search}${judged}`;
  const pieces = [...(t.tokens || []), ...(t.finish_reason === "eos" ? ["</s>"] : [])];
  fillTokens($("target-tokens"), pieces, (t.token_ids || []).map((id) => `id ${id}`), { align: "target", group: "t" });
  $("target-count").textContent = String(pieces.length);
  $("alternatives").replaceChildren(
    ...hyps.map((h, r) => {
      const li = document.createElement("li");
      Object.assign(li.dataset, { rank: String(r), score: String(h.score) });
      const text = document.createElement("span");
      text.className = "alt-text";
      showTarget(text, h, `h${r}`, source);
      if (!h.text) text.textContent = "(empty)";
      const sc = document.createElement("span");
      sc.className = "alt-score";
      sc.title = "score: the mean log-probability of its tokens, </s> included";
      sc.textContent = h.score.toFixed(3);
      li.append(text, " ", sc);
      return li;
    }),
  );
  $("alternatives-box").hidden = hyps.length < 2;
  $("align-hint").hidden = !t.alignment;
}

/** Puts a translation's text into node, a span for each aligned target token (its title quoting the source word it
 * aligns to in source, the text translated, and the probability of the word it is part of); records its alignment
 * under group: the source spans each target token aligns to. Tokens of words the model was unsure of
 * (return_word_confidence) are marked. */
function showTarget(node, t, group, source) {
  const alignment = t.alignment || [];
  const map = [];
  for (const a of alignment) (map[a.target_token] ||= []).push(a.source_span);
  state.alignments[group] = map;
  const inSource = utf16Offsets(source);
  const inWord = (start) => (t.words || []).find((w) => w.span[0] <= start && start < w.span[1]);
  const words = alignment.map((a) => {
    const word = inWord(a.target_span[0]);
    const sure = word ? ` · the word “${word.text}”: probability ${word.confidence.toFixed(2)}` : "";
    return {
      index: a.target_token, start: a.target_span[0], end: a.target_span[1],
      title: `aligned to “${source.slice(inSource(a.source_span[0]), inSource(a.source_span[1]))}” (characters ` +
        `${a.source_span[0]}–${a.source_span[1]} of the source)${sure}`,
      unsure: Boolean(word && word.confidence < UNSURE),
    };
  });
  linkedText(node, t.text, words, { align: "target", group });
}
