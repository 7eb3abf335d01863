/*
 * indoubt - the card of a tool call in doubt (SPEC §3.7): the server stopped
 * (a crash, a restart, another node took the chat over) after the call
 * started and before its result came back, and the tool is not safe to run
 * twice, so it may or may not have acted and waits for a person like an
 * approval. The card shows the tool, its server and the arguments
 * (read-only), and offers Retry (run it again with the same idempotency
 * key), Resolve (the person says what happened: that text becomes the
 * call's result) and Reject (answered "not run again after an
 * interruption"); each posts user-review-tool-call.
 * Depends on api.js, approvals.js (the card's look, the banner, the focus
 * after a review), dom.js, format.js, state.js.
 * As with approvals, the state decides: the card stays (busy) until the
 * state says the call was answered, and thread.js then draws the plain card.
 */
import { postInput } from './api.js';
import { actionBtn, fillApprovalCard, fitArgs, refusal, reviewed, setBusy, showError } from './approvals.js';
import { ICONS, el, icon } from './dom.js';
import { fmtTime, prettyJson } from './format.js';
import { ui } from './state.js';

const RESULT_MAX = 4000;
const ALERT = ['M12 3l9.5 17h-19z', 'M12 10v4', 'M12 17.5v.01'];
const BUSY = { retry: 'Retrying…', reject: 'Rejecting…', resolve: 'Resolving…' };

/* The key the tool was given, so a person can look the call up in the
 * tool's own records (SPEC §3.7). */
export const idempotencyKey = (sid, c) => `${sid}/${c.id}`;

async function review(card, c, decision) {
  const input = { type: 'user-review-tool-call', toolCallId: c.id, decision };
  if (decision === 'resolve') {
    const box = card.querySelector('.doubt-result');
    if (!box.value.trim()) {
      showError(card, 'Say what happened first: the agent reads it as the tool\'s result.');
      box.setAttribute('aria-invalid', 'true');
      box.focus();
      return;
    }
    input.result = box.value.trim();
  }
  showError(card, '');
  setBusy(card, BUSY[decision]);
  try {
    await postInput(ui.sid, input);
    reviewed(card, c);
  } catch (e) {
    setBusy(card, '');
    showError(card, refusal(e));
  }
}

function toggleResolve(card, show) {
  const form = card.querySelector('.doubt-resolve');
  const btn = card.querySelector('[data-act="resolve"]');
  form.hidden = !show;
  btn.setAttribute('aria-expanded', String(show));
  if (show) form.querySelector('textarea').focus();
  else btn.focus();
}

/* The card of a call in doubt, inside its thread row. */
export function doubtCard(c, compressed = false) {
  const id = `dbt-${c.id.replace(/[^A-Za-z0-9_-]/g, '_')}`;
  const ta = el('textarea', {
    id: `${id}-args`, class: 'tool-pre approval-args', spellcheck: 'false', autocapitalize: 'off',
  });
  ta.value = prettyJson(c.parameters);
  ta.readOnly = true;
  fitArgs(ta);
  const result = el('textarea', {
    id: `${id}-result`, class: 'doubt-result', rows: 3, maxlength: RESULT_MAX, 'aria-required': 'true',
    placeholder: 'e.g. it ran: the line is in the ledger', 'aria-describedby': `${id}-err ${id}-rkeys`,
  });
  const resolveForm = el('form', { class: 'doubt-resolve', hidden: true },
    el('label', { for: `${id}-result`, text: 'What happened? (required; the agent reads it as the tool\'s result)' }),
    result,
    el('div', { class: 'approval-reject-row' },
      el('button', { type: 'submit', class: 'ap-btn primary', text: 'Resolve call' }),
      el('button', { type: 'button', class: 'ap-btn', 'data-act': 'resolve-cancel', text: 'Cancel' }),
      el('span', { class: 'approval-keys', id: `${id}-rkeys`, text: 'Ctrl+Enter to resolve, Esc to cancel' })));
  const started = c.startedAt ? ` · started ${fmtTime(c.startedAt, true)}` : '';
  const key = idempotencyKey(ui.sid || '', c);
  const card = el('section', {
    class: 'tool approval in-doubt', 'data-kind': 'tool', 'data-id': c.id, 'data-name': c.name, 'data-state': 'in-doubt',
    role: 'group', 'aria-labelledby': `${id}-title`, 'aria-describedby': `${id}-what`,
  },
  el('div', { class: 'approval-head' },
    el('span', { class: 'tool-icon', 'aria-hidden': 'true' }, icon(ICONS.tool)),
    el('h3', { class: 'tool-name', id: `${id}-title`, text: c.name }),
    el('span', { class: 'tool-source' }),
    el('span', { class: 'grow' }),
    el('span', { class: 'tool-status in-doubt' }, icon(ALERT), el('span', { text: 'Interrupted' }))),
  el('div', { class: 'tool-body' },
    el('p', { class: 'approval-what', id: `${id}-what` },
      'The server stopped after ', el('strong', { text: c.name }),
      ' started and before its result came back: it ', el('strong', { text: 'may or may not have acted' }),
      '. It is not run again by itself. Check, then choose.'),
    el('p', { class: 'approval-desc', hidden: true }),
    el('ul', { class: 'tool-annots', 'aria-label': 'What the tool says of itself', hidden: true }),
    el('div', { class: 'tool-sec' },
      el('label', { class: 'tool-label', for: `${id}-args`, text: 'Arguments' }),
      ta,
      el('p', { class: 'approval-error', id: `${id}-err`, role: 'alert', hidden: true })),
    el('div', { class: 'approval-actions' },
      el('div', { class: 'approval-main' },
        actionBtn('retry', 'Retry', '', ICONS.retry),
        actionBtn('resolve', 'Resolve…', 'primary', ICONS.check),
        actionBtn('reject', 'Reject', 'danger', ['M6 6l12 12M18 6L6 18']))),
    el('ul', { class: 'doubt-help' },
      el('li', {}, el('strong', { text: 'Retry' }), ' runs it again with the same idempotency key (it may then act twice).'),
      el('li', {}, el('strong', { text: 'Resolve' }), ' says what happened; that becomes its result.'),
      el('li', {}, el('strong', { text: 'Reject' }), ' tells the agent it was not run again.')),
    resolveForm,
    el('div', { class: 'tool-foot muted' },
      el('span', { class: 'approval-busy', role: 'status' }),
      el('span', { text: `id ${c.id} · called ${fmtTime(c.calledAt, true)}${started}` }),
      el('span', { class: 'doubt-key', title: 'The tool got this key (REFLEXOR_IDEMPOTENCY_KEY): look it up in its records' },
        'key ', el('code', { text: key })))));
  const retry = card.querySelector('[data-act="retry"]');
  retry.dataset.first = '';
  retry.title = 'Run it again, with the same idempotency key';
  card.querySelector('[data-act="reject"]').title = 'Do not run it again; the agent is told so';
  const resolveBtn = card.querySelector('[data-act="resolve"]');
  resolveBtn.setAttribute('aria-label', 'Resolve: say what happened');
  resolveBtn.setAttribute('aria-expanded', 'false');
  resolveBtn.setAttribute('aria-controls', `${id}-result`);

  card.addEventListener('click', (ev) => {
    const act = ev.target.closest('[data-act]')?.dataset.act;
    if (!act || card.dataset.busy === 'true') return;
    if (act === 'retry' || act === 'reject') review(card, c, act);
    else if (act === 'resolve') toggleResolve(card, resolveForm.hidden);
    else if (act === 'resolve-cancel') toggleResolve(card, false);
  });
  resolveForm.addEventListener('submit', (ev) => {
    ev.preventDefault();
    review(card, c, 'resolve');
  });
  result.addEventListener('input', () => {
    result.removeAttribute('aria-invalid');
    showError(card, '');
  });
  result.addEventListener('keydown', (ev) => {
    if (ev.key === 'Escape') { ev.stopPropagation(); toggleResolve(card, false); }
    if (ev.key === 'Enter' && (ev.ctrlKey || ev.metaKey)) { ev.preventDefault(); review(card, c, 'resolve'); }
  });
  const row = el('div', { class: 'tool-row approval-row' }, card);
  fillApprovalCard(row, c, compressed);
  return row;
}
