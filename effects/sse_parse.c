/*
 * sse_parse - incremental Server-Sent-Events parser. See sse_parse.h.
 */
#include "effects/sse_parse.h"

#include <errno.h>
#include <string.h>

/* The UTF-8 byte order mark, skipped once at the start of a stream. */
static const char bom[3] = {'\xEF', '\xBB', '\xBF'};

/* More digits than this in `retry` cannot fit a long long: the field is ignored. */
#define RETRY_DIGITS_MAX 18

void sse_parse_init(struct sse_parse *p, size_t max_bytes, sse_parse_event_fn on_event,
                    void *ctx)
{
    memset(p, 0, sizeof(*p));
    p->on_event = on_event;
    p->ctx = ctx;
    p->retry_ms = -1;
    rx_buf_init(&p->line, max_bytes);
    rx_buf_init(&p->data, max_bytes);
    rx_buf_init(&p->event, max_bytes);
    rx_buf_init(&p->id, max_bytes);
    rx_buf_init(&p->last_id, max_bytes);
}

void sse_parse_release(struct sse_parse *p)
{
    rx_buf_release(&p->line);
    rx_buf_release(&p->data);
    rx_buf_release(&p->event);
    rx_buf_release(&p->id);
    rx_buf_release(&p->last_id);
    memset(p, 0, sizeof(*p));
}

const char *sse_parse_last_id(const struct sse_parse *p)
{
    return p->last_id.data ? p->last_id.data : "";
}

/* Record the first error; every later feed() and finish() returns it. */
static int fail(struct sse_parse *p, int code, enum sse_parse_bound bound)
{
    if (!p->error_code) {
        p->error_code = code;
        p->bound = code == -E2BIG ? bound : SSE_PARSE_BOUND_NONE;
    }
    return p->error_code;
}

static int set_buf(struct rx_buf *b, const char *v, size_t n)
{
    rx_buf_reset(b);
    return rx_buf_append(b, v, n);
}

/*
 * A blank line: the last event ID becomes the one to resume from, then the
 * event is dispatched if it had data. The spec does both even when there is
 * nothing to dispatch (an `id:` alone still moves the resume point).
 */
static int end_event(struct sse_parse *p)
{
    struct sse_parse_event ev;
    int rc = 0;

    if (p->id_changed) {
        rc = set_buf(&p->last_id, p->id.data ? p->id.data : "", p->id.len);
        if (rc)
            return fail(p, rc, SSE_PARSE_BOUND_LINE);
        p->id_changed = false;
    }
    if (p->have_data) {
        ev.event = p->event.len ? p->event.data : "message";
        ev.data = p->data.data ? p->data.data : "";
        ev.data_len = p->data.len;
        ev.id = sse_parse_last_id(p);
        if (p->on_event)
            rc = p->on_event(p->ctx, &ev);
    }
    p->have_data = false;
    rx_buf_reset(&p->data);
    rx_buf_reset(&p->event);
    return rc ? fail(p, rc, SSE_PARSE_BOUND_NONE) : 0;
}

/* `retry`: ASCII digits only (at least one), else the field is ignored. */
static void take_retry(struct sse_parse *p, const char *v, size_t n)
{
    long long ms = 0;

    if (!n || n > RETRY_DIGITS_MAX)
        return;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return;
        ms = ms * 10 + (v[i] - '0');
    }
    p->retry_ms = ms;
}

/* One complete line, without its terminator. */
static int end_line(struct sse_parse *p, const char *l, size_t n)
{
    const char *colon, *v;
    size_t flen, vlen;
    int rc = 0;

    if (!n)
        return end_event(p);
    if (l[0] == ':')
        return 0;
    colon = memchr(l, ':', n);
    flen = colon ? (size_t)(colon - l) : n;
    v = colon ? colon + 1 : l + n;
    if (v < l + n && *v == ' ')
        v++;
    vlen = (size_t)(l + n - v);
    if (flen == 4 && !memcmp(l, "data", 4)) {
        size_t before = p->data.len;

        if (p->have_data)
            rc = rx_buf_putc(&p->data, '\n');
        rc = rc ? rc : rx_buf_append(&p->data, v, vlen);
        if (rc) {
            rx_buf_truncate(&p->data, before);
            return fail(p, rc, SSE_PARSE_BOUND_EVENT);
        }
        p->have_data = true;
    } else if (flen == 5 && !memcmp(l, "event", 5)) {
        rc = set_buf(&p->event, v, vlen);
    } else if (flen == 2 && !memcmp(l, "id", 2)) {
        /* An id with a NUL could not be sent back in a Last-Event-ID header. */
        if (!memchr(v, '\0', vlen)) {
            rc = set_buf(&p->id, v, vlen);
            p->id_changed = true;
        }
    } else if (flen == 5 && !memcmp(l, "retry", 5)) {
        take_retry(p, v, vlen);
    }
    return rc ? fail(p, rc, SSE_PARSE_BOUND_LINE) : 0;
}

/* Bytes of a line that does not end in this feed: keep them for the next. */
static int keep_partial(struct sse_parse *p, const char *s, size_t n)
{
    int rc = rx_buf_append(&p->line, s, n);

    return rc ? fail(p, rc, SSE_PARSE_BOUND_LINE) : 0;
}

/*
 * Skip a BOM at the start of the stream. It may arrive split across feeds,
 * so the bytes matched so far are counted; on a mismatch they were ordinary
 * bytes of the first line after all.
 */
static int skip_bom(struct sse_parse *p, const char **s, const char *end)
{
    while (!p->bom_done && *s < end) {
        if (**s != bom[p->bom_seen]) {
            p->bom_done = true;
            return p->bom_seen ? keep_partial(p, bom, p->bom_seen) : 0;
        }
        (*s)++;
        if (++p->bom_seen == sizeof(bom))
            p->bom_done = true;
    }
    return 0;
}

int sse_parse_feed(struct sse_parse *p, const char *buf, size_t n)
{
    const char *s = buf, *end = buf + n;
    int rc;

    if (p->error_code)
        return p->error_code;
    rc = skip_bom(p, &s, end);
    if (rc)
        return rc;
    while (s < end) {
        const char *q = s;

        if (p->after_cr) {
            p->after_cr = false;
            if (*s == '\n') {
                s++;
                continue;
            }
        }
        while (q < end && *q != '\n' && *q != '\r')
            q++;
        if (q == end)
            return keep_partial(p, s, (size_t)(end - s));
        p->after_cr = *q == '\r';
        if (p->line.len) {
            rc = keep_partial(p, s, (size_t)(q - s));
            rc = rc ? rc : end_line(p, p->line.data, p->line.len);
            rx_buf_reset(&p->line);
        } else if ((size_t)(q - s) > p->line.max) {
            /* The same bound as a line kept across feeds, so splits agree. */
            rc = fail(p, -E2BIG, SSE_PARSE_BOUND_LINE);
        } else {
            /* The usual case: the whole line is in this feed, parse it in place. */
            rc = end_line(p, s, (size_t)(q - s));
        }
        if (rc)
            return rc;
        s = q + 1;
    }
    return 0;
}

int sse_parse_finish(struct sse_parse *p, bool dispatch_partial)
{
    int rc = 0;

    if (p->error_code)
        return p->error_code;
    /* A stream of one to two BOM bytes: they were ordinary bytes. */
    if (!p->bom_done && p->bom_seen)
        rc = keep_partial(p, bom, p->bom_seen);
    if (!rc && dispatch_partial) {
        if (p->line.len)
            rc = end_line(p, p->line.data, p->line.len);
        rc = rc ? rc : end_event(p);
    }
    /* An `id` in the discarded event never took effect. */
    if (!rc && p->id_changed) {
        rc = set_buf(&p->id, sse_parse_last_id(p), p->last_id.len);
        rc = rc ? fail(p, rc, SSE_PARSE_BOUND_NONE) : 0;
        p->id_changed = false;
    }
    if (rc)
        return rc;
    /* The next bytes are a new stream; the resume point and retry carry over. */
    rx_buf_reset(&p->line);
    rx_buf_reset(&p->data);
    rx_buf_reset(&p->event);
    p->have_data = false;
    p->after_cr = false;
    p->bom_seen = 0;
    p->bom_done = false;
    return 0;
}
