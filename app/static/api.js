/* The API: fetch helpers. Every call is a path relative to the page (which may be served under a path prefix), sends
 * the API key when one was given, and names the model picked. */

const KEY_STORAGE = "nmt-serve-api-key";

/** What every call carries: the API key ("" for none; kept in this tab's session storage) and the model picked in the
 * model picker (null: the server's default). */
export const session = { key: readStoredKey(), model: null };

export class ApiError extends Error {
  constructor(message, type, status) {
    super(message);
    this.type = type;
    this.status = status;
  }
}

function readStoredKey() {
  try {
    return sessionStorage.getItem(KEY_STORAGE) || "";
  } catch {
    return "";
  }
}

/** Uses key from now on, and keeps it in this tab's session storage. */
export function storeKey(key) {
  session.key = key;
  try {
    sessionStorage.setItem(KEY_STORAGE, key);
  } catch {
    // storage refused (private mode): the key lives in memory for this page only
  }
}

/** Sends no key from now on. */
export function dropKey() {
  session.key = "";
  try {
    sessionStorage.removeItem(KEY_STORAGE);
  } catch {
    // nothing stored
  }
}

/** GET path, or POST body to it as JSON; the answer's JSON, or an ApiError with the server's message. */
export async function api(path, body) {
  const headers = { Accept: "application/json" };
  if (body !== undefined && session.model) body = { model: session.model, ...body }; // every call names the model picked
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (session.key) headers.Authorization = `Bearer ${session.key}`;
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
