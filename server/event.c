/*
 * event - the encodings of every streamed event. See event.h.
 */
#include "server/event.h"

#include <string.h>

#include "server/sse.h"
#include "state_machine/rx_patch.h"

/* The buffer as one frame; `err` is the encoder's result. */
static struct sse_frame *frame_of(int err, int64_t id, const struct rx_buf *b)
{
    return err ? NULL : sse_frame_event(id, b->data, b->len);
}

struct sse_frame *event_state(const struct rx_state *st, int64_t seq,
                              struct rx_buf *scratch)
{
    rx_buf_reset(scratch);
    return frame_of(rx_buf_puts(scratch, "{\"type\":\"state-updated\",\"state\":") ||
                        rx_state_encode(st, scratch) || rx_buf_putc(scratch, '}'),
                    seq, scratch);
}

struct sse_frame *event_input(const struct rx_input *in, int64_t seq,
                              struct rx_buf *scratch)
{
    rx_buf_reset(scratch);
    return frame_of(rx_buf_puts(scratch, "{\"type\":\"input-received\",\"input\":") ||
                        rx_input_encode(in, scratch) || rx_buf_putc(scratch, '}'),
                    seq, scratch);
}

struct sse_frame *event_patch(const struct rx_state *st, const struct rx_outcome *o,
                              int64_t seq, struct rx_buf *scratch)
{
    rx_buf_reset(scratch);
    return frame_of(rx_buf_puts(scratch, "{\"type\":\"state-patch\",\"patch\":") ||
                        rx_patch_encode(st, o, scratch) || rx_buf_putc(scratch, '}'),
                    seq, scratch);
}

struct sse_frame *event_effect(const char *type, const char *key, int64_t seq,
                               struct rx_buf *scratch)
{
    rx_buf_reset(scratch);
    return frame_of(rx_buf_printf(scratch, "{\"type\":\"%s\",\"key\":", type) ||
                        rx_buf_put_json_str(scratch, key) || rx_buf_putc(scratch, '}'),
                    seq, scratch);
}

struct sse_frame *event_message(const char *type, const char *field, const char *text,
                                size_t len, int64_t id)
{
    struct rx_buf b;
    struct sse_frame *f;

    rx_buf_init(&b, RX_BUF_STATE_MAX);
    f = frame_of(rx_buf_printf(&b, "{\"type\":\"%s\",\"%s\":", type, field) ||
                     rx_buf_put_json_strn(&b, text, len) || rx_buf_putc(&b, '}'),
                 id, &b);
    rx_buf_release(&b);
    return f;
}

json_t *event_message_json(const char *id, const char *content, const char *status)
{
    return json_pack("{s:s, s:s, s:s, s:b}", "messageId", id, "content", content,
                     "status", status, "isComplete", strcmp(status, "streaming") != 0);
}

/* The list entry's fields, after `{"type":...,` or `{`. */
static int put_session_fields(struct rx_buf *b, const struct event_session *e)
{
    return rx_buf_puts(b, "\"id\":") || rx_buf_put_json_str(b, e->id) ||
           rx_buf_printf(b, ",\"createdAt\":%lld,\"updatedAt\":%lld,\"title\":",
                         (long long)e->created_at, (long long)e->updated_at) ||
           rx_buf_put_json_str(b, e->title) ||
           rx_buf_printf(b, ",\"messageCount\":%lld}", (long long)e->message_count);
}

struct sse_frame *event_session(const char *type, const struct event_session *e)
{
    struct rx_buf b;
    struct sse_frame *f;

    rx_buf_init(&b, RX_BUF_SMALL_MAX);
    f = frame_of(rx_buf_printf(&b, "{\"type\":\"%s\",", type) ||
                     put_session_fields(&b, e),
                 -1, &b);
    rx_buf_release(&b);
    return f;
}

struct sse_frame *event_session_deleted(const char *id)
{
    struct rx_buf b;
    struct sse_frame *f;

    rx_buf_init(&b, RX_BUF_SMALL_MAX);
    f = frame_of(rx_buf_puts(&b, "{\"type\":\"session-deleted\",\"id\":") ||
                     rx_buf_put_json_str(&b, id) || rx_buf_putc(&b, '}'),
                 -1, &b);
    rx_buf_release(&b);
    return f;
}

json_t *event_session_json(const struct event_session *e)
{
    return json_pack("{s:s, s:I, s:I, s:s, s:I}", "id", e->id, "createdAt",
                     (json_int_t)e->created_at, "updatedAt", (json_int_t)e->updated_at,
                     "title", e->title, "messageCount", (json_int_t)e->message_count);
}
