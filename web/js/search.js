/*
 * search - the chat list's search box: served by the server (GET
 * .../sessions/search), debounced, paged with "More". It keeps the query and
 * the results in `search`, which sessions.js draws in place of the list while
 * a query is typed, and calls back to redraw.
 * Depends on api.js and dom.js.
 */
import { searchSessions } from './api.js';
import { $ } from './dom.js';

const SEARCH_DEBOUNCE_MS = 250;
const SEARCH_PAGE = 30;

// What the list shows while a query is typed; gen drops answers to older queries.
export const search = { q: '', results: [], next: null, busy: false, gen: 0, timer: 0, error: '' };
let renderSessions = () => {};

function runSearch(more = false) {
  const q = search.q;
  const gen = ++search.gen;
  search.busy = true;
  search.error = '';
  const before = more ? search.next : null;
  renderSessions();
  // {sessions: [...], next: the `before` of the next page, or null}
  searchSessions(q, { limit: SEARCH_PAGE, before }).then((r) => {
    if (gen !== search.gen) return;
    const page = Array.isArray(r?.sessions) ? r.sessions : Array.isArray(r) ? r : [];
    const seen = new Set(more ? search.results.map((s) => s.id) : []);
    search.results = [...(more ? search.results : []), ...page.filter((s) => !seen.has(s.id))];
    search.next = typeof r?.next === 'number' ? r.next : null;
  }).catch((e) => {
    if (gen !== search.gen) return;
    search.error = e.message;
    search.next = null;
  }).finally(() => {
    if (gen !== search.gen) return;
    search.busy = false;
    renderSessions();
  });
}

function onSearchInput() {
  const q = $('session-search').value.trim();
  clearTimeout(search.timer);
  if (!q) {
    search.gen++;
    Object.assign(search, { q: '', results: [], next: null, busy: false, error: '' });
    renderSessions();
    return;
  }
  search.timer = setTimeout(() => {
    if (q === search.q && search.results.length) return;
    search.q = q;
    search.results = [];
    runSearch(false);
  }, SEARCH_DEBOUNCE_MS);
}

/* Wire the box, Escape to clear it, and "More"; `render` redraws the list. */
export function bindSearch(render) {
  renderSessions = render;
  $('session-search').addEventListener('input', onSearchInput);
  $('session-search').addEventListener('keydown', (ev) => {
    if (ev.key === 'Escape' && ev.currentTarget.value) {
      ev.stopPropagation();
      ev.currentTarget.value = '';
      onSearchInput();
    }
  });
  $('session-more').addEventListener('click', () => runSearch(true));
}
