// bench/mcp.mjs - the latency of one MCP tool call, directly and through
// Reflexor (run by bench/mcp.sh, which starts the Reflexor server).
//
//   node bench/mcp.mjs --port PORT [--n 200] [--warmup 10] [--samples FILE]
//
// direct  the MCP TypeScript SDK's Client over stdio to its own
//         server-everything (spawned here, initialized once): the time of
//         one `callTool` of `echo` {"message":"x"}.
// rx      Reflexor on 127.0.0.1:PORT, whose mcpServers.everything is the same
//         server: a fresh session per call (so every call meets the same small
//         state), its SSE stream open and its first state read, then the time
//         from writing POST user-send-message "/call everything__echo
//         {"message":"x"}" to reading the state-updated event whose tool
//         record has its result. The stream is followed, not polled, so the
//         figure is not quantised by a poll interval. The call's answer must
//         be complete before the next call starts; the session is then
//         deleted (neither is timed).
// The two kinds of call alternate, one of each per round, so a noisy shared
// machine slows both alike; `warmup` rounds come first and are not counted.
//
// Prints one line per figure, `LABEL key=value ...` (the format of
// bench/lib.sh), times in microseconds unless the key says ms.
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const EVERYTHING = path.join(ROOT, 'node_modules/@modelcontextprotocol/server-everything/dist/index.js');
const API = '/api/reflexor';
const TOOL = 'everything__echo';
const CONTENT = `/call ${TOOL} {"message":"x"}`;
const CALL_TIMEOUT_MS = 30000;

function args() {
  const a = { port: 0, n: 200, warmup: 10, samples: '' };
  const v = process.argv.slice(2);
  for (let i = 0; i < v.length; i += 2) {
    const k = v[i].replace(/^--/, '');
    if (!(k in a) || v[i + 1] === undefined) throw new Error(`usage: mcp.mjs --port P [--n N] [--warmup W] [--samples FILE]`);
    a[k] = typeof a[k] === 'number' ? Number(v[i + 1]) : v[i + 1];
  }
  if (!a.port) throw new Error('--port is required');
  return a;
}

const now = () => Number(process.hrtime.bigint()) / 1000; // microseconds

// ---- HTTP against Reflexor --------------------------------------------------
const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });

function request(port, method, p, body) {
  return new Promise((resolve, reject) => {
    const data = body === undefined ? null : JSON.stringify(body);
    const req = http.request({
      host: '127.0.0.1', port, method, path: API + p, agent,
      headers: data ? { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data) } : {},
    }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { text += d; });
      res.on('end', () => resolve({ status: res.statusCode, text }));
    });
    req.on('socket', (s) => s.setNoDelay(true));
    req.on('error', reject);
    req.end(data);
  });
}

async function json(port, method, p, body) {
  const r = await request(port, method, p, body);
  if (r.status < 200 || r.status > 299) throw new Error(`${method} ${p}: HTTP ${r.status} ${r.text}`);
  return r.text ? JSON.parse(r.text) : null;
}

/*
 * The session's SSE stream. Every `data:` line is one JSON event (Reflexor's
 * events carry their type inside; there is no `event:` line). `wait(pred)`
 * consumes events in order, with the time (us) each frame was read, and
 * resolves with the first that satisfies pred; events that came before the
 * wait (in the same read as an earlier match) are looked at first.
 */
function openStream(port, sid) {
  return new Promise((resolve, reject) => {
    let buf = '';
    const queue = [];
    let waiter = null;
    let closed = false;
    const pump = () => {
      while (waiter && queue.length) {
        const { ev, t } = queue.shift();
        if (waiter.pred(ev)) {
          const w = waiter;
          waiter = null;
          clearTimeout(w.timer);
          w.resolve({ ev, t });
        }
      }
    };
    const req = http.get({
      host: '127.0.0.1', port, path: `${API}/sessions/${sid}/moorex`,
      headers: { Accept: 'text/event-stream' }, agent: false,
    }, (res) => {
      if (res.statusCode !== 200) {
        reject(new Error(`stream ${sid}: HTTP ${res.statusCode}`));
        res.resume();
        return;
      }
      res.setEncoding('utf8');
      res.on('data', (chunk) => {
        const t = now();
        buf += chunk;
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const frame = buf.slice(0, i);
          buf = buf.slice(i + 2);
          for (const line of frame.split('\n'))
            if (line.startsWith('data: ')) queue.push({ ev: JSON.parse(line.slice(6)), t });
        }
        pump();
      });
      res.on('end', () => { closed = true; if (waiter) waiter.reject(new Error(`stream ${sid} ended`)); });
      resolve({
        wait(pred, what) {
          if (closed) return Promise.reject(new Error(`stream ${sid} closed`));
          const p = new Promise((res2, rej2) => {
            const timer = setTimeout(() => { waiter = null; rej2(new Error(`no ${what} within ${CALL_TIMEOUT_MS} ms`)); },
              CALL_TIMEOUT_MS);
            waiter = { pred, resolve: res2, reject: rej2, timer };
          });
          pump();
          return p;
        },
        close() { closed = true; req.destroy(); },
      });
    });
    req.on('socket', (s) => s.setNoDelay(true));
    req.on('error', (e) => { if (!closed) reject(e); });
  });
}

const isState = (ev) => ev.type === 'state-updated';
const withResult = (ev) => isState(ev) && ev.state.toolCallRecords.some((r) => r.result);
const answered = (ev) => isState(ev) && ev.state.assistantMessages.some((m) => m.status !== 'streaming');

/* One call through Reflexor on a fresh session; times in us (server stamps in ms). */
async function rxCall(port) {
  const sid = (await json(port, 'POST', '/sessions')).id;
  const stream = await openStream(port, sid);
  try {
    await stream.wait(isState, 'first state');
    const gotResult = stream.wait(withResult, 'tool result');
    const t0 = now();
    const ack = request(port, 'POST', `/sessions/${sid}/moorex`, { type: 'user-send-message', content: CONTENT })
      .then((r) => ({ r, t: now() }));
    const { ev, t } = await gotResult;
    const a = await ack;
    if (a.r.status !== 200) throw new Error(`POST /moorex: HTTP ${a.r.status} ${a.r.text}`);
    const rec = ev.state.toolCallRecords[0];
    if (!rec.result.isSuccess || !/Echo: x/.test(JSON.stringify(rec.result.content)))
      throw new Error(`unexpected tool result: ${JSON.stringify(rec.result)}`);
    const done = await stream.wait(answered, 'answer');
    return {
      result: t - t0, ack: a.t - t0, answer: done.t - t0,
      // Reflexor's own stamps: whole ms, and each input of a session at least
      // 1 ms after the one before, so this is >= 1 however fast the call.
      recordMs: rec.result.receivedAt - rec.calledAt,
    };
  } finally {
    stream.close();
    await request(port, 'DELETE', `/sessions/${sid}`).catch(() => {});
  }
}

// ---- /metrics ---------------------------------------------------------------
async function metrics(port) {
  const r = await new Promise((resolve, reject) => {
    http.get({ host: '127.0.0.1', port, path: '/metrics', agent }, (res) => {
      let t = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { t += d; });
      res.on('end', () => resolve(t));
    }).on('error', reject);
  });
  const m = {};
  for (const line of r.split('\n')) {
    const x = /^(reflexor_[a-z_]+)(\{[^}]*\})? ([-0-9.eE+]+)$/.exec(line);
    if (x) m[x[1] + (x[2] || '')] = Number(x[3]);
  }
  return m;
}

// ---- figures ----------------------------------------------------------------
function pct(v, p) {
  const s = [...v].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)];
}
const median = (v) => pct(v, 50);
const mean = (v) => v.reduce((a, b) => a + b, 0) / v.length;
const fmt = (x) => (Number.isInteger(x) ? String(x) : x.toFixed(1));
function line(label, v, unit = 'us') {
  const u = unit === 'us' ? '_us' : '_ms';
  return `${label} n=${v.length} p50${u}=${fmt(median(v))} p95${u}=${fmt(pct(v, 95))} mean${u}=${fmt(mean(v))} ` +
    `min${u}=${fmt(Math.min(...v))} max${u}=${fmt(Math.max(...v))}`;
}

async function main() {
  const a = args();
  const transport = new StdioClientTransport({
    command: process.execPath, args: [EVERYTHING, 'stdio'], stderr: 'ignore', cwd: ROOT,
  });
  // Should this process die before close(), its server must not outlive it.
  const killChild = () => { if (transport.pid) try { process.kill(transport.pid, 'SIGTERM'); } catch { /* gone */ } };
  process.on('exit', killChild);
  const client = new Client({ name: 'reflexor-bench', version: '1.0.0' });
  const direct = [], rx = [];
  let before = null;
  try {
    let t0 = now();
    await client.connect(transport);
    const initUs = now() - t0;
    const directCall = async () => {
      const s = now();
      const r = await client.callTool({ name: 'echo', arguments: { message: 'x' } });
      const us = now() - s;
      if (r.isError || !/Echo: x/.test(JSON.stringify(r.content))) throw new Error(`direct echo: ${JSON.stringify(r)}`);
      return us;
    };
    for (let i = 0; i < a.warmup; i++) {
      await directCall();
      await rxCall(a.port);
    }
    before = await metrics(a.port);
    for (let i = 0; i < a.n; i++) {
      direct.push(await directCall());
      rx.push(await rxCall(a.port));
    }
    const after = await metrics(a.port);
    const d = (k) => (after[k] ?? NaN) - (before[k] ?? NaN);
    const toolN = d('reflexor_effect_seconds_count{kind="tool"}');
    const brainN = d('reflexor_effect_seconds_count{kind="brain"}');
    const mcpOk = Object.keys(after).filter((k) => k.startsWith('reflexor_mcp_calls_total{server="everything"'))
      .map((k) => `${/result="([^"]*)"/.exec(k)?.[1] ?? '?'}:${d(k)}`).join(',');

    console.log(`direct_init us=${fmt(initUs)}`);
    console.log(line('direct', direct));
    console.log(line('rx', rx.map((x) => x.result)));
    console.log(line('rx_ack', rx.map((x) => x.ack)));
    console.log(line('rx_answer', rx.map((x) => x.answer)));
    console.log(line('rx_record', rx.map((x) => x.recordMs), 'ms'));
    console.log(`rx_metrics tool_count=${toolN} tool_mean_ms=${((d('reflexor_effect_seconds_sum{kind="tool"}') / toolN) * 1000).toFixed(3)} ` +
      `brain_count=${brainN} brain_mean_ms=${((d('reflexor_effect_seconds_sum{kind="brain"}') / brainN) * 1000).toFixed(3)} ` +
      `tool_failed=${d('reflexor_effect_failed_total{kind="tool"}')} mcp_calls=${mcpOk || 'n/a'}`);
    if (a.samples) {
      const rows = direct.map((x, i) => [i, x.toFixed(1), rx[i].result.toFixed(1), rx[i].ack.toFixed(1),
        rx[i].answer.toFixed(1), rx[i].recordMs].join(' '));
      fs.writeFileSync(a.samples, `# call direct_us rx_result_us rx_ack_us rx_answer_us rx_record_ms\n${rows.join('\n')}\n`);
    }
  } finally {
    await client.close().catch(() => {});
    agent.destroy();
  }
}

main().catch((e) => {
  console.error(`mcp.mjs: ${e.stack || e}`);
  process.exitCode = 1;
});
