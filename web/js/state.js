/*
 * state - what the page knows, in one object, and what follows from it.
 * Depends on format.js only: no DOM, no network.
 * ui.state, the session state from the server, is the truth. The rest is
 * local: sends not yet in the state (ui.pending), the text of answers still
 * streaming (ui.streams), the timeline, and the bookkeeping of the stream and
 * thread modules, kept here because switching sessions resets all of it.
 * Drawing sits above every module that changes `ui`, so main.js hands its
 * draw function to setRenderer(); the others call scheduleRender() (once per
 * animation frame, however many changes) or renderNow().
 */
import { clip, plainTitle } from './format.js';

export const ui = {
  sid: null,
  state: null,
  lastSeq: null,
  es: null,
  conn: 'connecting',      // connecting | online | offline
  everOnline: false,
  reconnectTimer: 0,
  backoff: 1000,
  sessions: [],
  sessionsLoaded: false,   // ui.sessions is the server's whole list
  timeline: [],
  running: new Map(),      // effect key -> started at (ms)
  streams: new Map(),      // message id -> {content, done, ctrl, active, retry}
  pending: new Map(),      // message id -> {id, sid, content, status, error, at}
  openTools: new Set(),    // tool card ids the user expanded
  summaryOpen: false,
  openReasoning: new Set(), // answers whose reasoning the user expanded
  editing: null,           // {id, text}: the user message being edited
  branching: false,        // an edit or regenerate is forking the chat
  nodes: new Map(),        // thread key -> {el, sig}
  stickToBottom: true,
};

let draw = () => {};
let frameQueued = false;

export function setRenderer(fn) {
  draw = fn;
}

export function renderNow() {
  draw();
}

export function scheduleRender() {
  if (frameQueued) return;
  frameQueued = true;
  requestAnimationFrame(() => {
    frameQueued = false;
    draw();
  });
}

function lastOf(a) { return a && a.length ? a[a.length - 1] : null; }

function toolResultTime(s) {
  let t = 0;
  for (const c of s.toolCallRecords || []) if (c.result && c.result.receivedAt > t) t = c.result.receivedAt;
  return t;
}

function isStreaming(s) {
  return !!s && (s.assistantMessages || []).some((m) => m.status === 'streaming');
}

function pendingTools(s) {
  return !!s && (s.toolCallRecords || []).some((c) => !c.result);
}

/* The brain has been asked and nothing streams yet. */
export function isThinking() {
  const s = ui.state;
  if (!s || isStreaming(s)) return false;
  const sent = [...ui.pending.values()].some((p) => p.sid === ui.sid && p.status === 'sent');
  if (sent) return true;
  const T = Math.max(lastOf(s.userMessages)?.receivedAt || 0, toolResultTime(s));
  if (!pendingTools(s) && T > (s.calledBrainAt || 0)) return true;
  for (const k of ui.running.keys()) if (k.startsWith('ask-brain-')) return !pendingTools(s);
  return false;
}

/* Something is under way that Stop would cancel. */
export function isBusy() {
  return isStreaming(ui.state) || pendingTools(ui.state) || isThinking();
}

/* The server's title of the open chat, else its first message, else "New
 * chat"; as plain text, since titles come from messages written in markdown. */
export function currentTitle() {
  const fromList = plainTitle(ui.sessions.find((x) => x.id === ui.sid)?.title);
  if (fromList) return fromList;
  const first = plainTitle(ui.state?.userMessages?.[0]?.content);
  return first ? clip(first, 60) : 'New chat';
}
