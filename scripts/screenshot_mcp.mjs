// scripts/screenshot_mcp.mjs - a screenshot of the web UI using an MCP server,
// and the session's transcript, for an issue note. A tool, not a test.
//
//   node scripts/screenshot_mcp.mjs [OUT_DIR]        default /tmp/notes
//
// Starts build/reflexor (REFLEXOR_BIN) with the web UI (REFLEXOR_WEB, default
// build/web: run `make web-assets` first) on a free 127.0.0.1 port, with the
// reference server-filesystem as mcpServers.fs on a fresh temp folder
// (write_file approved "auto"; read_text_file is read-only, so auto too). In
// headless Chromium (/usr/bin/chromium, CHROMIUM) it sends
//   /call fs__write_file {"path":"<tmp>/notes.txt","content":"Reflexor was here"}
//   /call fs__read_text_file {"path":"<tmp>/notes.txt"}
// waits for each answer, opens the two tool cards, and writes
//   OUT_DIR/mcp_fs.png             the full page
//   OUT_DIR/mcp_fs_transcript.txt  user and assistant messages and tool
//                                  records, from GET /sessions/<sid>
// The server, the browser and the temp folders are stopped and removed by
// pid / path, also on failure.
import fs from 'node:fs';
import path from 'node:path';
import { Server, ROOT, launch, tempDir, ui } from '../tests/browser/helpers.mjs';

const OUT = path.resolve(process.argv[2] || '/tmp/notes');
const FS_SERVER = path.join(ROOT, 'node_modules/@modelcontextprotocol/server-filesystem/dist/index.js');
const CONTENT = 'Reflexor was here';

/* Until GET /tools says the MCP server is up (it connects in the background). */
async function waitServerUp(server, name, ms = 20000) {
  const deadline = Date.now() + ms;
  let last = null;
  while (Date.now() < deadline) {
    const r = await server.api('GET', '/tools');
    last = (r.body?.servers || []).find((s) => s.name === name);
    if (last?.status === 'up') return last;
    await new Promise((res) => setTimeout(res, 100));
  }
  throw new Error(`MCP server '${name}' not up: ${JSON.stringify(last)}\n${server.log}`);
}

/* Send `text`, wait until a new assistant answer is complete and matches `pattern`. */
async function exchange(page, text, pattern) {
  const n = await page.locator('article.msg.assistant[data-status="complete"]').count();
  await ui.send(page, text);
  await page.waitForFunction(([count, src]) => {
    const all = document.querySelectorAll('article.msg.assistant[data-status="complete"]');
    return all.length > count && new RegExp(src).test(all[all.length - 1].textContent);
  }, [n, pattern.source], { timeout: 30000 });
}

function transcript(state, url, dir) {
  const items = [
    ...state.userMessages.map((m) => ({ t: m.receivedAt, s: `USER      ${m.content}` })),
    ...state.assistantMessages.map((m) => ({ t: m.receivedAt, s: `ASSISTANT ${m.content}  [${m.status}]` })),
    ...state.toolCallRecords.map((c) => ({
      t: c.calledAt,
      s: `TOOL      ${c.name} ${c.parameters}\n          -> ${c.result ? `${c.result.isSuccess ? 'ok' : 'error'}: ` +
        JSON.stringify(c.result.isSuccess ? c.result.content : c.result.error) : '(no result)'}` +
        `  [id ${c.id}, called ${c.calledAt}, answered ${c.result?.receivedAt ?? '-'}]`,
    })),
  ].sort((a, b) => a.t - b.t);
  return [
    `Reflexor session transcript (${url}), ${new Date().toISOString()}`,
    `mcpServers.fs: server-filesystem on ${dir}`,
    '',
    ...items.map((x) => `${new Date(x.t).toISOString()}  ${x.s}`),
    '',
  ].join('\n');
}

async function main() {
  fs.mkdirSync(OUT, { recursive: true });
  const dir = fs.realpathSync(tempDir('mcp-fs'));
  const file = path.join(dir, 'notes.txt');
  const server = new Server({
    chunkDelayMs: 15,
    extra: {
      mcpServers: {
        fs: { command: 'node', args: [FS_SERVER, dir], tools: { approval: { write_file: 'auto' } } },
      },
    },
  });
  let browser = null;
  try {
    await server.start();
    await waitServerUp(server, 'fs');
    browser = await launch({ viewport: { width: 1280, height: 800 }, colorScheme: 'light' });
    const page = browser.context.pages()[0] || (await browser.context.newPage());
    await page.goto(`${server.url}/`);
    await ui.waitOnline(page);

    await exchange(page, `/call fs__write_file ${JSON.stringify({ path: file, content: CONTENT })}`,
      /Tool 'fs__write_file' returned/);
    await exchange(page, `/call fs__read_text_file ${JSON.stringify({ path: file })}`,
      new RegExp(`Tool 'fs__read_text_file' returned: ${CONTENT}`));
    if (fs.readFileSync(file, 'utf8') !== CONTENT) throw new Error(`${file} does not hold '${CONTENT}'`);

    // Open the two tool cards: their arguments and results show in the picture.
    for (const name of ['fs__write_file', 'fs__read_text_file']) {
      const card = page.locator(`details.tool[data-name="${name}"][data-state="success"]`);
      await card.locator('summary').click();
      await card.locator('.tool-body').waitFor();
    }
    // The thread scrolls inside a full-height layout, so a "full page" shot is
    // one screen: grow the window until the whole conversation fits.
    const extra = await page.evaluate(() => Math.max(0, ...[...document.querySelectorAll('*')]
      .filter((e) => /auto|scroll/.test(getComputedStyle(e).overflowY))
      .map((e) => e.scrollHeight - e.clientHeight)));
    await page.setViewportSize({ width: 1280, height: 800 + extra + 24 });
    await page.waitForTimeout(300);
    await page.mouse.move(0, 0);
    const shot = path.join(OUT, 'mcp_fs.png');
    await page.screenshot({ path: shot, fullPage: true });

    const sid = await ui.sessionId(page);
    const st = await server.api('GET', `/sessions/${encodeURIComponent(sid)}`);
    if (st.status !== 200) throw new Error(`GET /sessions/${sid}: HTTP ${st.status}`);
    const text = transcript(st.body.state || st.body, `${server.url}/#/${sid}`, dir);
    const tfile = path.join(OUT, 'mcp_fs_transcript.txt');
    fs.writeFileSync(tfile, text);
    if (browser.errors.length) console.error(`page errors: ${browser.errors.join('; ')}`);
    if (browser.offsite.length) console.error(`blocked off-site requests: ${browser.offsite.join(', ')}`);
    console.log(`${shot}\n${tfile}`);
    process.stdout.write(text);
  } finally {
    await browser?.close().catch(() => {});
    await server.stop().catch(() => {});
    server.cleanup();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((e) => {
  console.error(`screenshot_mcp: ${e.stack || e}`);
  process.exitCode = 1;
});
