// memory-mcp dashboard: the task form (create and edit) and deleting a task, through the REST API.

import { $, ACTOR, STATUSES, STATUS_LABEL, api, el, errorText, notify, showError } from "./core.js";

// Tells the board that a task was created, changed or deleted here ("changed", detail.id: the task
// to redraw if it is open); the board listens, so this module needs nothing from it.
export const taskEvents = new EventTarget();
let formTask = null; // the task being edited; null while creating one

function splitList(value) {
  return value.split(",").map((item) => item.trim()).filter(Boolean);
}

export function openTaskForm(task = null) {
  formTask = task;
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
  const task = formTask;
  const button = $("#task-form-submit");
  button.disabled = true;
  try {
    await saveTask(task, taskFormValues());
  } catch (error) {
    // The server's own words and code, next to the fields, with the form kept for a fix.
    const box = $("#task-form-error");
    box.textContent = errorText(error);
    box.hidden = false;
    return;
  } finally { button.disabled = false; }
  $("#task-form-dialog").close();
  taskEvents.dispatchEvent(new CustomEvent("changed", { detail: { id: task?.id ?? null } }));
}

export async function deleteTask(task) {
  if (!window.confirm(`Delete ${task.id}?\n\n${task.title}\n\nIts notes and history are deleted with it.`)) return;
  try {
    await api("DELETE", `/api/kanban/tasks/${encodeURIComponent(task.id)}`);
    $("#task-dialog").close();
    notify(`${task.id} deleted`);
  } catch (error) { showError(error); }
  taskEvents.dispatchEvent(new CustomEvent("changed", { detail: { id: null } }));
}

export function wireTaskForm() {
  $("#new-task").addEventListener("click", () => openTaskForm());
  $("#task-form").addEventListener("submit", submitTaskForm);
  $("#task-form-cancel").addEventListener("click", () => $("#task-form-dialog").close());
}
