/*
 * rx_json - JSON text read without recursion: the parser, nesting depth, and
 * whether a text is one JSON object.
 *
 * jansson parses and dumps recursively: a text nested a few thousand levels
 * deep overflows a small thread stack (an effect's) before jansson's own
 * limit is reached. Every JSON text that comes from outside (a client, an
 * LLM, an MCP server, a log written by an older version) is read by
 * rx_json_parse, a loop with an explicit stack that refuses nesting past
 * RX_JSON_DEPTH_MAX (graph/ alone loads its own checkpoints, the embedding
 * program's data, with jansson). It builds the tree json_loadb would, in
 * about a fifth of the time: it scans each string once and copies it once,
 * where jansson's lexer copies every byte through a stream and a buffer.
 *
 * Pure: no I/O. Depends on jansson (its values and allocator), rx_buf and
 * rx_alloc only. rx_json_parse allocates the tree it returns (and scratch
 * for strings with escapes and long numbers, freed before it returns, all
 * through jansson's allocator); the other functions allocate nothing.
 * Ownership: rx_json_parse puts a new reference in *out; the text is
 * borrowed and never kept.
 */
#ifndef RX_JSON_H
#define RX_JSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "state_machine/rx_common.h"

/* The deepest nesting of arrays and objects any input may carry. */
#define RX_JSON_DEPTH_MAX 64

/*
 * The deepest nesting of '[' and '{' in the first `len` bytes of `text`,
 * outside string literals (escapes honoured). The text need not be valid
 * JSON: this is a bound, not a parser. 0 for a scalar or an empty text.
 */
size_t rx_json_depth(const char *text, size_t len);
/* True when `text` (NUL-terminated) nests no deeper than RX_JSON_DEPTH_MAX. */
bool rx_json_depth_ok(const char *text);
/*
 * True when the `len` bytes of `text` are one JSON object (RFC 8259), white
 * space around it allowed, nested no deeper than RX_JSON_DEPTH_MAX; checked
 * in a loop, allocating nothing (so an out-of-memory never reads as "not an
 * object"). As jansson loads it: "\u0000" and unpaired surrogate escapes are
 * refused. Not checked: that the bytes are UTF-8 (the caller's text came
 * from a JSON string, so they are) and that numbers fit a double or int64.
 */
bool rx_json_is_object_text(const char *text, size_t len);

/*
 * Bytes (1-4) in the UTF-8 sequence at `s`, of which `left` > 0 bytes are
 * there, when it is well formed as JSON text needs it: no overlong form, no
 * surrogate, nothing past U+10FFFF. 0 when it is not. An ASCII byte, NUL
 * included, is 1: callers that refuse NUL or control bytes check them.
 */
size_t rx_json_utf8_len(const char *s, size_t left);

/* rx_json_parse flags: any value at the top, not only an object or array. */
#define RX_JSON_ANY 0x1u
/* Strings (values and keys) may hold "\u0000": for a caller that refuses the
   one string that does rather than the whole text (a NUL byte in the text
   itself is refused all the same). */
#define RX_JSON_ALLOW_NUL 0x2u

/*
 * The `len` bytes of `text` (no terminator needed; NULL reads as empty) as
 * one JSON value: an object or array, or any value with RX_JSON_ANY; white
 * space around it allowed. Accepted and built as jansson's json_loadb (flags
 * 0 or JSON_DECODE_ANY) does: RFC 8259, strings UTF-8 without "\u0000" (unless
 * RX_JSON_ALLOW_NUL), a
 * number without fraction or exponent an integer (refused past int64), any
 * other a finite double, the last of equal keys wins. Two differences:
 * nesting deeper than RX_JSON_DEPTH_MAX is refused, and so is a NUL byte
 * anywhere (jansson's lexer skips one after a number or a literal).
 * Returns 0 with a new reference in *out; -EINVAL when the text is not that
 * ("line L, column C: what" in `err`, which may be NULL); -ENOMEM. *out is
 * NULL on failure.
 */
int rx_json_parse(const char *text, size_t len, unsigned flags, json_t **out,
                  struct rx_error *err) RX_WUR;

#endif
