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
