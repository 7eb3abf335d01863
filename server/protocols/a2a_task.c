/*
 * a2a_task - A2A tasks: the registry, the engine's callbacks that turn a
 * run's progress into stream events (a status update when it works, the
 * answer's text as artifact chunks, the whole answer and the final status
 * at its end), the requests that wait for its end, and the task's durable
 * record. See a2a_internal.h.
 */
#include "server/protocols/a2a_task_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/idgen.h"
#include "base/now.h"
#include "effects/log.h"
#include "server/records.h"
#include "server/reply.h"
#include "server/run.h"
#include "server/sse.h"
#include "state_machine/rx_json.h"
#include "store/store.h"

/* One SSE response following the task: its request's id and version. */

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct a2a_task *reg_head;
static size_t reg_len;

void a2a_task__ref(struct a2a_task *t)
{
    __atomic_add_fetch(&t->refs, 1, __ATOMIC_RELAXED);
}

void a2a_task_unref(struct a2a_task *t)
{
    struct a2a_stream *s, *next;

    if (!t || __atomic_sub_fetch(&t->refs, 1, __ATOMIC_ACQ_REL))
        return;
    for (s = t->streams; s; s = next) {
        next = s->next;
        sse_channel_release(&s->ch);
        free(s->rpc_id);
        free(s);
    }
    json_decref(t->view);
    free(t->why);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

const char *a2a_task_context(const struct a2a_task *t)
{
    return t->ctx;
}

const char *a2a_task_umid(const struct a2a_task *t)
{
    return t->umid;
}

bool a2a_task_busy(struct a2a_task *t)
{
    bool b;

    pthread_mutex_lock(&t->lock);
    b = t->busy;
    pthread_mutex_unlock(&t->lock);
    return b;
}

enum a2a_state a2a_task_state(struct a2a_task *t)
{
    enum a2a_state s;

    pthread_mutex_lock(&t->lock);
    s = t->state;
    pthread_mutex_unlock(&t->lock);
    return s;
}

/* ---- the registry ------------------------------------------------------------- */

static void reg_unlink_locked(struct a2a_task *t)
{
    if (t->prev)
        t->prev->next = t->next;
    else
        reg_head = t->next;
    if (t->next)
        t->next->prev = t->prev;
    t->prev = t->next = NULL;
    t->listed = false;
    reg_len--;
}

/*
 * Register `t` (the registry takes a reference); past A2A_TASKS_MAX the
 * oldest idle one leaves (its record stays in the store). Its reference
 * is returned to drop outside the lock.
 */
static struct a2a_task *reg_add(struct a2a_task *t)
{
    struct a2a_task *old = NULL, *o;

    a2a_task__ref(t);
    pthread_mutex_lock(&reg_lock);
    t->next = reg_head;
    if (reg_head)
        reg_head->prev = t;
    reg_head = t;
    t->listed = true;
    reg_len++;
    if (reg_len > A2A_TASKS_MAX) {
        for (o = reg_head; o && o->next; o = o->next)
            ;
        for (; o && !old; o = o->prev)
            if (o != t && !__atomic_load_n(&o->busy, __ATOMIC_ACQUIRE))
                old = o;
        if (old)
            reg_unlink_locked(old);
    }
    pthread_mutex_unlock(&reg_lock);
    return old;
}

static struct a2a_task *reg_find(const char *id)
{
    struct a2a_task *t;

    pthread_mutex_lock(&reg_lock);
    for (t = reg_head; t && strcmp(t->id, id); t = t->next)
        ;
    if (t)
        a2a_task__ref(t);
    pthread_mutex_unlock(&reg_lock);
    return t;
}

void a2a_task_shutdown(void)
{
    struct a2a_task *t;

    for (;;) {
        pthread_mutex_lock(&reg_lock);
        if ((t = reg_head))
            reg_unlink_locked(t);
        pthread_mutex_unlock(&reg_lock);
        if (!t)
            return;
        a2a_task_unref(t);
    }
}

/* ---- the durable record ------------------------------------------------------- */

/* The task's record for the store (task's lock held); nothing without one. */
static void persist_locked(struct a2a_task *t)
{
    json_t *j;
    char *text;
    int err = -ENOMEM;

    if (!records_store())
        return;
    j = json_pack("{s:s, s:s, s:s, s:s, s:I, s:I}", "id", t->id, "contextId", t->ctx,
                  "umid", t->umid, "state", a2a_state_name(t->state, false), "createdAt",
                  (json_int_t)t->created_ms, "updatedAt", (json_int_t)t->updated_ms);
    if (j && t->why)
        json_object_set_new(j, "why", json_string(t->why));
    text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    if (text)
        err = records_put_later(A2A_TASK_KIND, t->id, t->ctx, text, strlen(text));
    if (err)
        log_warn("task %s: its record is not stored (%s)", t->id, strerror(-err));
    free(text);
    json_decref(j);
}

static struct a2a_task *task_alloc(const struct config *cfg, const char *id,
                                   const char *ctx, const char *umid)
{
    struct a2a_task *t;

    if (strlen(ctx) > SESSION_ID_MAX || strlen(umid) > RX_ID_MAX ||
        strlen(id) >= RX_UUID_LEN || !(t = calloc(1, sizeof(*t))))
        return NULL;
    t->refs = 1;
    pthread_mutex_init(&t->lock, NULL);
    strcpy(t->id, id);
    strcpy(t->ctx, ctx);
    strcpy(t->umid, umid);
    t->cfg = cfg;
    return t;
}

/* A stored task, revived idle: its view comes from the session when asked. */
static struct a2a_task *load(const struct config *cfg, const char *id)
{
    struct store *st = records_store();
    struct a2a_task *t = NULL;
    struct store_record r;
    json_t *j = NULL;

    if (!st || store_record_get(st, A2A_TASK_KIND, id, &r))
        return NULL;
    if (!rx_json_parse(r.text, r.len, 0, &j, NULL) &&
        json_is_string(json_object_get(j, "contextId")) &&
        json_is_string(json_object_get(j, "umid")) &&
        (t = task_alloc(cfg, id, json_string_value(json_object_get(j, "contextId")),
                        json_string_value(json_object_get(j, "umid"))))) {
        const char *why = json_string_value(json_object_get(j, "why"));

        t->state = a2a_state_parse(json_string_value(json_object_get(j, "state")));
        /* Stored while a run was in flight: that run is gone with its node. */
        if (t->state == A2A_SUBMITTED || t->state == A2A_WORKING)
            t->state = A2A_WORKING;
        t->why = why ? strdup(why) : NULL;
        t->created_ms = json_integer_value(json_object_get(j, "createdAt"));
        t->updated_ms = json_integer_value(json_object_get(j, "updatedAt"));
    }
    json_decref(j);
    store_record_release(&r);
    return t;
}

struct a2a_task *a2a_task_get(const struct config *cfg, const char *id)
{
    struct a2a_task *t = reg_find(id);

    if (t || !(t = load(cfg, id)))
        return t;
    a2a_task_unref(reg_add(t));
    return t;
}

struct a2a_task *a2a_task_create(const struct config *cfg, const char *ctx,
                                 const char *umid, const char *text)
{
    char id[RX_UUID_LEN];
    struct a2a_task *t;
    struct a2a_task_info info;

    idgen_uuid(id);
    if (!(t = task_alloc(cfg, id, ctx, umid)))
        return NULL;
    t->state = A2A_SUBMITTED;
    t->created_ms = t->updated_ms = now_wall_ms();
    info = (struct a2a_task_info){t->id, t->ctx,        t->umid, t->state,
                                  NULL,  t->updated_ms, false};
    /* Before the session has it: the message as the client sent it. */
    t->view = a2a_wire_task(NULL, &info);
    if (!t->view ||
        json_object_set_new(t->view, "history",
                            json_pack("[{s:s, s:s, s:s, s:s, s:[{s:s}]}]", "messageId",
                                      umid, "contextId", ctx, "taskId", t->id, "role",
                                      "ROLE_USER", "parts", "text", text))) {
        a2a_task_unref(t);
        return NULL;
    }
    pthread_mutex_lock(&t->lock);
    persist_locked(t);
    pthread_mutex_unlock(&t->lock);
    a2a_task_unref(reg_add(t));
    return t;
}

/* ---- events ------------------------------------------------------------------- */

/* One StreamResponse (1.0, `key` task/statusUpdate/artifactUpdate) to every stream. */
static void publish_locked(struct a2a_task *t, const char *key, json_t *v10)
{
    static const char *const kinds[][2] = {{"task", "task"},
                                           {"statusUpdate", "status-update"},
                                           {"artifactUpdate", "artifact-update"}};
    const char *kind = "task";
    json_t *w10 = NULL, *w03 = NULL;

    for (size_t i = 0; i < 3; i++)
        if (!strcmp(kinds[i][0], key))
            kind = kinds[i][1];
    for (struct a2a_stream *s = t->streams; s && v10; s = s->next) {
        struct sse_frame *f;
        char *text;

        if (!sse_channel_has_clients(&s->ch))
            continue;
        if (s->v03 && !w03)
            w03 = a2a_wire_v03(v10, kind);
        if (!s->v03 && !w10)
            w10 = json_pack("{s:O}", key, v10);
        text = a2a__envelope(s->rpc_id, s->v03 ? w03 : w10);
        f = text ? sse_frame_event(-1, text, strlen(text)) : NULL;
        if (f) {
            sse_channel_publish(&s->ch, f);
            sse_frame_unref(f);
        } else {
            log_warn("task %s: out of memory, an event is lost", t->id);
        }
        free(text);
    }
    json_decref(w10);
    json_decref(w03);
    json_decref(v10);
}

static void publish_status_locked(struct a2a_task *t)
{
    json_t *status = json_object_get(t->view, "status");

    publish_locked(t, "statusUpdate",
                   json_pack("{s:s, s:s, s:O}", "taskId", t->id, "contextId", t->ctx,
                             "status", status ? status : json_object()));
}

/* Rebuild the view from `st` (task's lock held). */
static void rebuild_locked(struct a2a_task *t, const struct rx_state *st)
{
    struct a2a_task_info info = {t->id,  t->ctx,        t->umid, t->state,
                                 t->why, t->updated_ms, !t->busy};
    json_t *v = a2a_wire_task(st, &info);

    if (!v) {
        log_warn("task %s: out of memory, its view is not updated", t->id);
        return;
    }
    json_decref(t->view);
    t->view = v;
    /* Idle, its view may have moved on (a call answered through another door). */
    if (!t->busy)
        t->state = a2a_state_parse(
            json_string_value(json_object_get(json_object_get(v, "status"), "state")));
}

/* ---- the engine's callbacks (session's lock held) ------------------------------ */

static void on_started(void *arg, struct run *r, const struct rx_state *st, int64_t seq)
{
    struct a2a_task *t = arg;

    (void)r;
    (void)seq;
    pthread_mutex_lock(&t->lock);
    t->state = A2A_WORKING;
    t->updated_ms = now_wall_ms();
    rebuild_locked(t, st);
    publish_status_locked(t);
    pthread_mutex_unlock(&t->lock);
}

static void on_delta(void *arg, struct run *r, const char *mid, const char *delta,
                     bool reasoning)
{
    struct a2a_task *t = arg;

    (void)r;
    (void)mid;
    if (reasoning)
        return;
    pthread_mutex_lock(&t->lock);
    publish_locked(t, "artifactUpdate",
                   json_pack("{s:s, s:s, s:{s:s, s:s, s:[{s:s}]}, s:b}", "taskId", t->id,
                             "contextId", t->ctx, "artifact", "artifactId", "answer",
                             "name", "answer", "parts", "text", delta, "append",
                             t->chunked));
    t->chunked = true;
    pthread_mutex_unlock(&t->lock);
}

static void on_step(void *arg, struct run *r, const struct rx_state *st, int64_t seq)
{
    struct a2a_task *t = arg;

    (void)r;
    (void)seq;
    pthread_mutex_lock(&t->lock);
    rebuild_locked(t, st);
    pthread_mutex_unlock(&t->lock);
}

static void on_ended(void *arg, struct run *r, enum run_status status,
                     const struct rx_state *st, enum rx_reason reason, const char *why)
{
    struct a2a_task *t = arg;
    const struct rx_tool_call *c;
    struct run *mine;
    json_t *arts;

    (void)r;
    pthread_mutex_lock(&t->lock);
    free(t->why);
    t->why = NULL;
    if (status == RUN_ERROR || !st) {
        char msg[RX_ERR_LEN];

        if (reason != RX_REASON_NONE)
            snprintf(msg, sizeof(msg), "%s (%s)", why ? why : "an input was refused",
                     rx_reason_name(reason));
        else
            snprintf(msg, sizeof(msg), "%s", why ? why : "the session is gone");
        t->state = A2A_FAILED;
        t->why = strdup(msg);
    } else if (a2a_wire_awaiting(st, t->umid, &c, 1)) {
        t->state = A2A_INPUT_REQUIRED;
    } else {
        t->state = t->cancel || status == RUN_INTERRUPTED ? A2A_CANCELED : A2A_COMPLETED;
    }
    t->updated_ms = now_wall_ms();
    rebuild_locked(t, st);
    /* The whole answer, replacing the chunks (two answers around a tool call are
       joined), then the final status. */
    arts = json_object_get(t->view, "artifacts");
    if (json_array_size(arts))
        publish_locked(t, "artifactUpdate",
                       json_pack("{s:s, s:s, s:O, s:b, s:b}", "taskId", t->id,
                                 "contextId", t->ctx, "artifact", json_array_get(arts, 0),
                                 "append", 0, "lastChunk", 1));
    publish_status_locked(t);
    for (struct a2a_stream *s = t->streams; s; s = s->next)
        sse_channel_close_all(&s->ch);
    mine = t->run;
    t->run = NULL;
    t->cancel = false;
    __atomic_store_n(&t->busy, false, __ATOMIC_RELEASE);
    persist_locked(t);
    a2a_task__finish_waiters_locked(t);
    pthread_mutex_unlock(&t->lock);
    if (mine)
        run_unref(mine); /* ours, from run_start */
    a2a_task_unref(t);   /* the engine's */
}

static const struct run_ops task_ops = {
    .started = on_started,
    .delta = on_delta,
    .step = on_step,
    .ended = on_ended,
};

int a2a_task_start(struct a2a_task *t, struct session *s, struct rx_input *in, size_t n,
                   bool cancel)
{
    struct run *r;
    unsigned gen;
    int err;

    pthread_mutex_lock(&t->lock);
    if (t->busy) {
        pthread_mutex_unlock(&t->lock);
        for (size_t i = 0; i < n; i++)
            rx_input_release(&in[i]);
        return -EBUSY;
    }
    __atomic_store_n(&t->busy, true, __ATOMIC_RELEASE);
    t->cancel = cancel;
    t->chunked = false;
    gen = ++t->gen;
    pthread_mutex_unlock(&t->lock);
    a2a_task__ref(t); /* the engine's, until `ended` */
    if ((err = run_start(s, in, n, &task_ops, t, &r))) {
        pthread_mutex_lock(&t->lock);
        __atomic_store_n(&t->busy, false, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&t->lock);
        a2a_task_unref(t);
        return err;
    }
    pthread_mutex_lock(&t->lock);
    if (t->busy && t->gen == gen)
        t->run = r; /* dropped by `ended` */
    else
        run_unref(r); /* it ended already (never started) */
    pthread_mutex_unlock(&t->lock);
    return 0;
}

void a2a_task_cancel(struct a2a_task *t)
{
    struct run *r;

    pthread_mutex_lock(&t->lock);
    if ((r = t->run)) {
        run_ref(r);
        t->cancel = true;
    }
    pthread_mutex_unlock(&t->lock);
    if (r) {
        run_cancel(r);
        run_unref(r);
    }
}

/* session_read: the view now. */
static void read_view(void *arg, const struct rx_state *st, int64_t seq,
                      const struct event_session *e)
{
    struct a2a_task *t = arg;

    (void)seq;
    (void)e;
    pthread_mutex_lock(&t->lock);
    rebuild_locked(t, st);
    pthread_mutex_unlock(&t->lock);
}

json_t *a2a_task_view(struct a2a_task *t, struct session *s)
{
    json_t *v;

    if (s && session_read(s, read_view, t))
        log_warn("task %s: its session cannot be read", t->id);
    pthread_mutex_lock(&t->lock);
    v = json_incref(t->view);
    pthread_mutex_unlock(&t->lock);
    return v;
}
