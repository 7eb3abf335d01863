// The AG-UI door (SPEC 4.3) driven by the real `@ag-ui/client` HttpAgent
// against the real binary (REFLEXOR_BIN) and its builtin brain ("Echo: <text>";
// "what is 6*7?" calls calculator). HttpAgent validates the event stream
// itself (RUN_STARTED first, messages and tool calls opened before content,
// nothing after RUN_FINISHED...), so a run it accepts is a valid AG-UI run.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import { HttpAgent } from '@ag-ui/client';
import jsonpatch from 'fast-json-patch';
import { API, BIN, ROOT, Server, sleep, tempDir } from '../browser/helpers.mjs';

const AGUI = '/api/ag-ui';

function agent(server, opts = {}) {
  return new HttpAgent({ url: server.url + AGUI, ...opts });
}

/* Run `a` and keep every event it accepted, in order. */
async function run(a, params = {}) {
  const events = [];
  const res = await a.runAgent(params, { onEvent: ({ event }) => { events.push(event); } });
  return { events, res, types: events.map((e) => e.type) };
}

function say(a, text) {
  a.addMessage({ id: crypto.randomUUID(), role: 'user', content: text });
}

async function native(server, p, key) {
  const r = await fetch(server.url + API + p, { headers: key ? { Authorization: `Bearer ${key}` } : {} });
  assert.equal(r.status, 200, `GET ${p}`);
  return r.json();
}

async function post(server, body, headers = {}) {
  const r = await fetch(server.url + AGUI, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Accept: 'text/event-stream', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: r.status, type: r.headers.get('content-type'), text: await r.text() };
}

/* A refusal in the native shape: {"error": code, "message"}. */
function refused(r, status, code) {
  assert.equal(r.status, status, r.text);
  const j = JSON.parse(r.text);
  assert.equal(j.error, code, r.text);
  assert.equal(typeof j.message, 'string');
  return j;
}

async function until(get, ok, ms = 8000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const x = await get();
    if (ok(x)) return x;
    if (Date.now() > deadline) throw new Error(`timed out: ${JSON.stringify(x).slice(0, 800)}`);
    await sleep(25);
  }
}

function stopped(server) {
  return async () => {
    await server.stop();
    const bad = server.cleanExit();
    server.cleanup();
    assert.equal(bad, '');
  };
}

describe('ag-ui: one server', () => {
  // A small body bound, so a body past it is sent whole before the 413 (no EPIPE).
  const server = new Server({ chunkDelayMs: 5, extra: { limits: { body_max: 65536 } } });

  before(async () => { await server.start(); });
  after(stopped(server));

  test('a plain answer: the event sequence, text streamed, state snapshot + deltas', async () => {
    const a = agent(server, { threadId: 'plain-1' });
    say(a, 'hello there');
    const { events, types } = await run(a);
    assert.equal(types[0], 'RUN_STARTED');
    assert.equal(events[0].threadId, 'plain-1');
    assert.equal(types.at(-1), 'RUN_FINISHED');
    assert.equal(events.at(-1).outcome.type, 'success');
    assert.ok(!types.includes('MESSAGES_SNAPSHOT'), 'a new thread has no history to send');
    assert.equal(types.indexOf('STATE_SNAPSHOT'), 1);
    const start = events.find((e) => e.type === 'TEXT_MESSAGE_START');
    const text = events.filter((e) => e.type === 'TEXT_MESSAGE_CONTENT' && e.messageId === start.messageId)
      .map((e) => e.delta).join('');
    assert.equal(text, 'Echo: hello there');
    assert.ok(events.filter((e) => e.type === 'TEXT_MESSAGE_CONTENT').length > 1, 'tokens stream');
    assert.ok(types.indexOf('TEXT_MESSAGE_END') < types.indexOf('RUN_FINISHED'));
    // The client's messages: the user's (its own id kept) and the answer.
    assert.deepEqual(a.messages.map((m) => m.role), ['user', 'assistant']);
    assert.equal(a.messages[1].content, 'Echo: hello there');
    // Snapshot + deltas (applied here and by the client) = the native state.
    const state = await native(server, '/sessions/plain-1');
    let mine = null;
    for (const e of events) {
      if (e.type === 'STATE_SNAPSHOT') mine = structuredClone(e.snapshot);
      if (e.type === 'STATE_DELTA') mine = jsonpatch.applyPatch(mine, e.delta, true, false).newDocument;
    }
    assert.ok(types.filter((t) => t === 'STATE_DELTA').length >= 2);
    assert.deepEqual(mine, state);
    assert.deepEqual(a.state, state);
    assert.equal(state.userMessages[0].id, a.messages[0].id);
  });

  test('the calculator: its call with arguments and its result, then the answer', async () => {
    const a = agent(server, { threadId: 'calc-1' });
    say(a, 'what is 6*7?');
    const { events, types } = await run(a);
    const start = events.find((e) => e.type === 'TOOL_CALL_START');
    assert.equal(start.toolCallName, 'calculator');
    const args = events.filter((e) => e.type === 'TOOL_CALL_ARGS' && e.toolCallId === start.toolCallId)
      .map((e) => e.delta).join('');
    assert.deepEqual(JSON.parse(args), { expression: '6*7' });
    const result = events.find((e) => e.type === 'TOOL_CALL_RESULT');
    assert.equal(result.toolCallId, start.toolCallId);
    assert.equal(result.content, '42');
    assert.ok(types.indexOf('TOOL_CALL_END') < types.indexOf('TOOL_CALL_RESULT'));
    assert.equal(events.at(-1).outcome.type, 'success');
    const roles = a.messages.map((m) => m.role);
    assert.deepEqual(roles, ['user', 'assistant', 'tool', 'assistant']);
    assert.equal(a.messages[1].toolCalls[0].function.name, 'calculator');
    assert.match(a.messages[3].content, /42/);
    assert.deepEqual(a.state, await native(server, '/sessions/calc-1'));
  });

  test('a second run on the same thread sees the history (MESSAGES_SNAPSHOT)', async () => {
    const a = agent(server, { threadId: 'two-runs' });
    say(a, 'first');
    await run(a);
    say(a, 'second');
    const { events } = await run(a);
    const snap = events.find((e) => e.type === 'MESSAGES_SNAPSHOT');
    assert.ok(snap, 'the second run sends the history');
    assert.deepEqual(snap.messages.map((m) => m.content), ['first', 'Echo: first', 'second']);
    assert.deepEqual(a.messages.map((m) => m.content), ['first', 'Echo: first', 'second', 'Echo: second']);
    // A client that joins with nothing new gets the thread as it is.
    const b = agent(server, { threadId: 'two-runs' });
    const j = await run(b);
    assert.deepEqual(j.types, ['RUN_STARTED', 'MESSAGES_SNAPSHOT', 'STATE_SNAPSHOT', 'RUN_FINISHED']);
    assert.deepEqual(b.messages.map((m) => m.content), ['first', 'Echo: first', 'second', 'Echo: second']);
    const st = await native(server, '/sessions/two-runs');
    assert.equal(st.userMessages.length, 2, 'nothing was posted twice');
  });

  test('a client that goes away mid-run: the run goes on, the next run has the answer', async () => {
    const slow = new Server({ chunkDelayMs: 60 });
    await slow.start();
    try {
      const a = agent(slow, { threadId: 'cut-1' });
      const text = 'one two three four five six seven eight nine ten eleven twelve';
      say(a, text);
      let seen = 0;
      const cut = a.runAgent({}, {
        onTextMessageContentEvent: () => { if (++seen === 2) a.abortRun(); },
      });
      await cut.catch(() => {});
      assert.ok(seen >= 2 && seen < 10, `the stream was cut early (${seen} deltas)`);
      // A client joining with nothing to post waits for the run, then has all of it.
      const joiner = agent(slow, { threadId: 'cut-1' });
      const joined = await run(joiner);
      assert.deepEqual(joined.types, ['RUN_STARTED', 'MESSAGES_SNAPSHOT', 'STATE_SNAPSHOT', 'RUN_FINISHED']);
      assert.equal(joiner.messages.at(-1).content, `Echo: ${text}`);
      const st = await until(() => native(slow, '/sessions/cut-1'),
        (s) => s.assistantMessages.length === 1 && s.assistantMessages[0].status === 'complete');
      assert.equal(st.assistantMessages[0].content, `Echo: ${text}`);
      const b = agent(slow, { threadId: 'cut-1' });
      say(b, 'again');
      const { events } = await run(b);
      const snap = events.find((e) => e.type === 'MESSAGES_SNAPSHOT');
      assert.equal(snap.messages[1].content, `Echo: ${text}`);
      assert.equal(b.messages.at(-1).content, 'Echo: again');

      // The thread deleted under a run: the run ends with RUN_ERROR.
      const c = agent(slow, { threadId: 'gone-1' });
      say(c, text);
      const got = [];
      let deleted = null;
      await c.runAgent({}, {
        onEvent: ({ event }) => { got.push(event); },
        onTextMessageContentEvent: () => {
          deleted ??= fetch(slow.url + API + '/sessions/gone-1', { method: 'DELETE' });
        },
      }).catch(() => {});
      assert.ok((await deleted).ok);
      const last = got.at(-1);
      assert.equal(last.type, 'RUN_ERROR', JSON.stringify(got.map((e) => e.type)));
      assert.match(last.message, /deleted/);
      assert.ok(got.findIndex((e) => e.type === 'TEXT_MESSAGE_END') < got.length - 1,
        'the open message is closed before the error');
    } finally {
      await slow.stop();
      const bad = slow.cleanExit();
      slow.cleanup();
      assert.equal(bad, '');
    }
  });

  test('bad input: malformed bodies, wrong method, unknown routes', async () => {
    refused(await post(server, '{"threadId":'), 400, 'invalid_json');
    refused(await post(server, '[1,2]'), 422, 'invalid_input');
    refused(await post(server, { runId: 'r', messages: [] }), 422, 'invalid_input');
    refused(await post(server, { threadId: 't', runId: 'r', messages: 'hi' }), 422, 'invalid_input');
    refused(await post(server, { threadId: 't', runId: 'r', messages: [], resume: {} }), 422, 'invalid_input');
    refused(await post(server, { threadId: 'no spaces!', runId: 'r', messages: [] }), 422, 'invalid_input');
    refused(await post(server, { threadId: 'blank', runId: 'r', messages: [{ id: 'u', role: 'user', content: '  ' }] }),
      422, 'invalid_input');
    refused(await post(server, { threadId: 'fresh', runId: 'r', messages: [],
      resume: [{ interruptId: 'x', status: 'resolved' }] }), 404, 'not_found');
    for (const t of ['t', 'blank', 'fresh']) {
      assert.equal((await fetch(`${server.url}${API}/sessions/${t}`)).status, 404, `a refusal made no thread '${t}'`);
    }
    const big = await post(server, { threadId: 't', runId: 'r', messages: [{ id: 'u', role: 'user', content: 'x'.repeat(70000) }] });
    refused(big, 413, 'too_large');
    assert.equal((await fetch(server.url + AGUI)).status, 405);
    assert.equal((await fetch(server.url + AGUI + '/nope', { method: 'POST' })).status, 404);
    const pre = await fetch(server.url + AGUI, { method: 'OPTIONS', headers: { Origin: 'http://localhost:3000' } });
    assert.equal(pre.status, 204);
    assert.equal(pre.headers.get('access-control-allow-origin'), 'http://localhost:3000');
    // HttpAgent surfaces the refusal with its status.
    const a = agent(server, { threadId: 'bad-resume' });
    await assert.rejects(a.runAgent({ resume: [{ interruptId: 'nope', status: 'resolved' }] }),
      (e) => { assert.equal(e.status, 404, e.message); return true; });
  });
});

describe('ag-ui: approvals', () => {
  const server = new Server({ chunkDelayMs: 2, extra: { tools: [{ name: 'calculator', approval: 'ask' }] } });

  before(async () => { await server.start(); });
  after(stopped(server));

  test('an approval is an interrupt; resume approve runs the tool and the answer comes', async () => {
    const a = agent(server, { threadId: 'ask-1' });
    say(a, 'what is 6*7?');
    const first = await run(a);
    const fin = first.events.at(-1);
    assert.equal(fin.type, 'RUN_FINISHED');
    assert.equal(fin.outcome.type, 'interrupt');
    const [it] = fin.outcome.interrupts;
    const st = await native(server, '/sessions/ask-1');
    assert.equal(it.toolCallId, st.toolCallRecords[0].id);
    assert.equal(it.id, st.toolCallRecords[0].id);
    assert.equal(st.toolCallRecords[0].approval, 'pending');
    assert.equal(it.reason, 'tool_call_approval');
    assert.deepEqual(it.metadata.arguments, { expression: '6*7' });
    assert.deepEqual(a.pendingInterrupts.map((i) => i.id), [it.id]);
    assert.ok(!first.types.includes('TOOL_CALL_RESULT'));
    // The client itself refuses a run that leaves the interrupt unanswered.
    await assert.rejects(a.runAgent(), /pending interrupt/);

    const second = await run(a, { resume: [{ interruptId: it.id, status: 'resolved', payload: { decision: 'approve' } }] });
    const result = second.events.find((e) => e.type === 'TOOL_CALL_RESULT');
    assert.equal(result.toolCallId, it.id);
    assert.equal(result.content, '42');
    assert.equal(second.events.at(-1).outcome.type, 'success');
    assert.match(a.messages.at(-1).content, /42/);
    assert.deepEqual(a.pendingInterrupts, []);
    // Answered: a second answer is refused, nothing changes.
    const before = await native(server, '/sessions/ask-1');
    refused(await post(server, { threadId: 'ask-1', runId: 'again', messages: [],
      resume: [{ interruptId: it.id, status: 'resolved', payload: { decision: 'approve' } }] }), 409, 'already_answered');
    refused(await post(server, { threadId: 'ask-1', runId: 'again', messages: [],
      resume: [{ interruptId: 'no-such-call', status: 'resolved' }] }), 404, 'not_found');
    assert.deepEqual(await native(server, '/sessions/ask-1'), before);
  });

  test('resume reject: the call is refused and the agent answers without it', async () => {
    const a = agent(server, { threadId: 'ask-2' });
    say(a, 'what is 6*7?');
    const first = await run(a);
    const [it] = first.events.at(-1).outcome.interrupts;
    refused(await post(server, { threadId: 'ask-2', runId: 'x', messages: [],
      resume: [{ interruptId: it.id, status: 'maybe' }] }), 422, 'invalid_input');
    const second = await run(a, { resume: [{ interruptId: it.id, status: 'resolved', payload: { decision: 'reject', reason: 'not now' } }] });
    assert.equal(second.events.at(-1).outcome.type, 'success');
    const st = await native(server, '/sessions/ask-2');
    assert.equal(st.toolCallRecords[0].approval, 'rejected');
    // The refusal is the call's result at once (the resume input makes it): the
    // history the run starts with carries it, and the answer follows.
    const tool = a.messages.find((m) => m.role === 'tool' && m.toolCallId === it.id);
    assert.match(tool.content, /rejected by the user: not now/);
    assert.match(a.messages.at(-1).content, /not now/);
    assert.deepEqual(a.state, st);
  });

  test('an approval shows the same in the native API and is answered there too', async () => {
    const a = agent(server, { threadId: 'ask-3' });
    say(a, 'what is 6*7?');
    const [it] = (await run(a)).events.at(-1).outcome.interrupts;
    // A resume entry cancelled is a refusal; first, the record is the one the native API shows.
    const st = await native(server, '/sessions/ask-3');
    assert.equal(st.toolCallRecords.find((c) => c.id === it.id).approval, 'pending');
    const second = await run(a, { resume: [{ interruptId: it.id, status: 'cancelled' }] });
    assert.equal(second.events.at(-1).outcome.type, 'success');
    assert.equal((await native(server, '/sessions/ask-3')).toolCallRecords[0].approval, 'rejected');
  });
});

describe('ag-ui: a call in doubt (SPEC 3.7)', () => {
  const dir = tempDir('agui-ledger');
  const ledger = path.join(dir, 'ledger.txt');
  const script = path.join(dir, 'ledger.sh');
  fs.writeFileSync(script, `#!/bin/sh\nsleep 2\necho ran >> '${ledger}'\necho ok\n`, { mode: 0o755 });
  const tool = { name: 'ledger', description: 'appends a line', command: ['/bin/sh', script], timeout_ms: 10000 };
  const server = new Server({ chunkDelayMs: 2, extra: { tools: [tool] } });

  before(async () => { await server.start(); });
  after(async () => { await stopped(server)(); fs.rmSync(dir, { recursive: true, force: true }); });

  test('cut off by kill -9: an interrupt after the restart, resumed with resolve', async () => {
    // The first run by hand: the kill cuts its stream, which is all it does here.
    const running = post(server, { threadId: 'doubt-1', runId: 'r1',
      messages: [{ id: 'm1', role: 'user', content: '/call ledger {}' }] }).catch(() => {});
    const st = await until(() => fetch(server.url + API + '/sessions/doubt-1').then((r) => r.json()),
      (s) => s.toolCallRecords?.[0]?.startedAt);
    await server.stop('SIGKILL');
    await running;
    await server.start();
    const b = agent(server, { threadId: 'doubt-1' });
    const join = await run(b);
    const fin = join.events.at(-1);
    assert.equal(fin.outcome.type, 'interrupt');
    const [it] = fin.outcome.interrupts;
    assert.equal(it.id, st.toolCallRecords[0].id);
    assert.equal(it.reason, 'tool_call_in_doubt');
    assert.deepEqual(it.responseSchema.properties.decision.enum, ['retry', 'reject', 'resolve']);
    refused(await post(server, { threadId: 'doubt-1', runId: 'x', messages: [],
      resume: [{ interruptId: it.id, status: 'resolved', payload: { decision: 'approve-ish' } }] }), 422, 'invalid_input');
    refused(await post(server, { threadId: 'doubt-1', runId: 'x', messages: [],
      resume: [{ interruptId: it.id, status: 'resolved', payload: { decision: 'resolve' } }] }), 422, 'invalid_input');
    const done = await run(b, { resume: [{ interruptId: it.id, status: 'resolved', payload: { decision: 'resolve', result: 'done by hand' } }] });
    assert.equal(done.events.at(-1).outcome.type, 'success');
    const now = await native(server, '/sessions/doubt-1');
    assert.equal(now.toolCallRecords[0].approval, 'resolved');
    assert.equal(now.toolCallRecords[0].result.content, 'done by hand');
    assert.equal(fs.existsSync(ledger), false, 'the tool never ran again');
    assert.ok(b.messages.some((m) => m.role === 'tool' && m.content === 'done by hand'));
  });
});

describe('ag-ui: reasoning (an OpenAI-compatible brain, the fake)', () => {
  const FAKE = process.env.FAKE_OPENAI || path.join(path.dirname(BIN), 'tests/fake_openai');
  let fake;
  let server;

  before(async () => {
    fake = spawn(FAKE, ['--exit-on-eof'], { stdio: ['pipe', 'pipe', 'inherit'] });
    const port = await new Promise((resolve, reject) => {
      let out = '';
      fake.stdout.on('data', (d) => { out += d; const m = /port (\d+)/.exec(out); if (m) resolve(Number(m[1])); });
      fake.once('exit', (c) => reject(new Error(`fake_openai exited (${c})`)));
    });
    server = new Server({ extra: { brain: { provider: 'openai', openai: {
      base_url: `http://127.0.0.1:${port}/v1`, model: 'reasoning', api_key: '', retries: 0, backoff_ms: 0 } } } });
    await server.start();
  });
  after(async () => {
    await stopped(server)();
    fake.stdin.end();
    fake.kill('SIGKILL');
  });

  test('reasoning streams as REASONING_*, closed before the answer', async () => {
    const a = agent(server, { threadId: 'think-1' });
    say(a, 'think first');
    const { events, types } = await run(a);
    const think = events.filter((e) => e.type === 'REASONING_MESSAGE_CONTENT').map((e) => e.delta).join('');
    assert.equal(think, 'Let me think.');
    const order = ['REASONING_START', 'REASONING_MESSAGE_START', 'REASONING_MESSAGE_END', 'REASONING_END',
      'TEXT_MESSAGE_START', 'TEXT_MESSAGE_END', 'RUN_FINISHED'].map((t) => types.indexOf(t));
    assert.deepEqual([...order].sort((x, y) => x - y), order, types.join(' '));
    assert.ok(order[0] > 0);
    assert.equal(a.messages.find((m) => m.role === 'reasoning').content, 'Let me think.');
    assert.equal(a.messages.at(-1).content, 'Answer.');
  });
});

describe('ag-ui: users', () => {
  const server = new Server({ chunkDelayMs: 2, extra: { auth: { mode: 'keys' } } });
  let alice, bob;

  before(async () => {
    await server.start();
    const add = (name) => execFileSync(BIN, ['--config', server.config, '--db', server.db, 'users', 'add', name],
      { cwd: ROOT, encoding: 'utf8' }).trim();
    alice = add('alice');
    bob = add('bob');
  });
  after(stopped(server));

  test('each user sees only their own threads; another\'s is answered 404', async () => {
    const a = agent(server, { threadId: 'alice-t', headers: { Authorization: `Bearer ${alice}` } });
    say(a, 'mine');
    await run(a);
    refused(await post(server, { threadId: 'alice-t', runId: 'r', messages: [] }), 401, 'unauthorized');
    const b = agent(server, { threadId: 'alice-t', headers: { Authorization: `Bearer ${bob}` } });
    say(b, 'let me in');
    await assert.rejects(run(b), (e) => { assert.equal(e.status, 404, e.message); return true; });
    const st = await native(server, '/sessions/alice-t', alice);
    assert.deepEqual(st.userMessages.map((m) => m.content), ['mine'], 'bob changed nothing');
    const own = agent(server, { threadId: 'bob-t', headers: { Authorization: `Bearer ${bob}` } });
    say(own, 'hi');
    await run(own);
    assert.equal(own.messages.at(-1).content, 'Echo: hi');
  });
});

describe('ag-ui: turned off', () => {
  const server = new Server({ extra: { agui: { prefix: '' } } });

  before(async () => { await server.start(); });
  after(stopped(server));

  test('agui.prefix "" turns the door off', async () => {
    // No door: the server's answer for a path nothing serves (GET 404, POST 405).
    const r = await post(server, { threadId: 't', runId: 'r', messages: [] });
    assert.ok([404, 405].includes(r.status), `${r.status}`);
    assert.notEqual(r.type, 'text/event-stream');
    assert.equal((await fetch(server.url + AGUI)).status, 404);
    assert.equal((await fetch(server.url + API + '/sessions/t')).status, 404, 'no thread was made');
  });
});
