// Drives memory-lancedb-pro's own MemoryStore (dist/src/store.js) for the interop tests.
//
// Usage: node plugin_driver.mjs <plugin install dir>
// stdin: one JSON command a line, {"id": n, "op": "...", ...}; commands run concurrently.
// stdout: one JSON answer a line, {"id": n, "ok": true, "result": ...} or {"id": n, "ok": false, "error": "..."};
// holdLock also sends {"id": n, "event": "locked", "at": <ms>} once it holds the plugin's write lock.
// The plugin's own console output goes to stderr so stdout stays a clean protocol.
import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const root = process.argv[2];
if (!root) {
  process.stderr.write("usage: node plugin_driver.mjs <plugin install dir>\n");
  process.exit(2);
}
for (const level of ["log", "info", "warn", "debug"]) {
  console[level] = (...args) => process.stderr.write(args.map(String).join(" ") + "\n");
}

let store = null;
let embedder = null;

function send(message) {
  process.stdout.write(JSON.stringify(message) + "\n");
}

function plain(entry) {
  if (!entry) return null;
  const out = {};
  for (const [key, value] of Object.entries(entry)) {
    // Arrow vectors and typed arrays become plain lists; everything else is JSON already.
    out[key] = value && typeof value === "object" && typeof value.length === "number" && !Array.isArray(value)
      ? Array.from(value)
      : value;
  }
  return out;
}

function requireStore() {
  if (!store) throw new Error("init first");
  return store;
}

const ops = {
  async init({ dbPath, vectorDim, readConsistencyInterval = 0 }) {
    const { MemoryStore } = await import(pathToFileURL(join(root, "dist/src/store.js")).href);
    store = new MemoryStore({ dbPath, vectorDim, readConsistencyInterval });
    await store.ensureInitialized();
    return { dbPath: store.dbPath };
  },
  async store({ entry }) {
    return plain(await requireStore().store(entry));
  },
  async bulkStore({ entries }) {
    return (await requireStore().bulkStore(entries)).map(plain);
  },
  async getById({ memoryId }) {
    return plain(await requireStore().getById(memoryId));
  },
  async vectorSearch({ vector, limit = 5, minScore = 0.0 }) {
    const hits = await requireStore().vectorSearch(vector, limit, minScore);
    return hits.map((hit) => ({ entry: plain(hit.entry), score: hit.score }));
  },
  async list({ limit = 20, offset = 0, category }) {
    return (await requireStore().list(undefined, category, limit, offset)).map(plain);
  },
  async update({ memoryId, patch }) {
    return plain(await requireStore().update(memoryId, patch));
  },
  async delete({ memoryId }) {
    return await requireStore().delete(memoryId);
  },
  async stats() {
    return await requireStore().stats();
  },
  async count() {
    return await requireStore().count();
  },
  // Holds the plugin's cross-process write lock (its private runWithFileLock, the path every write takes).
  async holdLock({ id, ms }) {
    const held = await requireStore().runWithFileLock(async () => {
      send({ id, event: "locked", at: Date.now() });
      await new Promise((resolve) => setTimeout(resolve, ms));
      return Date.now();
    });
    return { releasedAt: held };
  },
  // A write that reports when it finished, so a test can order it against another process's lock.
  async timedStore({ entry }) {
    const startedAt = Date.now();
    const stored = await requireStore().store(entry);
    return { entry: plain(stored), startedAt, finishedAt: Date.now() };
  },
  async initEmbedder({ config }) {
    const { Embedder } = await import(pathToFileURL(join(root, "dist/src/embedder.js")).href);
    embedder = new Embedder(config);
    return { dimensions: embedder.dimensions };
  },
  async embedPassage({ text }) {
    if (!embedder) throw new Error("initEmbedder first");
    return await embedder.embedPassage(text);
  },
  async embedQuery({ text }) {
    if (!embedder) throw new Error("initEmbedder first");
    return await embedder.embedQuery(text);
  },
  async close() {
    if (store) await store.destroy();
    store = null;
    return true;
  },
};

const lines = createInterface({ input: process.stdin });
const pending = new Set();
lines.on("line", (line) => {
  if (!line.trim()) return;
  let command;
  try {
    command = JSON.parse(line);
  } catch (err) {
    send({ id: null, ok: false, error: `not JSON: ${err.message}` });
    return;
  }
  const op = ops[command.op];
  const run = op
    ? op(command)
    : Promise.reject(new Error(`unknown op ${command.op}`));
  const task = run.then(
    (result) => send({ id: command.id, ok: true, result: result ?? null }),
    (err) => send({ id: command.id, ok: false, error: err && err.stack ? String(err.stack) : String(err) }),
  ).finally(() => pending.delete(task));
  pending.add(task);
});
lines.on("close", async () => {
  await Promise.allSettled([...pending]);
  process.exit(0);
});
