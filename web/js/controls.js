/*
 * controls - the page around the thread: connection status, chat title, the
 * send and stop buttons with the composer hint (the Enter / Shift+Enter hint
 * only where there is a keyboard), the sidebar drawer of phones,
 * and scrolling (stay with the newest message, the jump button).
 * Depends on dom.js, inspector.js (Escape closes it), state.js.
 */
import { $ } from './dom.js';
import { showInspector } from './inspector.js';
import { currentTitle, isBusy, ui } from './state.js';

const NEAR_BOTTOM_PX = 120;   // this close to the end still counts as following it
const JUMP_AFTER_PX = 200;    // this far up, offer the jump button

const touchOnly = matchMedia('(pointer: coarse) and (not (any-pointer: fine))');
const narrow = matchMedia('(max-width: 720px)');

/* A person at a keyboard: the Enter / Shift+Enter hint means something. */
const keyboardHint = () => !touchOnly.matches && !narrow.matches;

export function renderControls() {
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
    // Phones and tablets have no Shift key to speak of: no keyboard hint there.
    hint.textContent = keyboardHint() ? 'Enter to send, Shift+Enter for a new line' : '';
    hint.classList.remove('warn');
    send.title = keyboardHint() ? 'Send (Enter)' : 'Send';
  }
  hint.hidden = !hint.textContent;
  $('stop').hidden = !isBusy();
  $('stop').disabled = !online;
  const title = currentTitle();
  $('chat-title').textContent = title;
  $('rename-chat').disabled = !ui.sid;
  $('export-chat').disabled = !ui.sid;
  document.title = ui.sid && title !== 'New chat' ? `${title} · Reflexor` : 'Reflexor';
}

function openSidebar() {
  $('app').classList.add('sidebar-open');
  $('scrim').hidden = false;
  $('open-sidebar').setAttribute('aria-expanded', 'true');
  $('new-chat').focus();
}

export function closeSidebar() {
  if (!$('app').classList.contains('sidebar-open')) return;
  $('app').classList.remove('sidebar-open');
  $('scrim').hidden = true;
  $('open-sidebar').setAttribute('aria-expanded', 'false');
}

function distanceFromBottom() {
  const box = $('messages');
  return box.scrollHeight - box.scrollTop - box.clientHeight;
}

export function isNearBottom() {
  return distanceFromBottom() < NEAR_BOTTOM_PX;
}

export function updateJump() {
  $('jump').hidden = !(distanceFromBottom() > JUMP_AFTER_PX);
}

export function bindControls() {
  touchOnly.addEventListener('change', renderControls);
  narrow.addEventListener('change', renderControls);
  $('open-sidebar').addEventListener('click', openSidebar);
  $('close-sidebar').addEventListener('click', closeSidebar);
  $('scrim').addEventListener('click', () => { closeSidebar(); });
  $('messages').addEventListener('scroll', () => {
    ui.stickToBottom = isNearBottom();
    updateJump();
  }, { passive: true });
  // The box resizes with the window and the composer: a reader at the end stays there.
  new ResizeObserver(() => {
    const box = $('messages');
    if (ui.stickToBottom) box.scrollTop = box.scrollHeight;
  }).observe($('messages'));
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
}
