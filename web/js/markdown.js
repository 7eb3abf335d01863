/*
 * markdown - markdown to sanitised DOM: marked parses, DOMPurify cleans, then
 * code blocks get a language label and a Copy button.
 * Depends on dom.js, and on window.marked and window.DOMPurify, the deferred
 * classic scripts in index.html (they have run before any module does).
 * Without them the text shows as plain text, never as HTML.
 */
import { ICONS, copyText, el, icon } from './dom.js';

let purifyReady = false;

/* Once: links open in a new tab without referrer or opener; images load lazily
 * and send no referrer. */
function setupPurify() {
  if (purifyReady || !window.DOMPurify?.sanitize) return purifyReady;
  window.DOMPurify.addHook('afterSanitizeAttributes', (node) => {
    if (node.tagName === 'A' && node.hasAttribute('href')) {
      node.setAttribute('target', '_blank');
      node.setAttribute('rel', 'noopener noreferrer nofollow');
    }
    if (node.tagName === 'IMG') {
      node.setAttribute('loading', 'lazy');
      node.setAttribute('referrerpolicy', 'no-referrer');
    }
  });
  purifyReady = true;
  return true;
}

/* Markdown -> sanitised DOM inside `target`. Without the libraries: plain text. */
export function renderMarkdown(target, text) {
  if (!window.marked?.parse || !setupPurify()) {
    target.textContent = text;
    target.classList.add('plain');
    return;
  }
  const html = window.marked.parse(text, { gfm: true, breaks: true, async: false });
  target.innerHTML = window.DOMPurify.sanitize(html, {
    FORBID_TAGS: ['style', 'form', 'input', 'button', 'textarea', 'select', 'iframe', 'object', 'embed'],
    FORBID_ATTR: ['style'],
  });
  for (const pre of target.querySelectorAll('pre')) decorateCode(pre);
}

function decorateCode(pre) {
  const code = pre.querySelector('code');
  const lang = /language-([\w+#-]+)/.exec(code?.className || '')?.[1] || '';
  const btn = el('button', {
    type: 'button', class: 'code-copy', 'aria-label': `Copy ${lang || 'code'} to clipboard`,
  }, icon(ICONS.copy), el('span', { text: 'Copy' }));
  btn.addEventListener('click', () => copyText((code || pre).textContent, btn));
  const head = el('div', { class: 'code-head' }, el('span', { class: 'code-lang', text: lang || 'code' }), btn);
  const wrap = el('div', { class: 'code-block' });
  pre.replaceWith(wrap);
  wrap.append(head, pre);
}
