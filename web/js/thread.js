/*
 * thread - the conversation as DOM: user messages (with their send status),
 * answers as markdown, tool calls as cards (name, arguments, pending /
 * success / error, result; a call awaiting approval is approvals.js's card,
 * a call in doubt after a restart indoubt.js's), an answer restarted after
 * an interruption with its mark,
 * the compressed-history banner, the thinking dots.
 * An exchange is a user message and what came after it up to the next one:
 * its message has Edit, its last answer Regenerate, and both the "‹ 1/2 ›"
 * of its versions (versions.js); an answer also shows its reasoning, usage,
 * and an error or an early Stop as such, with Retry (answer.js).
 * Depends on answer.js, approvals.js, composer.js (Retry and Discard of a
 * failed send), dom.js, format.js, indoubt.js, markdown.js, state.js, tools.js,
 * versions.js.
 * Each item is a node kept in ui.nodes under a key with a signature of what
 * it shows: a draw rebuilds (or updates) only the nodes whose signature
 * changed, and moves nodes only when the order did.
 */
import {
  errorCallout, fillReasoning, reasoningOf, splitError, stoppedNote, usageInfo, usageNode,
} from './answer.js';
import {
  approvalCard, fillApprovalCard, isAwaiting, isInDoubt, restoreReviewFocus, reviewLabel, reviewTag,
} from './approvals.js';
import { discardMessage, postUserMessage } from './composer.js';
import { $, ICONS, copyText, el, icon } from './dom.js';
import { fmtTime, inlineArgs, inlineResult, prettyJson } from './format.js';
import { doubtCard } from './indoubt.js';
import { renderMarkdown } from './markdown.js';
import { isBusy, isThinking, scheduleRender, ui } from './state.js';
import { toolsVersion } from './tools.js';
import { editBox, editButton, exchangeVersions, regenerateButton, versionPager, versionSig } from './versions.js';

/* Messages and tool calls in time order, then the sends not yet in the state. */
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

/* Each answer's exchange: {u (its user message), last (the exchange's last
 * answer), final (the chat's last answer)}, by answer id. */
function exchanges(items) {
  const out = new Map();
  let u = null;
  let lastId = null;
  const close = () => { if (lastId) out.get(lastId).last = true; lastId = null; };
  const final = items.findLast((it) => it.kind !== 'tool');
  if (final?.kind === 'assistant') out.set(final.m.id, { final: true });
  for (const it of items) {
    if (it.kind === 'user') {
      close();
      u = it.pending ? null : it.m;
    } else if (it.kind === 'assistant') {
      out.set(it.m.id, { u, last: false, final: !!out.get(it.m.id)?.final });
      lastId = it.m.id;
    }
  }
  close();
  return out;
}

/* The last user message, when a Stop came before anything answered it. */
function stoppedUnanswered(items) {
  const last = items[items.length - 1];
  const s = ui.state;
  if (!last || last.kind !== 'user' || last.pending || !s || isBusy()) return null;
  return (s.calledBrainAt || 0) >= last.m.receivedAt ? last.m : null;
}

export function renderThread() {
  const thread = $('thread');
  // A tool call redrawn (it ran, it finished) keeps the keyboard focus on its summary.
  const active = document.activeElement;
  const focusedTool = active?.matches?.('.tool > summary') ? active.parentElement.dataset.id : null;
  const s = ui.state;
  const items = threadItems();
  const ex = exchanges(items);
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
    else if (it.kind === 'assistant') want.push(assistantNode(it.m, compressed, ex.get(it.m.id)));
    else want.push(toolNode(it.m, compressed));
  }
  if (!bannerPlaced) want.push(summaryNode(s));
  const unanswered = stoppedUnanswered(items);
  if (unanswered) want.push(stoppedNode(unanswered));
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
  if (focusedTool && !document.activeElement?.matches?.('.tool > summary'))
    document.querySelector(`.tool[data-id="${CSS.escape(focusedTool)}"] > summary`)?.focus();
  restoreReviewFocus();
}

/* Reuse the node under `key` when its signature is unchanged; else update
 * it in place, unless `update` returns false (not its kind: rebuilt). */
function node(key, sig, build, update) {
  let n = ui.nodes.get(key);
  if (n && n.sig === sig) return { key, el: n.el };
  if (n && update && update(n.el) !== false) {
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
  const editing = !pending && ui.editing?.id === m.id;
  // Its versions show here when one of them is an edit (else on the answer).
  const v = pending ? null : exchangeVersions(m);
  const shownV = v && v.kinds.includes('edit') ? v : null;
  const sig = `${status}|${pending?.error || ''}|${compressed}|${editing}|${versionSig(shownV)}|${ui.branching}`;
  return node(`u:${m.id}`, sig, () => {
    const meta = el('div', { class: 'msg-meta' });
    if (pending?.status === 'sending' || pending?.status === 'sent') {
      meta.append(el('span', { class: 'sending', text: pending.status === 'sending' ? 'Sending…' : 'Sent' }));
    } else if (pending?.status === 'failed') {
      meta.append(
        el('span', { class: 'failed', role: 'alert', text: `Not sent: ${pending.error || 'error'}` }),
        el('button', {
          type: 'button', class: 'link-btn retry', 'aria-label': 'Retry sending this message',
          onclick: () => postUserMessage(pending),
        }, icon(ICONS.retry), el('span', { text: 'Retry' })),
        el('button', {
          type: 'button', class: 'link-btn', 'aria-label': 'Discard this message',
          onclick: () => discardMessage(pending),
        }, el('span', { text: 'Discard' })),
      );
    } else if (!editing) {
      const copy = el('button', {
        type: 'button', class: 'link-btn copy-msg', 'aria-label': 'Copy message',
        onclick: () => copyText(m.content, copy),
      }, icon(ICONS.copy), el('span', { text: 'Copy' }));
      meta.append(el('time', { text: fmtTime(m.receivedAt) }), copy, editButton(m));
      if (shownV) meta.append(versionPager(shownV, 'message'));
    }
    return el('article', {
      class: `msg user${compressed ? ' is-compressed' : ''}${editing ? ' editing' : ''}`, 'data-id': m.id, 'data-kind': 'user',
      'data-pending': pending ? pending.status : null, 'aria-label': 'You',
    },
    editing ? editBox(m) : el('div', { class: 'bubble', text: m.content }),
    meta);
  });
}

/* A streaming answer shows what its stream has, unless the state is ahead. */
function assistantText(m) {
  if (m.status === 'streaming') {
    const st = ui.streams.get(m.id);
    if (st && st.content.length >= (m.content || '').length) return st.content;
  }
  return m.content || '';
}

/* What an answer shows besides its text, and a signature of it. */
function answerExtras(m, x) {
  const u = x?.u || null;
  const last = !!x?.last;
  const v = last && u ? exchangeVersions(u) : null;
  const usage = usageInfo(m);
  const final = !!x?.final;
  const sig = `${reasoningOf(m).length}|${usage?.sig || ''}|${last}|${final}|${!!u}|${versionSig(v)}|${ui.branching}`;
  return { u, last, final, v, usage, sig };
}

/* The answer's meta line and callouts, rebuilt when answerExtras changed. */
function fillAnswerExtras(art, m, xt, shown, error) {
  const sig = `${xt.sig}|${m.status}|${error}|${!shown.trim()}`;
  if (art._extras === sig) return;
  art._extras = sig;
  art.dataset.final = xt.final ? 'true' : 'false';
  const slot = art.querySelector('.answer-extra');
  slot.textContent = '';
  art.dataset.error = error ? 'true' : 'false';
  if (error) slot.append(errorCallout(error, regenerateButton(xt.u, 'Retry')));
  else if (m.status === 'stopped' && !shown.trim()) slot.append(stoppedNote(xt.u ? regenerateButton(xt.u, 'Retry') : null));
  const usage = art.querySelector('.usage-slot');
  usage.textContent = '';
  if (xt.usage?.text) usage.append(usageNode(xt.usage));
  const acts = art.querySelector('.answer-acts');
  acts.textContent = '';
  if (xt.last && xt.u && m.status !== 'streaming' && !error && shown.trim()) acts.append(regenerateButton(xt.u));
  if (xt.v) acts.append(versionPager(xt.v, 'answer'));
}

function assistantNode(m, compressed, x) {
  const text = assistantText(m);
  const { text: shown, error } = splitError(text);
  const xt = answerExtras(m, x);
  const sig = `${m.status}|${compressed}|${text.length}|${text.slice(-32)}|${xt.sig}|${!!m.restarted}`;
  // Updated in place while it streams, so the article (and its Copy) stays.
  const fill = (art) => {
    art.dataset.status = m.status;
    art.classList.toggle('is-compressed', compressed);
    const md = art.querySelector('.md');
    if (md._text !== shown) {
      md._text = shown;
      renderMarkdown(md, shown);
      art.querySelector('.copy-msg').hidden = !shown;
    }
    fillReasoning(art, m, !!shown);
    fillAnswerExtras(art, m, xt, shown, error);
    const meta = art.querySelector('.msg-meta .state');
    meta.textContent = '';
    if (m.status === 'stopped') meta.append(el('span', { class: 'badge stopped', text: 'Stopped' }));
    else if (m.status === 'streaming') meta.append(el('span', { class: 'badge live', text: 'Streaming' }));
    else meta.append(el('time', { text: fmtTime(m.updatedAt || m.receivedAt) }));
    if (m.restarted) meta.append(restartedMark());
    art.dataset.restarted = m.restarted ? 'true' : 'false';
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
      el('div', { class: 'answer-extra' }),
      el('div', { class: 'msg-meta' }, el('span', { class: 'state' }), el('span', { class: 'usage-slot' }), copy,
        el('span', { class: 'answer-acts' }))));
    fill(art);
    return art;
  }, fill);
}

/* An answer the brain started again after an interruption (SPEC §3.7): the
 * text before the restart stays, the new answer follows it. */
function restartedMark() {
  return el('span', {
    class: 'badge restarted', role: 'note',
    title: 'The server was interrupted while this answer streamed; the model started it again after the text kept so far',
  }, icon(ICONS.retry), el('span', { text: 'Restarted after an interruption' }));
}

function toolNode(c, compressed) {
  // A card that waits is updated in place, never rebuilt, so what the person
  // is typing stays; a card of another kind under the same key (a running
  // call found in doubt after a restart) is rebuilt.
  if (isInDoubt(c)) {
    return node(`t:${c.id}`, `in-doubt|${compressed}|${toolsVersion()}`, () => doubtCard(c, compressed),
      (row) => (row.querySelector('.approval.in-doubt') ? fillApprovalCard(row, c, compressed) : false));
  }
  if (isAwaiting(c)) {
    return node(`t:${c.id}`, `awaiting|${compressed}|${toolsVersion()}`, () => approvalCard(c, compressed),
      (row) => (row.querySelector('.approval:not(.in-doubt)') ? fillApprovalCard(row, c, compressed) : false));
  }
  const r = c.result;
  const state = !r ? 'pending' : r.isSuccess ? 'success' : 'error';
  const sig = `${state}|${c.approval || ''}|${compressed}|${c.isLoaded}|${c.startedAt || 0}`;
  return node(`t:${c.id}`, sig, () => {
    const resultText = !r ? '' : r.isSuccess ? String(r.content ?? '') : String(r.error ?? 'error');
    const statusLabel = reviewLabel(c) || { pending: 'Running', success: 'Done', error: 'Error' }[state];
    const args = inlineArgs(c.parameters);
    const summary = el('summary', { 'aria-label': `Tool ${c.name}: ${statusLabel}` },
      el('span', { class: 'tool-icon', 'aria-hidden': 'true' }, icon(ICONS.tool)),
      el('span', { class: 'tool-name', text: c.name }),
      args ? el('code', { class: 'tool-args-inline', text: args }) : null,
      r ? el('span', { class: 'tool-result-inline', text: `→ ${inlineResult(resultText)}` }) : null,
      el('span', { class: 'grow' }),
      reviewTag(c),
      el('span', { class: `tool-status ${state}` },
        state === 'pending' ? el('span', { class: 'spinner', 'aria-hidden': 'true' }) : null,
        el('span', { text: statusLabel })),
      el('span', { class: 'chev', 'aria-hidden': 'true' }, icon(ICONS.chevron)));
    const body = el('div', { class: 'tool-body' },
      el('div', { class: 'tool-sec' },
        el('div', { class: 'tool-label', text: 'Arguments' }),
        el('pre', { class: 'tool-pre', text: prettyJson(c.parameters) })),
      el('div', { class: 'tool-sec' },
        el('div', { class: 'tool-label', text: !r ? 'Result' : !r.isSuccess ? 'Error'
          : c.approval === 'resolved' ? 'Result (what you said happened)' : 'Result' }),
        r ? el('pre', { class: `tool-pre${r.isSuccess ? '' : ' err'}`, text: prettyJson(resultText) })
          : el('p', { class: 'muted', text: 'Waiting for the tool…' })),
      el('div', { class: 'tool-foot muted', text: `id ${c.id} · called ${fmtTime(c.calledAt, true)}${c.startedAt ? ` · started ${fmtTime(c.startedAt, true)}` : ''}${r ? ` · answered ${fmtTime(r.receivedAt, true)}` : ''}` }));
    // A rebuilt card (its result came in) stays open if the user opened it.
    const card = el('details', {
      class: `tool${compressed ? ' is-compressed' : ''}`, 'data-kind': 'tool', 'data-id': c.id,
      'data-name': c.name, 'data-state': state, 'data-approval': c.approval || null, open: ui.openTools.has(c.id),
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

/* Where the answer would be, after a Stop before anything answered. */
function stoppedNode(u) {
  return node(`stopped:${u.id}`, `${ui.branching}|${versionSig(exchangeVersions(u))}`, () => {
    const v = exchangeVersions(u);
    return el('div', { class: 'msg stopped-mark', 'data-kind': 'stopped', role: 'note', 'aria-label': 'Stopped' },
      el('div', { class: 'avatar', 'aria-hidden': 'true' }, icon(ICONS.bot)),
      el('div', { class: 'msg-body' },
        stoppedNote(regenerateButton(u, 'Retry'), 'Stopped before the answer started.'),
        v ? el('div', { class: 'msg-meta' }, el('span', { class: 'answer-acts' }, versionPager(v, 'answer'))) : null));
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
