// memory-mcp dashboard: the board (columns, cards, drag and drop), the task detail and its jobs.

import {
  $, ACTOR, STATUSES, STATUS_LABEL, api, asList, coalesced, el, errorText, notify, pick, query, shortTimeFormat,
  showError, timeEl,
} from "./core.js";
import { deleteTask, openTaskForm, taskEvents } from "./taskform.js";

const state = { taskId: null, taskSignature: null, boardStale: false, dragging: false };

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

export async function loadBoard() {
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
    box.append(el("p", { class: "error-text", text: errorText(error) }));
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

// Called for each "board" event: redraw the board and the open task, unless a card is being dragged.
export const liveBoard = coalesced(async () => {
  if ($("#view-board").hidden) return;
  if (state.dragging) { state.boardStale = true; return; }
  await loadBoard();
  await refreshOpenTask();
});

export function wireBoard() {
  $("#board-refresh").addEventListener("click", loadBoard);
  $("#task-dialog").addEventListener("close", () => { state.taskId = null; clearTimeout(jobTimer); });
  taskEvents.addEventListener("changed", async (event) => {
    await loadBoard();
    const { id } = event.detail;
    if (id && state.taskId === id && $("#task-dialog").open) await openTask(id);
  });
}
