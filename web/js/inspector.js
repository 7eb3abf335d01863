/*
 * inspector - the side panel for looking under the hood: the raw session
 * state, the live timeline of what the session stream reported (inputs,
 * effects, states, connection changes), newest last, at most TIMELINE_MAX,
 * and the tools with this chat's permissions (drawn by tools.js).
 * Depends on dom.js, format.js, settings.js, state.js, tools.js.
 * Nothing is drawn while the panel (or its tab) is hidden; the timeline then
 * appends only the rows that are new since the last draw.
 */
import { $, copyText, el } from './dom.js';
import { clip, fmtTime, inlineArgs } from './format.js';
import { inspectorWasOpen, rememberInspector } from './settings.js';
import { ui } from './state.js';
import { loadTools, renderToolPanel } from './tools.js';

const TIMELINE_MAX = 500;
const TABS = ['timeline', 'state', 'tools'];

let timelineDirty = true;
let timelineShown = 0;     // rows of ui.timeline already in #timeline
let stateShown = null;     // the ui.state drawn in #state-json

/* `e`: {seq?, type, summary, detail? (shown as JSON), cls (row style)}. */
export function timelinePush(e) {
  e.at = Date.now();
  ui.timeline.push(e);
  if (ui.timeline.length > TIMELINE_MAX) ui.timeline.splice(0, ui.timeline.length - TIMELINE_MAX);
  timelineDirty = true;
}

export function stateSummary(s) {
  if (!s) return '';
  const a = s.assistantMessages?.length || 0;
  const u = s.userMessages?.length || 0;
  const t = s.toolCallRecords?.length || 0;
  return `${u} user · ${a} assistant · ${t} tool call${t === 1 ? '' : 's'}`;
}

export function inputSummary(i) {
  if (!i) return '';
  switch (i.type) {
    case 'user-send-message': return clip(i.content, 80);
    case 'user-cancel': return 'stop requested';
    case 'brain-send-message-start': return `message ${clip(i.messageId, 18)}`;
    case 'brain-send-message-complete': return clip(i.content, 80);
    case 'brain-call-tools':
      return Object.entries(i.toolCalls || {}).map(([, v]) => `${v.name}(${inlineArgs(v.parameters)})`).join(', ');
    case 'brain-compress-history': return `summary up to ${fmtTime(i.cutAt)}`;
    case 'brain-load-tool-call': return i.toolCallId;
    case 'toolkit-respond': return `${i.toolCallId} → ${clip(typeof i.result === 'string' ? i.result : JSON.stringify(i.result), 60)}`;
    case 'toolkit-error': return `${i.toolCallId} ✕ ${clip(i.error, 60)}`;
    case 'toolkit-start-call': return `${i.toolCallId} started`;
    case 'toolkit-call-in-doubt': return `${i.toolCallId} interrupted: may have acted`;
    case 'user-review-tool-call':
      return `${i.toolCallId} ${i.decision}${i.always ? ' always' : ''}${i.parameters ? ` (${inlineArgs(i.parameters)})` : ''}${i.reason ? `: ${clip(i.reason, 40)}` : ''}${typeof i.result === 'string' ? `: ${clip(i.result, 40)}` : ''}`;
    case 'user-set-tool-policy': return `${i.tool} → ${i.policy ?? 'default'}`;
    case 'user-configure':
      return ['model', 'temperature', 'systemPrompt'].filter((k) => k in i)
        .map((k) => `${k === 'systemPrompt' ? 'system prompt' : k} ${i[k] === null ? '→ default' : clip(String(i[k]), 40)}`)
        .join(' · ');
    default: return '';
  }
}

export function renderInspector() {
  const panel = $('inspector');
  if (panel.hidden) return;
  if (!$('panel-state').hidden && stateShown !== ui.state) {
    stateShown = ui.state;
    $('state-json').textContent = ui.state ? JSON.stringify(ui.state, null, 2) : '(no state yet)';
    $('state-meta').textContent = ui.state ? `seq ${ui.lastSeq ?? '–'} · updated ${fmtTime(ui.state.updatedAt, true)}` : '–';
  }
  if (!$('panel-timeline').hidden && timelineDirty) {
    timelineDirty = false;
    const ol = $('timeline');
    // Append only what is new; rebuild when the log was cut or cleared.
    if (timelineShown > ui.timeline.length || ol.children.length !== timelineShown ||
        ui.timeline.length >= TIMELINE_MAX) {
      ol.textContent = '';
      timelineShown = 0;
    }
    for (let i = timelineShown; i < ui.timeline.length; i++) ol.append(timelineRow(ui.timeline[i]));
    timelineShown = ui.timeline.length;
    $('timeline-count').textContent = `${ui.timeline.length} event${ui.timeline.length === 1 ? '' : 's'}`;
    if ($('timeline-follow').checked) ol.scrollTop = ol.scrollHeight;
  }
  if (!$('panel-tools').hidden) renderToolPanel();
}

function timelineRow(e) {
  const head = el('div', { class: 'tl-head' },
    el('span', { class: 'tl-seq', text: e.seq != null ? `#${e.seq}` : '' }),
    el('span', { class: 'tl-type', text: e.type }),
    el('time', { class: 'tl-time', text: fmtTime(e.at, true) }));
  const sum = e.summary ? el('div', { class: 'tl-sum', text: e.summary }) : null;
  // "conn" is also the top bar's status pill: the row is styled as "connection".
  const li = el('li', { class: `tl ${(e.cls || '').replace(/\bconn\b/, 'connection')}`, 'data-type': e.type });
  if (e.detail) {
    li.append(el('details', { class: 'tl-detail' },
      el('summary', { title: 'Show the JSON' }, head, sum),
      el('pre', { text: JSON.stringify(e.detail, null, 2) })));
  } else {
    li.append(head, sum || '');
  }
  return li;
}

/* Draw both views from scratch: what they showed while hidden is stale. */
function redrawInspector() {
  timelineDirty = true;
  timelineShown = 0;
  $('timeline').textContent = '';
  stateShown = null;
  renderInspector();
}

export function showInspector(show) {
  $('inspector').hidden = !show;
  $('app').classList.toggle('inspector-open', show);
  $('toggle-inspector').setAttribute('aria-expanded', String(show));
  $('toggle-inspector').setAttribute('aria-label', show ? 'Hide inspector' : 'Show inspector');
  rememberInspector(show);
  redrawInspector();
}

/* At load: open again if it was open, where there is room beside the chat. */
export function restoreInspector() {
  if (inspectorWasOpen() && matchMedia('(min-width: 1101px)').matches) showInspector(true);
}

function selectTab(name) {
  for (const t of TABS) {
    const on = t === name;
    $(`tab-${t}`).setAttribute('aria-selected', String(on));
    $(`tab-${t}`).tabIndex = on ? 0 : -1;
    $(`panel-${t}`).hidden = !on;
  }
  if (name === 'tools') loadTools();
  redrawInspector();
}

/* The Tools tab, from a card's "Tool permissions". */
export function openToolPermissions() {
  if ($('inspector').hidden) showInspector(true);
  selectTab('tools');
  $('tab-tools').focus();
}

export function bindInspector() {
  $('toggle-inspector').addEventListener('click', () => showInspector($('inspector').hidden));
  $('close-inspector').addEventListener('click', () => showInspector(false));
  TABS.forEach((t, i) => {
    $(`tab-${t}`).addEventListener('click', () => selectTab(t));
    $(`tab-${t}`).addEventListener('keydown', (ev) => {
      const step = { ArrowLeft: -1, ArrowRight: 1 }[ev.key];
      if (!step) return;
      const other = TABS[(i + step + TABS.length) % TABS.length];
      selectTab(other);
      $(`tab-${other}`).focus();
    });
  });
  $('timeline-clear').addEventListener('click', () => { ui.timeline = []; timelineDirty = true; renderInspector(); });
  $('state-copy').addEventListener('click', (ev) => copyText(JSON.stringify(ui.state, null, 2), ev.currentTarget));
  $('timeline-states').addEventListener('change', (ev) => {
    $('timeline').classList.toggle('hide-states', !ev.currentTarget.checked);
  });
}
