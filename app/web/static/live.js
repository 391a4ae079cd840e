// memory-mcp dashboard: live updates.
// GET /api/events says when the memories or the board changed; the page then reloads that list.
// EventSource cannot send the bearer header, so the stream is read with fetch. After a server
// restart it reconnects with growing, jittered waits, and reloads what it shows once it is back.

import { liveBoard } from "./board.js";
import { $, TOKEN_KEY, askToken, tokenReason, tokenStored } from "./core.js";
import { liveMemories } from "./memories.js";

const EVENTS_PATH = "/api/events";
const RETRY_FIRST_MS = 500;
const RETRY_MAX_MS = 8000;
const SILENCE_MS = 40000; // the server sends a keep-alive every 15 s: this much quiet is a dead line
const FIRST_LOAD_WAIT_MS = 1500;

function setLive(name, text) {
  const badge = $("#live-status");
  badge.dataset.state = name;
  badge.textContent = text;
}

// The first load waits for the stream's "ready" (so no write can fall between the two), but not long.
let viewsLoaded = false;
let loadViews = () => {};
function loadViewsOnce() {
  if (viewsLoaded) return false;
  viewsLoaded = true;
  loadViews();
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

// Follows the stream for the life of the page; showView draws the current view the first time.
export async function followChanges(showView) {
  loadViews = showView;
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
