/*
 * tools - the tools the server offers (GET /tools: each tool's source,
 * default policy and annotations, and the MCP servers' state) and this
 * chat's permissions for them (state.toolPolicies, changed with
 * user-set-tool-policy), drawn in the inspector's Tools tab.
 * Depends on api.js, dom.js, format.js, state.js.
 * The catalogue is the server's and changes rarely (a config reload), so it
 * is loaded at start, again when the tab is opened, and once more when a
 * tool call names a tool it does not list. The permissions are the
 * session's: they come with the state like everything else.
 */
import { listTools, postInput } from './api.js';
import { $, el, toast } from './dom.js';
import { clip } from './format.js';
import { scheduleRender, ui } from './state.js';

const POLICY_LABEL = { auto: 'Allow', ask: 'Ask', deny: 'Deny' };

let tools = new Map();     // name -> the tool as GET /tools describes it
let servers = [];
let loaded = false;
let loading = null;
let version = 0;           // bumped on every load, so views know to redraw
const missed = new Set();  // names looked up again after a miss: once each
let panelShown = null;     // what #tool-perms shows, as a signature
let panelFocus = null;     // data-focus of the control to focus after a redraw

/* Load (or reload) the catalogue; a failure leaves the last one. */
export function loadTools() {
  loading ||= listTools().then((r) => {
    tools = new Map((Array.isArray(r?.tools) ? r.tools : []).map((t) => [t.name, t]));
    servers = Array.isArray(r?.servers) ? r.servers : [];
    loaded = true;
    version++;
    scheduleRender();
  }).catch(() => {
    /* The cards do without: a call's name and arguments are in the state. */
  }).finally(() => { loading = null; });
  return loading;
}

/* What the server says of tool `name`, or null (unknown, or not loaded yet). */
export function toolInfo(name) {
  const t = tools.get(name);
  if (!t && loaded && !missed.has(name)) {
    missed.add(name);
    loadTools();
  }
  return t || null;
}

export const toolsVersion = () => version;

/* Where a tool comes from, for people: "builtin", "command", "MCP: files". */
export function sourceLabel(t) {
  const s = String(t?.source || '');
  return s.startsWith('mcp:') ? `MCP: ${s.slice(4)}` : s;
}

/* This chat's own permissions: {"tool": "auto"|"ask"|"deny"}. */
export const sessionPolicies = () => ui.state?.toolPolicies || {};

/* Set (or with null clear) this chat's permission for `tool`; true when the
 * server took it. The state brings the change back like any other. */
export async function setToolPolicy(tool, policy) {
  if (!ui.sid) return false;
  try {
    await postInput(ui.sid, { type: 'user-set-tool-policy', tool, policy });
    return true;
  } catch (e) {
    toast(`Could not change the permission for ${tool}: ${e.message}`);
    return false;
  }
}

/* ------------------------------------------------------------ the Tools tab */

function policySelect(name, own, dflt) {
  const sel = el('select', {
    class: 'tp-select', 'aria-label': `Permission for ${name} in this chat`, 'data-focus': `sel:${name}`,
  },
  el('option', { value: '', text: dflt ? `Default (${POLICY_LABEL[dflt] || dflt})` : 'Default' }),
  ...Object.entries(POLICY_LABEL).map(([v, label]) => el('option', { value: v, text: label })));
  sel.value = own || '';
  sel.addEventListener('change', async () => {
    sel.disabled = true;
    if (!(await setToolPolicy(name, sel.value || null))) sel.value = own || '';
    sel.disabled = false;
  });
  return sel;
}

function toolRow(name, t, own) {
  const dflt = t?.policy;
  const clear = own ? el('button', {
    type: 'button', class: 'small-btn tp-clear', text: 'Clear', 'data-focus': `clr:${name}`,
    'aria-label': `Clear this chat's permission for ${name}`,
    title: `Back to the server's default${dflt ? ` (${POLICY_LABEL[dflt] || dflt})` : ''}`,
    onclick: async (ev) => {
      ev.currentTarget.disabled = true;
      panelFocus = `sel:${name}`; // the button goes away with the override
      await setToolPolicy(name, null);
    },
  }) : null;
  const about = t?.annotations?.title || t?.description;
  return el('li', {
    class: 'tp-row', 'data-tool': name, 'data-policy': own || dflt || '', 'data-own': own ? 'true' : null,
  },
  el('div', { class: 'tp-main' },
    el('div', { class: 'tp-line' },
      el('span', { class: 'tool-name', text: name }),
      el('span', { class: 'tool-source', text: t ? sourceLabel(t) : 'not offered now' }),
      own ? el('span', { class: 'badge own', text: 'This chat' }) : null,
      t?.available === false ? el('span', { class: 'badge off', text: 'Server down' }) : null),
    about ? el('p', { class: 'tp-desc', text: clip(about, 140) }) : null),
  el('div', { class: 'tp-ctl' }, policySelect(name, own, dflt), clear));
}

function serverRow(s) {
  return el('li', { class: 'tp-row', 'data-server': s.name },
    el('div', { class: 'tp-main' },
      el('div', { class: 'tp-line' },
        el('span', { class: 'tool-name', text: s.name }),
        el('span', { class: 'tool-source', text: `${s.transport || ''} · ${s.tools ?? 0} tools` }),
        el('span', { class: `badge ${s.status === 'up' ? 'own' : s.status === 'starting' ? '' : 'off'}`, text: s.status || '?' })),
      s.error ? el('p', { class: 'tp-desc err', text: clip(s.error, 200) }) : null));
}

/* Draw the tab when the catalogue or the chat's permissions changed; the
 * control that had the focus gets it back. */
export function renderToolPanel() {
  const own = sessionPolicies();
  const names = [...new Set([...tools.keys(), ...Object.keys(own).sort()])];
  const sig = JSON.stringify([version, ui.sid, names, own]);
  if (sig === panelShown) return;
  panelShown = sig;
  const box = $('tool-perms');
  const focused = box.contains(document.activeElement) ? document.activeElement.dataset.focus : null;
  box.textContent = '';
  const nOwn = Object.keys(own).length;
  $('tools-meta').textContent = loaded
    ? `${tools.size} tool${tools.size === 1 ? '' : 's'} · ${nOwn} set for this chat` : 'Loading tools…';
  box.append(el('p', { class: 'tp-help' },
    'Allow runs a tool without asking, Ask waits for your approval, Deny never runs it. ',
    'What you choose here applies to this chat\'s later calls; Default follows the server\'s setting.'));
  if (names.length) box.append(el('ul', { class: 'tp-list', 'aria-label': 'Tool permissions' },
    ...names.map((n) => toolRow(n, tools.get(n), own[n]))));
  else box.append(el('p', { class: 'tp-help', text: loaded ? 'The server offers no tools.' : 'No tools loaded yet.' }));
  if (servers.length) {
    box.append(el('h3', { class: 'tp-head', text: 'MCP servers' }),
      el('ul', { class: 'tp-list', 'aria-label': 'MCP servers' }, ...servers.map(serverRow)));
  }
  const want = panelFocus || focused;
  panelFocus = null;
  if (want) box.querySelector(`[data-focus="${CSS.escape(want)}"]`)?.focus();
}

export function bindTools() {
  $('tools-reload').addEventListener('click', () => loadTools());
}
