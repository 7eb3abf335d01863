// Shared harness of the browser tests: the real server on 127.0.0.1 with a temp
// config, and Debian's Chromium driven by playwright-core (no browser download).
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const BIN = process.env.REFLEXOR_BIN || path.join(ROOT, 'build/reflexor');
export const WEB = process.env.REFLEXOR_WEB || path.join(ROOT, 'build/web');
export const SHOTS = path.join(ROOT, 'build/screenshots');
export const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
if (!fs.existsSync(CHROMIUM)) {
  throw new Error(`${CHROMIUM} is missing: install the Debian package chromium (scripts/deps.sh chromium)`);
}
export const API = '/api/reflexor';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/* A free loopback port: bind port 0, read it, close. */
export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

export function tempDir(prefix) {
  return fs.mkdtempSync(path.join(os.tmpdir(), `reflexor-${prefix}-`));
}

/*
 * The real server with the builtin brain. `chunkDelayMs` paces the streamed
 * answer; `db` (a file) survives restarts. start()/stop()/restart() by pid.
 */
export class Server {
  constructor({ chunkDelayMs = 40, db = null, extra = {} } = {}) {
    this.dir = tempDir('srv');
    this.db = db || path.join(this.dir, 'reflexor.db');
    this.config = path.join(this.dir, 'config.json');
    const cfg = {
      db: this.db,
      brain: { provider: 'builtin', builtin: { chunk_delay_ms: chunkDelayMs } },
      sse: { retry_ms: 500 },
      ...extra,
    };
    fs.writeFileSync(this.config, JSON.stringify(cfg, null, 2));
    this.port = 0;
    this.proc = null;
    this.log = '';
  }

  get url() { return `http://127.0.0.1:${this.port}`; }

  async start() {
    if (!this.port) this.port = await freePort();
    if (!fs.existsSync(BIN)) throw new Error(`${BIN} is missing: run make first`);
    this.proc = spawn(BIN, ['--config', this.config, '--listen', `127.0.0.1:${this.port}`, '--web', WEB], {
      cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'],
    });
    const keep = (d) => { this.log = (this.log + d.toString()).slice(-20000); };
    this.proc.stdout.on('data', keep);
    this.proc.stderr.on('data', keep);
    const proc = this.proc;
    const deadline = Date.now() + 10000;
    for (;;) {
      if (proc.exitCode !== null) throw new Error(`server exited (${proc.exitCode}):\n${this.log}`);
      try {
        const r = await fetch(`${this.url}/healthz`);
        if (r.ok) return this;
      } catch { /* not up yet */ }
      if (Date.now() > deadline) throw new Error(`server did not come up:\n${this.log}`);
      await sleep(50);
    }
  }

  async stop(signal = 'SIGTERM') {
    const p = this.proc;
    if (!p || p.exitCode !== null || p.signalCode !== null) return;
    const done = new Promise((r) => p.once('exit', r));
    process.kill(p.pid, signal);
    const t = setTimeout(() => { try { process.kill(p.pid, 'SIGKILL'); } catch { /* gone */ } }, 5000);
    await done;
    clearTimeout(t);
    this.exit = { code: p.exitCode, signal: p.signalCode };
  }

  /* After stop(): a SIGTERM ends the server with 0, and a sanitizer build says
     nothing (ASan's leak report and UBSan's runtime errors go to stderr). */
  cleanExit() {
    const bad = /ERROR: (Address|Leak)Sanitizer|runtime error:/.exec(this.log);
    if (bad) return `sanitizer: ${this.log.slice(Math.max(0, bad.index - 200), bad.index + 2000)}`;
    if (!this.exit || this.exit.code !== 0) return `exit ${JSON.stringify(this.exit)}:\n${this.log.slice(-2000)}`;
    return '';
  }

  async restart() {
    await this.stop();
    await this.start();
  }

  async api(method, p, body) {
    const r = await fetch(this.url + API + p, {
      method,
      headers: body ? { 'Content-Type': 'application/json' } : {},
      body: body ? JSON.stringify(body) : undefined,
    });
    const text = await r.text();
    return { status: r.status, body: text ? JSON.parse(text) : null };
  }

  cleanup() {
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

/* Chromium with a fresh profile; every request must stay on 127.0.0.1. */
export async function launch(opts = {}) {
  const profile = tempDir('chromium');
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
    ],
    viewport: { width: 1280, height: 800 },
    ...opts,
  });
  const offsite = [];
  await context.route((url) => !/^(http:\/\/127\.0\.0\.1[:/]|about:|data:|blob:)/.test(url.href), (route) => {
    offsite.push(route.request().url());
    route.abort();
  });
  const errors = [];
  context.on('weberror', (e) => errors.push(String(e.error())));
  return {
    context,
    offsite,
    errors,
    async close() {
      await context.close();
      fs.rmSync(profile, { recursive: true, force: true });
    },
  };
}

/* Page helpers over the UI's data-* hooks. */
export const ui = {
  async send(page, text) {
    const input = page.getByLabel('Message', { exact: true });
    await input.fill(text);
    await input.press('Enter');
  },
  assistant: (page) => page.locator('article.msg.assistant'),
  users: (page) => page.locator('article.msg.user'),
  lastAssistant: (page) => page.locator('article.msg.assistant').last(),
  async waitOnline(page, timeout = 10000) {
    await page.waitForSelector('#app[data-conn="online"]', { timeout });
  },
  async sessionId(page) {
    return page.evaluate(() => decodeURIComponent(location.hash.replace(/^#\//, '')));
  },
};

export { sleep };
