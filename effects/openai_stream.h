/*
 * openai_stream - an incremental parser for the body of a streamed OpenAI
 * Chat Completions reply (Server-Sent Events of `chat.completion.chunk`).
 *
 * Pure: no I/O, clock, threads or globals. Depends on effects/sse_parse (the
 * SSE framing), state_machine/ and jansson only; nothing from curl or
 * server/. It is fed the body in whatever pieces the socket delivers (any
 * split, even one byte at a time, gives the same result) and:
 *  - reads it as SSE (effects/sse_parse.h: lines end at LF, CRLF or a lone
 *    CR; `:` comments (keep-alives) skipped; the `data` lines of one event
 *    joined with "\n"); fields other than `data`, the event name included,
 *    carry nothing here; a last event that lacked its blank line still counts;
 *  - on `data: [DONE]` marks the reply complete; bytes after it are ignored;
 *  - parses every other event as JSON: choices[0].delta.content goes to the
 *    content callback and into `content`; delta.reasoning_content (or
 *    delta.reasoning, which some servers send instead) to the reasoning
 *    callback and into `reasoning`; delta.tool_calls are assembled by
 *    `index` (id and function.name arrive first, function.arguments in
 *    fragments; several calls may interleave); finish_reason and usage are
 *    kept; an `error` object ends the stream with its message;
 *  - a body that is one JSON document instead of SSE (a server that ignored
 *    "stream": true, or an error object) is parsed whole at finish, with
 *    choices[0].message in place of the delta.
 * Malformed JSON, an error object, or a body that ends before [DONE] is an
 * error (-EPROTO with a one-line `error.text`); errors are sticky.
 *
 * Invariants: calls[0..n_calls) have distinct `index`, in order of first
 * appearance; every buffer is bounded (OPENAI_STREAM_*_MAX).
 * Ownership: struct openai_stream is caller-allocated (openai_stream_init /
 * openai_stream_release) and owns its buffers, calls and one reference to
 * `usage` (NULL until a usage object arrived): borrow it, or incref to keep it.
 * The content callback borrows `delta` for the duration of the call.
 */
#ifndef OPENAI_STREAM_H
#define OPENAI_STREAM_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "effects/sse_parse.h"
#include "state_machine/rx_buf.h"
#include "state_machine/rx_common.h"

/* Bounds: one SSE line or event, the whole reply text, one call's arguments. */
#define OPENAI_STREAM_EVENT_MAX   (4u << 20)
#define OPENAI_STREAM_CONTENT_MAX (16u << 20)
#define OPENAI_STREAM_ARGS_MAX    (4u << 20)
#define OPENAI_STREAM_CALLS_MAX   128

/*
 * Called with each non-empty content delta (NUL-terminated, `len` bytes), in
 * order. A non-zero return stops the parser: feed() returns that value.
 */
typedef int (*openai_stream_content_fn)(void *ctx, const char *delta, size_t len);

struct openai_stream_call {
    int index;          /* the provider's `index` */
    char *id;           /* NULL when the provider gave none */
    char *name;         /* NULL until function.name arrived */
    struct rx_buf args; /* function.arguments, concatenated */
};

struct openai_stream {
    openai_stream_content_fn on_content;   /* may be NULL */
    openai_stream_content_fn on_reasoning; /* may be NULL (openai_stream_on_reasoning) */
    void *ctx;

    /* Results, valid at any time; complete once finish() returned 0. */
    struct rx_buf content;
    struct rx_buf reasoning; /* the model's reasoning, bounded like content */
    struct openai_stream_call *calls;
    size_t n_calls;
    char finish_reason[32]; /* "" until one arrived */
    json_t *usage;          /* owned reference or NULL */
    bool done;              /* [DONE] seen (or a whole JSON body parsed) */
    int error_code;         /* 0, or the sticky error feed()/finish() return */
    struct rx_error error;  /* why, one line, once error_code is set */

    /* Parser state. */
    struct sse_parse sse; /* the SSE framing of the body */
    struct rx_buf whole;  /* the body, while it may be one JSON document */
    bool started;         /* a non-blank byte was seen */
    bool json_body;       /* the body began with '{' or '[': not SSE */
};

/* Set up an empty parser. `on_content` may be NULL. */
void openai_stream_init(struct openai_stream *st, openai_stream_content_fn on_content,
                        void *ctx);
/* Also hand each non-empty reasoning delta to `fn` (with the same ctx). */
void openai_stream_on_reasoning(struct openai_stream *st, openai_stream_content_fn fn);
/* Free everything; the parser must be initialised again before reuse. */
void openai_stream_release(struct openai_stream *st);

/*
 * Parse `n` more bytes. 0; -EPROTO (malformed JSON or an error object, see
 * `error`), -E2BIG (a bound passed), -ENOMEM, or the callback's non-zero
 * value. Once an error was returned every later call returns it again.
 */
int openai_stream_feed(struct openai_stream *st, const char *p, size_t n) RX_WUR;

/*
 * The body ended: handle a last event that lacked its blank line, parse a
 * whole-JSON body, and check the reply was complete. 0 or the errors above
 * (-EPROTO "the stream ended before [DONE]" when cut).
 */
int openai_stream_finish(struct openai_stream *st) RX_WUR;

/* True when the reply asked for tools (at least one call was assembled). */
bool openai_stream_has_calls(const struct openai_stream *st);

#endif
