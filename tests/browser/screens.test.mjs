// A full conversation (markdown, code, tool cards, compressed history), the
// controls' labels and keyboard reach, and the screenshots for review:
// build/screenshots/{desktop-light,desktop-dark,phone,phone-sidebar}.png
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { SHOTS, Server, launch, sleep, ui } from './helpers.mjs';

const T = { timeout: 90000 };

const MARKDOWN = [
  'Here is a **markdown** sample with a list and some code:',
  '',
  '1. Streaming answers, token by token',
  '2. Tool calls shown as `cards`',
  '3. A [link](https://example.org) that opens safely',
  '',
  '```c',
  '#include <stdio.h>',
  '',
  'int main(void)',
  '{',
  '    puts("hello, reflexor");',
  '    return 0;',
  '}',
  '```',
].join('\n');

describe('conversation, accessibility and screenshots', () => {
  let server;
  let browser;
  let page;

  before(async () => {
    // Compress early, so the banner shows up in a short conversation.
    server = new Server({
      chunkDelayMs: 8,
      extra: { brain: { provider: 'builtin', builtin: { chunk_delay_ms: 8, compress_after: 6, compress_keep: 4 } } },
    });
    await server.start();
    browser = await launch({ viewport: { width: 1440, height: 900 }, colorScheme: 'light' });
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

  async function exchange(text, answerPattern) {
    const n = await ui.assistant(page).count();
    await ui.send(page, text);
    await page.waitForFunction(
      ([count, src]) => {
        const all = document.querySelectorAll('article.msg.assistant[data-status="complete"]');
        return all.length > count && new RegExp(src).test(all[all.length - 1].textContent);
      },
      [n, answerPattern.source], { timeout: 30000 },
    );
  }

  test('a longer chat: tools, markdown with a copyable code block, compressed history', T, async () => {
    await exchange('Hi Reflexor! Tell me what you can do.', /Echo: Hi Reflexor/);
    await exchange(MARKDOWN, /hello, reflexor/);
    await exchange('what time is it?', /\d{2}:\d{2}/);
    await exchange('what is 12*(3+4)?', /84/);

    const clock = page.locator('details.tool[data-name="clock"][data-state="success"]');
    await clock.waitFor();
    await page.locator('details.tool[data-name="calculator"][data-state="success"]', { hasText: '84' }).waitFor();
    const answer = page.locator('article.msg.assistant', { hasText: 'hello, reflexor' });
    assert.equal(await answer.locator('.md ol > li').count(), 3);
    assert.equal(await answer.locator('.md a[href="https://example.org"][rel~="noopener"][target="_blank"]').count(), 1);
    const block = answer.locator('.code-block');
    assert.equal(await block.locator('.code-lang').innerText(), 'c');
    await block.getByRole('button', { name: 'Copy c to clipboard' }).click();
    await block.locator('.code-copy.done').waitFor();

    // The builtin brain compressed the older turns: a banner, the summary on demand.
    const banner = page.locator('.compressed');
    await banner.waitFor({ timeout: 10000 });
    const show = banner.getByRole('button', { name: 'Show summary' });
    await show.click();
    const summary = page.locator('#summary-text');
    await summary.waitFor();
    assert.ok((await summary.innerText()).trim().length > 0, 'the summary is shown');
    const st = (await server.api('GET', `/sessions/${encodeURIComponent(await ui.sessionId(page))}`)).body;
    assert.ok(st.contextSummary.length > 0 && st.summaryCutAt > 0);
    await banner.getByRole('button', { name: 'Hide summary' }).click();
    await summary.waitFor({ state: 'hidden' });
  });

  test('every control has a name and the main ones are reachable with Tab', T, async () => {
    const unnamed = await page.evaluate(() => [...document.querySelectorAll('button, a[href], textarea, input, summary')]
      .filter((e) => e.offsetParent !== null)
      .filter((e) => !(e.getAttribute('aria-label') || e.textContent.trim() || e.labels?.length))
      .map((e) => e.outerHTML.slice(0, 80)));
    assert.deepEqual(unnamed, []);
    await page.evaluate(() => document.activeElement?.blur());
    const seen = new Set();
    for (let i = 0; i < 60; i++) {
      await page.keyboard.press('Tab');
      const name = await page.evaluate(() => {
        const e = document.activeElement;
        if (!e) return '';
        return (e.getAttribute('aria-label') || e.labels?.[0]?.textContent || e.textContent.trim() || e.id).slice(0, 40);
      });
      seen.add(name);
    }
    for (const want of ['New chat', 'Show inspector', 'Message', 'Switch to dark mode', 'Delete chat', 'Copy answer', 'Tool calculator']) {
      assert.ok([...seen].some((s) => s.includes(want)), `Tab reaches ${want}: ${[...seen].join(' | ')}`);
    }
  });

  test('screenshots: desktop light, desktop dark with the inspector, phone', T, async () => {
    await page.evaluate(() => document.activeElement?.blur());
    await page.mouse.move(0, 0);
    await sleep(300);
    await page.screenshot({ path: path.join(SHOTS, 'desktop-light.png') });

    await page.emulateMedia({ colorScheme: 'dark' });
    await page.getByRole('button', { name: 'Show inspector' }).click();
    await page.locator('#timeline li').first().waitFor();
    await page.waitForFunction(() => getComputedStyle(document.body).backgroundColor === 'rgb(33, 33, 33)');
    await sleep(300);
    await page.screenshot({ path: path.join(SHOTS, 'desktop-dark.png') });
    await page.getByRole('button', { name: 'Hide inspector' }).click();

    await page.emulateMedia({ colorScheme: 'light' });
    await page.setViewportSize({ width: 390, height: 844 });
    await sleep(300);
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 0, `no sideways scrolling at phone width (${overflow}px)`);
    assert.ok(await page.locator('#sidebar').evaluate((e) => e.getBoundingClientRect().right <= 0), 'sidebar tucked away');
    await page.screenshot({ path: path.join(SHOTS, 'phone.png') });
    await page.getByRole('button', { name: 'Open chat list' }).click();
    await page.waitForFunction(() => document.getElementById('sidebar').getBoundingClientRect().left >= 0);
    await sleep(300);
    await page.screenshot({ path: path.join(SHOTS, 'phone-sidebar.png') });
    await page.keyboard.press('Escape');
    await page.waitForFunction(() => document.getElementById('sidebar').getBoundingClientRect().right <= 0);

    for (const f of ['desktop-light.png', 'desktop-dark.png', 'phone.png', 'phone-sidebar.png']) {
      assert.ok(fs.statSync(path.join(SHOTS, f)).size > 10000, `${f} written`);
    }
    assert.deepEqual(browser.errors, []);
    assert.deepEqual(browser.offsite, [], 'no request left 127.0.0.1');
  });
});
