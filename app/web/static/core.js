// memory-mcp dashboard: what every part of the page shares (DOM helpers, notices, the API client).
// Memories and task texts are written by agents and are untrusted: they reach the DOM only through
// textContent (el() never parses markup), and the page's CSP forbids inline script.

export const TOKEN_KEY = "memory-mcp-token";
export const STATUSES = [
  ["backlog", "Backlog"], ["todo", "Todo"], ["running", "In Progress"], ["review", "Review"],
  ["done", "Done"], ["canceled", "Canceled"], ["waiting", "Waiting"], ["blocked", "Blocked"],
];
export const STATUS_LABEL = Object.fromEntries(STATUSES);
// Who the history and notes name for changes made here; an agent token bound by the server wins.
export const ACTOR = "dashboard";

export const $ = (selector) => document.querySelector(selector);

// ---------- DOM helpers ----------

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = String(value);
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined && child !== false) node.append(child);
  }
  return node;
}

export function pick(obj, ...keys) {
  for (const key of keys) if (obj && obj[key] !== undefined && obj[key] !== null) return obj[key];
  return undefined;
}

export function asList(data, ...keys) {
  if (Array.isArray(data)) return data;
  const inner = pick(data, ...keys, "items", "results");
  return Array.isArray(inner) ? inner : [];
}

export function toDate(value) {
  if (value === undefined || value === null || value === "") return null;
  let ms = typeof value === "number" ? value : Number(value);
  if (Number.isNaN(ms)) ms = Date.parse(value);
  else if (ms < 1e11) ms *= 1000; // seconds, not milliseconds
  const date = new Date(ms);
  return Number.isNaN(date.getTime()) ? null : date;
}

const timeFormat = new Intl.DateTimeFormat(undefined, {
  year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit",
});

export const shortTimeFormat = new Intl.DateTimeFormat(undefined, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });

export function timeEl(value, format = timeFormat) {
  const date = toDate(value);
  if (!date) return el("span", { class: "muted", text: "—" });
  return el("time", { datetime: date.toISOString(), title: date.toString(), text: format.format(date) });
}

let noticeTimer = null;
export function notify(message, kind = "info") {
  const box = $("#notice");
  box.replaceChildren(el("span", { text: message }),
    el("button", { type: "button", class: "notice-close", "aria-label": "Dismiss", text: "✕",
      onclick: () => box.hidePopover() }));
  box.className = `notice ${kind}`;
  box.setAttribute("role", kind === "error" ? "alert" : "status");
  // A popover in the top layer: re-opening it puts it above a modal dialog opened after it.
  if (box.matches(":popover-open")) box.hidePopover();
  box.showPopover();
  clearTimeout(noticeTimer);
  if (kind !== "error") noticeTimer = setTimeout(() => box.hidePopover(), 4000);
}

// An API error as the user sees it: the server's detail, then its stable code.
export function errorText(error) {
  return `${error.message}${error.code ? ` (${error.code})` : ""}`;
}

export function showError(error) {
  notify(errorText(error), "error");
}

// ---------- API ----------

export class ApiError extends Error {
  constructor(status, message, code) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

let tokenPrompt = null;
let tokenWaiters = [];

// Resolves when a token is next stored: the event stream waits here after a dismissed prompt
// instead of asking again on every retry.
export function tokenStored() {
  return new Promise((resolve) => tokenWaiters.push(resolve));
}

export function tokenReason(refused) {
  return refused ? "The server refused that token. Enter the server token:" : "This server needs a token.";
}

export function askToken(reason) {
  // Parallel requests that all get 401 share one prompt.
  if (!tokenPrompt) {
    tokenPrompt = new Promise((resolve) => {
      const dialog = $("#token-dialog");
      $("#token-reason").textContent = reason;
      $("#token-input").value = "";
      dialog.addEventListener("close", () => {
        const token = $("#token-input").value.trim();
        if (token) {
          sessionStorage.setItem(TOKEN_KEY, token);
          for (const wake of tokenWaiters.splice(0)) wake();
        }
        tokenPrompt = null;
        updateTokenButton();
        resolve(Boolean(token));
      }, { once: true });
      dialog.showModal();
    });
  }
  return tokenPrompt;
}

function errorDetail(data, response) {
  const detail = pick(data, "detail", "message");
  if (typeof detail === "string") return detail;
  if (Array.isArray(detail)) return detail.map((d) => pick(d, "msg") || JSON.stringify(d)).join("; ");
  return `${response.status} ${response.statusText || "error"}`;
}

export async function api(method, path, body, { withHeaders = false } = {}) {
  for (let attempt = 0; ; attempt += 1) {
    const headers = { Accept: "application/json" };
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = `Bearer ${token}`;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let response;
    try {
      response = await fetch(path, {
        method, headers, credentials: "same-origin",
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (error) {
      throw new ApiError(0, `server unreachable: ${error.message}`, "network");
    }
    if (response.status === 401 && attempt < 3) {
      if (token) sessionStorage.removeItem(TOKEN_KEY);
      if (await askToken(tokenReason(Boolean(token)))) continue;
    }
    const text = await response.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch { data = { detail: text }; }
    if (!response.ok) throw new ApiError(response.status, errorDetail(data, response), pick(data, "code"));
    return withHeaders ? { data, headers: response.headers } : data;
  }
}

export function query(params) {
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") search.set(key, String(value));
  }
  return search.toString();
}

export function updateTokenButton() {
  $("#token-button").hidden = !sessionStorage.getItem(TOKEN_KEY);
}


// At most one load in flight and one queued behind it: a burst of events costs two loads, not one each.
export function coalesced(load) {
  let busy = false;
  let queued = false;
  return async function run() {
    if (busy) { queued = true; return; }
    busy = true;
    try {
      do { queued = false; await load(); } while (queued);
    } finally { busy = false; }
  };
}
