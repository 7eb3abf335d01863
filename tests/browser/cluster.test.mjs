// The web UI through nginx in front of three nodes on one PostgreSQL log
// (SPEC 6.1, issue 19), in Debian's Chromium: an answer streams, the node(s)
// serving the page's streams are killed with kill -9, and the page keeps
// streaming and shows the complete answer once its streams reconnected
// through nginx to a live node. Skipped only when PostgreSQL is not installed.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Cluster, PgTmp, sleep } from '../cluster/harness.mjs';
import { launch, ui } from './helpers.mjs';

const T = { timeout: 120000 };
const pg = await PgTmp.start();

describe('web UI across a node kill', () => {
  let cluster;
  let browser;
  let page;
  let failed = false;
  const seen = []; // {at, kind: 'moorex'|'messages', upstream}

  before(async () => {
    // A slow answer: about 6 s of chunks, so the kill lands in the middle.
    cluster = new Cluster(pg, { nodes: 3, leaseMs: 1000, chunkDelayMs: 120, chunkChars: 3 });
    await cluster.start();
    browser = await launch();
    page = browser.context.pages()[0] || (await browser.context.newPage());
    page.on('response', (r) => {
      const u = r.url();
      const kind = /\/moorex(\?|$)/.test(u) ? 'moorex' : /\/messages\//.test(u) ? 'messages' : null;
      if (kind) seen.push({ at: Date.now(), kind, upstream: r.headers()['x-reflexor-upstream'] || '?' });
    });
    await page.goto(`${cluster.nginx.url}/`);
    await ui.waitOnline(page, 20000);
  });

  after(async () => {
    await browser?.close();
    if (cluster) {
      await cluster.stop();
      cluster.cleanup(failed);
    }
    pg.stop();
  });

  test('kill -9 the node serving the streams mid-answer: the page reconnects and shows the whole answer', T, async () => {
    try {
      const text = 'Through nginx to three nodes: this answer keeps streaming while the node that serves it dies';
      await ui.send(page, text);
      await page.waitForFunction(() => {
        const a = document.querySelector('article.msg.assistant[data-status="streaming"] .md');
        return (a?.textContent || '').length > 8;
      }, null, { polling: 100, timeout: 20000 });
      const last = (kind) => seen.filter((s) => s.kind === kind).at(-1);
      const victims = new Set([last('moorex')?.upstream, last('messages')?.upstream].filter((u) => u && u !== '?'));
      assert.ok(victims.size > 0, `no stream of the page named its node: ${JSON.stringify(seen)}`);
      const killedAt = Date.now();
      const nodes = [...victims].map((u) => cluster.byPort(u.split(':').pop()));
      for (const n of nodes) await n.kill9();
      console.log(`# killed node(s) ${nodes.map((n) => n.index)} serving the page's streams ` +
                  `(moorex on ${last('moorex')?.upstream}, messages on ${last('messages')?.upstream})`);

      // The page keeps streaming: after the kill it shows the answer still growing...
      await page.waitForFunction(() => {
        const a = document.querySelector('article.msg.assistant[data-status="streaming"] .md');
        return (a?.textContent || '').length > 0;
      }, null, { polling: 100, timeout: 20000 });
      // ...and then the whole of it.
      const done = page.locator('article.msg.assistant[data-status="complete"]');
      await done.waitFor({ timeout: 40000 });
      const full = (await done.locator('.md').innerText()).replace(/\s+/g, ' ').trim();
      assert.equal(full, `Echo: ${text}`);
      await ui.waitOnline(page, 20000);
      assert.equal(await ui.assistant(page).count(), 1, 'one answer, not two');
      const after = seen.filter((s) => s.at > killedAt);
      assert.ok(after.some((s) => s.kind === 'moorex' && !victims.has(s.upstream)) ||
                !victims.has(last('moorex').upstream),
                `the session stream did not move to a live node: ${JSON.stringify(seen)}`);

      // Service goes on: the killed nodes come back, a new message is answered.
      for (const n of nodes) await n.start();
      await sleep(500);
      await ui.send(page, 'and one more after the kill');
      await page.locator('article.msg.assistant[data-status="complete"]').nth(1).waitFor({ timeout: 40000 });
      assert.match(await ui.lastAssistant(page).innerText(), /Echo: and one more after the kill/);
      assert.deepEqual(browser.errors, [], 'no errors in the page');
      assert.deepEqual(browser.offsite, [], 'nothing left 127.0.0.1');
    } catch (e) {
      failed = true;
      throw e;
    }
  });
});
