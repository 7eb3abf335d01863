// The A2A door (SPEC 4.3, issue 32) driven by the real `@a2a-js/sdk` client,
// built from the agent card, in A2A 1.0 and in its 0.3 compatibility mode,
// against the real binary (REFLEXOR_BIN) and its builtin brain ("Echo:
// <text>"; "what is 6*7?" calls the calculator, which may wait for approval).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import { Message, SendMessageRequest } from '@a2a-js/sdk';
import {
  AgentCardResolver, ClientFactory, ClientFactoryOptions, JsonRpcTransportFactory,
} from '@a2a-js/sdk/client';
import { BIN, ROOT, Server, sleep } from '../browser/helpers.mjs';

const A2A = '/api/a2a';
const CARD = '/.well-known/agent-card.json';
// TaskState and Role as the SDK holds them (1.0's enum numbers).
const S = { SUBMITTED: 1, WORKING: 2, COMPLETED: 3, FAILED: 4, CANCELED: 5, INPUT_REQUIRED: 6 };

/* A client from the card at the server's base URL; `v03`: the 0.3 interface. */
async function client(server, { v03 = false, key = null } = {}) {
  const fetchImpl = key
    ? (url, init) => fetch(url, { ...init, headers: { ...init?.headers, Authorization: `Bearer ${key}` } })
    : undefined;
  const card = await AgentCardResolver.default.resolve(server.url);
  const opts = ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
    transports: [new JsonRpcTransportFactory({ fetchImpl, legacyCompat: { enabled: v03 } })],
  });
  const use = v03
    ? { ...card, supportedInterfaces: card.supportedInterfaces.filter((i) => i.protocolVersion === '0.3') }
    : card;
  const c = await new ClientFactory(opts).createFromAgentCard(use);
  assert.equal(c.protocolVersion, v03 ? '0.3' : '1.0');
  return c;
}

let seq = 0;
/* A SendMessageRequest: text or a data part, on a context and task. */
function req({ text, data, contextId, taskId, returnImmediately = false }) {
  const parts = [];
  if (text !== undefined) parts.push({ text });
  if (data !== undefined) parts.push({ data });
  return SendMessageRequest.fromJSON({
    message: { messageId: `m-${process.pid}-${++seq}`, role: 'ROLE_USER', parts, contextId, taskId },
    configuration: returnImmediately ? { returnImmediately: true } : undefined,
  });
}

const textOf = (parts) => parts.filter((p) => p.content?.$case === 'text').map((p) => p.content.value).join('');
const answer = (task) => textOf(task.artifacts[0]?.parts ?? []);
const dataOf = (msg) => msg?.parts.find((p) => p.content?.$case === 'data')?.content.value;

async function collect(stream) {
  const events = [];
  for await (const e of stream) events.push(e.payload);
  return events;
}

/* The artifact as a streaming client builds it: chunks appended, or replaced. */
function built(events) {
  let text = '';
  for (const e of events.filter((x) => x.$case === 'artifactUpdate')) {
    const t = textOf(e.value.artifact.parts);
    text = e.value.append ? text + t : t;
  }
  return text;
}

/* Raw JSON-RPC, for what no client would send. */
async function rpc(server, body, headers = {}) {
  const r = await fetch(server.url + A2A, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  assert.equal(r.status, 200);
  return r.json();
}

async function rpcError(promise, code) {
  await assert.rejects(promise, (e) => {
    const c = e.envelopeCode ?? e.code;
    assert.equal(c, code, `${e.message} (code ${c})`);
    return true;
  });
}

function stopped(server) {
  return async () => {
    await server.stop();
    const bad = server.cleanExit();
    server.cleanup();
    assert.equal(bad, '');
  };
}

for (const v03 of [false, true]) {
  describe(`a2a ${v03 ? '0.3 compatibility' : '1.0'}: the client from the card`, () => {
    const server = new Server({ chunkDelayMs: 3, extra: { tools: [{ name: 'calculator', approval: 'ask' }] } });
    let a2a;

    before(async () => {
      await server.start();
      a2a = await client(server, { v03 });
    });
    after(stopped(server));

    test('send (blocking): completed, the answer as the artifact, the history', async () => {
      const task = await a2a.sendMessage(req({ text: 'hello there' }));
      assert.equal(task.status.state, S.COMPLETED);
      assert.equal(answer(task), 'Echo: hello there');
      assert.deepEqual(task.history.map((m) => textOf(m.parts)), ['hello there', 'Echo: hello there']);
      assert.deepEqual(task.history.map((m) => m.role), [1, 2]);
      // The same task again, and its context goes on with a second message.
      const got = await a2a.getTask({ id: task.id, tenant: '' });
      assert.equal(got.status.state, S.COMPLETED);
      assert.equal(answer(got), 'Echo: hello there');
      const next = await a2a.sendMessage(req({ text: 'again', contextId: task.contextId }));
      assert.equal(next.contextId, task.contextId);
      assert.notEqual(next.id, task.id);
      assert.equal(answer(next), 'Echo: again');
      const one = await a2a.getTask({ id: next.id, tenant: '', historyLength: 1 });
      assert.deepEqual(one.history.map((m) => textOf(m.parts)), ['Echo: again']);
      // The context is a session of the native API, holding both turns.
      const list = await (await fetch(`${server.url}/api/reflexor/sessions`)).json();
      const mine = JSON.stringify(list).includes(task.contextId);
      assert.ok(mine, JSON.stringify(list).slice(0, 400));
    });

    test('streaming: the task, status updates, artifact chunks, the final status', async () => {
      const text = Array.from({ length: 30 }, (_, i) => `w${i}`).join(' ');
      const events = await collect(a2a.sendMessageStream(req({ text })));
      assert.equal(events[0].$case, 'task');
      const kinds = events.map((e) => e.$case);
      assert.ok(kinds.filter((k) => k === 'artifactUpdate').length > 2, kinds.join());
      const last = events.at(-1);
      assert.equal(last.$case, 'statusUpdate');
      assert.equal(last.value.status.state, S.COMPLETED);
      assert.equal(built(events), `Echo: ${text}`);
      assert.ok(events.every((e) => (e.value.taskId ?? e.value.id) === events[0].value.id));
    });

    test('approval: input-required, a decision part approves, the result in the answer', async () => {
      const task = await a2a.sendMessage(req({ text: 'what is 6*7?' }));
      assert.equal(task.status.state, S.INPUT_REQUIRED);
      const waiting = dataOf(task.status.message).awaiting;
      assert.equal(waiting.length, 1);
      assert.equal(waiting[0].name, 'calculator');
      assert.deepEqual(waiting[0].args, { expression: '6*7' });
      assert.match(textOf(task.status.message.parts), /calculator/);
      const got = await a2a.getTask({ id: task.id, tenant: '' });
      assert.equal(got.status.state, S.INPUT_REQUIRED);
      // A message with no decision on a task that waits for one is refused.
      await rpcError(a2a.sendMessage(req({ text: 'well?', taskId: task.id, contextId: task.contextId })), -32602);
      const done = await a2a.sendMessage(req({ data: { decision: 'approve' }, taskId: task.id, contextId: task.contextId }));
      assert.equal(done.id, task.id);
      assert.equal(done.status.state, S.COMPLETED);
      assert.match(answer(done), /42/);
      // Answered already: the task is over.
      await rpcError(a2a.sendMessage(req({ data: { decision: 'approve' }, taskId: task.id })), -32004);
    });

    test('approval rejected, streamed; a wrong decision is refused and changes nothing', async () => {
      const task = await a2a.sendMessage(req({ text: 'what is 6*7?' }));
      assert.equal(task.status.state, S.INPUT_REQUIRED);
      await rpcError(a2a.sendMessage(req({ data: { decision: 'maybe' }, taskId: task.id })), -32602);
      await rpcError(a2a.sendMessage(req({ data: { decision: 'approve', toolCallId: 'nope' }, taskId: task.id })), -32602);
      assert.equal((await a2a.getTask({ id: task.id, tenant: '' })).status.state, S.INPUT_REQUIRED);
      const events = await collect(a2a.sendMessageStream(
        req({ data: { decision: 'reject', reason: 'not now' }, taskId: task.id })));
      const last = events.at(-1);
      assert.equal(last.$case, 'statusUpdate');
      assert.equal(last.value.status.state, S.COMPLETED);
      const got = await a2a.getTask({ id: task.id, tenant: '' });
      assert.doesNotMatch(answer(got), /= 42/);
    });

    test('cancel a long answer; subscribe to a running task', async () => {
      const long = Array.from({ length: 400 }, (_, i) => `x${i}`).join(' ');
      const task = await a2a.sendMessage(req({ text: long, returnImmediately: true }));
      assert.ok([S.SUBMITTED, S.WORKING].includes(task.status.state));
      const sub = collect(a2a.resubscribeTask({ id: task.id, tenant: '' }));
      await sleep(150);
      const canceled = await a2a.cancelTask({ id: task.id, tenant: '' });
      assert.equal(canceled.status.state, S.CANCELED);
      const events = await sub;
      assert.equal(events[0].$case, 'task');
      assert.equal(events.at(-1).value.status.state, S.CANCELED);
      const partial = answer(await a2a.getTask({ id: task.id, tenant: '' }));
      assert.ok(partial.startsWith('Echo: x0') && partial.length < long.length, partial.slice(0, 80));
      await rpcError(a2a.cancelTask({ id: task.id, tenant: '' }), -32002);
      await rpcError(collect(a2a.resubscribeTask({ id: task.id, tenant: '' })), -32004);
      // A running task followed to its end.
      const t2 = await a2a.sendMessage(req({ text: 'short one', returnImmediately: true }));
      const ev2 = await collect(a2a.resubscribeTask({ id: t2.id, tenant: '' }));
      assert.equal(ev2.at(-1).value.status?.state ?? ev2.at(-1).value.status?.state, S.COMPLETED);
    });

    test('one approval, every door: answered through the native API, the task goes on', async () => {
      const task = await a2a.sendMessage(req({ text: 'what is 6*7?' }));
      assert.equal(task.status.state, S.INPUT_REQUIRED);
      const [call] = dataOf(task.status.message).awaiting;
      const r = await fetch(`${server.url}/api/reflexor/sessions/${task.contextId}/moorex`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ type: 'user-review-tool-call', toolCallId: call.toolCallId, decision: 'approve' }),
      });
      assert.ok(r.ok, `${r.status}`);
      let got;
      for (let i = 0; i < 200; i++) {
        got = await a2a.getTask({ id: task.id, tenant: '' });
        if (got.status.state === S.COMPLETED) break;
        await sleep(25);
      }
      assert.equal(got.status.state, S.COMPLETED);
      assert.match(answer(got), /42/);
      await rpcError(a2a.sendMessage(req({ data: { decision: 'approve' }, taskId: task.id })), -32004);
    });

    test('an input-required task can be canceled', async () => {
      const task = await a2a.sendMessage(req({ text: 'what is 6*7?' }));
      assert.equal(task.status.state, S.INPUT_REQUIRED);
      // Following a task that waits: its state, and the stream ends (twice: the
      // first stream, read to its end, is let go when the second comes).
      for (let i = 0; i < 2; i++) {
        const events = await collect(a2a.resubscribeTask({ id: task.id, tenant: '' }));
        assert.equal(events.length, 1);
        assert.equal(events[0].value.status.state, S.INPUT_REQUIRED);
      }
      const c = await a2a.cancelTask({ id: task.id, tenant: '' });
      assert.equal(c.status.state, S.CANCELED);
    });

    test('unknown task ids', async () => {
      await rpcError(a2a.getTask({ id: 'no-such-task', tenant: '' }), -32001);
      await rpcError(a2a.cancelTask({ id: 'no-such-task', tenant: '' }), -32001);
      await rpcError(a2a.sendMessage(req({ data: { decision: 'approve' }, taskId: 'no-such-task' })), -32001);
    });
  });
}

describe('a2a: the wire, bad input, a restart', () => {
  const server = new Server({ chunkDelayMs: 2 });
  before(() => server.start());
  after(stopped(server));

  test('the card: 1.0 interfaces and 0.3 fields, open, the Host it was asked at', async () => {
    const r = await fetch(server.url + CARD);
    assert.equal(r.status, 200);
    const card = await r.json();
    assert.deepEqual(card.supportedInterfaces.map((i) => [i.protocolBinding, i.protocolVersion]),
      [['JSONRPC', '1.0'], ['JSONRPC', '0.3']]);
    assert.equal(card.supportedInterfaces[0].url, server.url + A2A);
    assert.equal(card.capabilities.streaming, true);
    assert.equal(card.url, server.url + A2A);
    assert.equal(card.securitySchemes, undefined);
  });

  test('1.0 shapes with A2A-Version, 0.3 shapes without', async () => {
    const msg = { messageId: 'raw-1', role: 'ROLE_USER', parts: [{ text: 'raw' }] };
    const v10 = await rpc(server, { jsonrpc: '2.0', id: 'a', method: 'SendMessage', params: { message: msg } },
      { 'A2A-Version': '1.0' });
    assert.equal(v10.id, 'a');
    assert.equal(v10.result.task.status.state, 'TASK_STATE_COMPLETED');
    assert.equal(v10.result.task.kind, undefined);
    assert.equal(v10.result.task.history[0].role, 'ROLE_USER');
    const v03 = await rpc(server, { jsonrpc: '2.0', id: 7, method: 'tasks/get', params: { id: v10.result.task.id } });
    assert.equal(v03.id, 7);
    assert.equal(v03.result.kind, 'task');
    assert.equal(v03.result.status.state, 'completed');
    assert.equal(v03.result.history[1].role, 'agent');
    assert.equal(v03.result.artifacts[0].parts[0].kind, 'text');
    const noHeader = await rpc(server, { jsonrpc: '2.0', id: 8, method: 'GetTask', params: { id: v10.result.task.id } });
    assert.equal(noHeader.result.kind, 'task');
  });

  test('bad input: JSON-RPC errors, nothing changed', async () => {
    const cases = [
      ['{not json', -32700],
      ['[1,2]', -32600],
      [{ id: 1, method: 'GetTask', params: {} }, -32600],
      [{ jsonrpc: '2.0', id: 1, method: 'tasks/frobnicate', params: {} }, -32601],
      [{ jsonrpc: '2.0', id: 1, method: 'GetTask', params: 'x' }, -32602],
      [{ jsonrpc: '2.0', id: 1, method: 'GetTask', params: {} }, -32602],
      [{ jsonrpc: '2.0', id: 1, method: 'GetTask', params: { id: 'nope' } }, -32001],
      [{ jsonrpc: '2.0', id: 1, method: 'SendMessage', params: {} }, -32602],
      [{ jsonrpc: '2.0', id: 1, method: 'SendMessage', params: { message: { messageId: 'x', role: 'ROLE_USER', parts: [] } } }, -32602],
      [{ jsonrpc: '2.0', id: 1, method: 'SendMessage', params: { message: { messageId: 'x', role: 'ROLE_USER', parts: [{ url: 'http://x' }] } } }, -32602],
      [{ jsonrpc: '2.0', id: 1, method: 'SendMessage', params: { message: { messageId: 'x', role: 'ROLE_USER', parts: [{ data: { decision: 'approve' } }] } } }, -32602],
      [{ jsonrpc: '2.0', id: 1, method: 'SendMessage', params: { message: { messageId: 'x', role: 'ROLE_AGENT', parts: [{ text: 'hi' }] } } }, -32602],
    ];
    const before = (await (await fetch(`${server.url}/api/reflexor/sessions`)).json());
    for (const [body, code] of cases) {
      const j = await rpc(server, body, { 'A2A-Version': '1.0' });
      assert.equal(j.jsonrpc, '2.0');
      assert.equal(j.error?.code, code, `${JSON.stringify(body)}: ${JSON.stringify(j)}`);
      assert.equal(typeof j.error.message, 'string');
    }
    const afterList = (await (await fetch(`${server.url}/api/reflexor/sessions`)).json());
    assert.deepEqual(afterList, before);
  });

  test('a task survives a restart (its record is in the store)', async () => {
    const a2a = await client(server);
    const task = await a2a.sendMessage(req({ text: 'remember me' }));
    await server.restart();
    const again = await client(server);
    const got = await again.getTask({ id: task.id, tenant: '' });
    assert.equal(got.status.state, S.COMPLETED);
    assert.equal(answer(got), 'Echo: remember me');
  });
});

describe('a2a: users see only their own tasks', () => {
  const server = new Server({ chunkDelayMs: 2, extra: { auth: { mode: 'keys' }, tools: [{ name: 'calculator', approval: 'ask' }] } });
  const keys = {};
  before(async () => {
    for (const name of ['alice', 'bob']) {
      const out = execFileSync(BIN, ['--config', server.config, '--db', server.db, 'users', 'add', name],
        { cwd: ROOT, encoding: 'utf8' });
      keys[name] = out.trim();
    }
    await server.start();
  });
  after(stopped(server));

  test('the card is open and names the bearer scheme; the endpoint is not', async () => {
    const card = await (await fetch(server.url + CARD)).json();
    assert.ok(card.securitySchemes.bearer);
    const r = await fetch(server.url + A2A, { method: 'POST', body: '{}' });
    assert.equal(r.status, 401);
  });

  test("another user's task answers as unknown, and nothing changes", async () => {
    const alice = await client(server, { key: keys.alice });
    const bob = await client(server, { key: keys.bob });
    const task = await alice.sendMessage(req({ text: 'what is 6*7?' }));
    assert.equal(task.status.state, S.INPUT_REQUIRED);
    await rpcError(bob.getTask({ id: task.id, tenant: '' }), -32001);
    await rpcError(bob.cancelTask({ id: task.id, tenant: '' }), -32001);
    await rpcError(bob.sendMessage(req({ data: { decision: 'approve' }, taskId: task.id })), -32001);
    await rpcError(bob.sendMessage(req({ text: 'in your context', contextId: task.contextId })), -32602);
    assert.equal((await alice.getTask({ id: task.id, tenant: '' })).status.state, S.INPUT_REQUIRED);
    const done = await alice.sendMessage(req({ data: { decision: 'approve' }, taskId: task.id }));
    assert.match(answer(done), /42/);
  });
});

describe('a2a: a2a.prefix "" turns it off', () => {
  const server = new Server({ chunkDelayMs: 2, extra: { a2a: { prefix: '' } } });
  before(() => server.start());
  after(stopped(server));

  test('no card, no endpoint', async () => {
    assert.equal((await fetch(server.url + CARD)).status, 404);
    // No door: the path falls through to the static files.
    assert.equal((await fetch(server.url + A2A)).status, 404);
    const r = await fetch(server.url + A2A, { method: 'POST', body: '{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"x"}}' });
    assert.equal(r.status, 405);
  });
});
