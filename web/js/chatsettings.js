/*
 * chatsettings - the per-chat settings (SPEC §3.2 user-configure, §7): the
 * system prompt, model and temperature the brain uses for this chat's later
 * answers. A dialog shows what the state has (state.settings; absent = the
 * server's default) and sends only what changed, null for a field emptied
 * (back to the server's default). The state brings the change back.
 * Depends on api.js, dom.js, state.js.
 */
import { postInput } from './api.js';
import { $, toast } from './dom.js';
import { scheduleRender, ui } from './state.js';

const KEYS = ['systemPrompt', 'model', 'temperature'];

const current = () => ui.state?.settings || {};

/* The settings button shows whether this chat has its own. */
export function renderSettingsButton() {
  const s = current();
  const own = KEYS.filter((k) => s[k] !== undefined && s[k] !== null);
  const btn = $('chat-settings-btn');
  btn.dataset.custom = own.length ? 'true' : 'false';
  const parts = [];
  if (s.model) parts.push(`model ${s.model}`);
  if (typeof s.temperature === 'number') parts.push(`temperature ${s.temperature}`);
  if (s.systemPrompt) parts.push('own system prompt');
  btn.title = parts.length ? `Chat settings: ${parts.join(', ')}` : 'Chat settings: the server\'s defaults';
  btn.disabled = !ui.sid;
}

function showError(msg) {
  $('cs-error').textContent = msg || '';
  $('cs-error').hidden = !msg;
}

function syncTemp(fromRange) {
  const num = $('cs-temp');
  const range = $('cs-temp-range');
  if (fromRange) num.value = range.value;
  else if (num.value !== '' && Number.isFinite(Number(num.value))) range.value = num.value;
  $('cs-temp-wrap').dataset.default = num.value === '' ? 'true' : 'false';
}

function fill() {
  const s = current();
  $('cs-system').value = s.systemPrompt ?? '';
  $('cs-model').value = s.model ?? '';
  $('cs-temp').value = typeof s.temperature === 'number' ? String(s.temperature) : '';
  $('cs-temp-range').value = typeof s.temperature === 'number' ? String(s.temperature) : '1';
  syncTemp(false);
  const own = KEYS.filter((k) => s[k] !== undefined && s[k] !== null).length;
  $('cs-now').textContent = own ? `This chat has ${own} setting${own === 1 ? '' : 's'} of its own; empty fields use the server's default.`
    : 'This chat uses the server\'s defaults. Set any of these for this chat only.';
  showError('');
}

export function openChatSettings() {
  if (!ui.sid) return;
  fill();
  const d = $('chat-settings');
  if (!d.open) d.showModal();
  $('cs-system').focus();
}

/* The form as a user-configure input of what changed, or {error}. */
function changes() {
  const s = current();
  const want = {
    systemPrompt: $('cs-system').value.trim() ? $('cs-system').value : null,
    model: $('cs-model').value.trim() || null,
    temperature: null,
  };
  const t = $('cs-temp').value.trim();
  if (t !== '') {
    const n = Number(t);
    if (!Number.isFinite(n) || n < 0 || n > 2) return { error: 'The temperature is a number from 0 to 2.' };
    want.temperature = n;
  }
  const input = {};
  for (const k of KEYS) if ((s[k] ?? null) !== want[k]) input[k] = want[k];
  return { input };
}

async function save(input) {
  const btn = $('cs-save');
  btn.disabled = true;
  try {
    await postInput(ui.sid, { type: 'user-configure', ...input });
    $('chat-settings').close();
    toast('Settings saved for this chat');
  } catch (e) {
    showError(`Not saved: ${e.message}`);
  } finally {
    btn.disabled = false;
    scheduleRender();
  }
}

export function bindChatSettings() {
  $('chat-settings-btn').addEventListener('click', openChatSettings);
  $('cs-temp-range').addEventListener('input', () => syncTemp(true));
  $('cs-temp').addEventListener('input', () => syncTemp(false));
  $('cs-temp-default').addEventListener('click', () => {
    $('cs-temp').value = '';
    syncTemp(false);
    $('cs-temp').focus();
  });
  $('cs-cancel').addEventListener('click', () => $('chat-settings').close());
  $('cs-reset').addEventListener('click', () => {
    const s = current();
    const input = {};
    for (const k of KEYS) if ((s[k] ?? null) !== null) input[k] = null;
    if (!Object.keys(input).length) { $('chat-settings').close(); return; }
    save(input);
  });
  $('cs-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const c = changes();
    if (c.error) { showError(c.error); $('cs-temp').focus(); return; }
    if (!Object.keys(c.input).length) { $('chat-settings').close(); return; }
    save(c.input);
  });
}
