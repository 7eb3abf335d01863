/*
 * api - the client of the Reflexor HTTP API (SPEC §4): the one place that
 * knows its prefix, routes and token, and calls fetch.
 * Depends on nothing else of the app.
 * The prefix is the server's: configure() reads it from GET /client.json
 * before any other call, so a server with another api_prefix just works.
 * The token (SPEC §4 auth) is kept in localStorage and sent as
 * "Authorization: Bearer" on fetches and as ?token= on the EventSource URL,
 * which cannot carry headers. A 401 asks for a token through the asker that
 * auth.js (the dialog) registers with setTokenAsker(), then repeats the call.
 * The same key holds a person's own API key when the server's auth.mode is
 * "keys" (SPEC §4.4): it is sent exactly as the token. client.json says the
 * mode (authMode()); GET /me (whoAmI) says who the server thinks we are.
 * Behind a proxy that signs people in ("trusted-header") there is nothing to
 * ask: a 401 there is the proxy's to answer, not a key's.
 * Besides the session routes: rename (PATCH), search, export and import,
 * fork and history, and the chat list's own stream (GET /events).
 * The JSON calls resolve to the parsed body (null for 204) or throw ApiError,
 * whose message is ready to show a person and whose `retryable` says whether
 * the same request may work later (network down, 5xx, 408, 429).
 */

const TOKEN_KEY = 'reflexor.token';
const enc = encodeURIComponent;

let API = null;            // the server's prefix, set by configure()
let mode = 'none';         // auth.mode: none | token | keys | trusted-header
let token = readToken();   // '' for none
let asker = null;          // (why, check) => Promise<token>, see setTokenAsker
let asking = null;         // the question on screen, shared by every caller

function readToken() {
  try { return localStorage.getItem(TOKEN_KEY) || ''; } catch { return ''; }
}

class ApiError extends Error {
  constructor(message, { status = 0, retryable = false, data = null } = {}) {
    super(message);
    this.status = status;
    this.retryable = retryable;
    this.data = data;
  }
}

function describeError(status, data) {
  const reason = data?.reason || data?.error;
  const msg = data?.message;
  switch (status) {
    case 400: return msg ? `Invalid: ${msg}` : 'The server refused the input as invalid';
    case 401: return mode === 'trusted-header'
      ? 'Not signed in (the proxy in front of the server did not say who you are)'
      : `Not authorised (the server needs ${mode === 'keys' ? 'an API key' : 'a token'})`;
    case 403: return 'Not allowed';
    case 404: return 'This chat no longer exists';
    case 409: return `Rejected by the session${reason ? ` (${reason})` : ''}`;
    case 413: return 'Message too long';
    case 415: return 'Unsupported content type';
    case 429: return 'The server is busy, try again';
    case 503: return 'The server is shutting down';
    default: return msg || `Server error ${status}`;
  }
}

/* The token to send from now on, kept for the next visit; '' forgets it.
 * With storage disabled it lasts as long as the page. */
function setToken(t) {
  token = t;
  try {
    if (t) localStorage.setItem(TOKEN_KEY, t);
    else localStorage.removeItem(TOKEN_KEY);
  } catch { /* ignore */ }
}

export const hasToken = () => token !== '';
export const forgetToken = () => setToken('');
/* The server's auth.mode, known once configure() has run. */
export const authMode = () => mode;
/* Whether a person gives this page a secret to send (a token or a key). */
const asksForSecret = () => mode === 'token' || mode === 'keys';

/* The mode client.json says; a server from before auth.mode says only
 * whether it wants a token. */
function modeOf(data) {
  if (['none', 'token', 'keys', 'trusted-header'].includes(data?.authMode)) return data.authMode;
  return data?.authRequired ? 'token' : 'none';
}

/* After a 401 the server may have restarted in another mode (a token set,
 * keys turned on): ask it again, so the question names the right secret. */
async function reloadMode() {
  try {
    const r = await fetch('client.json', { cache: 'no-store', headers: { Accept: 'application/json' } });
    if (r.ok) mode = modeOf(await r.json());
  } catch { /* keep the mode we know */ }
}

/* `fn(why, check)` asks a person for a token and resolves to one that
 * `check(token)` accepted; `why` is 'needed' or 'refused'. */
export function setTokenAsker(fn) {
  asker = fn;
}

/* Whether the server takes `t` (any answer but 401 does); throws when the
 * server cannot be reached. What no header can carry is refused here. */
async function tokenWorks(t) {
  if (!/^[\x20-\x7e]+$/.test(t)) return false;
  const r = await fetch(`${API}/sessions`, {
    cache: 'no-store', headers: { Accept: 'application/json', Authorization: `Bearer ${t}` },
  });
  return r.status !== 401;
}

/* One question on screen however many calls were refused together. */
function askForToken(why) {
  asking ||= asker(why, tokenWorks).then(setToken).finally(() => { asking = null; });
  return asking;
}

/* A refused call: a new mode is learnt first; behind a signing-in proxy
 * there is no question to ask (the call's 401 stands). */
async function askAfter401(why) {
  if (!asking) await reloadMode();
  if (mode !== 'trusted-header') await askForToken(why);
  return mode !== 'trusted-header';
}

/* fetch under the prefix, with the token. A 401 asks for a token and repeats
 * the call; one refused with a token replaced meanwhile just repeats. */
async function authFetch(path, init) {
  for (;;) {
    const sent = token;
    const headers = sent ? { ...init.headers, Authorization: `Bearer ${sent}` } : init.headers;
    const r = await fetch(API + path, { ...init, headers });
    if (r.status !== 401 || !asker) return r;
    if (token === sent && !(await askAfter401(sent ? 'refused' : 'needed'))) return r;
  }
}

/*
 * Before any other call: the prefix from GET /client.json (next to the page,
 * open without a token), then a token if the server needs one and none is
 * kept. Throws ApiError while the server cannot say.
 */
export async function configure() {
  let r;
  try {
    r = await fetch('client.json', { cache: 'no-store', headers: { Accept: 'application/json' } });
  } catch {
    throw new ApiError('Cannot reach the server', { retryable: true });
  }
  let data = null;
  try { data = await r.json(); } catch { /* not JSON */ }
  if (!r.ok || typeof data?.apiPrefix !== 'string') {
    throw new ApiError(`No client configuration from the server (${r.status})`, {
      status: r.status, data, retryable: true,
    });
  }
  API = data.apiPrefix;
  mode = modeOf(data);
  if (data.authRequired && asksForSecret() && !token && asker) await askForToken('needed');
}

async function api(method, path, body) {
  let r;
  try {
    r = await authFetch(path, {
      method,
      cache: 'no-store',
      headers: body === undefined ? { Accept: 'application/json' }
        : { 'Content-Type': 'application/json', Accept: 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch {
    throw new ApiError('Cannot reach the server', { retryable: true });
  }
  if (r.status === 204) return null;
  let data = null;
  try { data = await r.json(); } catch { /* not JSON */ }
  if (!r.ok) {
    throw new ApiError(describeError(r.status, data), {
      status: r.status, data, retryable: r.status >= 500 || r.status === 429 || r.status === 408,
    });
  }
  return data;
}

const sessionPath = (sid) => `/sessions/${enc(sid)}`;

/* Who the server takes this page for: {name, admin, mode}. */
export const whoAmI = () => api('GET', '/me');

export const listSessions = () => api('GET', '/sessions');
export const createSession = () => api('POST', '/sessions', {});
export const getSession = (sid) => api('GET', sessionPath(sid));
export const removeSession = (sid) => api('DELETE', sessionPath(sid));

/* Rename: {"title": text}. */
export const renameSession = (sid, title) => api('PATCH', sessionPath(sid), { title });

/* Search titles and message text (served by the server's full-text index):
 * {sessions: [list entries, newest first], next}, `limit` at a time; `next`
 * given back as `before` asks for the next page (null: no more). */
export function searchSessions(q, { limit = 0, before = null } = {}) {
  const p = new URLSearchParams({ q });
  if (limit) p.set('limit', String(limit));
  if (before !== null && before !== undefined) p.set('before', String(before));
  return api('GET', `/sessions?${p}`);
}

/* The input log as one document {"format":"reflexor-session","version":1,
 * "title","inputs":[{seq,input}]}, and back: import answers {id}, or throws
 * an ApiError whose data names the refused input ({index, reason}). */
export const exportSession = (sid) => api('GET', `${sessionPath(sid)}/export`);
export const importSession = (doc) => api('POST', '/sessions/import', doc);

/* A new session made of the inputs up to and including `at` (a seq):
 * {id, from, at}. */
export const forkSession = (sid, at) => api('POST', `${sessionPath(sid)}/fork`, { at });

/* One page of the input log: [{seq, input}] strictly after `after`. */
export const sessionHistory = (sid, after = 0, limit = 1000) =>
  api('GET', `${sessionPath(sid)}/history?after=${after}&limit=${limit}`);

/* {tools: [{name, description, parameters, source, policy, annotations}], servers}. */
export const listTools = () => api('GET', '/tools');

/* An input to the session's machine (user-send-message, user-cancel,
 * user-review-tool-call, user-set-tool-policy). */
export const postInput = (sid, input) => api('POST', `${sessionPath(sid)}/moorex`, input);

/* The session stream, for an EventSource. mode=patch: after the first state,
 * each change arrives as a JSON Patch the size of the change, not of the
 * history. The token rides in the URL: an EventSource sends no headers. */
export function sessionStreamUrl(sid) {
  const auth = token ? `&token=${enc(token)}` : '';
  return `${API}${sessionPath(sid)}/moorex?mode=patch${auth}`;
}

/* The process-wide stream of the chat list (session-created, -updated,
 * -deleted), for an EventSource; the token rides in the URL as above. */
export function eventsStreamUrl() {
  return `${API}/events${token ? `?token=${enc(token)}` : ''}`;
}

/* The SSE of one answer, as a fetch Response: the caller reads the body and
 * decides about retries; `signal` aborts it. */
export function fetchAnswerStream(sid, mid, signal) {
  return authFetch(`${sessionPath(sid)}/messages/${enc(mid)}`, {
    headers: { Accept: 'text/event-stream' }, cache: 'no-store', signal,
  });
}

/* A new client-chosen id: a send retried with the same id is stored once. */
export function uuid() {
  if (globalThis.crypto?.randomUUID) return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = [...b].map((x) => x.toString(16).padStart(2, '0')).join('');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}
