/*
 * format - text for people: times, one-line clips, JSON shown inline or pretty.
 * Pure: no DOM, no state, no imports.
 */

export function clip(text, n) {
  const t = String(text ?? '').replace(/\s+/g, ' ').trim();
  return t.length > n ? `${t.slice(0, n - 1)}…` : t;
}

export function fmtTime(ms, seconds = false) {
  if (!ms) return '';
  const opts = seconds ? { hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false }
    : { hour: 'numeric', minute: '2-digit' };
  return new Date(ms).toLocaleTimeString([], opts);
}

export function fmtRelative(ms) {
  if (!ms) return '';
  const s = Math.round((Date.now() - ms) / 1000);
  if (s < 45) return 'just now';
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  const d = new Date(ms);
  return d.toLocaleDateString([], { month: 'short', day: 'numeric' });
}

/* JSON text (or a value) indented for reading; text that is not JSON as it is. */
export function prettyJson(text) {
  if (typeof text !== 'string') return JSON.stringify(text, null, 2);
  try { return JSON.stringify(JSON.parse(text), null, 2); } catch { return text; }
}

/* A one-line view of tool arguments: a single plain argument shows bare. */
export function inlineArgs(text) {
  try {
    const v = typeof text === 'string' ? JSON.parse(text) : text;
    if (v && typeof v === 'object' && !Array.isArray(v)) {
      const vals = Object.values(v);
      if (vals.length === 0) return '';
      if (vals.length === 1 && typeof vals[0] !== 'object') return clip(String(vals[0]), 48);
    }
    return clip(JSON.stringify(v), 48);
  } catch {
    return clip(String(text), 48);
  }
}

/* A one-line view of a result: a JSON object shows its first plain value. */
export function inlineResult(text) {
  try {
    const v = JSON.parse(text);
    if (v && typeof v === 'object') {
      const first = Object.values(v).find((x) => x === null || typeof x !== 'object');
      if (first !== undefined) return clip(String(first), 48);
    }
  } catch { /* plain text */ }
  return clip(text, 48);
}

/*
 * A title as plain text: the first line of `text` without its markdown
 * (heading and quote marks, list bullets, emphasis, code ticks, links and
 * images as their text, HTML tags), on one line. "# Release notes" ->
 * "Release notes".
 */
export function plainTitle(text) {
  let t = String(text ?? '').trim();
  t = t.replace(/^```[^\n]*\n?/, '');
  const line = t.split('\n').find((l) => l.trim() && !/^\s*(```|---+\s*$|===+\s*$)/.test(l)) || '';
  t = line
    .replace(/^\s{0,3}(?:#{1,6}\s+|>\s*)+/, '')
    .replace(/^\s*(?:[-*+]|\d+[.)])\s+(?:\[[ xX]\]\s+)?/, '')
    .replace(/\s+#+\s*$/, '')
    .replace(/!\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/\[([^\]]+)\]\([^)]*\)/g, '$1')
    .replace(/\[([^\]]+)\]\[[^\]]*\]/g, '$1')
    .replace(/<\/?[A-Za-z][^>]*>/g, '')
    .replace(/(`+)(.+?)\1/g, '$2')
    .replace(/(?<![\w*])(\*\*|__)(?=\S)(.+?)(?<=\S)\1(?![\w*])/g, '$2')
    .replace(/(?<![\w*])(\*|_)(?=[^\s*_])(.+?)(?<=[^\s*_])\1(?![\w*])/g, '$2')
    .replace(/~~(?=\S)(.+?)(?<=\S)~~/g, '$1')
    .replace(/\\([\\`*_{}[\]()#+\-.!>~|])/g, '$1');
  return t.replace(/\s+/g, ' ').trim();
}

/* "1.2 s", "14 s", "2 min 5 s". */
export function fmtDuration(ms) {
  const s = Math.max(0, ms) / 1000;
  if (s < 10) return `${Math.round(s * 10) / 10} s`;
  if (s < 60) return `${Math.round(s)} s`;
  const m = Math.floor(s / 60);
  return `${m} min ${Math.round(s - m * 60)} s`;
}
