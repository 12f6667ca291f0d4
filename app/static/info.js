/* The server's model: its facts from /info, its languages, and the picker of a server with several models. */

import { api, session } from "./api.js";
import { $ } from "./dom.js";
import { showKeyPanel } from "./key.js";
import { languageName, loadLanguages, showLanguages, showPickedLanguages } from "./languages.js";
import { state } from "./state.js";
import { clearResults, setState } from "./status.js";

/** Asks /info about the model picked (retried while the server loads); asks for a key when the server wants one. */
export async function loadInfo() {
  try {
    const info = await api(session.model ? `info?model=${encodeURIComponent(session.model)}` : "info");
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
  $("key-button").hidden = !session.key;
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
export function pickModel() {
  session.model = $("model-select").value;
  clearResults("Translate a sentence to explore its attention.");
  setState("idle", "");
  loadInfo();
}
