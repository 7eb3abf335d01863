// jsonl - the stdin side of the fake stdio MCP servers (fake_mcp.mjs,
// hostile_mcp.mjs): newline-delimited JSON-RPC, each message (a batch split)
// handed to handle(msg); lines that are not JSON are skipped.
import process from 'node:process';

export function readMessages(handle) {
  let partial = '';
  process.stdin.setEncoding('utf8');
  process.stdin.on('data', (chunk) => {
    const lines = (partial + chunk).split('\n');
    partial = lines.pop();
    for (const line of lines) {
      if (!line.trim()) continue;
      let msg;
      try {
        msg = JSON.parse(line);
      } catch {
        continue;
      }
      for (const m of Array.isArray(msg) ? msg : [msg]) handle(m);
    }
  });
}
