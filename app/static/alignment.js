/* Alignment: words of a text linked to their tokens ([data-align][data-tokens]), and, under the mouse, everything
 * alignment links them to highlighted (class "aligned"). Target tokens are linked to the source by character span:
 * an alignment's source_span names the /tokenize tokens whose spans overlap it (its source_token counts the tokens
 * of the text's pieces, each sentence encoded on its own, which is not /tokenize's numbering). */

import { $ } from "./dom.js";
import { overlaps, utf16Offsets } from "./spans.js";
import { state } from "./state.js";

/** Fills node with text, the character spans of words ({index, start, end, title}; code-point offsets, as the server
 * counts) each in a span carrying data (data-align, data-group) and data-tokens, the indices of the tokens it shows
 * (several when their spans overlap). */
export function linkedText(node, text, words, data) {
  node.replaceChildren();
  const unit = utf16Offsets(text); // the words' spans as indices into text
  words = words.map((w) => ({ ...w, start: unit(w.start), end: unit(w.end) }));
  let at = 0;
  let last = null;
  for (const w of [...words].filter((w) => w.end > w.start).sort((a, b) => a.start - b.start || a.index - b.index)) {
    if (last && w.start < at) { // shares characters with the previous one: one span for both
      last.dataset.tokens += ` ${w.index}`;
      if (w.end > at) last.append(text.slice(at, w.end));
      at = Math.max(at, w.end);
      continue;
    }
    if (w.start > at) node.append(text.slice(at, w.start));
    last = document.createElement("span");
    Object.assign(last.dataset, data, { tokens: String(w.index) });
    last.textContent = text.slice(w.start, w.end);
    if (w.title) last.title = w.title;
    if (w.unsure) last.classList.add("unsure");
    node.append(last);
    at = w.end;
  }
  if (at < text.length) node.append(text.slice(at));
}

/** Highlights el (a [data-align] element, or null to clear) and everything alignment links it to. */
export function highlightAlignment(el) {
  if (el === state.alignHover) return;
  state.alignHover = el;
  const groups = state.alignments || {};
  const tokens = state.sourceSpans || []; // /tokenize's spans, once it has answered
  const ids = (node) => node.dataset.tokens.split(" ").map(Number);
  const sources = new Set(); // /tokenize indices
  const targets = {}; // group -> Set of target token indices
  if (el) {
    const picked = ids(el);
    if (el.dataset.align === "target") {
      const map = groups[el.dataset.group] || [];
      targets[el.dataset.group] = new Set(picked);
      const spans = picked.flatMap((i) => map[i] || []);
      tokens.forEach((t, j) => spans.some((s) => overlaps(s, t)) && sources.add(j));
    } else {
      picked.forEach((j) => sources.add(j));
      const spans = picked.flatMap((j) => (tokens[j] ? [tokens[j]] : []));
      const linked = (links) => links.some((s) => spans.some((t) => overlaps(s, t)));
      for (const [group, map] of Object.entries(groups)) {
        targets[group] = new Set(map.flatMap((links, i) => (linked(links) ? [i] : [])));
      }
    }
  }
  for (const node of $("output").querySelectorAll("[data-align]")) {
    const on = node.dataset.align === "source"
      ? ids(node).some((j) => sources.has(j))
      : ids(node).some((i) => targets[node.dataset.group] && targets[node.dataset.group].has(i));
    node.classList.toggle("aligned", on);
    node.classList.toggle("hovered", node === el);
  }
}
