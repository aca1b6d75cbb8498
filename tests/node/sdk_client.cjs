// The official TypeScript MCP SDK as the agent (what Claude Code and Gemini CLI are built
// on), against `tandem mcp --standalone` in the current environment: `TANDEM_BIN` and
// `WORKSPACE`. Listing the tools compiles every outputSchema with Ajv, which warns on the
// console about what it does not know (an unknown `format`, ...); every call validates its
// structuredContent against its tool's outputSchema. Prints one JSON line: what was said on
// the console and which calls failed. Run by tests/it/tool_schemas.rs with NODE_PATH set to
// the npm dependencies scripts/test installs.
'use strict';
const { Client } = require('@modelcontextprotocol/sdk/client');
const { StdioClientTransport } = require('@modelcontextprotocol/sdk/client/stdio.js');

const said = [];
for (const level of ['log', 'info', 'warn', 'error', 'debug']) {
  console[level] = (...args) => said.push(`${level}: ${args.map(String).join(' ')}`);
}
const failed = [];

async function call(client, name, args) {
  try {
    const r = await client.callTool({ name, arguments: args });
    if (r.isError) failed.push(`${name}: ${JSON.stringify(r.structuredContent)}`);
    return r.structuredContent || {};
  } catch (e) {
    failed.push(`${name}: ${e.message}`);
    return {};
  }
}

async function main() {
  const transport = new StdioClientTransport({
    command: process.env.TANDEM_BIN,
    args: ['mcp', '--standalone', '--workspace', process.env.WORKSPACE],
    env: { ...process.env },
    stderr: 'ignore',
  });
  const client = new Client({ name: 'ts-sdk-test', version: '1.0.0' });
  await client.connect(transport);
  const { tools } = await client.listTools();

  await call(client, 'rekall_help', {});
  const text = 'Safari drops the CORS preflight when the Authorization header is sent';
  const a = await call(client, 'rekall_add', { type: 'bug', title: 'CORS preflight fails on Safari', content: text, tags: ['cors', 'safari'] });
  const b = await call(client, 'rekall_add', { type: 'bug', title: 'CORS preflight fails on Safari iOS', content: text, tags: ['cors', 'safari'] });
  await call(client, 'rekall_search', { query: 'cors safari' });
  await call(client, 'rekall_show', { id: a.id });
  const links = await call(client, 'rekall_suggest_links', {});
  await call(client, 'rekall_suggest_generalize', {});
  const suggestion = (links.suggestions || [])[0];
  if (suggestion) {
    await call(client, 'rekall_accept_suggestion', { suggestion_id: suggestion.id });
  } else {
    failed.push('no link suggestion to accept');
  }
  const third = await call(client, 'rekall_add', { type: 'pattern', title: 'Retry with backoff', content: 'Exponential backoff on 429' });
  await call(client, 'rekall_link', { source_id: third.id, target_id: b.id, relation_type: 'related' });
  const w = await call(client, 'start_workflow', { name: 'Auth', plan: [{ step: '1', goal: 'JWT' }] });
  const t = await call(client, 'start_task', { workflow_id: w.workflow_id, name: 'JWT', goal: 'Verify tokens', areas: ['auth'] });
  await call(client, 'log_decision', { task_id: t.task_id, category: 'library_choice', question: 'Which?', chosen: 'jose', reasoning: 'Typed' });
  await call(client, 'log_issue', { task_id: t.task_id, type: 'other', description: 'Slow CI', resolution: 'Cached' });
  await call(client, 'log_milestone', { task_id: t.task_id, message: 'Tests', progress: 50 });
  const done = await call(client, 'complete_task', { task_id: t.task_id, status: 'success', outcome: { summary: 'Done' } });
  const learned = await call(client, 'rekall_suggest_entries', {});
  const entrySuggestion = (learned.suggestions || [])[0];
  if (entrySuggestion && (done.memory_suggestions || []).length > 0) {
    await call(client, 'rekall_accept_suggestion', { suggestion_id: entrySuggestion.id });
  } else {
    failed.push('no entry suggestion from the completed task');
  }
  await call(client, 'mcp_environment', {});
  await call(client, 'mcp_discover', { intent: 'read files' });
  await client.close();
  return tools.length;
}

main().then(
  (tools) => process.stdout.write(JSON.stringify({ tools, said, failed }) + '\n'),
  (e) => process.stdout.write(JSON.stringify({ tools: 0, said, failed: failed.concat(`session: ${e.stack}`) }) + '\n'),
);
