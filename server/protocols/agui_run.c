/*
 * agui_run - one AG-UI run: an engine run (server/run) on a thread's
 * session whose progress is sent as AG-UI events on an SSE channel that the
 * request's client follows. See agui.h for the events.
 *
 * What the client was shown is kept so that each thing is shown once: the
 * ids of the LangChain-shaped messages (server/protocols/lg_msg) already
 * drawn, each tool call's start and result, and the text messages and the
 * reasoning still streaming (their START sent, their END not yet). Messages
 * are drawn from the settled state (run steps); tokens from run deltas; a
 * message whose tokens streamed gets what the state holds beyond them, then
 * its END, so the client's copy always equals the state's.
 *
 * Locks: every field the run writes is written in the run's callbacks, with
 * the session's lock held, one after the other.
 * Ownership: struct agui_run is refcounted: one reference for the run's
 * callbacks (dropped in `ended`), one while starting. It holds a run
 * reference, dropped when it is freed.
 */
#include "server/protocols/agui_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "effects/log.h"
#include "server/protocols/lg_msg.h"
#include "server/reply.h"
#include "server/run.h"
#include "server/sse.h"
#include "state_machine/rx_patch.h"

/* Frames a client may have waiting, at least: one per token. */
#define AGUI_QUEUE_MIN 4096

struct agui_run {
    int refs; /* atomic */
    struct run *run;
    struct sse_channel ch;
    char tid[SESSION_ID_MAX + 1];
    char *rid;
    bool posted; /* the run posts a user message */

    /* Written by the run's callbacks. */
    json_t *seen;   /* {message id | "call:<id>" | "result:<id>": true} */
    json_t *open;   /* {message id: bytes of its text sent} of text messages open */
    char *thinking; /* the message whose reasoning is open, or NULL */
    struct rx_buf scratch;
};

static void agui_run_unref(struct agui_run *a)
{
    if (__atomic_sub_fetch(&a->refs, 1, __ATOMIC_ACQ_REL))
        return;
    sse_channel_release(&a->ch);
    if (a->run)
        run_unref(a->run); /* never the last: the lane keeps its own until ended */
    json_decref(a->seen);
    json_decref(a->open);
    free(a->thinking);
    free(a->rid);
    rx_buf_release(&a->scratch);
    free(a);
}

/* ---- events ------------------------------------------------------------------- */

/* One event's bytes as a `data:` frame to the client. */
static void publish(struct agui_run *a, const char *json, size_t len)
{
    struct sse_frame *f = sse_frame_event(-1, json, len);

    if (!f) {
        log_warn("ag-ui run %s: out of memory, an event is lost", a->rid);
        return;
    }
    sse_channel_publish(&a->ch, f);
    sse_frame_unref(f);
}

/* One event (`j` stolen: an object with its "type"). */
static void emit(struct agui_run *a, json_t *j)
{
    char *text = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;

    json_decref(j);
    if (!text) {
        log_warn("ag-ui run %s: out of memory, an event is lost", a->rid);
        return;
    }
    publish(a, text, strlen(text));
    free(text);
}

/* {"type": type, "messageId": id} */
static void emit_id(struct agui_run *a, const char *type, const char *key, const char *id)
{
    emit(a, json_pack("{s:s, s:s}", "type", type, key, id));
}

static void mark(struct agui_run *a, const char *prefix, const char *id)
{
    char key[RX_ID_MAX + 16];

    snprintf(key, sizeof(key), "%s%s", prefix, id);
    json_object_set_new(a->seen, key, json_true());
}

static bool marked(struct agui_run *a, const char *prefix, const char *id)
{
    char key[RX_ID_MAX + 16];

    snprintf(key, sizeof(key), "%s%s", prefix, id);
    return json_object_get(a->seen, key) != NULL;
}

/* The reasoning streaming now ends (before its answer's text, or at the end). */
static void close_thinking(struct agui_run *a)
{
    char id[RX_ID_MAX + 16];

    if (!a->thinking)
        return;
    snprintf(id, sizeof(id), "reasoning-%s", a->thinking);
    emit_id(a, "REASONING_MESSAGE_END", "messageId", id);
    emit_id(a, "REASONING_END", "messageId", id);
    free(a->thinking);
    a->thinking = NULL;
}

static void open_text(struct agui_run *a, const char *mid)
{
    emit(a, json_pack("{s:s, s:s, s:s}", "type", "TEXT_MESSAGE_START", "messageId", mid,
                      "role", "assistant"));
    json_object_set_new(a->open, mid, json_integer(0));
}

static void text_content(struct agui_run *a, const char *mid, const char *text,
                         size_t len)
{
    json_t *sent = json_object_get(a->open, mid);

    if (!len)
        return; /* AG-UI refuses an empty delta */
    emit(a, json_pack("{s:s, s:s, s:s%}", "type", "TEXT_MESSAGE_CONTENT", "messageId",
                      mid, "delta", text, len));
    if (sent)
        json_integer_set(sent, json_integer_value(sent) + (json_int_t)len);
}

/* ---- LangChain messages as AG-UI ---------------------------------------------- */

static const char *str(json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));

    return s ? s : "";
}

/* NEW: one tool call {"id","type":"function","function":{"name","arguments"}}. */
static json_t *tool_call_json(json_t *c)
{
    char *args = json_dumps(json_object_get(c, "args"), JSON_COMPACT | JSON_ENCODE_ANY);
    json_t *j =
        json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", str(c, "id"), "type", "function",
                  "function", "name", str(c, "name"), "arguments", args ? args : "{}");

    free(args);
    return j;
}

/* NEW: a LangChain message (lg_msg) as an AG-UI message. */
static json_t *message_json(json_t *m)
{
    const char *type = str(m, "type");
    json_t *calls, *c, *j;
    size_t i;

    if (!strcmp(type, "human"))
        return json_pack("{s:s, s:s, s:O}", "id", str(m, "id"), "role", "user", "content",
                         json_object_get(m, "content"));
    if (!strcmp(type, "tool"))
        return json_pack("{s:s, s:s, s:s, s:s}", "id", str(m, "id"), "role", "tool",
                         "content", str(m, "content"), "toolCallId",
                         str(m, "tool_call_id"));
    j = json_pack("{s:s, s:s, s:s}", "id", str(m, "id"), "role", "assistant", "content",
                  str(m, "content"));
    calls = json_object_get(m, "tool_calls");
    if (j && json_array_size(calls)) {
        json_t *out = json_array();

        json_object_set_new(j, "toolCalls", out);
        json_array_foreach(calls, i, c) json_array_append_new(out, tool_call_json(c));
    }
    return j;
}

/* NEW: the messages of `st` as AG-UI messages. */
static json_t *messages_json(json_t *lc)
{
    json_t *out = json_array(), *m;
    size_t i;

    json_array_foreach(lc, i, m)
    {
        if (out && json_array_append_new(out, message_json(m))) {
            json_decref(out);
            return NULL;
        }
    }
    return out;
}

/* Everything in `lc` counts as shown (the snapshot carried it). */
static void mark_all(struct agui_run *a, json_t *lc)
{
    json_t *m, *c;
    size_t i, k;

    json_array_foreach(lc, i, m)
    {
        mark(a, "", str(m, "id"));
        json_array_foreach(json_object_get(m, "tool_calls"), k, c)
            mark(a, "call:", str(c, "id"));
        if (!strcmp(str(m, "type"), "tool"))
            mark(a, "result:", str(m, "tool_call_id"));
    }
}

/* An assistant message settled: the rest of its text and its END, or all of it. */
static void draw_answer(struct agui_run *a, json_t *m)
{
    const char *id = str(m, "id"), *text = str(m, "content");
    json_t *sent = json_object_get(a->open, id);
    size_t len = strlen(text), from = 0;

    if (a->thinking && !strcmp(a->thinking, id))
        close_thinking(a);
    if (!sent && !len)
        return;
    if (sent) {
        from = (size_t)json_integer_value(sent);
        if (from > len)
            from = len; /* a stopped answer keeps less than was streamed */
        while (from < len && ((unsigned char)text[from] & 0xc0) == 0x80)
            from++; /* never start inside a UTF-8 character */
    } else {
        open_text(a, id);
    }
    text_content(a, id, text + from, len - from);
    emit_id(a, "TEXT_MESSAGE_END", "messageId", id);
    json_object_del(a->open, id);
}

static void draw_calls(struct agui_run *a, json_t *m)
{
    json_t *c;
    size_t i;

    json_array_foreach(json_object_get(m, "tool_calls"), i, c)
    {
        const char *cid = str(c, "id");
        json_t *call;

        if (marked(a, "call:", cid))
            continue;
        mark(a, "call:", cid);
        call = tool_call_json(c);
        emit(a, json_pack("{s:s, s:s, s:s, s:s}", "type", "TOOL_CALL_START", "toolCallId",
                          cid, "toolCallName", str(c, "name"), "parentMessageId",
                          str(m, "id")));
        emit(a,
             json_pack("{s:s, s:s, s:O}", "type", "TOOL_CALL_ARGS", "toolCallId", cid,
                       "delta",
                       json_object_get(json_object_get(call, "function"), "arguments")));
        emit_id(a, "TOOL_CALL_END", "toolCallId", cid);
        json_decref(call);
    }
}

/* What `st` holds that the client was not shown yet. */
static void draw(struct agui_run *a, const struct rx_state *st)
{
    json_t *lc = lg_msg_messages(st), *m;
    size_t i;

    if (!lc) {
        log_warn("ag-ui run %s: out of memory, a step is not shown", a->rid);
        return;
    }
    json_array_foreach(lc, i, m)
    {
        const char *type = str(m, "type"), *id = str(m, "id");

        if (!strcmp(type, "tool")) {
            const char *cid = str(m, "tool_call_id");

            if (marked(a, "result:", cid))
                continue;
            mark(a, "result:", cid);
            emit(a, json_pack("{s:s, s:s, s:s, s:s, s:s}", "type", "TOOL_CALL_RESULT",
                              "messageId", id, "toolCallId", cid, "content",
                              str(m, "content"), "role", "tool"));
            continue;
        }
        if (!strcmp(type, "ai")) {
            if (!marked(a, "", id))
                draw_answer(a, m);
            draw_calls(a, m);
        }
        /* A user message posted meanwhile by another door is not this run's. */
        mark(a, "", id);
    }
    json_decref(lc);
}

/* STATE_SNAPSHOT: the state as SPEC 3.1 has it (GET .../sessions/<id>). */
static void emit_state(struct agui_run *a, const struct rx_state *st)
{
    struct rx_buf *b = &a->scratch;

    rx_buf_reset(b);
    if (rx_buf_puts(b, "{\"type\":\"STATE_SNAPSHOT\",\"snapshot\":") ||
        rx_state_encode(st, b) || rx_buf_putc(b, '}'))
        log_warn("ag-ui run %s: the state is not shown (out of memory or too large)",
                 a->rid);
    else
        publish(a, b->data, b->len);
}

/* ---- the engine's callbacks (session's lock held) ----------------------------- */

static void on_started(void *arg, struct run *r, const struct rx_state *st, int64_t seq)
{
    struct agui_run *a = arg;
    json_t *lc = lg_msg_messages(st);

    (void)r;
    (void)seq;
    /* A thread with history: the joining client gets it whole. */
    if (lc && json_array_size(lc) > (a->posted ? 1u : 0u))
        emit(a, json_pack("{s:s, s:o}", "type", "MESSAGES_SNAPSHOT", "messages",
                          messages_json(lc)));
    if (lc)
        mark_all(a, lc);
    json_decref(lc);
    emit_state(a, st);
}

static void on_patch(void *arg, struct run *r, const struct rx_state *st,
                     const struct rx_outcome *o, int64_t seq)
{
    struct agui_run *a = arg;
    struct rx_buf *b = &a->scratch;
    size_t at;

    (void)r;
    (void)seq;
    rx_buf_reset(b);
    if (rx_buf_puts(b, "{\"type\":\"STATE_DELTA\",\"delta\":")) {
        emit_state(a, st);
        return;
    }
    at = b->len;
    if (rx_patch_encode(st, o, b) || rx_buf_putc(b, '}')) {
        /* The client's copy would drift: a snapshot puts it right. */
        emit_state(a, st);
        return;
    }
    if (b->len - at > 3) /* not "[]}": an input that changed nothing shows nothing */
        publish(a, b->data, b->len);
}

static void on_delta(void *arg, struct run *r, const char *mid, const char *delta,
                     bool reasoning)
{
    struct agui_run *a = arg;
    char id[RX_ID_MAX + 16];

    (void)r;
    if (!*delta || marked(a, "", mid))
        return;
    if (reasoning) {
        snprintf(id, sizeof(id), "reasoning-%s", mid);
        if (!a->thinking || strcmp(a->thinking, mid)) {
            close_thinking(a);
            if (!(a->thinking = strdup(mid)))
                return;
            emit_id(a, "REASONING_START", "messageId", id);
            emit(a, json_pack("{s:s, s:s, s:s}", "type", "REASONING_MESSAGE_START",
                              "messageId", id, "role", "reasoning"));
        }
        emit(a, json_pack("{s:s, s:s, s:s}", "type", "REASONING_MESSAGE_CONTENT",
                          "messageId", id, "delta", delta));
        return;
    }
    if (a->thinking && !strcmp(a->thinking, mid))
        close_thinking(a);
    if (!json_object_get(a->open, mid))
        open_text(a, mid);
    text_content(a, mid, delta, strlen(delta));
}

static void on_step(void *arg, struct run *r, const struct rx_state *st, int64_t seq)
{
    (void)r;
    (void)seq;
    draw(arg, st);
}

/* The last events: what is still open is closed, then the outcome. */
static void finish(struct agui_run *a, enum run_status status, const struct rx_state *st,
                   enum rx_reason reason, const char *why)
{
    const char *k;
    json_t *v, *outcome;
    void *tmp;

    close_thinking(a);
    json_object_foreach_safe(a->open, tmp, k, v)
    {
        emit_id(a, "TEXT_MESSAGE_END", "messageId", k);
        json_object_del(a->open, k);
    }
    if (status == RUN_ERROR) {
        char msg[RX_ERR_LEN];

        if (reason != RX_REASON_NONE)
            snprintf(msg, sizeof(msg), "%s (%s)", why ? why : "an input was refused",
                     rx_reason_name(reason));
        else
            snprintf(msg, sizeof(msg), "%s", why ? why : "the run failed");
        emit(a,
             json_pack("{s:s, s:s, s:s}", "type", "RUN_ERROR", "message", msg, "code",
                       reason != RX_REASON_NONE ? rx_reason_name(reason) : "run_error"));
        return;
    }
    if (st && rx_state_awaiting_approval(st))
        outcome = json_pack("{s:s, s:o}", "type", "interrupt", "interrupts",
                            agui__interrupts(st));
    else
        outcome = json_pack("{s:s}", "type",
                            status == RUN_INTERRUPTED ? "cancelled" : "success");
    emit(a, json_pack("{s:s, s:s, s:s, s:o}", "type", "RUN_FINISHED", "threadId", a->tid,
                      "runId", a->rid, "outcome", outcome));
}

static void on_ended(void *arg, struct run *r, enum run_status status,
                     const struct rx_state *st, enum rx_reason reason, const char *why)
{
    struct agui_run *a = arg;

    (void)r;
    if (st)
        draw(a, st);
    finish(a, status, st, reason, why);
    sse_channel_close_all(&a->ch);
    agui_run_unref(a);
}

static const struct run_ops agui_run_ops = {
    .started = on_started,
    .delta = on_delta,
    .step = on_step,
    .ended = on_ended,
    .patch = on_patch,
};

/* ---- starting ------------------------------------------------------------------ */

static struct agui_run *agui_run_create(struct door *srv, struct session *s,
                                        const char *rid, bool posted)
{
    struct agui_run *a = calloc(1, sizeof(*a));
    size_t qmax = (size_t)srv->cfg->sse_queue_max;

    if (!a)
        return NULL;
    a->refs = 1;
    snprintf(a->tid, sizeof(a->tid), "%s", session_id(s));
    a->rid = strdup(rid);
    a->posted = posted;
    a->seen = json_object();
    a->open = json_object();
    rx_buf_init(&a->scratch, RX_BUF_STATE_MAX);
    sse_channel_init(&a->ch, qmax < AGUI_QUEUE_MIN ? AGUI_QUEUE_MIN : qmax);
    sse_channel_set_queue_bytes(&a->ch, srv->cfg->sse_queue_bytes);
    if (!a->rid || !a->seen || !a->open) {
        agui_run_unref(a);
        return NULL;
    }
    return a;
}

/* Why a run could not be queued. */
static enum MHD_Result start_error(struct MHD_Connection *conn, int err)
{
    switch (err) {
    case -ENOENT:
        return agui__error(conn, 404, "not_found", "the thread was deleted");
    case -EBUSY:
        return agui__error(
            conn, 429, "too_many",
            "too many runs wait for this thread (limits.session_queue_max)");
    default:
        return agui__error(conn, 500, "internal", "out of memory");
    }
}

enum MHD_Result agui__run(struct door *srv, struct MHD_Connection *conn,
                          struct session *s, const char *rid, struct rx_input *in,
                          size_t n, bool posted)
{
    struct agui_run *a = agui_run_create(srv, s, rid, posted);
    struct MHD_Response *resp = NULL;
    struct sse_frame *first = NULL;
    json_t *j = NULL;
    char *text = NULL;
    int err = -ENOMEM;

    if (a &&
        (j = json_pack("{s:s, s:s, s:s}", "type", "RUN_STARTED", "threadId", a->tid,
                       "runId", rid)) &&
        (text = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER)))
        first = sse_frame_event(-1, text, strlen(text));
    json_decref(j);
    free(text);
    /* Subscribed before the run starts: no event of it can be missed. */
    if (first)
        resp = sse_channel_subscribe(&a->ch, conn, &first, 1, false);
    if (first)
        sse_frame_unref(first);
    if (resp) {
        __atomic_add_fetch(&a->refs, 1, __ATOMIC_RELAXED); /* the callbacks' */
        err = run_start(s, in, n, &agui_run_ops, a, &a->run);
        if (err)
            __atomic_sub_fetch(&a->refs, 1, __ATOMIC_RELAXED);
        in = NULL;
    }
    for (size_t i = 0; in && i < n; i++)
        rx_input_release(&in[i]);
    if (err) {
        if (resp)
            MHD_destroy_response(resp);
        if (a)
            agui_run_unref(a);
        return start_error(conn, err);
    }
    /* A run outlives its client: nothing cancels it when the stream closes. */
    MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, 0U);
    agui_run_unref(a);
    return agui__queue(conn, 200, resp);
}
