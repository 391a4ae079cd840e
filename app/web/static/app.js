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

const state = { scope: null, offset: 0, search: null, scopes: {}, taskId: null };
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
function askToken(reason) {
  // Parallel requests that all get 401 share one prompt.
  if (!tokenPrompt) {
    tokenPrompt = new Promise((resolve) => {
      const dialog = $("#token-dialog");
      $("#token-reason").textContent = reason;
      $("#token-input").value = "";
      dialog.addEventListener("close", () => {
        const token = $("#token-input").value.trim();
        if (token) sessionStorage.setItem(TOKEN_KEY, token);
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
      const reason = token ? "The server refused that token. Enter the server token:" : "This server needs a token.";
      if (await askToken(reason)) continue;
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

function renderMemories(items, append) {
  const list = $("#memory-list");
  const nodes = items.map(memoryItem);
  if (append) list.append(...nodes); else list.replaceChildren(...nodes);
  $("#memory-empty").hidden = list.children.length > 0;
}

// Answers to list requests can arrive out of order (a slow first page, then a click on a scope):
// only the newest request may render, or a stale answer would overwrite the one the user asked for.
let newestListRequest = 0;

async function loadMemories(append = false) {
  const mine = ++newestListRequest;
  const params = query({ scope: state.scope, limit: PAGE_SIZE, offset: state.offset });
  const items = asList(await api("GET", `/api/lancedb/memories?${params}`), "memories");
  if (mine !== newestListRequest) return;
  items.sort((a, b) => (toDate(b.timestamp)?.getTime() ?? 0) - (toDate(a.timestamp)?.getTime() ?? 0));
  renderMemories(items, append);
  $("#load-more").hidden = items.length < PAGE_SIZE;
  const shown = $("#memory-list").children.length;
  $("#list-summary").textContent = shown ? `${shown} shown, newest first` : "";
}

async function runSearch(mode, q) {
  const semantic = mode === "semantic";
  const path = semantic ? "/api/lancedb/vector-search" : "/api/lancedb/search";
  const mine = ++newestListRequest;
  const params = query({ q, scope: state.scope, limit: semantic ? 20 : undefined });
  const { data, headers } = await api("GET", `${path}?${params}`, undefined, { withHeaders: true });
  if (mine !== newestListRequest) return;
  const items = asList(data, "hits", "memories");
  renderMemories(items, false);
  $("#load-more").hidden = true;
  // The server answers a semantic search by keyword when the embedder is down, and says so.
  const fallback = semantic && headers.get("X-Search-Mode") === "keyword_fallback";
  const kind = fallback ? "keyword (embedder unavailable)" : semantic ? "semantic" : "keyword";
  $("#list-summary").textContent = `${items.length} ${kind} result${items.length === 1 ? "" : "s"} for “${q}”`;
}

async function refreshMemories() {
  $("#list-title").textContent = state.scope || "All scopes";
  $("#clear-search").hidden = !state.search;
  try {
    if (state.search) await runSearch(state.search.mode, state.search.q);
    else { state.offset = 0; await loadMemories(false); }
  } catch (error) { showError(error); }
}

async function refreshAll() {
  try { await loadStats(); } catch (error) { showError(error); }
  await refreshMemories();
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
  const cancel = () => item.replaceChildren(...original);
  item.replaceChildren(memoryForm(memory, async (values) => {
    const changes = {};
    if (values.text !== memory.text) changes.text = values.text;
    if (values.scope !== memory.scope) changes.scope = values.scope;
    if (values.category !== tagsOf(memory).join(",")) changes.category = values.category;
    if (values.importance !== Number(memory.importance)) changes.importance = values.importance;
    if (!Object.keys(changes).length) { cancel(); return; }
    try {
      await api("PATCH", `/api/lancedb/memories/${encodeURIComponent(memory.id)}`, changes);
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
      event.dataTransfer.setData("text/plain", id);
      event.dataTransfer.setData("application/x-memory-mcp-status", status);
      event.dataTransfer.effectAllowed = "move";
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

async function loadBoard() {
  try {
    const byStatus = boardColumns(await api("GET", "/api/kanban/board"));
    $("#board").replaceChildren(...STATUSES.map(([status]) => boardColumn(status, STATUS_LABEL[status], byStatus[status] || [])));
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

async function openTask(id) {
  let detail;
  try { detail = await api("GET", `/api/kanban/tasks/${encodeURIComponent(id)}`); } catch (error) { showError(error); return; }
  const task = pick(detail, "task") || detail;
  task.id = pick(task, "id", "task_id") || id;
  state.taskId = task.id;
  const notes = asList(pick(detail, "notes") ?? pick(task, "notes") ?? []);
  const history = asList(pick(detail, "history") ?? pick(task, "history") ?? []);
  const description = pick(task, "description");
  $("#task-detail").replaceChildren(...[
    el("header", { class: "detail-header" },
      el("div", {}, el("div", { class: "card-id", text: task.id }), el("h2", { id: "task-title", text: task.title })),
      el("button", { type: "button", class: "ghost", "aria-label": "Close", text: "✕", onclick: () => $("#task-dialog").close() })),
    fieldList(task),
    description ? el("div", { class: "description", text: description }) : null,
    section("Move", moveControls(task)),
    notesSection(task, notes),
    historySection(history),
    await jobsSection(task.id)].filter(Boolean));
  const dialog = $("#task-dialog");
  if (!dialog.open) dialog.showModal();
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
  $("#token-button").addEventListener("click", () => { sessionStorage.removeItem(TOKEN_KEY); updateTokenButton(); notify("Token forgotten"); });
  $("#task-dialog").addEventListener("close", () => { state.taskId = null; clearTimeout(jobTimer); });
  window.addEventListener("hashchange", showView);
  updateTokenButton();
  showView();
}

document.addEventListener("DOMContentLoaded", wire);
