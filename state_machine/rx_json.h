/*
 * rx_json - JSON text checked without recursion: nesting depth, and whether
 * a text is one JSON object.
 *
 * jansson parses and dumps recursively: a text nested a few thousand levels
 * deep overflows a small thread stack (an effect's) before jansson's own
 * limit is reached. Every JSON text that comes from outside (a client, an
 * LLM, a log written by an older version) is measured here first, in a loop
 * with no recursion, and refused past RX_JSON_DEPTH_MAX.
 *
 * Pure: no allocation, no I/O. Ownership: nothing is kept.
 */
#ifndef RX_JSON_H
#define RX_JSON_H

#include <stdbool.h>
#include <stddef.h>

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

#endif
