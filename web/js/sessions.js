/*
 * sessions - the chat list: load and draw it with titles, new chat, switch
 * (the URL hash names the open chat: #/<session id>), rename (PATCH), delete,
 * the results of a search (search.js runs it), and which chat to open at
 * load. Export and import are transfer.js. The list stays live across tabs: one tab of
 * the browser follows GET .../events (session-created, -updated, -deleted)
 * and passes what it hears to the others over a BroadcastChannel, so many
 * tabs cost one connection, not one each (a browser allows six per server).
 * The versions of one chat (forks.js) show as one entry: the version open,
 * else the one last seen.
 * Depends on api.js, controls.js, dom.js, forks.js, format.js, search.js,
 * state.js.
 * Following the open session live is streams.js's job, and streams.js sits
 * above this module (a resync or a deleted session calls back in here), so
 * main.js passes it in with setFollower().
 */
import {
  createSession, eventsStreamUrl, listSessions, removeSession, renameSession,
} from './api.js';
import { closeSidebar, renderControls } from './controls.js';
import { $, ICONS, el, icon, toast } from './dom.js';
import { familyOf, forgetSession, noteOpened, onForksChanged, openedAt } from './forks.js';
import { clip, fmtRelative, plainTitle } from './format.js';
import { bindSearch, search } from './search.js';
import { currentTitle, renderNow, scheduleRender, ui } from './state.js';

const STARTUP_RETRY_MS = 2000;
const EVENTS_RETRY_MS = 5000;
const PENCIL = ['M4 20h4L19 9l-4-4L4 16z', 'M13.5 6.5l4 4'];

let follow = () => {};
let refreshTimer = 0;

// Search: the query shown, its results so far, whether more may follow.
// Rename: {sid, where: 'list'|'top'} while a title is being edited.
let renaming = null;
let armed = null;          // the entry whose Delete was clicked once
let armedTimer = 0;
const items = new Map();   // entry id -> {li, sig}: the list as drawn

/* `fn()` follows ui.sid from scratch: the old session's streams are dropped. */
export function setFollower(fn) {
  follow = fn;
}

export const hashFor = (sid) => `#/${encodeURIComponent(sid)}`;

function sidFromHash() {
  const m = /^#\/(.+)$/.exec(location.hash);
  return m ? decodeURIComponent(m[1]) : null;
}

const byRecent = (a, b) => (b.updatedAt || b.createdAt || 0) - (a.updatedAt || a.createdAt || 0);

async function loadSessions() {
  try {
    const list = await listSessions();
    ui.sessions = Array.isArray(list) ? list : [];
    ui.sessions.sort(byRecent);
    ui.sessionsLoaded = true;
  } catch (e) {
    if (ui.conn === 'online') toast(`Could not load chats: ${e.message}`);
  }
  renderSessions();
  renderControls();
}

/* Titles and counts change on the server: reload the list once things settle. */
export function refreshSessionsSoon() {
  clearTimeout(refreshTimer);
  refreshTimer = setTimeout(loadSessions, 300);
}

/* A chat made here (a fork, an import) shows at once, before the list says so. */
export function addSession(id, state = null) {
  if (ui.sessions.some((s) => s.id === id)) return;
  const from = ui.sessions.find((s) => s.id === ui.sid);
  const now = Date.now();
  ui.sessions.unshift({
    id, createdAt: now, updatedAt: state?.updatedAt || now, title: from && familyOf(id) === familyOf(from.id) ? from.title : '',
    messageCount: state?.userMessages?.length || 0,
  });
  renderSessions();
}

const titleOf = (s) => plainTitle(s.title) || (s.id === ui.sid && currentTitle()) || 'New chat';

/* The list as people see it: one entry per chat, its versions folded in. */
function entries() {
  if (search.q) return search.results.map((s) => ({ shown: s, members: [s] }));
  const fams = new Map();
  for (const s of ui.sessions) {
    const root = familyOf(s.id);
    if (!fams.has(root)) fams.set(root, []);
    fams.get(root).push(s);
  }
  const out = [];
  for (const members of fams.values()) {
    let shown = members.find((m) => m.id === ui.sid);
    if (!shown) shown = members.reduce((a, b) => (openedAt(b.id) > openedAt(a.id) ? b : a));
    out.push({ shown, members });
  }
  return out;
}

/* What an entry shows, to redraw only the entries that changed. */
function entrySig({ shown: s, members }) {
  const updated = Math.max(...members.map((m) => m.updatedAt || m.createdAt || 0));
  return JSON.stringify([s.id, titleOf(s), members.some((m) => m.id === ui.sid), fmtRelative(updated),
    s.messageCount || 0, members.length, armed === s.id,
    renaming?.where === 'list' && members.some((m) => m.id === renaming.sid)]);
}

const FOCUSABLE = ['session-link', 'session-rename', 'session-del'];

/* Draw the list. Live events redraw it often (every input of every chat
 * moves its updatedAt), so an entry whose look did not change keeps its
 * node, and one redrawn keeps the focus on the same control. */
function renderSessions() {
  // Not under the person's typing: the rename redraws when it ends.
  if (renaming?.where === 'list' && document.activeElement?.classList.contains('session-rename-input')) return;
  const ul = $('session-list');
  const list = entries();
  const want = [];
  for (const e of list) {
    const sig = entrySig(e);
    let it = items.get(e.shown.id);
    if (!it || it.sig !== sig) {
      const li = sessionItem(e.shown, e.members);
      if (it) {
        const had = it.li.contains(document.activeElement)
          ? FOCUSABLE.find((c) => document.activeElement.classList.contains(c)) : null;
        it.li.replaceWith(li);
        if (had) li.querySelector(`.${had}`)?.focus();
      }
      it = { li, sig };
      items.set(e.shown.id, it);
    }
    want.push(it.li);
  }
  const keep = new Set(want);
  for (const [id, it] of items) if (!keep.has(it.li)) { it.li.remove(); items.delete(id); }
  let prev = null;
  for (const li of want) {
    const next = prev ? prev.nextSibling : ul.firstChild;
    if (next !== li) ul.insertBefore(li, next);
    prev = li;
  }
  const status = $('session-empty');
  if (search.q) {
    status.textContent = search.error ? `Search failed: ${search.error}`
      : search.busy && !list.length ? 'Searching…' : !list.length ? `No chats match “${clip(search.q, 40)}”.` : '';
  } else {
    status.textContent = list.length ? '' : 'No chats yet.';
  }
  status.hidden = !status.textContent;
  $('session-more').hidden = !(search.q && search.next !== null);
  $('session-more').disabled = search.busy;
  $('session-list').setAttribute('aria-label', search.q ? `Chats matching “${clip(search.q, 40)}”` : 'Chats');
}

function sessionItem(s, members) {
  const title = titleOf(s);
  const active = members.some((m) => m.id === ui.sid);
  const li = el('li', { class: `session${active ? ' active' : ''}`, 'data-id': s.id });
  if (renaming?.where === 'list' && members.some((m) => m.id === renaming.sid)) {
    li.append(renameInput(s, title, 'list'));
    return li;
  }
  const del = el('button', {
    type: 'button', class: 'session-del',
    'aria-label': `Delete chat “${clip(title, 40)}”${members.length > 1 ? ` and its ${members.length} versions` : ''}`,
    title: 'Delete chat',
  }, icon(ICONS.trash));
  if (armed === s.id) {
    del.classList.add('confirm');
    del.setAttribute('aria-label', `Confirm: delete chat “${clip(title, 40)}”`);
    del.title = 'Click again to delete';
  }
  // The first click only arms the button, for three seconds.
  del.addEventListener('click', (ev) => {
    ev.stopPropagation();
    if (armed !== s.id) {
      armed = s.id;
      clearTimeout(armedTimer);
      armedTimer = setTimeout(() => { armed = null; renderSessions(); }, 3000);
      renderSessions();
      return;
    }
    armed = null;
    deleteSessions(members.map((m) => m.id));
  });
  const ren = el('button', {
    type: 'button', class: 'session-act session-rename', 'aria-label': `Rename chat “${clip(title, 40)}”`,
    title: 'Rename', onclick: (ev) => { ev.stopPropagation(); startRename(s.id, 'list'); },
  }, icon(PENCIL));
  const updated = Math.max(...members.map((m) => m.updatedAt || m.createdAt || 0));
  const count = s.messageCount ? ` · ${s.messageCount} msg` : '';
  const versions = members.length > 1 ? ` · ${members.length} versions` : '';
  const open = el('a', {
    class: 'session-link', href: hashFor(s.id), 'aria-current': active ? 'page' : null,
    onclick: () => closeSidebar(),
  },
  el('span', { class: 'session-title', text: title }),
  el('span', { class: 'session-sub', text: `${fmtRelative(updated)}${count}${versions}` }));
  open.addEventListener('dblclick', (ev) => { ev.preventDefault(); startRename(s.id, 'list'); });
  li.append(open, ren, del);
  return li;
}

/* ------------------------------------------------------------------ rename */

function renameInput(s, title, where) {
  const input = el('input', {
    type: 'text', class: where === 'list' ? 'session-rename-input' : 'title-rename-input',
    id: where === 'top' ? 'chat-title-input' : null,
    'aria-label': `New title for chat “${clip(title, 40)}”`, maxlength: 200, spellcheck: 'false',
    enterkeyhint: 'done',
  });
  input.value = plainTitle(s?.title) || title;
  let done = false;
  const finish = (save) => {
    if (done) return;
    done = true;
    endRename(s?.id || ui.sid, save ? input.value : null, where);
  };
  input.addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter') { ev.preventDefault(); finish(true); }
    else if (ev.key === 'Escape') { ev.preventDefault(); ev.stopPropagation(); finish(false); }
  });
  input.addEventListener('blur', () => finish(true));
  requestAnimationFrame(() => { input.focus(); input.select(); });
  return input;
}

/* Edit the title of chat `sid` in the list or in the top bar. */
export function startRename(sid, where) {
  if (!sid) return;
  renaming = { sid, where };
  if (where === 'top') {
    const h = $('chat-title');
    const s = ui.sessions.find((x) => x.id === sid);
    h.hidden = true;
    $('rename-chat').hidden = true;
    h.after(renameInput(s || { id: sid, title: '' }, currentTitle(), 'top'));
  } else {
    renderSessions();
  }
}

async function endRename(sid, value, where) {
  renaming = null;
  if (where === 'top') {
    $('chat-title-input')?.remove();
    $('chat-title').hidden = false;
    $('rename-chat').hidden = false;
    $('rename-chat').focus();
  }
  const title = value === null ? '' : value.replace(/\s+/g, ' ').trim();
  const s = ui.sessions.find((x) => x.id === sid);
  if (title && title !== plainTitle(s?.title)) await rename(sid, title);
  renderSessions();
  renderControls();
  if (where === 'list') $('session-list').querySelector(`.session[data-id="${CSS.escape(sid)}"] .session-rename`)?.focus();
}

/* Rename a chat, with every version of it: they are one chat to the person. */
async function rename(sid, title) {
  const ids = ui.sessions.filter((x) => familyOf(x.id) === familyOf(sid)).map((x) => x.id);
  if (!ids.includes(sid)) ids.push(sid);
  try {
    for (const id of ids) await renameSession(id, title);
  } catch (e) {
    toast(`Could not rename: ${e.message}`);
    return;
  }
  for (const x of [...ui.sessions, ...search.results]) if (ids.includes(x.id)) x.title = title;
}

/* ------------------------------------------------------------------ search */

/* ---------------------------------------------------- live across tabs */

function upsert(list, d) {
  const s = list.find((x) => x.id === d.id);
  const fields = {};
  for (const k of ['title', 'updatedAt', 'messageCount', 'createdAt']) if (d[k] !== undefined) fields[k] = d[k];
  if (s) { Object.assign(s, fields); return false; }
  const now = Date.now();
  list.push({ createdAt: d.updatedAt || now, updatedAt: now, title: '', messageCount: 0, ...fields, id: d.id });
  return true;
}

function onListEvent(type, data) {
  if (type === 'resync') { loadSessions(); return; }
  const d = data?.session && typeof data.session === 'object' ? { ...data.session } : data;
  if (!d || typeof d.id !== 'string') return;
  if (type === 'session-deleted') {
    ui.sessions = ui.sessions.filter((s) => s.id !== d.id);
    search.results = search.results.filter((s) => s.id !== d.id);
  } else if (type === 'session-created' || type === 'session-updated') {
    upsert(ui.sessions, d);
    ui.sessions.sort(byRecent);
    if (search.q) for (const s of search.results) if (s.id === d.id) Object.assign(s, d);
  } else {
    return;
  }
  renderSessions();
  renderControls();
}

const LIST_EVENTS = ['session-created', 'session-updated', 'session-deleted'];

/* The stream itself, in the one tab that holds it; `emit(type, data)`. */
function openEvents(emit) {
  let es = null;
  let lost = false;
  const connect = () => {
    es = new EventSource(eventsStreamUrl());
    const handle = (fallback) => (e) => {
      let d;
      try { d = JSON.parse(e.data); } catch { return; }
      emit(d?.type || fallback, d);
    };
    es.onmessage = handle('');
    for (const t of LIST_EVENTS) es.addEventListener(t, handle(t));
    es.onopen = () => {
      // Anything missed while the stream was down: read the whole list again.
      if (lost) emit('resync', {});
      lost = false;
    };
    es.onerror = () => {
      lost = true;
      if (es.readyState === EventSource.CLOSED) {
        es.close();
        setTimeout(connect, EVENTS_RETRY_MS);
      }
    };
  };
  connect();
}

function followChatList() {
  const bc = typeof BroadcastChannel === 'function' ? new BroadcastChannel('reflexor.chat-list') : null;
  if (bc) bc.onmessage = (e) => onListEvent(e.data?.type, e.data?.data);
  if (!bc || !navigator.locks?.request) {
    openEvents(onListEvent);
    return;
  }
  // Held until the tab goes; then the next tab in line takes over.
  navigator.locks.request('reflexor.chat-list', () => new Promise(() => {
    openEvents((type, data) => {
      onListEvent(type, data);
      bc.postMessage({ type, data });
    });
  })).catch(() => openEvents(onListEvent));
}

/* ------------------------------------------------------------ open, delete */

/* Open a new chat; resolves to its id, or null (with a toast) if it failed. */
export async function newChat() {
  closeSidebar();
  // An untouched chat is reused rather than piling up empty sessions.
  if (ui.sid && ui.state && !ui.state.userMessages?.length && ![...ui.pending.values()].some((p) => p.sid === ui.sid)) {
    $('input').focus();
    return ui.sid;
  }
  try {
    const r = await createSession();
    if (!ui.sessions.some((s) => s.id === r.id)) {
      ui.sessions.unshift({ id: r.id, createdAt: Date.now(), updatedAt: Date.now(), title: '', messageCount: 0 });
    }
    location.hash = hashFor(r.id);
    openSession(r.id);
    refreshSessionsSoon();
    $('input').focus();
    return r.id;
  } catch (e) {
    toast(`Could not create a chat: ${e.message}`);
    return null;
  }
}

/* After the open chat went away: the newest one left, else a new chat. */
async function openNextSession() {
  const next = ui.sessions[0];
  if (next) location.hash = hashFor(next.id);
  else { ui.sid = null; await newChat(); }
}

async function deleteSessions(ids) {
  for (const id of ids) {
    try {
      await removeSession(id);
    } catch (e) {
      if (e.status !== 404) { toast(`Could not delete: ${e.message}`); break; }
    }
    ui.sessions = ui.sessions.filter((s) => s.id !== id);
    search.results = search.results.filter((s) => s.id !== id);
    forgetSession(id);
    for (const p of [...ui.pending.values()]) if (p.sid === id) ui.pending.delete(p.id);
  }
  if (!ui.sessions.some((s) => s.id === ui.sid)) await openNextSession();
  renderSessions();
}

/* The server says the open chat does not exist (deleted elsewhere, or lost). */
export async function leaveGoneSession(sid) {
  toast('This chat no longer exists');
  ui.sessions = ui.sessions.filter((s) => s.id !== sid);
  await loadSessions();
  await openNextSession();
}

/* Show `sid`, forgetting everything local to the chat shown before. */
function openSession(sid) {
  if (sid === ui.sid && ui.es) return;
  for (const n of ui.nodes.values()) n.el.remove();
  ui.nodes.clear();
  ui.sid = sid;
  ui.state = null;
  ui.lastSeq = null;
  ui.timeline = [];
  ui.running.clear();
  ui.summaryOpen = false;
  ui.editing = null;
  ui.stickToBottom = true;
  noteOpened(sid);
  if (renaming?.where === 'top') endRename(renaming.sid, null, 'top');
  renderSessions();
  follow();
  renderNow();
}

/* At load: the chat in the URL, else the newest, else a new one. */
export async function openFirstSession() {
  await loadSessions();
  let sid = sidFromHash();
  if (sid && !ui.sessions.some((s) => s.id === sid)) {
    // Not listed (yet): the stream tells whether it exists.
    ui.sessions.unshift({ id: sid, title: '', createdAt: 0, updatedAt: 0, messageCount: 0 });
  }
  if (!sid && ui.sessions.length) sid = ui.sessions[0].id;
  if (sid) {
    if (sidFromHash() !== sid) history.replaceState(null, '', hashFor(sid));
    openSession(sid);
  } else {
    await newChat();
    if (!ui.sid) setTimeout(openWhenReachable, STARTUP_RETRY_MS);
  }
  followChatList();
}

/* The server was not reachable at load: keep trying until it is. */
async function openWhenReachable() {
  await loadSessions();
  if (ui.sid) return;
  const sid = ui.sessions[0]?.id;
  if (sid) { history.replaceState(null, '', hashFor(sid)); openSession(sid); }
  else if (!(await newChat())) setTimeout(openWhenReachable, STARTUP_RETRY_MS);
}

export function bindSessions() {
  $('new-chat').addEventListener('click', () => newChat());
  window.addEventListener('hashchange', () => {
    const sid = sidFromHash();
    if (sid && sid !== ui.sid) openSession(sid);
  });
  bindSearch(renderSessions);
  $('rename-chat').addEventListener('click', () => startRename(ui.sid, 'top'));
  $('chat-title').addEventListener('dblclick', () => startRename(ui.sid, 'top'));
  onForksChanged(() => { renderSessions(); scheduleRender(); });
  // Keep "5 min ago" true.
  setInterval(() => { if (ui.sessions.length) renderSessions(); }, 60000);
}
