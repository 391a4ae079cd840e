// The TypeScript SDK (Claude Code's client) over Streamable HTTP: prompts, resources, completion, and a
// subscription that hears of a change made through REST. Prints one JSON object.
// Run by tests/mcp/test_ts_live_client.py with NODE_PATH pointing at an npm install outside the repository.
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");
const { ResourceUpdatedNotificationSchema } = require("@modelcontextprotocol/sdk/types.js");

async function main() {
  const [base, taskId] = process.argv.slice(2);
  const uri = `task://${taskId}`;
  const client = new Client({ name: "memory-mcp-ts-live-test", version: "1.0.0" });
  const updated = [];
  let heard;
  const heardIt = new Promise((resolve) => { heard = resolve; });
  client.setNotificationHandler(ResourceUpdatedNotificationSchema, (note) => {
    updated.push(note.params.uri);
    if (note.params.uri === uri) heard();
  });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp`)));
  const prompts = (await client.listPrompts()).prompts.map((p) => p.name);
  const board = await client.getPrompt({ name: "board", arguments: {} });
  const resources = (await client.listResources()).resources.map((r) => r.uri);
  const task = await client.readResource({ uri });
  const completed = await client.complete({
    ref: { type: "ref/prompt", name: "handoff" }, argument: { name: "task_id", value: taskId.slice(0, 8) },
  });
  await client.subscribeResource({ uri });
  // The GET stream opens just after initialize; until it is up a notification has nowhere to go, so
  // a real change is made every half second until one is heard (at most 20 s).
  const deadline = Date.now() + 20000;
  let notes = 0;
  while (updated.indexOf(uri) < 0 && Date.now() < deadline) {
    const response = await fetch(`${base}/api/kanban/tasks/${taskId}/notes`, {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ text: `note ${notes} from the TypeScript test`, author: "ts-sdk" }),
    });
    if (!response.ok) throw new Error(`REST note: ${response.status}`);
    notes += 1;
    await Promise.race([heardIt, new Promise((resolve) => setTimeout(resolve, 500))]);
  }
  const after = await client.readResource({ uri });
  await client.close();
  process.stdout.write(JSON.stringify({
    prompts, board: board.messages[0].content.text, resources, task: task.contents[0],
    completed: completed.completion.values, updated, after: after.contents[0].text,
    capabilities: client.getServerCapabilities(),
  }));
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
