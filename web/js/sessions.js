/*
 * sessions - the chat list: load and draw it with titles, new chat, switch
 * (the URL hash names the open chat: #/<session id>), delete, and which chat
 * to open at load.
 * Depends on api.js, controls.js, dom.js, format.js, state.js. Following the
 * open session live is streams.js's job, and streams.js sits above this
 * module (a resync or a deleted session calls back in here), so main.js
 * passes it in with setFollower().
 */
import { createSession, listSessions, removeSession } from './api.js';
import { closeSidebar, renderControls } from './controls.js';
import { $, ICONS, el, icon, toast } from './dom.js';
import { clip, fmtRelative } from './format.js';
import { currentTitle, renderNow, ui } from './state.js';

const STARTUP_RETRY_MS = 2000;

let follow = () => {};
let refreshTimer = 0;

/* `fn()` follows ui.sid from scratch: the old session's streams are dropped. */
export function setFollower(fn) {
  follow = fn;
}

const hashFor = (sid) => `#/${encodeURIComponent(sid)}`;

function sidFromHash() {
  const m = /^#\/(.+)$/.exec(location.hash);
  return m ? decodeURIComponent(m[1]) : null;
}

async function loadSessions() {
  try {
    const list = await listSessions();
    ui.sessions = Array.isArray(list) ? list : [];
    ui.sessions.sort((a, b) => (b.updatedAt || b.createdAt || 0) - (a.updatedAt || a.createdAt || 0));
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
    // The first click only arms the button, for three seconds.
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
      class: 'session-link', href: hashFor(s.id), 'aria-current': active ? 'page' : null,
      onclick: () => closeSidebar(),
    },
    el('span', { class: 'session-title', text: title }),
    el('span', { class: 'session-sub', text: `${fmtRelative(s.updatedAt || s.createdAt)}${s.messageCount ? ` · ${s.messageCount} msg` : ''}` }));
    ul.append(el('li', { class: `session${active ? ' active' : ''}`, 'data-id': s.id }, open, del));
  }
}

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
    ui.sessions.unshift({ id: r.id, createdAt: Date.now(), updatedAt: Date.now(), title: '', messageCount: 0 });
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

async function deleteSession(id) {
  try {
    await removeSession(id);
  } catch (e) {
    if (e.status !== 404) { toast(`Could not delete: ${e.message}`); return; }
  }
  ui.sessions = ui.sessions.filter((s) => s.id !== id);
  for (const p of [...ui.pending.values()]) if (p.sid === id) ui.pending.delete(p.id);
  if (id === ui.sid) await openNextSession();
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
  ui.stickToBottom = true;
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
  // Keep "5 min ago" true.
  setInterval(() => { if (ui.sessions.length) renderSessions(); }, 60000);
}
