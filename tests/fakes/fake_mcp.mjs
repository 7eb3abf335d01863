#!/usr/bin/env node
// fake_mcp - a misbehaving MCP server for the integration tests
// (tests/integration/check_mcp.c). Stdio transport: newline-delimited
// JSON-RPC 2.0 on stdin/stdout, no dependencies.
//
//   node fake_mcp.mjs <mode>
//
// Modes:
//   silent         reads everything, never answers anything (not even
//                  initialize): the client's timeout must end the wait.
//   garbage        a proper server with one tool, `poke`, until it is called:
//                  then, before the proper result, it writes a line that is not
//                  JSON, a cut JSON line, answers to ids never asked (a result
//                  and an error), one line of 10 MB, and 20 000 notifications
//                  (progress for a token nobody gave, notifications/message).
//   exit-mid-call  a proper server whose `poke` exits (status 3) instead of
//                  answering.
// In the proper modes, `poke` with {"fail": true} answers at once with
// isError: true and the text "poke failed on purpose"; otherwise the result
// text is "poked" (garbage) after the noise.
// The process ends when its stdin does.
import process from 'node:process';

import { readMessages } from './jsonl.mjs';

const mode = process.argv[2];
const MODES = ['silent', 'garbage', 'exit-mid-call'];
if (!MODES.includes(mode)) {
  process.stderr.write(`usage: fake_mcp.mjs ${MODES.join('|')}\n`);
  process.exit(2);
}

const VERSIONS = ['2025-11-25', '2025-06-18', '2025-03-26'];
const POKE = {
  name: 'poke',
  description: 'Pokes the fake server (which then misbehaves).',
  inputSchema: { type: 'object', properties: { fail: { type: 'boolean' } } },
  annotations: { readOnlyHint: true },
};

// Reflexor may close the pipe while a flood is still queued: that ends us.
process.stdout.on('error', () => process.exit(0));

function send(msg) {
  process.stdout.write(`${JSON.stringify(msg)}\n`);
}

function reply(id, result) {
  send({ jsonrpc: '2.0', id, result });
}

/* Everything a confused or hostile server could write before its answer. */
function flood() {
  process.stdout.write('this line is not JSON at all\n');
  process.stdout.write('{"jsonrpc":"2.0","id":\n');
  reply(987654321, { content: [{ type: 'text', text: 'an answer nobody asked for' }] });
  send({ jsonrpc: '2.0', id: 'no-such-id', error: { code: -32000, message: 'nobody asked' } });
  send({
    jsonrpc: '2.0',
    method: 'notifications/message',
    params: { level: 'info', logger: 'fake', data: 'x'.repeat(10 * 1024 * 1024) },
  });
  const lines = [];
  for (let i = 0; i < 20000; i++) {
    lines.push(
      JSON.stringify(
        i % 2
          ? { jsonrpc: '2.0', method: 'notifications/message', params: { level: 'debug', data: `noise ${i}` } }
          : { jsonrpc: '2.0', method: 'notifications/progress', params: { progressToken: 'nobody-gave-this', progress: i } },
      ),
    );
  }
  process.stdout.write(`${lines.join('\n')}\n`);
}

function callTool(msg) {
  const name = msg.params?.name;
  const args = msg.params?.arguments ?? {};
  if (name !== 'poke') {
    send({ jsonrpc: '2.0', id: msg.id, error: { code: -32602, message: `unknown tool: ${name}` } });
    return;
  }
  if (args.fail) {
    reply(msg.id, { content: [{ type: 'text', text: 'poke failed on purpose' }], isError: true });
    return;
  }
  if (mode === 'exit-mid-call') process.exit(3);
  flood();
  reply(msg.id, { content: [{ type: 'text', text: 'poked' }] });
}

function handle(msg) {
  if (typeof msg !== 'object' || msg === null || typeof msg.method !== 'string') return;
  const isRequest = msg.id !== undefined && msg.id !== null;
  switch (msg.method) {
    case 'initialize': {
      const asked = msg.params?.protocolVersion;
      reply(msg.id, {
        protocolVersion: VERSIONS.includes(asked) ? asked : VERSIONS[1],
        capabilities: { tools: {} },
        serverInfo: { name: `fake-mcp-${mode}`, version: '1.0.0' },
      });
      return;
    }
    case 'ping':
      reply(msg.id, {});
      return;
    case 'tools/list':
      reply(msg.id, { tools: [POKE] });
      return;
    case 'tools/call':
      callTool(msg);
      return;
    default:
      if (isRequest) send({ jsonrpc: '2.0', id: msg.id, error: { code: -32601, message: `no method ${msg.method}` } });
  }
}

readMessages((m) => {
  if (mode !== 'silent') handle(m);
});
process.stdin.on('end', () => process.exit(0));
