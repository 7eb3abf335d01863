/*
 * mdblocks - where a growing markdown text can be cut into blocks that no
 * later text can change, so a streaming answer renders each finished block
 * once and re-renders only the open one (O(new text) per chunk).
 * Pure: no DOM, no libraries. Used by markdown.js, for finished answers too,
 * so an answer looks the same streamed or loaded.
 *
 * A cut goes at the start of a line that follows a blank line, outside a
 * fenced code block and a display-math block, when the line starts at column
 * 0 (an indented line may continue a list item or an indented code block)
 * and does not continue a list already open in the block (a loose list stays
 * one list, up to LIST_CUT_CHARS: after that an item starts a new block, and
 * marked keeps its number with <ol start>). A block that grows past
 * BLOCK_CUT_CHARS without a blank line is cut at a line start too. Only
 * complete lines are scanned, each once; what follows the last cut is the
 * open block.
 */

/* A loose list longer than this is cut before its next item. */
export const LIST_CUT_CHARS = 4096;
/* A block longer than this (lines with no blank line between: a long tight
 * list, lines with breaks) is cut before its next line that starts at column
 * 0 and is no table row, not a setext underline, nor follows a table row: a
 * gap shows there, but one chunk never re-renders more than this. Fenced
 * code and display math are never cut. */
export const BLOCK_CUT_CHARS = 8192;
/* An unclosed "$$" / "\[" line further back than this was not math. */
const MATH_MAX_CHARS = 8192;

const BLANK = /^[ \t]*$/;
const INDENTED = /^[ \t]/;
const LIST_ITEM = /^ {0,3}(?:[-*+]|\d{1,9}[.)])(?:[ \t]|$)/;
const FENCE_OPEN = /^ {0,3}(?:(`{3,})[^`]*|(~{3,}).*)$/;
const SETEXT = /^ {0,3}(?:=+|-+)[ \t]*$/;

/* A fresh scanner: feed it the whole text so far with advance(). */
export function createSplitter() {
  return {
    blockStart: 0,  // offset where the open block starts
    lineStart: 0,   // offset of the first line not scanned yet
    fence: null,    // {ch, n} inside a fenced code block
    math: null,     // the closing delimiter inside a display-math block
    mathAt: 0,      // where that block opened
    blank: false,   // a blank line since the last line with text
    content: false, // the open block has a line with text
    list: false,    // the open block has a list item
    row: false,     // the last line with text had a '|' (a table row?)
  };
}

function cut(s, cuts, at) {
  cuts.push(at);
  s.blockStart = at;
  s.list = false;
}

function closesFence(line, f) {
  const m = /^ {0,3}(`{3,}|~{3,})[ \t]*$/.exec(line);
  return !!m && m[1][0] === f.ch && m[1].length >= f.n;
}

function count(s, sub) {
  let n = 0;
  for (let i = s.indexOf(sub); i >= 0; i = s.indexOf(sub, i + sub.length)) n++;
  return n;
}

/*
 * Scan the complete lines of `text` (the same text as before, grown) not seen
 * yet. Returns the offsets of new cuts, in order: each ends a finished block
 * and starts the next; s.blockStart is the last of them (or where it was).
 */
export function advance(s, text) {
  const cuts = [];
  let nl;
  while ((nl = text.indexOf('\n', s.lineStart)) >= 0) {
    const at = s.lineStart;
    const line = text.slice(at, text[nl - 1] === '\r' ? nl - 1 : nl);
    s.lineStart = nl + 1;
    if (s.fence) {
      if (closesFence(line, s.fence)) s.fence = null;
      continue;
    }
    if (s.math) {
      if (line.includes(s.math) || at - s.mathAt > MATH_MAX_CHARS) s.math = null;
      continue;
    }
    if (BLANK.test(line)) {
      if (s.content) s.blank = true;
      continue;
    }
    const row = line.includes('|');
    if (s.blank) {
      s.blank = false;
      const item = LIST_ITEM.test(line);
      if (!INDENTED.test(line) && !(item && s.list && at - s.blockStart < LIST_CUT_CHARS)) cut(s, cuts, at);
    } else if (at - s.blockStart >= BLOCK_CUT_CHARS && !INDENTED.test(line) && !row && !s.row
               && !SETEXT.test(line)) {
      cut(s, cuts, at);
    }
    s.row = row;
    s.content = true;
    if (LIST_ITEM.test(line)) s.list = true;
    const f = FENCE_OPEN.exec(line);
    if (f) {
      const mark = f[1] || f[2];
      s.fence = { ch: mark[0], n: mark.length };
      continue;
    }
    const t = line.trim();
    if (t.startsWith('$$') && count(t, '$$') % 2 === 1) {
      s.math = '$$';
      s.mathAt = at;
    } else if (t.startsWith('\\[') && !t.includes('\\]')) {
      s.math = '\\]';
      s.mathAt = at;
    }
  }
  return cuts;
}
