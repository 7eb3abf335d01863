/*
 * approvals - a person in the loop (SPEC §3.6): the card of a tool call
 * awaiting approval (the tool, its server, the arguments as editable JSON;
 * Approve, Edit, Reject with an optional reason, Always allow, Always deny),
 * the reviews it posts (user-review-tool-call), the mark a reviewed card
 * keeps, and the banner by the composer while the agent waits (for an
 * approval, or for a call in doubt: indoubt.js's card, built from the
 * helpers exported here).
 * Depends on api.js, dom.js, format.js, inspector.js, state.js, tools.js.
 * A card keeps what the person is doing (an edit, a reason) in its own DOM:
 * thread.js rebuilds it only when the record stops awaiting, and fills in
 * the tool's server in place when the catalogue arrives. The state decides
 * everything: a review only asks, and the card changes when the state says.
 */
import { postInput } from './api.js';
import { $, ICONS, el, icon } from './dom.js';
import { clip, fmtTime, prettyJson } from './format.js';
import { openToolPermissions } from './inspector.js';
import { ui } from './state.js';
import { sourceLabel, toolInfo } from './tools.js';

const ARGS_MAX_ROWS = 14;
const REASON_MAX = 500;

const HAND = ['M8 13V5.5a1.5 1.5 0 0 1 3 0V12', 'M11 11.5v-8a1.5 1.5 0 0 1 3 0V12',
  'M14 11.5V5a1.5 1.5 0 0 1 3 0v7', 'M17 9.5a1.5 1.5 0 0 1 3 0V15a6 6 0 0 1-6 6h-2a6 6 0 0 1-5-2.7L4.3 15a1.5 1.5 0 0 1 2.4-1.8L8 15'];

let focusAfter = null;     // id of the card whose review took the focus away

/* The record waits for a person: no tool runs and the agent waits. */
export const isAwaiting = (c) => c?.approval === 'pending' && !c.result;

/* The call was cut off by a restart after it started and may have acted
 * (SPEC §3.7): it waits for a person too (indoubt.js's card). */
export const isInDoubt = (c) => c?.approval === 'in-doubt' && !c.result;

export function awaitingCalls(s = ui.state) {
  return (s?.toolCallRecords || []).filter(isAwaiting);
}

/* Every call that waits for a person: approvals and calls in doubt. */
export function waitingCalls(s = ui.state) {
  return (s?.toolCallRecords || []).filter((c) => isAwaiting(c) || isInDoubt(c));
}

/* What the state says of a reviewed or refused call, for its card: a short
 * status label, or null when no person or policy was involved. */
export function reviewLabel(c) {
  if (c.approval === 'rejected') return c.result?.error === INTERRUPTED ? 'Not run again' : 'Rejected';
  if (c.result && !c.result.isSuccess && c.result.error === 'denied by policy') return 'Denied';
  return null;
}

/* The tag of an approved call's card (a rejected one says so in its status). */
export function reviewTag(c) {
  if (c.approval === 'approved') return el('span', { class: 'review-tag approved', text: 'Approved' });
  if (c.approval === 'resolved') {
    return el('span', {
      class: 'review-tag resolved', text: 'Resolved by you',
      title: 'Interrupted after it started; the result is what a person said happened',
    });
  }
  return null;
}

/* The error a call in doubt gets when a person (or a new message) says not
 * to run it again (SPEC §3.7). */
export const INTERRUPTED = 'not run again after an interruption';

/* The arguments as the person left them: {parameters} (undefined when
 * unchanged) or {error} for text that is not a JSON object. */
function editedParameters(card, c) {
  if (!card.classList.contains('editing')) return {};
  const text = card.querySelector('.approval-args').value;
  let v;
  try {
    v = JSON.parse(text);
  } catch (e) {
    return { error: `Not valid JSON: ${e.message}` };
  }
  if (!v || typeof v !== 'object' || Array.isArray(v)) {
    return { error: 'The arguments must be a JSON object, such as {"expression": "2+3"}' };
  }
  const compact = JSON.stringify(v);
  let before = null;
  try { before = JSON.stringify(JSON.parse(c.parameters)); } catch { /* not JSON: any edit is a change */ }
  return { parameters: compact === before ? undefined : compact };
}

export function showError(card, msg) {
  const p = card.querySelector('.approval-error');
  p.textContent = msg || '';
  p.hidden = !msg;
  card.querySelector('.approval-args').setAttribute('aria-invalid', msg && card.classList.contains('editing') ? 'true' : 'false');
}

export function setBusy(card, label) {
  card.dataset.busy = label ? 'true' : '';
  for (const b of card.querySelectorAll('button, input, textarea')) {
    if (!b.classList.contains('keep-enabled')) b.disabled = !!label;
  }
  card.querySelector('.approval-busy').textContent = label || '';
}

/* Post the review; the card stays busy until the state has it. */
async function review(card, c, decision, { always = false } = {}) {
  const input = { type: 'user-review-tool-call', toolCallId: c.id, decision };
  if (decision === 'approve') {
    const ed = editedParameters(card, c);
    if (ed.error) {
      showError(card, ed.error);
      card.querySelector('.approval-args').focus();
      return;
    }
    if (ed.parameters !== undefined) input.parameters = ed.parameters;
  } else {
    // A reason counts only while its field shows: Cancel put it away.
    const form = card.querySelector('.approval-reject');
    const reason = form.hidden ? '' : form.querySelector('input').value.trim();
    if (reason) input.reason = reason;
  }
  if (always) input.always = true;
  showError(card, '');
  setBusy(card, decision === 'approve' ? 'Approving…' : 'Rejecting…');
  const sid = ui.sid;
  try {
    await postInput(sid, input);
    reviewed(card, c);
  } catch (e) {
    setBusy(card, '');
    showError(card, refusal(e));
  }
}

/* After the server took a review of card's call: the focus moves on when
 * the card goes (restoreReviewFocus). */
export function reviewed(card, c) {
  if (card.contains(document.activeElement) || document.activeElement === document.body) {
    focusAfter = c.id;
    restoreReviewFocus(); // the state may have come before this answer
  }
}

/* Why the server refused a review, for the card. */
export function refusal(e) {
  const why = e.data?.reason;
  return why === 'not-pending' ? 'This call was already reviewed.'
    : why === 'unknown-id' ? 'This call is no longer in the chat.'
      : why === 'in-doubt' ? 'This call was interrupted after it started: it can only be retried, resolved or rejected.'
        : why === 'not-in-doubt' ? 'This call is no longer in doubt.' : `Not sent: ${e.message}`;
}

function toggleEdit(card, c) {
  const ta = card.querySelector('.approval-args');
  const editing = !card.classList.contains('editing');
  card.classList.toggle('editing', editing);
  ta.readOnly = !editing;
  const btn = card.querySelector('[data-act="edit"]');
  btn.setAttribute('aria-pressed', String(editing));
  btn.querySelector('span').textContent = editing ? 'Undo edits' : 'Edit';
  card.querySelector('[data-act="approve"] span').textContent = editing ? 'Approve edited' : 'Approve';
  if (editing) {
    ta.focus();
  } else {
    ta.value = prettyJson(c.parameters);
    fitArgs(ta);
  }
  showError(card, '');
}

function toggleReject(card, show) {
  const form = card.querySelector('.approval-reject');
  form.hidden = !show;
  card.querySelector('[data-act="reject"]').setAttribute('aria-expanded', String(show));
  if (show) form.querySelector('input').focus();
  else card.querySelector('[data-act="reject"]').focus();
}

export function fitArgs(ta) {
  ta.rows = Math.min(ARGS_MAX_ROWS, Math.max(2, ta.value.split('\n').length));
}

export function actionBtn(act, label, cls, iconPaths) {
  return el('button', { type: 'button', class: `ap-btn ${cls}`, 'data-act': act },
    iconPaths ? icon(iconPaths) : null, el('span', { text: label }));
}

/* The card of a call awaiting approval, inside its thread row. */
export function approvalCard(c, compressed = false) {
  const id = `ap-${c.id.replace(/[^A-Za-z0-9_-]/g, '_')}`;
  const ta = el('textarea', {
    id: `${id}-args`, class: 'tool-pre approval-args', spellcheck: 'false', autocapitalize: 'off',
    'aria-describedby': `${id}-err ${id}-keys`,
  });
  ta.value = prettyJson(c.parameters);
  ta.readOnly = true;
  fitArgs(ta);
  const reason = el('input', {
    id: `${id}-reason`, class: 'approval-reason', type: 'text', maxlength: REASON_MAX,
    placeholder: 'e.g. use a smaller number', autocomplete: 'off',
  });
  const rejectForm = el('form', { class: 'approval-reject', hidden: true },
    el('label', { for: `${id}-reason`, text: 'Reason for rejecting (optional; the agent reads it)' }),
    el('div', { class: 'approval-reject-row' }, reason,
      el('button', { type: 'submit', class: 'ap-btn danger', text: 'Reject call' }),
      el('button', { type: 'button', class: 'ap-btn', 'data-act': 'reject-cancel', text: 'Cancel' })));
  const card = el('section', {
    class: 'tool approval', 'data-kind': 'tool', 'data-id': c.id, 'data-name': c.name, 'data-state': 'awaiting',
    role: 'group', 'aria-labelledby': `${id}-title`, 'aria-describedby': `${id}-what`,
  },
  el('div', { class: 'approval-head' },
    el('span', { class: 'tool-icon', 'aria-hidden': 'true' }, icon(ICONS.tool)),
    el('h3', { class: 'tool-name', id: `${id}-title`, text: c.name }),
    el('span', { class: 'tool-source' }),
    el('span', { class: 'grow' }),
    el('span', { class: 'tool-status awaiting' }, icon(HAND), el('span', { text: 'Needs approval' }))),
  el('div', { class: 'tool-body' },
    el('p', { class: 'approval-what', id: `${id}-what` },
      'The agent wants to run ', el('strong', { text: c.name }), ' and waits for your decision.'),
    el('p', { class: 'approval-desc', hidden: true }),
    el('ul', { class: 'tool-annots', 'aria-label': 'What the tool says of itself', hidden: true }),
    el('div', { class: 'tool-sec' },
      el('label', { class: 'tool-label', for: `${id}-args`, text: 'Arguments' }),
      ta,
      el('p', { class: 'approval-error', id: `${id}-err`, role: 'alert', hidden: true }),
      el('p', { class: 'approval-keys', id: `${id}-keys`, text: 'Edit, then Ctrl+Enter to approve' })),
    el('div', { class: 'approval-actions' },
      el('div', { class: 'approval-main' },
        actionBtn('approve', 'Approve', 'primary', ICONS.check),
        actionBtn('edit', 'Edit', '', ['M4 20h4L19 9l-4-4L4 16z', 'M13.5 6.5l4 4']),
        actionBtn('reject', 'Reject', 'danger', ['M6 6l12 12M18 6L6 18'])),
      el('div', { class: 'approval-always' },
        actionBtn('always-allow', 'Always allow', 'quiet'),
        actionBtn('always-deny', 'Always deny', 'quiet'))),
    rejectForm,
    el('div', { class: 'tool-foot muted' },
      el('span', { class: 'approval-busy', role: 'status' }),
      el('span', { text: `id ${c.id} · called ${fmtTime(c.calledAt, true)}` }),
      el('button', {
        type: 'button', class: 'link-btn keep-enabled', text: 'Tool permissions',
        'aria-label': 'Open this chat\'s tool permissions', onclick: () => openToolPermissions(),
      }))));
  card.querySelector('[data-act="approve"]').dataset.first = '';
  card.querySelector('[data-act="edit"]').setAttribute('aria-pressed', 'false');
  card.querySelector('[data-act="reject"]').setAttribute('aria-expanded', 'false');
  card.querySelector('[data-act="reject"]').setAttribute('aria-controls', `${id}-reason`);

  card.addEventListener('click', (ev) => {
    const act = ev.target.closest('[data-act]')?.dataset.act;
    if (!act || card.dataset.busy === 'true') return;
    if (act === 'approve') review(card, c, 'approve');
    else if (act === 'edit') toggleEdit(card, c);
    else if (act === 'reject') toggleReject(card, rejectForm.hidden);
    else if (act === 'reject-cancel') toggleReject(card, false);
    else if (act === 'always-allow') review(card, c, 'approve', { always: true });
    else if (act === 'always-deny') review(card, c, 'reject', { always: true });
  });
  rejectForm.addEventListener('submit', (ev) => {
    ev.preventDefault();
    review(card, c, 'reject');
  });
  reason.addEventListener('keydown', (ev) => {
    if (ev.key === 'Escape') { ev.stopPropagation(); toggleReject(card, false); }
  });
  ta.addEventListener('input', () => { fitArgs(ta); showError(card, ''); });
  ta.addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && (ev.ctrlKey || ev.metaKey)) { ev.preventDefault(); review(card, c, 'approve'); }
  });
  const row = el('div', { class: 'tool-row approval-row' }, card);
  fillApprovalCard(row, c, compressed);
  return row;
}

/* What the catalogue says of the tool: its server and annotations. Called
 * again when the catalogue arrives, without touching the person's edits. */
export function fillApprovalCard(row, c, compressed = false) {
  const card = row.querySelector('.approval');
  const t = toolInfo(c.name);
  card.classList.toggle('is-compressed', compressed);
  const src = card.querySelector('.tool-source');
  src.textContent = t ? sourceLabel(t) : '';
  src.hidden = !t;
  const desc = card.querySelector('.approval-desc');
  desc.textContent = t?.description ? clip(t.description, 200) : '';
  desc.hidden = !t?.description;
  const a = t?.annotations || {};
  const chips = [];
  if (a.readOnlyHint === true) chips.push(['read-only', 'safe']);
  if (a.destructiveHint === true && a.readOnlyHint !== true) chips.push(['may change or delete data', 'risk']);
  if (a.idempotentHint === true) chips.push(['idempotent', '']);
  if (a.openWorldHint === true) chips.push(['reaches outside systems', '']);
  if (t?.available === false) chips.push(['its server is down', 'risk']);
  const ul = card.querySelector('.tool-annots');
  ul.textContent = '';
  for (const [text, cls] of chips) ul.append(el('li', { class: cls, text }));
  ul.hidden = chips.length === 0;
}

/* The first control of a waiting card: Approve, or Retry of a call in doubt. */
const FIRST_ACT = '.approval [data-first]';

/* After a review replaced the card the focus was in: the next waiting
 * card's first action, else the reviewed card itself. */
export function restoreReviewFocus() {
  if (!focusAfter) return;
  const id = focusAfter;
  const still = document.querySelector(`.approval[data-id="${CSS.escape(id)}"]`);
  if (still) return; // the state has not said yet
  focusAfter = null;
  if (document.activeElement && document.activeElement !== document.body) return;
  const next = document.querySelector(FIRST_ACT);
  if (next) next.focus();
  else document.querySelector(`.tool[data-id="${CSS.escape(id)}"] > summary`)?.focus();
}

/* Scroll to the first card that waits and put the focus on its first action. */
function goToWaiting() {
  const card = document.querySelector('.approval');
  if (!card) return;
  card.scrollIntoView({ block: 'center', behavior: 'smooth' });
  card.querySelector('[data-first]')?.focus({ preventScroll: true });
}

/* The banner's line and note for what waits: approvals, calls in doubt, or both. */
function bannerText(waiting) {
  const n = waiting.length;
  if (!n) return ['', ''];
  const doubts = waiting.filter(isInDoubt).length;
  const them = n === 1 ? 'it' : 'them';
  if (!doubts) {
    return [n === 1 ? `Waiting for your approval: ${waiting[0].name}` : `Waiting for your approval: ${n} tool calls`,
      `Sending a message now declines ${them}.`];
  }
  if (doubts === n) {
    return [n === 1 ? `Interrupted, may have acted: ${waiting[0].name}` : `Interrupted, may have acted: ${n} tool calls`,
      `Retry, resolve or reject ${them}; sending a message now answers ${them} as not run again.`];
  }
  return [`Waiting for you: ${n} tool calls (${doubts} interrupted)`, 'Sending a message now declines them.'];
}

let bannerShown = '';

/* The line by the composer while the agent waits for a person. */
export function renderApprovalBanner() {
  const waiting = waitingCalls();
  const [text, note] = bannerText(waiting);
  if (text === bannerShown) return;
  bannerShown = text;
  $('approval-banner').hidden = !waiting.length;
  $('approval-banner').dataset.kind = waiting.some(isInDoubt) ? 'in-doubt' : 'approval';
  $('approval-text').textContent = text;
  $('approval-note').textContent = note;
  $('approval-live').textContent = text;
}

export function bindApprovals() {
  $('approval-go').addEventListener('click', goToWaiting);
}
