// The web UI as one of the doors of one approval (SPEC 4.3, issue 32): a call
// made to wait through another protocol's real client shows its card in the
// page, and the page's Approve answers it there too; a call made to wait in
// the page and answered through another protocol leaves the page's card
// answered, live, without a reload. tests/cluster/doors.test.mjs does every
// other pair of doors.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { HttpAgent } from '@ag-ui/client';
import { Client } from '@langchain/langgraph-sdk';
import { SendMessageRequest } from '@a2a-js/sdk';
import { AgentCardResolver, ClientFactory, ClientFactoryOptions, JsonRpcTransportFactory } from '@a2a-js/sdk/client';
import { Server, launch, ui } from './helpers.mjs';

const T = { timeout: 60000 };

describe('one approval, the web UI and the other doors', () => {
  let server;
  let browser;
  let page;
  let lg;

  before(async () => {
    server = new Server({ chunkDelayMs: 5, extra: { tools: [{ name: 'calculator', approval: 'ask' }] } });
    await server.start();
    lg = new Client({ apiUrl: `${server.url}/api/langgraph`, apiKey: null, callerOptions: { maxRetries: 0 } });
    browser = await launch({ viewport: { width: 1280, height: 800 }, colorScheme: 'light' });
    page = browser.context.pages()[0] || (await browser.context.newPage());
  });

  after(async () => {
    await browser?.close();
    await server?.stop();
    server?.cleanup();
  });

  const card = () => page.locator('.approval[data-name="calculator"]');

  async function open(sid) {
    await page.goto(`${server.url}/#/${encodeURIComponent(sid)}`);
    await ui.waitOnline(page);
  }

  async function answerShows(re) {
    await page.waitForFunction((src) => [...document.querySelectorAll('article.msg.assistant[data-status="complete"] .md')]
      .some((m) => new RegExp(src).test(m.textContent)), re.source, { timeout: 20000 });
  }

  test('made through LangGraph, approved in the page: the thread goes on to the answer', T, async () => {
    const t = await lg.threads.create();
    const values = await lg.runs.wait(t.thread_id, 'agent', { input: { messages: [{ type: 'human', content: 'what is 6*7?' }] } });
    assert.ok(values.__interrupt__, 'the LangGraph run waits at the interrupt');
    await open(t.thread_id);
    const c = card();
    await c.waitFor({ timeout: 20000 });
    assert.equal(await c.locator('.tool-name').innerText(), 'calculator');
    await c.getByRole('button', { name: 'Approve', exact: true }).click();
    await answerShows(/6\*7 = 42/);
    const thread = await lg.threads.get(t.thread_id);
    assert.equal(thread.status, 'idle');
    const state = await lg.threads.getState(t.thread_id);
    assert.equal(state.values.messages.filter((m) => m.type === 'tool').at(-1).content, '42');
  });

  test('made through AG-UI (HttpAgent), approved in the page: a join sees the run finished', T, async () => {
    const tid = `agui-${crypto.randomUUID()}`;
    const a = new HttpAgent({ url: `${server.url}/api/ag-ui`, threadId: tid });
    a.addMessage({ id: crypto.randomUUID(), role: 'user', content: 'what is 6*7?' });
    const events = [];
    await a.runAgent({}, { onEvent: ({ event }) => { events.push(event); } });
    assert.equal(events.at(-1).outcome.type, 'interrupt');
    await open(tid);
    const c = card();
    await c.waitFor({ timeout: 20000 });
    await c.getByRole('button', { name: 'Approve', exact: true }).click();
    await answerShows(/6\*7 = 42/);
    const join = [];
    await new HttpAgent({ url: `${server.url}/api/ag-ui`, threadId: tid })
      .runAgent({}, { onEvent: ({ event }) => { join.push(event); } });
    assert.equal(join.at(-1).outcome.type, 'success');
    const snap = join.find((e) => e.type === 'MESSAGES_SNAPSHOT');
    assert.equal(snap.messages.filter((m) => m.role === 'tool').at(-1).content, '42');
  });

  async function a2a() {
    const card = await AgentCardResolver.default.resolve(server.url);
    const opts = ClientFactoryOptions.createFrom(ClientFactoryOptions.default, { transports: [new JsonRpcTransportFactory({})] });
    return new ClientFactory(opts).createFromAgentCard(card);
  }
  const msg = (parts, contextId) => SendMessageRequest.fromJSON({
    message: { messageId: crypto.randomUUID(), role: 'ROLE_USER', parts, contextId },
  });

  test('made through A2A (input-required), approved in the page: the task completes', T, async () => {
    const client = await a2a();
    const task = await client.sendMessage(msg([{ text: 'what is 6*7?' }]));
    assert.equal(task.status.state, 6, 'input-required');
    await open(task.contextId);
    const c = card();
    await c.waitFor({ timeout: 20000 });
    await c.getByRole('button', { name: 'Approve', exact: true }).click();
    await answerShows(/6\*7 = 42/);
    const done = await client.getTask({ id: task.id, tenant: '' });
    assert.equal(done.status.state, 3, 'completed');
    assert.equal(done.artifacts[0].parts[0].content.value, '6*7 = 42');
  });

  test('made in the page, answered through A2A (a decision on its context): the card is answered live', T, async () => {
    const r = await server.api('POST', '/sessions', '');
    const sid = r.body.id;
    await open(sid);
    await ui.send(page, 'what is 6*7?');
    await card().waitFor({ timeout: 20000 });
    const task = await (await a2a()).sendMessage(msg([{ data: { decision: 'approve' } }], sid));
    assert.equal(task.status.state, 3);
    await answerShows(/6\*7 = 42/);
    await page.waitForFunction(() => !document.querySelector('.approval[data-name="calculator"] [data-act="approve"]'),
      null, { timeout: 10000 });
  });

  test('made in the page, answered through LangGraph: the page\'s card is answered live', T, async () => {
    const r = await server.api('POST', '/sessions', '');
    const sid = r.body.id;
    await open(sid);
    await ui.send(page, 'what is 6*7?');
    await card().waitFor({ timeout: 20000 });
    // Answered elsewhere: the page follows the log, no reload.
    await lg.runs.wait(sid, 'agent', { command: { resume: { decisions: [{ type: 'approve' }] } } });
    await answerShows(/6\*7 = 42/);
    await page.waitForFunction(() => !document.querySelector('.approval[data-name="calculator"] [data-act="approve"]'),
      null, { timeout: 10000 });
  });
});
