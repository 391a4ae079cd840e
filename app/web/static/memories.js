// memory-mcp dashboard: the memories view (scopes, list, search, add, edit, delete) and its live reload.

import { $, api, asList, coalesced, el, notify, pick, query, showError, timeEl, toDate } from "./core.js";

const PAGE_SIZE = 30;
const state = { scope: null, offset: 0, search: null, scopes: {}, memoriesStale: false };

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
  // score (0..1) orders the list; similarity is the cosine alone, shown beside it when the search compared vectors.
  if (memory.score !== undefined && memory.score !== null) {
    const similarity = memory.similarity === undefined || memory.similarity === null
      ? "" : ` · similarity ${Number(memory.similarity).toFixed(3)}`;
    meta.append(el("span", { class: "score", title: "score: what the list is ordered by, 0 to 1",
      text: `score ${Number(memory.score).toFixed(3)}${similarity}` }));
  }
  meta.append(el("span", { class: "id muted", text: memory.id }));
  return meta;
}

// A memory replaced by a newer one stays (nothing is deleted) but is dimmed; both ends name the other.
function linkBadges(memory) {
  const badges = [];
  const newer = pick(memory, "superseded_by");
  const older = pick(memory, "supersedes");
  if (newer) badges.push(el("span", { class: "badge link superseded-by", text: `superseded by ${newer}` }));
  // Retired by OpenClaw's memory-lancedb-pro without naming a replacement (its duplicate archive).
  else if (pick(memory, "invalidated_at")) badges.push(el("span", { class: "badge link superseded-by", text: "retired" }));
  if (older) badges.push(el("span", { class: "badge link supersedes", text: `supersedes ${older}` }));
  return badges;
}

function memoryItem(memory) {
  const superseded = Boolean(pick(memory, "superseded_by") || pick(memory, "invalidated_at"));
  const item = el("li", { class: superseded ? "memory superseded" : "memory", dataset: { id: memory.id } });
  const badges = linkBadges(memory);
  if (badges.length) item.append(el("div", { class: "links" }, ...badges));
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

export async function refreshAll({ live = false } = {}) {
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

// Called for each "memories" event: reload what is shown, unless it is hidden or being edited.
export const liveMemories = coalesced(async () => {
  if ($("#view-memories").hidden) return; // showView loads it when it is shown
  if (memoryEditOpen()) { // counts now, the list once the edit ends (a redraw would wipe it)
    state.memoriesStale = true;
    try { await loadStats(); } catch (error) { showError(error); }
    return;
  }
  await refreshAll({ live: true });
});

export function wireMemories() {
  $("#search-form").addEventListener("submit", (event) => { event.preventDefault(); startSearch("semantic"); });
  $("#keyword-button").addEventListener("click", () => startSearch("keyword"));
  $("#clear-search").addEventListener("click", () => { $("#search-input").value = ""; state.search = null; refreshMemories(); });
  $("#add-form").addEventListener("submit", addMemory);
  $("#load-more").addEventListener("click", async () => {
    state.offset += PAGE_SIZE;
    try { await loadMemories(true); } catch (error) { showError(error); }
  });
}
