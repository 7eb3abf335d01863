// The daily-use features of the chat (SPEC §7, issue 16) in headless Chromium
// against the real server: edit and regenerate as versions, rename, search,
// export and import, the chat list live across tabs, suggestion chips, plain
// titles, the keyboard hint on phones, keyboard reach; and with the fake
// OpenAI provider: per-chat settings reaching the model's request, usage and
// reasoning, an error answer with Retry, a Stop before the first token.
// Screenshots: build/screenshots/features-*.png
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { BIN, SHOTS, Server, launch, sleep, tempDir, ui } from './helpers.mjs';

const T = { timeout: 90000 };
const FAKE = process.env.FAKE_OPENAI || path.join(path.dirname(BIN), 'tests/fake_openai');

/* The fake OpenAI server: its port, the requests it got. */
async function startFake() {
  if (!fs.existsSync(FAKE)) throw new Error(`${FAKE} is missing: run make first`);
  const proc = spawn(FAKE, ['--exit-on-eof'], { stdio: ['pipe', 'pipe', 'inherit'] });
  const port = await new Promise((resolve, reject) => {
    let out = '';
    proc.stdout.on('data', (d) => {
      out += d;
      const m = /port (\d+)/.exec(out);
      if (m) resolve(Number(m[1]));
    });
    proc.once('exit', (c) => reject(new Error(`fake_openai exited (${c})`)));
  });
  const url = `http://127.0.0.1:${port}`;
  return {
    url,
    async requests() {
      const r = await fetch(`${url}/__requests`);
      return (await r.json()).filter((x) => /chat\/completions$/.test(x.path));
    },
    async hasModel(model) {
      const r = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST', headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ model, stream: true, messages: [{ role: 'user', content: 'probe' }] }),
      });
      await r.text();
      return r.status !== 404;
    },
    stop() {
      try { proc.stdin.end(); } catch { /* gone */ }
      try { proc.kill('SIGKILL'); } catch { /* gone */ }
    },
  };
}

const completeAnswers = 'article.msg.assistant[data-status="complete"]';

async function waitAnswers(page, n, timeout = 20000) {
  await page.waitForFunction(([sel, k]) => document.querySelectorAll(sel).length >= k,
    [completeAnswers, n], { timeout });
}

/* Send `text` and wait for one more complete answer. */
async function exchange(page, text) {
  const n = await page.locator(completeAnswers).count();
  await ui.send(page, text);
  await waitAnswers(page, n + 1);
}

/* A fresh chat (New chat reuses an untouched one). */
async function freshChat(page) {
  await page.locator('#new-chat').click();
  await page.locator('#welcome').waitFor();
  await ui.waitOnline(page);
}

async function waitHashNot(page, sid) {
  await page.waitForFunction((s) => {
    const h = decodeURIComponent(location.hash.replace(/^#\//, ''));
    return h && h !== s;
  }, sid, { timeout: 15000 });
  await ui.waitOnline(page);
}

/* A screenshot without the passing toast or a hover left over. */
async function shot(page, name) {
  await page.evaluate(() => { document.getElementById('toast').hidden = true; });
  await page.mouse.move(1, 1);
  await page.screenshot({ path: path.join(SHOTS, name) });
}

async function stateOf(server, sid) {
  const r = await server.api('GET', `/sessions/${encodeURIComponent(sid)}`);
  assert.equal(r.status, 200);
  return r.body;
}

/* ---------------------------------------------------------------------------------- */

describe('chat features with the builtin brain', () => {
  let server;
  let browser;
  let page;

  before(async () => {
    server = new Server({ chunkDelayMs: 8 });
    await server.start();
    browser = await launch({ colorScheme: 'light' });
    page = browser.context.pages()[0] || (await browser.context.newPage());
    await page.goto(`${server.url}/`);
    await ui.waitOnline(page);
    fs.mkdirSync(SHOTS, { recursive: true });
  });

  after(async () => {
    await browser?.close();
    await server?.stop();
    server?.cleanup();
  });

  test('titles are plain text: "# Release notes" shows as "Release notes"', T, async () => {
    await exchange(page, '# Release notes\n\nWhat changed this week?');
    await page.waitForFunction(() => document.getElementById('chat-title').textContent === 'Release notes');
    await page.locator('.session.active .session-title', { hasText: /^Release notes$/ }).waitFor();
    assert.equal(await page.title(), 'Release notes · Reflexor');
  });

  test('a suggestion chip sends its text', T, async () => {
    await freshChat(page);
    await page.getByRole('button', { name: 'What is 12*(3+4)?' }).click();
    const user = ui.users(page).first();
    await user.waitFor();
    assert.equal((await user.locator('.bubble').innerText()).trim(), 'What is 12*(3+4)?');
    assert.equal(await page.getByLabel('Message', { exact: true }).inputValue(), '', 'the composer stays empty');
    await waitAnswers(page, 1);
  });

  test('edit a sent message: a new version with the edited text; going back shows the old', T, async () => {
    await freshChat(page);
    await exchange(page, 'first question alpha');
    await exchange(page, 'second question beta');
    const original = await ui.sessionId(page);

    const second = ui.users(page).nth(1);
    await second.hover();
    await second.getByRole('button', { name: 'Edit this message' }).click();
    const box = second.getByRole('textbox', { name: 'Edit your message' });
    assert.equal(await box.inputValue(), 'second question beta');
    await box.fill('second question gamma');
    await box.press('Enter');

    await waitHashNot(page, original);
    const fork = await ui.sessionId(page);
    await page.waitForFunction((sel) => [...document.querySelectorAll(sel)]
      .some((e) => e.textContent.includes('gamma')), `${completeAnswers} .md`, { timeout: 20000 });
    const users = await ui.users(page).locator('.bubble').allInnerTexts();
    assert.deepEqual(users.map((t) => t.trim()), ['first question alpha', 'second question gamma'],
      'the exchange before the edit is kept, the edited one replaced');
    const pager = ui.users(page).nth(1).locator('.versions');
    await pager.locator('.ver-num', { hasText: '2/2' }).waitFor();
    assert.equal(await ui.users(page).first().locator('.versions').count(), 0, 'no versions on the first message');

    // The server has both: the original untouched, the fork with the edit.
    const a = await stateOf(server, original);
    const b = await stateOf(server, fork);
    assert.deepEqual(a.userMessages.map((m) => m.content), ['first question alpha', 'second question beta']);
    assert.deepEqual(b.userMessages.map((m) => m.content), ['first question alpha', 'second question gamma']);

    // Back to the first version.
    await pager.getByRole('button', { name: 'Previous version of this message' }).click();
    await page.waitForFunction((s) => decodeURIComponent(location.hash.slice(2)) === s, original);
    await ui.users(page).nth(1).locator('.bubble', { hasText: 'second question beta' }).waitFor();
    await ui.users(page).nth(1).locator('.ver-num', { hasText: '1/2' }).waitFor();
    await page.locator(`${completeAnswers} .md`, { hasText: 'beta' }).first().waitFor();
    // And forward again.
    await ui.users(page).nth(1).getByRole('button', { name: 'Next version of this message' }).click();
    await page.waitForFunction((s) => decodeURIComponent(location.hash.slice(2)) === s, fork);
    await ui.users(page).nth(1).locator('.bubble', { hasText: 'gamma' }).waitFor();
    await shot(page, 'features-versions-light.png');
    // The versions are one chat in the list.
    const entry = page.locator('.session.active');
    assert.match(await entry.locator('.session-sub').innerText(), /2 versions/);
  });

  test('regenerate an answer: versions 1/2 and 2/2', T, async () => {
    await freshChat(page);
    await exchange(page, 'tell me something about otters');
    const original = await ui.sessionId(page);
    const answer = ui.lastAssistant(page);
    await answer.hover();
    await answer.getByRole('button', { name: 'Regenerate this answer' }).click();
    await waitHashNot(page, original);
    const fork = await ui.sessionId(page);
    await waitAnswers(page, 1);
    const pager = ui.lastAssistant(page).locator('.versions');
    await pager.locator('.ver-num', { hasText: '2/2' }).waitFor();
    assert.equal(await ui.users(page).count(), 1, 'the question is asked once in the new version');
    assert.equal(await ui.users(page).locator('.versions').count(), 0, 'a regenerate shows its versions on the answer');
    const b = await stateOf(server, fork);
    assert.equal(b.userMessages.length, 1);
    assert.equal(b.assistantMessages.length, 1);

    await pager.getByRole('button', { name: 'Previous version of this answer' }).click();
    await page.waitForFunction((s) => decodeURIComponent(location.hash.slice(2)) === s, original);
    await ui.lastAssistant(page).locator('.ver-num', { hasText: '1/2' }).waitFor();
    assert.ok(await ui.lastAssistant(page).getByRole('button', { name: 'Previous version of this answer' }).isDisabled());
    await ui.lastAssistant(page).getByRole('button', { name: 'Next version of this answer' }).click();
    await page.waitForFunction((s) => decodeURIComponent(location.hash.slice(2)) === s, fork);
    await ui.lastAssistant(page).locator('.ver-num', { hasText: '2/2' }).waitFor();
  });

  test('rename in the top bar and in the list; the title persists across a reload', T, async () => {
    await freshChat(page);
    await exchange(page, 'a chat to be renamed');
    const sid = await ui.sessionId(page);
    await page.getByRole('button', { name: 'Rename chat', exact: true }).click();
    const input = page.locator('#chat-title-input');
    await input.fill('Otter research');
    await input.press('Enter');
    await page.waitForFunction(() => document.getElementById('chat-title').textContent === 'Otter research');
    await page.locator('.session.active .session-title', { hasText: 'Otter research' }).waitFor();
    const list = (await server.api('GET', '/sessions')).body;
    assert.equal(list.find((s) => s.id === sid).title, 'Otter research');

    await page.reload();
    await ui.waitOnline(page);
    await page.waitForFunction(() => document.getElementById('chat-title').textContent === 'Otter research');

    // In the list, with the keyboard: the entry's Rename button, type, Enter.
    await page.locator('.session.active').getByRole('button', { name: /^Rename chat “Otter research”/ }).focus();
    await page.keyboard.press('Enter');
    const li = page.locator('.session-rename-input');
    await li.waitFor();
    await li.fill('Sea otter notes');
    await li.press('Enter');
    await page.locator('.session.active .session-title', { hasText: 'Sea otter notes' }).waitFor();
    await page.reload();
    await ui.waitOnline(page);
    await page.locator('.session.active .session-title', { hasText: 'Sea otter notes' }).waitFor();
    assert.equal((await server.api('GET', '/sessions')).body.find((s) => s.id === sid).title, 'Sea otter notes');
  });

  test('search finds chats by title and by message text (served by the server)', T, async () => {
    await freshChat(page);
    await exchange(page, 'Quokka habitats');
    await exchange(page, 'and a word deep inside: zebrafish');
    const target = await ui.sessionId(page);
    const search = page.getByRole('searchbox', { name: /Search chats/ });

    await search.fill('quokka');
    await page.waitForFunction((sid) => {
      const ids = [...document.querySelectorAll('#session-list .session')].map((e) => e.dataset.id);
      return ids.length === 1 && ids[0] === sid;
    }, target);
    await search.fill('zebrafish');
    await page.waitForFunction((sid) => {
      const ids = [...document.querySelectorAll('#session-list .session')].map((e) => e.dataset.id);
      return ids.length === 1 && ids[0] === sid;
    }, target);
    await search.fill('nothingmatchesthis');
    await page.locator('#session-empty', { hasText: 'No chats match' }).waitFor();
    assert.equal(await page.locator('#session-list .session').count(), 0);
    await search.press('Escape');
    await page.waitForFunction(() => document.querySelectorAll('#session-list .session').length > 1);
  });

  test('export then import gives an equal chat; a refused import names the input', T, async () => {
    await freshChat(page);
    await exchange(page, 'export me: first');
    await exchange(page, 'export me: second');
    const sid = await ui.sessionId(page);
    const [download] = await Promise.all([
      page.waitForEvent('download'),
      page.getByRole('button', { name: 'Export chat' }).click(),
    ]);
    const dir = tempDir('export');
    const file = path.join(dir, download.suggestedFilename());
    await download.saveAs(file);
    assert.match(download.suggestedFilename(), /\.reflexor\.json$/);
    const doc = JSON.parse(fs.readFileSync(file, 'utf8'));
    assert.equal(doc.format, 'reflexor-session');
    assert.ok(doc.inputs.length >= 4);

    await page.locator('#import-file').setInputFiles(file);
    await waitHashNot(page, sid);
    const copy = await ui.sessionId(page);
    await page.locator('#toast', { hasText: 'Chat imported' }).waitFor();
    await waitAnswers(page, 2);
    const a = await stateOf(server, sid);
    const b = await stateOf(server, copy);
    assert.deepEqual(b.userMessages.map((m) => m.content), a.userMessages.map((m) => m.content));
    assert.deepEqual(b.assistantMessages.map((m) => [m.content, m.status]),
      a.assistantMessages.map((m) => [m.content, m.status]));
    const shown = await ui.users(page).locator('.bubble').allInnerTexts();
    assert.deepEqual(shown.map((t) => t.trim()), ['export me: first', 'export me: second']);

    // A document with a bad input: nothing is made, and the page says which.
    const bad = structuredClone(doc);
    bad.inputs[1].input = { type: 'user-send-message', content: '   ' };
    const badFile = path.join(dir, 'bad.reflexor.json');
    fs.writeFileSync(badFile, JSON.stringify(bad));
    const before = (await server.api('GET', '/sessions')).body.length;
    await page.locator('#import-file').setInputFiles(badFile);
    await page.locator('#toast', { hasText: /input 1 of the file was refused/ }).waitFor();
    assert.equal((await server.api('GET', '/sessions')).body.length, before, 'nothing imported');
    fs.rmSync(dir, { recursive: true, force: true });
  });

  test('the chat list is live across two tabs', T, async () => {
    const other = await browser.context.newPage();
    await other.goto(`${server.url}/`);
    await ui.waitOnline(other);
    await freshChat(page);
    await exchange(page, 'made in the first tab, seen in the second');
    const sid = await ui.sessionId(page);
    await other.locator(`.session[data-id="${sid}"] .session-title`, { hasText: 'made in the first tab' }).waitFor({ timeout: 10000 });
    // A rename here shows there.
    await page.getByRole('button', { name: 'Rename chat', exact: true }).click();
    await page.locator('#chat-title-input').fill('Renamed in tab one');
    await page.locator('#chat-title-input').press('Enter');
    await other.locator(`.session[data-id="${sid}"] .session-title`, { hasText: 'Renamed in tab one' }).waitFor({ timeout: 10000 });
    // A delete there goes here.
    const del = other.locator(`.session[data-id="${sid}"] .session-del`);
    await del.click();
    await del.click();
    await page.locator(`.session[data-id="${sid}"]`).waitFor({ state: 'detached', timeout: 10000 });
    // A chat made by another client entirely (the API) shows too.
    const made = await server.api('POST', '/sessions', {});
    await page.locator(`.session[data-id="${made.body.id}"]`).waitFor({ timeout: 10000 });
    await other.close();
  });

  test('every new control is reachable with Tab and labelled', T, async () => {
    await freshChat(page);
    await exchange(page, 'keyboard check');
    // Walk the page with Tab, collecting the accessible names met.
    await page.locator('#new-chat').focus();
    const met = new Set();
    for (let i = 0; i < 80; i++) {
      await page.keyboard.press('Tab');
      const n = await page.evaluate(() => {
        const e = document.activeElement;
        if (!e || e === document.body) return '';
        return e.getAttribute('aria-label') || (e.labels && e.labels[0]?.textContent) || e.textContent.trim();
      });
      if (n) met.add(n.trim());
    }
    for (const want of ['Search chats (titles and messages)', 'Import a chat from a file', 'Rename chat',
      'Chat settings', 'Export chat', 'Edit this message', 'Regenerate this answer']) {
      assert.ok(met.has(want) || [...met].some((m) => m.startsWith(want)), `Tab reaches "${want}" (met: ${[...met].join(' | ')})`);
    }
    assert.ok([...met].some((m) => m.startsWith('Rename chat “')), 'the list entries have a labelled Rename');
  });

  test('the inspector\'s rows wrap inside its panel', T, async () => {
    await exchange(page, `a long line without spaces: ${'x'.repeat(240)} and more words after it to wrap`);
    await page.getByRole('button', { name: 'Show inspector' }).click();
    await page.locator('#timeline .tl').first().waitFor();
    await page.getByLabel('States').check();
    await sleep(200);
    const over = await page.evaluate(() => {
      const panel = document.getElementById('inspector').getBoundingClientRect();
      const tl = document.getElementById('timeline');
      const rows = [...document.querySelectorAll('#inspector .tl, #inspector .panel-tools')];
      const conn = document.querySelector('#timeline .tl[data-type="connection"]');
      return {
        connDisplay: getComputedStyle(conn).display,
        connWidth: Math.round(conn.getBoundingClientRect().width - tl.clientWidth),
        scroll: tl.scrollWidth - tl.clientWidth,
        rows: rows.filter((r) => r.getBoundingClientRect().right > panel.right + 0.5).length,
      };
    });
    assert.equal(over.connDisplay, 'list-item', 'the connection row is a row, not the status pill');
    assert.ok(over.connWidth <= 0 && over.connWidth > -40, `the connection row spans the panel (${over.connWidth})`);
    assert.equal(over.scroll, 0, 'the timeline does not scroll sideways');
    assert.equal(over.rows, 0, 'no row reaches past the panel');
    await shot(page, 'features-inspector-light.png');
    await page.getByRole('tab', { name: 'Tools' }).click();
    await page.locator('#tool-perms .tp-row').first().waitFor();
    const toolsOver = await page.evaluate(() => {
      const box = document.getElementById('tool-perms');
      return box.scrollWidth - box.clientWidth;
    });
    assert.equal(toolsOver, 0, 'the tools panel does not scroll sideways');
    await page.emulateMedia({ colorScheme: 'dark' });
    await shot(page, 'features-tools-dark.png');
    await page.emulateMedia({ colorScheme: 'light' });
    await page.getByRole('tab', { name: 'Timeline' }).click();
    await page.getByRole('button', { name: 'Close inspector' }).click();
  });

  test('the Enter / Shift+Enter hint shows with a keyboard, not on a phone; screenshots', T, async () => {
    assert.match(await page.locator('#composer-hint').innerText(), /Shift\+Enter/);
    const phone = await launch({
      viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true, deviceScaleFactor: 2, colorScheme: 'dark',
    });
    try {
      const p = phone.context.pages()[0] || (await phone.context.newPage());
      await p.goto(`${server.url}/#/${encodeURIComponent(await ui.sessionId(page))}`);
      await ui.waitOnline(p);
      await ui.assistant(p).first().waitFor();
      assert.ok(await p.locator('#composer-hint').isHidden(), 'no keyboard hint on a phone');
      assert.ok(await p.getByRole('button', { name: 'Send message' }).isVisible());
      const overflow = await p.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      assert.ok(overflow <= 0, `no sideways scrolling at phone width (${overflow}px)`);
      await shot(p, 'features-phone-dark.png');
      await p.getByRole('button', { name: 'Open chat list' }).click();
      await sleep(300);
      await p.getByRole('searchbox', { name: /Search chats/ }).fill('otter');
      await p.waitForFunction(() => {
        const t = [...document.querySelectorAll('#session-list .session-title')].map((e) => e.textContent);
        return t.length > 0 && t.every((x) => /otter/i.test(x));
      });
      await p.screenshot({ path: path.join(SHOTS, 'features-phone-search-dark.png') });
    } finally {
      await phone.close();
    }
  });

  test('no page errors, nothing fetched off the server', T, async () => {
    assert.deepEqual(browser.errors, []);
    assert.deepEqual(browser.offsite, []);
  });
});

/* ---------------------------------------------------------------------------------- */

describe('chat features with an OpenAI-compatible model (the fake)', () => {
  let fake;
  let server;
  let browser;
  let page;

  before(async () => {
    fake = await startFake();
    server = new Server({
      extra: {
        system_prompt: 'You are the configured default.',
        brain: {
          provider: 'openai',
          openai: { base_url: `${fake.url}/v1`, model: 'text', api_key: '', retries: 0, backoff_ms: 0 },
        },
      },
    });
    await server.start();
    browser = await launch({ colorScheme: 'light' });
    page = browser.context.pages()[0] || (await browser.context.newPage());
    await page.goto(`${server.url}/`);
    await ui.waitOnline(page);
  });

  after(async () => {
    await browser?.close();
    await server?.stop();
    server?.cleanup();
    fake?.stop();
  });

  async function configure({ system, model, temperature }) {
    await page.getByRole('button', { name: 'Chat settings' }).click();
    const d = page.getByRole('dialog', { name: 'Chat settings' });
    await d.waitFor();
    if (system !== undefined) await d.getByLabel('System prompt').fill(system);
    if (model !== undefined) await d.getByLabel('Model').fill(model);
    if (temperature !== undefined) await d.getByRole('spinbutton', { name: 'Temperature' }).fill(String(temperature));
    await d.getByRole('button', { name: 'Save' }).click();
    await d.waitFor({ state: 'hidden' });
  }

  test('usage: tokens and tokens/s under the answer', T, async () => {
    await exchange(page, 'hello there');
    const a = ui.lastAssistant(page);
    assert.match(await a.locator('.md').innerText(), /Hello world!/);
    const sid = await ui.sessionId(page);
    const s = await stateOf(server, sid);
    const m = s.assistantMessages[0];
    if (m.usage) {
      const usage = a.locator('.usage');
      await usage.waitFor();
      assert.match(await usage.innerText(), new RegExp(`${m.usage.completionTokens} tokens?`));
      if (m.firstTokenAt && m.updatedAt > m.firstTokenAt) assert.match(await usage.innerText(), /tok\/s/);
    } else {
      assert.equal(await a.locator('.usage').count(), 0, 'no usage shown when the brain reported none');
      test.diagnostic('the server kept no usage with the message (backend not there yet)');
    }
  });

  test('settings (system prompt, model, temperature) change the model\'s request', T, async () => {
    await freshChat(page);
    await exchange(page, 'with the defaults');
    let reqs = await fake.requests();
    let last = reqs[reqs.length - 1].body;
    assert.equal(last.model, 'text');
    assert.equal(last.messages[0].role, 'system');
    assert.match(last.messages[0].content, /configured default/);

    await configure({ system: 'You are a pirate.', model: 'json', temperature: 0.3 });
    const sid = await ui.sessionId(page);
    await page.waitForFunction(() => document.getElementById('chat-settings-btn').dataset.custom === 'true');
    const st = await stateOf(server, sid);
    assert.deepEqual(st.settings, { systemPrompt: 'You are a pirate.', model: 'json', temperature: 0.3 });
    // The dialog shows what the chat has.
    await page.getByRole('button', { name: 'Chat settings' }).click();
    const d = page.getByRole('dialog', { name: 'Chat settings' });
    assert.equal(await d.getByLabel('Model').inputValue(), 'json');
    assert.equal(await d.getByLabel('System prompt').inputValue(), 'You are a pirate.');
    assert.equal(await d.getByRole('spinbutton', { name: 'Temperature' }).inputValue(), '0.3');
    await shot(page, 'features-settings-light.png');
    await d.getByRole('button', { name: 'Cancel' }).click();

    await exchange(page, 'with my settings');
    assert.match(await ui.lastAssistant(page).locator('.md').innerText(), /Whole reply/);
    reqs = await fake.requests();
    last = reqs[reqs.length - 1].body;
    assert.equal(last.model, 'json');
    assert.equal(last.temperature, 0.3);
    assert.equal(last.messages[0].role, 'system');
    assert.match(last.messages[0].content, /You are a pirate\./);

    // Reset: back to the server's defaults.
    await page.getByRole('button', { name: 'Chat settings' }).click();
    await page.getByRole('dialog', { name: 'Chat settings' }).getByRole('button', { name: 'Reset to defaults' }).click();
    await page.waitForFunction(() => document.getElementById('chat-settings-btn').dataset.custom === 'false');
    assert.deepEqual((await stateOf(server, sid)).settings || {}, {});
    await exchange(page, 'defaults again');
    reqs = await fake.requests();
    last = reqs[reqs.length - 1].body;
    assert.equal(last.model, 'text');
    assert.ok(!('temperature' in last) || last.temperature !== 0.3);
  });

  test('reasoning is shown collapsed, and expands', T, async (t) => {
    if (!(await fake.hasModel('reasoning'))) { t.skip('the fake has no "reasoning" scenario yet'); return; }
    await freshChat(page);
    await configure({ model: 'reasoning' });
    await ui.send(page, 'think first');
    // Live, from the message stream's reasoning frames, before any answer text.
    const live = page.locator('article.msg.assistant[data-status="streaming"] details.reasoning[data-live="true"]');
    await live.waitFor({ timeout: 10000 });
    assert.match(await live.locator('summary').innerText(), /Thinking/);
    await waitAnswers(page, 1);
    const r = ui.lastAssistant(page).locator('details.reasoning');
    await r.waitFor();
    assert.equal(await r.getAttribute('open'), null, 'collapsed');
    // Watched live: how long it reasoned (the fake: about a second).
    assert.match(await r.locator('summary').innerText(), /Thought for \d+(\.\d)? s/);
    await r.locator('summary').click();
    assert.ok((await r.locator('.reasoning-text').innerText()).trim().length > 0);
    const sid = await ui.sessionId(page);
    const m = (await stateOf(server, sid)).assistantMessages.at(-1);
    assert.equal((await r.locator('.reasoning-text').innerText()).trim(), (m.reasoning || '').trim());
    await shot(page, 'features-reasoning-light.png');
    await page.reload();
    await ui.waitOnline(page);
    const again = ui.lastAssistant(page).locator('details.reasoning');
    await again.waitFor();
    assert.match(await again.locator('summary').innerText(), /Reasoning|Thought for/);
  });

  test('an error answer is an error callout; Retry asks again as a new version', T, async () => {
    await freshChat(page);
    await configure({ model: 'server-error' });
    await exchange(page, 'this will fail');
    const a = ui.lastAssistant(page);
    const callout = a.locator('.answer-error');
    await callout.waitFor();
    assert.equal(await a.getAttribute('data-error'), 'true');
    assert.ok(!(await a.locator('.md').innerText()).includes('[Error]'), 'the raw marker is not shown as text');
    const original = await ui.sessionId(page);
    await page.emulateMedia({ colorScheme: 'dark' });
    await shot(page, 'features-error-dark.png');
    await page.emulateMedia({ colorScheme: 'light' });

    // Fix the cause, then Retry: the new version uses the chat's settings now.
    await configure({ model: 'text' });
    await callout.getByRole('button', { name: /Retry/ }).click();
    await waitHashNot(page, original);
    await waitAnswers(page, 1);
    const b = ui.lastAssistant(page);
    assert.match(await b.locator('.md').innerText(), /Hello world!/);
    await b.locator('.ver-num', { hasText: '2/2' }).waitFor();
    assert.equal(await b.locator('.answer-error').count(), 0);
    const reqs = await fake.requests();
    assert.equal(reqs[reqs.length - 1].body.model, 'text');
  });

  test('a Stop before the first token leaves a visible "Stopped" mark with Retry', T, async () => {
    await freshChat(page);
    await configure({ model: 'hang' });
    await ui.send(page, 'you will never answer this');
    await page.locator('.thinking').waitFor();
    await sleep(300);
    await page.getByRole('button', { name: 'Stop generating' }).click();
    const mark = page.locator('[data-kind="stopped"], article.msg.assistant[data-status="stopped"] .stopped-note');
    await mark.first().waitFor({ timeout: 10000 });
    assert.match(await mark.first().innerText(), /Stopped/);
    await mark.first().getByRole('button', { name: /Retry/ }).waitFor();
    assert.ok(await page.locator('.thinking').isHidden());
    await page.emulateMedia({ colorScheme: 'dark' });
    await shot(page, 'features-stopped-dark.png');
    await page.emulateMedia({ colorScheme: 'light' });
    // It stays after a reload: it comes from the state, not from this page.
    await page.reload();
    await ui.waitOnline(page);
    await page.locator('[data-kind="stopped"], article.msg.assistant[data-status="stopped"] .stopped-note').first().waitFor();
    await configure({ model: 'text' });
  });

  test('no page errors, nothing fetched off the server', T, async () => {
    assert.deepEqual(browser.errors, []);
    assert.deepEqual(browser.offsite, []);
  });
});
