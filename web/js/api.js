/*
 * api - the client of the Reflexor HTTP API (SPEC §4): the one place that
 * knows its prefix and routes and calls fetch.
 * Depends on nothing else of the app.
 * The prefix comes from <meta name="reflexor-api"> when the page has one.
 * The JSON calls resolve to the parsed body (null for 204) or throw ApiError,
 * whose message is ready to show a person and whose `retryable` says whether
 * the same request may work later (network down, 5xx, 408, 429).
 */

const API = document.querySelector('meta[name="reflexor-api"]')?.content || '/api/reflexor';
const enc = encodeURIComponent;

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
    case 401: return 'Not authorised (the server needs a token)';
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

async function api(method, path, body) {
  let r;
  try {
    r = await fetch(API + path, {
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

export const listSessions = () => api('GET', '/sessions');
export const createSession = () => api('POST', '/sessions', {});
export const getSession = (sid) => api('GET', sessionPath(sid));
export const removeSession = (sid) => api('DELETE', sessionPath(sid));

/* An input to the session's machine (user-send-message, user-cancel). */
export const postInput = (sid, input) => api('POST', `${sessionPath(sid)}/moorex`, input);

/* The session stream, for an EventSource. mode=patch: after the first state,
 * each change arrives as a JSON Patch the size of the change, not of the history. */
export const sessionStreamUrl = (sid) => `${API}${sessionPath(sid)}/moorex?mode=patch`;

/* The SSE of one answer, as a fetch Response: the caller reads the body and
 * decides about retries; `signal` aborts it. */
export function fetchAnswerStream(sid, mid, signal) {
  return fetch(`${API}${sessionPath(sid)}/messages/${enc(mid)}`, {
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
