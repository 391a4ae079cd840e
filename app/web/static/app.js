// memory-mcp dashboard. Talks to the REST API on the same origin; no build step, no dependencies.
// ES modules, one concern each: core.js (DOM helpers, notices, the API client and its token),
// memories.js, board.js (board and task detail), taskform.js (create, edit, delete), live.js (the
// event stream). This one shows the view the address names and wires the page.

import { loadBoard, wireBoard } from "./board.js";
import { $, TOKEN_KEY, notify, updateTokenButton } from "./core.js";
import { followChanges } from "./live.js";
import { refreshAll, wireMemories } from "./memories.js";
import { wireTaskForm } from "./taskform.js";

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
  wireMemories();
  wireBoard();
  wireTaskForm();
  $("#token-button").addEventListener("click", () => { sessionStorage.removeItem(TOKEN_KEY); updateTokenButton(); notify("Token forgotten"); });
  window.addEventListener("hashchange", showView);
  updateTokenButton();
  followChanges(showView); // draws the view once the stream is ready, then keeps it current
}

document.addEventListener("DOMContentLoaded", wire);
