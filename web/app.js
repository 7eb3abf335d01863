/*
 * Reflexor web UI - a chat over the Reflexor HTTP/SSE API (SPEC §4, §7).
 *
 * Data flow:
 *   GET  .../sessions/:sid/moorex      one EventSource per tab: the session state
 *                                      (first event), inputs, effects, new states
 *   GET  .../sessions/:sid/messages/:m  fetch-streamed SSE per *streaming* answer:
 *                                      snapshot, chunks, complete|stopped
 *   POST .../sessions/:sid/moorex      user-send-message (client id, so a retry is
 *                                      idempotent) and user-cancel
 * The state is the truth; the only local extras are sends not yet in the state
 * (sending / failed), the text of answers still streaming, and the timeline.
 * Text from the network is only ever put in the DOM as textContent, or as
 * markdown rendered by marked and then sanitised by DOMPurify.
 */

const API = document.querySelector('meta[name="reflexor-api"]')?.content || '/api/reflexor';
const TIMELINE_MAX = 500;
const $ = (id) => document.getElementById(id);

const ui = {
  sid: null,
  state: null,
  lastSeq: null,
  es: null,
  conn: 'connecting',      // connecting | online | offline
  everOnline: false,
  reconnectTimer: 0,
  backoff: 1000,
  sessions: [],
  timeline: [],
  running: new Map(),      // effect key -> started at (ms)
  streams: new Map(),      // message id -> {content, done, ctrl, active, retry}
  pending: new Map(),      // message id -> {id, sid, content, status, error, at}
  openTools: new Set(),    // tool card ids the user expanded
  summaryOpen: false,
  nodes: new Map(),        // thread key -> {el, sig}
  renderQueued: false,
  stickToBottom: true,
};

/* ------------------------------------------------------------------ helpers */

function uuid() {
  if (globalThis.crypto?.randomUUID) return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = [...b].map((x) => x.toString(16).padStart(2, '0')).join('');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children) if (c !== null && c !== undefined && c !== false) e.append(c);
  return e;
}

const SVG_NS = 'http://www.w3.org/2000/svg';
function icon(paths, cls = '') {
  const s = document.createElementNS(SVG_NS, 'svg');
  s.setAttribute('viewBox', '0 0 24 24');
  s.setAttribute('aria-hidden', 'true');
  if (cls) s.setAttribute('class', cls);
  for (const d of paths) {
    const p = document.createElementNS(SVG_NS, 'path');
    p.setAttribute('d', d);
    s.append(p);
  }
  return s;
}
const ICONS = {
  copy: ['M9 9h10v10H9z', 'M5 15V5h10'],
  check: ['M5 12.5l4.5 4.5L19 7'],
  trash: ['M4 7h16', 'M10 11v6M14 11v6', 'M6 7l1 13h10l1-13', 'M9 7V4h6v3'],
  tool: ['M14.7 6.3a4 4 0 0 0-5.4 5.1L4 16.7V20h3.3l5.3-5.3a4 4 0 0 0 5.1-5.4l-2.4 2.4-2.3-.6-.6-2.3z'],
  chevron: ['M9 6l6 6-6 6'],
  retry: ['M4 12a8 8 0 1 0 2.3-5.7', 'M4 4v5h5'],
  layers: ['M12 3l9 5-9 5-9-5z', 'M3 13l9 5 9-5'],
  bot: ['M4 12a8 8 0 0 1 13.7-5.6M20 12a8 8 0 0 1-13.7 5.6', 'M18.5 3v4h-4M5.5 21v-4h4'],
};

function fmtTime(ms, seconds = false) {
  if (!ms) return '';
  const opts = seconds ? { hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false }
    : { hour: 'numeric', minute: '2-digit' };
  return new Date(ms).toLocaleTimeString([], opts);
}

function fmtRelative(ms) {
  if (!ms) return '';
  const s = Math.round((Date.now() - ms) / 1000);
  if (s < 45) return 'just now';
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  const d = new Date(ms);
  return d.toLocaleDateString([], { month: 'short', day: 'numeric' });
}

function clip(text, n) {
  const t = String(text ?? '').replace(/\s+/g, ' ').trim();
  return t.length > n ? `${t.slice(0, n - 1)}…` : t;
}

function toast(msg, ms = 4000) {
  const t = $('toast');
  t.textContent = msg;
  t.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.hidden = true; }, ms);
}

class ApiError extends Error {
  constructor(message, { status = 0, retryable = false, data = null } = {}) {
    super(message);
    this.status = status;
    this.retryable = retryable;
    this.data = data;
  }
}

function describeError(status, data) {
  const reason = data?.reason || data?.error;
  const msg = data?.message;
  switch (status) {
    case 400: return msg ? `Invalid: ${msg}` : 'The server refused the input as invalid';
    case 401: return 'Not authorised (the server needs a token)';
    case 403: return 'Not allowed';
    case 404: return 'This chat no longer exists';
    case 409: return `Rejected by the session${reason ? ` (${reason})` : ''}`;
    case 413: return 'Message too long';
    case 415: return 'Unsupported content type';
    case 429: return 'The server is busy, try again';
    case 503: return 'The server is shutting down';
    default: return msg || `Server error ${status}`;
  }
}

async function api(method, path, body) {
  let r;
  try {
    r = await fetch(API + path, {
      method,
      cache: 'no-store',
      headers: body === undefined ? { Accept: 'application/json' }
        : { 'Content-Type': 'application/json', Accept: 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch {
    throw new ApiError('Cannot reach the server', { retryable: true });
  }
  if (r.status === 204) return null;
  let data = null;
  try { data = await r.json(); } catch { /* not JSON */ }
  if (!r.ok) {
    throw new ApiError(describeError(r.status, data), {
      status: r.status, data, retryable: r.status >= 500 || r.status === 429 || r.status === 408,
    });
  }
  return data;
}

const enc = encodeURIComponent;

/* ----------------------------------------------------------------- markdown */

let purifyReady = false;
function setupPurify() {
  if (purifyReady || !window.DOMPurify?.sanitize) return purifyReady;
  window.DOMPurify.addHook('afterSanitizeAttributes', (node) => {
    if (node.tagName === 'A' && node.hasAttribute('href')) {
      node.setAttribute('target', '_blank');
      node.setAttribute('rel', 'noopener noreferrer nofollow');
    }
    if (node.tagName === 'IMG') {
      node.setAttribute('loading', 'lazy');
      node.setAttribute('referrerpolicy', 'no-referrer');
    }
  });
  purifyReady = true;
  return true;
}

/* Markdown -> sanitised DOM inside `target`. Without the libraries: plain text. */
function renderMarkdown(target, text) {
  if (!window.marked?.parse || !setupPurify()) {
    target.textContent = text;
    target.classList.add('plain');
    return;
  }
  const html = window.marked.parse(text, { gfm: true, breaks: true, async: false });
  target.innerHTML = window.DOMPurify.sanitize(html, {
    FORBID_TAGS: ['style', 'form', 'input', 'button', 'textarea', 'select', 'iframe', 'object', 'embed'],
    FORBID_ATTR: ['style'],
  });
  for (const pre of target.querySelectorAll('pre')) decorateCode(pre);
}

function decorateCode(pre) {
  const code = pre.querySelector('code');
  const lang = /language-([\w+#-]+)/.exec(code?.className || '')?.[1] || '';
  const btn = el('button', {
    type: 'button', class: 'code-copy', 'aria-label': `Copy ${lang || 'code'} to clipboard`,
  }, icon(ICONS.copy), el('span', { text: 'Copy' }));
  btn.addEventListener('click', () => copyText((code || pre).textContent, btn));
  const head = el('div', { class: 'code-head' }, el('span', { class: 'code-lang', text: lang || 'code' }), btn);
  const wrap = el('div', { class: 'code-block' });
  pre.replaceWith(wrap);
  wrap.append(head, pre);
}

async function copyText(text, btn) {
  let ok = false;
  try {
    await navigator.clipboard.writeText(text);
    ok = true;
  } catch {
    const ta = el('textarea', { class: 'sr-only', 'aria-hidden': 'true' });
    ta.value = text;
    document.body.append(ta);
    ta.select();
    try { ok = document.execCommand('copy'); } catch { ok = false; }
    ta.remove();
  }
  if (!btn) return;
  const label = btn.querySelector('span');
  const old = label?.textContent;
  btn.classList.add('done');
  if (label) label.textContent = ok ? 'Copied' : 'Copy failed';
  setTimeout(() => { btn.classList.remove('done'); if (label) label.textContent = old; }, 1500);
}

/* ------------------------------------------------------------ derived state */

function lastOf(a) { return a && a.length ? a[a.length - 1] : null; }

function toolResultTime(s) {
  let t = 0;
  for (const c of s.toolCallRecords || []) if (c.result && c.result.receivedAt > t) t = c.result.receivedAt;
  return t;
}

function isStreaming(s) {
  return !!s && (s.assistantMessages || []).some((m) => m.status === 'streaming');
}

function pendingTools(s) {
  return !!s && (s.toolCallRecords || []).some((c) => !c.result);
}

/* The brain has been asked and nothing streams yet. */
function isThinking() {
  const s = ui.state;
  if (!s || isStreaming(s)) return false;
  const sent = [...ui.pending.values()].some((p) => p.sid === ui.sid && p.status === 'sent');
  if (sent) return true;
  const T = Math.max(lastOf(s.userMessages)?.receivedAt || 0, toolResultTime(s));
  if (!pendingTools(s) && T > (s.calledBrainAt || 0)) return true;
  for (const k of ui.running.keys()) if (k.startsWith('ask-brain-')) return !pendingTools(s);
  return false;
}

function isBusy() {
  return isStreaming(ui.state) || pendingTools(ui.state) || isThinking();
}

/* ------------------------------------------------------------------ render */

function scheduleRender() {
  if (ui.renderQueued) return;
  ui.renderQueued = true;
  requestAnimationFrame(() => {
    ui.renderQueued = false;
    render();
  });
}

function render() {
  const box = $('messages');
  const nearBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 120;
  renderThread();
  renderControls();
  renderInspector();
  if (ui.stickToBottom || nearBottom) box.scrollTop = box.scrollHeight;
  updateJump();
}

function threadItems() {
  const s = ui.state;
  const items = [];
  if (s) {
    let i = 0;
    for (const u of s.userMessages || []) items.push({ kind: 'user', t: u.receivedAt, i: i++, m: u });
    for (const a of s.assistantMessages || []) items.push({ kind: 'assistant', t: a.receivedAt, i: i++, m: a });
    for (const c of s.toolCallRecords || []) items.push({ kind: 'tool', t: c.calledAt, i: i++, m: c });
    items.sort((a, b) => a.t - b.t || a.i - b.i);
  }
  const known = new Set((s?.userMessages || []).map((u) => u.id));
  for (const p of ui.pending.values()) {
    if (p.sid !== ui.sid) continue;
    if (known.has(p.id)) { ui.pending.delete(p.id); continue; }
    items.push({ kind: 'user', t: Infinity, m: { id: p.id, content: p.content, receivedAt: p.at }, pending: p });
  }
  return items;
}

function renderThread() {
  const thread = $('thread');
  const s = ui.state;
  const items = threadItems();
  const want = [];
  const cut = s?.summaryCutAt || 0;
  let bannerPlaced = !(s && s.contextSummary);
  for (const it of items) {
    if (!bannerPlaced && it.t > cut) {
      want.push(summaryNode(s));
      bannerPlaced = true;
    }
    const compressed = !!(s?.contextSummary) && it.t <= cut;
    if (it.kind === 'user') want.push(userNode(it.m, it.pending, compressed));
    else if (it.kind === 'assistant') want.push(assistantNode(it.m, compressed));
    else want.push(toolNode(it.m, compressed));
  }
  if (!bannerPlaced) want.push(summaryNode(s));
  if (isThinking()) want.push(thinkingNode());

  const keep = new Set(want.map((n) => n.key));
  for (const [k, n] of ui.nodes) if (!keep.has(k)) { n.el.remove(); ui.nodes.delete(k); }
  let prev = null;
  for (const n of want) {
    const next = prev ? prev.nextSibling : thread.firstChild;
    if (next !== n.el) thread.insertBefore(n.el, next);
    prev = n.el;
  }
  const empty = items.length === 0 && !isThinking();
  $('welcome').hidden = !empty || !ui.sid;
  thread.hidden = empty;
}

/* Reuse the node under `key` when its signature is unchanged. */
function node(key, sig, build, update) {
  let n = ui.nodes.get(key);
  if (n && n.sig === sig) return { key, el: n.el };
  if (n && update) {
    update(n.el);
    n.sig = sig;
    return { key, el: n.el };
  }
  const e = build();
  if (n) n.el.replaceWith(e);
  ui.nodes.set(key, { el: e, sig });
  return { key, el: e };
}

function userNode(m, pending, compressed) {
  const status = pending ? pending.status : 'stored';
  const sig = `${status}|${pending?.error || ''}|${compressed}`;
  return node(`u:${m.id}`, sig, () => {
    const meta = el('div', { class: 'msg-meta' });
    if (pending?.status === 'sending' || pending?.status === 'sent') {
      meta.append(el('span', { class: 'sending', text: pending.status === 'sending' ? 'Sending…' : 'Sent' }));
    } else if (pending?.status === 'failed') {
      meta.append(
        el('span', { class: 'failed', role: 'alert', text: `Not sent: ${pending.error || 'error'}` }),
        el('button', {
          type: 'button', class: 'link-btn retry', 'aria-label': 'Retry sending this message',
          onclick: () => postMessage(pending),
        }, icon(ICONS.retry), el('span', { text: 'Retry' })),
        el('button', {
          type: 'button', class: 'link-btn', 'aria-label': 'Discard this message',
          onclick: () => { ui.pending.delete(pending.id); scheduleRender(); },
        }, el('span', { text: 'Discard' })),
      );
    } else {
      meta.append(el('time', { text: fmtTime(m.receivedAt) }));
    }
    return el('article', {
      class: `msg user${compressed ? ' is-compressed' : ''}`, 'data-id': m.id, 'data-kind': 'user',
      'data-pending': pending ? pending.status : null, 'aria-label': 'You',
    },
    el('div', { class: 'bubble', text: m.content }),
    meta);
  });
}

function assistantText(m) {
  if (m.status === 'streaming') {
    const st = ui.streams.get(m.id);
    if (st && st.content.length >= (m.content || '').length) return st.content;
  }
  return m.content || '';
}

function assistantNode(m, compressed) {
  const text = assistantText(m);
  const sig = `${m.status}|${compressed}|${text.length}|${text.slice(-32)}`;
  const fill = (art) => {
    art.dataset.status = m.status;
    art.classList.toggle('is-compressed', compressed);
    const md = art.querySelector('.md');
    if (md._text !== text) {
      md._text = text;
      renderMarkdown(md, text);
      art.querySelector('.copy-msg').hidden = !text;
    }
    const meta = art.querySelector('.msg-meta .state');
    meta.textContent = '';
    if (m.status === 'stopped') meta.append(el('span', { class: 'badge stopped', text: 'Stopped' }));
    else if (m.status === 'streaming') meta.append(el('span', { class: 'badge live', text: 'Streaming' }));
    else meta.append(el('time', { text: fmtTime(m.updatedAt || m.receivedAt) }));
    art.setAttribute('aria-busy', m.status === 'streaming' ? 'true' : 'false');
  };
  return node(`a:${m.id}`, sig, () => {
    const copy = el('button', {
      type: 'button', class: 'link-btn copy-msg', 'aria-label': 'Copy answer',
    }, icon(ICONS.copy), el('span', { text: 'Copy' }));
    copy.addEventListener('click', () => copyText(art.querySelector('.md')._text || '', copy));
    const art = el('article', {
      class: 'msg assistant', 'data-id': m.id, 'data-kind': 'assistant', 'aria-label': 'Reflexor',
    },
    el('div', { class: 'avatar', 'aria-hidden': 'true' }, icon(ICONS.bot)),
    el('div', { class: 'msg-body' },
      el('div', { class: 'md' }),
      el('div', { class: 'msg-meta' }, el('span', { class: 'state' }), copy)));
    fill(art);
    return art;
  }, fill);
}

function prettyJson(text) {
  if (typeof text !== 'string') return JSON.stringify(text, null, 2);
  try { return JSON.stringify(JSON.parse(text), null, 2); } catch { return text; }
}

function inlineArgs(text) {
  try {
    const v = typeof text === 'string' ? JSON.parse(text) : text;
    if (v && typeof v === 'object' && !Array.isArray(v)) {
      const vals = Object.values(v);
      if (vals.length === 0) return '';
      if (vals.length === 1 && typeof vals[0] !== 'object') return clip(String(vals[0]), 48);
    }
    return clip(JSON.stringify(v), 48);
  } catch {
    return clip(String(text), 48);
  }
}

/* A one-line view of a result: a JSON object shows its first plain value. */
function inlineResult(text) {
  try {
    const v = JSON.parse(text);
    if (v && typeof v === 'object') {
      const first = Object.values(v).find((x) => x === null || typeof x !== 'object');
      if (first !== undefined) return clip(String(first), 48);
    }
  } catch { /* plain text */ }
  return clip(text, 48);
}

function toolNode(c, compressed) {
  const r = c.result;
  const state = !r ? 'pending' : r.isSuccess ? 'success' : 'error';
  const sig = `${state}|${compressed}|${c.isLoaded}`;
  return node(`t:${c.id}`, sig, () => {
    const resultText = !r ? '' : r.isSuccess ? String(r.content ?? '') : String(r.error ?? 'error');
    const statusLabel = { pending: 'Running', success: 'Done', error: 'Error' }[state];
    const args = inlineArgs(c.parameters);
    const summary = el('summary', { 'aria-label': `Tool ${c.name}: ${statusLabel}` },
      el('span', { class: 'tool-icon', 'aria-hidden': 'true' }, icon(ICONS.tool)),
      el('span', { class: 'tool-name', text: c.name }),
      args ? el('code', { class: 'tool-args-inline', text: args }) : null,
      r ? el('span', { class: 'tool-result-inline', text: `→ ${inlineResult(resultText)}` }) : null,
      el('span', { class: 'grow' }),
      el('span', { class: `tool-status ${state}` },
        state === 'pending' ? el('span', { class: 'spinner', 'aria-hidden': 'true' }) : null,
        el('span', { text: statusLabel })),
      el('span', { class: 'chev', 'aria-hidden': 'true' }, icon(ICONS.chevron)));
    const body = el('div', { class: 'tool-body' },
      el('div', { class: 'tool-sec' },
        el('div', { class: 'tool-label', text: 'Arguments' }),
        el('pre', { class: 'tool-pre', text: prettyJson(c.parameters) })),
      el('div', { class: 'tool-sec' },
        el('div', { class: 'tool-label', text: r ? (r.isSuccess ? 'Result' : 'Error') : 'Result' }),
        r ? el('pre', { class: `tool-pre${r.isSuccess ? '' : ' err'}`, text: prettyJson(resultText) })
          : el('p', { class: 'muted', text: 'Waiting for the tool…' })),
      el('div', { class: 'tool-foot muted', text: `id ${c.id} · called ${fmtTime(c.calledAt, true)}${r ? ` · answered ${fmtTime(r.receivedAt, true)}` : ''}` }));
    const card = el('details', {
      class: `tool${compressed ? ' is-compressed' : ''}`, 'data-kind': 'tool', 'data-id': c.id,
      'data-name': c.name, 'data-state': state, open: ui.openTools.has(c.id),
    }, summary, body);
    card.addEventListener('toggle', () => {
      if (card.open) ui.openTools.add(c.id); else ui.openTools.delete(c.id);
    });
    return el('div', { class: 'tool-row' }, card);
  });
}

function summaryNode(s) {
  const sig = `${s.summaryCutAt}|${s.contextSummary.length}|${ui.summaryOpen}`;
  return node('summary', sig, () => {
    const text = el('div', { class: 'compressed-text md', id: 'summary-text', hidden: !ui.summaryOpen });
    renderMarkdown(text, s.contextSummary);
    const btn = el('button', {
      type: 'button', class: 'link-btn', 'aria-expanded': String(ui.summaryOpen), 'aria-controls': 'summary-text',
      text: ui.summaryOpen ? 'Hide summary' : 'Show summary',
      onclick: () => { ui.summaryOpen = !ui.summaryOpen; scheduleRender(); },
    });
    return el('div', { class: 'compressed', 'data-kind': 'compressed', role: 'note' },
      el('div', { class: 'compressed-line' }, icon(ICONS.layers),
        el('span', { text: `Earlier history was compressed for the model (up to ${fmtTime(s.summaryCutAt)})` }),
        btn),
      text);
  });
}

function thinkingNode() {
  return node('thinking', 'x', () => el('div', {
    class: 'msg assistant thinking', 'data-kind': 'thinking', role: 'status', 'aria-label': 'Reflexor is thinking',
  },
  el('div', { class: 'avatar', 'aria-hidden': 'true' }, icon(ICONS.bot)),
  el('div', { class: 'dots', 'aria-hidden': 'true' }, el('span'), el('span'), el('span')),
  el('span', { class: 'thinking-text', text: 'Thinking…' })));
}

function renderControls() {
  const online = ui.conn === 'online';
  const app = $('app');
  app.dataset.conn = ui.conn;
  $('conn-text').textContent = online ? 'Live' : ui.conn === 'connecting' && !ui.everOnline ? 'Connecting…' : 'Offline · reconnecting';
  $('conn').title = online ? 'Connected to the session stream' : 'The session stream is down; retrying automatically';
  const send = $('send');
  const empty = !$('input').value.trim();
  send.disabled = !online || empty || !ui.sid;
  const hint = $('composer-hint');
  if (!online) {
    hint.textContent = ui.everOnline ? 'Offline: sending is paused until the connection is back' : 'Connecting to the server…';
    hint.classList.add('warn');
    send.title = 'Sending is disabled while offline';
  } else {
    hint.textContent = 'Enter to send, Shift+Enter for a new line';
    hint.classList.remove('warn');
    send.title = 'Send (Enter)';
  }
  $('stop').hidden = !isBusy();
  $('stop').disabled = !online;
  const title = currentTitle();
  $('chat-title').textContent = title;
  document.title = ui.sid && title !== 'New chat' ? `${title} · Reflexor` : 'Reflexor';
}

function currentTitle() {
  const fromList = ui.sessions.find((x) => x.id === ui.sid)?.title;
  if (fromList) return fromList;
  const first = ui.state?.userMessages?.[0]?.content;
  return first ? clip(first, 60) : 'New chat';
}

/* ---------------------------------------------------------------- sessions */

async function loadSessions() {
  try {
    const list = await api('GET', '/sessions');
    ui.sessions = Array.isArray(list) ? list : [];
    ui.sessions.sort((a, b) => (b.updatedAt || b.createdAt || 0) - (a.updatedAt || a.createdAt || 0));
  } catch (e) {
    if (ui.conn === 'online') toast(`Could not load chats: ${e.message}`);
  }
  renderSessions();
  renderControls();
}

let sessionsTimer = 0;
function refreshSessionsSoon() {
  clearTimeout(sessionsTimer);
  sessionsTimer = setTimeout(loadSessions, 300);
}

function renderSessions() {
  const ul = $('session-list');
  ul.textContent = '';
  $('session-empty').hidden = ui.sessions.length > 0;
  for (const s of ui.sessions) {
    const title = s.title || (s.id === ui.sid && currentTitle()) || 'New chat';
    const active = s.id === ui.sid;
    const del = el('button', {
      type: 'button', class: 'session-del', 'aria-label': `Delete chat “${clip(title, 40)}”`, title: 'Delete chat',
    }, icon(ICONS.trash));
    del.addEventListener('click', (ev) => {
      ev.stopPropagation();
      if (!del.classList.contains('confirm')) {
        del.classList.add('confirm');
        del.setAttribute('aria-label', `Confirm: delete chat “${clip(title, 40)}”`);
        del.title = 'Click again to delete';
        setTimeout(() => { del.classList.remove('confirm'); }, 3000);
        return;
      }
      deleteSession(s.id);
    });
    const open = el('a', {
      class: 'session-link', href: `#/${enc(s.id)}`, 'aria-current': active ? 'page' : null,
      onclick: () => closeSidebar(),
    },
    el('span', { class: 'session-title', text: title }),
    el('span', { class: 'session-sub', text: `${fmtRelative(s.updatedAt || s.createdAt)}${s.messageCount ? ` · ${s.messageCount} msg` : ''}` }));
    ul.append(el('li', { class: `session${active ? ' active' : ''}`, 'data-id': s.id }, open, del));
  }
}

async function newChat() {
  closeSidebar();
  // An untouched chat is reused rather than piling up empty sessions.
  if (ui.sid && ui.state && !ui.state.userMessages?.length && ![...ui.pending.values()].some((p) => p.sid === ui.sid)) {
    $('input').focus();
    return ui.sid;
  }
  try {
    const r = await api('POST', '/sessions', {});
    ui.sessions.unshift({ id: r.id, createdAt: Date.now(), updatedAt: Date.now(), title: '', messageCount: 0 });
    location.hash = `#/${enc(r.id)}`;
    openSession(r.id);
    refreshSessionsSoon();
    $('input').focus();
    return r.id;
  } catch (e) {
    toast(`Could not create a chat: ${e.message}`);
    return null;
  }
}

async function deleteSession(id) {
  try {
    await api('DELETE', `/sessions/${enc(id)}`);
  } catch (e) {
    if (e.status !== 404) { toast(`Could not delete: ${e.message}`); return; }
  }
  ui.sessions = ui.sessions.filter((s) => s.id !== id);
  for (const p of [...ui.pending.values()]) if (p.sid === id) ui.pending.delete(p.id);
  if (id === ui.sid) {
    const next = ui.sessions[0];
    if (next) location.hash = `#/${enc(next.id)}`;
    else { ui.sid = null; await newChat(); }
  }
  renderSessions();
}

function sidFromHash() {
  const m = /^#\/(.+)$/.exec(location.hash);
  return m ? decodeURIComponent(m[1]) : null;
}

function openSession(sid) {
  if (sid === ui.sid && ui.es) return;
  for (const st of ui.streams.values()) st.ctrl?.abort();
  ui.streams.clear();
  for (const n of ui.nodes.values()) n.el.remove();
  ui.nodes.clear();
  ui.sid = sid;
  ui.state = null;
  ui.lastSeq = null;
  ui.timeline = [];
  ui.running.clear();
  ui.summaryOpen = false;
  ui.stickToBottom = true;
  renderSessions();
  connect();
  render();
}

/* ------------------------------------------------------- the session stream */

function setConn(c) {
  if (ui.conn === c) return;
  ui.conn = c;
  if (c === 'online') ui.everOnline = true;
  renderControls();
}

function connect() {
  clearTimeout(ui.reconnectTimer);
  if (ui.es) ui.es.close();
  ui.es = null;
  if (!ui.sid) return;
  const sid = ui.sid;
  // mode=patch: after the first state, each change arrives as a JSON Patch
  // the size of the change, not of the history.
  const es = new EventSource(`${API}/sessions/${enc(sid)}/moorex?mode=patch`);
  ui.es = es;
  if (ui.conn !== 'online') setConn(ui.everOnline ? 'offline' : 'connecting');
  es.onopen = () => {
    if (ui.es !== es) return;
    ui.backoff = 1000;
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
    await api('GET', `/sessions/${enc(sid)}`);
  } catch (e) {
    if (e.status === 404 && sid === ui.sid) {
      toast('This chat no longer exists');
      ui.sessions = ui.sessions.filter((s) => s.id !== sid);
      await loadSessions();
      const next = ui.sessions[0];
      if (next) location.hash = `#/${enc(next.id)}`;
      else { ui.sid = null; newChat(); }
      return;
    }
  }
  if (sid !== ui.sid) return;
  clearTimeout(ui.reconnectTimer);
  ui.reconnectTimer = setTimeout(connect, ui.backoff);
  ui.backoff = Math.min(ui.backoff * 2, 10000);
}

// RFC 6902 as the server sends it: "replace" of a top-level key or of
// "/list/<i>", "add" at "/list/-". Touched arrays are copied, never mutated,
// so a state object once rendered stays as it was.
function applyPatch(state, ops) {
  const next = { ...state };
  for (const op of ops || []) {
    const [, key, at] = op.path.split('/');
    if (at === undefined) { next[key] = op.value; continue; }
    if (next[key] === state[key]) next[key] = [...state[key]];
    if (at === '-') next[key].push(op.value);
    else next[key][Number(at)] = op.value;
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

function stateSummary(s) {
  if (!s) return '';
  const a = s.assistantMessages?.length || 0;
  const u = s.userMessages?.length || 0;
  const t = s.toolCallRecords?.length || 0;
  return `${u} user · ${a} assistant · ${t} tool call${t === 1 ? '' : 's'}`;
}

function inputSummary(i) {
  if (!i) return '';
  switch (i.type) {
    case 'user-send-message': return clip(i.content, 80);
    case 'user-cancel': return 'stop requested';
    case 'brain-send-message-start': return `message ${clip(i.messageId, 18)}`;
    case 'brain-send-message-complete': return clip(i.content, 80);
    case 'brain-call-tools':
      return Object.entries(i.toolCalls || {}).map(([, v]) => `${v.name}(${inlineArgs(v.parameters)})`).join(', ');
    case 'brain-compress-history': return `summary up to ${fmtTime(i.cutAt)}`;
    case 'brain-load-tool-call': return i.toolCallId;
    case 'toolkit-respond': return `${i.toolCallId} → ${clip(typeof i.result === 'string' ? i.result : JSON.stringify(i.result), 60)}`;
    case 'toolkit-error': return `${i.toolCallId} ✕ ${clip(i.error, 60)}`;
    default: return '';
  }
}

/* ------------------------------------------------------- answer streaming */

function syncStreams() {
  const s = ui.state;
  const live = new Set();
  for (const m of s?.assistantMessages || []) {
    if (m.status !== 'streaming') continue;
    live.add(m.id);
    const st = ui.streams.get(m.id);
    if (!st || (!st.active && !st.done && !st.retry)) streamMessage(ui.sid, m.id);
  }
  for (const [id, st] of ui.streams) {
    if (!live.has(id)) {
      st.ctrl?.abort();
      clearTimeout(st.retry);
      ui.streams.delete(id);
    }
  }
}

async function streamMessage(sid, mid) {
  let st = ui.streams.get(mid);
  if (!st) {
    st = { content: '', done: false, active: false, ctrl: null, retry: 0 };
    ui.streams.set(mid, st);
  }
  st.retry = 0;
  st.active = true;
  const ctrl = new AbortController();
  st.ctrl = ctrl;
  try {
    const r = await fetch(`${API}/sessions/${enc(sid)}/messages/${enc(mid)}`, {
      headers: { Accept: 'text/event-stream' }, cache: 'no-store', signal: ctrl.signal,
    });
    if (!r.ok || !r.body) throw new Error(`HTTP ${r.status}`);
    const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += value.replace(/\r\n?/g, '\n');
      let cut;
      while ((cut = buf.indexOf('\n\n')) >= 0) {
        const block = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        const data = block.split('\n').filter((l) => l.startsWith('data:'))
          .map((l) => l.slice(l[5] === ' ' ? 6 : 5)).join('\n');
        if (!data) continue;
        let f;
        try { f = JSON.parse(data); } catch { continue; }
        if (f.type === 'snapshot') st.content = f.content || '';
        else if (f.type === 'chunk') st.content += f.delta || '';
        else if (f.type === 'complete' || f.type === 'stopped') {
          st.content = f.content ?? st.content;
          st.done = true;
        }
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
      if (ui.streams.get(mid) === st && ui.conn === 'online') streamMessage(sid, mid);
    }, 1000);
  }
}

/* ----------------------------------------------------------------- sending */

async function send(text) {
  text = text.trim();
  if (!text || ui.conn !== 'online') return false;
  if (!ui.sid && !(await newChat())) return false;
  const p = { id: uuid(), sid: ui.sid, content: text, status: 'sending', error: '', at: Date.now() };
  ui.pending.set(p.id, p);
  ui.stickToBottom = true;
  scheduleRender();
  postMessage(p);
  return true;
}

async function postMessage(p) {
  p.status = 'sending';
  p.error = '';
  scheduleRender();
  try {
    await api('POST', `/sessions/${enc(p.sid)}/moorex`, { type: 'user-send-message', messageId: p.id, content: p.content });
    if (ui.pending.get(p.id) === p) p.status = 'sent';
  } catch (e) {
    p.status = 'failed';
    p.error = e.message;
    p.retryable = e.retryable;
  }
  if (p.sid === ui.sid && ui.sessions.every((s) => s.id !== p.sid || !s.title)) refreshSessionsSoon();
  scheduleRender();
}

/* After a reconnect, resend what failed for a network reason (same id: idempotent). */
function retryFailedSends() {
  for (const p of ui.pending.values()) {
    if (p.sid === ui.sid && p.status === 'failed' && p.retryable && p.auto !== false) {
      p.auto = false;
      postMessage(p);
    }
  }
}

async function stop() {
  if (!ui.sid) return;
  try {
    await api('POST', `/sessions/${enc(ui.sid)}/moorex`, { type: 'user-cancel' });
  } catch (e) {
    toast(`Could not stop: ${e.message}`);
  }
}

/* --------------------------------------------------------------- inspector */

function timelinePush(e) {
  e.at = Date.now();
  ui.timeline.push(e);
  if (ui.timeline.length > TIMELINE_MAX) ui.timeline.splice(0, ui.timeline.length - TIMELINE_MAX);
  timelineDirty = true;
}
let timelineDirty = true;
let timelineShown = 0;
let stateShown = null;

function renderInspector() {
  const panel = $('inspector');
  if (panel.hidden) return;
  if (!$('panel-state').hidden && stateShown !== ui.state) {
    stateShown = ui.state;
    $('state-json').textContent = ui.state ? JSON.stringify(ui.state, null, 2) : '(no state yet)';
    $('state-meta').textContent = ui.state ? `seq ${ui.lastSeq ?? '–'} · updated ${fmtTime(ui.state.updatedAt, true)}` : '–';
  }
  if (!$('panel-timeline').hidden && timelineDirty) {
    timelineDirty = false;
    const ol = $('timeline');
    // Append only what is new; rebuild when the log was cut or cleared.
    if (timelineShown > ui.timeline.length || ol.children.length !== timelineShown ||
        ui.timeline.length >= TIMELINE_MAX) {
      ol.textContent = '';
      timelineShown = 0;
    }
    for (let i = timelineShown; i < ui.timeline.length; i++) ol.append(timelineRow(ui.timeline[i]));
    timelineShown = ui.timeline.length;
    $('timeline-count').textContent = `${ui.timeline.length} event${ui.timeline.length === 1 ? '' : 's'}`;
    if ($('timeline-follow').checked) ol.scrollTop = ol.scrollHeight;
  }
}

function timelineRow(e) {
  const head = el('div', { class: 'tl-head' },
    el('span', { class: 'tl-seq', text: e.seq != null ? `#${e.seq}` : '' }),
    el('span', { class: 'tl-type', text: e.type }),
    el('time', { class: 'tl-time', text: fmtTime(e.at, true) }));
  const sum = e.summary ? el('div', { class: 'tl-sum', text: e.summary }) : null;
  const li = el('li', { class: `tl ${e.cls || ''}`, 'data-type': e.type });
  if (e.detail) {
    li.append(el('details', { class: 'tl-detail' },
      el('summary', { title: 'Show the JSON' }, head, sum),
      el('pre', { text: JSON.stringify(e.detail, null, 2) })));
  } else {
    li.append(head, sum || '');
  }
  return li;
}

function showInspector(show) {
  $('inspector').hidden = !show;
  $('app').classList.toggle('inspector-open', show);
  $('toggle-inspector').setAttribute('aria-expanded', String(show));
  $('toggle-inspector').setAttribute('aria-label', show ? 'Hide inspector' : 'Show inspector');
  try { localStorage.setItem('reflexor.inspector', show ? '1' : '0'); } catch { /* ignore */ }
  timelineDirty = true;
  timelineShown = 0;
  $('timeline').textContent = '';
  stateShown = null;
  renderInspector();
}

function selectTab(name) {
  for (const t of ['timeline', 'state']) {
    const on = t === name;
    $(`tab-${t}`).setAttribute('aria-selected', String(on));
    $(`tab-${t}`).tabIndex = on ? 0 : -1;
    $(`panel-${t}`).hidden = !on;
  }
  timelineDirty = true;
  timelineShown = 0;
  $('timeline').textContent = '';
  stateShown = null;
  renderInspector();
}

/* ------------------------------------------------------------------ chrome */

function effectiveTheme() {
  const t = document.documentElement.dataset.theme;
  if (t === 'light' || t === 'dark') return t;
  return matchMedia('(prefers-color-scheme: dark)').matches ? 'dark' : 'light';
}

function renderTheme() {
  const dark = effectiveTheme() === 'dark';
  $('theme-label').textContent = dark ? 'Light mode' : 'Dark mode';
  $('theme-toggle').setAttribute('aria-label', dark ? 'Switch to light mode' : 'Switch to dark mode');
}

function openSidebar() {
  $('app').classList.add('sidebar-open');
  $('scrim').hidden = false;
  $('open-sidebar').setAttribute('aria-expanded', 'true');
  $('new-chat').focus();
}

function closeSidebar() {
  if (!$('app').classList.contains('sidebar-open')) return;
  $('app').classList.remove('sidebar-open');
  $('scrim').hidden = true;
  $('open-sidebar').setAttribute('aria-expanded', 'false');
}

function autosize() {
  const ta = $('input');
  ta.style.height = 'auto';
  ta.style.height = `${Math.min(ta.scrollHeight, 240)}px`;
}

function updateJump() {
  const box = $('messages');
  const far = box.scrollHeight - box.scrollTop - box.clientHeight > 200;
  $('jump').hidden = !far;
}

function bind() {
  const input = $('input');
  $('composer').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    if (await send(input.value)) {
      input.value = '';
      autosize();
      renderControls();
    }
  });
  input.addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing && ev.keyCode !== 229) {
      ev.preventDefault();
      $('composer').requestSubmit();
    }
  });
  input.addEventListener('input', () => { autosize(); renderControls(); });
  $('stop').addEventListener('click', stop);
  $('new-chat').addEventListener('click', () => newChat());
  $('open-sidebar').addEventListener('click', openSidebar);
  $('close-sidebar').addEventListener('click', closeSidebar);
  $('scrim').addEventListener('click', () => { closeSidebar(); });
  $('toggle-inspector').addEventListener('click', () => showInspector($('inspector').hidden));
  $('close-inspector').addEventListener('click', () => showInspector(false));
  $('tab-timeline').addEventListener('click', () => selectTab('timeline'));
  $('tab-state').addEventListener('click', () => selectTab('state'));
  for (const t of ['tab-timeline', 'tab-state']) {
    $(t).addEventListener('keydown', (ev) => {
      if (ev.key === 'ArrowLeft' || ev.key === 'ArrowRight') {
        const other = t === 'tab-timeline' ? 'state' : 'timeline';
        selectTab(other);
        $(`tab-${other}`).focus();
      }
    });
  }
  $('timeline-clear').addEventListener('click', () => { ui.timeline = []; timelineDirty = true; renderInspector(); });
  $('state-copy').addEventListener('click', (ev) => copyText(JSON.stringify(ui.state, null, 2), ev.currentTarget));
  $('theme-toggle').addEventListener('click', () => {
    const next = effectiveTheme() === 'dark' ? 'light' : 'dark';
    document.documentElement.dataset.theme = next;
    try { localStorage.setItem('reflexor.theme', next); } catch { /* ignore */ }
    renderTheme();
  });
  matchMedia('(prefers-color-scheme: dark)').addEventListener('change', renderTheme);
  for (const b of document.querySelectorAll('.suggestion')) {
    b.addEventListener('click', () => {
      input.value = b.dataset.text;
      autosize();
      renderControls();
      input.focus();
    });
  }
  $('messages').addEventListener('scroll', () => {
    const box = $('messages');
    ui.stickToBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 120;
    updateJump();
  }, { passive: true });
  new ResizeObserver(() => {
    const box = $('messages');
    if (ui.stickToBottom) box.scrollTop = box.scrollHeight;
  }).observe($('messages'));
  $('timeline-states').addEventListener('change', (ev) => {
    $('timeline').classList.toggle('hide-states', !ev.currentTarget.checked);
  });
  $('jump-btn').addEventListener('click', () => {
    const box = $('messages');
    box.scrollTo({ top: box.scrollHeight, behavior: 'smooth' });
  });
  document.addEventListener('keydown', (ev) => {
    if (ev.key === 'Escape') {
      if ($('app').classList.contains('sidebar-open')) closeSidebar();
      else if (!$('inspector').hidden && matchMedia('(max-width: 1100px)').matches) showInspector(false);
    }
  });
  window.addEventListener('hashchange', () => {
    const sid = sidFromHash();
    if (sid && sid !== ui.sid) openSession(sid);
  });
  window.addEventListener('online', () => { if (ui.conn !== 'online') connect(); });
  setInterval(() => { if (ui.sessions.length) renderSessions(); }, 60000);
}

async function start() {
  bind();
  renderTheme();
  let insp = false;
  try { insp = localStorage.getItem('reflexor.inspector') === '1'; } catch { /* ignore */ }
  if (insp && matchMedia('(min-width: 1101px)').matches) showInspector(true);
  renderControls();
  await loadSessions();
  let sid = sidFromHash();
  if (sid && !ui.sessions.some((s) => s.id === sid)) {
    // Not listed (yet): the stream tells whether it exists.
    ui.sessions.unshift({ id: sid, title: '', createdAt: 0, updatedAt: 0, messageCount: 0 });
  }
  if (!sid && ui.sessions.length) sid = ui.sessions[0].id;
  if (sid) {
    if (sidFromHash() !== sid) history.replaceState(null, '', `#/${enc(sid)}`);
    openSession(sid);
  } else {
    await newChat();
    if (!ui.sid) setTimeout(start2, 2000);
  }
  if (matchMedia('(min-width: 721px)').matches) $('input').focus();
}

/* The server was not reachable at load: keep trying until it is. */
async function start2() {
  await loadSessions();
  if (ui.sid) return;
  const sid = ui.sessions[0]?.id;
  if (sid) { history.replaceState(null, '', `#/${enc(sid)}`); openSession(sid); }
  else if (!(await newChat())) setTimeout(start2, 2000);
}

// Deferred classic scripts (marked, DOMPurify) have run before module scripts.
start();
