/*
 * transfer - export the open chat's input log as a JSON file, and import one
 * as a new chat (POST .../sessions/import), saying for a person what the
 * server refused.
 * Depends on api.js, controls.js, dom.js, format.js, sessions.js, state.js.
 */
import { exportSession, importSession } from './api.js';
import { closeSidebar } from './controls.js';
import { $, el, toast } from './dom.js';
import { clip, plainTitle } from './format.js';
import { addSession, hashFor, refreshSessionsSoon } from './sessions.js';
import { currentTitle, ui } from './state.js';

function fileName(title) {
  const slug = plainTitle(title).toLowerCase().replace(/[^a-z0-9]+/g, '-').replace(/^-+|-+$/g, '').slice(0, 40);
  const day = new Date().toISOString().slice(0, 10);
  return `${slug || 'chat'}-${day}.reflexor.json`;
}

/* Download the open chat's input log as a JSON file. */
export async function exportChat() {
  if (!ui.sid) return;
  let doc;
  try {
    doc = await exportSession(ui.sid);
  } catch (e) {
    toast(`Could not export: ${e.message}`);
    return;
  }
  const url = URL.createObjectURL(new Blob([JSON.stringify(doc, null, 2)], { type: 'application/json' }));
  const a = el('a', { href: url, download: fileName(doc?.title || currentTitle()), hidden: true });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 30000);
}

/* What the server said of a refused import, for a person. */
function importProblem(e) {
  const d = e.data || {};
  if (d.index !== undefined && d.index !== null) {
    return `input ${d.index} of the file was refused: ${d.reason || d.message || d.error || 'invalid'}`;
  }
  return d.reason || d.message || e.message;
}

async function importFile(file) {
  let doc;
  try {
    doc = JSON.parse(await file.text());
  } catch {
    toast(`Could not import “${clip(file.name, 40)}”: it is not a JSON file`, 8000);
    return;
  }
  try {
    const r = await importSession(doc);
    addSession(r.id);
    const s = ui.sessions.find((x) => x.id === r.id);
    if (s && typeof doc?.title === 'string') s.title = doc.title;
    closeSidebar();
    location.hash = hashFor(r.id);
    refreshSessionsSoon();
    toast('Chat imported');
  } catch (e) {
    toast(`Could not import “${clip(file.name, 40)}”: ${importProblem(e)}`, 10000);
  }
}

/* The Export and Import buttons, and the file picker behind Import. */
export function bindTransfer() {
  $('export-chat').addEventListener('click', exportChat);
  $('import-chat').addEventListener('click', () => $('import-file').click());
  $('import-file').addEventListener('change', (ev) => {
    const f = ev.currentTarget.files?.[0];
    ev.currentTarget.value = '';
    if (f) importFile(f);
  });
}
