// bench/streams.mjs - what AG-UI and A2A streaming cost over the session
// API's own SSE, for the same answers (issue 32; run by bench/streams.sh,
// which starts the server).
//
//   node bench/streams.mjs --port PORT [--n 40] [--warmup 4] [--words 60]
//
// Two figures per protocol, each measured in the same run as its baseline:
//   ttft   time to first token: from the request written to the first
//          token of the answer read. Natively (the web UI's way) the turn's
//          session exists and its /moorex stream is open; the clock starts at
//          the POST of the input and stops at the first token on the
//          answer's /messages stream, opened when /moorex names the answer.
//          Through a protocol one request does it all (the session made on
//          first use, the run, the stream).
//   relay  per-token relay: while a protocol's run streams, the same answer
//          is read on its native /messages stream too; for each length of
//          text both streams reached, the protocol's arrival minus the
//          native one. What the protocol's encoding and path add to a token.
// Rounds interleave the kinds, so a noisy machine slows all alike.
// Prints one line per figure, `LABEL key=value ...` (bench/lib.sh's
// format), times in microseconds.
import http from 'node:http';
import { randomUUID } from 'node:crypto';

function args() {
  const a = { port: 0, n: 40, warmup: 4, words: 60, kinds: 'native,agui,a2a' };
  const v = process.argv.slice(2);
  for (let i = 0; i < v.length; i += 2) {
    const k = v[i].replace(/^--/, '');
    if (!(k in a) || v[i + 1] === undefined) throw new Error('usage: streams.mjs --port P [--n N] [--warmup W] [--words K] [--kinds a,b]');
    a[k] = typeof a[k] === 'number' ? Number(v[i + 1]) : v[i + 1];
  }
  if (!a.port) throw new Error('--port is required');
  return a;
}

const A = args();
const agent = new http.Agent({ keepAlive: true, maxSockets: 16 });
const now = () => Number(process.hrtime.bigint()) / 1000;
const TEXT = Array.from({ length: A.words }, (_, i) => `w${i}`).join(' ');
const WANT = `Echo: ${TEXT}`;

/* A whole JSON request. */
function json(method, path, body, headers = {}) {
  return new Promise((resolve, reject) => {
    const data = body === undefined ? undefined : JSON.stringify(body);
    const req = http.request({
      host: '127.0.0.1', port: A.port, method, path, agent,
      headers: { ...(data ? { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data) } : {}), ...headers },
    }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { text += d; });
      res.on('end', () => resolve({ status: res.statusCode, body: text ? JSON.parse(text) : null }));
      res.on('error', reject);
    });
    req.on('error', reject);
    if (data) req.write(data);
    req.end();
  });
}

/*
 * An SSE request: onEvent({event, data, t}) for each event as it arrives (t:
 * when the bytes that ended it were read); return true to stop reading.
 * Resolves when the stream ends or is stopped.
 */
function sse(method, path, body, headers, onEvent) {
  return new Promise((resolve, reject) => {
    const data = body === undefined ? undefined : JSON.stringify(body);
    const req = http.request({
      host: '127.0.0.1', port: A.port, method, path, agent: false,
      headers: {
        Accept: 'text/event-stream',
        ...(data ? { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data) } : {}),
        ...headers,
      },
    }, (res) => {
      let buf = '';
      let done = false;
      res.setEncoding('utf8');
      res.on('data', (d) => {
        if (done) return;
        const t = now();
        buf += d;
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const raw = buf.slice(0, i);
          buf = buf.slice(i + 2);
          let event = 'message';
          const lines = [];
          for (const line of raw.split('\n')) {
            if (line.startsWith('event:')) event = line.slice(6).trim();
            else if (line.startsWith('data:')) lines.push(line.slice(5).replace(/^ /, ''));
          }
          if (!lines.length) continue;
          let parsed;
          try { parsed = JSON.parse(lines.join('\n')); } catch { parsed = lines.join('\n'); }
          if (onEvent({ event, data: parsed, t })) {
            done = true;
            res.destroy();
            resolve(res.statusCode);
            return;
          }
        }
      });
      res.on('end', () => { if (!done) resolve(res.statusCode); });
      res.on('error', (e) => { if (!done) reject(e); });
    });
    req.on('error', reject);
    if (data) req.write(data);
    req.end();
  });
}

/*
 * The native /messages stream of answer `mid` in session `sid`: the time
 * each length of text was reached (after what the snapshot already held).
 */
function nativeTokens(sid, mid) {
  const at = new Map();
  let len = 0;
  let first = null;
  const done = sse('GET', `/api/reflexor/sessions/${sid}/messages/${mid}`, undefined, {}, ({ data, t }) => {
    if (data.type === 'snapshot') len = (data.content || '').length;
    else if (data.type === 'chunk') {
      len += data.delta.length;
      at.set(len, t);
      first ??= t;
    }
    return data.type === 'complete' || data.type === 'stopped';
  });
  return { at, done, first: () => first };
}

/* ---- the kinds ---------------------------------------------------------------- */

async function native() {
  const c = await json('POST', '/api/reflexor/sessions', {});
  const sid = c.body.id;
  let ready;
  const open = new Promise((r) => { ready = r; });
  let t0 = 0;
  let tokens = null;
  const moorex = sse('GET', `/api/reflexor/sessions/${sid}/moorex`, undefined, {}, ({ data }) => {
    if (!t0) {
      ready();
      return false;
    }
    const m = JSON.stringify(data).match(/"assistantMessages":\[\{"kind":"assistant","id":"([^"]+)"/);
    if (m && !tokens) {
      tokens = nativeTokens(sid, m[1]);
      return true;
    }
    return false;
  });
  await open;
  t0 = now();
  const p = await json('POST', `/api/reflexor/sessions/${sid}/moorex`, { type: 'user-send-message', content: TEXT });
  if (p.status !== 200) throw new Error(`native: POST ${p.status}`);
  await moorex;
  await tokens.done;
  await json('DELETE', `/api/reflexor/sessions/${sid}`);
  return { ttft: tokens.first() - t0, relay: [] };
}

/* Per-token relay: the protocol's arrival minus the native one, at each length both reached. */
function relayOf(door, nat) {
  const d = [];
  for (const [len, t] of door) if (nat.at.has(len)) d.push(t - nat.at.get(len));
  return d;
}

async function agui() {
  const tid = randomUUID();
  const door = new Map();
  let len = 0;
  let first = null;
  let nat = null;
  let text = '';
  const t0 = now();
  const st = await sse('POST', '/api/ag-ui', {
    threadId: tid, runId: randomUUID(), state: {}, tools: [], context: [], forwardedProps: {},
    messages: [{ id: randomUUID(), role: 'user', content: TEXT }],
  }, {}, ({ data, t }) => {
    if (data.type === 'TEXT_MESSAGE_START' && !nat) nat = nativeTokens(tid, data.messageId);
    if (data.type === 'TEXT_MESSAGE_CONTENT') {
      len += data.delta.length;
      text += data.delta;
      door.set(len, t);
      first ??= t;
    }
    return false;
  });
  if (st !== 200 || text !== WANT) throw new Error(`agui: ${st} ${JSON.stringify(text).slice(0, 200)}`);
  await nat.done;
  await json('DELETE', `/api/reflexor/sessions/${tid}`);
  return { ttft: first - t0, relay: relayOf(door, nat) };
}

/* The id of the answer streaming in session `sid` (read from its state). */
async function streamingAnswer(sid) {
  const r = await json('GET', `/api/reflexor/sessions/${sid}`);
  return r.body?.assistantMessages?.find((m) => m.status === 'streaming')?.id;
}

/*
 * A2A 1.0 SendStreamingMessage: the answer as artifact updates, chunks
 * appended, then the whole artifact once more (lastChunk: not timed). Its
 * events name the context, not the answer: the answer's native stream is
 * found from the session's state at the first chunk.
 */
async function a2a() {
  const door = new Map();
  let len = 0;
  let first = null;
  let nat = null;
  let finding = null;
  let text = '';
  let ctx = null;
  const t0 = now();
  const st = await sse('POST', '/api/a2a', {
    jsonrpc: '2.0', id: 1, method: 'SendStreamingMessage',
    params: { message: { messageId: randomUUID(), role: 'ROLE_USER', parts: [{ text: TEXT }] } },
  }, { 'A2A-Version': '1.0' }, ({ data, t }) => {
    const r = data.result || {};
    ctx ??= r.task?.contextId || r.statusUpdate?.contextId || r.artifactUpdate?.contextId;
    const u = r.artifactUpdate;
    if (!u) return false;
    const chunk = (u.artifact?.parts || []).map((p) => p.text || '').join('');
    if (u.lastChunk) {
      text = chunk;
      return false;
    }
    finding ??= streamingAnswer(ctx).then((mid) => { if (mid) nat = nativeTokens(ctx, mid); });
    len += chunk.length;
    door.set(len, t);
    first ??= t;
    return false;
  });
  if (st !== 200 || text !== WANT) throw new Error(`a2a: ${st} ${JSON.stringify(text).slice(0, 200)}`);
  await finding;
  if (nat) await nat.done;
  await json('DELETE', `/api/reflexor/sessions/${ctx}`);
  return { ttft: first - t0, relay: nat ? relayOf(door, nat) : [] };
}

const all = { native, agui, a2a };
const kinds = Object.fromEntries(A.kinds.split(',').map((k) => [k, all[k]]));
const samples = Object.fromEntries(Object.keys(kinds).map((k) => [k, { ttft: [], relay: [] }]));
for (let i = 0; i < A.warmup + A.n; i++) {
  for (const [name, fn] of Object.entries(kinds)) {
    const r = await fn();
    if (i < A.warmup) continue;
    samples[name].ttft.push(r.ttft);
    samples[name].relay.push(...r.relay);
  }
}
const pct = (v, p) => v[Math.min(v.length - 1, Math.floor((v.length * p) / 100))];
for (const [name, s] of Object.entries(samples)) {
  for (const [fig, v] of Object.entries(s)) {
    if (!v.length) continue;
    v.sort((a, b) => a - b);
    console.log(`${name}_${fig} n=${v.length} p50_us=${pct(v, 50).toFixed(0)} p99_us=${pct(v, 99).toFixed(0)}`);
  }
}
agent.destroy();
