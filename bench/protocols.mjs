// bench/protocols.mjs - what the client protocols (SPEC 4.3) cost over the
// native API, for the same answer from the same brain (run by
// bench/protocols.sh, which starts the server).
//
//   node bench/protocols.mjs --port PORT [--n 200] [--warmup 10] [--text T]
//
// One round is one turn of each kind, in turn, each on a fresh conversation
// (so every turn meets the same small state), timed from the first request
// written to the last byte of the answer read:
//   native     POST /sessions, GET its /moorex stream (first state read), POST
//              user-send-message, until the state-updated event whose
//              assistant message is complete (and, as native_turn, only the
//              last part: from the POST of the input, the stream already open);
//   openai     POST /v1/chat/completions {stream:true}, until `data: [DONE]`;
//   langgraph  POST /threads, then POST /threads/{id}/runs/stream
//              {stream_mode:["values","messages-tuple"]}, until the stream ends.
// Every request goes through node's http module with a keep-alive agent, so
// the client's cost is the same for all three. The answers are checked: each
// must carry the builtin brain's "Echo: <text>".
//
// Prints one line per kind, `LABEL key=value ...` (bench/lib.sh's format),
// times in microseconds.
import http from 'node:http';

function args() {
  const a = { port: 0, n: 200, warmup: 10, text: 'hello protocols' };
  const v = process.argv.slice(2);
  for (let i = 0; i < v.length; i += 2) {
    const k = v[i].replace(/^--/, '');
    if (!(k in a) || v[i + 1] === undefined) throw new Error('usage: protocols.mjs --port P [--n N] [--warmup W] [--text T]');
    a[k] = typeof a[k] === 'number' ? Number(v[i + 1]) : v[i + 1];
  }
  if (!a.port) throw new Error('--port is required');
  return a;
}

const A = args();
const agent = new http.Agent({ keepAlive: true, maxSockets: 8 });
const now = () => Number(process.hrtime.bigint()) / 1000;
const WANT = `Echo: ${A.text}`;

/* One request; resolves with the response, its body read by `onData`
   (return true to stop reading) or whole into .body. */
function request(method, path, body, onData) {
  return new Promise((resolve, reject) => {
    const data = body === undefined ? undefined : JSON.stringify(body);
    const req = http.request({
      host: '127.0.0.1', port: A.port, method, path, agent,
      headers: data ? { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data) } : {},
    }, (res) => {
      let text = '';
      let done = false;
      res.setEncoding('utf8');
      res.on('data', (d) => {
        if (done) return;
        text += d;
        if (onData && onData(text)) {
          done = true;
          res.destroy();
          resolve({ status: res.statusCode, body: text });
        }
      });
      res.on('end', () => { if (!done) resolve({ status: res.statusCode, body: text }); });
      res.on('error', (e) => { if (!done) reject(e); });
    });
    req.setTimeout(30000, () => req.destroy(new Error(`${method} ${path}: timeout`)));
    req.on('error', reject);
    if (data) req.write(data);
    req.end();
  });
}

async function native() {
  const t0 = now();
  const c = await request('POST', '/api/reflexor/sessions', {});
  const sid = JSON.parse(c.body).id;
  let first, answered;
  const ready = new Promise((r) => { first = r; });
  const stream = request('GET', `/api/reflexor/sessions/${sid}/moorex`, undefined, (text) => {
    if (text.includes('"type":"state-updated"')) first();
    const i = text.lastIndexOf('"assistantMessages":[{');
    if (i >= 0 && new RegExp(`"content":"${WANT}"[^}]*"status":"complete"`).test(text.slice(i))) {
      answered = true;
      return true;
    }
    return false;
  });
  await ready;
  const t1 = now();
  await request('POST', `/api/reflexor/sessions/${sid}/moorex`, { type: 'user-send-message', content: A.text });
  await stream;
  const t = now();
  if (!answered) throw new Error('native: no complete answer');
  await request('DELETE', `/api/reflexor/sessions/${sid}`);
  samples.native_turn.push(t - t1);
  return t - t0;
}

async function openai() {
  const t0 = now();
  const r = await request('POST', '/v1/chat/completions', {
    model: 'reflexor', stream: true, messages: [{ role: 'user', content: A.text }],
  });
  const t = now() - t0;
  if (r.status !== 200 || !r.body.includes('data: [DONE]')) throw new Error(`openai: ${r.status} ${r.body.slice(0, 200)}`);
  let text = '';
  for (const line of r.body.split('\n')) {
    if (!line.startsWith('data: {')) continue;
    const c = JSON.parse(line.slice(6)).choices?.[0];
    if (c?.delta?.content) text += c.delta.content;
  }
  if (!text.includes(WANT)) throw new Error(`openai: answer ${JSON.stringify(text)}`);
  return t;
}

async function langgraph() {
  const t0 = now();
  const c = await request('POST', '/api/langgraph/threads', {});
  const tid = JSON.parse(c.body).thread_id;
  const r = await request('POST', `/api/langgraph/threads/${tid}/runs/stream`, {
    assistant_id: 'agent', input: { messages: [{ type: 'human', content: A.text }] },
    stream_mode: ['values', 'messages-tuple'],
  });
  const t = now() - t0;
  if (r.status !== 200 || !r.body.includes(WANT)) throw new Error(`langgraph: ${r.status} ${r.body.slice(0, 200)}`);
  await request('DELETE', `/api/langgraph/threads/${tid}`);
  return t;
}

const kinds = { native, openai, langgraph };
const samples = { native: [], native_turn: [], openai: [], langgraph: [] };
for (let i = 0; i < A.warmup + A.n; i++) {
  for (const [name, fn] of Object.entries(kinds)) {
    const t = await fn();
    if (i >= A.warmup) samples[name].push(t);
  }
  if (i < A.warmup) samples.native_turn.length = 0;
}
const pct = (v, p) => v[Math.min(v.length - 1, Math.floor((v.length * p) / 100))];
for (const [name, v] of Object.entries(samples)) {
  v.sort((a, b) => a - b);
  const mean = v.reduce((a, b) => a + b, 0) / v.length;
  console.log(`${name} n=${v.length} p50_us=${pct(v, 50).toFixed(0)} p95_us=${pct(v, 95).toFixed(0)} mean_us=${mean.toFixed(0)}`);
}
agent.destroy();
