/*
 * forks - which chats are versions of which (SPEC §7: edit and regenerate
 * fork the session; the earlier branch stays reachable).
 * Depends on state.js only: no DOM, no network.
 *
 * An edit or a regenerate of exchange n (the chat's n-th user message and
 * what answered it; its input has seq k in the log) forks the chat at k-1
 * (POST .../fork {"at": k-1}: the new session holds the inputs up to k-1,
 * so the same n-1 exchanges) and sends the message again there. The server
 * answers {id, from, at} and keeps no link between the two, so this browser
 * does: localStorage "reflexor.versions" maps each fork's id to {from, at,
 * n, kind: 'edit'|'regenerate', t}. Every tab of the page shares it (a
 * `storage` event redraws the others). Exchanges are counted, not located by
 * seq, because a fork may get inputs of its own before the message (the
 * settings carried over), which moves its seqs but never its count.
 *
 * The versions of exchange n are the sessions that share exchanges 1..n-1
 * and differ from n on. A fork made at exchange n or later from a session
 * shares exchanges before n with that session's own origin too, so origins
 * are followed up while the link's n is >= n (norm). The version a session S
 * shows of exchange n is the ancestor reached by following links while their
 * n is > n (memberOf): a later fork keeps exchange n of its parent.
 */
import { ui } from './state.js';

const LINKS_KEY = 'reflexor.versions';
const OPENED_KEY = 'reflexor.opened';
const OPENED_MAX = 500;
const DEPTH_MAX = 256;      // a cycle in hand-edited storage cannot hang the page

let links = read(LINKS_KEY);     // fork id -> {from, at, kind, t}
let opened = read(OPENED_KEY);   // session id -> when this browser last showed it
let onChange = () => {};

function read(key) {
  try {
    const v = JSON.parse(localStorage.getItem(key) || '{}');
    return v && typeof v === 'object' && !Array.isArray(v) ? v : {};
  } catch {
    return {};
  }
}

function write(key, v) {
  try { localStorage.setItem(key, JSON.stringify(v)); } catch { /* storage off: this page only */ }
}

/* `fn()` runs when another tab changed the links. */
export function onForksChanged(fn) {
  onChange = fn;
}

export function bindForks() {
  window.addEventListener('storage', (e) => {
    if (e.key === LINKS_KEY) { links = read(LINKS_KEY); onChange(); }
    else if (e.key === OPENED_KEY) opened = read(OPENED_KEY);
  });
}

export function saveLink(id, l) {
  links = read(LINKS_KEY);
  links[id] = l;
  write(LINKS_KEY, links);
}

/* A deleted session is no version of anything any more; its forks keep
 * their link (their inputs are still those of the deleted one up to it). */
export function forgetSession(id) {
  links = read(LINKS_KEY);
  if (!(id in links)) return;
  delete links[id];
  write(LINKS_KEY, links);
}

export const linkOf = (id) => links[id] || null;

export function noteOpened(id) {
  opened = read(OPENED_KEY);
  opened[id] = Date.now();
  const ids = Object.keys(opened);
  if (ids.length > OPENED_MAX) {
    ids.sort((a, b) => opened[a] - opened[b]);
    for (const k of ids.slice(0, ids.length - OPENED_MAX)) delete opened[k];
  }
  write(OPENED_KEY, opened);
}

export const openedAt = (id) => opened[id] || 0;

/* Whether the chat list knows `id` (a list not loaded yet knows everything). */
function exists(id) {
  return !ui.sessionsLoaded || ui.sessions.some((s) => s.id === id);
}

const valid = (l) => l && typeof l.from === 'string' && Number.isInteger(l.n) && l.n > 0;

/* The session x shares exchanges before n with, highest up the links. */
function norm(x, n) {
  for (let i = 0; i < DEPTH_MAX; i++) {
    const l = links[x];
    if (!valid(l) || l.n < n) return x;
    x = l.from;
  }
  return x;
}

/* The version of exchange n that session s shows. */
function memberOf(s, n) {
  let x = s;
  for (let i = 0; i < DEPTH_MAX; i++) {
    const l = links[x];
    if (!valid(l) || l.n <= n) return x;
    x = l.from;
  }
  return x;
}

/* Does anything fork from S's line, or S from another? (Else no lookup.) */
export function hasVersions(s) {
  const chain = new Set();
  for (let x = s, i = 0; x && i < DEPTH_MAX; x = links[x]?.from, i++) chain.add(x);
  if (links[s]) return true;
  return Object.values(links).some((l) => chain.has(l.from));
}

/*
 * The versions of exchange n, seen from session s: {ids (oldest first),
 * index (s's), kinds ('original'|'edit'|'regenerate')}, or null when there
 * is only one.
 */
export function versionsAt(s, n) {
  const m = memberOf(s, n);
  const l = links[m];
  const origin = valid(l) && l.n === n ? norm(l.from, n) : m;
  const forks = Object.entries(links)
    .filter(([id, k]) => valid(k) && k.n === n && id !== origin && norm(k.from, n) === origin && (id === m || exists(id)))
    .sort((a, b) => (a[1].t || 0) - (b[1].t || 0));
  const ids = [];
  const kinds = [];
  if (origin === m || exists(origin)) { ids.push(origin); kinds.push('original'); }
  for (const [id, k] of forks) { ids.push(id); kinds.push(k.kind || 'edit'); }
  if (ids.length < 2) return null;
  return { ids, index: ids.indexOf(m), kinds };
}

/* Where to go to see version `id` of exchange n: the session this browser
 * last showed among those that continue that version. */
export function latestOf(id, n) {
  let best = id;
  let bestAt = openedAt(id);
  for (const x of Object.keys(links)) {
    if (x === id || !exists(x) || memberOf(x, n) !== id) continue;
    const t = openedAt(x);
    if (t > bestAt) { best = x; bestAt = t; }
  }
  return best;
}

/* The chat a session belongs to: the top of its links (maybe deleted). */
export function familyOf(id) {
  let x = id;
  for (let i = 0; i < DEPTH_MAX && links[x]; i++) x = links[x].from;
  return x;
}
