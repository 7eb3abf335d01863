#!/usr/bin/env node
// mcp_tap - a transparent tap on a stdio MCP server, for the integration tests
// (tests/integration/check_mcp.c): it shows what the client sends and lets a
// test kill the real server.
//
//   node mcp_tap.mjs <logfile> [--pidfile FILE] -- <command> [args...]
//
// Spawns <command> (no shell) with our environment and relays our stdin to its
// stdin and its stdout to our stdout byte for byte; its stderr passes through.
// Every line that arrives on our stdin (what the client sends) is appended to
// <logfile> as it comes, so a test can read it while the server runs. With
// --pidfile, the child's pid is written there (whole, by rename) once it runs.
// The tap exits when the child does, with its status; SIGTERM and SIGINT are
// passed on to the child, and the end of our stdin closes the child's stdin.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';

function usage() {
  process.stderr.write('usage: mcp_tap.mjs <logfile> [--pidfile FILE] -- <command> [args...]\n');
  process.exit(2);
}

const argv = process.argv.slice(2);
const sep = argv.indexOf('--');
if (sep < 1 || sep === argv.length - 1) usage();
const logfile = argv[0];
let pidfile = null;
for (let i = 1; i < sep; i++) {
  if (argv[i] === '--pidfile' && i + 1 < sep) pidfile = argv[++i];
  else usage();
}
const [command, ...args] = argv.slice(sep + 1);

const log = fs.openSync(logfile, 'a');
const child = spawn(command, args, { stdio: ['pipe', 'pipe', 'inherit'] });

child.on('error', (err) => {
  process.stderr.write(`mcp_tap: ${command}: ${err.message}\n`);
  process.exit(127);
});
child.on('spawn', () => {
  if (pidfile) {
    fs.writeFileSync(`${pidfile}.tmp`, `${child.pid}\n`);
    fs.renameSync(`${pidfile}.tmp`, pidfile);
  }
});

// Client to server: relayed at once, logged line by line (a line cut across
// chunks is logged when its end arrives).
let partial = Buffer.alloc(0);
process.stdin.on('data', (chunk) => {
  if (child.stdin.writable) child.stdin.write(chunk);
  let data = Buffer.concat([partial, chunk]);
  let nl;
  while ((nl = data.indexOf(0x0a)) >= 0) {
    fs.writeSync(log, data.subarray(0, nl + 1));
    data = data.subarray(nl + 1);
  }
  partial = data;
});
process.stdin.on('end', () => child.stdin.end());
// The child gone: what it still writes to its stdin is lost, not an error.
child.stdin.on('error', () => {});
process.stdout.on('error', () => {});

// Server to client: byte for byte.
child.stdout.pipe(process.stdout);

for (const sig of ['SIGTERM', 'SIGINT']) {
  process.on(sig, () => child.kill(sig));
}

child.on('close', (code, signal) => {
  if (partial.length) fs.writeSync(log, partial);
  fs.closeSync(log);
  const status = code ?? 128 + (os.constants.signals[signal] ?? 0);
  process.stdout.write('', () => process.exit(status));
});
