/*
 * dom - the small DOM helpers every view shares: element and icon builders,
 * the toast, copy to the clipboard.
 * Depends on nothing else of the app. Text goes into elements only as
 * textContent (el's `text`); markdown.js is the one place that makes HTML.
 */

export const $ = (id) => document.getElementById(id);

/* <tag attrs...>children</tag>: `text` sets textContent, `on<event>` listens,
 * and null, undefined or false leave an attribute or child out. */
export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children) if (c !== null && c !== undefined && c !== false) e.append(c);
  return e;
}

const SVG_NS = 'http://www.w3.org/2000/svg';

export function icon(paths, cls = '') {
  const s = document.createElementNS(SVG_NS, 'svg');
  s.setAttribute('viewBox', '0 0 24 24');
  s.setAttribute('aria-hidden', 'true');
  if (cls) s.setAttribute('class', cls);
  for (const d of paths) {
    const p = document.createElementNS(SVG_NS, 'path');
    p.setAttribute('d', d);
    s.append(p);
  }
  return s;
}

export const ICONS = {
  copy: ['M9 9h10v10H9z', 'M5 15V5h10'],
  check: ['M5 12.5l4.5 4.5L19 7'],
  trash: ['M4 7h16', 'M10 11v6M14 11v6', 'M6 7l1 13h10l1-13', 'M9 7V4h6v3'],
  tool: ['M14.7 6.3a4 4 0 0 0-5.4 5.1L4 16.7V20h3.3l5.3-5.3a4 4 0 0 0 5.1-5.4l-2.4 2.4-2.3-.6-.6-2.3z'],
  chevron: ['M9 6l6 6-6 6'],
  retry: ['M4 12a8 8 0 1 0 2.3-5.7', 'M4 4v5h5'],
  layers: ['M12 3l9 5-9 5-9-5z', 'M3 13l9 5 9-5'],
  bot: ['M4 12a8 8 0 0 1 13.7-5.6M20 12a8 8 0 0 1-13.7 5.6', 'M18.5 3v4h-4M5.5 21v-4h4'],
};

let toastTimer = 0;
export function toast(msg, ms = 4000) {
  const t = $('toast');
  t.textContent = msg;
  t.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { t.hidden = true; }, ms);
}

/* Copy `text`; `btn` (with a <span> label) says "Copied" or "Copy failed" for
 * a moment. Falls back to execCommand where the Clipboard API is refused. */
export async function copyText(text, btn) {
  let ok = false;
  try {
    await navigator.clipboard.writeText(text);
    ok = true;
  } catch {
    const ta = el('textarea', { class: 'sr-only', 'aria-hidden': 'true' });
    ta.value = text;
    document.body.append(ta);
    ta.select();
    try { ok = document.execCommand('copy'); } catch { ok = false; }
    ta.remove();
  }
  if (!btn) return;
  const label = btn.querySelector('span');
  const old = label?.textContent;
  btn.classList.add('done');
  if (label) label.textContent = ok ? 'Copied' : 'Copy failed';
  setTimeout(() => { btn.classList.remove('done'); if (label) label.textContent = old; }, 1500);
}
