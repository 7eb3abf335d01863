// The OpenAI-compatible API (SPEC 4.3) driven by the official `openai` npm
// package against the real binary (REFLEXOR_BIN) and its builtin brain.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import { API, Server, sleep } from '../browser/helpers.mjs';

const MODEL = 'reflexor';
const SESSION = 'x-reflexor-session';

function client(server, opts = {}) {
  return new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0, ...opts });
}

async function native(server, p, token) {
  const r = await fetch(server.url + API + p, {
    headers: token ? { Authorization: `Bearer ${token}` } : {},
  });
  assert.equal(r.status, 200, `GET ${p}`);
  return r.json();
}

/* A completion and the session its answer names. */
async function complete(oai, body, options) {
  const { data, response } = await oai.chat.completions.create({ model: MODEL, ...body }, options).withResponse();
  return { data, sid: response.headers.get(SESSION), text: data.choices[0].message.content };
}

/* A streamed completion: every chunk, the text they add up to, the session. */
async function stream(oai, body, options) {
  const { data, response } = await oai.chat.completions
    .create({ model: MODEL, stream: true, ...body }, options)
    .withResponse();
  const chunks = [];
  for await (const c of data) chunks.push(c);
  const text = chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
  return { chunks, text, sid: response.headers.get(SESSION) };
}

/* Read a stream until its first text, then go away (the SDK ends the loop quietly). */
async function readUntilAborted(data, ac) {
  try {
    for await (const c of data) if (c.choices[0]?.delta?.content) ac.abort();
  } catch (e) {
    if (!ac.signal.aborted) throw e;
  }
  assert.ok(ac.signal.aborted);
}

async function withServer(opts, fn) {
  const server = new Server({ chunkDelayMs: 2, ...opts });
  try {
    await server.start();
    await fn(server);
  } finally {
    await server.stop();
    const bad = server.cleanExit();
    server.cleanup();
    assert.equal(bad, '');
  }
}

/* Poll the native API until `ok(state)` holds. */
async function until(server, sid, ok, ms = 5000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const st = await native(server, `/sessions/${sid}`);
    if (ok(st)) return st;
    if (Date.now() > deadline) throw new Error(`timed out: ${JSON.stringify(st).slice(0, 800)}`);
    await sleep(30);
  }
}

describe('openai: one server', () => {
  const server = new Server({ chunkDelayMs: 2 });
  let oai;

  before(async () => {
    await server.start();
    oai = client(server);
  });
  after(async () => {
    await server.stop();
    const bad = server.cleanExit();
    server.cleanup();
    assert.equal(bad, '');
  });

  test('models: the list and one model', async () => {
    const list = await oai.models.list();
    assert.deepEqual(list.data.map((m) => m.id), [MODEL]);
    assert.equal(list.data[0].object, 'model');
    assert.equal(list.data[0].owned_by, 'reflexor');
    assert.equal(typeof list.data[0].created, 'number');
    const one = await oai.models.retrieve(MODEL);
    assert.equal(one.id, MODEL);
    await assert.rejects(oai.models.retrieve('gpt-nothing'), (e) =>
      e instanceof OpenAI.NotFoundError && e.code === 'model_not_found');
  });

  test('not streaming: a chat.completion with usage and the session header', async () => {
    const { data, sid, text } = await complete(oai, { messages: [{ role: 'user', content: 'hello there' }] });
    assert.equal(text, 'Echo: hello there');
    assert.equal(data.object, 'chat.completion');
    assert.match(data.id, /^chatcmpl-/);
    assert.equal(data.model, MODEL);
    assert.equal(data.choices[0].finish_reason, 'stop');
    assert.equal(data.choices[0].message.role, 'assistant');
    assert.deepEqual(Object.keys(data.usage).sort(), ['completion_tokens', 'prompt_tokens', 'total_tokens']);
    assert.ok(sid);
    const st = await native(server, `/sessions/${sid}`);
    assert.deepEqual(st.userMessages.map((m) => m.content), ['hello there']);
    assert.deepEqual(st.assistantMessages.map((m) => m.content), ['Echo: hello there']);
  });

  test('streaming: role first, deltas add up to the answer, usage, [DONE]', async () => {
    const words = Array.from({ length: 30 }, (_, i) => `word${i}`).join(' ');
    const { chunks, text, sid } = await stream(oai, {
      messages: [{ role: 'user', content: words }],
      stream_options: { include_usage: true },
    });
    assert.equal(chunks[0].choices[0].delta.role, 'assistant');
    assert.ok(chunks.every((c) => c.object === 'chat.completion.chunk' && c.id === chunks[0].id));
    assert.ok(chunks.length > 5, `streamed in pieces (${chunks.length} chunks)`);
    assert.equal(text, `Echo: ${words}`);
    const last = chunks.at(-1);
    assert.deepEqual(last.choices, []);
    assert.equal(last.usage.total_tokens, last.usage.prompt_tokens + last.usage.completion_tokens);
    assert.equal(chunks.at(-2).choices[0].finish_reason, 'stop');
    const st = await native(server, `/sessions/${sid}`);
    assert.equal(st.assistantMessages.at(-1).content, text);
  });

  test('a three-turn conversation continues one session, one user message per turn', async () => {
    const system = { role: 'system', content: 'You answer briefly.' };
    const msgs = [system, { role: 'user', content: 'first turn' }];
    const t1 = await complete(oai, { messages: msgs });
    msgs.push({ role: 'assistant', content: t1.text }, { role: 'user', content: 'second turn' });
    const t2 = await stream(oai, { messages: msgs }); // the stream's text is what a client keeps
    msgs.push({ role: 'assistant', content: t2.text }, { role: 'user', content: 'third turn' });
    const t3 = await complete(oai, { messages: msgs });
    assert.equal(t3.text, 'Echo: third turn');
    assert.equal(t2.sid, t1.sid);
    assert.equal(t3.sid, t1.sid);
    const st = await native(server, `/sessions/${t1.sid}`);
    assert.deepEqual(st.userMessages.map((m) => m.content), ['first turn', 'second turn', 'third turn']);
    assert.equal(st.assistantMessages.length, 3);
    assert.equal(st.settings.systemPrompt, 'You answer briefly.');
  });

  test('a tool round trip shows the <details type="tool_calls"> block, streaming and not', async () => {
    const q = [{ role: 'user', content: 'what is 6*7?' }];
    const plain = await complete(oai, { messages: q });
    assert.match(plain.text, /<details type="tool_calls" done="true" id="[^"]+" name="calculator" arguments="[^"]*6\*7[^"]*" result="&quot;42&quot;">/);
    assert.match(plain.text, /<\/details>/);
    assert.match(plain.text, /6\*7 = 42$/);
    // The client resends the block it was shown: the conversation still continues.
    const next = await complete(oai, {
      messages: [...q, { role: 'assistant', content: plain.text }, { role: 'user', content: 'what is 2+3?' }],
    });
    assert.equal(next.sid, plain.sid);
    assert.match(next.text, /2\+3 = 5$/);
    const st = await native(server, `/sessions/${plain.sid}`);
    assert.equal(st.userMessages.length, 2);
    assert.equal(st.toolCallRecords.length, 2);
    // Streamed, the same content: the block when the result is in, then the text.
    const streamed = await stream(oai, { messages: q });
    assert.notEqual(streamed.sid, plain.sid);
    assert.equal(streamed.text.replace(/id="[^"]+"/, ''), plain.text.replace(/id="[^"]+"/, ''));
  });

  test('a conversation from elsewhere becomes a new session with its history', async () => {
    const { sid, text } = await complete(oai, {
      messages: [
        { role: 'system', content: 'Be kind.' },
        { role: 'user', content: [{ type: 'text', text: 'hi' }] },
        { role: 'assistant', content: 'Hello! How can I help?' },
        { role: 'user', content: 'tell me more' },
      ],
    });
    assert.equal(text, 'Echo: tell me more');
    const st = await native(server, `/sessions/${sid}`);
    assert.deepEqual(st.userMessages.map((m) => m.content), ['hi', 'tell me more']);
    assert.deepEqual(st.assistantMessages.map((m) => m.content), ['Hello! How can I help?', 'Echo: tell me more']);
    assert.equal(st.settings.systemPrompt, 'Be kind.');
  });

  test('an edited earlier turn continues a fork, the original stays as it was', async () => {
    const msgs = [{ role: 'user', content: 'alpha' }];
    const t1 = await complete(oai, { messages: msgs });
    const a1 = { role: 'assistant', content: t1.text };
    const t2 = await complete(oai, { messages: [...msgs, a1, { role: 'user', content: 'beta' }] });
    assert.equal(t2.sid, t1.sid);
    const edited = await complete(oai, { messages: [...msgs, a1, { role: 'user', content: 'gamma' }] });
    assert.notEqual(edited.sid, t1.sid);
    const fork = await native(server, `/sessions/${edited.sid}`);
    assert.deepEqual(fork.userMessages.map((m) => m.content), ['alpha', 'gamma']);
    const orig = await native(server, `/sessions/${t1.sid}`);
    assert.deepEqual(orig.userMessages.map((m) => m.content), ['alpha', 'beta']);
  });

  test('bad requests: OpenAI errors, typed by the SDK, and nothing changed', async () => {
    const count = async () => (await native(server, '/sessions')).length;
    const n = await count();
    const user = [{ role: 'user', content: 'hi' }];
    await assert.rejects(oai.chat.completions.create({ model: 'gpt-4o', messages: user }), (e) =>
      e instanceof OpenAI.NotFoundError && e.status === 404 && e.code === 'model_not_found');
    await assert.rejects(oai.chat.completions.create({ model: MODEL }), (e) =>
      e instanceof OpenAI.BadRequestError && e.param === 'messages' && e.type === 'invalid_request_error');
    await assert.rejects(oai.chat.completions.create({ model: MODEL, messages: [] }), (e) =>
      e instanceof OpenAI.BadRequestError && e.param === 'messages');
    await assert.rejects(
      oai.chat.completions.create({ model: MODEL, messages: [{ role: 'wizard', content: 'hi' }] }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'messages[0].role');
    await assert.rejects(
      oai.chat.completions.create({ model: MODEL, messages: [...user, { role: 'assistant', content: 'x' }] }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'messages[1].role');
    await assert.rejects(
      oai.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'messages[0].content');
    await assert.rejects(
      oai.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 42 }] }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'messages[0].content');
    await assert.rejects(
      oai.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: '  ' }] }),
      (e) => e instanceof OpenAI.BadRequestError);
    await assert.rejects(
      oai.chat.completions.create({ model: MODEL, messages: user }, { headers: { 'X-Reflexor-Session': 'no-such-session' } }),
      (e) => e instanceof OpenAI.NotFoundError && e.code === 'session_not_found');
    await assert.rejects(oai.chat.completions.create({ model: MODEL, messages: user, stream: 'yes' }), (e) =>
      e instanceof OpenAI.BadRequestError && e.param === 'stream');
    const raw = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{"model": "reflexor", "messages": [',
    });
    assert.equal(raw.status, 400);
    const body = await raw.json();
    assert.equal(body.error.type, 'invalid_request_error');
    assert.ok('param' in body.error && 'code' in body.error && body.error.message);
    const unknown = await fetch(`${server.url}/v1/embeddings`, { method: 'POST', body: '{}' });
    assert.equal(unknown.status, 404);
    assert.equal((await unknown.json()).error.code, 'unknown_url');
    const wrong = await fetch(`${server.url}/v1/chat/completions`);
    assert.equal(wrong.status, 405);
    assert.equal(await count(), n);
  });

  test('requests on one busy session wait their turn and all complete, in order', async () => {
    const first = await complete(oai, { messages: [{ role: 'user', content: 'start' }] });
    const named = { headers: { 'X-Reflexor-Session': first.sid } };
    const long = (tag) => `${tag} ${'x'.repeat(300)}`;
    const done = [];
    const a = complete(oai, { messages: [{ role: 'user', content: long('A') }] }, named).then((r) => (done.push('A'), r));
    await sleep(20);
    const b = stream(oai, { messages: [{ role: 'user', content: long('B') }] }, named).then((r) => (done.push('B'), r));
    const [ra, rb] = await Promise.all([a, b]);
    assert.equal(ra.text, `Echo: ${long('A')}`);
    assert.equal(rb.text, `Echo: ${long('B')}`);
    assert.equal(ra.sid, first.sid);
    assert.equal(rb.sid, first.sid);
    assert.deepEqual(done, ['A', 'B']);
    const st = await native(server, `/sessions/${first.sid}`);
    assert.deepEqual(st.userMessages.map((m) => m.content.slice(0, 1)), ['s', 'A', 'B']);
  });

  test('a session deleted under a completion: an error, streaming or not', async () => {
    const words = Array.from({ length: 200 }, (_, i) => `w${i}`).join(' ');
    const first = await complete(oai, { messages: [{ role: 'user', content: 'to delete' }] });
    const named = { headers: { 'X-Reflexor-Session': first.sid } };
    const { data } = await oai.chat.completions
      .create({ model: MODEL, stream: true, messages: [{ role: 'user', content: words }] }, named)
      .withResponse();
    const parked = complete(oai, { messages: [{ role: 'user', content: 'queued behind' }] }, named).catch((e) => e);
    let text = '';
    const streamed = (async () => {
      for await (const c of data) text += c.choices[0]?.delta?.content ?? '';
    })().catch((e) => e);
    while (!text) await sleep(5);
    const del = await fetch(`${server.url}${API}/sessions/${first.sid}`, { method: 'DELETE' });
    assert.equal(del.status, 204);
    const se = await streamed; // an error frame, then [DONE]
    assert.ok(se instanceof OpenAI.APIError && /session/i.test(se.message), String(se));
    const pe = await parked; // not streaming: OpenAI's error shape with a status
    assert.ok(pe instanceof OpenAI.APIError && pe.status >= 400, String(pe));
    assert.equal(pe.type, 'server_error');
  });

  test('a client that goes away does not stop the agent (the default)', async () => {
    const words = Array.from({ length: 60 }, (_, i) => `w${i}`).join(' ');
    const ac = new AbortController();
    const { data, response } = await oai.chat.completions
      .create({ model: MODEL, stream: true, messages: [{ role: 'user', content: words }] }, { signal: ac.signal })
      .withResponse();
    const sid = response.headers.get(SESSION);
    await readUntilAborted(data, ac);
    const st = await until(server, sid, (s) => s.assistantMessages[0]?.status !== 'streaming' && s.assistantMessages.length);
    assert.equal(st.assistantMessages[0].status, 'complete');
    assert.equal(st.assistantMessages[0].content, `Echo: ${words}`);
  });
});

test('openai: with auth.token the API key is the token', async () => {
  await withServer({ extra: { auth: { token: 's3cret' } } }, async (server) => {
    const { text } = await complete(client(server, { apiKey: 's3cret' }), { messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(text, 'Echo: hi');
    await assert.rejects(client(server, { apiKey: 'wrong' }).models.list(), (e) =>
      e instanceof OpenAI.AuthenticationError && e.status === 401);
  });
});

test('openai: a call waiting for approval is said in the content', async () => {
  await withServer({ extra: { tools: [{ name: 'calculator', approval: 'ask' }] } }, async (server) => {
    const oai = client(server);
    const q = [{ role: 'user', content: 'what is 6*7?' }];
    const { data, text, sid } = await complete(oai, { messages: q });
    assert.equal(data.choices[0].finish_reason, 'stop');
    assert.match(text, /<details type="tool_calls" done="false"[^>]* name="calculator"/);
    // What waits and where to answer it: the session through every open door.
    assert.match(text, new RegExp(`waits for approval in the Reflexor UI \\(session ${sid}\\) or at ` +
      `POST /api/reflexor/sessions/${sid}/inputs, LangGraph thread ${sid} at /api/langgraph, ` +
      `AG-UI thread ${sid} at /api/ag-ui, A2A context ${sid} at /api/a2a`));
    const st = await native(server, `/sessions/${sid}`);
    assert.equal(st.toolCallRecords[0].approval, 'pending');
    // The next message goes on without it: the call is refused (SPEC 3.6).
    const next = await complete(oai, { messages: [...q, { role: 'assistant', content: text }, { role: 'user', content: 'hello?' }] });
    assert.equal(next.sid, sid);
    assert.equal(next.text, 'Echo: hello?');
    assert.equal((await native(server, `/sessions/${sid}`)).toolCallRecords[0].approval, 'rejected');
    const s = await stream(oai, { messages: [{ role: 'user', content: 'what is 1+1?' }] });
    assert.match(s.text, /The call to 'calculator' with \{"expression": ?"1\+1"\} waits for approval/);
  });
});

test('openai: tool_details off, on_disconnect cancel', async () => {
  await withServer({ chunkDelayMs: 20, extra: { openai: { tool_details: false, on_disconnect: 'cancel', models: ['agent', 'reflexor'] } } }, async (server) => {
    const oai = client(server);
    assert.deepEqual((await oai.models.list()).data.map((m) => m.id), ['agent', 'reflexor']);
    const { text } = await complete(oai, { model: 'agent', messages: [{ role: 'user', content: 'what is 6*7?' }] });
    assert.equal(text, '6*7 = 42');
    const words = Array.from({ length: 80 }, (_, i) => `w${i}`).join(' ');
    const ac = new AbortController();
    const { data, response } = await oai.chat.completions
      .create({ model: MODEL, stream: true, messages: [{ role: 'user', content: words }] }, { signal: ac.signal })
      .withResponse();
    const sid = response.headers.get(SESSION);
    await readUntilAborted(data, ac);
    const st = await until(server, sid, (s) => s.assistantMessages[0] && s.assistantMessages[0].status !== 'streaming');
    assert.equal(st.assistantMessages[0].status, 'stopped');
    assert.notEqual(st.assistantMessages[0].content, `Echo: ${words}`);
  });
});

// The continuity map is in the store (SPEC 6.2, issue 29): a conversation the
// client resends after the server restarted goes on in the same session.
describe('openai: continuity across a restart', () => {
  test('the resent conversation continues its session after a restart', async () => {
    await withServer({}, async (server) => {
      const oai = client(server);
      const first = await complete(oai, { messages: [{ role: 'user', content: 'before the restart' }] });
      assert.ok(first.sid);
      await server.restart();
      const second = await complete(oai, {
        messages: [
          { role: 'user', content: 'before the restart' },
          { role: 'assistant', content: first.text },
          { role: 'user', content: 'after the restart' },
        ],
      });
      assert.equal(second.sid, first.sid);
      assert.match(second.text, /after the restart/);
      const st = await native(server, `/sessions/${first.sid}`);
      assert.equal(st.userMessages.length, 2);
    });
  });
});
