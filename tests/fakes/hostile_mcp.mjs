#!/usr/bin/env node
// hostile_mcp - MCP servers that attack the client, for the integration
// tests of tests/integration/check_mcp_hostile.c (issue 28). Stdio
// transport: newline-delimited JSON-RPC 2.0 on stdin/stdout, no dependencies.
//
//   node hostile_mcp.mjs <mode> [n]
//
// Modes (each a proper server until its attack):
//   tools N       tools/list answers N tools (t0 .. tN-1) in one page.
//   same N        tools/list answers N tools that all have the name "dup".
//   flood N       once listed, sends N requests (ping, sampling/createMessage,
//                 elicitation/create, roots/list) and stops reading its stdin.
//   fork-exit     once listed, starts a child that holds its stdout open
//                 (`sleep 30`, same process group) and exits (status 0).
//   nul           tools/list answers two tools: "ok", and "bad" whose
//                 description holds "\u0000" (valid JSON).
//   bad-version   initialize answers protocol 2024-11-05, then it exits.
//   garbage       initialize answers a line that is not JSON, then it exits.
//   list-error    tools/list answers a JSON-RPC error.
//   up-then-exit  once listed, exits (status 4) 50 ms later.
//   close-stdout  closes its stdout right after initialize, stays alive 2 s.
// The process ends when its stdin does (except flood and close-stdout, which
// stop reading it).
import { spawn } from 'node:child_process';
import process from 'node:process';

import { readMessages } from './jsonl.mjs';

const MODES = ['tools', 'same', 'flood', 'fork-exit', 'nul', 'bad-version', 'garbage',
  'list-error', 'up-then-exit', 'close-stdout', 'deaf'];
const mode = process.argv[2];
const n = Number(process.argv[3] ?? 0);
if (!MODES.includes(mode)) {
  process.stderr.write(`usage: hostile_mcp.mjs ${MODES.join('|')} [n]\n`);
  process.exit(2);
}

const SCHEMA = '{"type":"object","properties":{}}';
process.stdout.on('error', () => process.exit(0));

function send(msg) {
  process.stdout.write(`${JSON.stringify(msg)}\n`);
}

// N tools written as text (JSON.stringify of 150 000 objects is slow in
// node), as short as a tool can be (a name: the rest has defaults), so that
// 150 000 of them fit in one line under the client's 8 MiB bound.
function manyTools(id, count, same) {
  const parts = new Array(count);
  for (let i = 0; i < count; i++) parts[i] = same ? '{"name":"dup"}' : `{"name":"t${i}"}`;
  process.stdout.write(`{"jsonrpc":"2.0","id":${JSON.stringify(id)},"result":{"tools":[${parts.join(',')}]}}\n`);
}

function listed() {
  if (mode === 'flood') {
    // Stop reading: our replies pile up in the pipe until it is full.
    process.stdin.pause();
    process.stdin.removeAllListeners('data');
    const methods = ['ping', 'sampling/createMessage', 'elicitation/create', 'roots/list'];
    const lines = [];
    for (let i = 0; i < n; i++) {
      lines.push(JSON.stringify({ jsonrpc: '2.0', id: `f${i}`, method: methods[i % 4],
        params: { message: 'x'.repeat(64) } }));
    }
    process.stdout.write(`${lines.join('\n')}\n`);
    setInterval(() => {}, 1000);
  } else if (mode === 'fork-exit') {
    setTimeout(() => {
      spawn('sleep', ['30'], { stdio: ['ignore', 'inherit', 'ignore'] }).unref();
      process.exit(0);
    }, 200);
  } else if (mode === 'deaf') {
    // Up, then never read again: a call's write waits for room in the pipe.
    process.stdin.pause();
    process.stdin.removeAllListeners('data');
    setInterval(() => {}, 1000);
  } else if (mode === 'up-then-exit') {
    setTimeout(() => process.exit(4), 50);
  }
}

function handle(msg) {
  if (typeof msg !== 'object' || msg === null || typeof msg.method !== 'string') return;
  switch (msg.method) {
    case 'initialize':
      if (mode === 'garbage') {
        process.stdout.write('this is not JSON\n', () => process.exit(1));
        return;
      }
      send({ jsonrpc: '2.0', id: msg.id, result: {
        protocolVersion: mode === 'bad-version' ? '2024-11-05' : '2025-06-18',
        capabilities: { tools: {} },
        serverInfo: { name: `hostile-${mode}`, version: '1.0.0' },
      } });
      if (mode === 'bad-version') setTimeout(() => process.exit(0), 20);
      if (mode === 'close-stdout') {
        process.stdout.end();
        process.stdin.pause();
        setTimeout(() => process.exit(0), 2000);
      }
      return;
    case 'ping':
      send({ jsonrpc: '2.0', id: msg.id, result: {} });
      return;
    case 'tools/list':
      if (mode === 'tools' || mode === 'same') {
        manyTools(msg.id, n, mode === 'same');
      } else if (mode === 'nul') {
        process.stdout.write(`{"jsonrpc":"2.0","id":${JSON.stringify(msg.id)},"result":{"tools":[`
          + `{"name":"ok","description":"fine","inputSchema":${SCHEMA}},`
          + `{"name":"bad","description":"nul \\u0000 here","inputSchema":${SCHEMA}}]}}\n`);
      } else if (mode === 'list-error') {
        send({ jsonrpc: '2.0', id: msg.id, error: { code: -32603, message: 'no tools today' } });
      } else {
        send({ jsonrpc: '2.0', id: msg.id, result: { tools: [
          { name: 'poke', description: 'p', inputSchema: { type: 'object', properties: {} } }] } });
      }
      listed();
      return;
    case 'tools/call':
      send({ jsonrpc: '2.0', id: msg.id, result: { content: [{ type: 'text', text: 'poked' }] } });
      return;
    default:
      if (msg.id !== undefined) {
        send({ jsonrpc: '2.0', id: msg.id, error: { code: -32601, message: 'no such method' } });
      }
  }
}

readMessages(handle);
process.stdin.on('end', () => {
  if (mode !== 'flood' && mode !== 'deaf') process.exit(0);
});
