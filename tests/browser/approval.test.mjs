// A person in the loop (SPEC §3.6, issue 15): the calculator set to "ask",
// its calls wait for a decision on a card in the chat. Approve, edit then
// approve, reject with a reason, always allow / always deny, a new message
// while a call waits, a reload and a server restart while it waits, the
// chat's permissions in the inspector's Tools tab, and the card's
// screenshots: build/screenshots/approval-{light,dark}-{desktop,phone}.png
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { SHOTS, Server, launch, sleep, ui } from './helpers.mjs';

const T = { timeout: 60000 };
const PHONE = { width: 375, height: 812 };
const DESKTOP = { width: 1280, height: 800 };

describe('tool approval', () => {
  let server;
  let browser;
  let page;
  const reviews = [];   // the review inputs the page posted

  before(async () => {
    server = new Server({ chunkDelayMs: 10, extra: { tools: [{ name: 'calculator', approval: 'ask' }] } });
    await server.start();
    browser = await launch({ viewport: DESKTOP, colorScheme: 'light' });
    page = browser.context.pages()[0] || (await browser.context.newPage());
    page.on('request', (r) => {
      if (r.method() === 'POST' && /\/moorex$/.test(r.url()) && /user-review-tool-call/.test(r.postData() || '')) {
        reviews.push(JSON.parse(r.postData()));
      }
    });
    await page.goto(`${server.url}/`);
    await ui.waitOnline(page);
    fs.mkdirSync(SHOTS, { recursive: true });
  });

  after(async () => {
    await browser?.close();
    await server?.stop();
    server?.cleanup();
  });

  async function serverState() {
    const sid = await ui.sessionId(page);
    const r = await server.api('GET', `/sessions/${encodeURIComponent(sid)}`);
    assert.equal(r.status, 200);
    return r.body;
  }

  /* A fresh chat, so one test's permissions do not leak into the next (an
   * untouched chat is reused: the page's rule). */
  async function newChat() {
    await page.getByRole('button', { name: 'New chat', exact: true }).click();
    await page.waitForFunction(() => !document.getElementById('welcome').hidden);
    await ui.waitOnline(page);
  }

  const card = () => page.locator('.approval[data-name="calculator"]');

  /* Ask for a sum; the calculator's call then waits on a card. */
  async function askAndWait(text = 'what is 2+3?') {
    await ui.send(page, text);
    await card().waitFor({ timeout: 20000 });
    return card();
  }

  /* A complete answer whose text matches `re`. */
  async function answer(re) {
    await page.waitForFunction((src) => [...document.querySelectorAll('article.msg.assistant[data-status="complete"] .md')]
      .some((m) => new RegExp(src).test(m.textContent)), re.source, { timeout: 20000 });
  }

  test('the call waits on a card (tool, server, arguments); Approve runs it and the answer follows', T, async () => {
    await newChat();
    const c = await askAndWait();
    assert.equal(await c.locator('.tool-name').innerText(), 'calculator');
    await c.locator('.tool-source', { hasText: 'builtin' }).waitFor();
    const args = c.getByLabel('Arguments');
    assert.equal(await args.inputValue(), '{\n  "expression": "2+3"\n}');
    assert.equal(await args.getAttribute('readonly'), '', 'read-only until Edit');
    for (const name of ['Approve', 'Edit', 'Reject', 'Always allow', 'Always deny']) {
      assert.ok(await c.getByRole('button', { name, exact: true }).isVisible(), `${name} shows`);
    }
    const banner = page.locator('#approval-banner');
    assert.match(await banner.innerText(), /Waiting for your approval: calculator/);
    assert.match(await banner.innerText(), /Sending a message now declines it/);
    assert.equal(await page.getByLabel('Message', { exact: true }).isEnabled(), true, 'the composer stays usable');

    // Nothing runs while it waits: no result, no answer, no thinking dots.
    await sleep(600);
    const st = await serverState();
    const rec = st.toolCallRecords.at(-1);
    assert.equal(rec.approval, 'pending');
    assert.equal(rec.result, null);
    assert.equal(st.assistantMessages.length, 0);
    assert.equal(await page.locator('[data-kind="thinking"]').count(), 0);

    // By keyboard: Tab walks the arguments and the five buttons in order...
    await c.getByLabel('Arguments').focus();
    const order = [];
    for (let i = 0; i < 5; i++) {
      await page.keyboard.press('Tab');
      order.push(await page.evaluate(() => document.activeElement?.dataset.act));
    }
    assert.deepEqual(order, ['approve', 'edit', 'reject', 'always-allow', 'always-deny']);
    // ...and the banner's Review puts the focus on Approve.
    await banner.getByRole('button', { name: 'Review' }).click();
    await page.waitForFunction(() => document.activeElement?.dataset.act === 'approve');
    await page.keyboard.press('Enter');
    const done = page.locator('details.tool[data-name="calculator"][data-approval="approved"][data-state="success"]');
    await done.waitFor({ timeout: 20000 });
    assert.match(await done.locator('summary').innerText(), /5[\s\S]*Approved[\s\S]*Done/);
    // The focus is not lost with the card: it lands on the reviewed call.
    await page.waitForFunction((id) => document.activeElement?.matches(`.tool[data-id="${id}"] > summary`), rec.id);
    await answer(/2\+3 = 5/);
    await banner.waitFor({ state: 'hidden' });
    assert.equal(await card().count(), 0);
    assert.deepEqual(reviews.at(-1), { type: 'user-review-tool-call', toolCallId: rec.id, decision: 'approve' });
  });

  test('Edit, then Approve: bad JSON is refused on the card, the tool gets the edited arguments', T, async () => {
    await newChat();
    const c = await askAndWait();
    const posted = reviews.length;
    await c.getByRole('button', { name: 'Edit' }).click();
    const args = c.getByLabel('Arguments');
    assert.equal(await args.getAttribute('readonly'), null, 'editable after Edit');
    assert.ok(await args.evaluate((e) => e === document.activeElement), 'the focus goes to the arguments');

    await args.fill('{"expression": 6*7');
    await c.getByRole('button', { name: 'Approve edited' }).click();
    await c.locator('.approval-error', { hasText: 'Not valid JSON' }).waitFor();
    assert.equal(await args.getAttribute('aria-invalid'), 'true');
    await args.fill('["6*7"]');
    await c.getByRole('button', { name: 'Approve edited' }).click();
    await c.locator('.approval-error', { hasText: 'must be a JSON object' }).waitFor();
    await sleep(300);
    assert.equal(reviews.length, posted, 'nothing was sent for arguments that are not an object');
    assert.equal((await serverState()).toolCallRecords.at(-1).approval, 'pending');

    await args.fill('{\n  "expression": "6*7"\n}');
    assert.ok(await c.locator('.approval-error').isHidden(), 'typing clears the error');
    await args.press('Control+Enter');
    const done = page.locator('details.tool[data-name="calculator"][data-approval="approved"][data-state="success"]');
    await done.waitFor({ timeout: 20000 });
    assert.match(await done.locator('summary').innerText(), /6\*7[\s\S]*42/);
    await answer(/6\*7 = 42/);
    assert.equal(reviews.at(-1).parameters, '{"expression":"6*7"}');
    const rec = (await serverState()).toolCallRecords.at(-1);
    assert.equal(JSON.parse(rec.parameters).expression, '6*7');
    assert.equal(rec.result.content, '42');
  });

  test('a review the server refuses says why on the card, and the buttons work again', T, async () => {
    await newChat();
    const c = await askAndWait();
    // Another tab was quicker: the server answers 409 not-pending.
    await page.route(/\/moorex$/, (route) => (/user-review-tool-call/.test(route.request().postData() || '')
      ? route.fulfill({
        status: 409, contentType: 'application/json',
        body: '{"error":"rejected","reason":"not-pending","message":"the input does not apply to the current state"}',
      })
      : route.continue()));
    try {
      await c.getByRole('button', { name: 'Approve' }).click();
      await c.locator('.approval-error', { hasText: 'already reviewed' }).waitFor();
      assert.equal(await c.getByRole('button', { name: 'Approve' }).isEnabled(), true);
    } finally {
      await page.unroute(/\/moorex$/);
    }
    await c.getByRole('button', { name: 'Approve' }).click();
    await answer(/2\+3 = 5/);
  });

  test('Reject with a reason (by keyboard): the call is answered as rejected and the brain goes on', T, async () => {
    await newChat();
    const c = await askAndWait();
    await c.getByRole('button', { name: 'Reject', exact: true }).focus();
    await page.keyboard.press('Enter');
    const reason = c.getByLabel(/Reason for rejecting/);
    await page.waitForFunction(() => document.activeElement?.classList.contains('approval-reason'));
    // Escape closes the reason, Enter on Reject opens it again.
    await page.keyboard.press('Escape');
    await reason.waitFor({ state: 'hidden' });
    await page.keyboard.press('Enter');
    await reason.waitFor();
    await page.keyboard.type('not now');
    await page.keyboard.press('Enter');

    const done = page.locator('details.tool[data-name="calculator"][data-approval="rejected"][data-state="error"]');
    await done.waitFor({ timeout: 20000 });
    assert.match(await done.locator('summary').innerText(), /rejected by the user: not now[\s\S]*Rejected/);
    await answer(/rejected by the user: not now/);
    assert.equal(reviews.at(-1).decision, 'reject');
    assert.equal(reviews.at(-1).reason, 'not now');
    const rec = (await serverState()).toolCallRecords.at(-1);
    assert.deepEqual([rec.approval, rec.result.isSuccess, rec.result.error],
      ['rejected', false, 'rejected by the user: not now']);
  });

  test('Always allow: this call runs, the next one does not ask; the Tools tab shows and clears it', T, async () => {
    await newChat();
    const c = await askAndWait();
    await c.getByRole('button', { name: 'Always allow' }).click();
    await page.locator('details.tool[data-name="calculator"][data-approval="approved"][data-state="success"]').waitFor({ timeout: 20000 });
    await answer(/2\+3 = 5/);
    assert.equal(reviews.at(-1).always, true);
    assert.deepEqual((await serverState()).toolPolicies, { calculator: 'auto' });

    // The next call runs at once: no card ever asks.
    await page.evaluate(() => {
      window.sawApproval = false;
      new MutationObserver(() => { if (document.querySelector('.approval')) window.sawApproval = true; })
        .observe(document.getElementById('thread'), { childList: true, subtree: true });
    });
    await ui.send(page, 'what is 4*5?');
    await answer(/4\*5 = 20/);
    assert.equal(await page.evaluate(() => window.sawApproval), false, 'no approval card');
    const rec = (await serverState()).toolCallRecords.at(-1);
    assert.equal(rec.approval, undefined);
    assert.equal(rec.result.content, '20');

    // The chat's permission is listed, and Clear brings the server's "ask" back.
    await page.getByRole('button', { name: 'Show inspector' }).click();
    await page.getByRole('tab', { name: 'Tools' }).click();
    const row = page.locator('.tp-row[data-tool="calculator"]');
    await row.locator('.badge', { hasText: 'This chat' }).waitFor();
    assert.equal(await row.getByLabel('Permission for calculator in this chat').inputValue(), 'auto');
    assert.match(await row.locator('option[value=""]').innerText(), /Default \(Ask\)/);
    await page.locator('.tp-row[data-tool="clock"] .tool-source', { hasText: 'builtin' }).waitFor();
    await row.getByRole('button', { name: /Clear this chat's permission for calculator/ }).click();
    await page.waitForFunction(() => !document.querySelector('.tp-row[data-tool="calculator"][data-own]'));
    assert.equal((await serverState()).toolPolicies?.calculator, undefined);
    assert.ok(await row.getByLabel('Permission for calculator in this chat').evaluate((e) => e === document.activeElement),
      'the focus stays on the row');
    // The select sets one too.
    await row.getByLabel('Permission for calculator in this chat').selectOption('deny');
    await page.waitForFunction(() => document.querySelector('.tp-row[data-tool="calculator"][data-own]'));
    assert.deepEqual((await serverState()).toolPolicies, { calculator: 'deny' });
    await row.getByLabel('Permission for calculator in this chat').selectOption('');
    await page.waitForFunction(() => !document.querySelector('.tp-row[data-tool="calculator"][data-own]'));
    await page.getByRole('button', { name: 'Hide inspector' }).click();

    await askAndWait('what is 1+1?');
    await card().getByRole('button', { name: 'Approve' }).click();
    await answer(/1\+1 = 2/);
  });

  test('Always deny: this call is rejected, the next one is denied by policy', T, async () => {
    await newChat();
    const c = await askAndWait();
    await c.getByRole('button', { name: 'Always deny' }).click();
    await page.locator('details.tool[data-name="calculator"][data-approval="rejected"]').waitFor({ timeout: 20000 });
    await answer(/rejected by the user/);
    assert.deepEqual((await serverState()).toolPolicies, { calculator: 'deny' });
    await ui.send(page, 'what is 3+4?');
    const denied = page.locator('details.tool[data-name="calculator"][data-state="error"]:not([data-approval])');
    await denied.waitFor({ timeout: 20000 });
    assert.match(await denied.locator('summary').innerText(), /denied by policy[\s\S]*Denied/);
    await answer(/denied by policy/);
  });

  test('a new message while a call waits: the call shows "not approved", the chat goes on', T, async () => {
    await newChat();
    await askAndWait();
    await ui.send(page, 'never mind, tell me a joke instead');
    const done = page.locator('details.tool[data-name="calculator"][data-state="error"]');
    await done.waitFor({ timeout: 20000 });
    assert.match(await done.locator('summary').innerText(), /not approved: the user sent a new message/);
    await page.locator('#approval-banner').waitFor({ state: 'hidden' });
    await answer(/never mind/);
    const rec = (await serverState()).toolCallRecords.at(-1);
    assert.equal(rec.result.error, 'not approved: the user sent a new message');
  });

  test('a reload while a call waits: the card is still there and Approve works', T, async () => {
    await newChat();
    await askAndWait();
    await page.reload();
    await ui.waitOnline(page);
    await card().waitFor({ timeout: 10000 });
    await page.locator('#approval-banner').waitFor();
    await card().getByRole('button', { name: 'Approve' }).click();
    await page.locator('details.tool[data-name="calculator"][data-state="success"]').waitFor({ timeout: 20000 });
    await answer(/2\+3 = 5/);
  });

  test('a server restart while a call waits: the card comes back and Approve works', T, async () => {
    await newChat();
    await askAndWait();
    const sid = await ui.sessionId(page);
    await server.restart();
    await ui.waitOnline(page, 20000);
    await page.waitForFunction(() => document.getElementById('app').dataset.conn === 'online');
    assert.equal(await ui.sessionId(page), sid);
    await card().waitFor({ timeout: 10000 });
    // The pending record was recovered from the log, still waiting.
    const rec = (await serverState()).toolCallRecords.at(-1);
    assert.deepEqual([rec.approval, rec.result], ['pending', null]);
    await card().getByRole('button', { name: 'Approve' }).click();
    await page.locator('details.tool[data-name="calculator"][data-state="success"]').waitFor({ timeout: 20000 });
    await answer(/2\+3 = 5/);
  });

  test('screenshots of the card: light and dark, desktop and phone; no sideways scrolling', T, async () => {
    await newChat();
    await askAndWait('what is 12*(3+4)?');
    const unnamed = await card().evaluate((root) => [...root.querySelectorAll('button, textarea, input')]
      .filter((e) => !(e.getAttribute('aria-label') || e.textContent.trim() || e.labels?.length))
      .map((e) => e.outerHTML.slice(0, 80)));
    assert.deepEqual(unnamed, [], 'every control of the card has a name');
    await page.mouse.move(0, 0);
    for (const theme of ['light', 'dark']) {
      await page.emulateMedia({ colorScheme: theme });
      for (const [name, size] of [['desktop', DESKTOP], ['phone', PHONE]]) {
        await page.setViewportSize(size);
        await page.evaluate(() => document.activeElement?.blur());
        await card().scrollIntoViewIfNeeded();
        await sleep(300);
        if (name === 'phone') {
          const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
          assert.ok(overflow <= 0, `no sideways scrolling at 375 px (${overflow}px)`);
          const box = await card().boundingBox();
          assert.ok(box.x >= 0 && box.x + box.width <= PHONE.width, 'the card fits the phone');
          for (const b of ['Approve', 'Edit', 'Reject', 'Always allow', 'Always deny']) {
            const r = await card().getByRole('button', { name: b, exact: true }).boundingBox();
            assert.ok(r.x >= 0 && r.x + r.width <= PHONE.width && r.height >= 32, `${b} fits and is big enough to tap`);
          }
        }
        await page.screenshot({ path: path.join(SHOTS, `approval-${theme}-${name}.png`) });
      }
    }
    await page.emulateMedia({ colorScheme: 'light' });
    await page.setViewportSize(DESKTOP);
    await card().getByRole('button', { name: 'Approve' }).click();
    await answer(/12\*\(3\+4\) = 84/);
    for (const f of ['light-desktop', 'light-phone', 'dark-desktop', 'dark-phone']) {
      assert.ok(fs.statSync(path.join(SHOTS, `approval-${f}.png`)).size > 10000, `approval-${f}.png written`);
    }
    assert.deepEqual(browser.errors, []);
    assert.deepEqual(browser.offsite, [], 'no request left 127.0.0.1');
  });
});
