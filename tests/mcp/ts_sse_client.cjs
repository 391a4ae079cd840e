// The TypeScript SDK's SSEClientTransport against GET /mcp/sse: list the tools, remember, recall; print JSON.
// Run by tests/mcp/test_spec_sse_client.py with NODE_PATH pointing at an npm install outside the repository.
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { SSEClientTransport } = require("@modelcontextprotocol/sdk/client/sse.js");

async function main() {
  const [url, content] = process.argv.slice(2);
  const client = new Client({ name: "memory-mcp-ts-test", version: "1.0.0" });
  await client.connect(new SSEClientTransport(new URL(url)));
  const listed = await client.listTools();
  const stored = await client.callTool({ name: "remember", arguments: { content } });
  const found = await client.callTool({ name: "recall", arguments: { query: content, top_k: 3 } });
  await client.close();
  process.stdout.write(JSON.stringify({ tools: listed.tools.map((tool) => tool.name), stored, found }));
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
