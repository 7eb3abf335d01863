// The cluster's test harness (SPEC 6.1, issue 19): a throwaway PostgreSQL
// (scripts/pgtmp.sh in a fresh temp folder), N real Reflexor nodes on the same
// database, nginx in front (config/nginx-cluster.conf with the real ports), and
// the tools to kill -9 and restart any of them. Everything runs on 127.0.0.1
// (PostgreSQL on a Unix socket) and is stopped by pid: in stop(), on SIGINT /
// SIGTERM and when the process exits, also after a failed test.
//
// RX_SERVER (or REFLEXOR_BIN) picks the binary: the plain or the ASan build.
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const BIN = path.resolve(ROOT, process.env.RX_SERVER || process.env.REFLEXOR_BIN || 'build/reflexor');
export const WEB = path.resolve(ROOT, process.env.REFLEXOR_WEB || 'build/web');
export const API = '/api/reflexor';
const PGTMP = path.join(ROOT, 'scripts/pgtmp.sh');
const NGINX = fs.existsSync('/usr/sbin/nginx') ? '/usr/sbin/nginx' : 'nginx';
if (NGINX === 'nginx' && spawnSync('nginx', ['-v']).error) {
  throw new Error('nginx is missing: install the Debian package nginx (scripts/deps.sh nginx)');
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export function tempDir(prefix) {
  return fs.mkdtempSync(path.join(os.tmpdir(), `rx-${prefix}-`));
}

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

/* ---- what must be stopped whatever happens ---------------------------------- */

const live = new Set(); // {kind, pid, stopSync()}

function reapAllSync() {
  for (const it of [...live]) {
    try { it.stopSync(); } catch { /* already gone */ }
    live.delete(it);
  }
}
process.once('exit', reapAllSync);
for (const sig of ['SIGINT', 'SIGTERM']) {
  process.once(sig, () => {
    reapAllSync();
    process.exit(130);
  });
}

/* ---- PostgreSQL ------------------------------------------------------------- */

function pgtmp(...args) {
  const r = spawnSync(PGTMP, args, { encoding: 'utf8', timeout: 120000 });
  return { code: r.status, out: (r.stdout || '').trim(), err: (r.stderr || '').trim() };
}

/*
 * A throwaway PostgreSQL. `PgTmp.start()` resolves to an instance, or throws,
 * naming the package, when PostgreSQL is not installed (pgtmp exits 3): the
 * tests fail then, they never skip.
 */
export class PgTmp {
  static async start() {
    const dir = tempDir('pg');
    const r = pgtmp('start', dir);
    if (r.code === 3) {
      fs.rmSync(dir, { recursive: true, force: true });
      throw new Error(`PostgreSQL is not installed (scripts/pgtmp.sh: ${r.err}): install the Debian package postgresql (scripts/deps.sh postgresql)`);
    }
    if (r.code !== 0) throw new Error(`pgtmp start failed (${r.code}): ${r.err}`);
    const pg = new PgTmp(dir, r.out);
    return pg;
  }

  constructor(dir, url) {
    this.dir = dir;
    this.url = url;
    this.guard = { kind: 'postgres', stopSync: () => pgtmp('stop', this.dir) };
    live.add(this.guard);
  }

  /* A fresh database in this cluster: its URL. */
  createdb(name) {
    const r = pgtmp('createdb', this.dir, name);
    if (r.code !== 0) throw new Error(`pgtmp createdb ${name} failed: ${r.err}`);
    return r.out;
  }

  /* Stop it at once, as a crash would (pg_ctl -m immediate). */
  kill() {
    const r = pgtmp('kill', this.dir);
    if (r.code !== 0) throw new Error(`pgtmp kill failed: ${r.err}`);
  }

  /* Start it again (same data). */
  restart() {
    const r = pgtmp('start', this.dir);
    if (r.code !== 0) throw new Error(`pgtmp start failed: ${r.err}`);
  }

  stop() {
    pgtmp('stop', this.dir);
    live.delete(this.guard);
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

/* ---- HTTP ------------------------------------------------------------------- */

/*
 * One request with its own connection (no pool: a pooled socket to a node that
 * was killed would fail a later request for the wrong reason). Resolves to
 * {status, headers, text, json}; rejects on a connection error or timeout
 * (err.code names it).
 */
export function request(method, url, body, { headers = {}, timeout = 30000 } = {}) {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const data = body === undefined ? null : typeof body === 'string' ? body : JSON.stringify(body);
    const h = { ...headers };
    if (data !== null) {
      h['Content-Type'] ||= 'application/json';
      h['Content-Length'] = Buffer.byteLength(data);
    }
    const req = http.request(
      { host: u.hostname, port: u.port, path: u.pathname + u.search, method, headers: h, agent: false },
      (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('error', reject);
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let json = null;
          try { json = text ? JSON.parse(text) : null; } catch { /* not JSON */ }
          resolve({ status: res.statusCode, headers: res.headers, text, json });
        });
      },
    );
    req.setTimeout(timeout, () => {
      const e = new Error(`${method} ${url}: no answer in ${timeout} ms`);
      e.code = 'ETIMEDOUT';
      req.destroy(e);
    });
    req.on('error', reject);
    if (data !== null) req.write(data);
    req.end();
  });
}

/*
 * An SSE stream read as it arrives: `events` holds {id, type, data, at} (data
 * parsed as JSON when it is), `ended` resolves when the server closes it.
 * waitFor(pred) resolves to the first matching event's index.
 */
export function sse(url, { lastEventId, headers = {} } = {}) {
  const u = new URL(url);
  const s = {
    url, events: [], status: 0, headers: null, closed: false, error: null, raw: '',
    waiters: new Set(),
  };
  let endResolve;
  s.ended = new Promise((r) => { endResolve = r; });
  const h = { Accept: 'text/event-stream', ...headers };
  if (lastEventId !== undefined && lastEventId !== null) h['Last-Event-ID'] = String(lastEventId);
  let buf = '';
  const notify = () => { for (const w of s.waiters) w(); };
  const req = http.request(
    { host: u.hostname, port: u.port, path: u.pathname + u.search, method: 'GET', headers: h, agent: false },
    (res) => {
      s.status = res.statusCode;
      s.headers = res.headers;
      res.setEncoding('utf8');
      res.on('data', (d) => {
        s.raw += d.length < 65536 && s.raw.length < 1 << 20 ? d : '';
        buf += d;
        let at;
        while ((at = buf.search(/\r?\n\r?\n/)) >= 0) {
          const block = buf.slice(0, at);
          buf = buf.slice(at + (buf[at] === '\r' ? 4 : 2));
          let id = null;
          const data = [];
          for (const line of block.split(/\r?\n/)) {
            if (line.startsWith(':')) continue;
            const i = line.indexOf(':');
            const field = i < 0 ? line : line.slice(0, i);
            const value = i < 0 ? '' : line.slice(i + 1).replace(/^ /, '');
            if (field === 'id') id = value;
            else if (field === 'data') data.push(value);
          }
          if (!data.length) continue;
          const text = data.join('\n');
          let json = null;
          try { json = JSON.parse(text); } catch { /* keep the text */ }
          s.events.push({ id, type: json?.type ?? null, data: json ?? text, at: Date.now() });
        }
        notify();
      });
      const end = () => { s.closed = true; notify(); endResolve(); };
      res.on('end', end);
      res.on('close', end);
      res.on('error', (e) => { s.error = e; end(); });
      notify();
    },
  );
  req.on('error', (e) => { s.error = e; s.closed = true; notify(); endResolve(); });
  req.end();
  s.close = () => { req.destroy(); s.closed = true; notify(); endResolve(); };
  s.waitFor = (pred, ms = 10000, from = 0) =>
    new Promise((resolve, reject) => {
      const check = () => {
        for (let i = from; i < s.events.length; i++) {
          if (pred(s.events[i], i)) { done(); resolve(i); return true; }
        }
        if (s.closed) {
          done();
          reject(new Error(`${url}: stream ended (${s.status}, ${s.error?.message ?? 'closed'}) before the event; ` +
                           `got ${s.events.length} events`));
          return true;
        }
        return false;
      };
      const t = setTimeout(() => {
        done();
        reject(new Error(`${url}: no such event in ${ms} ms; last events: ` +
                         JSON.stringify(s.events.slice(-5)).slice(0, 1500)));
      }, ms);
      const done = () => { clearTimeout(t); s.waiters.delete(check); };
      if (!check()) s.waiters.add(check);
    });
  s.opened = () => new Promise((resolve, reject) => {
    const check = () => {
      if (s.status) { s.waiters.delete(check); resolve(s.status); return true; }
      if (s.closed) { s.waiters.delete(check); reject(s.error || new Error(`${url}: closed before headers`)); return true; }
      return false;
    };
    if (!check()) s.waiters.add(check);
  });
  return s;
}

/* ---- a Reflexor node ------------------------------------------------------- */

export class Node {
  constructor({ index, dbUrl, config, web = WEB, logLevel = 'info' }) {
    this.index = index;
    this.dbUrl = dbUrl;
    this.dir = tempDir(`node${index}`);
    this.configPath = path.join(this.dir, 'config.json');
    fs.writeFileSync(this.configPath, JSON.stringify(config, null, 2));
    this.web = web;
    this.logLevel = logLevel;
    this.port = 0;
    this.proc = null;
    this.starts = 0;
    this.logPath = path.join(this.dir, 'node.log');
    this.tail = '';
  }

  get url() { return `http://127.0.0.1:${this.port}`; }
  get api() { return this.url + API; }
  get alive() { return !!this.proc && this.proc.exitCode === null && this.proc.signalCode === null; }

  /* Start (port 0 the first time, the same port after that); resolves once /healthz answers. */
  async start({ timeout = 20000 } = {}) {
    if (!fs.existsSync(BIN)) throw new Error(`${BIN} is missing: run make first`);
    const deadline = Date.now() + timeout;
    for (let attempt = 0; ; attempt++) {
      try {
        await this.#spawnOnce(deadline);
        return this;
      } catch (e) {
        // A restart on the same port may race the kernel freeing it: try again.
        if (!this.port || Date.now() > deadline || !/already in use|EADDRINUSE|bind/i.test(e.message)) throw e;
        await sleep(200);
      }
    }
  }

  async #spawnOnce(deadline) {
    this.starts++;
    const args = ['--config', this.configPath, '--listen', `127.0.0.1:${this.port}`,
                  '--db', this.dbUrl, '--web', this.web, '--log-level', this.logLevel];
    const log = fs.openSync(this.logPath, 'a');
    fs.writeSync(log, `\n==== start #${this.starts} ${new Date().toISOString()} ${args.join(' ')}\n`);
    const proc = spawn(BIN, args, { cwd: this.dir, stdio: ['ignore', 'pipe', 'pipe'] });
    this.proc = proc;
    const guard = { kind: 'node', pid: proc.pid, stopSync: () => { try { process.kill(proc.pid, 'SIGKILL'); } catch { /* gone */ } } };
    live.add(guard);
    proc.once('exit', () => { live.delete(guard); });
    let out = '';
    const keep = (d) => {
      const s = d.toString();
      fs.writeSync(log, s);
      this.tail = (this.tail + s).slice(-8000);
      if (!this.port || out.length < 4096) out += s;
    };
    proc.stdout.on('data', keep);
    proc.stderr.on('data', keep);
    proc.once('exit', () => { try { fs.closeSync(log); } catch { /* closed */ } });
    for (;;) {
      if (proc.exitCode !== null || proc.signalCode !== null) {
        throw new Error(`node ${this.index} exited (${proc.exitCode ?? proc.signalCode}) at start:\n${this.tail.slice(-3000)}`);
      }
      if (!this.port) {
        const m = /http:\/\/127\.0\.0\.1:(\d+)/.exec(out);
        if (m) this.port = Number(m[1]);
      }
      if (this.port) {
        try {
          const r = await request('GET', `${this.url}/healthz`, undefined, { timeout: 2000 });
          if (r.status === 200) return;
        } catch { /* not up yet */ }
      }
      if (Date.now() > deadline) {
        this.killSync();
        throw new Error(`node ${this.index} did not come up:\n${this.tail.slice(-3000)}`);
      }
      await sleep(50);
    }
  }

  killSync() {
    if (this.alive) { try { process.kill(this.proc.pid, 'SIGKILL'); } catch { /* gone */ } }
  }

  /* kill -9, and wait until it is gone. */
  async kill9() {
    const p = this.proc;
    if (!this.alive) return;
    const gone = new Promise((r) => p.once('exit', r));
    process.kill(p.pid, 'SIGKILL');
    await gone;
  }

  /* SIGTERM (a clean stop), SIGKILL after 10 s; resolves to {code, signal}. */
  async stop() {
    const p = this.proc;
    if (!p) return null;
    if (this.alive) {
      const gone = new Promise((r) => p.once('exit', r));
      process.kill(p.pid, 'SIGTERM');
      const t = setTimeout(() => { try { process.kill(p.pid, 'SIGKILL'); } catch { /* gone */ } }, 10000);
      await gone;
      clearTimeout(t);
    }
    return { code: p.exitCode, signal: p.signalCode };
  }

  log() {
    try { return fs.readFileSync(this.logPath, 'utf8'); } catch { return ''; }
  }

  /* Sanitizer reports in everything this node ever logged. */
  sanitizerReport() {
    const all = this.log();
    const bad = /ERROR: (Address|Leak)Sanitizer|runtime error:/.exec(all);
    return bad ? all.slice(Math.max(0, bad.index - 300), bad.index + 3000) : '';
  }

  cleanup() { fs.rmSync(this.dir, { recursive: true, force: true }); }
}

/* ---- nginx ------------------------------------------------------------------ */

export class Nginx {
  constructor(upstreamPorts) {
    this.ports = upstreamPorts;
    this.dir = tempDir('nginx');
    this.port = 0;
    this.proc = null;
    this.errors = '';
  }

  get url() { return `http://127.0.0.1:${this.port}`; }
  get api() { return this.url + API; }

  /* config/nginx-cluster.conf with the real ports and paths (as nginx_test.sh does). */
  render() {
    let conf = fs.readFileSync(path.join(ROOT, 'config/nginx-cluster.conf'), 'utf8');
    const upstream = /upstream reflexor_nodes \{([\s\S]*?)\n\s*\}/.exec(conf);
    if (!upstream) throw new Error('config/nginx-cluster.conf: no upstream reflexor_nodes block');
    const model = /^(\s*)server 127\.0\.0\.1:8101( [^;]*)?;$/m.exec(upstream[1]);
    if (!model) throw new Error('config/nginx-cluster.conf: no "server 127.0.0.1:8101 ...;" line');
    const servers = this.ports.map((p) => `${model[1]}server 127.0.0.1:${p}${model[2] || ''};`).join('\n');
    const body = upstream[1].replace(/^\s*server 127\.0\.0\.1:81\d\d[^;]*;\n?/gm, '');
    conf = conf.replace(upstream[0], `upstream reflexor_nodes {\n${servers}${body}\n    }`);
    conf = conf.replace('listen 127.0.0.1:8100;', `listen 127.0.0.1:${this.port};`)
               .replaceAll('/tmp/reflexor-cluster-nginx', path.join(this.dir, 'ngx'));
    if (!conf.includes(`127.0.0.1:${this.port}`)) throw new Error('nginx-cluster.conf: the listen line did not change');
    return conf;
  }

  async start() {
    this.port = await freePort();
    const confPath = path.join(this.dir, 'nginx.conf');
    fs.writeFileSync(confPath, this.render());
    const proc = spawn(NGINX, ['-p', this.dir, '-c', confPath, '-g', 'daemon off;'], { stdio: ['ignore', 'ignore', 'pipe'] });
    this.proc = proc;
    const guard = { kind: 'nginx', pid: proc.pid, stopSync: () => { try { process.kill(proc.pid, 'SIGTERM'); } catch { /* gone */ } } };
    live.add(guard);
    proc.once('exit', () => live.delete(guard));
    proc.stderr.on('data', (d) => { this.errors = (this.errors + d).slice(-20000); });
    const deadline = Date.now() + 10000;
    for (;;) {
      if (proc.exitCode !== null) throw new Error(`nginx exited (${proc.exitCode}): ${this.errors}`);
      try {
        const r = await request('GET', `${this.url}/healthz`, undefined, { timeout: 2000 });
        if (r.status === 200) return this;
      } catch { /* not yet */ }
      if (Date.now() > deadline) throw new Error(`nginx did not come up: ${this.errors}`);
      await sleep(50);
    }
  }

  async stop() {
    const p = this.proc;
    if (p && p.exitCode === null && p.signalCode === null) {
      const gone = new Promise((r) => p.once('exit', r));
      process.kill(p.pid, 'SIGTERM'); // fast shutdown; the master takes its workers along
      const t = setTimeout(() => { try { process.kill(p.pid, 'SIGKILL'); } catch { /* gone */ } }, 5000);
      await gone;
      clearTimeout(t);
    }
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

/* ---- the cluster ------------------------------------------------------------ */

/*
 * N nodes on one fresh database of `pg`, nginx in front (unless nginx: false).
 * config: merged into every node's config (builtin brain, cluster.lease_ms).
 */
export class Cluster {
  constructor(pg, { nodes = 3, leaseMs = 1000, chunkDelayMs = 30, chunkChars = 4, nginx = true,
                    dbName = null, config = {}, logLevel = 'info' } = {}) {
    this.pg = pg;
    this.n = nodes;
    this.leaseMs = leaseMs;
    this.dbName = dbName || `rx_${process.pid}_${Math.random().toString(36).slice(2, 8)}`;
    this.config = {
      brain: { provider: 'builtin', builtin: { chunk_chars: chunkChars, chunk_delay_ms: chunkDelayMs } },
      sse: { retry_ms: 300 },
      cluster: { lease_ms: leaseMs },
      ...config,
    };
    this.wantNginx = nginx;
    this.logLevel = logLevel;
    this.nodes = [];
    this.nginx = null;
  }

  async start() {
    this.dbUrl = this.pg.createdb(this.dbName);
    // One after the other: the first creates the schema.
    for (let i = 0; i < this.n; i++) {
      const node = new Node({ index: i, dbUrl: this.dbUrl, config: this.config, logLevel: this.logLevel });
      this.nodes.push(node);
      await node.start();
    }
    if (this.wantNginx) {
      this.nginx = new Nginx(this.nodes.map((n) => n.port));
      await this.nginx.start();
    }
    return this;
  }

  get front() { return this.nginx.api; }

  /* The node listening on `port` (nginx's X-Reflexor-Upstream names it). */
  byPort(port) { return this.nodes.find((n) => n.port === Number(port)); }

  async kill9(i) { await this.nodes[i].kill9(); }
  async restart(i) { return this.nodes[i].start(); }

  /* Stop everything; returns what each node's stop said (exit code/signal). */
  async stop() {
    const exits = [];
    if (this.nginx) await this.nginx.stop().catch(() => {});
    for (const n of this.nodes) exits.push(await n.stop().catch((e) => ({ error: e.message })));
    return exits;
  }

  /* Keep the logs of a failed run (path printed), else remove them. */
  cleanup(keep = false) {
    if (keep) {
      const dst = tempDir('cluster-logs');
      for (const n of this.nodes) {
        try { fs.copyFileSync(n.logPath, path.join(dst, `node${n.index}.log`)); } catch { /* none */ }
      }
      if (this.nginx) fs.writeFileSync(path.join(dst, 'nginx.err'), this.nginx.errors);
      console.log(`# cluster logs kept in ${dst}`);
    }
    for (const n of this.nodes) n.cleanup();
  }

  /*
   * Stop everything, keep the logs when `failed` or a node's log holds a
   * sanitizer report, and say what was wrong: [] when every node exited 0
   * with a clean log.
   */
  async finish(failed) {
    const exits = await this.stop();
    const bad = this.nodes.map((n) => n.sanitizerReport()).filter(Boolean);
    this.cleanup(failed || bad.length > 0);
    const unclean = exits.map((e, i) => (e?.code === 0 ? null : `node ${i}: ${JSON.stringify(e)}`));
    return [...bad, ...unclean.filter(Boolean)];
  }
}

/* ---- API helpers ------------------------------------------------------------ */

export async function createSession(base) {
  const r = await request('POST', `${base}/sessions`, '');
  if (r.status !== 201) throw new Error(`POST /sessions: ${r.status} ${r.text}`);
  return r.json.id;
}

export async function getJson(url, ok = 200) {
  const r = await request('GET', url);
  if (r.status !== ok) throw new Error(`GET ${url}: ${r.status} ${r.text.slice(0, 500)}`);
  return r.json;
}

/* Every input of a session's log, paged. */
export async function history(base, sid) {
  const all = [];
  let after = 0;
  for (;;) {
    const page = await getJson(`${base}/sessions/${sid}/history?after=${after}&limit=1000`);
    all.push(...page);
    if (page.length < 1000) return all;
    after = page[page.length - 1].seq;
  }
}

/* Poll GET url until ok(json); the last JSON on timeout (then it throws). */
export async function until(url, ok, ms = 10000, what = 'condition') {
  const deadline = Date.now() + ms;
  let last = null;
  for (;;) {
    try {
      const r = await request('GET', url, undefined, { timeout: 5000 });
      last = r.json ?? r.text;
      if (r.status === 200 && ok(r.json)) return r.json;
    } catch (e) { last = e.message; }
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms; last: ${JSON.stringify(last).slice(0, 1500)}`);
    await sleep(50);
  }
}

/* Median and percentiles of a list of numbers. */
export function pct(xs, p) {
  if (!xs.length) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))];
}
