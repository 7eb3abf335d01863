// The LangGraph Agent Server API subset (SPEC 4.3) driven by the real
// `@langchain/langgraph-sdk` Client against the real binary (REFLEXOR_BIN)
// and its builtin brain ("Echo: <text>"; "what is 6*7?" calls calculator).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Client } from '@langchain/langgraph-sdk';
import { API, Server, sleep } from '../browser/helpers.mjs';

const LG = '/api/langgraph';
const GRAPH = 'agent';

function client(server, opts = {}) {
  return new Client({ apiUrl: server.url + LG, apiKey: null, callerOptions: { maxRetries: 0 }, ...opts });
}

async function native(server, p) {
  const r = await fetch(server.url + API + p);
  assert.equal(r.status, 200, `GET ${p}`);
  return r.json();
}

async function collect(stream) {
  const events = [];
  for await (const e of stream) events.push(e);
  return events;
}

const lastAi = (values) => values.messages.filter((m) => m.type === 'ai').at(-1);
const words = (n) => Array.from({ length: n }, (_, i) => `word${i}`).join(' ');

/* The text of the messages-tuple chunks of message `id`, in order. */
function deltas(events, id) {
  return events
    .filter((e) => e.event === 'messages' && e.data[0].id === id)
    .map((e) => e.data[0].content)
    .join('');
}

/* The SDK throws an HTTPError: its status and the server's {"detail"}. */
async function rejects(promise, status) {
  await assert.rejects(promise, (e) => {
    assert.equal(e.status, status, e.message);
    assert.equal(typeof JSON.parse(e.text).detail, 'string');
    return true;
  });
}

/* Poll until `ok(x)` holds for x = await get(). */
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

describe('langgraph: one server', () => {
  const server = new Server({ chunkDelayMs: 5 });
  let lg;

  before(async () => {
    await server.start();
    lg = client(server);
  });
  after(stopped(server));

  test('info and the one assistant, graph "agent"', async () => {
    const info = await (await fetch(server.url + LG + '/info')).json();
    assert.equal(info.flags.assistants, true);
    const found = await lg.assistants.search({ graphId: GRAPH });
    assert.equal(found.length, 1);
    assert.equal(found[0].graph_id, GRAPH);
    const a = await lg.assistants.get(GRAPH);
    assert.equal(a.assistant_id, found[0].assistant_id);
    assert.deepEqual(await lg.assistants.get(a.assistant_id), a);
    assert.deepEqual(await lg.assistants.search({ graphId: 'other' }), []);
    // count() answers a bare integer (it was a 500 before: issue 28, item 11).
    assert.equal(await lg.assistants.count(), 1);
    assert.equal(await lg.assistants.count({ graphId: GRAPH }), 1);
    assert.equal(await lg.assistants.count({ graphId: 'other' }), 0);
    await rejects(lg.assistants.get('nobody'), 404);
  });

  test('create a thread: a session, idle, no messages; get, patch, delete', async () => {
    const t = await lg.threads.create({ metadata: { topic: 'create' } });
    assert.equal(t.status, 'idle');
    assert.deepEqual(t.values, { messages: [] });
    assert.deepEqual(t.interrupts, {});
    assert.equal(t.metadata.topic, 'create');
    assert.equal(t.metadata.graph_id, GRAPH);
    assert.ok(!Number.isNaN(Date.parse(t.created_at)));
    await native(server, `/sessions/${t.thread_id}`);
    const got = await lg.threads.get(t.thread_id);
    assert.equal(got.thread_id, t.thread_id);
    const patched = await lg.threads.update(t.thread_id, { metadata: { color: 'blue' } });
    assert.equal(patched.metadata.topic, 'create');
    assert.equal(patched.metadata.color, 'blue');
    // A chosen id, and if_exists.
    const mine = await lg.threads.create({ threadId: 'lg-chosen-id' });
    assert.equal(mine.thread_id, 'lg-chosen-id');
    await rejects(lg.threads.create({ threadId: 'lg-chosen-id' }), 409);
    const same = await lg.threads.create({ threadId: 'lg-chosen-id', ifExists: 'do_nothing' });
    assert.equal(same.thread_id, 'lg-chosen-id');
    await lg.threads.delete('lg-chosen-id');
    await rejects(lg.threads.get('lg-chosen-id'), 404);
  });

  test('runs.stream values + messages-tuple: the deltas add up to the final message', async () => {
    const t = await lg.threads.create();
    const text = words(20);
    let created;
    const events = await collect(lg.runs.stream(t.thread_id, GRAPH, {
      input: { messages: [{ type: 'human', content: text }] },
      streamMode: ['values', 'messages-tuple'],
      onRunCreated: (m) => { created = m; },
    }));
    assert.equal(events[0].event, 'metadata');
    assert.equal(created.run_id, events[0].data.run_id);
    assert.equal(created.thread_id, t.thread_id);
    assert.ok(events.every((e) => /^\d+$/.test(e.id)), 'each event has an id');
    const ids = events.map((e) => Number(e.id));
    assert.deepEqual(ids, ids.map((_, i) => i + 1));
    const values = events.filter((e) => e.event === 'values').at(-1).data;
    const ai = lastAi(values);
    assert.equal(ai.content, `Echo: ${text}`);
    assert.ok(events.filter((e) => e.event === 'messages').length > 5, 'streamed in pieces');
    assert.equal(deltas(events, ai.id), ai.content);
    const [chunk, meta] = events.find((e) => e.event === 'messages').data;
    assert.equal(chunk.type, 'AIMessageChunk');
    assert.equal(meta.run_id, created.run_id);
    assert.equal(meta.langgraph_node, 'model');
    assert.deepEqual(values.messages.map((m) => m.type), ['human', 'ai']);
    assert.equal(values.messages[0].content, text);
    assert.equal(ai.response_metadata.status, 'complete');
    const run = await lg.runs.get(t.thread_id, created.run_id);
    assert.equal(run.status, 'success');
    assert.equal(run.assistant_id, (await lg.assistants.get(GRAPH)).assistant_id);
    const st = await native(server, `/sessions/${t.thread_id}`);
    assert.deepEqual(st.userMessages.map((m) => m.content), [text]);
  });

  test('runs.stream updates and custom: the model\'s message, then tool progress', async () => {
    const t = await lg.threads.create();
    const events = await collect(lg.runs.stream(t.thread_id, GRAPH, {
      input: { messages: [{ role: 'user', content: 'what is 6*7?' }] },
      streamMode: ['updates', 'custom'],
    }));
    const names = events.map((e) => e.event);
    assert.equal(names[0], 'metadata');
    assert.ok(!names.includes('values'));
    const updates = events.filter((e) => e.event === 'updates').map((e) => e.data);
    const calls = updates.find((u) => u.model?.messages[0].tool_calls.length).model.messages[0];
    assert.equal(calls.tool_calls[0].name, 'calculator');
    assert.deepEqual(calls.tool_calls[0].args, { expression: '6*7' });
    const result = updates.find((u) => u.tools).tools.messages[0];
    assert.equal(result.type, 'tool');
    assert.equal(result.tool_call_id, calls.tool_calls[0].id);
    assert.equal(result.content, '42');
    assert.equal(updates.at(-1).model.messages[0].content, '6*7 = 42');
    const custom = events.filter((e) => e.event === 'custom').map((e) => e.data.status);
    assert.deepEqual(custom, ['pending', 'success']);
  });

  test('runs.wait answers the final values; a background run is listed and joined', async () => {
    const t = await lg.threads.create();
    // The client's message id is kept (agent-chat-ui matches its optimistic message by it).
    const values = await lg.runs.wait(t.thread_id, GRAPH, { input: { messages: [{ type: 'human', content: 'first', id: 'my-msg-1' }] } });
    assert.equal(lastAi(values).content, 'Echo: first');
    assert.equal(values.messages[0].id, 'my-msg-1');
    const run = await lg.runs.create(t.thread_id, GRAPH, { input: { messages: [{ type: 'human', content: 'second' }] } });
    assert.ok(['pending', 'running'].includes(run.status));
    assert.equal(run.multitask_strategy, 'enqueue');
    const joined = await lg.runs.join(t.thread_id, run.run_id);
    assert.equal(lastAi(joined).content, 'Echo: second');
    assert.equal(joined.messages.length, 4);
    const runs = await lg.runs.list(t.thread_id);
    assert.deepEqual(runs.map((r) => r.status), ['success', 'success']);
    assert.equal(runs[0].run_id, run.run_id, 'newest first');
    const thread = await lg.threads.get(t.thread_id);
    assert.equal(thread.status, 'idle');
    assert.deepEqual(thread.values, joined);
  });

  test('join a running stream after reconnect with Last-Event-ID: nothing lost, nothing doubled', async () => {
    const t = await lg.threads.create();
    const text = words(60);
    const first = [];
    const ac = new AbortController();
    const stream = lg.runs.stream(t.thread_id, GRAPH, {
      input: { messages: [{ type: 'human', content: text }] },
      streamMode: ['values', 'messages-tuple'],
      signal: ac.signal,
    });
    try {
      for await (const e of stream) {
        first.push(e);
        if (first.filter((x) => x.event === 'messages').length === 5) ac.abort();
      }
    } catch (e) {
      if (!ac.signal.aborted) throw e;
    }
    const runId = first[0].data.run_id;
    assert.equal((await lg.runs.get(t.thread_id, runId)).status, 'running', 'the run goes on');
    const rest = await collect(lg.runs.joinStream(t.thread_id, runId, { lastEventId: first.at(-1).id }));
    assert.equal(Number(rest[0].id), Number(first.at(-1).id) + 1);
    const all = [...first, ...rest];
    assert.deepEqual(all.map((e) => Number(e.id)), all.map((_, i) => i + 1));
    const ai = lastAi(all.filter((e) => e.event === 'values').at(-1).data);
    assert.equal(ai.content, `Echo: ${text}`);
    assert.equal(deltas(all, ai.id), ai.content);
    // A finished run's join replays everything, then ends.
    const replay = await collect(lg.runs.joinStream(t.thread_id, runId));
    assert.deepEqual(replay.map((e) => e.id), all.map((e) => e.id));
  });

  test('cancel: the run is interrupted, the partial answer kept as stopped, the thread idle', async () => {
    const t = await lg.threads.create();
    const run = await lg.runs.create(t.thread_id, GRAPH, {
      input: { messages: [{ type: 'human', content: words(150) }] },
      streamMode: ['messages-tuple'],
    });
    // Wait until it has streamed something.
    for await (const e of lg.runs.joinStream(t.thread_id, run.run_id)) if (e.event === 'messages') break;
    await lg.runs.cancel(t.thread_id, run.run_id, true);
    const done = await lg.runs.get(t.thread_id, run.run_id);
    assert.equal(done.status, 'interrupted');
    const thread = await until(() => lg.threads.get(t.thread_id), (x) => x.status === 'idle');
    const ai = lastAi(thread.values);
    assert.equal(ai.response_metadata.status, 'stopped');
    assert.ok(ai.content.length > 0 && `Echo: ${words(150)}`.startsWith(ai.content));
    assert.ok(ai.content.length < `Echo: ${words(150)}`.length);
    // Cancelling again (over already) is fine.
    await lg.runs.cancel(t.thread_id, run.run_id);
  });

  test('on_disconnect "cancel": a client that goes away cancels its run (useStream\'s default)', async () => {
    const t = await lg.threads.create();
    const ac = new AbortController();
    let runId;
    try {
      for await (const e of lg.runs.stream(t.thread_id, GRAPH, {
        input: { messages: [{ type: 'human', content: words(150) }] },
        streamMode: ['messages-tuple'],
        onDisconnect: 'cancel',
        signal: ac.signal,
      })) {
        if (e.event === 'metadata') runId = e.data.run_id;
        if (e.event === 'messages') ac.abort();
      }
    } catch (e) {
      if (!ac.signal.aborted) throw e;
    }
    const run = await until(() => lg.runs.get(t.thread_id, runId), (r) => r.status !== 'running');
    assert.equal(run.status, 'interrupted');
    await until(() => lg.threads.get(t.thread_id), (x) => x.status === 'idle');
  });

  test('multitask: reject answers 409, enqueue waits its turn, interrupt cancels the one in flight', async () => {
    const t = await lg.threads.create();
    const long = { messages: [{ type: 'human', content: words(150) }] };
    const r1 = await lg.runs.create(t.thread_id, GRAPH, { input: long });
    await rejects(lg.runs.create(t.thread_id, GRAPH, {
      input: { messages: [{ type: 'human', content: 'rejected' }] }, multitaskStrategy: 'reject',
    }), 409);
    const r2 = await lg.runs.create(t.thread_id, GRAPH, {
      input: { messages: [{ type: 'human', content: 'queued' }] }, multitaskStrategy: 'enqueue',
    });
    const r3 = await lg.runs.create(t.thread_id, GRAPH, {
      input: { messages: [{ type: 'human', content: 'now' }] }, multitaskStrategy: 'interrupt',
    });
    const values = await lg.runs.join(t.thread_id, r3.run_id);
    assert.equal(lastAi(values).content, 'Echo: now');
    assert.equal((await lg.runs.get(t.thread_id, r1.run_id)).status, 'interrupted');
    assert.equal((await lg.runs.get(t.thread_id, r2.run_id)).status, 'interrupted');
    const humans = values.messages.filter((m) => m.type === 'human').map((m) => m.content);
    assert.deepEqual(humans, [words(150), 'now'], 'the rejected and the cancelled queued run posted nothing');
  });

  test('threads.getState and getHistory: checkpoints are the log\'s inputs', async () => {
    const t = await lg.threads.create();
    await lg.runs.wait(t.thread_id, GRAPH, { input: { messages: [{ type: 'human', content: 'one' }] } });
    await lg.runs.wait(t.thread_id, GRAPH, { input: { messages: [{ type: 'human', content: 'two' }] } });
    const state = await lg.threads.getState(t.thread_id);
    const thread = await lg.threads.get(t.thread_id);
    assert.deepEqual(state.values, thread.values);
    assert.deepEqual(state.next, []);
    assert.deepEqual(state.tasks, []);
    assert.equal(state.checkpoint.thread_id, t.thread_id);
    const history = await lg.threads.getHistory(t.thread_id, { limit: 4 });
    assert.equal(history.length, 4);
    assert.deepEqual(history[0], state);
    for (let i = 1; i < history.length; i++) {
      assert.equal(history[i - 1].parent_checkpoint.checkpoint_id, history[i].checkpoint.checkpoint_id);
      assert.ok(history[i - 1].values.messages.length >= history[i].values.messages.length);
    }
    // An older checkpoint by id: the state before the second answer.
    const old = await lg.threads.getState(t.thread_id, history[3].checkpoint.checkpoint_id);
    assert.deepEqual(old.values, history[3].values);
    const page = await lg.threads.getHistory(t.thread_id, { limit: 2, before: { checkpoint_id: history[1].checkpoint.checkpoint_id } });
    assert.deepEqual(page, history.slice(2, 4));
    const start = await lg.threads.getHistory(t.thread_id, { limit: 100 });
    assert.deepEqual(start.at(-1).values, { messages: [] });
    assert.equal(start.at(-1).parent_checkpoint, null);
  });

  test('threads.search lists the thread: by id, metadata, status; sorted and paged', async () => {
    const t = await lg.threads.create({ metadata: { owner: 'search-test' } });
    await lg.runs.wait(t.thread_id, GRAPH, { input: { messages: [{ type: 'human', content: 'find me' }] } });
    const byMeta = await lg.threads.search({ metadata: { owner: 'search-test' } });
    assert.deepEqual(byMeta.map((x) => x.thread_id), [t.thread_id]);
    assert.equal(lastAi(byMeta[0].values).content, 'Echo: find me');
    const byGraph = await lg.threads.search({ metadata: { graph_id: GRAPH }, limit: 100 });
    assert.ok(byGraph.some((x) => x.thread_id === t.thread_id));
    const byId = await lg.threads.search({ ids: [t.thread_id], select: ['thread_id', 'status'] });
    assert.deepEqual(byId, [{ thread_id: t.thread_id, status: 'idle' }]);
    const idle = await lg.threads.search({ status: 'idle', limit: 100 });
    assert.ok(idle.some((x) => x.thread_id === t.thread_id));
    assert.deepEqual(await lg.threads.search({ status: 'busy', ids: [t.thread_id] }), []);
    const newest = await lg.threads.search({ limit: 1, sortBy: 'updated_at', sortOrder: 'desc' });
    assert.equal(newest[0].thread_id, t.thread_id);
    // A session from the native API is a thread too.
    const { id } = await (await fetch(server.url + API + '/sessions', { method: 'POST' })).json();
    assert.deepEqual((await lg.threads.search({ ids: [id] })).map((x) => x.thread_id), [id]);
  });

  test('bad input of each kind: the SDK throws, {"detail"} with the status, nothing changes', async () => {
    const t = await lg.threads.create();
    await lg.runs.wait(t.thread_id, GRAPH, { input: { messages: [{ type: 'human', content: 'before' }] } });
    const before = await native(server, `/sessions/${t.thread_id}/history`);
    const ask = (input, more = {}) => lg.runs.wait(t.thread_id, GRAPH, { input, ...more });
    // Malformed bodies (the SDK always sends JSON: fetch sends what it cannot).
    for (const body of ['{not json', '[1,2]', '"text"']) {
      const r = await fetch(`${server.url}${LG}/threads/${t.thread_id}/runs/wait`, {
        method: 'POST', headers: { 'Content-Type': 'application/json' }, body,
      });
      assert.equal(r.status, 422, body);
      assert.equal(typeof (await r.json()).detail, 'string');
    }
    await rejects(ask({ messages: [{ type: 'ai', content: 'not mine' }] }), 422); // wrong role
    await rejects(ask({ messages: [{ role: 'wizard', content: 'x' }] }), 422);
    await rejects(ask({ messages: [] }), 422);
    await rejects(ask({}), 422); // a missing `messages`
    await rejects(ask(undefined), 422);
    await rejects(ask({ messages: [{ type: 'human', content: '   ' }] }), 422);
    await rejects(ask({ messages: [{ type: 'human', content: [{ type: 'image_url', image_url: 'x' }] }] }), 422);
    await rejects(ask(undefined, { command: { resume: { decisions: [{ type: 'approve' }] } } }), 409);
    await rejects(lg.runs.create(t.thread_id, GRAPH, { input: { messages: ['hi'] }, streamMode: ['nonsense'] }), 422);
    await rejects(ask({ messages: ['hi'] }, { multitaskStrategy: 'sometimes' }), 422);
    await rejects(lg.runs.wait(t.thread_id, 'nobody', { input: { messages: ['hi'] } }), 404);
    // Unknown thread and run ids.
    await rejects(lg.threads.get('no-such-thread'), 404);
    await rejects(lg.threads.getState('no-such-thread'), 404);
    await rejects(lg.runs.wait('no-such-thread', GRAPH, { input: { messages: ['hi'] } }), 404);
    await rejects(lg.runs.get(t.thread_id, '00000000-0000-0000-0000-000000000000'), 404);
    await rejects(lg.runs.cancel(t.thread_id, '00000000-0000-0000-0000-000000000000'), 404);
    await rejects(lg.threads.getState(t.thread_id, '999999'), 404);
    await rejects(lg.threads.update(t.thread_id, { metadata: 'not an object' }), 422);
    await rejects(lg.threads.create({ threadId: 'bad id/with slash' }), 422);
    const after = await native(server, `/sessions/${t.thread_id}/history`);
    assert.deepEqual(after, before, 'nothing was posted');
    assert.equal((await lg.runs.list(t.thread_id)).length, 1, 'no run was made');
    assert.equal((await lg.threads.get(t.thread_id)).status, 'idle');
  });

  test('CORS: a page on localhost may call it, another site may not', async () => {
    const pre = await fetch(`${server.url}${LG}/threads`, {
      method: 'OPTIONS', headers: { Origin: 'http://localhost:3000', 'Access-Control-Request-Method': 'POST' },
    });
    assert.equal(pre.status, 204);
    assert.equal(pre.headers.get('access-control-allow-origin'), 'http://localhost:3000');
    const evil = await fetch(`${server.url}${LG}/info`, { headers: { Origin: 'https://evil.example' } });
    assert.equal(evil.headers.get('access-control-allow-origin'), null);
  });
});

describe('langgraph: approvals as interrupts', () => {
  const server = new Server({ chunkDelayMs: 2, extra: { tools: [{ name: 'calculator', approval: 'ask' }] } });
  let lg;

  before(async () => {
    await server.start();
    lg = client(server);
  });
  after(stopped(server));

  /* Ask the calculator; the run stops at the interrupt. */
  async function ask(tid, question = 'what is 6*7?') {
    const events = await collect(lg.runs.stream(tid, GRAPH, {
      input: { messages: [{ type: 'human', content: question }] },
      streamMode: ['values', 'updates'],
    }));
    const interrupted = events.filter((e) => e.event === 'values').at(-1).data;
    assert.ok(interrupted.__interrupt__, 'the last values carry the interrupt');
    assert.ok(events.some((e) => e.event === 'updates' && e.data.__interrupt__));
    return { events, interrupt: interrupted.__interrupt__[0], runId: events[0].data.run_id };
  }

  test('the interrupt in agent-chat-ui\'s shape, in values, state and thread; approve resumes', async () => {
    const t = await lg.threads.create();
    const { interrupt, runId } = await ask(t.thread_id);
    assert.equal(typeof interrupt.id, 'string');
    const req = interrupt.value.action_requests;
    assert.equal(req.length, 1);
    assert.equal(req[0].name, 'calculator');
    assert.deepEqual(req[0].args, { expression: '6*7' });
    assert.match(req[0].description, /calculator/);
    assert.deepEqual(interrupt.value.review_configs,
      [{ action_name: 'calculator', allowed_decisions: ['approve', 'edit', 'reject'] }]);
    assert.equal((await lg.runs.get(t.thread_id, runId)).status, 'interrupted');
    const thread = await lg.threads.get(t.thread_id);
    assert.equal(thread.status, 'interrupted');
    assert.deepEqual(Object.values(thread.interrupts), [[interrupt]]);
    const state = await lg.threads.getState(t.thread_id);
    assert.deepEqual(state.next, ['tools']);
    assert.deepEqual(state.tasks[0].interrupts, [interrupt]);
    assert.equal(state.values.__interrupt__, undefined);
    const call = lastAi(state.values).tool_calls[0];
    assert.equal(call.name, 'calculator');
    // Approve: the tool runs and the agent answers.
    const values = await lg.runs.wait(t.thread_id, GRAPH, { command: { resume: { decisions: [{ type: 'approve' }] } } });
    assert.equal(values.__interrupt__, undefined);
    const tool = values.messages.find((m) => m.type === 'tool');
    assert.equal(tool.tool_call_id, call.id);
    assert.equal(tool.status, 'success');
    assert.equal(tool.content, '42');
    assert.equal(lastAi(values).content, '6*7 = 42');
    assert.equal((await lg.threads.get(t.thread_id)).status, 'idle');
    const st = await native(server, `/sessions/${t.thread_id}`);
    assert.equal(st.toolCallRecords[0].approval, 'approved');
  });

  test('reject with a message, and edit the arguments', async () => {
    const t = await lg.threads.create();
    await ask(t.thread_id);
    const rejected = await lg.runs.wait(t.thread_id, GRAPH, {
      command: { resume: { decisions: [{ type: 'reject', message: 'not now' }] } },
    });
    const tool = rejected.messages.find((m) => m.type === 'tool');
    assert.equal(tool.status, 'error');
    assert.match(tool.content, /rejected by the user: not now/);
    assert.equal((await native(server, `/sessions/${t.thread_id}`)).toolCallRecords[0].approval, 'rejected');
    // Edit: agent-chat-ui's edited_action, through runs.stream as useStream sends it.
    await ask(t.thread_id);
    const events = await collect(lg.runs.stream(t.thread_id, GRAPH, {
      input: {},
      command: { resume: { decisions: [{ type: 'edit', edited_action: { name: 'calculator', args: { expression: '2*3' } } }] } },
      streamMode: ['values'],
    }));
    const values = events.filter((e) => e.event === 'values').at(-1).data;
    const edited = values.messages.filter((m) => m.type === 'tool').at(-1);
    assert.equal(edited.content, '6');
    assert.equal(edited.status, 'success');
  });

  test('a resume that does not fit: wrong count, unknown type; nothing changes', async () => {
    const t = await lg.threads.create();
    await ask(t.thread_id);
    const before = await native(server, `/sessions/${t.thread_id}/history`);
    const resume = (r) => lg.runs.wait(t.thread_id, GRAPH, { command: { resume: r } });
    await rejects(resume({ decisions: [] }), 422);
    await rejects(resume({ decisions: [{ type: 'approve' }, { type: 'approve' }] }), 422);
    await rejects(resume({ decisions: [{ type: 'maybe' }] }), 422);
    await rejects(resume({ decisions: [{ type: 'edit', edited_action: { args: 'x' } }] }), 422);
    await rejects(resume('yes'), 422);
    await rejects(lg.runs.wait(t.thread_id, GRAPH, { command: { goto: 'tools' } }), 422);
    assert.deepEqual(await native(server, `/sessions/${t.thread_id}/history`), before);
    assert.equal((await lg.threads.get(t.thread_id)).status, 'interrupted');
  });

  test('a new message while an approval waits: the call is refused, the agent goes on', async () => {
    const t = await lg.threads.create();
    await ask(t.thread_id);
    const values = await lg.runs.wait(t.thread_id, GRAPH, { input: { messages: [{ type: 'human', content: 'never mind' }] } });
    assert.equal(values.messages.find((m) => m.type === 'tool').status, 'error');
    assert.equal(lastAi(values).content, 'Echo: never mind');
    assert.equal((await lg.threads.get(t.thread_id)).status, 'idle');
  });
});

describe('langgraph: with an auth token', () => {
  const server = new Server({ chunkDelayMs: 2, extra: { auth: { token: 'sekret' } } });

  before(() => server.start());
  after(stopped(server));

  test('the SDK\'s x-api-key is the token; without it, 401', async () => {
    const lg = client(server, { apiKey: 'sekret' });
    const t = await lg.threads.create();
    const values = await lg.runs.wait(t.thread_id, GRAPH, { input: { messages: [{ type: 'human', content: 'hi' }] } });
    assert.equal(lastAi(values).content, 'Echo: hi');
    await assert.rejects(client(server).threads.get(t.thread_id), (e) => e.status === 401);
  });
});

// Threads' metadata and finished runs are the store's records (SPEC 6.2,
// issue 29): the SDK sees them again after the server restarted.
describe('langgraph: records across a restart', () => {
  const server = new Server({ chunkDelayMs: 2 });

  before(() => server.start());
  after(stopped(server));

  test('a thread\'s metadata and a finished run survive a restart', async () => {
    const lg = client(server);
    const t = await lg.threads.create({ metadata: { owner: 'restart' } });
    const run = await lg.runs.create(t.thread_id, GRAPH, {
      input: { messages: [{ type: 'human', content: 'remember this run' }] },
    });
    await lg.runs.join(t.thread_id, run.run_id);
    await server.restart();
    const again = await lg.threads.get(t.thread_id);
    assert.equal(again.metadata.owner, 'restart');
    assert.equal(again.metadata.graph_id, GRAPH);
    const found = await lg.threads.search({ metadata: { owner: 'restart' } });
    assert.deepEqual(found.map((x) => x.thread_id), [t.thread_id]);
    const r = await lg.runs.get(t.thread_id, run.run_id);
    assert.equal(r.run_id, run.run_id);
    assert.equal(r.status, 'success');
    const runs = await lg.runs.list(t.thread_id);
    assert.deepEqual(runs.map((x) => x.run_id), [run.run_id]);
    // A join after the restart gets the thread's values.
    const values = await lg.runs.join(t.thread_id, run.run_id);
    assert.match(lastAi(values).content, /remember this run/);
  });
});
