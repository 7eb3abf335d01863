#!/usr/bin/env node
// ledger_mcp - a stdio MCP server that records what each tools/call carried,
// for the crash tests (tests/integration/check_crash_effects.c, SPEC 3.7).
// Newline-delimited JSON-RPC 2.0, no dependencies.
//
//   node ledger_mcp.mjs RECORD_FILE
//
// Two tools, `idem` (annotated idempotentHint: true) and `plain` (no
// annotations). Each call first appends one JSON line to RECORD_FILE:
//   {"tool":NAME,"key":<params._meta["io.reflexor/idempotency-key"]>,
//    "meta":<params._meta>,"pid":PID}
// then waits `ms` milliseconds (argument, default 0) and answers
// "done <key>". The process ends when its stdin does.
import { appendFileSync } from 'node:fs';
import process from 'node:process';

import { readMessages } from './jsonl.mjs';

const record = process.argv[2];
if (!record) {
  process.stderr.write('usage: ledger_mcp.mjs RECORD_FILE\n');
  process.exit(2);
}
const KEY = 'io.reflexor/idempotency-key';
const VERSIONS = ['2025-11-25', '2025-06-18', '2025-03-26'];
const SCHEMA = { type: 'object', properties: { ms: { type: 'integer' } } };
const TOOLS = [
  { name: 'idem', description: 'Records its call (safe to repeat).', inputSchema: SCHEMA,
    annotations: { idempotentHint: true } },
  { name: 'plain', description: 'Records its call.', inputSchema: SCHEMA },
];

process.stdout.on('error', () => process.exit(0));

function send(msg) {
  process.stdout.write(`${JSON.stringify(msg)}\n`);
}

function callTool(msg) {
  const name = msg.params?.name;
  const args = msg.params?.arguments ?? {};
  const meta = msg.params?._meta ?? null;
  if (!TOOLS.some((t) => t.name === name)) {
    send({ jsonrpc: '2.0', id: msg.id, error: { code: -32602, message: `unknown tool: ${name}` } });
    return;
  }
  const key = meta && typeof meta[KEY] === 'string' ? meta[KEY] : null;
  appendFileSync(record, `${JSON.stringify({ tool: name, key, meta, pid: process.pid })}\n`);
  const ms = Number.isInteger(args.ms) && args.ms > 0 ? args.ms : 0;
  setTimeout(() => {
    send({ jsonrpc: '2.0', id: msg.id, result: { content: [{ type: 'text', text: `done ${key}` }] } });
  }, ms);
}

function handle(msg) {
  if (typeof msg !== 'object' || msg === null || typeof msg.method !== 'string') return;
  const isRequest = msg.id !== undefined && msg.id !== null;
  switch (msg.method) {
    case 'initialize': {
      const asked = msg.params?.protocolVersion;
      send({ jsonrpc: '2.0', id: msg.id, result: {
        protocolVersion: VERSIONS.includes(asked) ? asked : VERSIONS[0],
        capabilities: { tools: {} },
        serverInfo: { name: 'ledger-mcp', version: '1.0.0' },
      } });
      return;
    }
    case 'ping':
      send({ jsonrpc: '2.0', id: msg.id, result: {} });
      return;
    case 'tools/list':
      send({ jsonrpc: '2.0', id: msg.id, result: { tools: TOOLS } });
      return;
    case 'tools/call':
      callTool(msg);
      return;
    default:
      if (isRequest) send({ jsonrpc: '2.0', id: msg.id, error: { code: -32601, message: `no method ${msg.method}` } });
  }
}

readMessages(handle);
process.stdin.on('end', () => process.exit(0));
