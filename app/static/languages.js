/* The languages: the fields named after them, and a many-to-many model's source and target pickers. */

import { api } from "./api.js";
import { $ } from "./dom.js";
import { state } from "./state.js";

/** A language code's English name ("de" -> "German"); the code itself when the browser does not know it. */
export function languageName(code, whenUnknown) {
  if (!code || code === "unknown") return whenUnknown;
  try {
    return new Intl.DisplayNames(["en"], { type: "language" }).of(code) || code;
  } catch {
    return code;
  }
}

export const article = (word) => (/^[AEIOU]/i.test(word) ? "an" : "a");

/** Names the fields after the languages (codes such as "de", or "" where unknown) and sets the texts' lang. */
export function showLanguages(source, target, sourceName) {
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
export async function loadLanguages(model) {
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
export function showPickedLanguages() {
  const { source, target } = pickedLanguages();
  const short = (code) => state.languages.get(code) || "";
  showLanguages(short(source), short(target), source === "auto" ? "" : languageName(short(source), source));
}

/** The languages picked for a many-to-many model, as model codes ({source: "auto"} detects); null for a pair one. */
export function pickedLanguages() {
  if (!state.languages) return null;
  return { source: $("source-language").value, target: $("target-language").value };
}
