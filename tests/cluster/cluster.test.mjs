// Many nodes on one PostgreSQL log (SPEC 6.1, issue 19), with real components:
// a throwaway PostgreSQL, three Reflexor nodes, nginx in front (plain round
// robin, config/nginx-cluster.conf). Skipped, with the reason, only when
// PostgreSQL is not installed.
//
//   RX_SERVER=build/reflexor node --test tests/cluster/
//   CLUSTER_KILLS=30 (kills in the kill -9 loop), CLUSTER_CLIENTS=4
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  Cluster, PgTmp, createSession, getJson, history, request, sleep, sse, until,
} from './harness.mjs';

const LEASE_MS = 1000;
const pg = await PgTmp.start();

after(() => pg.stop());

const echo = (content) => `Echo: ${content}`;
const isAnswered = (content) => (st) =>
  !!st && st.assistantMessages.some((a) => a.status === 'complete' && a.content === echo(content));

/* POST an input; the answer's status, JSON and which node answered. */
async function post(base, sid, input) {
  const r = await request('POST', `${base}/sessions/${sid}/moorex`, input);
  return { status: r.status, json: r.json, upstream: r.headers['x-reflexor-upstream'], node: r.headers['x-reflexor-node'] };
}

/* A state with its volatile parts only (what must be the same on every node). */
const same = (a, b) => { try { assert.deepEqual(a, b); return true; } catch { return false; } };

/* Wait until every node serves the same state (reads may catch up, briefly). */
async function sameEverywhere(cluster, sid, ms = 10000) {
  const deadline = Date.now() + ms;
  let states;
  for (;;) {
    states = await Promise.all(cluster.nodes.map((n) => getJson(`${n.api}/sessions/${sid}`)));
    if (states.every((s) => same(s, states[0]))) return states[0];
    if (Date.now() > deadline) break;
    await sleep(100);
  }
  assert.fail(`session ${sid}: the nodes disagree after ${ms} ms:\n` +
              states.map((s, i) => `node ${i}: ${JSON.stringify(s).slice(0, 1200)}`).join('\n'));
}

describe('cluster: three nodes behind nginx', () => {
  let cluster;
  let failed = false;

  before(async () => {
    cluster = new Cluster(pg, { nodes: 3, leaseMs: LEASE_MS, chunkDelayMs: 40, chunkChars: 4 });
    await cluster.start();
  });

  after(async () => {
    if (!cluster) return;
    assert.deepEqual(await cluster.finish(failed), [], 'sanitizer reports or unclean exits');
  });

  const track = (fn) => async (t) => {
    try { await fn(t); } catch (e) { failed = true; throw e; }
  };

  test('a chat through nginx: consecutive requests land on different nodes, every node has the same state', track(async () => {
    const front = cluster.front;
    const log = []; // every request through nginx, in order: {what, upstream}
    const r0 = await request('POST', `${front}/sessions`, '');
    assert.equal(r0.status, 201, r0.text);
    const sid = r0.json.id;
    log.push({ what: 'create', upstream: r0.headers['x-reflexor-upstream'] });
    const texts = ['hello from the front door', 'a second message', 'what about a third one',
                   'fourth: still here?', 'fifth message through round robin', 'sixth and last'];
    for (const [i, content] of texts.entries()) {
      const p = await post(front, sid, { type: 'user-send-message', messageId: `m${i}`, content });
      assert.equal(p.status, 200, `POST m${i} through nginx: ${JSON.stringify(p.json)}`);
      assert.equal(p.json.success, true);
      log.push({ what: `post m${i}`, upstream: p.upstream });
      const deadline = Date.now() + 15000;
      for (;;) {
        const g = await request('GET', `${front}/sessions/${sid}`);
        assert.equal(g.status, 200, `GET through nginx after m${i}: ${g.status} ${g.text.slice(0, 300)}`);
        log.push({ what: 'get', upstream: g.headers['x-reflexor-upstream'] });
        if (isAnswered(content)(g.json)) break;
        assert.ok(Date.now() < deadline, `m${i} not answered within 15 s: ${g.text.slice(0, 600)}`);
        await sleep(100);
      }
    }
    const ports = new Set(log.map((l) => l.upstream));
    assert.ok(ports.size === 3, `requests reached ${ports.size} nodes: ${[...ports]}`);
    const posts = new Set(log.filter((l) => l.what.startsWith('post')).map((l) => l.upstream));
    assert.ok(posts.size >= 2, `the POSTs all landed on ${[...posts]}`);
    for (let i = 1; i < log.length; i++) {
      assert.notEqual(log[i].upstream, log[i - 1].upstream,
                      `requests ${i - 1} and ${i} (${log[i - 1].what}, ${log[i].what}) both went to ${log[i].upstream}`);
    }
    // Each node, asked directly, has the whole conversation, the same.
    const st = await sameEverywhere(cluster, sid);
    assert.deepEqual(st.userMessages.map((m) => m.id), texts.map((_, i) => `m${i}`));
    assert.deepEqual(st.assistantMessages.map((a) => [a.status, a.content]), texts.map((t) => ['complete', echo(t)]));
    const logs = await Promise.all(cluster.nodes.map((n) => history(n.api, sid)));
    for (const h of logs.slice(1)) assert.deepEqual(h, logs[0], 'every node serves the same log');
  }));

  test('a session created on one node is visible on every other node at once', track(async () => {
    // SPEC 6.1: any node answers any route for any session, with the verdicts of
    // one node: right after POST /sessions on A, B and C know it (no 404).
    const [A, B, C] = cluster.nodes;
    const misses = [];
    for (let i = 0; i < 20; i++) {
      const sid = await createSession(A.api);
      const g = await request('GET', `${B.api}/sessions/${sid}`);
      if (g.status !== 200) misses.push(`#${i} GET on node 1: ${g.status} ${g.text.slice(0, 120)}`);
      const s = sse(`${C.api}/sessions/${sid}/moorex`);
      try {
        await s.opened();
        if (s.status !== 200) misses.push(`#${i} GET .../moorex on node 2: ${s.status}`);
      } finally { s.close(); }
      const p = await post(B.api, sid, { type: 'user-send-message', messageId: 'v1', content: 'visible?' });
      if (p.status !== 200) misses.push(`#${i} POST on node 1: ${p.status} ${JSON.stringify(p.json)}`);
    }
    assert.deepEqual(misses, [], 'a new session unknown to another node');
  }));

  test('every answer names the node that served it (X-Reflexor-Node)', track(async () => {
    const seen = new Map();
    for (let i = 0; i < 6; i++) {
      const r = await request('GET', `${cluster.nginx.url}/healthz`);
      const node = r.headers['x-reflexor-node'];
      assert.ok(node, `no X-Reflexor-Node header on GET /healthz (through ${r.headers['x-reflexor-upstream']})`);
      seen.set(r.headers['x-reflexor-upstream'], node);
    }
    for (const n of cluster.nodes) {
      const r = await request('POST', `${n.api}/sessions`, '');
      assert.ok(r.headers['x-reflexor-node'], `no X-Reflexor-Node on POST /sessions of node ${n.index}`);
      assert.equal(r.headers['x-reflexor-node'], seen.get(`127.0.0.1:${n.port}`), 'a node names itself the same way');
    }
    assert.equal(new Set(seen.values()).size, 3, `three distinct node ids: ${[...seen.values()]}`);
  }));

  test('state streams from any node: same events, same ids, in order; inputs on other nodes get the owner\'s verdict', track(async () => {
    const [A, B, C] = cluster.nodes;
    const sid = await createSession(A.api);
    const sa = sse(`${A.api}/sessions/${sid}/moorex`);
    const sb = sse(`${B.api}/sessions/${sid}/moorex`);
    try {
      await sa.waitFor((e) => e.type === 'state-updated');
      await sb.waitFor((e) => e.type === 'state-updated');
      assert.equal(sb.status, 200);
      assert.match(sb.headers['content-type'], /text\/event-stream/);
      const msgs = [['s1', 'posted on the owner', A], ['s2', 'posted on a follower', B], ['s3', 'posted on the third node', C]];
      for (const [id, content, node] of msgs) {
        const p = await post(node.api, sid, { type: 'user-send-message', messageId: id, content });
        assert.equal(p.status, 200, `POST ${id} on node ${node.index}: ${JSON.stringify(p.json)}`);
        await until(`${A.api}/sessions/${sid}`, isAnswered(content), 15000, `answer to ${id}`);
      }
      // The owner's verdicts, wherever the input arrives: idempotent repeat, conflict.
      const again = await post(C.api, sid, { type: 'user-send-message', messageId: 's1', content: 'posted on the owner' });
      assert.equal(again.status, 200, `same id, same content on node 2: ${JSON.stringify(again.json)}`);
      const clash = await post(B.api, sid, { type: 'user-send-message', messageId: 's1', content: 'other words' });
      assert.equal(clash.status, 409, `same id, other content on node 1: ${JSON.stringify(clash.json)}`);
      assert.equal(clash.json?.error, 'rejected');
      const bad = await post(C.api, sid, { type: 'user-send-message', messageId: 's9', content: '   ' });
      assert.equal(bad.status, 400, `blank content on node 2: ${JSON.stringify(bad.json)}`);
      const none = await post(B.api, 'no-such-session', { type: 'user-send-message', content: 'x' });
      assert.equal(none.status, 404, 'unknown session on a follower');

      const last = (s) => s.waitFor((e) => e.type === 'state-updated' && isAnswered('posted on the third node')(e.data.state), 15000);
      await last(sa);
      await last(sb);
      const inputs = (s) => s.events.filter((e) => e.type === 'input-received')
        .map((e) => ({ id: e.id, type: e.data.input.type, messageId: e.data.input.messageId ?? null }));
      const states = (s) => s.events.filter((e) => e.type === 'state-updated').slice(1).map((e) => e.id);
      assert.deepEqual(inputs(sb), inputs(sa), 'node 1 streams the same inputs with the same ids as the owner');
      assert.deepEqual(states(sb), states(sa), 'state-updated events with the same ids');
      assert.ok(inputs(sa).length >= 9, `3 messages, 3 answers (start + complete): ${inputs(sa).length} inputs`);
      for (const s of [sa, sb]) {
        const ids = s.events.filter((e) => e.id !== null).map((e) => Number(e.id));
        for (let i = 1; i < ids.length; i++) assert.ok(ids[i] >= ids[i - 1], `ids go backwards on ${s.url}: ${ids}`);
        const ts = s.events.filter((e) => e.type === 'state-updated').map((e) => e.data.state.updatedAt);
        for (let i = 1; i < ts.length; i++) assert.ok(ts[i] >= ts[i - 1], `a stale state after a newer one on ${s.url}`);
      }
      const lastState = (s) => s.events.filter((e) => e.type === 'state-updated').at(-1).data.state;
      assert.deepEqual(lastState(sb), lastState(sa));
      // The log's seq is the events' id.
      const h = await history(B.api, sid);
      assert.deepEqual(inputs(sa).map((e) => Number(e.id)), h.map((x) => x.seq));
    } finally {
      sa.close();
      sb.close();
    }
  }));

  test('token streams from any node: chunks written by the owner arrive live on another node', track(async () => {
    const [A, B] = cluster.nodes;
    const sid = await createSession(A.api);
    const content = 'a long question so that the answer streams for a couple of seconds, ' +
                    'one small chunk after another, from the owner to every other node';
    const p = await post(A.api, sid, { type: 'user-send-message', messageId: 't1', content });
    assert.equal(p.status, 200);
    const st = await until(`${B.api}/sessions/${sid}`, (s) => s.assistantMessages.length > 0, 5000, 'the answer starts on node 1');
    const mid = st.assistantMessages[0].id;
    assert.equal(st.assistantMessages[0].status, 'streaming', 'node 1 sees the answer while it streams');
    const tb = sse(`${B.api}/sessions/${sid}/messages/${mid}`);
    const ta = sse(`${A.api}/sessions/${sid}/messages/${mid}`);
    try {
      await tb.waitFor((e) => e.type === 'complete', 20000);
      await ta.waitFor((e) => e.type === 'complete', 20000);
      await tb.ended;
      assert.equal(tb.status, 200);
      const types = tb.events.map((e) => e.type);
      assert.equal(types[0], 'snapshot', `first frame: ${types[0]}`);
      const chunks = tb.events.filter((e) => e.type === 'chunk');
      assert.ok(chunks.length >= 2, `only ${chunks.length} chunk frames on node 1 before the end: ${types.join(',')}`);
      const done = tb.events.at(-1);
      assert.equal(done.type, 'complete');
      assert.equal(done.data.content, echo(content));
      assert.equal(tb.events[0].data.content + chunks.map((c) => c.data.delta).join(''), done.data.content,
                   'snapshot + chunks = the complete text');
      const spread = done.at - chunks[0].at;
      assert.ok(spread > 300, `the chunks arrived within ${spread} ms of the end: relayed at completion, not live`);
      assert.equal(ta.events.at(-1).data.content, done.data.content);
    } finally {
      ta.close();
      tb.close();
    }
  }));

  test('a stream that reconnects to another node with Last-Event-ID resumes', track(async () => {
    const [A, B] = cluster.nodes;
    const sid = await createSession(A.api);
    const sa = sse(`${A.api}/sessions/${sid}/moorex`);
    let sb;
    try {
      await sa.waitFor((e) => e.type === 'state-updated');
      assert.equal((await post(A.api, sid, { type: 'user-send-message', messageId: 'r1', content: 'before the cut' })).status, 200);
      await sa.waitFor((e) => e.type === 'state-updated' && isAnswered('before the cut')(e.data.state), 15000);
      const lastId = sa.events.at(-1).id;
      sa.close();
      // Missed while away:
      assert.equal((await post(A.api, sid, { type: 'user-send-message', messageId: 'r2', content: 'while away' })).status, 200);
      await until(`${A.api}/sessions/${sid}`, isAnswered('while away'), 15000, 'answer to r2');
      sb = sse(`${B.api}/sessions/${sid}/moorex`, { lastEventId: lastId });
      await sb.waitFor((e) => e.type === 'state-updated', 5000);
      const first = sb.events[0];
      assert.equal(first.type, 'state-updated', 'the current state first');
      assert.ok(isAnswered('while away')(first.data.state) ||
                (await sb.waitFor((e) => e.type === 'state-updated' && isAnswered('while away')(e.data.state), 5000)) >= 0,
                'the resumed stream reaches what was missed');
      assert.ok(Number(first.id) >= Number(lastId), `resumed at id ${first.id}, before ${lastId}`);
      assert.equal((await post(A.api, sid, { type: 'user-send-message', messageId: 'r3', content: 'after the move' })).status, 200);
      const i = await sb.waitFor((e) => e.type === 'input-received' && e.data.input.messageId === 'r3', 10000);
      assert.ok(Number(sb.events[i].id) > Number(lastId));
      await sb.waitFor((e) => e.type === 'state-updated' && isAnswered('after the move')(e.data.state), 15000);
      const ts = sb.events.filter((e) => e.type === 'state-updated').map((e) => e.data.state.updatedAt);
      for (let k = 1; k < ts.length; k++) assert.ok(ts[k] >= ts[k - 1], 'never a stale state after a newer one');
    } finally {
      sa.close();
      sb?.close();
    }
  }));
});

/*
 * The kill -9 loop: clients post through nginx, each retrying a failed POST
 * with the same messageId until it is acknowledged, while the nodes are
 * killed one after the other and restarted. After each kill every client
 * must make progress (an acknowledged input or a completed answer) within
 * lease_ms + 5 s (+ the answer's own streaming time).
 */
describe('cluster: kill -9 loop', () => {
  const KILLS = Number(process.env.CLUSTER_KILLS || 30);
  const CLIENTS = Number(process.env.CLUSTER_CLIENTS || 4);
  const CHUNK_MS = 25;
  let cluster;
  let failed = false;

  before(async () => {
    cluster = new Cluster(pg, { nodes: 3, leaseMs: LEASE_MS, chunkDelayMs: CHUNK_MS, chunkChars: 4 });
    await cluster.start();
  });

  after(async () => {
    if (!cluster) return;
    assert.deepEqual(await cluster.finish(failed), [], 'sanitizer reports or unclean exits');
  });

  test(`${KILLS} kills: no acknowledged input lost or doubled, every answer completes once, takeover in time`, async () => {
    try {
      const front = cluster.front;
      const retryable = (s) => s === 502 || s === 503 || s === 504;
      const unexpected = [];
      let stop = false;
      const t0 = Date.now();
      const stamp = () => `${((Date.now() - t0) / 1000).toFixed(1)}s`;

      // Sessions, created through nginx (a lost 201 only leaves an unused session).
      const clients = [];
      for (let c = 0; c < CLIENTS; c++) {
        let sid = null;
        while (!sid) {
          try {
            const r = await request('POST', `${front}/sessions`, '', { timeout: 10000 });
            if (r.status === 201) sid = r.json.id;
            else if (!retryable(r.status)) throw new Error(`POST /sessions: ${r.status} ${r.text}`);
          } catch (e) { if (!e.code) throw e; }
          if (!sid) await sleep(100);
        }
        clients.push({ c, sid, acked: [], progress: 0, retries: 0, waiting: '' });
      }

      const longest = (c, i) => `client ${c} says message number ${i}, long enough to stream for a while`;
      const answerMs = Math.ceil(echo(longest(99, 999)).length / 4) * CHUNK_MS;

      async function run(cl) {
        for (let i = 0; !stop; i++) {
          const messageId = `c${cl.c}-m${i}`;
          const content = longest(cl.c, i);
          cl.waiting = `ack of ${messageId}`;
          for (;;) {
            let r;
            try {
              r = await request('POST', `${front}/sessions/${cl.sid}/moorex`,
                                { type: 'user-send-message', messageId, content }, { timeout: 15000 });
            } catch (e) {
              cl.retries++;
              await sleep(50);
              continue; // connection error: the same input again
            }
            if (r.status === 200 && r.json?.success) break;
            if (!retryable(r.status)) unexpected.push(`${stamp()} client ${cl.c} ${messageId}: ${r.status} ${r.text.slice(0, 200)}`);
            cl.retries++;
            await sleep(100);
          }
          cl.acked.push({ messageId, content });
          cl.progress++;
          cl.waiting = `answer to ${messageId}`;
          for (;;) {
            try {
              const g = await request('GET', `${front}/sessions/${cl.sid}`, undefined, { timeout: 10000 });
              if (g.status === 200 && isAnswered(content)(g.json)) break;
              if (g.status !== 200 && !retryable(g.status)) unexpected.push(`${stamp()} client ${cl.c} GET: ${g.status} ${g.text.slice(0, 200)}`);
            } catch { /* a node died under the request */ }
            await sleep(60);
          }
          cl.progress++;
          cl.waiting = '';
        }
      }
      const running = clients.map(run);

      // The killer: one node after the other, each restarted at once.
      const budget = LEASE_MS + 5000 + answerMs;
      const late = [];
      const kills = [];
      for (let k = 0; k < KILLS; k++) {
        await sleep(700 + Math.floor(Math.random() * 800));
        const victim = k % cluster.nodes.length;
        const before = clients.map((cl) => cl.progress);
        const at = Date.now();
        await cluster.kill9(victim);
        kills.push({ k, victim, at: stamp() });
        await sleep(100 + Math.floor(Math.random() * 300));
        await cluster.restart(victim);
        // Every client moves on within the budget after this death.
        for (;;) {
          const stuck = clients.filter((cl, j) => cl.progress === before[j]);
          if (!stuck.length) break;
          if (Date.now() - at > budget) {
            late.push(`kill #${k} (node ${victim} at ${kills.at(-1).at}): ` +
                      stuck.map((cl) => `client ${cl.c} (session ${cl.sid}) still waiting for the ${cl.waiting}`).join('; ') +
                      ` after ${budget} ms`);
            break;
          }
          await sleep(50);
        }
      }
      stop = true;
      // The last messages finish (every node is up now).
      const finish = Promise.all(running);
      const fin = await Promise.race([finish.then(() => true), sleep(budget + 10000).then(() => false)]);
      assert.ok(fin, `clients did not finish within ${budget + 10000} ms after the last kill: ` +
                     clients.map((cl) => `client ${cl.c}: ${cl.waiting || 'done'}`).join('; '));
      const total = clients.reduce((n, cl) => n + cl.acked.length, 0);
      // Informational: how often a session changed hands (the nodes' own log lines).
      const takeovers = cluster.nodes.reduce((n, node) => n + (node.log().match(/owned here from input [1-9]/g) || []).length, 0);
      console.log(`# ${KILLS} kills in ${stamp()}, ${total} inputs acknowledged, ` +
                  `${clients.reduce((n, cl) => n + cl.retries, 0)} retries, ${takeovers} sessions taken over (node logs)`);

      assert.deepEqual(late, [], 'takeover within lease_ms + 5 s after each kill');
      assert.deepEqual(unexpected, [], 'only 502/503/504 or a connection error while nodes die');
      assert.ok(total >= KILLS, `only ${total} inputs acknowledged during ${KILLS} kills`);

      for (const cl of clients) {
        const st = await sameEverywhere(cluster, cl.sid, 15000);
        const h = await history(cluster.nodes[0].api, cl.sid);
        const seqs = h.map((x) => x.seq);
        assert.deepEqual(seqs, [...new Set(seqs)].sort((a, b) => a - b), `client ${cl.c}: seqs unique and in order`);
        const users = h.filter((x) => x.input.type === 'user-send-message');
        for (const { messageId, content } of cl.acked) {
          const found = users.filter((x) => x.input.messageId === messageId);
          assert.equal(found.length, 1, `client ${cl.c}: acknowledged ${messageId} is in the log ${found.length} times`);
          assert.equal(found[0].input.content, content);
        }
        assert.equal(users.length, cl.acked.length, `client ${cl.c}: the log holds inputs nobody acknowledged`);
        // Every user message got exactly one answer, complete, never produced twice.
        assert.equal(st.userMessages.length, cl.acked.length);
        assert.equal(st.assistantMessages.length, st.userMessages.length,
                     `client ${cl.c}: ${st.assistantMessages.length} answers to ${st.userMessages.length} messages: ` +
                     JSON.stringify(st.assistantMessages.map((a) => [a.content, a.status])).slice(0, 2000));
        for (const [i, u] of st.userMessages.entries()) {
          const a = st.assistantMessages[i];
          assert.equal(a.status, 'complete', `client ${cl.c}: answer ${i} is ${a.status}`);
          assert.equal(a.content, echo(u.content), `client ${cl.c}: answer ${i}`);
        }
        const starts = h.filter((x) => x.input.type === 'brain-send-message-start').map((x) => x.input.messageId);
        const completes = h.filter((x) => x.input.type === 'brain-send-message-complete').map((x) => x.input.messageId);
        assert.equal(new Set(starts).size, starts.length, `client ${cl.c}: an answer started twice`);
        assert.deepEqual([...completes].sort(), [...new Set(completes)].sort(), `client ${cl.c}: an answer completed twice`);
        assert.deepEqual([...completes].sort(), st.assistantMessages.map((a) => a.id).sort());
      }
    } catch (e) {
      failed = true;
      throw e;
    }
  });

  test('PostgreSQL restarted: nodes stay up, writes answer 503 within 10 s, /healthz says so, service resumes', async () => {
    try {
      const nodes = cluster.nodes;
      const sid = await createSession(nodes[0].api);
      assert.equal((await post(nodes[0].api, sid, { type: 'user-send-message', messageId: 'p0', content: 'before the outage' })).status, 200);
      await until(`${nodes[0].api}/sessions/${sid}`, isAnswered('before the outage'), 15000, 'answer before the outage');

      pg.kill();
      const refused = [];
      try {
        for (const n of nodes) {
          const t = Date.now();
          const r = await request('POST', `${n.api}/sessions/${sid}/moorex`,
                                  { type: 'user-send-message', messageId: `down${n.index}`, content: 'while the database is down' },
                                  { timeout: 20000 });
          const ms = Date.now() - t;
          assert.equal(r.status, 503, `node ${n.index}: a write while PostgreSQL is down answered ${r.status} ${r.text}`);
          assert.ok(ms <= 10000, `node ${n.index}: the 503 took ${ms} ms`);
          refused.push(`down${n.index}`);
          const c = await request('POST', `${n.api}/sessions`, '', { timeout: 20000 });
          assert.equal(c.status, 503, `node ${n.index}: POST /sessions while down answered ${c.status}`);
          const hz = await until(`${n.url}/healthz`, (j) => j?.store?.status && j.store.status !== 'ok', 10000,
                                 `node ${n.index}: /healthz names the store down`);
          assert.notEqual(hz.status, 'ok');
        }
        await sleep(1500);
        for (const n of nodes) assert.ok(n.alive, `node ${n.index} died while PostgreSQL was down:\n${n.tail.slice(-2000)}`);
      } finally {
        pg.restart();
      }
      for (const n of nodes) {
        await until(`${n.url}/healthz`, (j) => j?.store?.status === 'ok', 30000, `node ${n.index}: the store is back`);
      }
      // Writes work again on every node and through nginx, and answers complete.
      for (const [i, base] of [...nodes.map((n) => n.api), cluster.front].entries()) {
        const deadline = Date.now() + 20000;
        let r;
        for (;;) {
          r = await post(base, sid, { type: 'user-send-message', messageId: `up${i}`, content: `after the outage ${i}` });
          if (r.status === 200 || Date.now() > deadline) break;
          await sleep(200);
        }
        assert.equal(r.status, 200, `write ${i} after PostgreSQL came back: ${JSON.stringify(r.json)}`);
        await until(`${nodes[0].api}/sessions/${sid}`, isAnswered(`after the outage ${i}`), 20000, `answer ${i} after the outage`);
      }
      const st = await sameEverywhere(cluster, sid, 15000);
      const ids = st.userMessages.map((m) => m.id);
      for (const id of refused) assert.ok(!ids.includes(id), `${id} was refused with 503 but is in the log`);
      assert.equal(st.assistantMessages.filter((a) => a.status === 'complete').length, st.userMessages.length);
      const fresh = await request('POST', `${cluster.front}/sessions`, '');
      assert.equal(fresh.status, 201);
    } catch (e) {
      failed = true;
      throw e;
    }
  });
});
