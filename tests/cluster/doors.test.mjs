// One approval, every door (SPEC 4.3, issue 32): a call waiting for a person
// is one record in the session's log. A test makes one through each door (the
// session API the web UI uses, /v1, LangGraph, AG-UI, A2A) and answers it
// through every other door, each with the door's own real client from npm;
// then every door must show it answered. Three settings: one node on SQLite;
// two nodes on one PostgreSQL (made on the first, answered on the second); and
// across a restart (made, the node stopped and started, answered).
//
// /v1 has no way to answer but the one SPEC 3.6 gives every client: the next
// user message refuses what waits. Its answer is therefore a refusal, and it
// shows a waiting call only in the answer that made it (its text names the
// session and where to answer: checked when it creates one).
//
// The table each setting produced is printed (`doors:` lines) for the note.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Client } from '@langchain/langgraph-sdk';
import OpenAI from 'openai';
import { HttpAgent } from '@ag-ui/client';
import { SendMessageRequest } from '@a2a-js/sdk';
import { AgentCardResolver, ClientFactory, ClientFactoryOptions, JsonRpcTransportFactory } from '@a2a-js/sdk/client';
import { API, Cluster, Node, PgTmp, request, sleep, tempDir } from './harness.mjs';
import fs from 'node:fs';
import path from 'node:path';

const LG = '/api/langgraph';
const QUESTION = 'what is 6*7?';
const CONFIG = {
  brain: { provider: 'builtin', builtin: { chunk_delay_ms: 1 } },
  tools: [{ name: 'calculator', approval: 'ask' }],
};

/* ---- what every door shares ---------------------------------------------- */

async function native(base, p) {
  const r = await request('GET', base + API + p);
  assert.equal(r.status, 200, `GET ${p}: ${r.text}`);
  return r.json;
}

/* The session's last tool call, as the log has it. */
async function lastCall(base, sid) {
  return (await native(base, `/sessions/${sid}`)).toolCallRecords.at(-1);
}

/* Poll until `ok(x)` for x = await get(). */
async function until(get, ok, what, ms = 15000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const x = await get();
    if (ok(x)) return x;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(x).slice(0, 600)}`);
    await sleep(25);
  }
}

/* "pending", "approved", "rejected" or "resolved", from an approval. */
function word(call) {
  if (!call) return 'none';
  if (call.approval === 'pending' || call.approval === 'in-doubt') return 'pending';
  return call.approval;
}

/* What a tool message's text says of its call (the protocols show no approval field). */
const RESOLVED = 'done by hand';
function said(content) {
  if (content === '42') return 'approved';
  if (content === RESOLVED) return 'resolved';
  if (/rejected|not approved|not run again/.test(content)) return 'rejected';
  return content;
}

/* ---- the doors ------------------------------------------------------------ */
// Each: create(base) -> {sid, ...} with one call waiting; view(base, made) ->
// what the door shows ("pending" | "approved" | "rejected" | null: the door
// cannot show it); answer(base, made) -> the decision it gave.

const sessionApi = {
  name: 'session API',
  async create(base) {
    const r = await request('POST', `${base}${API}/sessions`, '');
    assert.equal(r.status, 201, r.text);
    const sid = r.json.id;
    const p = await request('POST', `${base}${API}/sessions/${sid}/moorex`,
      { type: 'user-send-message', content: QUESTION });
    assert.equal(p.status, 200, p.text);
    return { sid };
  },
  async view(base, made) {
    return word(await lastCall(base, made.sid));
  },
  async answer(base, made) {
    const call = await lastCall(base, made.sid);
    const r = await request('POST', `${base}${API}/sessions/${made.sid}/moorex`,
      { type: 'user-review-tool-call', toolCallId: call.id, decision: 'approve' });
    assert.equal(r.status, 200, r.text);
    return 'approved';
  },
  async settle(base, made) {
    const call = await lastCall(base, made.sid);
    assert.equal(call.approval, 'in-doubt');
    const r = await request('POST', `${base}${API}/sessions/${made.sid}/moorex`,
      { type: 'user-review-tool-call', toolCallId: call.id, decision: 'resolve', result: RESOLVED });
    assert.equal(r.status, 200, r.text);
    return 'resolved';
  },
};

function openai(base) {
  return new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0 });
}

const v1 = {
  name: '/v1',
  async create(base) {
    const { data, response } = await openai(base).chat.completions
      .create({ model: 'reflexor', messages: [{ role: 'user', content: QUESTION }] })
      .withResponse();
    const sid = response.headers.get('x-reflexor-session');
    const text = data.choices[0].message.content;
    // What waits, and where to answer it: the session through every door.
    assert.match(text, /The call to 'calculator' with \{"expression": ?"6\*7"\} waits for approval/);
    for (const door of [`session ${sid}`, `LangGraph thread ${sid}`, `AG-UI thread ${sid}`, `A2A context ${sid}`])
      assert.ok(text.includes(door), `the /v1 text names ${door}: ${text}`);
    return { sid };
  },
  async view() {
    return null; // shown only in the answer that made it
  },
  async answer(base, made) {
    // SPEC 3.6: the next user message refuses every call still waiting.
    const { response } = await openai(base).chat.completions
      .create({ model: 'reflexor', messages: [{ role: 'user', content: 'never mind' }] },
        { headers: { 'X-Reflexor-Session': made.sid } })
      .withResponse();
    assert.equal(response.headers.get('x-reflexor-session'), made.sid);
    return 'rejected';
  },
  async settle(base, made) {
    return this.answer(base, made);
  },
};

function langgraph(base) {
  return new Client({ apiUrl: base + LG, apiKey: null, callerOptions: { maxRetries: 0 } });
}

const lgDoor = {
  name: 'LangGraph',
  async create(base) {
    const lg = langgraph(base);
    const t = await lg.threads.create();
    const values = await lg.runs.wait(t.thread_id, 'agent', { input: { messages: [{ type: 'human', content: QUESTION }] } });
    assert.ok(values.__interrupt__, 'the run ends at the interrupt');
    return { sid: t.thread_id };
  },
  async view(base, made) {
    const lg = langgraph(base);
    const thread = await lg.threads.get(made.sid);
    if (thread.status === 'interrupted') {
      const [intr] = Object.values(thread.interrupts)[0];
      assert.ok(['calculator', 'ledger'].includes(intr.value.action_requests[0].name));
      return 'pending';
    }
    const state = await lg.threads.getState(made.sid);
    const tool = state.values.messages.filter((m) => m.type === 'tool').at(-1);
    if (!tool) return 'none';
    return said(tool.content);
  },
  async answer(base, made) {
    // Streamed: on two nodes the stream comes from the owner through this node.
    const events = [];
    for await (const e of langgraph(base).runs.stream(made.sid, 'agent', {
      command: { resume: { decisions: [{ type: 'approve' }] } }, streamMode: ['values'],
    })) events.push(e);
    assert.equal(events[0].event, 'metadata');
    const last = events.filter((e) => e.event === 'values').at(-1).data;
    assert.equal(last.__interrupt__, undefined);
    assert.equal(last.messages.filter((m) => m.type === 'tool').at(-1).content, '42');
    return 'approved';
  },
  async settle(base, made) {
    const lg = langgraph(base);
    const [intr] = Object.values((await lg.threads.get(made.sid)).interrupts)[0];
    assert.deepEqual(intr.value.review_configs[0].allowed_decisions, ['retry', 'reject', 'resolve']);
    await lg.runs.wait(made.sid, 'agent', { command: { resume: { decisions: [{ type: 'resolve', result: RESOLVED }] } } });
    return 'resolved';
  },
};

/* An AG-UI run through HttpAgent (its own validation accepts the stream): its events. */
async function aguiRun(base, threadId, params = {}, say = null) {
  const a = new HttpAgent({ url: `${base}/api/ag-ui`, threadId });
  if (say) a.addMessage({ id: crypto.randomUUID(), role: 'user', content: say });
  const events = [];
  await a.runAgent(params, { onEvent: ({ event }) => { events.push(event); } });
  return events;
}

const aguiDoor = {
  name: 'AG-UI',
  async create(base) {
    const sid = `agui-${crypto.randomUUID()}`;
    const events = await aguiRun(base, sid, {}, QUESTION);
    assert.equal(events.at(-1).outcome.type, 'interrupt');
    return { sid };
  },
  async view(base, made) {
    // A run with nothing new joins the thread: the snapshot and the outcome.
    const events = await aguiRun(base, made.sid);
    const fin = events.at(-1);
    assert.equal(fin.type, 'RUN_FINISHED');
    if (fin.outcome.type === 'interrupt') {
      assert.equal(fin.outcome.interrupts[0].metadata.name ?? 'calculator', 'calculator');
      return 'pending';
    }
    const snap = events.find((e) => e.type === 'MESSAGES_SNAPSHOT');
    const tool = snap.messages.filter((m) => m.role === 'tool').at(-1);
    if (!tool) return 'none';
    return said(tool.content);
  },
  async answer(base, made) {
    const join = await aguiRun(base, made.sid);
    const [it] = join.at(-1).outcome.interrupts;
    const events = await aguiRun(base, made.sid,
      { resume: [{ interruptId: it.id, status: 'resolved', payload: { decision: 'approve' } }] });
    assert.equal(events.find((e) => e.type === 'TOOL_CALL_RESULT')?.content, '42');
    assert.equal(events.at(-1).outcome.type, 'success');
    return 'approved';
  },
  async settle(base, made) {
    const join = await aguiRun(base, made.sid);
    const [it] = join.at(-1).outcome.interrupts;
    assert.equal(it.reason, 'tool_call_in_doubt');
    const events = await aguiRun(base, made.sid,
      { resume: [{ interruptId: it.id, status: 'resolved', payload: { decision: 'resolve', result: RESOLVED } }] });
    // The resume carries the result itself: the run's snapshot already holds it.
    const snap = events.find((e) => e.type === 'MESSAGES_SNAPSHOT');
    const shown = events.find((e) => e.type === 'TOOL_CALL_RESULT')?.content ??
      snap?.messages.filter((m) => m.role === 'tool').at(-1)?.content;
    assert.equal(shown, RESOLVED);
    return 'resolved';
  },
};

/* An A2A client built from the node's agent card (A2A 1.0). */
async function a2aClient(base) {
  const card = await AgentCardResolver.default.resolve(base);
  const opts = ClientFactoryOptions.createFrom(ClientFactoryOptions.default, { transports: [new JsonRpcTransportFactory({})] });
  return new ClientFactory(opts).createFromAgentCard(card);
}
const A2A_INPUT_REQUIRED = 6;
const A2A_COMPLETED = 3;
const A2A_CANCELED = 5; // a newer message ended the task: it refused what waited (SPEC 3.6)
const a2aMessage = (parts, { contextId, taskId } = {}) => SendMessageRequest.fromJSON({
  message: { messageId: `m-${crypto.randomUUID()}`, role: 'ROLE_USER', parts, contextId, taskId },
});
const a2aAnswer = (task) => (task.artifacts[0]?.parts ?? [])
  .filter((p) => p.content?.$case === 'text').map((p) => p.content.value).join('');

// A2A shows a call only on a task: the one that made it wait. A decision sent
// to a context (no taskId) answers whatever waits there, made through any door.
const a2aDoor = {
  name: 'A2A',
  async create(base) {
    const task = await (await a2aClient(base)).sendMessage(a2aMessage([{ text: QUESTION }]));
    assert.equal(task.status.state, A2A_INPUT_REQUIRED);
    return { sid: task.contextId, taskId: task.id };
  },
  async view(base, made) {
    if (!made.taskId) return null;
    const task = await (await a2aClient(base)).getTask({ id: made.taskId, tenant: '' });
    if (task.status.state === A2A_INPUT_REQUIRED) return 'pending';
    const text = a2aAnswer(task);
    if (/= 42/.test(text)) return 'approved';
    if (text.includes(RESOLVED)) return 'resolved';
    if (/rejected|not approved|not run again/.test(text) || task.status.state === A2A_CANCELED) return 'rejected';
    return `${task.status.state}: ${text}`;
  },
  async decide(base, made, data) {
    const task = await (await a2aClient(base)).sendMessage(a2aMessage([{ data }], { contextId: made.sid }));
    assert.equal(task.status.state, A2A_COMPLETED, JSON.stringify(task.status));
    return task;
  },
  async answer(base, made) {
    assert.match(a2aAnswer(await this.decide(base, made, { decision: 'approve' })), /6\*7 = 42/);
    return 'approved';
  },
  async settle(base, made) {
    await this.decide(base, made, { decision: 'resolve', result: RESOLVED });
    return 'resolved';
  },
};

export const DOORS = [sessionApi, v1, lgDoor, aguiDoor, a2aDoor];

/* ---- the table -------------------------------------------------------------- */

/*
 * Every pair (maker, answerer) with maker != answerer: made through `makeAt`,
 * then `between()` (a restart, or nothing), answered through `answerAt`, and
 * each door's view read on both. Returns the table's rows.
 */
async function table(doors, makeAt, answerAt, between = async () => {}) {
  const cells = [];
  for (const maker of doors) {
    for (const answerer of doors) {
      if (maker === answerer) continue;
      const made = await maker.create(makeAt());
      await until(() => lastCall(makeAt(), made.sid), (c) => word(c) === 'pending', `${maker.name}: a call waiting`);
      cells.push({ maker, answerer, made });
    }
  }
  // Every door shows every one of them waiting.
  for (const c of cells) {
    for (const d of doors) {
      const v = await d.view(makeAt(), c.made);
      assert.ok(v === null || v === 'pending', `${d.name} shows the call made through ${c.maker.name} as ${v}`);
    }
  }
  await between();
  for (const c of cells) {
    c.decision = await c.answerer.answer(answerAt(), c.made);
    await until(() => lastCall(answerAt(), c.made.sid), (x) => word(x) === c.decision && x.result,
      `${c.maker.name} -> ${c.answerer.name}: ${c.decision} and a result`);
  }
  // ... and every door shows every one answered, on every node.
  for (const c of cells) {
    c.views = {};
    for (const base of new Set([makeAt(), answerAt()])) {
      for (const d of doors) {
        const v = await until(() => d.view(base, c.made), (x) => x === null || x === c.decision,
          `${d.name} to show ${c.maker.name} -> ${c.answerer.name} ${c.decision}`);
        c.views[d.name] = v;
      }
    }
  }
  return cells;
}

function print(title, doors, cells) {
  const lines = [`doors: ${title} (row: made through; column: answered through)`];
  lines.push(`doors: ${''.padEnd(12)} | ${doors.map((d) => d.name.padEnd(11)).join(' | ')}`);
  for (const m of doors) {
    const row = doors.map((a) => {
      if (a === m) return '—'.padEnd(11);
      const c = cells.find((x) => x.maker === m && x.answerer === a);
      return (c ? `${c.decision} ok` : '?').padEnd(11);
    });
    lines.push(`doors: ${m.name.padEnd(12)} | ${row.join(' | ')}`);
  }
  console.log(lines.join('\n'));
}

/* ---- the three settings ------------------------------------------------------- */

describe('one approval, every door', () => {
  let pg;
  before(async () => { pg = await PgTmp.start(); });
  after(() => pg?.stop());

  test('one node (SQLite): each door made, every other answered, all show it', async () => {
    const dir = tempDir('doors');
    const node = new Node({ index: 0, dbUrl: path.join(dir, 'reflexor.db'), config: CONFIG });
    let failed = true;
    try {
      await node.start();
      const cells = await table(DOORS, () => node.url, () => node.url);
      print('one node', DOORS, cells);
      failed = false;
    } finally {
      await node.stop();
      if (!failed) node.cleanup();
    }
  });

  test('across a restart: made, the node restarted, answered', async () => {
    const dir = tempDir('doors');
    const node = new Node({ index: 0, dbUrl: path.join(dir, 'reflexor.db'), config: CONFIG });
    let failed = true;
    try {
      await node.start();
      const cells = await table(DOORS, () => node.url, () => node.url, async () => {
        await node.stop();
        await node.start();
      });
      print('across a restart', DOORS, cells);
      failed = false;
    } finally {
      await node.stop();
      if (!failed) node.cleanup();
    }
  });

  test('calls in doubt after kill -9 (SPEC 3.7): each answered through another door, all show it', async () => {
    const dir = tempDir('doubt');
    const script = path.join(dir, 'ledger.sh');
    fs.writeFileSync(script, '#!/bin/sh\nsleep 5\necho ok\n', { mode: 0o755 });
    const tools = [...CONFIG.tools, { name: 'ledger', description: 'appends to a ledger', command: ['/bin/sh', script], timeout_ms: 20000 }];
    const node = new Node({ index: 0, dbUrl: path.join(dir, 'reflexor.db'), config: { ...CONFIG, tools } });
    let failed = true;
    try {
      await node.start();
      const made = [];
      for (const d of DOORS) {
        const { sid } = await sessionApi.create(node.url); // a calculator call waits...
        await until(() => lastCall(node.url, sid), (c) => word(c) === 'pending', 'the calculator waiting');
        await sessionApi.answer(node.url, { sid }); // ...and is approved; then the ledger starts
        await until(() => lastCall(node.url, sid), (c) => c.result, 'the calculator answered');
        const r = await request('POST', `${node.url}${API}/sessions/${sid}/moorex`, { type: 'user-send-message', content: '/call ledger {}' });
        assert.equal(r.status, 200, r.text);
        made.push({ door: d, sid });
      }
      for (const m of made) {
        await until(() => lastCall(node.url, m.sid), (c) => c.name === 'ledger' && c.startedAt, 'the ledger started');
      }
      await node.kill9();
      await node.start();
      for (const m of made) {
        await until(() => lastCall(node.url, m.sid), (c) => c.approval === 'in-doubt', 'the ledger in doubt');
        for (const d of DOORS) {
          const v = await d.view(node.url, m);
          assert.ok(v === null || v === 'pending', `${d.name} shows the call in doubt as ${v}`);
        }
      }
      const lines = ['doors: calls in doubt after kill -9, answered through'];
      for (const m of made) {
        m.decision = await m.door.settle(node.url, m);
        await until(() => lastCall(node.url, m.sid), (x) => word(x) === m.decision && x.result, `${m.door.name}: ${m.decision}`);
        for (const d of DOORS) {
          await until(() => d.view(node.url, m), (x) => x === null || x === m.decision, `${d.name} to show ${m.decision}`);
        }
        lines.push(`doors:   ${m.door.name.padEnd(12)} ${m.decision}, shown so by every door`);
      }
      console.log(lines.join('\n'));
      failed = false;
    } finally {
      await node.stop();
      if (!failed) node.cleanup();
    }
  });

  test('two nodes on PostgreSQL: made on one, answered on the other', async () => {
    const cluster = new Cluster(pg, { nodes: 2, nginx: false, config: { tools: CONFIG.tools } });
    let failed = true;
    try {
      await cluster.start();
      const [a, b] = cluster.nodes;
      const cells = await table(DOORS, () => a.url, () => b.url);
      print('two nodes', DOORS, cells);
      failed = false;
    } finally {
      const problems = await cluster.finish(failed);
      assert.deepEqual(problems, []);
    }
  });
});
