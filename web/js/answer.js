/*
 * answer - what an answer shows besides its text (SPEC §3.1, §7): the
 * model's reasoning, collapsed ("Thought for 4 s"), live from the message
 * stream's `reasoning` frames and from the message's `reasoning` after; the
 * tokens and speed the brain reported (`usage`, `firstTokenAt`); an error
 * answer ("[Error] ...", the brains' way to say a call failed) as an error
 * callout with Retry; an answer stopped before its first word as a
 * "Stopped" note with Retry.
 * Depends on dom.js, format.js, state.js. Everything is textContent.
 */
import { el, icon } from './dom.js';
import { fmtDuration } from './format.js';
import { ui } from './state.js';

const BRAIN = ['M9 4a3 3 0 0 0-3 3 3 3 0 0 0-2 5 3 3 0 0 0 2 5 3 3 0 0 0 6 1V4.5A2.5 2.5 0 0 0 9 4z',
  'M15 4a3 3 0 0 1 3 3 3 3 0 0 1 2 5 3 3 0 0 1-2 5 3 3 0 0 1-6 1'];
const ALERT = ['M12 3l9.5 17h-19z', 'M12 10v4', 'M12 17.5v.01'];

/*
 * An answer's text split from the error the brain put at its end:
 * {text, error} where `error` is null, or the message after "[Error] ".
 * The openai brain writes "[Error] why" alone, or after "\n\n" when some
 * text came first.
 */
export function splitError(content) {
  const c = String(content ?? '');
  if (c.startsWith('[Error]')) return { text: '', error: c.slice(7).trim() || 'the model could not answer' };
  const at = c.lastIndexOf('\n\n[Error]') + 2;
  if (at < 2) return { text: c, error: null };
  if (c.slice(at).includes('\n\n')) return { text: c, error: null };
  return { text: c.slice(0, at).replace(/\s+$/, ''), error: c.slice(at + 7).trim() || 'the model could not answer' };
}

/* The reasoning known for message `m`: the live stream's while it streams. */
export function reasoningOf(m) {
  const st = ui.streams.get(m.id);
  const live = st?.reasoning || '';
  const kept = typeof m.reasoning === 'string' ? m.reasoning : '';
  return live.length > kept.length ? live : kept;
}

// How long the model reasoned, as this page saw it: from the first reasoning
// to the first word of the answer. The state does not say (its firstTokenAt
// is the first token of either), so an answer not watched live says
// "Reasoning" only.
const thought = new Map();   // message id -> {start, end}

function reasoningLabel(m, hasContent) {
  let t = thought.get(m.id);
  if (m.status === 'streaming' && !t) thought.set(m.id, (t = { start: Date.now(), end: 0 }));
  if (t && !t.end && (hasContent || m.status !== 'streaming')) t.end = Date.now();
  if (m.status === 'streaming' && !hasContent) return 'Thinking…';
  return t?.end > t?.start ? `Thought for ${fmtDuration(t.end - t.start)}` : 'Reasoning';
}

/*
 * The <details> of the reasoning, kept in `art` (made once, then updated in
 * place so its open state and the reader's scroll stay).
 */
export function fillReasoning(art, m, hasContent) {
  const text = reasoningOf(m);
  let box = art.querySelector(':scope .reasoning');
  if (!text) {
    box?.remove();
    return;
  }
  if (!box) {
    box = el('details', { class: 'reasoning' },
      el('summary', { 'aria-label': 'Reasoning: show or hide' },
        icon(BRAIN), el('span', { class: 'reasoning-label' }),
        el('span', { class: 'chev', 'aria-hidden': 'true' }, icon(['M9 6l6 6-6 6']))),
      el('div', { class: 'reasoning-text' }));
    box.open = ui.openReasoning.has(m.id);
    box.addEventListener('toggle', () => {
      if (box.open) ui.openReasoning.add(m.id); else ui.openReasoning.delete(m.id);
    });
    const md = art.querySelector('.md');
    md.parentNode.insertBefore(box, md);
  }
  const label = reasoningLabel(m, hasContent);
  box.querySelector('.reasoning-label').textContent = label;
  box.querySelector('summary').setAttribute('aria-label', `${label}: show or hide the reasoning`);
  box.dataset.live = m.status === 'streaming' && !hasContent ? 'true' : 'false';
  const body = box.querySelector('.reasoning-text');
  if (body.textContent !== text) body.textContent = text;
}

/* "42 tokens · 18.5 tok/s", with the details in a title; null when the
 * brain reported nothing. */
export function usageInfo(m) {
  const u = m.usage;
  if (!u || typeof u !== 'object' || m.status === 'streaming') return null;
  const out = Number(u.completionTokens);
  const inp = Number(u.promptTokens);
  if (!Number.isFinite(out) && !Number.isFinite(inp)) return null;
  const parts = [];
  const title = [];
  if (Number.isFinite(out)) parts.push(`${out} token${out === 1 ? '' : 's'}`);
  const secs = m.firstTokenAt && m.updatedAt ? (m.updatedAt - m.firstTokenAt) / 1000 : 0;
  let speed = '';
  if (Number.isFinite(out) && secs > 0) {
    const tps = out / secs;
    speed = `${tps >= 100 ? Math.round(tps) : tps.toFixed(1)} tok/s`;
    parts.push(speed);
  }
  if (Number.isFinite(inp)) title.push(`prompt: ${inp} tokens`);
  if (Number.isFinite(out)) title.push(`answer: ${out} tokens`);
  if (secs > 0) title.push(`generated in ${fmtDuration(secs * 1000)}`);
  if (m.firstTokenAt && m.calledBrainAt && m.firstTokenAt >= m.calledBrainAt) {
    title.push(`first token after ${fmtDuration(m.firstTokenAt - m.calledBrainAt)}`);
  }
  return { text: parts.join(' · '), title: title.join(' · '), sig: `${out}|${inp}|${speed}` };
}

export function usageNode(info) {
  return el('span', { class: 'usage', text: info.text, title: info.title, 'aria-label': `Usage: ${info.title}` });
}

/* The callout of an answer that is an error, with its Retry. */
export function errorCallout(message, retry) {
  return el('div', { class: 'answer-error', role: 'group', 'aria-label': 'Error' },
    el('span', { class: 'answer-error-icon', 'aria-hidden': 'true' }, icon(ALERT)),
    el('div', { class: 'answer-error-text' },
      el('strong', { text: 'The model could not answer' }),
      el('span', { class: 'answer-error-why', text: message })),
    retry);
}

/* Where the answer would be, when a Stop came before its first word. */
export function stoppedNote(retry, why = 'Stopped before the answer started.') {
  return el('div', { class: 'stopped-note' },
    el('span', { class: 'badge stopped', text: 'Stopped' }),
    el('span', { class: 'stopped-why', text: why }),
    retry);
}
