// Effects that survive a crash (SPEC §3.7, issue 31), in a real browser:
//  - a slow command tool that is not safe to repeat (a ledger that appends a
//    line per run), the server killed with SIGKILL after the call started:
//    after the restart the page shows the in-doubt card, and Resolve (the
//    person's text becomes the result) or Retry (it runs again, once) answer it;
//  - a slow builtin answer killed mid-stream: after the restart the page shows
//    the answer continuing, and its final text is the uninterrupted one;
//  - an openai answer (the fake, brain.openai.continue false) killed
//    mid-stream: it starts again after the kept text, marked "restarted
//    after an interruption";
//  - the card's controls (Resolve needs a text, keyboard order, the banner,
//    both kinds waiting) and the mark in light, dark and on a phone, on a
//    state the test sets in the page.
// Screenshots: build/screenshots/crash-*.png
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { API, BIN, SHOTS, Server, launch, sleep, tempDir, ui } from './helpers.mjs';

const T = { timeout: 90000 };
const PHONE = { width: 375, height: 812 };
const DESKTOP = { width: 1280, height: 800 };
const INTERRUPTED = 'not run again after an interruption';

/* A ledger tool: sleeps, then appends one line per run; not idempotent. */
function ledgerTool(dir) {
  const ledger = path.join(dir, 'ledger.txt');
  const script = path.join(dir, 'ledger.sh');
  fs.writeFileSync(script, `#!/bin/sh\nsleep 3\necho "ran $REFLEXOR_IDEMPOTENCY_KEY" >> '${ledger}'\necho ok\n`, { mode: 0o755 });
  return {
    ledger,
    tool: { name: 'ledger', description: 'appends a line to the ledger', command: ['/bin/sh', script], timeout_ms: 10000 },
  };
}
const ledgerLines = (file) => (fs.existsSync(file) ? fs.readFileSync(file, 'utf8').split('\n').filter(Boolean) : []);

async function openPage(browser, server) {
  const page = browser.context.pages()[0] || (await browser.context.newPage());
  await page.goto(`${server.url}/`);
  await ui.waitOnline(page);
  return page;
}

async function sessionState(server, sid) {
  const r = await server.api('GET', `/sessions/${encodeURIComponent(sid)}`);
  assert.equal(r.status, 200);
  return r.body;
}

/* Poll the server's state until `pred` holds; returns that state. */
async function waitState(server, sid, pred, what, timeout = 15000) {
  const deadline = Date.now() + timeout;
  let s;
  for (;;) {
    try { s = await sessionState(server, sid); } catch { s = null; }
    if (s && pred(s)) return s;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(s)?.slice(0, 2000)}`);
    await sleep(50);
  }
}

/* The session's tool call of that name. */
const callOf = (s, name) => (s.toolCallRecords || []).find((c) => c.name === name);

/* The content of the first `snapshot` frame of an answer's /messages stream. */
async function firstSnapshot(server, sid, mid) {
  const ctrl = new AbortController();
  const t = setTimeout(() => ctrl.abort(), 10000);
  try {
    const r = await fetch(`${server.url}${API}/sessions/${encodeURIComponent(sid)}/messages/${encodeURIComponent(mid)}`, {
      headers: { Accept: 'text/event-stream' }, signal: ctrl.signal,
    });
    assert.equal(r.status, 200);
    const dec = new TextDecoder();
    let buf = '';
    for await (const part of r.body) {
      buf += dec.decode(part, { stream: true });
      for (const block of buf.split('\n\n').slice(0, -1)) {
        const data = block.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trimStart()).join('\n');
        if (!data) continue;
        const f = JSON.parse(data);
        if (f.type === 'snapshot' || f.type === 'complete') return f.content || '';
      }
    }
    throw new Error('no snapshot');
  } finally {
    clearTimeout(t);
    ctrl.abort();
  }
}

async function shoot(page, name) {
  fs.mkdirSync(SHOTS, { recursive: true });
  await page.mouse.move(0, 0);
  await sleep(250);
  await page.screenshot({ path: path.join(SHOTS, `crash-${name}.png`) });
}

describe('a tool call cut off by kill -9 (SPEC 3.7)', () => {
  let server;
  let browser;
  let page;
  let ledger;

  before(async () => {
    const dir = tempDir('ledger');
    const lt = ledgerTool(dir);
    ledger = lt.ledger;
    server = new Server({ chunkDelayMs: 10, extra: { tools: [lt.tool] } });
    await server.start();
    browser = await launch({ viewport: DESKTOP, colorScheme: 'light' });
    page = await openPage(browser, server);
  });

  after(async () => {
    await browser?.close();
    await server?.stop();
    server?.cleanup();
  });

  async function newChat() {
    await page.getByRole('button', { name: 'New chat', exact: true }).click();
    await page.waitForFunction(() => !document.getElementById('welcome').hidden);
    await ui.waitOnline(page);
  }

  /* /call ledger, kill -9 once it started, restart on the same db, reload:
   * the card of the call in doubt. Returns {sid, rec, card}. */
  async function interruptLedger() {
    await newChat();
    const before = ledgerLines(ledger).length;
    await ui.send(page, '/call ledger {}');
    await page.waitForFunction(() => /^#\/.+/.test(location.hash));
    const sid = await ui.sessionId(page);
    const started = await waitState(server, sid, (s) => callOf(s, 'ledger')?.startedAt, 'the ledger call to start');
    const rec = callOf(started, 'ledger');
    assert.equal(rec.result, null);
    await server.stop('SIGKILL');
    assert.equal(server.exit.signal, 'SIGKILL');
    await sleep(3500); // longer than the tool takes: it did not run on without the server
    assert.equal(ledgerLines(ledger).length, before, 'the tool died with its server (no line)');
    await server.start();
    await page.reload();
    await ui.waitOnline(page, 20000);
    const card = page.locator(`.approval.in-doubt[data-id="${rec.id}"]`);
    await card.waitFor({ timeout: 15000 });
    const st = await sessionState(server, sid);
    const now = callOf(st, 'ledger');
    assert.deepEqual([now.approval, now.result, now.startedAt], ['in-doubt', null, rec.startedAt]);
    await sleep(500);
    assert.equal(ledgerLines(ledger).length, before, 'not run again by itself');
    return { sid, rec, card, before };
  }

  test('after kill -9 the call shows as in doubt; Resolve makes the person\'s text its result', T, async () => {
    const { sid, rec, card, before } = await interruptLedger();
    assert.equal(await card.locator('.tool-name').innerText(), 'ledger');
    assert.match(await card.locator('.approval-what').innerText(), /may or may not have acted/);
    assert.equal(await card.getByLabel('Arguments').getAttribute('readonly'), '');
    assert.match(await card.locator('.doubt-key').innerText(), new RegExp(`${sid}/${rec.id}`.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')));
    const banner = page.locator('#approval-banner');
    assert.match(await banner.innerText(), /Interrupted, may have acted: ledger/);
    assert.equal(await page.locator('[data-kind="thinking"]').count(), 0, 'the agent waits, it does not think');
    await shoot(page, 'indoubt-real');

    await banner.getByRole('button', { name: 'Review' }).click();
    await page.waitForFunction(() => document.activeElement?.dataset.act === 'retry');
    await card.getByRole('button', { name: /^Resolve:/ }).click();
    const text = card.getByLabel(/What happened/);
    await text.fill('the ledger has no line: it did not run');
    await shoot(page, 'indoubt-resolving');
    await text.press('Control+Enter');
    const done = page.locator(`details.tool[data-id="${rec.id}"][data-approval="resolved"][data-state="success"]`);
    await done.waitFor({ timeout: 15000 });
    assert.match(await done.locator('summary').innerText(), /the ledger has no line[\s\S]*Resolved by you[\s\S]*Done/);
    await banner.waitFor({ state: 'hidden' });
    const st = await waitState(server, sid, (s) => s.assistantMessages.some((m) => m.status === 'complete'), 'the answer after resolve');
    const r = callOf(st, 'ledger');
    assert.deepEqual([r.approval, r.result.isSuccess, r.result.content],
      ['resolved', true, 'the ledger has no line: it did not run']);
    assert.equal(ledgerLines(ledger).length, before, 'a resolve never runs the tool');
    await page.locator('article.msg.assistant[data-status="complete"]').last().waitFor();
    await shoot(page, 'indoubt-resolved');
  });

  test('Retry runs the call again, once, with the same idempotency key', T, async () => {
    const { sid, rec, card, before } = await interruptLedger();
    await card.getByRole('button', { name: 'Retry' }).click();
    const done = page.locator(`details.tool[data-id="${rec.id}"][data-state="success"]`);
    await done.waitFor({ timeout: 20000 });
    const st = await waitState(server, sid, (s) => callOf(s, 'ledger')?.result, 'the retried result');
    const r = callOf(st, 'ledger');
    assert.equal(r.approval, 'approved');
    assert.equal(r.result.content.trim(), 'ok');
    const lines = ledgerLines(ledger);
    assert.deepEqual(lines.slice(before), [`ran ${sid}/${rec.id}`], 'one run, with the key');
    await page.locator('#approval-banner').waitFor({ state: 'hidden' });
  });

  test('Reject: the call is answered "not run again after an interruption"', T, async () => {
    const { sid, rec, card, before } = await interruptLedger();
    // Dark mode and a phone while it waits, for the screenshots.
    await page.emulateMedia({ colorScheme: 'dark' });
    await page.setViewportSize(PHONE);
    await card.scrollIntoViewIfNeeded();
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 0, `no sideways scrolling at 375 px (${overflow}px)`);
    await shoot(page, 'indoubt-real-dark-phone');
    await page.emulateMedia({ colorScheme: 'light' });
    await page.setViewportSize(DESKTOP);
    await card.getByRole('button', { name: 'Reject' }).click();
    const done = page.locator(`details.tool[data-id="${rec.id}"][data-approval="rejected"][data-state="error"]`);
    await done.waitFor({ timeout: 15000 });
    assert.match(await done.locator('summary').innerText(), /not run again after an interruption[\s\S]*Not run again/);
    const r = callOf(await sessionState(server, sid), 'ledger');
    assert.deepEqual([r.approval, r.result.isSuccess, r.result.error], ['rejected', false, INTERRUPTED]);
    assert.equal(ledgerLines(ledger).length, before);
    assert.deepEqual(browser.errors, []);
    assert.deepEqual(browser.offsite, []);
  });
});

describe('an answer cut off by kill -9 continues (SPEC 3.7)', () => {
  const LONG = 'Every byte a person was shown stays shown, and the answer goes on from there. '.repeat(5).trim();
  let server;
  let browser;
  let page;

  before(async () => {
    server = new Server({ chunkDelayMs: 80 });
    await server.start();
    browser = await launch({ viewport: DESKTOP, colorScheme: 'light' });
    page = await openPage(browser, server);
  });

  after(async () => {
    await browser?.close();
    await server?.stop();
    server?.cleanup();
  });

  /* The text the page shows for the last answer (the markdown's source). */
  const shown = () => page.evaluate(() => [...document.querySelectorAll('article.msg.assistant .md')].at(-1)?._text || '');

  test('killed mid-answer and restarted: the page shows it continuing to the uninterrupted text', T, async () => {
    // The uninterrupted answer, for the comparison (fast, on its own server).
    const ref = new Server({ chunkDelayMs: 1 });
    let expected;
    try {
      await ref.start();
      const c = await ref.api('POST', '/sessions', {});
      const rsid = c.body.id;
      await ref.api('POST', `/sessions/${encodeURIComponent(rsid)}/moorex`, { type: 'user-send-message', content: LONG });
      const done = await waitState(ref, rsid, (s) => s.assistantMessages.some((m) => m.status === 'complete'), 'the reference answer', 30000);
      expected = done.assistantMessages.at(-1).content;
    } finally {
      await ref.stop();
      ref.cleanup();
    }
    assert.ok(expected.length > 300, `a long answer (${expected.length} bytes)`);

    await ui.send(page, LONG);
    await page.waitForFunction(() => /^#\/.+/.test(location.hash));
    const sid = await ui.sessionId(page);
    await page.waitForFunction(() => ([...document.querySelectorAll('article.msg.assistant[data-status="streaming"] .md')].at(-1)?._text?.length || 0) > 80,
      null, { timeout: 20000 });
    await sleep(600); // past a durable batch (at most 250 ms)
    await server.stop('SIGKILL');
    const before = await shown();
    assert.ok(before.length > 80 && before.length < expected.length, `cut mid-answer (${before.length} of ${expected.length})`);
    assert.ok(expected.startsWith(before), 'what the page showed is a prefix of the answer');
    await shoot(page, 'answer-cut');
    // The page (still open, reconnecting) never shows less than it showed.
    let shrank = '';
    let last = before;
    const watch = setInterval(async () => {
      try {
        const now = await shown();
        if (!shrank && !now.startsWith(before.slice(0, Math.min(before.length, now.length)))) shrank = `changed: ${now.slice(0, 80)}`;
        if (!shrank && now.length < before.length) shrank = `${now.length} < ${before.length}`;
        last = now;
      } catch { /* navigating */ }
    }, 30);
    try {
      await server.start();
      // A late subscriber right after the restart gets the kept text: all
      // that was durable (at most one batch, 250 ms, short of what showed).
      const mid = (await sessionState(server, sid)).assistantMessages.at(-1).id;
      const snap = await firstSnapshot(server, sid, mid);
      assert.ok(expected.startsWith(snap), 'the kept text is the answer\'s beginning');
      assert.ok(snap.length >= before.length - 40, `the kept text (${snap.length}) is what showed (${before.length}), less one batch`);
      await ui.waitOnline(page, 20000);
      await page.waitForFunction((n) => ([...document.querySelectorAll('article.msg.assistant .md')].at(-1)?._text?.length || 0) > n + 8,
        before.length, { timeout: 20000 });
      await shoot(page, 'answer-continuing');
      await page.waitForFunction(() => [...document.querySelectorAll('article.msg.assistant')].at(-1)?.dataset.status === 'complete',
        null, { timeout: 40000 });
    } finally {
      clearInterval(watch);
    }
    assert.equal(shrank, '', `the text on the page never went backwards (last: ${last.length})`);
    const st = await waitState(server, sid, (s) => s.assistantMessages.at(-1)?.status === 'complete', 'the answer to complete');
    assert.equal(st.assistantMessages.length, 1, 'one answer, continued, not a second one');
    assert.equal(st.assistantMessages[0].content, expected, 'byte for byte the uninterrupted answer');
    assert.notEqual(st.assistantMessages[0].restarted, true, 'a continued answer is not marked restarted');
    assert.equal(await ui.lastAssistant(page).getAttribute('data-restarted'), 'false');
    assert.equal(await shown(), expected);
    await shoot(page, 'answer-continued');
    // A fresh page (a late subscriber) shows the same text.
    await page.reload();
    await ui.waitOnline(page);
    await page.waitForFunction((e) => [...document.querySelectorAll('article.msg.assistant .md')].at(-1)?._text === e, expected);
    assert.deepEqual(browser.errors, []);
  });
});

/* The fake OpenAI-compatible server (tests/fakes/fake_openai.c). */
async function startFake() {
  const bin = process.env.FAKE_OPENAI || path.join(path.dirname(BIN), 'tests/fake_openai');
  if (!fs.existsSync(bin)) throw new Error(`${bin} is missing: run make first`);
  const proc = spawn(bin, ['--exit-on-eof'], { stdio: ['pipe', 'pipe', 'inherit'] });
  const port = await new Promise((resolve, reject) => {
    let out = '';
    proc.stdout.on('data', (d) => {
      out += d;
      const m = /port (\d+)/.exec(out);
      if (m) resolve(Number(m[1]));
    });
    proc.once('exit', (c) => reject(new Error(`fake_openai exited (${c})`)));
  });
  return {
    url: `http://127.0.0.1:${port}`,
    stop() {
      try { proc.stdin.end(); } catch { /* gone */ }
      try { proc.kill('SIGKILL'); } catch { /* gone */ }
    },
  };
}

describe('an openai answer that cannot continue is marked restarted (SPEC 3.7)', () => {
  let fake;
  let server;
  let browser;
  let page;

  before(async () => {
    fake = await startFake();
    server = new Server({
      extra: {
        brain: {
          provider: 'openai',
          openai: { base_url: `${fake.url}/v1`, model: 'slow', api_key: '', retries: 0, backoff_ms: 0, continue: false },
        },
      },
    });
    await server.start();
    browser = await launch({ viewport: DESKTOP, colorScheme: 'light' });
    page = await openPage(browser, server);
  });

  after(async () => {
    await browser?.close();
    await server?.stop();
    server?.cleanup();
    fake?.stop();
  });

  test('killed mid-answer: the kept text stays, the answer starts again, with the mark', T, async () => {
    await ui.send(page, 'tick, please');
    await page.waitForFunction(() => /^#\/.+/.test(location.hash));
    const sid = await ui.sessionId(page);
    await page.waitForFunction(() => ([...document.querySelectorAll('article.msg.assistant[data-status="streaming"] .md')].at(-1)?._text?.length || 0) > 60,
      null, { timeout: 20000 });
    await sleep(600);
    await server.stop('SIGKILL');
    const shownBefore = await page.evaluate(() => [...document.querySelectorAll('article.msg.assistant .md')].at(-1)._text);
    await server.start();
    await ui.waitOnline(page, 20000);
    const st = await waitState(server, sid, (s) => s.assistantMessages.at(-1)?.status === 'complete', 'the restarted answer', 40000);
    const m = st.assistantMessages.at(-1);
    assert.equal(st.assistantMessages.length, 1, 'the same message, not a second one');
    assert.equal(m.restarted, true, 'the message says it was restarted');
    assert.ok(m.content.length > shownBefore.length - 40, 'the kept text stays');
    const art = page.locator(`article.msg.assistant[data-id="${m.id}"]`);
    await art.locator('.badge.restarted', { hasText: 'Restarted after an interruption' }).waitFor({ timeout: 10000 });
    assert.equal(await art.getAttribute('data-restarted'), 'true');
    await art.scrollIntoViewIfNeeded();
    await shoot(page, 'restarted-real');
    await page.reload();
    await ui.waitOnline(page);
    await page.locator(`article.msg.assistant[data-id="${m.id}"][data-restarted="true"] .badge.restarted`).waitFor();
    assert.deepEqual(browser.errors, []);
  });
});

describe('the in-doubt card and the restarted mark on a set state', () => {
  let server;
  let browser;
  let page;
  let sid;
  const posted = [];

  before(async () => {
    server = new Server({ chunkDelayMs: 5, extra: { tools: [{ name: 'ledger', description: 'appends a line to the ledger', command: ['/bin/true'] }] } });
    await server.start();
    browser = await launch({ viewport: DESKTOP, colorScheme: 'light' });
    page = await openPage(browser, server);
    await ui.send(page, 'hello there');
    await page.locator('article.msg.assistant[data-status="complete"]').waitFor({ timeout: 20000 });
    sid = await ui.sessionId(page);
    // Reviews go nowhere: the test plays the server's part.
    await page.route(/\/moorex$/, (route) => {
      const body = route.request().postData() || '';
      if (route.request().method() === 'POST' && /user-review-tool-call/.test(body)) {
        posted.push(JSON.parse(body));
        return route.fulfill({ status: 200, contentType: 'application/json', body: '{"status":"accepted"}' });
      }
      return route.continue();
    });
  });

  after(async () => {
    await browser?.close();
    await server?.stop();
    server?.cleanup();
  });

  /* Change the page's state as a state-updated would. */
  async function setState(fn) {
    await page.evaluate(async (src) => {
      const { ui: u, scheduleRender } = await import('/js/state.js');
      // eslint-disable-next-line no-new-func
      u.state = new Function('s', `return (${src})(s)`)(structuredClone(u.state));
      scheduleRender();
    }, fn.toString());
    await sleep(100);
  }

  const record = (id, approval, extra = {}) => `(s) => {
    const t = s.updatedAt + 1;
    s.toolCallRecords = [...(s.toolCallRecords || []).filter((c) => c.id !== '${id}'), Object.assign({
      id: '${id}', name: 'ledger', parameters: '{"amount":12,"memo":"rent"}', calledAt: t, startedAt: t + 5,
      result: null, isLoaded: true, approval: '${approval}' }, ${JSON.stringify(extra)})];
    s.updatedAt = t + 10;
    return s;
  }`;

  async function set(id, approval, extra) {
    await page.evaluate(async (src) => {
      const { ui: u, scheduleRender } = await import('/js/state.js');
      // eslint-disable-next-line no-new-func
      u.state = new Function(`return ${src}`)()(structuredClone(u.state));
      scheduleRender();
    }, record(id, approval, extra));
    await sleep(100);
  }

  test('the card: what happened, Retry / Resolve / Reject by keyboard, Resolve needs a text', T, async () => {
    // A running call (its plain card) found in doubt: the card is rebuilt.
    await set('doubt1', '');
    await page.locator('details.tool[data-id="doubt1"][data-state="pending"]').waitFor();
    await set('doubt1', 'in-doubt');
    const card = page.locator('.approval.in-doubt[data-id="doubt1"]');
    await card.waitFor();
    assert.match(await card.innerText(), /may or may not have acted/);
    assert.match(await card.locator('.tool-status').innerText(), /Interrupted/);
    assert.equal(await card.getByLabel('Arguments').inputValue(), '{\n  "amount": 12,\n  "memo": "rent"\n}');
    assert.equal(await card.getByLabel('Arguments').getAttribute('readonly'), '');
    assert.match(await card.locator('.doubt-key').innerText(), new RegExp(`${sid}/doubt1`));
    const banner = page.locator('#approval-banner');
    assert.match(await banner.innerText(), /Interrupted, may have acted: ledger/);
    assert.equal(await banner.getAttribute('data-kind'), 'in-doubt');
    assert.equal(await page.locator('[data-kind="thinking"]').count(), 0);

    // Keyboard: Review focuses Retry; Tab walks Retry, Resolve, Reject.
    await banner.getByRole('button', { name: 'Review' }).click();
    await page.waitForFunction(() => document.activeElement?.dataset.act === 'retry');
    const order = ['retry'];
    for (let i = 0; i < 2; i++) {
      await page.keyboard.press('Tab');
      order.push(await page.evaluate(() => document.activeElement?.dataset.act));
    }
    assert.deepEqual(order, ['retry', 'resolve', 'reject']);
    // Resolve opens the text box; empty is refused on the card.
    await page.keyboard.press('Shift+Tab');
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => document.activeElement?.classList.contains('doubt-result'));
    assert.equal(await card.getByRole('button', { name: /^Resolve:/ }).getAttribute('aria-expanded'), 'true');
    await page.keyboard.press('Control+Enter');
    await card.locator('.approval-error', { hasText: 'Say what happened first' }).waitFor();
    assert.equal(await card.getByLabel(/What happened/).getAttribute('aria-invalid'), 'true');
    assert.equal(posted.length, 0, 'nothing sent without a text');
    // Escape closes it and gives the focus back to Resolve.
    await page.keyboard.press('Escape');
    await page.waitForFunction(() => document.activeElement?.dataset.act === 'resolve');
    await page.keyboard.press('Enter');
    await page.keyboard.type('it ran: line 41 of the ledger');
    await card.getByRole('button', { name: 'Resolve call' }).click();
    await card.locator('.approval-busy', { hasText: 'Resolving' }).waitFor();
    assert.deepEqual(posted.at(-1), {
      type: 'user-review-tool-call', toolCallId: 'doubt1', decision: 'resolve', result: 'it ran: line 41 of the ledger',
    });
    // The "server" answers: the plain card, resolved, with the person's text.
    await set('doubt1', 'resolved', { result: { isSuccess: true, content: 'it ran: line 41 of the ledger', receivedAt: Date.now() } });
    const done = page.locator('details.tool[data-id="doubt1"][data-approval="resolved"][data-state="success"]');
    await done.waitFor();
    assert.match(await done.locator('summary').innerText(), /it ran: line 41[\s\S]*Resolved by you[\s\S]*Done/);
    await banner.waitFor({ state: 'hidden' });
    await page.waitForFunction(() => document.activeElement?.matches('.tool[data-id="doubt1"] > summary'));

    // Retry and Reject post their decisions.
    await set('doubt2', 'in-doubt');
    await page.locator('.approval.in-doubt[data-id="doubt2"]').getByRole('button', { name: 'Retry' }).click();
    assert.deepEqual(posted.at(-1), { type: 'user-review-tool-call', toolCallId: 'doubt2', decision: 'retry' });
    await set('doubt3', 'in-doubt');
    await page.locator('.approval.in-doubt[data-id="doubt3"]').getByRole('button', { name: 'Reject' }).click();
    assert.deepEqual(posted.at(-1), { type: 'user-review-tool-call', toolCallId: 'doubt3', decision: 'reject' });
    assert.match(await banner.innerText(), /Interrupted, may have acted: 2 tool calls/);
    await set('doubt3', 'rejected', { result: { isSuccess: false, error: INTERRUPTED, receivedAt: Date.now() } });
    await page.locator('details.tool[data-id="doubt3"][data-approval="rejected"]').waitFor();
    assert.match(await page.locator('details.tool[data-id="doubt3"] summary').innerText(), /Not run again/);
    // Both kinds waiting: the banner counts them together.
    await page.evaluate(async () => {
      const { ui: u, scheduleRender } = await import('/js/state.js');
      const s = structuredClone(u.state);
      s.toolCallRecords.push({ id: 'ask1', name: 'calculator', parameters: '{"expression":"1+1"}', calledAt: s.updatedAt + 1, result: null, isLoaded: true, approval: 'pending' });
      u.state = s;
      scheduleRender();
    });
    await page.waitForFunction(() => /Waiting for you: 2 tool calls \(1 interrupted\)/.test(document.getElementById('approval-text').textContent));
  });

  test('screenshots of the card (light, dark, desktop, phone) and the restarted mark', T, async () => {
    await setState((s) => ({ ...s, toolCallRecords: (s.toolCallRecords || []).filter((c) => c.id.startsWith('call')) }));
    await set('doubt9', 'in-doubt');
    await setState((s) => {
      const a = s.assistantMessages.at(-1);
      a.restarted = true;
      a.content = `Here is the first part of the answer, kept from before the interrupt. Hello! I am answering again from the start: ${a.content}`;
      return s;
    });
    const mark = page.locator('article.msg.assistant[data-restarted="true"] .badge.restarted');
    await mark.waitFor();
    assert.equal(await mark.innerText(), 'Restarted after an interruption');
    const card = page.locator('.approval.in-doubt[data-id="doubt9"]');
    await card.getByRole('button', { name: /^Resolve:/ }).click();
    await card.getByLabel(/What happened/).fill('it ran once');
    const unnamed = await card.evaluate((root) => [...root.querySelectorAll('button, textarea, input')]
      .filter((e) => !(e.getAttribute('aria-label') || e.textContent.trim() || e.labels?.length))
      .map((e) => e.outerHTML.slice(0, 80)));
    assert.deepEqual(unnamed, [], 'every control of the card has a name');
    for (const theme of ['light', 'dark']) {
      await page.emulateMedia({ colorScheme: theme });
      for (const [name, size] of [['desktop', DESKTOP], ['phone', PHONE]]) {
        await page.setViewportSize(size);
        await page.evaluate(() => document.activeElement?.blur());
        await card.scrollIntoViewIfNeeded();
        if (name === 'phone') {
          const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
          assert.ok(overflow <= 0, `no sideways scrolling at 375 px (${overflow}px)`);
          for (const b of ['Retry', /^Resolve:/, 'Reject']) {
            const r = await card.getByRole('button', { name: b, exact: typeof b === 'string' }).boundingBox();
            assert.ok(r.x >= 0 && r.x + r.width <= PHONE.width && r.height >= 32, `${b} fits and is big enough to tap`);
          }
        }
        await shoot(page, `indoubt-${theme}-${name}`);
      }
    }
    await mark.scrollIntoViewIfNeeded();
    await shoot(page, 'restarted-mark-dark-phone');
    await page.emulateMedia({ colorScheme: 'light' });
    await page.setViewportSize(DESKTOP);
    await mark.scrollIntoViewIfNeeded();
    await shoot(page, 'restarted-mark');
    assert.deepEqual(browser.errors, []);
    assert.deepEqual(browser.offsite, []);
  });
});
