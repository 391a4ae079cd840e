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
  async vectorSearch({ vector, limit = 5, minScore = 0.0, excludeInactive = false }) {
    const hits = await requireStore().vectorSearch(vector, limit, minScore, undefined, { excludeInactive });
    return hits.map((hit) => ({ entry: plain(hit.entry), score: hit.score }));
  },
  // The plugin's own retriever (what memory_recall runs), its query embedding given as a vector; no reranker,
  // no score floors, so only its filters decide what is left out.
  async retrieve({ query, vector, limit = 5 }) {
    const { createRetriever } = await import(pathToFileURL(join(root, "dist/src/retriever.js")).href);
    const embedder = { dimensions: vector.length, embedQuery: async () => vector, embedPassage: async () => vector };
    const retriever = createRetriever(requireStore(), embedder, {
      rerank: "none", minScore: 0, hardMinScore: 0, filterNoise: false, queryExpansion: false,
    });
    const hits = await retriever.retrieve({ query, limit, source: "cli" });
    return hits.map((hit) => ({ entry: plain(hit.entry), score: hit.score }));
  },
  // MemoryUpgrader's dry run, as `openclaw memory-pro upgrade --dry-run` runs it.
  async upgradeDryRun() {
    const { MemoryUpgrader } = await import(pathToFileURL(join(root, "dist/src/memory-upgrader.js")).href);
    const upgrader = new MemoryUpgrader(requireStore(), null, { log: (line) => process.stderr.write(line + "\n") });
    const counted = await upgrader.countLegacy();
    const result = await upgrader.upgrade({ dryRun: true });
    return { ...counted, totalLegacy: result.totalLegacy, skipped: result.skipped };
  },
  // A row's metadata as the plugin reads it (parseSmartMetadata), for the fields its retriever and decay use.
  async smartMetadata({ memoryId }) {
    const { parseSmartMetadata } = await import(pathToFileURL(join(root, "dist/src/smart-metadata.js")).href);
    const entry = await requireStore().getById(memoryId);
    return entry ? parseSmartMetadata(entry.metadata, entry) : null;
  },
  // The memory_store tool's manual supersede (src/tools.ts): the new row and the old row's invalidation
  // committed together by the store's storeSuperseding.
  async supersede({ targetId, entry, memoryCategory = "cases" }) {
    const smart = await import(pathToFileURL(join(root, "dist/src/smart-metadata.js")).href);
    const store = requireStore();
    const committed = await store.storeSuperseding({
      entry: { ...entry, metadata: "{}" },
      discoverTargets: async () => [await store.getById(targetId)].filter(Boolean),
      finalizeEntryMetadata: (targets) => smart.stringifySmartMetadata(smart.buildSmartMetadata(
        { text: entry.text, category: entry.category, importance: entry.importance },
        {
          l0_abstract: entry.text, l1_overview: `- ${entry.text}`, l2_content: entry.text, source: "manual",
          memory_category: memoryCategory,
          state: "confirmed", valid_from: Date.now(), supersedes: targets[0]?.id,
          relations: targets.map((target) => ({ type: "supersedes", targetId: target.id })),
        },
      )),
      buildTargetPatch: (target, newEntryId) => ({
        invalidated_at: Date.now(),
        superseded_by: newEntryId,
        relations: smart.appendRelation(smart.parseSmartMetadata(target.metadata, target).relations,
                                        { type: "superseded_by", targetId: newEntryId }),
      }),
    });
    return { entry: plain(committed.entry), supersededIds: committed.supersededIds };
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
