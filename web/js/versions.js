/*
 * versions - edit a sent message and regenerate an answer (SPEC §7), and the
 * "‹ 2/3 ›" pager that goes back and forth between the versions.
 * Depends on api.js, composer.js, dom.js, forks.js, sessions.js, state.js.
 *
 * Both fork the open chat just before the user message of the exchange
 * (POST .../fork {"at": seq-1}), carry over what the chat set after that
 * point (its settings and tool permissions: the person expects a Retry after
 * changing the model to use the new one), and send the message again in the
 * fork: edited, or the same text for a regenerate. The fork opens in place
 * of the chat; forks.js remembers which chat it is a version of.
 * The seq to fork at comes from the chat's input log (GET .../history),
 * read when needed, from where the last read ended.
 */
import { forkSession, getSession, postInput, sessionHistory, uuid } from './api.js';
import { postUserMessage } from './composer.js';
import { ICONS, el, icon, toast } from './dom.js';
import { hasVersions, latestOf, saveLink, versionsAt } from './forks.js';
import { addSession, hashFor } from './sessions.js';
import { scheduleRender, ui } from './state.js';

const PAGE = 1000;

const seqs = new Map();   // sid -> {after, ids: Map(user message id -> seq)}

/* The seq of the input that sent user message `mid` in chat `sid`. */
async function seqOf(sid, mid) {
  let c = seqs.get(sid);
  if (!c) seqs.set(sid, (c = { after: 0, ids: new Map() }));
  while (!c.ids.has(mid)) {
    const page = await sessionHistory(sid, c.after, PAGE);
    if (!Array.isArray(page)) break;
    for (const row of page) {
      const i = row?.input;
      if (i?.type === 'user-send-message' && i.messageId) c.ids.set(i.messageId, row.seq);
      if (row.seq > c.after) c.after = row.seq;
    }
    if (page.length < PAGE) break;
  }
  const k = c.ids.get(mid);
  if (k === undefined) throw new Error('this message is not in the chat\'s log yet');
  return k;
}

/* Which exchange user message `u` opens: 1 for the chat's first message. */
function exchangeOf(u) {
  const i = (ui.state?.userMessages || []).findIndex((x) => x.id === u.id);
  return i < 0 ? 0 : i + 1;
}

/* The versions of the exchange that starts with user message `u`, or null. */
export function exchangeVersions(u) {
  if (!ui.sid || !u || !hasVersions(ui.sid)) return null;
  const n = exchangeOf(u);
  const v = n ? versionsAt(ui.sid, n) : null;
  return v && { ...v, n };
}

/* What of the chat's own settings the fork must be told again. */
function carryOver(from, to) {
  const inputs = [];
  const a = from?.settings || {};
  const b = to?.settings || {};
  const cfg = {};
  for (const k of ['systemPrompt', 'model', 'temperature']) {
    if ((a[k] ?? null) !== (b[k] ?? null)) cfg[k] = a[k] ?? null;
  }
  if (Object.keys(cfg).length) inputs.push({ type: 'user-configure', ...cfg });
  const pa = from?.toolPolicies || {};
  const pb = to?.toolPolicies || {};
  for (const tool of new Set([...Object.keys(pa), ...Object.keys(pb)])) {
    if ((pa[tool] ?? null) !== (pb[tool] ?? null)) {
      inputs.push({ type: 'user-set-tool-policy', tool, policy: pa[tool] ?? null });
    }
  }
  return inputs;
}

/*
 * Fork the open chat just before user message `u` and send `content` there
 * (kind 'edit' or 'regenerate'); the fork opens. True when it went.
 */
async function branch(u, content, kind) {
  const sid = ui.sid;
  const state = ui.state;
  if (!sid || !state || ui.branching) return false;
  ui.branching = true;
  scheduleRender();
  try {
    const n = exchangeOf(u);
    if (!n) throw new Error('this message is not in the chat yet');
    const k = await seqOf(sid, u.id);
    const f = await forkSession(sid, k - 1);
    saveLink(f.id, { from: sid, at: k - 1, n, kind, t: Date.now() });
    const forked = await getSession(f.id);
    for (const input of carryOver(state, forked)) await postInput(f.id, input);
    addSession(f.id, forked);
    const p = { id: uuid(), sid: f.id, content, status: 'sending', error: '', at: Date.now() };
    ui.pending.set(p.id, p);
    location.hash = hashFor(f.id);
    postUserMessage(p);
    return true;
  } catch (e) {
    toast(`Could not ${kind === 'edit' ? 'send the edit' : 'regenerate'}: ${e.message}`, 6000);
    return false;
  } finally {
    ui.branching = false;
    scheduleRender();
  }
}

export const editMessage = (u, text) => branch(u, text, 'edit');
export const regenerate = (u) => branch(u, u.content, 'regenerate');

/* ------------------------------------------------------------ the views */

/* "‹ 2/3 ›": `what` names the thing for screen readers ("message", "answer"). */
export function versionPager(v, what) {
  const go = (to) => { location.hash = hashFor(latestOf(v.ids[to], v.n)); };
  const n = v.ids.length;
  const i = v.index;
  return el('div', { class: 'versions', role: 'group', 'aria-label': `Versions of this ${what}` },
    el('button', {
      type: 'button', class: 'ver-btn', 'aria-label': `Previous version of this ${what}`,
      disabled: i <= 0, 'data-ver': 'prev', onclick: () => go(i - 1),
    }, icon(['M15 6l-6 6 6 6'])),
    el('span', { class: 'ver-num', text: `${i + 1}/${n}`, title: v.kinds[i] === 'original' ? 'The first version' : v.kinds[i] === 'edit' ? 'An edited version' : 'A regenerated version' }),
    el('button', {
      type: 'button', class: 'ver-btn', 'aria-label': `Next version of this ${what}`,
      disabled: i >= n - 1, 'data-ver': 'next', onclick: () => go(i + 1),
    }, icon(['M9 6l6 6-6 6'])));
}

export const versionSig = (v) => (v ? `${v.index}/${v.ids.length}/${v.kinds.join(',')}` : '');

export function regenerateButton(u, label = 'Regenerate') {
  return el('button', {
    type: 'button', class: 'link-btn regen', 'aria-label': label === 'Retry' ? 'Retry: ask again for this answer' : 'Regenerate this answer',
    title: 'Ask again; this answer stays as an earlier version', disabled: ui.branching || !u,
    onclick: () => regenerate(u),
  }, icon(ICONS.retry), el('span', { text: label }));
}

const PENCIL = ['M4 20h4L19 9l-4-4L4 16z', 'M13.5 6.5l4 4'];

export function editButton(u) {
  return el('button', {
    type: 'button', class: 'link-btn edit-msg', 'aria-label': 'Edit this message',
    title: 'Edit and send again; the chat so far stays as an earlier version',
    disabled: ui.branching, onclick: () => startEdit(u),
  }, icon(PENCIL), el('span', { text: 'Edit' }));
}

function startEdit(u) {
  ui.editing = { id: u.id, text: u.content };
  scheduleRender();
  requestAnimationFrame(() => {
    const ta = document.querySelector(`.msg.user[data-id="${CSS.escape(u.id)}"] .edit-box textarea`);
    if (ta) { ta.focus(); ta.setSelectionRange(ta.value.length, ta.value.length); }
  });
}

function stopEdit(u) {
  ui.editing = null;
  scheduleRender();
  requestAnimationFrame(() => {
    document.querySelector(`.msg.user[data-id="${CSS.escape(u.id)}"] .edit-msg`)?.focus();
  });
}

/* The box that replaces the bubble while the person edits. */
export function editBox(u) {
  const ta = el('textarea', {
    class: 'edit-input', rows: 2, 'aria-label': 'Edit your message', enterkeyhint: 'send',
  });
  ta.value = ui.editing?.text ?? u.content;
  const fit = () => { ta.style.height = 'auto'; ta.style.height = `${Math.min(ta.scrollHeight, 320)}px`; };
  const send = el('button', { type: 'submit', class: 'ap-btn primary', 'aria-label': 'Send the edited message' },
    el('span', { text: 'Send' }));
  const form = el('form', { class: 'edit-box' }, ta,
    el('div', { class: 'edit-actions' },
      el('span', { class: 'edit-note', text: 'Sends as a new version; the earlier one stays.' }),
      el('button', { type: 'button', class: 'ap-btn quiet', text: 'Cancel', 'aria-label': 'Cancel the edit', onclick: () => stopEdit(u) }),
      send));
  const sync = () => { send.disabled = !ta.value.trim() || ui.branching; };
  ta.addEventListener('input', () => {
    if (ui.editing) ui.editing.text = ta.value;
    fit();
    sync();
  });
  ta.addEventListener('keydown', (ev) => {
    if (ev.key === 'Escape') { ev.preventDefault(); ev.stopPropagation(); stopEdit(u); }
    // As in the composer: Enter sends, Shift+Enter breaks the line.
    if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing && ev.keyCode !== 229) {
      ev.preventDefault();
      form.requestSubmit();
    }
  });
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const text = ta.value.trim();
    if (!text) return;
    send.disabled = true;
    if (await editMessage(u, text)) ui.editing = null;
    sync();
    scheduleRender();
  });
  sync();
  requestAnimationFrame(fit);
  return form;
}
