/*
 * msgstream - buffers of streaming answers. See msgstream.h.
 */
#include "server/msgstream.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "server/event.h"

struct msgstream *msgstream_find(struct msgstream *head, const char *id)
{
    for (struct msgstream *m = head; m; m = m->next)
        if (!strcmp(m->id, id))
            return m;
    return NULL;
}

struct msgstream *msgstream_open(struct msgstream **head, const char *id, size_t text_max,
                                 size_t queue_max)
{
    struct msgstream *m = calloc(1, sizeof(*m));

    if (!m)
        return NULL;
    m->id = strdup(id);
    if (!m->id) {
        free(m);
        return NULL;
    }
    rx_buf_init(&m->text, text_max);
    rx_buf_init(&m->reasoning, text_max);
    sse_channel_init(&m->ch, queue_max);
    m->next = *head;
    *head = m;
    return m;
}

static void msgstream_free(struct msgstream *m)
{
    sse_channel_release(&m->ch);
    rx_buf_release(&m->text);
    rx_buf_release(&m->reasoning);
    free(m->id);
    free(m);
}

/* Send `f` to the followers and drop our reference (NULL: out of memory). */
static void publish(struct msgstream *m, struct sse_frame *f)
{
    if (!f)
        return;
    sse_channel_publish(&m->ch, f);
    sse_frame_unref(f);
}

/* Keep `delta` in `buf` and send it as a `kind` frame (id: the text's length). */
static int append(struct msgstream *m, struct rx_buf *buf, const char *kind,
                  const char *delta, size_t n)
{
    int err = rx_buf_append(buf, delta, n);

    if (err)
        return err;
    publish(m, event_message(kind, "delta", delta, n, (int64_t)m->text.len));
    return 0;
}

int msgstream_append(struct msgstream *m, const char *delta)
{
    return append(m, &m->text, "chunk", delta, strlen(delta));
}

int msgstream_append_reasoning(struct msgstream *m, const char *delta)
{
    return append(m, &m->reasoning, "reasoning", delta, strlen(delta));
}

int msgstream_append_at(struct msgstream *m, bool reasoning, size_t offset,
                        const char *delta, size_t n)
{
    struct rx_buf *buf = reasoning ? &m->reasoning : &m->text;
    size_t have = buf->len;

    if (offset > have || offset + n <= have)
        return 0; /* a gap, or nothing new */
    return append(m, buf, reasoning ? "reasoning" : "chunk", delta + (have - offset),
                  n - (have - offset));
}

int msgstream_load(struct msgstream *m, const char *text, size_t n)
{
    int err = msgstream_append_at(m, false, 0, text, n);

    if (!err && m->saved < n)
        m->saved = n;
    return err;
}

/* The text and reasoning to tell: the live buffers, else the state's record. */
static void texts_of(const struct msgstream *m, const struct rx_message *msg,
                     const char **text, size_t *text_len, const char **reasoning,
                     size_t *reasoning_len)
{
    if (m) {
        *text = m->text.data ? m->text.data : "";
        *text_len = m->text.len;
        *reasoning = m->reasoning.data ? m->reasoning.data : "";
        *reasoning_len = m->reasoning.len;
    } else {
        *text = msg->content;
        *text_len = strlen(msg->content);
        *reasoning = msg->reasoning ? msg->reasoning : "";
        *reasoning_len = strlen(*reasoning);
    }
}

struct sse_frame *msgstream_snapshot(const struct msgstream *m,
                                     const struct rx_message *msg)
{
    const char *text, *reasoning;
    size_t text_len, reasoning_len;
    struct sse_frame *f;
    struct rx_buf b;

    texts_of(m, msg, &text, &text_len, &reasoning, &reasoning_len);
    if (!reasoning_len)
        return event_message("snapshot", "content", text, text_len, (int64_t)text_len);
    rx_buf_init(&b, RX_BUF_STATE_MAX);
    f = rx_buf_puts(&b, "{\"type\":\"snapshot\",\"content\":") ||
                rx_buf_put_json_strn(&b, text, text_len) ||
                rx_buf_puts(&b, ",\"reasoning\":") ||
                rx_buf_put_json_strn(&b, reasoning, reasoning_len) || rx_buf_putc(&b, '}')
            ? NULL
            : sse_frame_event((int64_t)text_len, b.data, b.len);
    rx_buf_release(&b);
    return f;
}

json_t *msgstream_json(const char *id, const struct msgstream *m,
                       const struct rx_message *msg)
{
    const char *text, *reasoning;
    size_t text_len, reasoning_len;
    json_t *j;

    texts_of(m, msg, &text, &text_len, &reasoning, &reasoning_len);
    j = event_message_json(id, text, rx_status_name(msg->status));
    if (j && reasoning_len &&
        json_object_set_new(j, "reasoning", json_stringn(reasoning, reasoning_len))) {
        json_decref(j);
        return NULL;
    }
    return j;
}

void msgstream_settle(struct msgstream **head, const struct rx_state *st)
{
    for (struct msgstream **p = head; *p;) {
        struct msgstream *m = *p;
        const struct rx_message *msg = rx_state_find_assistant(st, m->id);

        if (msg && msg->status == RX_STATUS_STREAMING) {
            p = &m->next;
            continue;
        }
        if (msg) {
            size_t len = strlen(msg->content);

            publish(m, event_message(rx_status_name(msg->status), "content", msg->content,
                                     len, (int64_t)len));
        }
        *p = m->next;
        msgstream_free(m);
    }
}

void msgstream_close_all(struct msgstream *head)
{
    /* The answer ends here: followers hear it stopped, with the text so far. */
    for (struct msgstream *m = head; m; m = m->next) {
        publish(m, event_message("stopped", "content", m->text.data ? m->text.data : "",
                                 m->text.len, (int64_t)m->text.len));
        sse_channel_close_all(&m->ch);
    }
}

void msgstream_free_all(struct msgstream **head)
{
    while (*head) {
        struct msgstream *m = *head;

        *head = m->next;
        msgstream_free(m);
    }
}
