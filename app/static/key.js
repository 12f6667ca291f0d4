/* The API key panel: asked for when the server answers 401, kept for the tab, forgotten on request. */

import { dropKey, storeKey } from "./api.js";
import { $ } from "./dom.js";
import { loadInfo } from "./info.js";
import { state } from "./state.js";
import { translate } from "./translate.js";

export function showKeyPanel(message) {
  $("key-message").textContent = message;
  $("key-panel").hidden = false;
  $("api-key").value = "";
  $("api-key").focus();
}

/** The key typed in: used from now on; the translation it was missing for is asked again. */
export async function saveKey(event) {
  event.preventDefault();
  storeKey($("api-key").value.trim());
  $("key-panel").hidden = true;
  await loadInfo();
  if (state.lastError && state.lastError.status === 401 && $("source").value.trim()) translate();
  else $("source").focus();
}

export function forgetKey() {
  dropKey();
  loadInfo();
}
