// Users (issue 30, SPEC 4.4 and 7): a server in `keys` mode on a SQLite log,
// with alice and bob made by the CLI before it starts. Two browsers (one a
// phone in dark mode), each signs in with its own key at the page's prompt,
// each writes a chat with a word of its own, and each sees only its own chat
// in the list, in search and live; the sidebar names who is signed in, an
// admin is marked, and "Sign out" forgets the key and asks again; a key
// removed with `users remove` is asked for again, and another person's key
// given then starts the page over at that person's chats. Then a
// server in `trusted-header` mode: no prompt, the proxy's name, no sign-out.
// Screenshots: build/screenshots/users-*.png
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { API, BIN, ROOT, SHOTS, Server, launch, sleep, ui } from './helpers.mjs';

const T = { timeout: 60000 };
const PHONE = { viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true, deviceScaleFactor: 2 };

/* `reflexor users add NAME [--admin]` on the server's store: the key, printed once. */
function addUser(server, name, admin = false) {
  const out = execFileSync(BIN, ['--config', server.config, '--db', server.db, 'users', 'add', name,
    ...(admin ? ['--admin'] : [])], { cwd: ROOT, encoding: 'utf8' });
  const lines = out.split('\n').filter(Boolean);
  assert.equal(lines.length, 1, `users add prints one line: ${out}`);
  assert.match(lines[0], /^rxk_\S+$/);
  return lines[0];
}

/* The API as one user (no key: nobody). */
async function apiAs(server, key, p) {
  const r = await fetch(server.url + API + p, { headers: key ? { Authorization: `Bearer ${key}` } : {} });
  const text = await r.text();
  return { status: r.status, body: text ? JSON.parse(text) : null };
}

const keyDialog = (page) => page.getByRole('dialog', { name: 'API key' });
const keyBox = (page) => keyDialog(page).getByLabel('API key', { exact: true });

/* Answer the prompt with `key` and wait until the page is online. */
async function signIn(page, key) {
  await keyDialog(page).waitFor({ timeout: 10000 });
  await keyBox(page).fill(key);
  await keyDialog(page).getByRole('button', { name: 'Sign in' }).click();
  await keyDialog(page).waitFor({ state: 'hidden' });
  await ui.waitOnline(page);
}

/* Send `text` and wait for the whole answer. */
async function exchange(page, text) {
  await ui.send(page, text);
  await page.locator('article.msg.assistant[data-status="complete"]', { hasText: `Echo: ${text}` })
    .waitFor({ timeout: 30000 });
}

const listedIds = (page) => page.evaluate(
  () => [...document.querySelectorAll('#session-list .session')].map((e) => e.dataset.id));

/* The chat list holds exactly `ids` (search results while a query is typed). */
async function waitListed(page, ids) {
  await page.waitForFunction((want) => {
    const got = [...document.querySelectorAll('#session-list .session')].map((e) => e.dataset.id);
    return got.length === want.length && want.every((id) => got.includes(id));
  }, ids, { timeout: 10000 });
}

const whoName = (page) => page.locator('#who-name');

async function shot(page, name) {
  fs.mkdirSync(SHOTS, { recursive: true });
  await page.evaluate(() => { document.getElementById('toast').hidden = true; });
  await page.screenshot({ path: path.join(SHOTS, name) });
}

describe('users: every chat belongs to someone', () => {
  let server;
  let keys;
  let alice;  // {browser, page} on a desktop, light
  let bob;    // {browser, page} on a phone, dark
  const sids = {};

  before(async () => {
    server = new Server({ chunkDelayMs: 15, extra: { auth: { mode: 'keys' } } });
    keys = {
      alice: addUser(server, 'alice'),
      bob: addUser(server, 'bob'),
      root: addUser(server, 'root', true),
    };
    await server.start();
    const open = async (opts) => {
      const browser = await launch(opts);
      return { browser, page: browser.context.pages()[0] || (await browser.context.newPage()) };
    };
    alice = await open({ colorScheme: 'light' });
    bob = await open({ ...PHONE, colorScheme: 'dark' });
  });

  after(async () => {
    await alice?.browser.close();
    await bob?.browser.close();
    await server?.stop();
    server?.cleanup();
  });

  test('the server is in keys mode: the API is closed without a key', T, async () => {
    const cfg = await (await fetch(`${server.url}/client.json`)).json();
    assert.equal(cfg.authMode, 'keys');
    assert.equal(cfg.authRequired, true);
    assert.equal((await apiAs(server, '', '/sessions')).status, 401);
    const me = await apiAs(server, keys.alice, '/me');
    assert.deepEqual([me.status, me.body.name, me.body.admin], [200, 'alice', false]);
  });

  test('each asks for an API key; a wrong one is refused; then each is named', T, async () => {
    for (const [who, { page }] of [['alice', alice], ['bob', bob]]) {
      await page.goto(`${server.url}/`);
      await keyDialog(page).waitFor({ timeout: 10000 });
      assert.ok(await keyBox(page).evaluate((e) => e === document.activeElement), 'the key box has the focus');
      if (who === 'alice') {
        await keyBox(page).fill('rxk_not-a-key');
        await keyBox(page).press('Enter');
        await keyDialog(page).getByText(/refused that API key/).waitFor({ timeout: 10000 });
        await shot(page, 'users-key-dialog.png');
      }
      await signIn(page, keys[who]);
      assert.equal(await page.evaluate(() => localStorage.getItem('reflexor.token')), keys[who],
        'the key is kept as the token is');
    }
    await whoName(alice.page).waitFor();
    assert.equal(await whoName(alice.page).textContent(), 'alice');
    assert.ok(await alice.page.locator('#who-admin').isHidden(), 'alice is no admin');
    assert.ok(await alice.page.getByRole('button', { name: 'Sign out' }).isVisible());
    assert.equal(await alice.page.getByRole('button', { name: 'Forget token' }).count(), 0);
    // On the phone the sidebar is a drawer: the name is in it.
    await bob.page.getByRole('button', { name: 'Open chat list' }).click();
    await whoName(bob.page).waitFor();
    assert.equal(await whoName(bob.page).textContent(), 'bob');
    await sleep(300);
    const over = await bob.page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(over <= 0, `nothing scrolls sideways on a phone (${over}px)`);
    await shot(bob.page, 'users-phone-dark.png');
    await bob.page.getByRole('button', { name: 'Close chat list' }).click();
  });

  test('each writes a chat with a word of its own', T, async () => {
    await exchange(alice.page, 'alice likes marmalade');
    sids.alice = await ui.sessionId(alice.page);
    await exchange(bob.page, 'bob grows tamarind');
    sids.bob = await ui.sessionId(bob.page);
    assert.ok(sids.alice && sids.bob && sids.alice !== sids.bob);
  });

  test('each list shows only its own chat, live and after a reload', T, async () => {
    await waitListed(alice.page, [sids.alice]);
    await waitListed(bob.page, [sids.bob]);
    await sleep(1000); // the chat-list streams had time to bring the other's
    assert.deepEqual(await listedIds(alice.page), [sids.alice]);
    assert.deepEqual(await listedIds(bob.page), [sids.bob]);
    await alice.page.reload();
    await ui.waitOnline(alice.page);
    await waitListed(alice.page, [sids.alice]);
    assert.ok(await keyDialog(alice.page).isHidden(), 'a reload does not ask again');
    const other = await apiAs(server, keys.alice, `/sessions/${encodeURIComponent(sids.bob)}`);
    assert.equal(other.status, 404, "bob's chat is no chat to alice");
  });

  test("search finds one's own words, never the other's", T, async () => {
    const search = (page) => page.getByRole('searchbox', { name: /Search chats/ });
    await search(alice.page).fill('tamarind');
    await alice.page.locator('#session-empty', { hasText: 'No chats match' }).waitFor();
    assert.deepEqual(await listedIds(alice.page), []);
    await search(alice.page).fill('marmalade');
    await waitListed(alice.page, [sids.alice]);
    await search(alice.page).press('Escape');

    await bob.page.getByRole('button', { name: 'Open chat list' }).click();
    await search(bob.page).fill('marmalade');
    await bob.page.locator('#session-empty', { hasText: 'No chats match' }).waitFor();
    await search(bob.page).fill('tamarind');
    await waitListed(bob.page, [sids.bob]);
    await search(bob.page).press('Escape');
    await bob.page.getByRole('button', { name: 'Close chat list' }).click();
  });

  test("a removed key is asked for again; another's key starts the page over for them", T, async () => {
    const { page } = alice;
    execFileSync(BIN, ['--config', server.config, '--db', server.db, 'users', 'remove', 'alice'],
      { cwd: ROOT, encoding: 'utf8' });
    assert.equal((await apiAs(server, keys.alice, '/me')).status, 401, 'the key stopped working at once');
    await ui.send(page, 'after my key was removed');
    await keyDialog(page).getByText(/refused that API key/).waitFor({ timeout: 20000 });
    // Someone else at this browser: nothing of alice's may stay on screen.
    await keyBox(page).fill(keys.bob);
    await keyBox(page).press('Enter');
    await page.waitForFunction(() => document.getElementById('who-name')?.textContent === 'bob', null,
      { timeout: 20000 });
    await ui.waitOnline(page);
    await waitListed(page, [sids.bob]);
    assert.equal(await ui.sessionId(page), sids.bob, "bob's own chat is open, not alice's");
    assert.equal(await page.locator('article.msg', { hasText: 'marmalade' }).count(), 0);
  });

  test('"Sign out" forgets the key and asks again; an admin is marked', T, async () => {
    const { page } = alice;
    await shot(page, 'users-signed-in.png');
    await page.getByRole('button', { name: 'Sign out' }).click();
    await keyDialog(page).waitFor({ timeout: 10000 });
    assert.equal(await page.evaluate(() => localStorage.getItem('reflexor.token')), null);
    assert.equal(await page.evaluate(() => location.hash), '', "alice's chat is not the next person's address");
    assert.equal(await keyBox(page).inputValue(), '');

    await signIn(page, keys.root);
    await page.waitForFunction(() => document.getElementById('who-name').textContent === 'root');
    assert.ok(await page.locator('#who-admin').isVisible(), 'an admin is marked');
    assert.equal(await page.locator('#who-admin').textContent(), 'admin');
    await page.emulateMedia({ colorScheme: 'dark' });
    await shot(page, 'users-admin-dark.png');
    await page.emulateMedia({ colorScheme: 'light' });
  });

  test('no page errors, nothing fetched off the server', T, async () => {
    for (const { browser } of [alice, bob]) {
      assert.deepEqual(browser.errors, []);
      assert.deepEqual(browser.offsite, []);
    }
  });
});

// Behind a proxy that signs people in (trusted-header): the page asks nothing,
// names the user the proxy names and keeps no sign-out of its own. The
// browser's own header stands in for nginx (the server trusts loopback).
describe('users: named by a proxy (trusted-header)', () => {
  let server;
  let browser;
  let page;

  before(async () => {
    server = new Server({ chunkDelayMs: 15, extra: { auth: { mode: 'trusted-header', admins: ['carol'] } } });
    await server.start();
    browser = await launch({ ...PHONE, colorScheme: 'light', extraHTTPHeaders: { 'X-Remote-User': 'carol' } });
    page = browser.context.pages()[0] || (await browser.context.newPage());
  });

  after(async () => {
    await browser?.close();
    await server?.stop();
    server?.cleanup();
  });

  test('no prompt, the name and the admin mark, no sign-out button', T, async () => {
    const prompts = [];
    page.on('dialog', (d) => { prompts.push(d.message()); d.dismiss().catch(() => {}); });
    await page.goto(`${server.url}/`);
    await ui.waitOnline(page);
    await exchange(page, 'carol checks the proxy');
    await page.getByRole('button', { name: 'Open chat list' }).click();
    await whoName(page).waitFor();
    assert.equal(await whoName(page).textContent(), 'carol');
    assert.ok(await page.locator('#who-admin').isVisible(), 'carol is in auth.admins');
    assert.ok(await page.locator('#auth-dialog').isHidden(), 'nothing to ask behind the proxy');
    assert.equal(await page.getByRole('button', { name: /Sign out|Forget token/ }).count(), 0);
    assert.deepEqual(prompts, []);
    await sleep(300);
    await shot(page, 'users-proxy-phone.png');
    assert.deepEqual(browser.errors, []);
    assert.deepEqual(browser.offsite, []);
  });
});
