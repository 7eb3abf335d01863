/*
 * lg_run - a LangGraph run's record and the engine's callbacks that turn
 * the session's progress into its events. See lg_run.h; the registry is
 * lg_run_table.c, streams and waiters lg_run_wait.c.
 */
#include "server/protocols/lg_run_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/idgen.h"
#include "effects/log.h"
#include "base/now.h"
#include "server/protocols/lg_msg.h"
#include "state_machine/rx_json.h"

const char *const lg_run__mt_names[] = {"reject", "enqueue", "interrupt", "rollback"};

int lg_multitask_parse(const char *s, enum lg_multitask *out)
{
    for (size_t i = 0; i < sizeof(lg_run__mt_names) / sizeof(*lg_run__mt_names); i++)
        if (s && !strcmp(s, lg_run__mt_names[i])) {
            *out = (enum lg_multitask)i;
            return 0;
        }
    return -EINVAL;
}

void lg_run_ref(struct lg_run *lr)
{
    __atomic_add_fetch(&lr->refs, 1, __ATOMIC_RELAXED);
}

void lg_run_unref(struct lg_run *lr)
{
    if (!lr || __atomic_sub_fetch(&lr->refs, 1, __ATOMIC_ACQ_REL))
        return;
    lg_frames_release(&lr->frames);
    sse_channel_release(&lr->ch);
    if (lr->run)
        run_unref(lr->run);
    free(lr->metadata);
    free(lr->kwargs);
    json_decref(lr->last);
    json_decref(lr->streamed);
    json_decref(lr->emitted);
    json_decref(lr->final);
    pthread_mutex_destroy(&lr->lock);
    free(lr);
}

const char *lg_run_id(const struct lg_run *lr)
{
    return lr->id;
}

bool lg_run_is_over(const struct lg_run *lr)
{
    return __atomic_load_n(&lr->over, __ATOMIC_ACQUIRE);
}

/* NEW: a kept text read back ({} when it is gone or cannot be read). */
static json_t *text_json(const char *text)
{
    json_t *j = NULL;

    if (text && rx_json_parse(text, strlen(text), 0, &j, NULL))
        j = NULL;
    return j ? j : json_object();
}

json_t *lg_run__json_locked(struct lg_run *lr)
{
    char created[LG_ISO_LEN], updated[LG_ISO_LEN];

    lg_msg_iso(lr->created_at, created);
    lg_msg_iso(lr->updated_at, updated);
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:o, s:s, s:o}", "run_id", lr->id,
                     "thread_id", lr->tid, "assistant_id", LG_ASSISTANT_ID, "created_at",
                     created, "updated_at", updated, "status",
                     run_status_name(lr->status), "metadata", text_json(lr->metadata),
                     "multitask_strategy", lg_run__mt_names[lr->mt], "kwargs",
                     text_json(lr->kwargs));
}

json_t *lg_run_json(struct lg_run *lr)
{
    json_t *j;

    pthread_mutex_lock(&lr->lock);
    j = lg_run__json_locked(lr);
    pthread_mutex_unlock(&lr->lock);
    return j;
}

/* One event, kept and published (record's lock held). */
static void emit(struct lg_run *lr, const char *event, const char *data, size_t len)
{
    struct sse_frame *f;

    if (lg_frames_add(&lr->frames, event, data, len, &f)) {
        log_warn("run %s: out of memory, a '%s' event is lost", lr->id, event);
        return;
    }
    sse_channel_publish(&lr->ch, f);
}

void lg_run__emit_json(struct lg_run *lr, const char *event, json_t *j)
{
    char *text = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;

    json_decref(j);
    if (!text) {
        log_warn("run %s: out of memory, a '%s' event is lost", lr->id, event);
        return;
    }
    emit(lr, event, text, strlen(text));
    free(text);
}

struct lg_run *lg_run__alloc(const struct config *cfg, const char *tid, char *metadata,
                             char *kwargs)
{
    struct lg_run *lr = calloc(1, sizeof(*lr));

    if (!lr || strlen(tid) > SESSION_ID_MAX || !metadata || !kwargs) {
        free(metadata);
        free(kwargs);
        free(lr);
        return NULL;
    }
    lr->metadata = metadata;
    lr->kwargs = kwargs;
    lr->cfg = cfg;
    lr->refs = 1;
    pthread_mutex_init(&lr->lock, NULL);
    strcpy(lr->tid, tid);
    lr->status = RUN_PENDING;
    lg_frames_init(&lr->frames, LG_FRAMES_BYTES);
    sse_channel_init(&lr->ch, (size_t)cfg->sse_queue_max);
    sse_channel_set_queue_bytes(&lr->ch,
                                __atomic_load_n(&cfg->sse_queue_bytes, __ATOMIC_RELAXED));
    return lr;
}

struct lg_run *lg_run_create(const struct config *cfg, const char *tid, unsigned modes,
                             enum lg_multitask mt, json_t *metadata, json_t *kwargs)
{
    int flags = JSON_COMPACT | JSON_PRESERVE_ORDER;
    struct lg_run *lr =
        lg_run__alloc(cfg, tid, metadata && kwargs ? json_dumps(metadata, flags) : NULL,
                      metadata && kwargs ? json_dumps(kwargs, flags) : NULL);

    json_decref(metadata);
    json_decref(kwargs);
    if (!lr)
        return NULL;
    idgen_uuid(lr->id);
    lr->created_at = lr->updated_at = now_wall_ms();
    lr->modes = modes;
    lr->mt = mt;
    lr->streamed = json_object();
    lr->emitted = json_object();
    if (!lr->streamed || !lr->emitted) {
        lg_run_unref(lr);
        return NULL;
    }
    /* Nobody follows it yet: no lock needed for the first event. */
    lg_run__emit_json(lr, "metadata",
                      json_pack("{s:s, s:i}", "run_id", lr->id, "attempt", 1));
    lg_run__add(lr);
    return lr;
}

/* ---- the engine's callbacks (session's lock held) ----------------------------- */

/* messages-tuple metadata: {"run_id",...,"langgraph_node","langgraph_step"}. */
static int meta_encode(struct lg_run *lr, struct rx_buf *b, const char *node)
{
    return rx_buf_puts(b, "{\"run_id\":\"") || rx_buf_puts(b, lr->id) ||
                   rx_buf_puts(b, "\",\"thread_id\":") ||
                   rx_buf_put_json_str(b, lr->tid) ||
                   rx_buf_printf(
                       b,
                       ",\"assistant_id\":\"%s\",\"graph_id\":\"%s\",\"langgraph_node\":"
                       "\"%s\",\"langgraph_step\":%lld}",
                       LG_ASSISTANT_ID, LG_GRAPH_ID, node, (long long)lr->step)
               ? -ENOMEM
               : 0;
}

/* A settled message sent whole on messages-tuple: [message, metadata]. */
static void emit_whole(struct lg_run *lr, json_t *m, const char *node)
{
    char *text = json_dumps(m, JSON_COMPACT | JSON_PRESERVE_ORDER);
    struct rx_buf b;

    rx_buf_init(&b, RX_BUF_STATE_MAX);
    if (!text || rx_buf_putc(&b, '[') || rx_buf_puts(&b, text) || rx_buf_putc(&b, ',') ||
        meta_encode(lr, &b, node) || rx_buf_putc(&b, ']'))
        log_warn("run %s: out of memory, a 'messages' event is lost", lr->id);
    else
        emit(lr, "messages", b.data, b.len);
    rx_buf_release(&b);
    free(text);
}

static void on_delta(void *arg, struct run *r, const char *mid, const char *delta,
                     bool reasoning)
{
    struct lg_run *lr = arg;
    struct rx_buf b;

    (void)r;
    if (!(lr->modes & LG_MODE_MESSAGES))
        return;
    pthread_mutex_lock(&lr->lock);
    json_object_set_new(lr->streamed, mid, json_true());
    rx_buf_init(&b, RX_BUF_STATE_MAX);
    if (rx_buf_putc(&b, '[') || lg_msg_chunk_encode(&b, mid, delta, reasoning) ||
        rx_buf_putc(&b, ',') || meta_encode(lr, &b, "model") || rx_buf_putc(&b, ']'))
        log_warn("run %s: out of memory, a token delta is lost", lr->id);
    else
        emit(lr, "messages", b.data, b.len);
    rx_buf_release(&b);
    pthread_mutex_unlock(&lr->lock);
}

/* custom: a tool call's progress, when its batch or its result appears. */
static void emit_tool_progress(struct lg_run *lr, const struct rx_state *st, json_t *m)
{
    const char *type = json_string_value(json_object_get(m, "type"));
    size_t i;
    json_t *c;

    if (!strcmp(type, "tool")) {
        lg_run__emit_json(lr, "custom",
                          json_pack("{s:s, s:O, s:O, s:O}", "type", "tool_call", "id",
                                    json_object_get(m, "tool_call_id"), "name",
                                    json_object_get(m, "name"), "status",
                                    json_object_get(m, "status")));
        return;
    }
    json_array_foreach(json_object_get(m, "tool_calls"), i, c)
    {
        const struct rx_tool_call *rec =
            rx_state_find_tool(st, json_string_value(json_object_get(c, "id")));
        bool asks = rec && rx_tool_call_is_awaiting(rec);

        lg_run__emit_json(lr, "custom",
                          json_pack("{s:s, s:O, s:O, s:s}", "type", "tool_call", "id",
                                    json_object_get(c, "id"), "name",
                                    json_object_get(c, "name"), "status",
                                    asks ? "awaiting_approval" : "pending"));
    }
}

/* What changed since the last step: messages-tuple, custom and updates events. */
static void emit_changes(struct lg_run *lr, const struct rx_state *st, json_t *msgs)
{
    json_t *before = json_object(), *model = json_array(), *tools = json_array(), *m;
    size_t i;

    if (!before || !model || !tools)
        goto out;
    json_array_foreach(lr->last, i, m)
    {
        json_object_set(before, json_string_value(json_object_get(m, "id")), m);
    }
    json_array_foreach(msgs, i, m)
    {
        const char *id = json_string_value(json_object_get(m, "id"));
        const char *type = json_string_value(json_object_get(m, "type"));
        json_t *old = json_object_get(before, id);
        bool ai = !strcmp(type, "ai");

        if (!strcmp(type, "human") || (old && json_equal(old, m)))
            continue;
        json_array_append(ai ? model : tools, m);
        if ((lr->modes & LG_MODE_MESSAGES) && !json_object_get(lr->streamed, id) &&
            !json_object_get(lr->emitted, id)) {
            json_object_set_new(lr->emitted, id, json_true());
            emit_whole(lr, m, ai ? "model" : "tools");
        }
        if ((lr->modes & LG_MODE_CUSTOM) && !old)
            emit_tool_progress(lr, st, m);
    }
    if ((lr->modes & LG_MODE_UPDATES) && json_array_size(model))
        lg_run__emit_json(lr, "updates",
                          json_pack("{s:{s:O}}", "model", "messages", model));
    if ((lr->modes & LG_MODE_UPDATES) && json_array_size(tools))
        lg_run__emit_json(lr, "updates",
                          json_pack("{s:{s:O}}", "tools", "messages", tools));
out:
    json_decref(before);
    json_decref(model);
    json_decref(tools);
}

/*
 * The session settled (record's lock held): events for what changed, then
 * the values. `final`: the run is over; a pending interrupt is shown.
 */
static void settle(struct lg_run *lr, const struct rx_state *st, bool final)
{
    json_t *msgs = lg_msg_messages(st), *interrupts = NULL;

    if (!msgs) {
        log_warn("run %s: out of memory, a step is not shown", lr->id);
        return;
    }
    lr->step++;
    if (final && rx_state_awaiting_approval(st))
        interrupts = lg_msg_interrupts(st);
    if (lr->last && json_equal(lr->last, msgs) && !interrupts) {
        json_decref(msgs);
        return;
    }
    if (lr->last)
        emit_changes(lr, st, msgs);
    if (interrupts && (lr->modes & LG_MODE_UPDATES))
        lg_run__emit_json(lr, "updates", json_pack("{s:O}", "__interrupt__", interrupts));
    if (lr->modes & LG_MODE_VALUES) {
        json_t *v = json_pack("{s:O}", "messages", msgs);

        if (v && interrupts)
            json_object_set(v, "__interrupt__", interrupts);
        lg_run__emit_json(lr, "values", v);
    }
    json_decref(interrupts);
    json_decref(lr->last);
    lr->last = msgs;
}

static void on_started(void *arg, struct run *r, const struct rx_state *st, int64_t seq)
{
    struct lg_run *lr = arg;

    (void)r;
    (void)seq;
    pthread_mutex_lock(&lr->lock);
    lr->status = RUN_RUNNING;
    lr->updated_at = now_wall_ms();
    settle(lr, st, false);
    pthread_mutex_unlock(&lr->lock);
}

static void on_step(void *arg, struct run *r, const struct rx_state *st, int64_t seq)
{
    struct lg_run *lr = arg;

    (void)r;
    (void)seq;
    pthread_mutex_lock(&lr->lock);
    settle(lr, st, false);
    pthread_mutex_unlock(&lr->lock);
}

static void on_ended(void *arg, struct run *r, enum run_status status,
                     const struct rx_state *st, enum rx_reason reason, const char *why)
{
    struct lg_run *lr = arg;
    bool never_started;

    (void)r;
    pthread_mutex_lock(&lr->lock);
    /* A run cancelled before it started shows nothing of its own: its waiters
       read the thread's values when they answer (lg_run_wait.c), so ending
       thousands of queued runs costs nothing per run under the lock. */
    never_started = lr->status == RUN_PENDING;
    if (st && !never_started)
        settle(lr, st, true);
    if (status == RUN_ERROR) {
        const char *kind = reason != RX_REASON_NONE ? "InvalidInput" : "RunError";
        char msg[RX_ERR_LEN];

        if (reason != RX_REASON_NONE)
            snprintf(msg, sizeof(msg), "%s (%s)", why ? why : "an input was refused",
                     rx_reason_name(reason));
        else
            snprintf(msg, sizeof(msg), "%s", why ? why : "the run failed");
        lg_run__emit_json(lr, "error",
                          json_pack("{s:s, s:s}", "error", kind, "message", msg));
        lr->final =
            json_pack("{s:{s:s, s:s}}", "__error__", "error", kind, "message", msg);
    } else if (never_started) {
        lr->final = NULL;
    } else {
        /* The last step's messages are the final ones (settle just ran). */
        json_t *msgs = lr->last ? json_incref(lr->last)
                       : st     ? lg_msg_messages(st)
                                : json_array();

        lr->final = json_pack("{s:o}", "messages", msgs);
        if (lr->final && st && rx_state_awaiting_approval(st))
            json_object_set_new(lr->final, "__interrupt__", lg_msg_interrupts(st));
    }
    lr->status = status;
    lr->updated_at = now_wall_ms();
    __atomic_store_n(&lr->over, true, __ATOMIC_RELEASE);
    sse_channel_close_all(&lr->ch);
    lg_run__finish_waiters(lr);
    /* Only joins need the rest, and they replay frames. */
    json_decref(lr->last);
    json_decref(lr->streamed);
    json_decref(lr->emitted);
    lr->last = lr->streamed = lr->emitted = NULL;
    lr->bytes = strlen(lr->metadata) + strlen(lr->kwargs) + lr->frames.bytes +
                (lr->final ? json_dumpb(lr->final, NULL, 0, JSON_COMPACT) : 0);
    pthread_mutex_unlock(&lr->lock);
    lg_run__persist(lr);
    lg_run__ended(lr);
    lg_run_unref(lr); /* the engine's */
}

static const struct run_ops lg_ops = {
    .started = on_started,
    .delta = on_delta,
    .step = on_step,
    .ended = on_ended,
};

int lg_run_start(struct lg_run *lr, struct session *s, struct rx_input *in, size_t n)
{
    struct run *r;
    int err;

    lg_run_ref(lr); /* the engine's, until `ended` */
    err = run_start(s, in, n, &lg_ops, lr, &r);
    if (err) {
        lg_run_unref(lr);
        lg_run__remove(lr);
        return err;
    }
    pthread_mutex_lock(&lr->lock);
    lr->run = r;
    pthread_mutex_unlock(&lr->lock);
    return 0;
}

void lg_run_cancel(struct lg_run *lr)
{
    struct run *r;

    pthread_mutex_lock(&lr->lock);
    r = lr->run;
    if (r)
        run_ref(r);
    pthread_mutex_unlock(&lr->lock);
    if (r) {
        run_cancel(r);
        run_unref(r);
    }
}
