/*
 * oai_chat - one chat completion in flight: its run on a session, what the
 * run produced turned into the answer's content, sent as chunks on an SSE
 * channel (streaming) or kept until the run ends for one chat.completion
 * (parked, server/park). See oai_internal.h.
 *
 * The content follows the session's timeline from the run's start (the
 * records after its user message): assistant text as it streams (run
 * deltas), each tool call as a <details> block once its result is in (run
 * steps), and at the end whatever was not streamed (a brain that does not
 * stream, text that arrived out of order) taken from the state, so the
 * content always equals what the state holds.
 *
 * Locks: every field the run writes is written in the run's callbacks, with
 * the session's lock held, one after the other; the answer (park) reads them
 * after park_finish, whose lock orders the writes before it.
 * Ownership: the chat is refcounted: one reference for the run's callbacks
 * (dropped in `ended`), one for the parked request (dropped by park
 * release), one while starting; it holds a run reference.
 */
#include "server/protocols/oai_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/idgen.h"
#include "effects/log.h"
#include "base/now.h"
#include "server/reply.h"
#include "server/run.h"
#include "server/sse.h"
#include "server/protocols/timeline.h"
#include "state_machine/rx_machine.h"

/* Frames a stream client may have waiting, at least: one per delta. */
#define CHAT_QUEUE_MIN 4096

struct oai_chat {
    struct park park; /* non-streaming only */
    int refs;         /* atomic */
    const struct config *cfg;
    struct oai_memo *memo;
    struct run *run;
    char sid[SESSION_ID_MAX + 1];
    char id[64];
    char *model;
    int64_t created;
    bool stream, include_usage;
    struct sse_channel ch; /* streaming only */
    struct oai_fp fp;      /* the request's messages */

    /* Written by the run's callbacks. */
    bool started;
    struct timeline_pos pos; /* items before it are in the content */
    size_t calls_done;       /* calls of the batch at `pos` already drawn */
    bool blocked;            /* the walk waits at a batch not answered yet */
    char *cur;               /* the assistant message being streamed, or NULL */
    size_t cur_sent;         /* its bytes in the content */
    bool cur_live;           /* its deltas go out (none was missed) */
    char *missed;            /* a message whose deltas were not sent: whole at the end */
    struct rx_buf content;
    bool overflow; /* past OAI_CONTENT_MAX: the rest is not kept */
    struct oai_usage usage;
    int64_t seq;
    bool cancelling;
    enum run_status status;
    enum rx_reason reason;
    char why[256];
    bool ended; /* atomic: read by release on another thread */
};

static void chat_free(struct oai_chat *c)
{
    if (c->stream)
        sse_channel_release(&c->ch);
    else
        park_destroy(&c->park);
    if (c->run)
        run_unref(c->run); /* never the last: the lane keeps its own until ended */
    rx_buf_release(&c->content);
    free(c->cur);
    free(c->missed);
    free(c->model);
    free(c);
}

static void chat_unref(struct oai_chat *c)
{
    if (!__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL))
        chat_free(c);
}

static struct oai_head chat_head(const struct oai_chat *c)
{
    return (struct oai_head){c->id, c->created, c->model};
}

/* Encode one JSON payload as a `data:` frame and send it to the client. */
static void publish_json(struct oai_chat *c, const struct rx_buf *b)
{
    struct sse_frame *f = sse_frame_event(-1, b->data, b->len);

    if (!f)
        return; /* out of memory: the client misses a frame, the content is whole */
    sse_channel_publish(&c->ch, f);
    sse_frame_unref(f);
}

static void publish_chunk(struct oai_chat *c, enum oai_chunk_kind kind, const char *text,
                          size_t len)
{
    struct oai_head h = chat_head(c);
    struct rx_buf b;

    rx_buf_init(&b, OAI_CONTENT_MAX + 4096);
    if (!oai_chunk_encode(&b, &h, kind, text, len))
        publish_json(c, &b);
    rx_buf_release(&b);
}

/* Add text to the content (and the stream). */
static void emit(struct oai_chat *c, const char *text, size_t len)
{
    if (!len || c->overflow)
        return;
    if (rx_buf_append(&c->content, text, len)) {
        c->overflow = true;
        log_warn("chat completion %s: the answer is over %u bytes; the rest is cut",
                 c->id, OAI_CONTENT_MAX);
        return;
    }
    if (c->stream)
        publish_chunk(c, OAI_CHUNK_CONTENT, text, len);
}

/* A blank line between parts (text, blocks) unless the content ends with one. */
static void separate(struct oai_chat *c)
{
    size_t n = c->content.len;

    if (!n)
        return;
    if (c->content.data[n - 1] != '\n')
        emit(c, "\n\n", 2);
    else if (n < 2 || c->content.data[n - 2] != '\n')
        emit(c, "\n", 1);
}

static void set_str(char **field, const char *value)
{
    free(*field);
    *field = value ? strdup(value) : NULL;
}

/* The message the walk reached is finished: the part of it not sent yet. */
static void finish_message(struct oai_chat *c, const struct rx_message *m)
{
    bool mine = c->cur && !strcmp(c->cur, m->id);
    size_t len = strlen(m->content), from = mine ? c->cur_sent : 0;

    if (!mine)
        separate(c);
    if (from > len)
        from = len; /* the stream said more than the record keeps */
    while (from < len && ((unsigned char)m->content[from] & 0xc0) == 0x80)
        from++; /* never start inside a UTF-8 character */
    emit(c, m->content + from, len - from);
    if (m->usage.present) {
        c->usage.prompt_tokens += m->usage.prompt_tokens;
        c->usage.completion_tokens += m->usage.completion_tokens;
    }
    set_str(&c->cur, NULL);
}

/*
 * Where a call waiting for a person is answered (SPEC 4.3, one approval,
 * every door): the one record in the session's log, through any door that
 * is open, each naming the session in its own words.
 */
static int waiting_where(struct oai_chat *c, struct rx_buf *w)
{
    const struct config *cfg = c->cfg;
    int err = rx_buf_printf(
        w, " in the Reflexor UI (session %s) or at POST %s/sessions/%s/inputs", c->sid,
        cfg->prefix, c->sid);

    if (!err && *cfg->lg_prefix)
        err = rx_buf_printf(w, ", LangGraph thread %s at %s", c->sid, cfg->lg_prefix);
    if (!err && *cfg->agui_prefix)
        err = rx_buf_printf(w, ", AG-UI thread %s at %s", c->sid, cfg->agui_prefix);
    if (!err && *cfg->a2a_prefix)
        err = rx_buf_printf(w, ", A2A context %s at %s", c->sid, cfg->a2a_prefix);
    return err;
}

/* One call of a batch: its block (when configured) and, waiting, the sentence. */
static void draw_call(struct oai_chat *c, const struct rx_tool_call *call)
{
    bool waiting = rx_tool_call_is_awaiting(call);
    struct rx_buf b, w;

    rx_buf_init(&b, OAI_CONTENT_MAX);
    rx_buf_init(&w, 1024);
    if (c->cfg->oai_tool_details && oai_render_tool(&b, call))
        rx_buf_reset(&b);
    if (waiting && (waiting_where(c, &w) || oai_render_waiting(&b, call, w.data)))
        rx_buf_reset(&b);
    rx_buf_release(&w);
    if (b.len) {
        separate(c);
        emit(c, b.data, b.len);
    }
    rx_buf_release(&b);
}

/*
 * Bring the content up to `st`: everything after `pos` that is finished.
 * It stops at a message still streaming (its deltas come) and at a call not
 * answered yet; `final` (the run is over) takes everything as it is.
 */
static void walk(struct oai_chat *c, const struct rx_state *st, bool final)
{
    struct timeline_pos p = c->pos;
    struct timeline_item it;

    c->blocked = false;
    while (timeline_next(st, &p, &it)) {
        if (it.kind == TIMELINE_ASSISTANT) {
            const struct rx_message *m = it.msg;

            if (m->status == RX_STATUS_STREAMING && !final) {
                if (!c->cur) { /* seen here first: its deltas from now on */
                    separate(c);
                    set_str(&c->cur, m->id);
                    c->cur_sent = 0;
                    c->cur_live = !c->missed || strcmp(c->missed, m->id);
                }
                return;
            }
            finish_message(c, m);
        } else if (it.kind == TIMELINE_TOOLS) {
            for (; c->calls_done < it.n_calls; c->calls_done++) {
                const struct rx_tool_call *call = &it.calls[c->calls_done];

                if (!call->result.present && !final) {
                    c->blocked = true;
                    return;
                }
                draw_call(c, call);
            }
            c->calls_done = 0;
        }
        /* A user message after ours (another client's) is not in the answer. */
        c->pos = p;
    }
}

/* Where the run's own records start: after its user message (the last one). */
static struct timeline_pos start_pos(const struct rx_state *st)
{
    struct timeline_pos p = timeline_end(st);
    int64_t t;

    if (!st->user.len)
        return p;
    t = st->user.items[st->user.len - 1].received_at;
    while (p.assistant && st->assistant.items[p.assistant - 1].received_at >= t)
        p.assistant--;
    while (p.tools && st->tools.items[p.tools - 1].called_at >= t)
        p.tools--;
    return p;
}

/* openai.on_disconnect "cancel": the stream's client is gone, so its run is cancelled. */
static void cancel_if_gone(struct oai_chat *c, struct run *r)
{
    if (!c->stream || !c->cfg->oai_cancel_on_disconnect || c->cancelling ||
        sse_channel_has_clients(&c->ch))
        return;
    c->cancelling = true;
    run_cancel_held(r);
}

static void on_started(void *arg, struct run *r, const struct rx_state *st, int64_t seq)
{
    struct oai_chat *c = arg;

    (void)r;
    c->started = true;
    c->pos = start_pos(st);
    c->seq = seq;
    walk(c, st, false);
}

static void on_delta(void *arg, struct run *r, const char *mid, const char *delta,
                     bool reasoning)
{
    struct oai_chat *c = arg;
    size_t len = strlen(delta);

    cancel_if_gone(c, r);
    if (!c->started)
        return;
    if (!c->cur && !c->blocked && (!c->missed || strcmp(c->missed, mid))) {
        /* A message the walk has not met yet, nothing before it pending. */
        separate(c);
        set_str(&c->cur, mid);
        c->cur_sent = 0;
        c->cur_live = true;
    }
    if (!c->cur || strcmp(c->cur, mid) || !c->cur_live) {
        /* Out of order: this message comes whole from the state later. */
        if (!c->cur || strcmp(c->cur, mid))
            set_str(&c->missed, mid);
        else
            c->cur_live = false;
        return;
    }
    if (reasoning) {
        if (c->stream)
            publish_chunk(c, OAI_CHUNK_REASONING, delta, len);
        return;
    }
    emit(c, delta, len);
    c->cur_sent += len;
}

static void on_step(void *arg, struct run *r, const struct rx_state *st, int64_t seq)
{
    struct oai_chat *c = arg;

    cancel_if_gone(c, r);
    c->seq = seq;
    if (c->started)
        walk(c, st, false);
}

/* What an ended run's error says, in OpenAI's shape. */
static void run_error(const struct oai_chat *c, struct oai_error *e)
{
    if (c->reason != RX_REASON_NONE)
        oai_error_set(e, 0, 409, "invalid_request_error", NULL, rx_reason_name(c->reason),
                      "the agent refused the message: %s", c->why);
    else
        oai_error_set(e, 0, 503, "server_error", NULL, "unavailable", "%s", c->why);
}

/* The last frames: the error, or the stop (and usage) chunks; then [DONE]. */
static void close_stream(struct oai_chat *c)
{
    struct oai_head h = chat_head(c);
    struct sse_frame *done;
    struct oai_error e;
    struct rx_buf b;

    rx_buf_init(&b, RX_BUF_SMALL_MAX);
    if (c->status == RUN_ERROR) {
        run_error(c, &e);
        if (!oai_error_encode(&b, &e))
            publish_json(c, &b);
    } else {
        publish_chunk(c, OAI_CHUNK_STOP, NULL, 0);
        if (c->include_usage && !oai_usage_chunk_encode(&b, &h, &c->usage))
            publish_json(c, &b);
    }
    rx_buf_release(&b);
    if ((done = sse_frame_event(-1, "[DONE]", 6))) {
        sse_channel_publish(&c->ch, done);
        sse_frame_unref(done);
    }
    sse_channel_close_all(&c->ch);
}

/* The conversation as the client will resend it leads back to this session. */
static void remember(struct oai_chat *c, const struct rx_state *st)
{
    struct oai_memo_entry e = {.fp = c->fp, .n_user = st->user.len, .seq = c->seq};

    memcpy(e.sid, c->sid, sizeof(e.sid));
    if (c->overflow ||
        oai_fp_add(&e.fp, OAI_ROLE_ASSISTANT, c->content.data ? c->content.data : "") ||
        oai_memo_put(c->memo, &e))
        log_warn("chat completion %s: not remembered; its next turn starts a session",
                 c->id);
}

static void on_ended(void *arg, struct run *r, enum run_status status,
                     const struct rx_state *st, enum rx_reason reason, const char *why)
{
    struct oai_chat *c = arg;

    (void)r;
    c->status = status;
    c->reason = reason;
    snprintf(c->why, sizeof(c->why), "%s", why ? why : "the run failed");
    if (c->started && st)
        walk(c, st, true);
    if (status != RUN_ERROR && st)
        remember(c, st);
    if (c->stream)
        close_stream(c);
    __atomic_store_n(&c->ended, true, __ATOMIC_RELEASE);
    if (!c->stream)
        park_finish(&c->park);
    chat_unref(c);
}

static const struct run_ops chat_run_ops = {
    .started = on_started,
    .delta = on_delta,
    .step = on_step,
    .ended = on_ended,
};

static enum MHD_Result chat_answer(struct park *p, struct door *srv,
                                   struct MHD_Connection *conn)
{
    struct oai_chat *c = (struct oai_chat *)((char *)p - offsetof(struct oai_chat, park));
    struct oai_head h = chat_head(c);
    struct oai_error e;
    struct rx_buf b;

    (void)srv;
    if (c->status == RUN_ERROR) {
        run_error(c, &e);
        return oai__reply_error(conn, &e, c->sid);
    }
    rx_buf_init(&b, OAI_CONTENT_MAX + RX_BUF_SMALL_MAX);
    if (oai_completion_encode(&b, &h, c->content.data, c->content.len, &c->usage)) {
        rx_buf_release(&b);
        oai_error_set(&e, 0, 500, "server_error", NULL, NULL, "out of memory");
        return oai__reply_error(conn, &e, c->sid);
    }
    return oai__reply_buf(conn, 200, &b, c->sid);
}

/* The request is over. A client gone before its answer may cancel the run. */
static void chat_release(struct park *p)
{
    struct oai_chat *c = (struct oai_chat *)((char *)p - offsetof(struct oai_chat, park));

    if (!__atomic_load_n(&c->ended, __ATOMIC_ACQUIRE) && c->cfg->oai_cancel_on_disconnect)
        run_cancel(c->run);
    chat_unref(c);
}

static const struct park_ops chat_park_ops = {
    .answer = chat_answer,
    .release = chat_release,
};

static struct oai_chat *chat_create(struct door *srv, struct session *s,
                                    struct oai_memo *memo, const struct oai_request *req,
                                    const struct oai_fp *fp)
{
    struct oai_chat *c = calloc(1, sizeof(*c));
    char uuid[RX_UUID_LEN];
    size_t k = 0;

    if (!c || !(c->model = strdup(req->model))) {
        free(c);
        return NULL;
    }
    c->cfg = srv->cfg;
    c->memo = memo;
    snprintf(c->sid, sizeof(c->sid), "%s", session_id(s));
    idgen_uuid(uuid);
    k = (size_t)snprintf(c->id, sizeof(c->id), "chatcmpl-");
    for (const char *u = uuid; *u && k + 1 < sizeof(c->id); u++)
        if (*u != '-')
            c->id[k++] = *u;
    c->id[k] = '\0';
    c->created = now_wall_ms() / 1000;
    c->stream = req->stream;
    c->include_usage = req->include_usage;
    c->fp = *fp;
    c->status = RUN_PENDING;
    rx_buf_init(&c->content, OAI_CONTENT_MAX);
    return c;
}

/* Why a run could not be queued, in OpenAI's shape. */
static enum MHD_Result start_error(struct MHD_Connection *conn, int err)
{
    struct oai_error e;

    switch (err) {
    case -ENOENT:
        oai_error_set(&e, 0, 404, "invalid_request_error", NULL, "session_not_found",
                      "%s", "the session is gone");
        break;
    case -EBUSY:
        oai_error_set(
            &e, 0, 429, "requests", NULL, "rate_limit_exceeded", "%s",
            "too many requests wait for this session (limits.session_queue_max)");
        break;
    case -ESHUTDOWN:
        oai_error_set(&e, 0, 503, "server_error", NULL, NULL, "%s",
                      "the server is stopping");
        break;
    default:
        oai_error_set(&e, 0, 500, "server_error", NULL, NULL, "%s", "out of memory");
        break;
    }
    return oai__reply_error(conn, &e, NULL);
}

static enum MHD_Result start_streaming(struct door *srv, struct MHD_Connection *conn,
                                       struct oai_chat *c, struct session *s,
                                       struct rx_input *in, size_t n)
{
    size_t qmax = (size_t)srv->cfg->sse_queue_max;
    struct MHD_Response *resp = NULL;
    struct oai_head h = chat_head(c);
    struct sse_frame *first = NULL;
    struct rx_buf b;
    int err = -ENOMEM;

    sse_channel_init(&c->ch, qmax < CHAT_QUEUE_MIN ? CHAT_QUEUE_MIN : qmax);
    sse_channel_set_queue_bytes(&c->ch, srv->cfg->sse_queue_bytes);
    rx_buf_init(&b, RX_BUF_SMALL_MAX);
    if (!oai_chunk_encode(&b, &h, OAI_CHUNK_ROLE, NULL, 0))
        first = sse_frame_event(-1, b.data, b.len);
    rx_buf_release(&b);
    /* Subscribed before the run starts: no frame of it can be missed. */
    if (first)
        resp = sse_channel_subscribe(&c->ch, conn, &first, 1, false);
    if (first)
        sse_frame_unref(first);
    if (resp) {
        c->refs = 2; /* the callbacks', and this call's until run_start returns */
        err = run_start(s, in, n, &chat_run_ops, c, &c->run);
    } else {
        for (size_t i = 0; i < n; i++)
            rx_input_release(&in[i]);
    }
    if (err) {
        if (resp)
            MHD_destroy_response(resp);
        c->refs = 1;
        chat_unref(c);
        return start_error(conn, err);
    }
    MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, 0U);
    MHD_add_response_header(resp, OAI_SESSION_HEADER, c->sid);
    chat_unref(c);
    return reply_stream(conn, resp);
}

enum MHD_Result oai__chat_start(struct door *srv, struct MHD_Connection *conn,
                                struct session *s, struct oai_memo *memo,
                                const struct oai_request *req, const struct oai_fp *fp,
                                struct rx_input *in, size_t n, struct park **slot)
{
    struct oai_chat *c = chat_create(srv, s, memo, req, fp);
    struct oai_error e;
    enum MHD_Result ret;
    int err;

    if (!c) {
        for (size_t i = 0; i < n; i++)
            rx_input_release(&in[i]);
        oai_error_set(&e, 0, 500, "server_error", NULL, NULL, "out of memory");
        return oai__reply_error(conn, &e, NULL);
    }
    if (c->stream)
        return start_streaming(srv, conn, c, s, in, n);
    park_init(&c->park, &chat_park_ops, conn);
    c->refs = 2; /* the callbacks' and the request's */
    park_enter();
    if (door_is_stopping(srv)) {
        for (size_t i = 0; i < n; i++)
            rx_input_release(&in[i]);
        err = -ESHUTDOWN;
    } else {
        err = run_start(s, in, n, &chat_run_ops, c, &c->run);
    }
    if (err) {
        park_leave();
        c->refs = 1;
        chat_unref(c);
        return start_error(conn, err);
    }
    if (park_suspend(&c->park)) {
        *slot = &c->park;
        return MHD_YES;
    }
    /* The run ended already (it never started): answer now. */
    park_leave();
    ret = chat_answer(&c->park, srv, conn);
    chat_unref(c);
    return ret;
}
