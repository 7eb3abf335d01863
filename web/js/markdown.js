/*
 * markdown - markdown to sanitised DOM: mdext.js renders (marked, KaTeX math,
 * highlight.js code), DOMPurify cleans after rendering, then code blocks get
 * a language label and a Copy button and remote images a click-to-load
 * placeholder.
 * Depends on dom.js, mdblocks.js, mdext.js, and on window.marked and
 * window.DOMPurify (window.katex, window.hljs optional), the deferred classic
 * scripts in index.html (they have run before any module does). Without
 * marked or DOMPurify the text shows as plain text, never as HTML.
 *
 * Streaming: renderMarkdown() keeps, per target, the blocks mdblocks.js says
 * are finished as DOM rendered once; a call with the same text grown renders
 * only the newly finished blocks and the open last block, so a chunk costs
 * O(new text + open block), never the whole answer. Any other text starts
 * over. Callers already coalesce chunks per animation frame (scheduleRender).
 *
 * Sanitising keeps the page from fetching anything an answer names:
 *   - no style (except KaTeX's own, filtered), srcset, background, poster,
 *     no media or embedding elements, no SVG <image>/<feImage>/<use>, no
 *     attribute value with url(...);
 *   - an <img> keeps its src only for a data:image/ URI; any other src moves
 *     to a placeholder button (host and alt text) that creates the real <img>
 *     only when clicked (SPEC §7: remote images are not fetched until asked).
 */
import { ICONS, copyText, el, icon } from './dom.js';
import { advance, createSplitter } from './mdblocks.js';
import { MATH_NONCE, markdownParser } from './mdext.js';

const IMAGE_ICON = ['M4 5h16v14H4z', 'M4 16l5-5 4 4 2-2 5 5', 'M15.5 9.5h.01'];

const PURIFY_CONFIG = {
  FORBID_TAGS: [
    'style', 'form', 'input', 'button', 'textarea', 'select', 'iframe', 'object', 'embed',
    'video', 'audio', 'source', 'track', 'picture', 'image', 'feimage', 'feImage', 'use',
  ],
  FORBID_ATTR: ['srcset', 'background', 'poster', 'ping', 'formaction', 'action'],
  ADD_TAGS: ['semantics', 'annotation'], // KaTeX's MathML, for screen readers
};

/* KaTeX's style properties; a value is a length, a keyword or a colour. */
const MATH_STYLE_PROPS = new Set([
  'height', 'width', 'min-width', 'top', 'bottom', 'left', 'right', 'position',
  'margin-left', 'margin-right', 'margin-top', 'margin-bottom', 'padding-left', 'padding-right',
  'vertical-align', 'color', 'background-color', 'border', 'border-color', 'border-style',
  'border-width', 'border-top-width', 'border-bottom-width', 'border-right-width', 'border-left-width',
]);
const MATH_STYLE_VALUE = /^[-+#.%\w ]{1,40}$/;
/* Attributes whose value is a URL or text, never CSS: "url(" in them is text. */
const TEXT_ATTRS = new Set(['href', 'src', 'xlink:href', 'alt', 'title', 'data-remote-src']);

let purify = null;

/* Only KaTeX's declarations, inside KaTeX's output, with harmless values. */
function mathStyle(node, value) {
  if (!node.closest?.(`[data-kx="${MATH_NONCE}"]`)) return '';
  const keep = [];
  for (const decl of value.split(';')) {
    const i = decl.indexOf(':');
    if (i < 0) continue;
    const prop = decl.slice(0, i).trim().toLowerCase();
    const v = decl.slice(i + 1).trim();
    if (!MATH_STYLE_PROPS.has(prop) || !MATH_STYLE_VALUE.test(v)) continue;
    if (prop === 'position' && v !== 'relative' && v !== 'absolute') continue;
    keep.push(`${prop}:${v}`);
  }
  return keep.join(';');
}

/* Our own DOMPurify (its hooks touch nobody else's), built once. */
function sanitizer() {
  if (purify || !window.DOMPurify?.sanitize) return purify;
  const p = typeof window.DOMPurify === 'function' ? window.DOMPurify(window) : window.DOMPurify;
  p.addHook('uponSanitizeAttribute', (node, data) => {
    if (!TEXT_ATTRS.has(data.attrName) && !data.attrName.startsWith('aria-') && /url\s*\(/i.test(data.attrValue)) {
      // CSS-like values (SVG fill, mask, filter...) could fetch.
      data.keepAttr = false;
    } else if (data.attrName === 'style') {
      const s = mathStyle(node, data.attrValue);
      if (s) data.attrValue = s;
      else data.keepAttr = false;
    }
  });
  p.addHook('afterSanitizeAttributes', (node) => {
    if (node.nodeName.toLowerCase() === 'a' && (node.hasAttribute('href') || node.hasAttribute('xlink:href'))) {
      node.setAttribute('target', '_blank');
      node.setAttribute('rel', 'noopener noreferrer nofollow');
    }
    if (node.tagName === 'IMG') {
      // Parsed in DOMPurify's inert document: nothing has been fetched yet.
      const src = (node.getAttribute('src') || '').trim();
      node.removeAttribute('data-remote-src');
      if (!/^data:image\//i.test(src)) {
        node.removeAttribute('src');
        if (src) node.setAttribute('data-remote-src', src);
      }
      node.setAttribute('referrerpolicy', 'no-referrer');
    }
  });
  // Parsed once, not per call; a fragment back, never a string to parse again.
  p.setConfig({ ...PURIFY_CONFIG, RETURN_DOM_FRAGMENT: true });
  purify = p;
  return purify;
}

/* Sanitised HTML -> a detached fragment, still in DOMPurify's inert
 * document: nothing in it loads until it is appended. */
function toFragment(html, imgOk) {
  const frag = sanitizer().sanitize(html);
  for (const n of frag.querySelectorAll('[data-kx]')) n.removeAttribute('data-kx');
  for (const pre of frag.querySelectorAll('pre')) decorateCode(pre);
  for (const img of frag.querySelectorAll('img[data-remote-src]')) {
    const src = img.getAttribute('data-remote-src');
    img.replaceWith(imgOk.has(src) ? remoteImage(src, img.getAttribute('alt') || '', img.getAttribute('title')) : placeholder(img, imgOk));
  }
  for (const img of frag.querySelectorAll('img:not([src])')) img.remove();
  return frag; // appended as is: adopting keeps the buttons' listeners
}

function decorateCode(pre) {
  const code = pre.querySelector('code');
  const lang = /language-([\w+#-]+)/.exec(code?.className || '')?.[1] || '';
  const btn = el('button', {
    type: 'button', class: 'code-copy', 'aria-label': `Copy ${lang || 'code'} to clipboard`,
  }, icon(ICONS.copy), el('span', { text: 'Copy' }));
  btn.addEventListener('click', () => copyText((code || pre).textContent.replace(/\n$/, ''), btn));
  const head = el('div', { class: 'code-head' }, el('span', { class: 'code-lang', text: lang || 'code' }), btn);
  const wrap = el('div', { class: 'code-block' });
  pre.replaceWith(wrap);
  wrap.append(head, pre);
}

function hostOf(src) {
  try {
    const u = new URL(src, location.href);
    return u.origin === location.origin ? 'this server' : (u.host || u.protocol.replace(/:$/, ''));
  } catch {
    return 'an unknown address';
  }
}

function remoteImage(src, alt, title) {
  return el('img', { src, alt, title: title || null, referrerpolicy: 'no-referrer', decoding: 'async' });
}

/* A button in place of a remote image: the image loads only when clicked. */
function placeholder(img, imgOk) {
  const src = img.getAttribute('data-remote-src');
  const alt = img.getAttribute('alt') || '';
  const title = img.getAttribute('title');
  const host = hostOf(src);
  const btn = el('button', {
    type: 'button', class: 'img-ph', 'data-src': src, title: `Load ${src}`,
    'aria-label': `Load image${alt ? ` "${alt}"` : ''} from ${host}`,
  },
  icon(IMAGE_ICON),
  el('span', { class: 'img-ph-text' },
    el('span', { class: 'img-ph-alt', text: alt || 'Image' }),
    el('span', { class: 'img-ph-host', text: `${host} · not loaded, click to load` })));
  btn.addEventListener('click', (ev) => {
    ev.preventDefault(); // inside a link, the click loads the image, not the link
    ev.stopPropagation();
    imgOk.add(src);
    btn.replaceWith(remoteImage(src, alt, title));
  });
  return btn;
}

/* Markdown blocks -> DOM. Each block is parsed and sanitised on its own, as
 * it is when streamed, so an unclosed tag never reaches into the next one. */
function renderBlocks(srcs, imgOk) {
  const md = markdownParser();
  if (srcs.length === 1) return toFragment(md.parse(srcs[0]), imgOk);
  const all = document.createDocumentFragment();
  for (const s of srcs) all.append(toFragment(md.parse(s), imgOk));
  return all;
}

function trimTail(target, keep) {
  while (target.childNodes.length > keep) target.lastChild.remove();
}

/*
 * Markdown -> sanitised DOM inside `target`. Called again with the same text
 * grown (a streaming answer), it renders only what is new: the finished
 * blocks stay, the open block is redrawn. Without the libraries: plain text.
 */
export function renderMarkdown(target, text) {
  if (!markdownParser() || !sanitizer()) {
    target.textContent = text;
    target.classList.add('plain');
    return;
  }
  if (!target._imgOk) target._imgOk = new Set();
  let st = target._mdr;
  if (!st || !text.startsWith(st.text)) {
    target.textContent = '';
    st = { text: '', split: createSplitter(), stable: 0, tail: null };
    target._mdr = st;
  }
  st.text = text;
  let from = st.split.blockStart;
  const cuts = advance(st.split, text);
  if (cuts.length) {
    const srcs = [];
    for (const at of cuts) {
      srcs.push(text.slice(from, at));
      from = at;
    }
    // Most often the open block drawn last frame is the one that finished.
    const reuse = srcs[0] === st.tail;
    if (!reuse) trimTail(target, st.stable);
    if (srcs.length > (reuse ? 1 : 0)) target.append(renderBlocks(reuse ? srcs.slice(1) : srcs, target._imgOk));
    st.stable = target.childNodes.length;
    st.tail = null;
  }
  const tail = text.slice(st.split.blockStart);
  if (tail !== st.tail) {
    trimTail(target, st.stable);
    if (tail) target.append(renderBlocks([tail], target._imgOk));
    st.tail = tail;
  }
}
