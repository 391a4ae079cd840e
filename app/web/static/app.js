// memory-mcp dashboard. Talks to the REST API on the same origin; no build step, no dependencies.
// Memories and task texts are written by agents and are untrusted: they reach the DOM only through
// textContent (the el() helper below never parses markup), and the page's CSP forbids inline script.
"use strict";

const TOKEN_KEY = "memory-mcp-token";
const PAGE_SIZE = 30;
const STATUSES = [
  ["backlog", "Backlog"], ["todo", "Todo"], ["running", "In Progress"], ["review", "Review"],
  ["done", "Done"], ["canceled", "Canceled"], ["waiting", "Waiting"], ["blocked", "Blocked"],
];
const STATUS_LABEL = Object.fromEntries(STATUSES);
// Who the history and notes name for changes made here; an agent token bound by the server wins.
const ACTOR = "dashboard";

const state = {
  scope: null, offset: 0, search: null, scopes: {}, taskId: null, taskSignature: null, formTask: null,
  memoriesStale: false, boardStale: false, dragging: false,
};
const $ = (selector) => document.querySelector(selector);

// ---------- DOM helpers ----------

function el(tag, attrs = {}, ...children) {
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

function pick(obj, ...keys) {
  for (const key of keys) if (obj && obj[key] !== undefined && obj[key] !== null) return obj[key];
  return undefined;
}

function asList(data, ...keys) {
  if (Array.isArray(data)) return data;
  const inner = pick(data, ...keys, "items", "results");
  return Array.isArray(inner) ? inner : [];
}

function toDate(value) {
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

const shortTimeFormat = new Intl.DateTimeFormat(undefined, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });

function timeEl(value, format = timeFormat) {
  const date = toDate(value);
  if (!date) return el("span", { class: "muted", text: "—" });
  return el("time", { datetime: date.toISOString(), title: date.toString(), text: format.format(date) });
}

let noticeTimer = null;
function notify(message, kind = "info") {
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

function showError(error) {
  const code = error.code ? ` (${error.code})` : "";
  notify(`${error.message}${code}`, "error");
}

// ---------- API ----------

class ApiError extends Error {
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
function tokenStored() {
  return new Promise((resolve) => tokenWaiters.push(resolve));
}

function tokenReason(refused) {
  return refused ? "The server refused that token. Enter the server token:" : "This server needs a token.";
}

function askToken(reason) {
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

async function api(method, path, body, { withHeaders = false } = {}) {
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

function query(params) {
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") search.set(key, String(value));
  }
  return search.toString();
}

function updateTokenButton() {
  $("#token-button").hidden = !sessionStorage.getItem(TOKEN_KEY);
}

// ---------- memories: scopes ----------

async function loadStats() {
  const stats = await api("GET", "/api/lancedb/stats");
  state.scopes = pick(stats, "scopes") || {};
  renderScopes(pick(stats, "total") ?? 0);
  const embedding = pick(stats, "embedding") || {};
  const parts = [pick(embedding, "provider"), pick(embedding, "model"), pick(embedding, "dimension")];
  $("#embedding-info").textContent = parts.some(Boolean) ? `embedder: ${parts.filter(Boolean).join(" · ")}` : "";
}

function scopeButton(scope, label, count) {
  const active = state.scope === scope;
  return el("li", {},
    el("button", {
      type: "button", class: active ? "scope active" : "scope", "aria-current": active ? "true" : null,
      dataset: { scope: scope ?? "" }, onclick: () => selectScope(scope),
    }, el("span", { class: "scope-name", text: label }), el("span", { class: "count", text: String(count) })));
}

function renderScopes(total) {
  const names = Object.keys(state.scopes);
  const agents = names.filter((n) => n.startsWith("agent:")).sort();
  const others = names.filter((n) => n !== "global" && !n.startsWith("agent:")).sort();
  const items = [scopeButton(null, "All scopes", total), scopeButton("global", "global", state.scopes.global ?? 0)];
  if (agents.length) items.push(el("li", { class: "group", text: "Agents" }));
  for (const name of agents) items.push(scopeButton(name, name, state.scopes[name]));
  if (others.length) items.push(el("li", { class: "group", text: "Other" }));
  for (const name of others) items.push(scopeButton(name, name, state.scopes[name]));
  $("#scope-list").replaceChildren(...items);
  const options = new Set(["global", ...names]);
  $("#scope-options").replaceChildren(...[...options].map((name) => el("option", { value: name })));
}

function selectScope(scope) {
  state.scope = scope;
  state.search = null;
  $("#search-input").value = "";
  $("#add-scope").value = scope || "global";
  renderScopes(Object.values(state.scopes).reduce((a, b) => a + b, 0));
  refreshMemories();
}

// ---------- memories: list and search ----------

function tagsOf(memory) {
  if (Array.isArray(memory.tags) && memory.tags.length) return memory.tags;
  return String(memory.category || "").split(",").map((t) => t.trim()).filter(Boolean);
}

function agentOf(memory) {
  const agent = pick(memory, "agent");
  if (agent) return agent;
  const scope = String(memory.scope || "");
  return scope.startsWith("agent:") ? scope.slice(6) : null;
}

function memoryMeta(memory) {
  const meta = el("div", { class: "meta" }, el("span", { class: "badge scope-badge", text: memory.scope }));
  for (const tag of tagsOf(memory)) meta.append(el("span", { class: "badge tag", text: tag }));
  const importance = Number(memory.importance);
  if (!Number.isNaN(importance)) {
    meta.append(el("span", { class: "importance", title: "importance", text: `★ ${importance.toFixed(2)}` }));
  }
  meta.append(timeEl(memory.timestamp));
  const agent = agentOf(memory);
  if (agent) meta.append(el("span", { class: "agent", text: `by ${agent}` }));
  if (memory.score !== undefined && memory.score !== null) {
    meta.append(el("span", { class: "score", title: "similarity", text: `score ${Number(memory.score).toFixed(3)}` }));
  }
  meta.append(el("span", { class: "id muted", text: memory.id }));
  return meta;
}

function memoryItem(memory) {
  const item = el("li", { class: "memory", dataset: { id: memory.id } });
  item.append(
    el("p", { class: "memory-text", text: memory.text }),
    el("div", { class: "memory-footer" }, memoryMeta(memory), el("div", { class: "actions" },
      el("button", { type: "button", class: "ghost small", "aria-label": `Edit memory ${memory.id}`,
        text: "Edit", onclick: () => editMemory(item, memory) }),
      el("button", { type: "button", class: "danger small", "aria-label": `Delete memory ${memory.id}`,
        text: "Delete", onclick: () => deleteMemory(memory) }))));
  return item;
}

// A form whose changes were saved no longer holds the list: the refresh after the save replaces it.
function memoryEditOpen() {
  return Boolean($("#memory-list form.editing:not([data-saved])"));
}

function renderMemories(items, append) {
  const list = $("#memory-list");
  const nodes = items.map(memoryItem);
  if (append) list.append(...nodes); else list.replaceChildren(...nodes);
  $("#memory-empty").hidden = list.children.length > 0;
}

// Answers to list requests can arrive out of order (a slow first page, then a click on a scope):
// only the newest request may render, or a stale answer would overwrite the one the user asked for.
let newestListRequest = 0;

// A redraw would wipe a memory being edited in place: a live reload then waits for the edit to end.
function liveRenderBlocked(live) {
  if (!live || !memoryEditOpen()) return false;
  state.memoriesStale = true;
  return true;
}

async function loadMemories(append = false, { offset = state.offset, limit = PAGE_SIZE, live = false } = {}) {
  const mine = ++newestListRequest;
  const params = query({ scope: state.scope, limit, offset });
  const items = asList(await api("GET", `/api/lancedb/memories?${params}`), "memories");
  if (mine !== newestListRequest || liveRenderBlocked(live)) return;
  items.sort((a, b) => (toDate(b.timestamp)?.getTime() ?? 0) - (toDate(a.timestamp)?.getTime() ?? 0));
  renderMemories(items, append);
  $("#load-more").hidden = items.length < limit;
  const shown = $("#memory-list").children.length;
  $("#list-summary").textContent = shown ? `${shown} shown, newest first` : "";
}

async function runSearch(mode, q, live = false) {
  const semantic = mode === "semantic";
  const path = semantic ? "/api/lancedb/vector-search" : "/api/lancedb/search";
  const mine = ++newestListRequest;
  const params = query({ q, scope: state.scope, limit: semantic ? 20 : undefined });
  const { data, headers } = await api("GET", `${path}?${params}`, undefined, { withHeaders: true });
  if (mine !== newestListRequest || liveRenderBlocked(live)) return;
  const items = asList(data, "hits", "memories");
  renderMemories(items, false);
  $("#load-more").hidden = true;
  // The server answers a semantic search by keyword when the embedder is down, and says so.
  const fallback = semantic && headers.get("X-Search-Mode") === "keyword_fallback";
  const kind = fallback ? "keyword (embedder unavailable)" : semantic ? "semantic" : "keyword";
  $("#list-summary").textContent = `${items.length} ${kind} result${items.length === 1 ? "" : "s"} for “${q}”`;
}

// A live reload keeps the pages already loaded with "Load more" (up to the API's page limit).
const MAX_PAGE = 200;

async function refreshMemories({ live = false } = {}) {
  state.memoriesStale = false;
  $("#list-title").textContent = state.scope || "All scopes";
  $("#clear-search").hidden = !state.search;
  try {
    if (state.search) await runSearch(state.search.mode, state.search.q, live);
    else if (live) {
      const limit = Math.min(MAX_PAGE, state.offset + PAGE_SIZE);
      state.offset = limit - PAGE_SIZE;
      await loadMemories(false, { offset: 0, limit, live });
    } else { state.offset = 0; await loadMemories(false); }
  } catch (error) { showError(error); }
}

async function refreshAll({ live = false } = {}) {
  try { await loadStats(); } catch (error) { showError(error); }
  await refreshMemories({ live });
}

function startSearch(mode) {
  const q = $("#search-input").value.trim();
  state.search = q ? { mode, q } : null;
  refreshMemories();
}

// ---------- memories: add, edit, delete ----------

function splitTags(value) {
  return value.split(",").map((t) => t.trim()).filter(Boolean).join(",");
}

function showDuplicate(result) {
  const box = $("#duplicate-warning");
  const dup = pick(result, "duplicate");
  if (!dup) { box.hidden = true; return; }
  const score = Number(pick(dup, "score"));
  box.replaceChildren(
    el("strong", { text: "Possible duplicate. " }),
    `Saved anyway; it is very similar to memory ${pick(dup, "memory_id", "id")}`,
    Number.isNaN(score) ? "." : ` (similarity ${score.toFixed(3)}).`,
    " Delete one of them if it repeats the other.");
  box.hidden = false;
}

async function addMemory(event) {
  event.preventDefault();
  const body = {
    text: $("#add-text").value.trim(),
    scope: $("#add-scope").value.trim() || "global",
    category: splitTags($("#add-tags").value),
    importance: Number($("#add-importance").value),
  };
  if (!body.text) return;
  $("#add-button").disabled = true;
  try {
    const result = await api("POST", "/api/lancedb/memories", body);
    showDuplicate(result);
    notify(`Memory ${pick(result, "id", "memory_id")} saved`);
    $("#add-text").value = "";
    $("#add-tags").value = "";
    await refreshAll();
  } catch (error) { showError(error); } finally { $("#add-button").disabled = false; }
}

function memoryForm(memory, onSave, onCancel) {
  const text = el("textarea", { name: "text", rows: 4, required: true, "aria-label": "Memory text" });
  text.value = memory.text;
  const scope = el("input", { name: "scope", list: "scope-options", value: memory.scope, "aria-label": "Scope" });
  const tags = el("input", { name: "tags", value: tagsOf(memory).join(", "), "aria-label": "Tags" });
  const importance = el("input", { name: "importance", type: "number", min: 0, max: 1, step: 0.05,
    value: memory.importance, "aria-label": "Importance" });
  const form = el("form", { class: "memory-form editing" },
    text,
    el("div", { class: "form-row" },
      el("label", {}, "Scope", scope), el("label", {}, "Tags", tags), el("label", {}, "Importance", importance),
      el("button", { type: "submit", class: "primary", text: "Save" }),
      el("button", { type: "button", class: "ghost", text: "Cancel", onclick: onCancel })));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    onSave({ text: text.value.trim(), scope: scope.value.trim(), category: splitTags(tags.value),
      importance: Number(importance.value) });
  });
  return form;
}

function editMemory(item, memory) {
  const original = [...item.childNodes];
  const cancel = () => {
    item.replaceChildren(...original);
    if (state.memoriesStale) liveMemories();
  };
  item.replaceChildren(memoryForm(memory, async (values) => {
    const changes = {};
    if (values.text !== memory.text) changes.text = values.text;
    if (values.scope !== memory.scope) changes.scope = values.scope;
    if (values.category !== tagsOf(memory).join(",")) changes.category = values.category;
    if (values.importance !== Number(memory.importance)) changes.importance = values.importance;
    if (!Object.keys(changes).length) { cancel(); return; }
    try {
      await api("PATCH", `/api/lancedb/memories/${encodeURIComponent(memory.id)}`, changes);
      item.querySelector("form").dataset.saved = "true";
      notify(changes.text ? "Memory updated and re-embedded" : "Memory updated");
      await refreshAll();
    } catch (error) { showError(error); }
  }, cancel));
  item.querySelector("textarea").focus();
}

async function deleteMemory(memory) {
  const preview = memory.text.length > 120 ? `${memory.text.slice(0, 120)}…` : memory.text;
  if (!window.confirm(`Delete memory ${memory.id}?\n\n${preview}`)) return;
  try {
    await api("DELETE", `/api/lancedb/memories/${encodeURIComponent(memory.id)}`);
    notify(`Memory ${memory.id} deleted`);
    await refreshAll();
  } catch (error) { showError(error); }
}

// ---------- board ----------

function boardColumns(board) {
  // Accepts {columns: [{status, title, cards}]}, {columns: {status: [cards]}} or {status: [cards]}.
  const columns = pick(board, "columns") ?? board;
  const byStatus = {};
  if (Array.isArray(columns)) {
    for (const column of columns) {
      const status = pick(column, "status", "id", "name");
      byStatus[status] = asList(pick(column, "cards", "tasks") ?? []);
      const title = pick(column, "title");
      if (title) STATUS_LABEL[status] = title;
    }
  } else if (columns && typeof columns === "object") {
    for (const [status, cards] of Object.entries(columns)) byStatus[status] = asList(cards, "cards", "tasks");
  }
  return byStatus;
}

function taskCard(task, status) {
  const id = pick(task, "id", "task_id");
  const card = el("article", {
    class: "card", draggable: "true", tabindex: 0, dataset: { id }, "aria-label": `${id}: ${task.title}`,
    onclick: () => openTask(id),
    onkeydown: (event) => { if (event.key === "Enter" || event.key === " ") { event.preventDefault(); openTask(id); } },
    ondragstart: (event) => {
      state.dragging = true;
      event.dataTransfer.setData("text/plain", id);
      event.dataTransfer.setData("application/x-memory-mcp-status", status);
      event.dataTransfer.effectAllowed = "move";
    },
    ondragend: () => {
      state.dragging = false;
      if (state.boardStale) liveBoard();
    },
  },
  el("div", { class: "card-title", text: task.title }),
  el("div", { class: "card-meta" },
    el("span", { class: "card-id", text: id }),
    pick(task, "assignee") ? el("span", { class: "badge", text: task.assignee }) : null,
    pick(task, "priority") ? el("span", { class: `badge priority-${task.priority}`, text: task.priority }) : null),
  el("div", { class: "card-time muted small" }, "updated ", timeEl(pick(task, "updated_ms", "updated", "updated_at"), shortTimeFormat)));
  return card;
}

function boardColumn(status, label, cards) {
  const body = el("div", { class: "column-cards" }, cards.map((card) => taskCard(card, status)));
  const column = el("section", { class: "column", dataset: { status }, "aria-label": label },
    el("h3", { class: "column-title" }, el("span", { text: label }), el("span", { class: "count", text: String(cards.length) })),
    body);
  column.addEventListener("dragover", (event) => { event.preventDefault(); column.classList.add("drop-target"); });
  column.addEventListener("dragleave", () => column.classList.remove("drop-target"));
  column.addEventListener("drop", (event) => {
    event.preventDefault();
    column.classList.remove("drop-target");
    const id = event.dataTransfer.getData("text/plain");
    const from = event.dataTransfer.getData("application/x-memory-mcp-status");
    if (id && from !== status) moveTask(id, status, from);
  });
  return column;
}

// As for the memory list: only the newest answer may draw the board.
let newestBoardRequest = 0;

async function loadBoard() {
  const mine = ++newestBoardRequest;
  state.boardStale = false;
  try {
    const byStatus = boardColumns(await api("GET", "/api/kanban/board"));
    if (mine !== newestBoardRequest) return;
    $("#board").replaceChildren(...STATUSES.map(([status]) => boardColumn(status, STATUS_LABEL[status], byStatus[status] || [])));
    const assignees = new Set(Object.values(byStatus).flat().map((card) => card.assignee).filter(Boolean));
    $("#assignee-options").replaceChildren(...[...assignees].sort().map((name) => el("option", { value: name })));
  } catch (error) { showError(error); }
}

async function moveTask(id, toStatus, fromStatus) {
  // expected_status: if another agent moved the card since this page drew it, the server refuses (409)
  // instead of silently undoing that agent's move; the board is then redrawn as it really is.
  const body = { to_status: toStatus, actor: ACTOR, expected_status: fromStatus || undefined };
  try {
    await api("POST", `/api/kanban/tasks/${encodeURIComponent(id)}/move`, body);
    notify(`${id} moved to ${STATUS_LABEL[toStatus] || toStatus}`);
  } catch (error) { showError(error); }
  await loadBoard();
  if (state.taskId === id && $("#task-dialog").open) await openTask(id);
}

// ---------- task detail ----------

function section(title, ...children) {
  return el("section", { class: "detail-section" }, el("h3", { text: title }), ...children);
}

function fieldList(task) {
  const rows = [
    ["Status", STATUS_LABEL[task.status] || task.status], ["Assignee", task.assignee], ["Priority", task.priority],
    ["Tags", Array.isArray(task.tags) ? task.tags.join(", ") : task.tags],
    ["Steps", Array.isArray(task.steps) && task.steps.length ? task.steps.join(" → ") : null],
    ["Current step", pick(task, "current_step")], ["Retries", pick(task, "retry_count")],
  ];
  const list = el("dl", { class: "fields" });
  for (const [name, value] of rows) {
    if (value !== undefined && value !== null && value !== "") list.append(el("dt", { text: name }), el("dd", { text: value }));
  }
  list.append(el("dt", { text: "Created" }), el("dd", {}, timeEl(pick(task, "created_ms", "created", "created_at"))));
  list.append(el("dt", { text: "Updated" }), el("dd", {}, timeEl(pick(task, "updated_ms", "updated", "updated_at"))));
  return list;
}

function moveControls(task) {
  const select = el("select", { id: "move-select", "aria-label": "Move to column" },
    STATUSES.map(([status]) => el("option", { value: status, selected: status === task.status, text: STATUS_LABEL[status] })));
  return el("div", { class: "form-row" }, select,
    el("button", { type: "button", id: "move-button", class: "primary", text: "Move",
      onclick: () => moveTask(task.id, select.value, task.status) }));
}

function notesSection(task, notes) {
  const list = el("ol", { class: "notes" }, notes.map((note) => el("li", {},
    el("div", { class: "muted small" }, `${pick(note, "author") || "anonymous"} · `, timeEl(pick(note, "created_ms", "created", "at", "timestamp"))),
    el("p", { class: "note-text", text: pick(note, "text", "body") }))));
  const text = el("textarea", { id: "note-text", rows: 2, required: true, "aria-label": "New note" });
  const form = el("form", { class: "note-form" }, text, el("button", { type: "submit", id: "note-button", text: "Add note" }));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (!text.value.trim()) return;
    try {
      await api("POST", `/api/kanban/tasks/${encodeURIComponent(task.id)}/notes`, { text: text.value.trim(), author: ACTOR });
      await openTask(task.id);
    } catch (error) { showError(error); }
  });
  return section("Notes", notes.length ? list : el("p", { class: "muted", text: "No notes yet." }), form);
}

function historySection(history) {
  const items = history.map((entry) => {
    const from = pick(entry, "from_status", "from");
    const to = pick(entry, "to_status", "to");
    return el("li", {},
      el("span", { class: "history-move", text: `${from ? STATUS_LABEL[from] || from : "created"} → ${STATUS_LABEL[to] || to}` }),
      el("span", { class: "muted small" }, pick(entry, "actor") ? ` by ${entry.actor} · ` : " · ",
        timeEl(pick(entry, "at_ms", "at", "timestamp", "time"))));
  });
  return section("History", items.length ? el("ol", { class: "history" }, items) : el("p", { class: "muted", text: "No status changes yet." }));
}

function jobOutput(job) {
  const stdout = pick(job, "stdout", "output") || "";
  const stderr = pick(job, "stderr") || "";
  const parts = [];
  if (pick(job, "truncated")) parts.push("[output capped: only the tail is kept]\n");
  parts.push(stdout);
  if (stderr) parts.push(`${stdout && !stdout.endsWith("\n") ? "\n" : ""}--- stderr ---\n${stderr}`);
  const text = parts.join("");
  return text.trim() ? text : "(no output)";
}

function jobItem(job) {
  const id = pick(job, "id", "job_id");
  const status = pick(job, "status") || "unknown";
  const exit = pick(job, "exit_code");
  const reason = pick(job, "reason");
  const output = el("pre", { class: "job-output", hidden: true });
  const toggle = el("button", { type: "button", class: "ghost small", text: "Show output",
    "aria-label": `Show output of job ${id}`, onclick: async () => {
      if (!output.hidden) { output.hidden = true; toggle.textContent = "Show output"; return; }
      try {
        output.textContent = jobOutput(await api("GET", `/api/kanban/jobs/${encodeURIComponent(id)}`));
        output.hidden = false;
        toggle.textContent = "Hide output";
      } catch (error) { showError(error); }
    } });
  return el("li", { class: "job", dataset: { id } },
    el("div", { class: "job-line" },
      el("span", { class: `badge job-${status}`, text: status.replace("_", " ") }), el("span", { class: "card-id", text: id }),
      exit !== undefined ? el("span", { class: "muted small", text: `exit ${exit}` }) : null,
      el("span", { class: "muted small" }, "started ", timeEl(pick(job, "started_ms", "started", "started_at"))),
      pick(job, "ended_ms") ? el("span", { class: "muted small" }, "ended ", timeEl(job.ended_ms)) : null,
      toggle),
    reason ? el("div", { class: "muted small", text: reason }) : null,
    output);
}

let jobTimer = null;

async function jobsSection(taskId) {
  const box = section("Jobs");
  box.id = "jobs-section";
  clearTimeout(jobTimer);
  try {
    const jobs = asList(await api("GET", `/api/kanban/jobs?${query({ task_id: taskId })}`), "jobs");
    box.append(jobs.length ? el("ol", { class: "jobs" }, jobs.map(jobItem)) : el("p", { class: "muted", text: "No jobs for this task." }));
    // While a job runs, refresh its status every few seconds, for as long as this task stays open.
    if (jobs.some((job) => job.status === "running")) {
      jobTimer = setTimeout(async () => {
        const current = $("#jobs-section");
        if (state.taskId === taskId && current) current.replaceWith(await jobsSection(taskId));
      }, 2000);
    }
  } catch (error) {
    box.append(el("p", { class: "error-text", text: `${error.message}${error.code ? ` (${error.code})` : ""}` }));
  }
  return box;
}

async function fetchTask(id) {
  const detail = await api("GET", `/api/kanban/tasks/${encodeURIComponent(id)}`);
  const task = pick(detail, "task") || detail;
  task.id = pick(task, "id", "task_id") || id;
  task.notes = asList(pick(detail, "notes") ?? pick(task, "notes") ?? []);
  task.history = asList(pick(detail, "history") ?? pick(task, "history") ?? []);
  return task;
}

// What a live refresh compares: an unchanged task is not redrawn under the user's hands.
function taskSignature(task) {
  return JSON.stringify([pick(task, "updated_ms", "updated"), task.status, task.notes.length, task.history.length]);
}

async function renderTask(task) {
  state.taskId = task.id;
  state.taskSignature = taskSignature(task);
  const description = pick(task, "description");
  $("#task-detail").replaceChildren(...[
    el("header", { class: "detail-header" },
      el("div", {}, el("div", { class: "card-id", text: task.id }), el("h2", { id: "task-title", text: task.title })),
      el("div", { class: "detail-actions" },
        el("button", { type: "button", id: "edit-task", text: "Edit", onclick: () => openTaskForm(task) }),
        el("button", { type: "button", id: "delete-task", class: "danger", text: "Delete", onclick: () => deleteTask(task) }),
        el("button", { type: "button", class: "ghost", "aria-label": "Close", text: "✕", onclick: () => $("#task-dialog").close() }))),
    fieldList(task),
    description ? el("div", { class: "description", text: description }) : null,
    section("Move", moveControls(task)),
    notesSection(task, task.notes),
    historySection(task.history),
    await jobsSection(task.id)].filter(Boolean));
}

async function openTask(id) {
  let task;
  try { task = await fetchTask(id); } catch (error) { showError(error); return; }
  await renderTask(task);
  const dialog = $("#task-dialog");
  if (!dialog.open) dialog.showModal();
}

// After a change on the board, the open task is redrawn only if it changed and nobody is typing a note.
async function refreshOpenTask() {
  const id = state.taskId;
  if (!id || !$("#task-dialog").open || $("#task-form-dialog").open) return;
  let task;
  try { task = await fetchTask(id); } catch (error) {
    if (error.status !== 404) return;
    $("#task-dialog").close();
    notify(`${id} was deleted`);
    return;
  }
  const note = $("#note-text");
  if (state.taskId !== id || taskSignature(task) === state.taskSignature || (note && note.value.trim())) return;
  await renderTask(task);
}

// ---------- task form: create and edit ----------

function splitList(value) {
  return value.split(",").map((item) => item.trim()).filter(Boolean);
}

function openTaskForm(task = null) {
  state.formTask = task;
  $("#task-form-heading").textContent = task ? `Edit ${task.id}` : "New task";
  $("#tf-title").value = task?.title ?? "";
  $("#tf-description").value = task?.description ?? "";
  $("#tf-assignee").value = task?.assignee ?? "";
  $("#tf-priority").value = task?.priority ?? "";
  $("#tf-tags").value = (task?.tags ?? []).join(", ");
  $("#tf-steps").value = (task?.steps ?? []).join(", ");
  $("#tf-status").replaceChildren(...STATUSES.map(([status]) =>
    el("option", { value: status, selected: status === "todo", text: STATUS_LABEL[status] })));
  $("#tf-status-label").hidden = Boolean(task); // an existing card changes column with Move
  $("#task-form-submit").textContent = task ? "Save changes" : "Create task";
  $("#task-form-error").hidden = true;
  $("#task-form-dialog").showModal();
  $("#tf-title").focus();
}

function taskFormValues() {
  return {
    title: $("#tf-title").value.trim(),
    description: $("#tf-description").value,
    assignee: $("#tf-assignee").value.trim(),
    priority: $("#tf-priority").value.trim() || null,
    tags: splitList($("#tf-tags").value),
    steps: splitList($("#tf-steps").value),
  };
}

// Only what the user changed goes into the PATCH, so a field another agent changed meanwhile is kept.
function changedFields(task, values) {
  const changes = {};
  for (const [key, value] of Object.entries(values)) {
    const empty = Array.isArray(value) ? [] : key === "priority" ? null : "";
    if (JSON.stringify(task[key] ?? empty) !== JSON.stringify(value)) changes[key] = value;
  }
  return changes;
}

async function saveTask(task, values) {
  if (!task) {
    const body = { ...values, status: $("#tf-status").value, actor: ACTOR };
    if (body.priority === null) delete body.priority;
    const created = await api("POST", "/api/kanban/tasks", body);
    notify(`${created.id} created`);
    return;
  }
  const changes = changedFields(task, values);
  if (!Object.keys(changes).length) return;
  await api("PATCH", `/api/kanban/tasks/${encodeURIComponent(task.id)}`, { ...changes, actor: ACTOR });
  notify(`${task.id} updated`);
}

async function submitTaskForm(event) {
  event.preventDefault();
  const task = state.formTask;
  const button = $("#task-form-submit");
  button.disabled = true;
  try {
    await saveTask(task, taskFormValues());
  } catch (error) {
    // The server's own words and code, next to the fields, with the form kept for a fix.
    const box = $("#task-form-error");
    box.textContent = `${error.message}${error.code ? ` (${error.code})` : ""}`;
    box.hidden = false;
    return;
  } finally { button.disabled = false; }
  $("#task-form-dialog").close();
  await loadBoard();
  if (task && state.taskId === task.id && $("#task-dialog").open) await openTask(task.id);
}

async function deleteTask(task) {
  if (!window.confirm(`Delete ${task.id}?\n\n${task.title}\n\nIts notes and history are deleted with it.`)) return;
  try {
    await api("DELETE", `/api/kanban/tasks/${encodeURIComponent(task.id)}`);
    $("#task-dialog").close();
    notify(`${task.id} deleted`);
  } catch (error) { showError(error); }
  await loadBoard();
}

// ---------- live updates ----------
// GET /api/events says when the memories or the board changed; the page then reloads that list.
// EventSource cannot send the bearer header, so the stream is read with fetch. After a server
// restart it reconnects with growing, jittered waits, and reloads what it shows once it is back.

const EVENTS_PATH = "/api/events";
const RETRY_FIRST_MS = 500;
const RETRY_MAX_MS = 8000;
const SILENCE_MS = 40000; // the server sends a keep-alive every 15 s: this much quiet is a dead line
const FIRST_LOAD_WAIT_MS = 1500;

// At most one load in flight and one queued behind it: a burst of events costs two loads, not one each.
function coalesced(load) {
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

const liveMemories = coalesced(async () => {
  if ($("#view-memories").hidden) return; // showView loads it when it is shown
  if (memoryEditOpen()) { // counts now, the list once the edit ends (a redraw would wipe it)
    state.memoriesStale = true;
    try { await loadStats(); } catch (error) { showError(error); }
    return;
  }
  await refreshAll({ live: true });
});

const liveBoard = coalesced(async () => {
  if ($("#view-board").hidden) return;
  if (state.dragging) { state.boardStale = true; return; }
  await loadBoard();
  await refreshOpenTask();
});

function setLive(name, text) {
  const badge = $("#live-status");
  badge.dataset.state = name;
  badge.textContent = text;
}

// The first load waits for the stream's "ready" (so no write can fall between the two), but not long.
let viewsLoaded = false;
function loadViewsOnce() {
  if (viewsLoaded) return false;
  viewsLoaded = true;
  showView();
  return true;
}

function onStreamEvent(name) {
  if (name === "ready") {
    setLive("live", "Live");
    if (!loadViewsOnce()) { liveMemories(); liveBoard(); } // back after a gap: catch up
  } else if (name === "memories") liveMemories();
  else if (name === "board") liveBoard();
}

function eventName(block) {
  for (const line of block.split("\n")) if (line.startsWith("event:")) return line.slice(6).trim();
  return null; // a comment (keep-alive) or a data-only block
}

async function readStream(response, heard) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    heard();
    buffer = (buffer + value).replace(/\r\n/g, "\n");
    for (let end = buffer.indexOf("\n\n"); end >= 0; end = buffer.indexOf("\n\n")) {
      const name = eventName(buffer.slice(0, end));
      buffer = buffer.slice(end + 2);
      if (name) onStreamEvent(name);
    }
  }
}

// One connection, until it ends; true when the server answered it (so the next wait starts short).
async function followOnce() {
  const controller = new AbortController();
  let silence = null;
  const heard = () => { clearTimeout(silence); silence = setTimeout(() => controller.abort(), SILENCE_MS); };
  const token = sessionStorage.getItem(TOKEN_KEY);
  const headers = { Accept: "text/event-stream" };
  if (token) headers.Authorization = `Bearer ${token}`;
  try {
    heard();
    const response = await fetch(EVENTS_PATH, { headers, cache: "no-store", credentials: "same-origin", signal: controller.signal });
    if (response.status === 401) {
      loadViewsOnce();
      // Another request may have stored a new token meanwhile; else ask (one prompt shared with
      // the API calls), and after a dismissal wait for a token rather than ask on every retry.
      if (sessionStorage.getItem(TOKEN_KEY) !== token) return true;
      if (token) sessionStorage.removeItem(TOKEN_KEY);
      if (!(await askToken(tokenReason(Boolean(token))))) await tokenStored();
      return true;
    }
    if (!response.ok || !response.body) { loadViewsOnce(); return false; }
    await readStream(response, heard);
    return true;
  } catch {
    loadViewsOnce();
    return false; // unreachable, cut off, or silent for too long
  } finally {
    clearTimeout(silence);
    controller.abort();
  }
}

async function followChanges() {
  setTimeout(loadViewsOnce, FIRST_LOAD_WAIT_MS);
  let wait = RETRY_FIRST_MS;
  for (;;) {
    const answered = await followOnce();
    setLive("reconnecting", "Reconnecting…");
    if (answered) wait = RETRY_FIRST_MS;
    await new Promise((done) => setTimeout(done, wait * (0.75 + Math.random() / 2)));
    wait = Math.min(wait * 2, RETRY_MAX_MS);
  }
}

// ---------- views ----------

function showView() {
  const board = location.hash === "#board";
  $("#view-memories").hidden = board;
  $("#view-board").hidden = !board;
  $("#tab-memories").classList.toggle("active", !board);
  $("#tab-board").classList.toggle("active", board);
  $("#tab-memories").setAttribute("aria-current", board ? "false" : "page");
  $("#tab-board").setAttribute("aria-current", board ? "page" : "false");
  if (board) loadBoard(); else refreshAll();
}

function wire() {
  $("#search-form").addEventListener("submit", (event) => { event.preventDefault(); startSearch("semantic"); });
  $("#keyword-button").addEventListener("click", () => startSearch("keyword"));
  $("#clear-search").addEventListener("click", () => { $("#search-input").value = ""; state.search = null; refreshMemories(); });
  $("#add-form").addEventListener("submit", addMemory);
  $("#load-more").addEventListener("click", async () => {
    state.offset += PAGE_SIZE;
    try { await loadMemories(true); } catch (error) { showError(error); }
  });
  $("#board-refresh").addEventListener("click", loadBoard);
  $("#new-task").addEventListener("click", () => openTaskForm());
  $("#task-form").addEventListener("submit", submitTaskForm);
  $("#task-form-cancel").addEventListener("click", () => $("#task-form-dialog").close());
  $("#token-button").addEventListener("click", () => { sessionStorage.removeItem(TOKEN_KEY); updateTokenButton(); notify("Token forgotten"); });
  $("#task-dialog").addEventListener("close", () => { state.taskId = null; clearTimeout(jobTimer); });
  window.addEventListener("hashchange", showView);
  updateTokenButton();
  followChanges(); // loads the view once the stream is ready, then keeps it current
}

document.addEventListener("DOMContentLoaded", wire);
