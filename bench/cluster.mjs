// bench/cluster.mjs - token relay latency for bench/cluster.sh (issue 19).
//
//   node bench/cluster.mjs relay POST_BASE SUB_BASE N
//
// N times: a new session (on POST_BASE), its state stream followed on
// SUB_BASE; a user message POSTed on POST_BASE at t0; once SUB_BASE's stream
// shows the answer's start, its token stream is read on SUB_BASE and on
// POST_BASE at once. Prints one line:
//   relay n=.. first_p50_ms=.. first_p99_ms=.. tok_p50_ms=.. tok_p99_ms=.. tokens=..
// first: t0 to the first text of the answer on SUB_BASE (POST to first chunk);
// tok: for every chunk seen on both, its arrival on SUB_BASE minus its arrival
// on POST_BASE (the relay's own delay; ~0 when both are the same node).
// Bases are http://127.0.0.1:PORT/api/reflexor. Only 127.0.0.1.
import { pct, request, sse } from '../tests/cluster/harness.mjs';

const [cmd, postBase, subBase, nArg] = process.argv.slice(2);
if (cmd !== 'relay' || !postBase || !subBase) {
  console.error('usage: node bench/cluster.mjs relay POST_BASE SUB_BASE N');
  process.exit(2);
}
const N = Number(nArg || 10);
const hr = () => Number(process.hrtime.bigint()) / 1e6;
const firsts = [];
const deltas = [];
let failures = 0;

for (let i = 0; i < N; i++) {
  const c = await request('POST', `${postBase}/sessions`, '');
  if (c.status !== 201) { failures++; continue; }
  const sid = c.json.id;
  const st = sse(`${subBase}/sessions/${sid}/moorex`);
  const streams = [];
  try {
    await st.waitFor((e) => e.type === 'state-updated', 10000);
    const content = `relay probe ${i}: a message long enough for an answer of many chunks, one after the other`;
    const t0 = hr();
    const p = await request('POST', `${postBase}/sessions/${sid}/moorex`, { type: 'user-send-message', content });
    if (p.status !== 200) { failures++; continue; }
    const k = await st.waitFor((e) => e.type === 'input-received' && e.data.input?.type === 'brain-send-message-start', 10000);
    const mid = st.events[k].data.input.messageId;
    const arrivals = (base) => {
      const s = sse(`${base}/sessions/${sid}/messages/${mid}`);
      streams.push(s);
      const seen = new Map(); // offset -> time
      let off = 0;
      let first = null;
      const feed = () => {
        for (; s.fed < s.events.length; s.fed++) {
          const e = s.events[s.fed];
          const t = hr();
          if (e.type === 'snapshot') off = (e.data.content || '').length;
          if (e.type === 'chunk') { off += e.data.delta.length; seen.set(off, t); }
          if (first === null && ((e.type === 'snapshot' && e.data.content) || e.type === 'chunk')) first = t;
        }
      };
      s.fed = 0;
      s.waiters.add(feed);
      return { s, seen, first: () => first };
    };
    const sub = arrivals(subBase);
    const own = subBase === postBase ? sub : arrivals(postBase);
    await sub.s.waitFor((e) => e.type === 'complete' || e.type === 'stopped', 30000);
    await own.s.waitFor((e) => e.type === 'complete' || e.type === 'stopped', 30000);
    if (sub.first() !== null) firsts.push(sub.first() - t0);
    if (own !== sub) {
      for (const [off, t] of sub.seen) if (own.seen.has(off)) deltas.push(t - own.seen.get(off));
    } else {
      for (const _ of sub.seen) deltas.push(0);
    }
  } catch (e) {
    failures++;
    console.error(`relay: ${e.message}`);
  } finally {
    st.close();
    for (const s of streams) s.close();
  }
}
const f = (x) => (Number.isFinite(x) ? x.toFixed(2) : 'nan');
console.log(`relay n=${firsts.length} first_p50_ms=${f(pct(firsts, 50))} first_p99_ms=${f(pct(firsts, 99))} ` +
            `tok_p50_ms=${f(pct(deltas, 50))} tok_p99_ms=${f(pct(deltas, 99))} tokens=${deltas.length} errors=${failures}`);
