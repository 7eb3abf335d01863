/*
 * streams - following the open session live (SPEC §4):
 *   the session stream: one EventSource on .../moorex?mode=patch, the whole
 *     state first, then JSON Patches, inputs and effects. When it breaks the
 *     page goes offline and reconnects (the browser's own retry, or ours with
 *     backoff after an HTTP error); the first whole state after that resyncs.
 *   the answer streams: one fetch-read SSE per message the state says is
 *     streaming (snapshot, chunks, reasoning, complete|stopped), retried
 *     while it streams; a snapshot that holds less than the page showed
 *     (a server restarted since, continuing its answer) never shrinks it.
 * Depends on api.js, composer.js and sessions.js (what a resync or a deleted
 * session asks of them), controls.js, inspector.js (the timeline), state.js.
 */
import { fetchAnswerStream, getSession, sessionStreamUrl } from './api.js';
import { retryFailedSends } from './composer.js';
import { renderControls } from './controls.js';
import { inputSummary, stateSummary, timelinePush } from './inspector.js';
import { leaveGoneSession, refreshSessionsSoon } from './sessions.js';
import { scheduleRender, ui } from './state.js';

const BACKOFF_MIN_MS = 1000;
const BACKOFF_MAX_MS = 10000;
const ANSWER_RETRY_MS = 1000;

function setConn(c) {
  if (ui.conn === c) return;
  ui.conn = c;
  if (c === 'online') ui.everOnline = true;
  renderControls();
}

/* Follow ui.sid from scratch, dropping the answer streams of the chat before. */
export function followSession() {
  for (const st of ui.streams.values()) st.ctrl?.abort();
  ui.streams.clear();
  connect();
}

function connect() {
  clearTimeout(ui.reconnectTimer);
  if (ui.es) ui.es.close();
  ui.es = null;
  if (!ui.sid) return;
  const sid = ui.sid;
  const es = new EventSource(sessionStreamUrl(sid));
  ui.es = es;
  if (ui.conn !== 'online') setConn(ui.everOnline ? 'offline' : 'connecting');
  // Each handler first checks that `es` is still the stream followed.
  es.onopen = () => {
    if (ui.es !== es) return;
    ui.backoff = BACKOFF_MIN_MS;
  };
  es.onmessage = (e) => {
    if (ui.es !== es) return;
    let ev;
    try { ev = JSON.parse(e.data); } catch { return; }
    onEvent(ev, e.lastEventId);
  };
  es.onerror = () => {
    if (ui.es !== es) return;
    if (ui.conn === 'online') timelinePush({ type: 'connection', summary: 'stream lost; reconnecting', cls: 'conn' });
    setConn('offline');
    ui.running.clear();
    if (es.readyState === EventSource.CLOSED) {
      // The browser gave up (an HTTP error): find out why, then retry ourselves.
      es.close();
      ui.es = null;
      checkGone(sid);
    }
    scheduleRender();
  };
}

async function checkGone(sid) {
  try {
    await getSession(sid);
  } catch (e) {
    if (e.status === 404 && sid === ui.sid) return leaveGoneSession(sid);
  }
  if (sid !== ui.sid) return;
  clearTimeout(ui.reconnectTimer);
  ui.reconnectTimer = setTimeout(connect, ui.backoff);
  ui.backoff = Math.min(ui.backoff * 2, BACKOFF_MAX_MS);
}

// RFC 6902 add / replace / remove at any depth (the server sends "replace"
// of a top-level key or of "/list/<i>", "add" at "/list/-", and may touch
// one key of an object such as toolPolicies). What a patch touches is
// copied, never mutated, so a state object once rendered stays as it was.
function applyPatch(state, ops) {
  const next = { ...state };
  const fresh = new Set([next]);
  for (const op of ops || []) {
    const keys = op.path.split('/').slice(1).map((k) => k.replace(/~1/g, '/').replace(/~0/g, '~'));
    if (!keys.length) continue;
    let box = next;
    for (const k of keys.slice(0, -1)) {
      let child = box[k];
      if (child === null || typeof child !== 'object') { child = {}; }
      if (!fresh.has(child)) {
        child = Array.isArray(child) ? [...child] : { ...child };
        fresh.add(child);
      }
      box[k] = child;
      box = child;
    }
    const last = keys[keys.length - 1];
    if (Array.isArray(box)) {
      const at = last === '-' ? box.length : Number(last);
      if (op.op === 'remove') box.splice(at, 1);
      else if (op.op === 'add') box.splice(at, 0, op.value);
      else box[at] = op.value;
    } else if (op.op === 'remove') {
      delete box[last];
    } else {
      box[last] = op.value;
    }
  }
  return next;
}

function onEvent(ev, id) {
  const seq = id ? Number(id) : null;
  if (seq !== null && !Number.isNaN(seq)) ui.lastSeq = seq;
  switch (ev.type) {
    case 'state-updated': {
      const first = ui.conn !== 'online';
      const prevUsers = ui.state?.userMessages?.length || 0;
      ui.state = ev.state;
      if (first) {
        setConn('online');
        timelinePush({ seq, type: 'connection', summary: ui.timeline.length ? 'resynced: current state received' : 'connected: current state received', cls: 'conn' });
        refreshSessionsSoon();
        retryFailedSends();
      } else {
        timelinePush({ seq, type: 'state-updated', summary: stateSummary(ev.state), cls: 'state' });
      }
      if ((ev.state?.userMessages?.length || 0) !== prevUsers) refreshSessionsSoon();
      syncStreams();
      break;
    }
    case 'state-patch':
      // A patch only follows a whole state on the same stream.
      if (ui.state) onEvent({ type: 'state-updated', state: applyPatch(ui.state, ev.patch) }, id);
      break;
    case 'input-received':
      timelinePush({ seq, type: ev.input?.type || 'input', summary: inputSummary(ev.input), detail: ev.input, cls: 'input' });
      break;
    case 'effect-started':
    case 'effect-completed':
    case 'effect-canceled':
    case 'effect-cancelled':
    case 'effect-failed': {
      if (ev.type === 'effect-started') ui.running.set(ev.key, Date.now());
      else ui.running.delete(ev.key);
      const verb = ev.type.slice(7);
      timelinePush({ seq, type: ev.type, summary: ev.key + (ev.error ? ` · ${ev.error}` : ''), detail: ev, cls: `effect ${verb}` });
      break;
    }
    default:
      timelinePush({ seq, type: ev.type || 'event', summary: '', detail: ev, cls: 'other' });
  }
  scheduleRender();
}

/* One answer stream per message the state says is streaming, and no others. */
function syncStreams() {
  const s = ui.state;
  const live = new Set();
  for (const m of s?.assistantMessages || []) {
    if (m.status !== 'streaming') continue;
    live.add(m.id);
    const st = ui.streams.get(m.id);
    if (!st || (!st.active && !st.done && !st.retry)) streamAnswer(ui.sid, m.id);
  }
  for (const [id, st] of ui.streams) {
    if (!live.has(id)) {
      st.ctrl?.abort();
      clearTimeout(st.retry);
      ui.streams.delete(id);
    }
  }
}

/*
 * What the page shows of an answer: the server's text (st.text), except
 * that after a restart (SPEC 3.7) a snapshot may hold less than this page
 * already showed, the server continuing from its last durable batch; while
 * the server's text is a prefix of what shows, the page keeps showing it
 * (the same bytes come again), so the text never goes backwards on screen.
 * A final text (complete, stopped) is always taken as it is.
 */
function shownText(st) {
  const t = st.text ?? '';
  if (st.done || t.length >= st.content.length || !st.content.startsWith(t)) return t;
  return st.content;
}

/* The data of one SSE event block ("data:" lines joined), or '' for none. */
function sseData(block) {
  return block.split('\n').filter((l) => l.startsWith('data:'))
    .map((l) => l.slice(l[5] === ' ' ? 6 : 5)).join('\n');
}

async function streamAnswer(sid, mid) {
  let st = ui.streams.get(mid);
  if (!st) {
    st = { content: '', text: '', done: false, active: false, ctrl: null, retry: 0 };
    ui.streams.set(mid, st);
  }
  st.retry = 0;
  st.active = true;
  const ctrl = new AbortController();
  st.ctrl = ctrl;
  try {
    const r = await fetchAnswerStream(sid, mid, ctrl.signal);
    if (!r.ok || !r.body) throw new Error(`HTTP ${r.status}`);
    const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += value.replace(/\r\n?/g, '\n');
      let cut;
      while ((cut = buf.indexOf('\n\n')) >= 0) {
        const data = sseData(buf.slice(0, cut));
        buf = buf.slice(cut + 2);
        if (!data) continue;
        let f;
        try { f = JSON.parse(data); } catch { continue; }
        if (f.type === 'snapshot') {
          st.text = f.content || '';
          if (typeof f.reasoning === 'string') st.reasoning = f.reasoning;
        } else if (f.type === 'chunk') st.text = (st.text ?? st.content) + (f.delta || '');
        else if (f.type === 'reasoning') st.reasoning = (st.reasoning || '') + (f.delta ?? f.content ?? '');
        else if (f.type === 'complete' || f.type === 'stopped') {
          st.text = f.content ?? st.text ?? st.content;
          st.done = true;
        }
        st.content = shownText(st);
        if (ui.streams.get(mid) === st) scheduleRender();
      }
    }
  } catch {
    /* aborted, or the connection broke: syncStreams retries while it streams */
  } finally {
    st.active = false;
  }
  if (!st.done && ui.streams.get(mid) === st && sid === ui.sid) {
    st.retry = setTimeout(() => {
      st.retry = 0;
      if (ui.streams.get(mid) === st && ui.conn === 'online') streamAnswer(sid, mid);
    }, ANSWER_RETRY_MS);
  }
}

export function bindStreams() {
  window.addEventListener('online', () => { if (ui.conn !== 'online') connect(); });
}
