/*
 * session - sessions, their inputs, events and message streams. See session.h.
 */
#include "server/session.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "effects/idgen.h"
#include "effects/now.h"

#include "server/log.h"
#include "server/metrics.h"
#include "server/store.h"
#include "state_machine/rx_patch.h"

/* The text of one streaming answer, and the clients that follow it. */
struct msgstream {
    struct msgstream *next;
    char *id;
    struct rx_buf text;
    struct sse_channel ch;
};

struct session {
    struct session *next; /* in the table */
    struct session_table *table;
    char id[SESSION_ID_MAX + 1];
    int refs;
    pthread_mutex_t lock; /* guards everything below */
    int waiting;          /* inputs queued on the lock (atomic) */
    bool deleted;
    struct rx_state state;
    int64_t last_stamp;
    int64_t seq; /* accepted inputs so far */
    int64_t created_at;
    char *title;
    struct sse_channel ch;       /* whole states */
    struct sse_channel patch_ch; /* JSON Patches (?mode=patch) */
    struct msgstream *streams;
    struct runtime *rt;
    struct rx_buf scratch; /* event encoding */
};

struct session_table {
    struct session_env env;
    pthread_mutex_t lock;
    struct session *head;
    size_t count;
    int live; /* sessions not yet freed, in the table or not */
    pthread_cond_t all_freed;
};

/* ---- message streams ------------------------------------------------------ */

static struct msgstream *stream_find(struct session *s, const char *id)
{
    for (struct msgstream *m = s->streams; m; m = m->next)
        if (!strcmp(m->id, id))
            return m;
    return NULL;
}

static struct msgstream *stream_open(struct session *s, const char *id)
{
    struct msgstream *m = calloc(1, sizeof(*m));

    if (!m)
        return NULL;
    m->id = strdup(id);
    if (!m->id) {
        free(m);
        return NULL;
    }
    rx_buf_init(&m->text, s->table->env.cfg->message_max);
    sse_channel_init(&m->ch, (size_t)s->table->env.cfg->sse_queue_max);
    m->next = s->streams;
    s->streams = m;
    return m;
}

static void stream_free(struct msgstream *m)
{
    sse_channel_release(&m->ch);
    rx_buf_release(&m->text);
    free(m->id);
    free(m);
}

/* {"type":<type>,<key>:<text>} as one SSE frame (id: the text length so far). */
static struct sse_frame *stream_frame(const char *type, const char *key, const char *text,
                                      size_t len, int64_t id)
{
    struct rx_buf b;
    struct sse_frame *f = NULL;

    rx_buf_init(&b, RX_BUF_STATE_MAX);
    if (!rx_buf_printf(&b, "{\"type\":\"%s\",\"%s\":", type, key) &&
        !rx_buf_put_json_strn(&b, text, len) && !rx_buf_putc(&b, '}'))
        f = sse_frame_event(id, b.data, b.len);
    rx_buf_release(&b);
    return f;
}

/* Finish the streams whose message is no longer streaming in the state. */
static void streams_settle(struct session *s)
{
    for (struct msgstream **p = &s->streams; *p;) {
        struct msgstream *m = *p;
        const struct rx_message *msg = rx_state_find_assistant(&s->state, m->id);
        struct sse_frame *f;

        if (msg && msg->status == RX_STATUS_STREAMING) {
            p = &m->next;
            continue;
        }
        if (msg) {
            size_t len = strlen(msg->content);

            f = stream_frame(rx_status_name(msg->status), "content", msg->content, len,
                             (int64_t)len);
            if (f) {
                sse_channel_publish(&m->ch, f);
                sse_frame_unref(f);
            }
        }
        *p = m->next;
        stream_free(m);
    }
}

/* ---- events ---------------------------------------------------------------- */

/* One frame (an effect event), shared by both kinds of subscribers. */
static void publish(struct session *s, struct rx_buf *b)
{
    struct sse_frame *f = sse_frame_event(s->seq, b->data, b->len);

    if (!f) {
        log_warn("session %s: out of memory encoding an event", s->id);
        return;
    }
    sse_channel_publish(&s->ch, f);
    sse_channel_publish(&s->patch_ch, f);
    sse_frame_unref(f);
}

static int encode_state_event(struct session *s, struct rx_buf *b)
{
    rx_buf_reset(b);
    if (rx_buf_puts(b, "{\"type\":\"state-updated\",\"state\":") ||
        rx_state_encode(&s->state, b) || rx_buf_putc(b, '}'))
        return -ENOMEM;
    return 0;
}

/* The scratch buffer as one event frame, or NULL (logged). */
static struct sse_frame *scratch_frame(struct session *s, const char *what, int err)
{
    struct sse_frame *f =
        err ? NULL : sse_frame_event(s->seq, s->scratch.data, s->scratch.len);

    if (!f)
        log_warn("session %s: cannot encode %s", s->id, what);
    return f;
}

/*
 * An accepted input and what it did: input-received, then the new state to
 * those who follow it whole and its patch to the others. Each frame is made
 * once for all, only if someone follows, and each client is woken once.
 */
static void publish_input(struct session *s, const struct rx_input *in,
                          const struct rx_outcome *o)
{
    bool full = sse_channel_has_clients(&s->ch),
         patch = sse_channel_has_clients(&s->patch_ch);
    struct sse_frame *f[3] = {NULL, NULL, NULL};
    struct rx_buf *b = &s->scratch;

    if (!full && !patch)
        return;
    rx_buf_reset(b);
    f[0] = scratch_frame(s, "input-received",
                         rx_buf_puts(b, "{\"type\":\"input-received\",\"input\":") ||
                             rx_input_encode(in, b) || rx_buf_putc(b, '}'));
    if (full)
        f[1] = scratch_frame(s, "state-updated", encode_state_event(s, b));
    if (patch) {
        rx_buf_reset(b);
        f[2] = scratch_frame(s, "state-patch",
                             rx_buf_puts(b, "{\"type\":\"state-patch\",\"patch\":") ||
                                 rx_patch_encode(&s->state, o, b) || rx_buf_putc(b, '}'));
    }
    if (full && f[0] && f[1])
        sse_channel_publish_n(&s->ch, (struct sse_frame *const[]){f[0], f[1]}, 2);
    if (patch && f[0] && f[2])
        sse_channel_publish_n(&s->patch_ch, (struct sse_frame *const[]){f[0], f[2]}, 2);
    for (int i = 0; i < 3; i++)
        sse_frame_unref(f[i]);
}

/* ---- the runtime's host ----------------------------------------------------- */

static void host_lock(void *ctx)
{
    pthread_mutex_lock(&((struct session *)ctx)->lock);
}

static void host_unlock(void *ctx)
{
    pthread_mutex_unlock(&((struct session *)ctx)->lock);
}

static const struct rx_state *host_state(void *ctx)
{
    return &((struct session *)ctx)->state;
}

static int host_dispatch(void *ctx, struct effect *fx, struct rx_input *in)
{
    struct submit_result res;
    int err = session_submit(ctx, in, fx, &res);

    if (err)
        return err;
    if (res.verdict == RX_REJECTED) {
        log_warn("session %s: %s from %s rejected: %s", ((struct session *)ctx)->id,
                 rx_input_type_name(in->type), effect_key(fx),
                 rx_reason_name(res.reason));
        return -EPROTO;
    }
    return 0;
}

static int host_chunk(void *ctx, const struct effect *fx, const char *message_id,
                      const char *delta)
{
    struct session *s = ctx;
    struct msgstream *m;
    struct sse_frame *f;
    int err = 0;

    pthread_mutex_lock(&s->lock);
    m = stream_find(s, message_id);
    /* Checked again under the lock: a cancel may have come in between. */
    if (effect_is_cancelled(fx)) {
        err = -ECANCELED;
    } else if (!m) {
        err = -ENOENT;
    } else if (!rx_buf_puts(&m->text, delta)) {
        f = stream_frame("chunk", "delta", delta, strlen(delta), (int64_t)m->text.len);
        if (f) {
            sse_channel_publish(&m->ch, f);
            sse_frame_unref(f);
        }
    }
    pthread_mutex_unlock(&s->lock);
    return err;
}

static void host_event(void *ctx, const char *type, const struct effect *fx)
{
    struct session *s = ctx;
    struct rx_buf *b = &s->scratch;

    if (strcmp(type, "effect-started"))
        metrics_effect_done(effect_kind(fx) == RX_EFFECT_ASK_BRAIN ? 0 : 1,
                            effect_elapsed_ms(fx), !strcmp(type, "effect-failed"));
    log_debug("session %s: %s %s", s->id, type, effect_key(fx));
    if (!sse_channel_has_clients(&s->ch) && !sse_channel_has_clients(&s->patch_ch))
        return;
    rx_buf_reset(b);
    if (rx_buf_printf(b, "{\"type\":\"%s\",\"key\":", type) ||
        rx_buf_put_json_str(b, effect_key(fx)) || rx_buf_putc(b, '}'))
        return;
    publish(s, b);
}

static void host_ref(void *ctx)
{
    session_ref(ctx);
}

static void host_unref(void *ctx)
{
    session_unref(ctx);
}

static const struct runtime_host host_ops = {
    .lock = host_lock,
    .unlock = host_unlock,
    .state = host_state,
    .dispatch = host_dispatch,
    .chunk = host_chunk,
    .event = host_event,
    .ref = host_ref,
    .unref = host_unref,
};

/* ---- life cycle ------------------------------------------------------------- */

const char *session_id(const struct session *s)
{
    return s->id;
}

void session_ref(struct session *s)
{
    __atomic_add_fetch(&s->refs, 1, __ATOMIC_RELAXED);
}

/* Free everything a session holds; its effects must have ended. */
static void session_destroy(struct session *s)
{
    runtime_destroy(s->rt);
    while (s->streams) {
        struct msgstream *m = s->streams;

        s->streams = m->next;
        stream_free(m);
    }
    sse_channel_release(&s->ch);
    sse_channel_release(&s->patch_ch);
    rx_state_release(&s->state);
    rx_buf_release(&s->scratch);
    pthread_mutex_destroy(&s->lock);
    free(s->title);
    free(s);
}

static void session_free(struct session *s)
{
    struct session_table *t = s->table;

    runtime_wait_idle(s->rt);
    session_destroy(s);
    pthread_mutex_lock(&t->lock);
    if (--t->live == 0)
        pthread_cond_broadcast(&t->all_freed);
    pthread_mutex_unlock(&t->lock);
}

void session_unref(struct session *s)
{
    if (s && __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) == 0)
        session_free(s);
}

static struct session *session_new(struct session_table *t, const char *id)
{
    struct session *s = calloc(1, sizeof(*s));
    struct runtime_host host = host_ops;
    struct runtime_config rc = {
        .brain = t->env.brain,
        .tools = t->env.tools,
        .system_prompt = t->env.cfg->system_prompt,
        .backoff_ms = t->env.cfg->backoff_ms,
        .backoff_max_ms = t->env.cfg->backoff_max_ms,
    };

    if (!s)
        return NULL;
    snprintf(s->id, sizeof(s->id), "%s", id);
    s->table = t;
    s->refs = 1;
    s->created_at = now_wall_ms();
    pthread_mutex_init(&s->lock, NULL);
    rx_buf_init(&s->scratch, RX_BUF_STATE_MAX);
    sse_channel_init(&s->ch, (size_t)t->env.cfg->sse_queue_max);
    sse_channel_init(&s->patch_ch, (size_t)t->env.cfg->sse_queue_max);
    host.ctx = s;
    s->rt = runtime_create(&rc, &host);
    if (!s->rt || rx_state_init(&s->state)) {
        runtime_destroy(s->rt);
        s->rt = NULL;
        pthread_mutex_destroy(&s->lock);
        free(s);
        return NULL;
    }
    return s;
}

struct session_table *session_table_create(const struct session_env *env)
{
    struct session_table *t = calloc(1, sizeof(*t));

    if (!t)
        return NULL;
    t->env = *env;
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->all_freed, NULL);
    return t;
}

static bool id_is_valid(const char *id)
{
    size_t n = strlen(id);

    if (!n || n > SESSION_ID_MAX)
        return false;
    /* Ids appear in URLs and file names: keep them plain. */
    return strspn(id,
                  "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") ==
               n &&
           strcmp(id, ".") && strcmp(id, "..");
}

static struct session *table_find(struct session_table *t, const char *id)
{
    for (struct session *s = t->head; s; s = s->next)
        if (!strcmp(s->id, id))
            return s;
    return NULL;
}

static void set_title(struct session *s);
static struct msgstream *stream_open(struct session *s, const char *id);

/*
 * Add a session to the table: a fresh one (state NULL, recorded in the store)
 * or one rebuilt from the store (`state` moved in, `seq` inputs folded).
 */
static int table_add(struct session_table *t, const char *id, int64_t created_at,
                     struct rx_state *state, int64_t seq, struct session **out)
{
    struct session *s;
    int err = 0;

    if (!id_is_valid(id))
        return -EINVAL;
    pthread_mutex_lock(&t->lock);
    if (table_find(t, id)) {
        err = -EEXIST;
    } else if (t->count >= (size_t)t->env.cfg->max_sessions) {
        err = -ENOSPC;
    } else if (!(s = session_new(t, id))) {
        err = -ENOMEM;
    } else if (!state && t->env.store &&
               (err = store_create_session(t->env.store, id, s->created_at))) {
        session_destroy(s); /* never listed: not counted in `live` */
    } else {
        if (state) {
            rx_state_release(&s->state);
            s->state = *state;
            s->seq = seq;
            s->created_at = created_at;
            s->last_stamp = s->state.updated_at;
            set_title(s);
            /* Answers that were streaming get a buffer again: the brain resumes
               them under the same id. */
            for (size_t i = s->state.assistant.settled; i < s->state.assistant.len; i++)
                if (s->state.assistant.items[i].status == RX_STATUS_STREAMING)
                    stream_open(s, s->state.assistant.items[i].id);
        }
        s->next = t->head;
        t->head = s;
        t->count++;
        t->live++;
        if (out) {
            session_ref(s);
            *out = s;
        }
    }
    pthread_mutex_unlock(&t->lock);
    return err;
}

int session_table_create_session(struct session_table *t, const char *id,
                                 struct session **out)
{
    char fresh[37];

    if (!id) {
        idgen_uuid(fresh);
        id = fresh;
    }
    return table_add(t, id, 0, NULL, 0, out);
}

struct session *session_table_get(struct session_table *t, const char *id)
{
    struct session *s;

    pthread_mutex_lock(&t->lock);
    s = table_find(t, id);
    if (s)
        session_ref(s);
    pthread_mutex_unlock(&t->lock);
    return s;
}

/* Stop a session that left the table: cancel effects, end streams. */
static void session_stop(struct session *s)
{
    pthread_mutex_lock(&s->lock);
    s->deleted = true;
    runtime_cancel_all(s->rt);
    sse_channel_close_all(&s->ch);
    sse_channel_close_all(&s->patch_ch);
    for (struct msgstream *m = s->streams; m; m = m->next)
        sse_channel_close_all(&m->ch);
    pthread_mutex_unlock(&s->lock);
}

int session_table_delete(struct session_table *t, const char *id)
{
    struct session **p, *s = NULL;

    pthread_mutex_lock(&t->lock);
    for (p = &t->head; *p; p = &(*p)->next) {
        if (!strcmp((*p)->id, id)) {
            s = *p;
            *p = s->next;
            t->count--;
            break;
        }
    }
    pthread_mutex_unlock(&t->lock);
    if (!s)
        return -ENOENT;
    session_stop(s);
    if (t->env.store && store_delete_session(t->env.store, id))
        log_warn("session %s: could not delete its log", id);
    session_unref(s);
    return 0;
}

void session_table_cancel_all(struct session_table *t)
{
    pthread_mutex_lock(&t->lock);
    for (struct session *s = t->head; s; s = s->next) {
        pthread_mutex_lock(&s->lock);
        s->deleted = true; /* no input is taken during shutdown */
        runtime_cancel_all(s->rt);
        pthread_mutex_unlock(&s->lock);
    }
    pthread_mutex_unlock(&t->lock);
}

int session_table_effects_running(struct session_table *t)
{
    int n = 0;

    pthread_mutex_lock(&t->lock);
    for (struct session *s = t->head; s; s = s->next) {
        pthread_mutex_lock(&s->lock);
        n += runtime_running(s->rt);
        pthread_mutex_unlock(&s->lock);
    }
    pthread_mutex_unlock(&t->lock);
    return n;
}

void session_table_destroy(struct session_table *t)
{
    if (!t)
        return;
    session_table_cancel_all(t);
    for (;;) {
        struct session *s;

        pthread_mutex_lock(&t->lock);
        s = t->head;
        if (s) {
            t->head = s->next;
            t->count--;
        }
        pthread_mutex_unlock(&t->lock);
        if (!s)
            break;
        session_stop(s);
        session_unref(s);
    }
    /* Effects hold sessions until they end; the brain must outlive them all. */
    pthread_mutex_lock(&t->lock);
    while (t->live)
        pthread_cond_wait(&t->all_freed, &t->lock);
    pthread_mutex_unlock(&t->lock);
    pthread_cond_destroy(&t->all_freed);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

size_t session_table_count(struct session_table *t)
{
    size_t n;

    pthread_mutex_lock(&t->lock);
    n = t->count;
    pthread_mutex_unlock(&t->lock);
    return n;
}

json_t *session_table_list(struct session_table *t)
{
    json_t *arr = json_array();

    if (!arr)
        return NULL;
    pthread_mutex_lock(&t->lock);
    for (struct session *s = t->head; s; s = s->next) {
        json_t *o;

        pthread_mutex_lock(&s->lock);
        o = json_pack(
            "{s:s, s:I, s:I, s:s, s:I}", "id", s->id, "createdAt",
            (json_int_t)s->created_at, "updatedAt",
            (json_int_t)(s->state.updated_at ? s->state.updated_at : s->created_at),
            "title", s->title ? s->title : "New chat", "messageCount",
            (json_int_t)(s->state.user.len + s->state.assistant.len));
        pthread_mutex_unlock(&s->lock);
        if (json_array_append_new(arr, o)) {
            json_decref(arr);
            arr = NULL;
            break;
        }
    }
    pthread_mutex_unlock(&t->lock);
    return arr;
}

/* ---- inputs ----------------------------------------------------------------- */

/* A title from the first user message: its first line, cut at a word. */
static void set_title(struct session *s)
{
    const char *c;
    size_t n;

    if (s->title || !s->state.user.len)
        return;
    c = s->state.user.items[0].content;
    c += strspn(c, " \t\r\n");
    n = strcspn(c, "\r\n");
    if (n > 60) {
        n = 60;
        while (n > 30 && c[n] != ' ')
            n--;
        /* Never cut inside a UTF-8 sequence. */
        while (n && ((unsigned char)c[n] & 0xC0) == 0x80)
            n--;
    }
    s->title = strndup(c, n);
}

/* Copy each streaming answer's text so far into a user-cancel (exact replay). */
static int add_partials(struct session *s, struct rx_input *in)
{
    for (struct msgstream *m = s->streams; m; m = m->next) {
        int err = rx_input_add_partial(in, m->id, m->text.data ? m->text.data : "");

        if (err)
            return err;
    }
    return 0;
}

/*
 * The store refused an input the state already took: put the state back as
 * the log has it, so memory never runs ahead of the truth.
 */
static void undo_unstored(struct session *s)
{
    struct store *st = s->table->env.store;
    char why[STORE_ERR_LEN];
    int64_t seq = 0;

    store_last_error(st, why);
    log_error("session %s: input %lld not stored (%s); it is undone", s->id,
              (long long)s->seq, why);
    rx_state_release(&s->state);
    if (store_session_load(st, s->id, &s->state, &seq) && rx_state_init(&s->state))
        memset(&s->state, 0, sizeof(s->state)); /* out of memory twice: stay empty */
    s->seq = seq;
}

int session_submit(struct session *s, struct rx_input *in, const struct effect *cause,
                   struct submit_result *res)
{
    struct rx_outcome out;
    char fresh[37];
    int err = 0;

    memset(res, 0, sizeof(*res));
    /* Clients wait their turn, but only so many: past that the queue is full. */
    if (!cause && __atomic_add_fetch(&s->waiting, 1, __ATOMIC_RELAXED) >
                      s->table->env.cfg->session_queue_max) {
        __atomic_sub_fetch(&s->waiting, 1, __ATOMIC_RELAXED);
        return -EBUSY;
    }
    pthread_mutex_lock(&s->lock);
    if (!cause)
        __atomic_sub_fetch(&s->waiting, 1, __ATOMIC_RELAXED);
    if (s->deleted) {
        err = -ENOENT;
        goto out_unlock;
    }
    if (cause && effect_is_cancelled(cause)) {
        err = -ECANCELED;
        goto out_unlock;
    }
    if (in->type == RX_IN_USER_SEND_MESSAGE && !in->message_id) {
        idgen_uuid(fresh);
        if ((err = rx_input_set_str(&in->message_id, fresh)))
            goto out_unlock;
    }
    if (in->type == RX_IN_USER_CANCEL && (err = add_partials(s, in)))
        goto out_unlock;
    /* Every input, from a client or an effect, is stamped on entry. */
    if (s->last_stamp < s->state.updated_at)
        s->last_stamp = s->state.updated_at;
    in->timestamp = now_wall_ms();
    if (in->timestamp <= s->last_stamp)
        in->timestamp = s->last_stamp + 1;
    in->has_timestamp = true;
    s->last_stamp = in->timestamp;

    if ((err = rx_machine_apply(&s->state, in, &out)))
        goto out_unlock;
    metrics_input(out.verdict, out.reason);
    res->verdict = out.verdict;
    res->reason = out.reason;
    res->field = out.field;
    res->timestamp = in->timestamp;
    res->seq = s->seq;
    if (out.verdict != RX_ACCEPTED)
        goto out_unlock;

    s->seq++;
    res->seq = s->seq;
    /* The log is the truth: committed before anyone hears of the input. */
    if (s->table->env.store &&
        (err = store_append(s->table->env.store, s->id, s->seq, in, &s->state,
                            s->table->env.cfg->snapshot_every))) {
        undo_unstored(s);
        goto out_unlock;
    }
    set_title(s);
    if (in->type == RX_IN_BRAIN_SEND_MESSAGE_START && !stream_open(s, in->message_id))
        log_warn("session %s: no buffer for message %s", s->id, in->message_id);
    publish_input(s, in, &out);
    streams_settle(s);
    if (s->table->env.cfg->effects && runtime_reconcile(s->rt, &s->state, cause))
        log_warn("session %s: out of memory starting effects", s->id);

out_unlock:
    pthread_mutex_unlock(&s->lock);
    return err;
}

json_t *session_state_json(struct session *s)
{
    struct rx_buf b;
    json_t *j = NULL;

    rx_buf_init(&b, RX_BUF_STATE_MAX);
    pthread_mutex_lock(&s->lock);
    if (!rx_state_encode(&s->state, &b))
        j = json_loadb(b.data, b.len, 0, NULL);
    pthread_mutex_unlock(&s->lock);
    rx_buf_release(&b);
    return j;
}

struct MHD_Response *session_subscribe(struct session *s, struct MHD_Connection *conn,
                                       bool patch)
{
    struct sse_frame *first[2] = {NULL, NULL};
    struct MHD_Response *r = NULL;
    struct rx_buf b;

    rx_buf_init(&b, RX_BUF_STATE_MAX);
    pthread_mutex_lock(&s->lock);
    /* Under the lock: nothing can be published between this state and "live". */
    first[0] = sse_retry_frame(s->table->env.cfg->sse_retry_ms);
    if (first[0] && !encode_state_event(s, &b) &&
        (first[1] = sse_frame_event(s->seq, b.data, b.len)))
        r = sse_channel_subscribe(patch ? &s->patch_ch : &s->ch, conn, first, 2,
                                  s->deleted);
    pthread_mutex_unlock(&s->lock);
    sse_frame_unref(first[0]);
    sse_frame_unref(first[1]);
    rx_buf_release(&b);
    return r;
}

static struct MHD_Response *message_json(const char *id, const char *content,
                                         const char *status)
{
    json_t *j =
        json_pack("{s:s, s:s, s:s, s:b}", "messageId", id, "content", content, "status",
                  status, "isComplete", strcmp(status, "streaming") != 0);
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    struct MHD_Response *r = NULL;

    json_decref(j);
    if (text) {
        r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
        if (r)
            MHD_add_response_header(r, "Content-Type", "application/json");
        else
            free(text);
    }
    return r;
}

int session_message_response(struct session *s, const char *message_id, bool sse,
                             struct MHD_Connection *conn, struct MHD_Response **resp)
{
    const struct rx_message *msg;
    struct msgstream *m;
    struct sse_frame *first[3] = {NULL, NULL, NULL};
    size_t n = 0;
    int err = 0;

    pthread_mutex_lock(&s->lock);
    msg = rx_state_find_assistant(&s->state, message_id);
    m = stream_find(s, message_id);
    if (!msg) {
        err = -ENOENT;
        goto out_unlock;
    }
    if (msg->status == RX_STATUS_STREAMING && !m)
        m = stream_open(s, message_id); /* recovered after a restart: text restarts */
    if (!sse) {
        *resp = message_json(message_id, m && m->text.data ? m->text.data : msg->content,
                             rx_status_name(msg->status));
        err = *resp ? 0 : -ENOMEM;
        goto out_unlock;
    }
    first[n++] = sse_retry_frame(s->table->env.cfg->sse_retry_ms);
    if (m) {
        first[n++] = stream_frame("snapshot", "content", m->text.data ? m->text.data : "",
                                  m->text.len, (int64_t)m->text.len);
    } else {
        /* Finished: the whole sequence at once, from what the state knows. */
        size_t len = strlen(msg->content);

        first[n++] = stream_frame("snapshot", "content", msg->content, len, (int64_t)len);
        first[n++] = stream_frame(rx_status_name(msg->status), "content", msg->content,
                                  len, (int64_t)len);
    }
    for (size_t i = 0; i < n; i++)
        if (!first[i])
            err = -ENOMEM;
    if (!err)
        *resp =
            sse_channel_subscribe(m ? &m->ch : &s->ch, conn, first, n, !m || s->deleted);
    if (!err && !*resp)
        err = -ENOMEM;

out_unlock:
    pthread_mutex_unlock(&s->lock);
    for (size_t i = 0; i < n; i++)
        sse_frame_unref(first[i]);
    return err;
}

/* ---- the log: recovery, time travel, forks, retention ------------------------ */

static int load_one(void *ctx, const char *sid, int64_t created_at,
                    struct rx_state *state, int64_t seq)
{
    struct session_table *t = ctx;
    int err = table_add(t, sid, created_at, state, seq, NULL);

    if (err) {
        log_error("session %s: cannot restore: %s", sid, strerror(-err));
        return err;
    }
    return 0;
}

/* Effects wanted by a restored state start now, without waiting for an input. */
static void reconcile_all(struct session_table *t)
{
    pthread_mutex_lock(&t->lock);
    for (struct session *s = t->head; s; s = s->next) {
        pthread_mutex_lock(&s->lock);
        if (t->env.cfg->effects && runtime_reconcile(s->rt, &s->state, NULL))
            log_warn("session %s: out of memory resuming effects", s->id);
        pthread_mutex_unlock(&s->lock);
    }
    pthread_mutex_unlock(&t->lock);
}

int session_table_load(struct session_table *t)
{
    char why[STORE_ERR_LEN];
    int err;

    if (!t->env.store)
        return 0;
    err = store_load(t->env.store, load_one, t);
    if (err) {
        store_last_error(t->env.store, why);
        log_error("cannot load the sessions: %s", why);
        return err;
    }
    log_info("restored %zu session(s)", session_table_count(t));
    reconcile_all(t);
    return 0;
}

int session_table_fork(struct session_table *t, const char *sid, int64_t at,
                       struct session **out)
{
    struct rx_state state;
    char fresh[37];
    int64_t seq;
    int err;

    if (!t->env.store)
        return -ENOSYS;
    idgen_uuid(fresh);
    if ((err = store_fork(t->env.store, sid, at, fresh, now_wall_ms())))
        return err;
    if ((err = store_session_load(t->env.store, fresh, &state, &seq)))
        goto out_drop;
    if ((err = table_add(t, fresh, now_wall_ms(), &state, seq, out))) {
        rx_state_release(&state);
        goto out_drop;
    }
    pthread_mutex_lock(&(*out)->lock);
    if (t->env.cfg->effects && runtime_reconcile((*out)->rt, &(*out)->state, NULL))
        log_warn("session %s: out of memory starting effects", fresh);
    pthread_mutex_unlock(&(*out)->lock);
    return 0;

out_drop:
    if (store_delete_session(t->env.store, fresh))
        log_warn("session %s: half-made fork left in the log", fresh);
    return err;
}

int session_table_sweep(struct session_table *t, int64_t older_than_ms)
{
    json_t *ids = NULL, *id;
    int64_t inputs = 0;
    size_t i;
    int n = 0;

    if (!t->env.store || store_gc_list(t->env.store, older_than_ms, &ids, &inputs))
        return 0;
    json_array_foreach(ids, i, id)
    {
        /* The rows are gone already; this only drops the session from memory. */
        struct session **p, *s = NULL;

        pthread_mutex_lock(&t->lock);
        for (p = &t->head; *p; p = &(*p)->next) {
            if (!strcmp((*p)->id, json_string_value(id))) {
                s = *p;
                *p = s->next;
                t->count--;
                break;
            }
        }
        pthread_mutex_unlock(&t->lock);
        if (s) {
            session_stop(s);
            session_unref(s);
        }
        n++;
    }
    if (n)
        log_info("retention: removed %d session(s), %lld input(s)", n, (long long)inputs);
    json_decref(ids);
    return n;
}

int session_state_at(struct session *s, int64_t seq, json_t **out)
{
    struct store *st = s->table->env.store;
    struct rx_state state;
    struct rx_buf b;
    int err;

    if (!st)
        return -ENOSYS;
    if ((err = store_state_at(st, s->id, seq, &state)))
        return err;
    rx_buf_init(&b, RX_BUF_STATE_MAX);
    err = rx_state_encode(&state, &b);
    rx_state_release(&state);
    if (!err) {
        *out = json_loadb(b.data, b.len, 0, NULL);
        err = *out ? 0 : -ENOMEM;
    }
    rx_buf_release(&b);
    return err;
}

int session_history(struct session *s, int64_t after, int limit, json_t **out)
{
    if (!s->table->env.store)
        return -ENOSYS;
    return store_history(s->table->env.store, s->id, after, limit, out);
}
