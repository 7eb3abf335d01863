// What a newcomer hits first (issue 12 item 10): a server with an auth token
// and a server with its own API prefix. The page learns both from
// GET /client.json, asks for the token in its own dialog, keeps it, and sends
// it on every call and stream. Screenshot: build/screenshots/token-dialog.png
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { SHOTS, Server, launch, ui } from './helpers.mjs';

const T = { timeout: 60000 };
const TOKEN = 's3cret';

/* Send `text` and wait for the answer: some of it while it streams, then all of it. */
async function sendAndStream(page, text) {
  await ui.send(page, text);
  await ui.users(page).filter({ hasText: text }).waitFor({ timeout: 10000 });
  const partial = await page.waitForFunction(() => {
    const t = document.querySelector('article.msg.assistant[data-status="streaming"] .md')?.textContent || '';
    return t.length > 0 ? t : null;
  }, null, { polling: 'raf', timeout: 20000 });
  assert.ok((await partial.jsonValue()).length > 0);
  const done = page.locator('article.msg.assistant[data-status="complete"]', { hasText: `Echo: ${text}` });
  await done.waitFor({ timeout: 30000 });
}

/* Every request the page makes, as method and path. */
function recordRequests(page) {
  const seen = [];
  page.on('request', (r) => { seen.push(`${r.method()} ${new URL(r.url()).pathname}`); });
  return seen;
}

describe('a server with an auth token', () => {
  let server;
  let browser;
  let page;
  const prompts = [];

  before(async () => {
    server = new Server({ chunkDelayMs: 25, extra: { auth: { token: TOKEN } } });
    await server.start();
    browser = await launch();
    page = browser.context.pages()[0] || (await browser.context.newPage());
    // window.prompt/alert would show up here: the page must use its own dialog.
    page.on('dialog', (d) => { prompts.push(d.message()); d.dismiss().catch(() => {}); });
  });

  after(async () => {
    await browser?.close();
    await server?.stop();
    server?.cleanup();
  });

  const tokenDialog = () => page.getByRole('dialog', { name: 'Access token' });
  const tokenBox = () => tokenDialog().getByLabel('Token', { exact: true });

  test('the page asks for the token; a wrong one is refused and asked again', T, async () => {
    const r = await fetch(`${server.url}/api/reflexor/sessions`);
    assert.equal(r.status, 401, 'the API really is closed without the token');

    await page.goto(`${server.url}/`);
    await tokenDialog().waitFor({ timeout: 10000 });
    assert.ok(await tokenBox().evaluate((e) => e === document.activeElement), 'the token box has the focus');
    await tokenBox().fill('wrong');
    await tokenBox().press('Enter');
    await tokenDialog().getByText(/refused/i).waitFor({ timeout: 10000 });
    assert.ok(await tokenDialog().isVisible(), 'still asking after a wrong token');
    assert.equal(await tokenBox().inputValue(), '', 'the wrong token was cleared');
    await tokenBox().press('Escape');
    assert.ok(await tokenDialog().isVisible(), 'Escape does not dismiss it: nothing works without the token');
    fs.mkdirSync(SHOTS, { recursive: true });
    await page.screenshot({ path: path.join(SHOTS, 'token-dialog.png') });

    await tokenBox().fill(TOKEN);
    await tokenDialog().getByRole('button', { name: 'Connect' }).click();
    await tokenDialog().waitFor({ state: 'hidden' });
    await ui.waitOnline(page);
  });

  test('with the token a message is sent and the answer streams', T, async () => {
    await sendAndStream(page, 'hello through the token');
    assert.deepEqual(prompts, [], 'no window.prompt or alert');
  });

  test('a reload does not ask again', T, async () => {
    const sid = await ui.sessionId(page);
    const seen = recordRequests(page);
    await page.reload();
    await ui.waitOnline(page);
    assert.ok(await tokenDialog().isHidden(), 'no token dialog after the reload');
    assert.equal(await ui.sessionId(page), sid);
    await page.locator('article.msg.assistant[data-status="complete"]', { hasText: 'Echo: hello through the token' }).waitFor();
    await sendAndStream(page, 'after the reload');
    assert.ok(seen.some((s) => s.startsWith('GET /api/reflexor/sessions/')), seen.join('\n'));
  });

  test('a kept token the server refuses is asked for again, saying why', T, async () => {
    await page.evaluate(() => localStorage.setItem('reflexor.token', 'stale'));
    await page.reload();
    await tokenDialog().getByText(/refused/i).waitFor({ timeout: 10000 });
    await tokenBox().fill(TOKEN);
    await tokenBox().press('Enter');
    await ui.waitOnline(page);
    assert.equal(await page.evaluate(() => localStorage.getItem('reflexor.token')), TOKEN);
  });

  test('the token changes under an open page: the stream is refused, the page asks', T, async () => {
    const cfg = JSON.parse(fs.readFileSync(server.config, 'utf8'));
    cfg.auth.token = 'n3w-s3cret';
    fs.writeFileSync(server.config, JSON.stringify(cfg));
    await server.restart();
    await tokenDialog().getByText(/refused/i).waitFor({ timeout: 20000 });
    await tokenBox().fill('n3w-s3cret');
    await tokenBox().press('Enter');
    await ui.waitOnline(page, 20000);
    await sendAndStream(page, 'with the new token');
    cfg.auth.token = TOKEN;
    fs.writeFileSync(server.config, JSON.stringify(cfg));
    await server.restart();
    await tokenDialog().waitFor({ timeout: 20000 });
    await tokenBox().fill(TOKEN);
    await tokenBox().press('Enter');
    await ui.waitOnline(page, 20000);
  });

  test('"Forget token" forgets it: the next load asks again', T, async () => {
    await page.getByRole('button', { name: 'Forget token' }).click();
    await tokenDialog().waitFor({ timeout: 10000 });
    assert.equal(await page.evaluate(() => localStorage.getItem('reflexor.token')), null);
    await tokenBox().fill(TOKEN);
    await tokenBox().press('Enter');
    await ui.waitOnline(page);
    await page.locator('article.msg.user', { hasText: 'after the reload' }).waitFor();
    assert.deepEqual(browser.errors, []);
    assert.deepEqual(browser.offsite, []);
  });
});

describe('a server with its own API prefix', () => {
  let server;
  let browser;
  let page;

  before(async () => {
    server = new Server({ chunkDelayMs: 25, extra: { api_prefix: '/custom/api' } });
    await server.start();
    browser = await launch();
    page = browser.context.pages()[0] || (await browser.context.newPage());
  });

  after(async () => {
    await browser?.close();
    await server?.stop();
    server?.cleanup();
  });

  test('the page uses the prefix the server gives: send, and the answer streams', T, async () => {
    const seen = recordRequests(page);
    await page.goto(`${server.url}/`);
    await ui.waitOnline(page);
    await sendAndStream(page, 'hello under a custom prefix');
    const api = seen.filter((s) => / \/(api|custom)\//.test(s));
    assert.ok(api.some((s) => s.startsWith('POST /custom/api/sessions/')), api.join('\n'));
    assert.deepEqual(api.filter((s) => !/ \/custom\/api\//.test(s)), [], 'nothing under the old prefix');
    assert.ok(await page.getByRole('button', { name: 'Forget token' }).isHidden(), 'no token, nothing to forget');
    assert.deepEqual(browser.errors, []);
  });
});
