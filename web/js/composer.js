/*
 * composer - writing and sending: the message box (Enter sends, Shift+Enter
 * breaks the line), the suggestions of an empty chat (a click sends one),
 * sends kept locally until the state has them (sending, sent, failed with
 * Retry and Discard), the resend after a reconnect, Stop.
 * Depends on api.js, controls.js, dom.js, sessions.js (the first send of a
 * page with no chat creates one), state.js.
 */
import { postInput, uuid } from './api.js';
import { renderControls } from './controls.js';
import { $, toast } from './dom.js';
import { newChat, refreshSessionsSoon } from './sessions.js';
import { scheduleRender, ui } from './state.js';

const INPUT_MAX_HEIGHT_PX = 240;

/* Queue `text` for the open chat; false when there was nothing to send or no
 * way to send it now (offline, or no chat could be created). */
async function send(text) {
  text = text.trim();
  if (!text || ui.conn !== 'online') return false;
  if (!ui.sid && !(await newChat())) return false;
  const p = { id: uuid(), sid: ui.sid, content: text, status: 'sending', error: '', at: Date.now() };
  ui.pending.set(p.id, p);
  ui.stickToBottom = true;
  scheduleRender();
  postUserMessage(p);
  return true;
}

/* Post (or post again: same id, so the server stores it once) a pending send. */
export async function postUserMessage(p) {
  p.status = 'sending';
  p.error = '';
  scheduleRender();
  try {
    await postInput(p.sid, { type: 'user-send-message', messageId: p.id, content: p.content });
    if (ui.pending.get(p.id) === p) p.status = 'sent';
  } catch (e) {
    p.status = 'failed';
    p.error = e.message;
    p.retryable = e.retryable;
  }
  // The server titles a chat after its first message.
  if (p.sid === ui.sid && ui.sessions.every((s) => s.id !== p.sid || !s.title)) refreshSessionsSoon();
  scheduleRender();
}

export function discardMessage(p) {
  ui.pending.delete(p.id);
  scheduleRender();
}

/* After a reconnect, resend what failed for a network reason, once by itself. */
export function retryFailedSends() {
  for (const p of ui.pending.values()) {
    if (p.sid === ui.sid && p.status === 'failed' && p.retryable && p.auto !== false) {
      p.auto = false;
      postUserMessage(p);
    }
  }
}

async function stop() {
  if (!ui.sid) return;
  try {
    await postInput(ui.sid, { type: 'user-cancel' });
  } catch (e) {
    toast(`Could not stop: ${e.message}`);
  }
}

/* The box grows with its text, up to a limit, then scrolls. */
function autosize() {
  const ta = $('input');
  ta.style.height = 'auto';
  ta.style.height = `${Math.min(ta.scrollHeight, INPUT_MAX_HEIGHT_PX)}px`;
}

export function bindComposer() {
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
    // Not while an input method composes (keyCode 229): its Enter picks a candidate.
    if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing && ev.keyCode !== 229) {
      ev.preventDefault();
      $('composer').requestSubmit();
    }
  });
  input.addEventListener('input', () => { autosize(); renderControls(); });
  $('stop').addEventListener('click', stop);
  // A suggestion is sent as it is; offline it waits in the box instead.
  for (const b of document.querySelectorAll('.suggestion')) {
    b.addEventListener('click', async () => {
      if (await send(b.dataset.text)) return;
      input.value = b.dataset.text;
      autosize();
      renderControls();
      input.focus();
    });
  }
}
