/*
 * mdext - markdown source to HTML (not yet sanitised): our own marked
 * instance with math (KaTeX) and highlighted code (highlight.js).
 * Depends on window.marked, window.katex and window.hljs, deferred classic
 * scripts in index.html; without katex math stays as source in <code>,
 * without hljs code is plain. markdown.js sanitises what this returns.
 *
 * Math, never inside code (code spans and fences are tokenised first):
 *   inline   $...$  (no space just inside the dollars, no digit after the
 *            closing one, one line, no backtick: "$5 and $10" stays text),
 *            \(...\)
 *   display  $$...$$ and \[...\] as a block, or inline.
 * KaTeX runs with trust off (no \href, \url, \includegraphics, \html*) and
 * size limits; its output is wrapped in an element carrying MATH_NONCE, a
 * per-page secret a model's text cannot forge, which is how the sanitiser
 * knows which style attributes are KaTeX's own.
 */

export const MATH_NONCE = Array.from(crypto.getRandomValues(new Uint8Array(9)), (b) => b.toString(16).padStart(2, '0')).join('');

const KATEX_OPTS = {
  throwOnError: false, trust: false, strict: 'ignore', output: 'htmlAndMathml',
  maxSize: 40, maxExpand: 500,
};
/* Rendered math by source: a streaming answer re-renders its open block. */
const mathCache = new Map();
const MATH_CACHE_MAX = 500;
/* Longer code stays plain: an open code block is highlighted again each
 * frame while it streams, and this bounds what one frame can cost. */
const HIGHLIGHT_MAX_CHARS = 20000;

const ESC = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
export const escapeHtml = (s) => String(s).replace(/[&<>"']/g, (c) => ESC[c]);

function renderMath(tex, display) {
  const key = (display ? 'D' : 'I') + tex;
  let html = mathCache.get(key);
  if (html === undefined) {
    if (window.katex?.renderToString) {
      try {
        html = window.katex.renderToString(tex, { ...KATEX_OPTS, displayMode: display });
      } catch {
        html = null;
      }
    }
    if (!html) html = `<code class="math-src">${escapeHtml(tex)}</code>`;
    if (mathCache.size >= MATH_CACHE_MAX) mathCache.clear();
    mathCache.set(key, html);
  }
  const tag = display ? 'div' : 'span';
  return `<${tag} class="${display ? 'math-display' : 'math-inline'}" data-kx="${MATH_NONCE}">${html}</${tag}>`;
}

const INLINE_RULES = [
  [/^\$\$(?!\$)((?:\\[\s\S]|[^\\$])+?)\$\$/, true],
  [/^\\\[([\s\S]+?)\\\]/, true],
  [/^\\\(([\s\S]+?)\\\)/, false],
  [/^\$(?![\s$])((?:\\[^\n]|[^\\$\n`])+?)(?<![\s\\])\$(?!\d)/, false],
];

const mathInline = {
  name: 'math',
  level: 'inline',
  start(src) {
    const i = src.search(/\$|\\[([]/);
    return i < 0 ? undefined : i;
  },
  tokenizer(src) {
    for (const [re, display] of INLINE_RULES) {
      const m = re.exec(src);
      if (m && m[1].trim()) return { type: 'math', raw: m[0], text: m[1].trim(), display };
    }
    return undefined;
  },
  renderer: (t) => renderMath(t.text, t.display),
};

/* The closing delimiter is the first one after the opening (never a later
 * one that happens to end a line), and only whitespace follows it. */
const BLOCK_RULES = [
  /^ {0,3}\$\$((?:[^$]|\$(?!\$))+?)\$\$[ \t]*(?:\n+|$)/,
  /^ {0,3}\\\[((?:[^\\]|\\(?!\]))+?)\\\][ \t]*(?:\n+|$)/,
];

const mathBlock = {
  name: 'mathBlock',
  level: 'block',
  start(src) {
    const m = /^ {0,3}(?:\$\$|\\\[)/m.exec(src);
    return m ? m.index : undefined;
  },
  tokenizer(src) {
    for (const re of BLOCK_RULES) {
      const m = re.exec(src);
      if (m && m[1].trim()) return { type: 'mathBlock', raw: m[0], text: m[1].trim() };
    }
    return undefined;
  },
  renderer: (t) => `${renderMath(t.text, true)}\n`,
};

/* Fenced and indented code: highlighted when the language is known. */
function code({ text, lang }) {
  const language = (/^\S*/.exec(lang || '')?.[0] || '').toLowerCase();
  const body = (text || '').replace(/\n$/, '');
  let html = null;
  const hljs = window.hljs;
  if (language && hljs?.getLanguage?.(language) && body.length <= HIGHLIGHT_MAX_CHARS) {
    try {
      html = hljs.highlight(body, { language, ignoreIllegals: true }).value;
    } catch {
      html = null;
    }
  }
  const cls = ['hljs', language ? `language-${escapeHtml(language)}` : ''].filter(Boolean).join(' ');
  return `<pre><code class="${cls}">${html ?? escapeHtml(body)}\n</code></pre>\n`;
}

let instance = null;

/* Our marked, built once; null when marked is missing. */
export function markdownParser() {
  if (instance || !window.marked?.Marked) return instance;
  instance = new window.marked.Marked({ gfm: true, breaks: true, async: false });
  instance.use({ extensions: [mathBlock, mathInline], renderer: { code } });
  return instance;
}
