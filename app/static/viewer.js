/* nmt-serve attention viewer: plain JavaScript, no build step, nothing fetched but this server's own
 * /info, /models (a many-to-many model's languages), /tokenize, /translate and /attention. The browser tests read ids
 * and data-* attributes:
 * body[data-state] (idle, empty, loading, ready, error), #heatmap[data-checksum] (changes with the drawn
 * matrix), rect.cell[data-row][data-col][data-weight], #tooltip[data-weight] for the cell under the mouse,
 * #alternatives li[data-rank][data-score] for the n-best list, and [data-align][data-tokens] for the words and token
 * chips that alignment links (class "aligned" while they, or what they align with, are under the mouse). */
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg"; // a namespace name, not a URL the page loads
const KEY_STORAGE = "nmt-serve-api-key";
const KINDS = {
  cross: { field: "cross_attention", rows: "decoder", cols: "encoder", rowName: "target", colName: "source" },
  encoder: { field: "encoder_attention", rows: "encoder", cols: "encoder", rowName: "source", colName: "source" },
  decoder: { field: "decoder_attention", rows: "decoder", cols: "decoder", rowName: "target", colName: "target" },
};
const BLUES = [
  [247, 251, 255], [222, 235, 247], [198, 219, 239], [158, 202, 225], [107, 174, 214],
  [66, 146, 198], [33, 113, 181], [8, 81, 156], [8, 48, 107],
];
const LABEL_FONT = '11px "DejaVu Sans Mono", Menlo, Consolas, "Liberation Mono", monospace';
const MAX_LABEL_CHARS = 14;

const $ = (id) => document.getElementById(id);
const state = {
  key: readStoredKey(),
  info: null,
  sourceName: "English", // the source language's name, from /info or the language picked; "" when detected
  languages: null, // a many-to-many model's languages, a Map of code -> short name (GET /models); null for a pair one
  model: null, // the model picked (a server with several); null: the server's default
  run: 0, // the latest translate request; answers to older ones are dropped
  lastError: null,
  attention: null, // the /attention answer
  reference: "",
  kind: "cross",
  layer: 0, // index into attention.layers
  head: "avg", // "avg" or an index into attention.heads
  view: null, // what is drawn: {matrix, rows, cols}
  active: null, // {row, col}; either may be null
  heat: null, // heatmap geometry and elements
  hv: null, // head view elements
  hvSide: "query",
  alignments: null, // {group: [source token index for each target token]}: "t" the translation, "h0".. its alternatives
  alignHover: null, // the [data-align] element under the mouse
};

class ApiError extends Error {
  constructor(message, type, status) {
    super(message);
    this.type = type;
    this.status = status;
  }
}

// ---- the API -------------------------------------------------------------------------------------------

function readStoredKey() {
  try {
    return sessionStorage.getItem(KEY_STORAGE) || "";
  } catch {
    return "";
  }
}

async function api(path, body) {
  const headers = { Accept: "application/json" };
  if (body !== undefined && state.model) body = { model: state.model, ...body }; // every call names the model picked
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (state.key) headers.Authorization = `Bearer ${state.key}`;
  let response;
  try {
    response = await fetch(path, {
      method: body === undefined ? "GET" : "POST", headers, body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    throw new ApiError(`could not reach the server (${e.message})`, "network_error", 0);
  }
  let data = null;
  try {
    data = await response.json();
  } catch {
    // not JSON (e.g. a proxy's error page): fall back to the status line below
  }
  if (!response.ok) {
    const message = data && typeof data.error === "string" ? data.error : `HTTP ${response.status} ${response.statusText}`;
    throw new ApiError(message, (data && data.type) || "http_error", response.status);
  }
  return data;
}

async function loadInfo() {
  try {
    const info = await api(state.model ? `info?model=${encodeURIComponent(state.model)}` : "info");
    state.info = info;
    showModels(info.models || [], info.model);
    const langs = info.languages || {};
    if (langs.source === "multilingual") {
      await loadLanguages(info.model);
      showPickedLanguages();
    } else {
      state.languages = null;
      $("language-controls").hidden = true;
      showLanguages(langs.source, langs.target, languageName(langs.source, "Source"));
    }
    const c = info.config || {};
    $("model-info").textContent =
      `${info.model} · ${c.n_encoder_layers}+${c.n_decoder_layers} layers · ${c.n_heads} heads · ` +
      `${info.device} · input limit ${info.limits.max_input_tokens} tokens`;
    $("key-panel").hidden = true;
  } catch (e) {
    $("model-info").textContent = e.message;
    if (e.status === 401) showKeyPanel(e.message);
    else if (e.status === 503 && e.type !== "load_failed") setTimeout(loadInfo, 2000);
  }
  $("key-button").hidden = !state.key;
}

/** A server with several models: a picker of them, this one picked. */
function showModels(names, current) {
  const select = $("model-select");
  $("model-picker").hidden = names.length < 2;
  if (select.options.length !== names.length) {
    select.replaceChildren(...names.map((name) => new Option(name, name)));
  }
  select.value = current;
}

/** Another model picked: its facts and languages; what was shown was the other model's. */
function pickModel() {
  state.model = $("model-select").value;
  clearResults("Translate a sentence to explore its attention.");
  setState("idle", "");
  loadInfo();
}

/** Names the fields after the languages (codes such as "de", or "" where unknown) and sets the texts' lang. */
function showLanguages(source, target, sourceName) {
  state.sourceName = sourceName;
  $("source-label").textContent = sourceName ? `${sourceName} sentence` : "Sentence";
  $("target-name").textContent = languageName(target, "Target");
  const code = (lang) => (lang && lang !== "unknown" ? lang.replaceAll("_", "-") : "");
  for (const id of ["reference", "translation", "alternatives", "target-tokens", "reference-tokens"]) {
    $(id).lang = code(target);
  }
  for (const id of ["source", "source-text"]) $(id).lang = code(source);
}

/** A many-to-many model: its languages from /models in the source and target pickers, the source detected and the
 * target the model's saved one at first. */
async function loadLanguages(model) {
  const entry = ((await api("models")).models || []).find((m) => m.name === model) || {};
  const languages = entry.languages || [];
  const saved = (entry.metadata && entry.metadata.default_languages) || {};
  state.languages = new Map(languages.map((l) => [l.code, l.name]));
  const options = () => languages
    .map((l) => {
      const name = languageName(l.name, l.code);
      return new Option(name === l.code ? l.code : `${name} (${l.code})`, l.code);
    })
    .sort((a, b) => a.text.localeCompare(b.text, "en"));
  const source = $("source-language");
  const target = $("target-language");
  const keep = [source.value, target.value];
  source.replaceChildren(new Option("detect", "auto"), ...options());
  target.replaceChildren(...options());
  const known = (code) => state.languages.has(code);
  source.value = known(keep[0]) ? keep[0] : "auto";
  target.value = known(keep[1]) ? keep[1] : known(saved.target) ? saved.target : target.value;
  $("language-controls").hidden = false;
}

/** The pickers' languages named in the fields (a many-to-many model). */
function showPickedLanguages() {
  const { source, target } = pickedLanguages();
  const short = (code) => state.languages.get(code) || "";
  showLanguages(short(source), short(target), source === "auto" ? "" : languageName(short(source), source));
}

/** The languages picked for a many-to-many model, as model codes ({source: "auto"} detects); null for a pair one. */
function pickedLanguages() {
  if (!state.languages) return null;
  return { source: $("source-language").value, target: $("target-language").value };
}

function showKeyPanel(message) {
  $("key-message").textContent = message;
  $("key-panel").hidden = false;
  $("api-key").value = "";
  $("api-key").focus();
}

async function saveKey(event) {
  event.preventDefault();
  state.key = $("api-key").value.trim();
  try {
    sessionStorage.setItem(KEY_STORAGE, state.key);
  } catch {
    // storage refused (private mode): the key lives in memory for this page only
  }
  $("key-panel").hidden = true;
  await loadInfo();
  if (state.lastError && state.lastError.status === 401 && $("source").value.trim()) translate();
  else $("source").focus();
}

function forgetKey() {
  state.key = "";
  try {
    sessionStorage.removeItem(KEY_STORAGE);
  } catch {
    // nothing stored
  }
  loadInfo();
}

// ---- translate -----------------------------------------------------------------------------------------

function setState(name, message) {
  document.body.dataset.state = name;
  $("status").textContent = message || "";
}

function showError(error) {
  state.lastError = error;
  $("error-title").textContent = error.status ? `Error ${error.status} (${error.type}):` : "Error:";
  $("error-message").textContent = error.message;
  $("error").dataset.type = error.type;
  $("error").hidden = false;
}

function clearResults(placeholder) {
  $("error").hidden = true;
  state.lastError = null;
  $("translation").textContent = "—";
  $("translation").classList.add("placeholder");
  $("translation-meta").textContent = "";
  for (const id of ["source-text", "source-tokens", "target-tokens", "reference-tokens", "alternatives"]) {
    $(id).replaceChildren();
  }
  $("alternatives-box").hidden = $("align-hint").hidden = true;
  state.alignments = state.alignHover = null;
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

async function translate() {
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
    beam_size: beam, num_hypotheses: alternatives, ...picked,
  });
  const attention = (body) =>
    api("attention", { ...body, ...(picked && { source_language: picked.source, target_language: picked.target }) });
  // /attention decodes greedily: for a beam search's translation, it is teacher-forced on that translation instead
  const beamForced = beam > 1 && !reference;
  const attended = beamForced
    ? translated.then((r) => {
      const best = r.translations[0].text;
      return attention(best ? { text, target: best } : { text });
    })
    : attention(reference ? { text, target: reference } : { text });
  tokenized.then((r) => current() && renderSourceTokens(r.results[0].tokens, text), () => {});
  translated.then((r) => current() && renderTranslation(r, beam, text), () => {});
  attended.then((r) => current() && renderAttention(r, reference, beamForced ? beam : 0), () => {});
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

function pieceNode(piece, tag) {
  const node = document.createElement(tag);
  const m = /^(▁*)(.*)$/su.exec(piece);
  if (m[1]) {
    const ws = document.createElement("span");
    ws.className = "ws";
    ws.textContent = m[1];
    node.append(ws);
  }
  node.append(m[2]);
  return node;
}

/** <s>, </s>, <pad>, <unk>, and a many-to-many model's language codes (`deu_Latn`; M2M100's `__de__`). */
const isSpecial = (piece) =>
  /^<(s|\/s|pad|unk)>$/.test(piece) || Boolean(state.languages?.has(piece.replace(/^__(.+)__$/, "$1")));

function fillTokens(list, pieces, titles, align) {
  list.replaceChildren(
    ...pieces.map((piece, i) => {
      const li = pieceNode(piece, "li");
      li.dataset.index = i;
      if (isSpecial(piece)) li.classList.add("special");
      else if (align) Object.assign(li.dataset, { ...align, tokens: String(i) });
      if (titles) li.title = titles[i];
      return li;
    }),
  );
}

/** The search settings from the form: a beam size of 1..8 and 1..beam alternatives. */
function searchSettings() {
  const beam = Math.min(8, Math.max(1, Number($("beam-size").value) || 1));
  return { beam, alternatives: Math.min(beam, Math.max(1, Number($("num-hypotheses").value) || 1)) };
}

/** Offers 1..beam alternatives, keeping the choice where it still fits. */
function syncAlternatives() {
  const select = $("num-hypotheses");
  const { beam, alternatives } = searchSettings();
  select.replaceChildren(...Array.from({ length: beam }, (_, i) => new Option(String(i + 1), String(i + 1))));
  select.value = String(alternatives);
}

function renderSourceTokens(tokens, text) {
  const titles = tokens.map((t) => `id ${t.id} · characters ${t.start}–${t.end}`);
  fillTokens($("source-tokens"), tokens.map((t) => t.text), titles, { align: "source" });
  const words = tokens.map((t, i) => ({ index: i, start: t.start, end: t.end, title: `source token ${i}: ${t.text}` }));
  linkedText($("source-text"), text, words.filter((_, i) => !tokens[i].special), { align: "source" });
  const limit = state.info ? state.info.limits.max_input_tokens : Infinity;
  $("source-count").textContent = `${tokens.length}${limit === Infinity ? "" : ` (limit ${limit})`}`;
  $("source-count").classList.toggle("over", tokens.length > limit);
}

function renderTranslation(response, beam, source) {
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

/** Below this probability a word of the translation is marked unsure (class "unsure"). */
const UNSURE = 0.5;

/** Puts a translation's text into node, a span for each aligned target token (its title quoting the source word it
 * aligns to in source, the text translated, and the probability of the word it is part of); records its alignment
 * under group. Tokens of words the model was unsure of (return_word_confidence) are marked. */
function showTarget(node, t, group, source) {
  const alignment = t.alignment || [];
  const map = [];
  for (const a of alignment) map[a.target_token] = a.source_token;
  state.alignments[group] = map;
  const inWord = (start) => (t.words || []).find((w) => w.span[0] <= start && start < w.span[1]);
  const words = alignment.map((a) => {
    const word = inWord(a.target_span[0]);
    const sure = word ? ` · the word “${word.text}”: probability ${word.confidence.toFixed(2)}` : "";
    return {
      index: a.target_token, start: a.target_span[0], end: a.target_span[1],
      title: `aligned to “${source.slice(a.source_span[0], a.source_span[1])}” (source token ${a.source_token})${sure}`,
      unsure: Boolean(word && word.confidence < UNSURE),
    };
  });
  linkedText(node, t.text, words, { align: "target", group });
}

/** Fills node with text, the character spans of words ({index, start, end, title}) each in a span carrying data
 * (data-align, data-group) and data-tokens, the indices of the tokens it shows (several when their spans overlap). */
function linkedText(node, text, words, data) {
  node.replaceChildren();
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
function highlightAlignment(el) {
  if (el === state.alignHover) return;
  state.alignHover = el;
  const groups = state.alignments || {};
  const ids = (node) => node.dataset.tokens.split(" ").map(Number);
  const sources = new Set();
  const targets = {}; // group -> Set of target token indices
  if (el) {
    const picked = ids(el);
    if (el.dataset.align === "target") {
      const map = groups[el.dataset.group] || [];
      targets[el.dataset.group] = new Set(picked);
      for (const i of picked) if (map[i] !== undefined) sources.add(map[i]);
    } else {
      picked.forEach((j) => sources.add(j));
      for (const [group, map] of Object.entries(groups)) {
        targets[group] = new Set(map.flatMap((j, i) => (sources.has(j) ? [i] : [])));
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

// ---- attention -----------------------------------------------------------------------------------------

function renderAttention(a, reference, beam) {
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
      ? `Teacher-forced on the beam search's translation (beam ${beam}): decoder rows are ${start} and its tokens; ` +
        "row t predicted token t+1."
      : `Decoder rows are ${start} and the model's translation; row t is the step that predicted token t+1.`;
  draw();
}

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

function draw() {
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

// ---- drawing helpers -----------------------------------------------------------------------------------

function svg(tag, attrs, parent) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (parent) parent.append(node);
  return node;
}

function svgText(parent, x, y, text, attrs, title) {
  const node = svg("text", { x, y, ...attrs }, parent);
  node.textContent = text;
  if (title !== undefined && title !== text) svg("title", {}, node).textContent = title;
  return node;
}

/** A language code's English name ("de" -> "German"); the code itself when the browser does not know it. */
function languageName(code, whenUnknown) {
  if (!code || code === "unknown") return whenUnknown;
  try {
    return new Intl.DisplayNames(["en"], { type: "language" }).of(code) || code;
  } catch {
    return code;
  }
}

const article = (word) => (/^[AEIOU]/i.test(word) ? "an" : "a");

const label = (t) => ([...t].length > MAX_LABEL_CHARS ? `${[...t].slice(0, MAX_LABEL_CHARS - 1).join("")}…` : t);

let measurer = null;
function textWidth(strings) {
  measurer = measurer || document.createElement("canvas").getContext("2d");
  measurer.font = LABEL_FONT;
  return Math.ceil(Math.max(0, ...strings.map((s) => measurer.measureText(s).width)));
}

function color(w) {
  const t = Math.min(1, Math.max(0, w)) * (BLUES.length - 1);
  const i = Math.min(BLUES.length - 2, Math.floor(t));
  const f = t - i;
  const c = BLUES[i].map((v, k) => Math.round(v + (BLUES[i + 1][k] - v) * f));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

const fmt = (w) => w.toFixed(4);
const short = (w) => (w >= 0.995 ? "1" : w.toFixed(2).replace(/^0/, ""));

// ---- heatmap -------------------------------------------------------------------------------------------

function drawHeatmap(view) {
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

function paintHeatmap() {
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

function heatmapKeys(e) {
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

// ---- head view -----------------------------------------------------------------------------------------

function drawHeadView(view) {
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

function paintHeadView() {
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

function headViewKeys(e) {
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

// ---- what is under the mouse or the keyboard cursor -------------------------------------------------------

function setActive(row, col) {
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

function renderDetail() {
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

function renderTooltip() {
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

// ---- wiring --------------------------------------------------------------------------------------------

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
