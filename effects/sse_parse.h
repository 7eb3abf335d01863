/*
 * sse_parse - an incremental Server-Sent-Events parser: the project's one
 * reader of `text/event-stream` bodies (openai_stream reads model replies
 * with it, the MCP client Streamable HTTP answers, the integration tests the
 * server's own streams).
 *
 * Pure: no I/O, clock, threads or globals. Depends on libc and
 * state_machine/ (rx_buf, rx_common) only; nothing from curl, jansson or
 * server/. It follows the WHATWG "event stream interpretation" rules, on
 * bytes (no UTF-8 check):
 *  - it is fed the body in any split; one byte at a time gives the same
 *    events as the whole body at once;
 *  - a UTF-8 BOM at the start of the stream is skipped;
 *  - lines end at LF, CRLF or a lone CR (a CR that ends one feed and an LF
 *    that starts the next are one line end);
 *  - a line starting with ':' is a comment (keep-alive) and is ignored;
 *  - `field: value`, where one space after the colon is not part of the
 *    value; a line with no colon is a field with an empty value;
 *  - `data` appends to the event's data (several lines joined with "\n");
 *    `event` names the event (default "message"); `id` sets the last event
 *    ID unless its value contains a NUL; `retry` sets the reconnection time
 *    when it is ASCII digits only; other fields are ignored;
 *  - a blank line dispatches the event if it had a data field (an event
 *    without one is not dispatched, but its name is forgotten all the same)
 *    and makes the last event ID the one reconnections should send.
 *
 * Invariants: every buffer is bounded by the `max_bytes` given at init (one
 * line, one event's data); `error_code` is 0 or the value every later feed()
 * and finish() returns.
 * Ownership: struct sse_parse is caller-allocated (sse_parse_init /
 * sse_parse_release) and owns its buffers. The event callback borrows `*ev`
 * and every string in it for the duration of the call only.
 */
#ifndef SSE_PARSE_H
#define SSE_PARSE_H

#include <stdbool.h>
#include <stddef.h>

#include "state_machine/rx_buf.h"
#include "state_machine/rx_common.h"

/* One dispatched event. Every string is NUL-terminated and borrowed. */
struct sse_parse_event {
    const char *event; /* the `event` field, "message" when none (or "") */
    const char *data;  /* the `data` lines joined with "\n"; may hold NULs */
    size_t data_len;   /* bytes in `data`, without the terminating NUL */
    const char *id;    /* the last event ID, kept across events; "" when none */
};

/*
 * Called with each dispatched event, in order. A non-zero return stops the
 * parser: feed() (or finish()) returns that value, and so does every later
 * call. A positive value is a way to stop early without an error errno.
 */
typedef int (*sse_parse_event_fn)(void *ctx, const struct sse_parse_event *ev);

/* Which bound a -E2BIG passed, so that a caller can say which in its message. */
enum sse_parse_bound {
    SSE_PARSE_BOUND_NONE = 0,
    SSE_PARSE_BOUND_LINE,  /* one line was longer than max_bytes */
    SSE_PARSE_BOUND_EVENT, /* one event's joined data was longer than max_bytes */
};

struct sse_parse {
    sse_parse_event_fn on_event; /* may be NULL: only last_id and retry kept */
    void *ctx;

    /* Results, valid at any time. */
    long long retry_ms;         /* the last valid `retry` field, -1 until one */
    int error_code;             /* 0, or the sticky value feed()/finish() return */
    enum sse_parse_bound bound; /* set with error_code == -E2BIG */

    /* Parser state (private). */
    struct rx_buf line;    /* the line being read, when split across feeds */
    struct rx_buf data;    /* the data buffer of the event being read */
    struct rx_buf event;   /* the event type buffer */
    struct rx_buf id;      /* the last event ID buffer (set by `id` fields) */
    struct rx_buf last_id; /* the last event ID as of the last blank line */
    unsigned bom_seen;     /* BOM bytes matched at the stream's start */
    bool bom_done;         /* past the place where a BOM could be */
    bool have_data;        /* a data field was seen in this event */
    bool id_changed;       /* `id` differs from `last_id` */
    bool after_cr;         /* the last byte was CR: an LF next is part of it */
};

/*
 * Set up an empty parser whose lines and events may not exceed `max_bytes`.
 * `on_event` may be NULL.
 */
void sse_parse_init(struct sse_parse *p, size_t max_bytes, sse_parse_event_fn on_event,
                    void *ctx);
/* Free everything; the parser must be initialised again before reuse. */
void sse_parse_release(struct sse_parse *p);

/*
 * Parse `n` more bytes, calling on_event for each event they complete. 0;
 * -E2BIG (a bound passed, see `bound`), -ENOMEM, or the callback's non-zero
 * value. Once an error was returned every later call returns it again.
 */
int sse_parse_feed(struct sse_parse *p, const char *buf, size_t n) RX_WUR;

/*
 * The stream ended. The spec discards an event that lacked its final blank
 * line; `dispatch_partial` dispatches it instead, as if the stream had ended
 * with a line end and a blank line (lenient clients of servers that cut it).
 * Afterwards the parser reads a new stream (a reconnection): line, event and
 * BOM state start over; the last event ID and `retry_ms` are kept.
 * 0 or the errors of feed().
 */
int sse_parse_finish(struct sse_parse *p, bool dispatch_partial) RX_WUR;

/*
 * The last event ID as of the last blank line ("" when none): what a
 * reconnection sends as Last-Event-ID. Borrowed, valid until the next
 * feed(), finish() or release().
 */
const char *sse_parse_last_id(const struct sse_parse *p);

#endif
