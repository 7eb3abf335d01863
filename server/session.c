/*
 * session - one session's life cycle, its runtime host, reading and
 * following. See session.h; the submit pipeline is in session_pipeline.c.
 */
#include "server/session.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/now.h"
#include "server/config.h"
#include "server/event.h"
#include "effects/log.h"
#include "server/metrics.h"
#include "server/run.h"
#include "server/session_internal.h"
#include "store/store.h"
#include "state_machine/rx_json.h"

/* ---- events ---------------------------------------------------------------- */

/* Send each frame made (NULL: could not be encoded, logged) to `ch`, at once. */
void session_publish_frames(struct session *s, struct sse_channel *ch,
                            struct sse_frame *const *f, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!f[i]) {
            log_warn("session %s: cannot encode an event", s->id);
            return;
        }
    }
    sse_channel_publish_n(ch, f, n);
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

/* Streamed text of an answer (or its reasoning) onto the message's stream. */
/*
 * In a cluster, what streamed of an answer goes to the other nodes once its
 * start is in the log (before, they would not know the message). What
 * streamed meanwhile goes with the first delta after. Lock held.
 */
static void relay(struct session *s, struct msgstream *m, bool reasoning)
{
    const struct session_env *env = &s->table->env;
    const struct rx_buf *b = reasoning ? &m->reasoning : &m->text;
    size_t *done = &m->relayed[reasoning];

    if (!env->relay || s->seq < m->open_seq || *done >= b->len)
        return;
    env->relay(env->cluster, s->id, m->id, reasoning, *done, b->data + *done,
               b->len - *done);
    *done = b->len;
}

/* ---- durable streamed text (SPEC 3.7) ---------------------------------------- */

/* A batch is due at this many new bytes, or this long after the last one. */
#define TEXT_BATCH_BYTES 4096
#define TEXT_BATCH_MS    250

/*
 * REFLEXOR_DURABLE_TEXT=0 turns the batches off (the baseline of
 * bench/durable_text.sh; nothing of a streaming answer survives a crash then).
 */
static bool durable_text(void)
{
    static int on = -1; /* read once; a race reads the same value twice */
    int v = __atomic_load_n(&on, __ATOMIC_RELAXED);

    if (v < 0) {
        const char *e = getenv("REFLEXOR_DURABLE_TEXT");

        v = !(e && !strcmp(e, "0"));
        __atomic_store_n(&on, v, __ATOMIC_RELAXED);
    }
    return v;
}

/* One batch on its way to the store: the write and what it points to. */
struct text_batch {
    struct store_write w; /* first: `done` gets its address */
    struct session *s;    /* a reference, dropped when the store answered */
    char *mid;            /* points into data */
    char data[];          /* the message id, NUL, then the text */
};

/*
 * The store answered a batch. A batch that failed is written again with the
 * next one: the message's saved mark goes back to it (a batch stored after
 * it past a gap is not read, store_stream_text, so nothing wrong is kept).
 */
static void text_batch_done(struct store_write *w, int err)
{
    struct text_batch *b = (struct text_batch *)w;
    struct session *s = b->s;

    if (err && err != -ENOENT) {
        struct msgstream *m;

        pthread_mutex_lock(&s->lock);
        m = msgstream_find(s->streams, b->mid);
        if (m && m->saved > (size_t)w->text_offset)
            m->saved = (size_t)w->text_offset;
        pthread_mutex_unlock(&s->lock);
    }
    free(b);
    session_unref(s);
}

/*
 * Queue what streamed of `m`'s text since its last batch, when a batch is
 * due (TEXT_BATCH_BYTES new, or TEXT_BATCH_MS since the last) or `force`.
 * Never waits for the store: the batch's answer comes on the notifier.
 * Only the owner writes, only while the answer streams in the state (the
 * input that ends it removes its batches: none may follow). Lock held.
 */
static void text_save(struct session *s, struct msgstream *m, bool force)
{
    struct store *st = s->table->env.store;
    const struct rx_message *msg;
    size_t n = m->text.len - m->saved, idlen;
    int64_t now;
    struct text_batch *b;

    if (!st || !n || s->follower || s->deleted || !durable_text())
        return;
    now = now_mono_ms();
    /* Due once a new TEXT_BATCH_MS tick of the clock began since the last
       batch, the same ticks for every answer: the batches of answers that
       stream together come together and share a commit (and its pages). */
    if (!force && n < TEXT_BATCH_BYTES &&
        now / TEXT_BATCH_MS == m->saved_ms / TEXT_BATCH_MS)
        return;
    msg = rx_state_find_assistant(&s->state, m->id);
    if (!msg || msg->status != RX_STATUS_STREAMING)
        return;
    idlen = strlen(m->id);
    if (!(b = malloc(sizeof(*b) + idlen + 1 + n)))
        return; /* the next batch takes these bytes too */
    memset(&b->w, 0, sizeof(b->w));
    b->mid = b->data;
    memcpy(b->data, m->id, idlen + 1);
    memcpy(b->data + idlen + 1, m->text.data + m->saved, n);
    b->s = s;
    session_ref(s);
    b->w.sid = s->id;
    b->w.message_id = b->mid;
    b->w.text_offset = (int64_t)m->saved;
    b->w.input = b->data + idlen + 1;
    b->w.input_len = n;
    b->w.done = text_batch_done;
    m->saved = m->text.len;
    m->saved_ms = now;
    store_write_queue(st, &b->w);
}

void session__text_save_due(struct session *s)
{
    for (struct msgstream *m = s->streams; m; m = m->next)
        text_save(s, m, false);
}

void session__text_load(struct session *s, struct msgstream *m)
{
    struct store *st = s->table->env.store;
    struct rx_buf b;
    int err;

    if (!st)
        return;
    rx_buf_init(&b, m->text.max);
    err = store_stream_text(st, s->id, m->id, &b);
    if (!err && b.len)
        err = msgstream_load(m, b.data, b.len);
    if (err) {
        struct rx_error why;

        store_last_error(st, &why);
        log_warn("session %s: the streamed text of %s cannot be read back: %s", s->id,
                 m->id, err == -EIO ? why.text : strerror(-err));
    } else if (b.len) {
        log_info("session %s: %s continues after %zu durable byte(s)", s->id, m->id,
                 b.len);
    }
    m->saved_ms = now_mono_ms();
    rx_buf_release(&b);
}

/*
 * A streaming answer that has no buffer gets one: none could be made when
 * it started (out of memory), and without one every chunk would fail and
 * the brain, run again, would never finish it. Lock held. 0, -ENOENT (not a
 * streaming answer) or -ENOMEM (the brain is run again later).
 */
static int stream_reopen(struct session *s, const char *message_id, struct msgstream **m)
{
    const struct rx_message *msg = rx_state_find_assistant(&s->state, message_id);

    if (!msg || msg->status != RX_STATUS_STREAMING)
        return -ENOENT;
    *m = session_stream_open(s, message_id);
    return *m ? 0 : -ENOMEM;
}

static int host_stream(struct session *s, const struct effect *fx, const char *message_id,
                       const char *delta, bool reasoning)
{
    struct msgstream *m;
    size_t n = strlen(delta), at;
    int err = 0;

    pthread_mutex_lock(&s->lock);
    m = msgstream_find(s->streams, message_id);
    /* Checked again under the lock: a cancel may have come in between. */
    if (effect_is_cancelled(fx)) {
        err = -ECANCELED;
        goto out_unlock;
    }
    if (!m && (err = stream_reopen(s, message_id, &m)))
        goto out_unlock;
    /* A lapsed lease: another node may own it already. The brain stops here. */
    if (!session_may_act(s)) {
        err = -ECANCELED;
        goto out_unlock;
    }
    /* At the brain's own count: a resumed answer adds only what is new. */
    at = m->streamed[reasoning];
    m->streamed[reasoning] += n;
    /* Past the bound, or out of memory: the live stream stops there (what
       follows is a gap), and the complete answer in the state says it all. */
    err = msgstream_append_at(m, reasoning, at, delta, n);
    if (err) {
        if (!m->over_logged) /* once per message, not once per chunk */
            log_warn("session %s: %s of %s: %s; the rest is not streamed", s->id,
                     reasoning ? "the reasoning" : "the answer", message_id,
                     err == -ENOMEM ? "out of memory" : "over limits.message_max");
        m->over_logged = true;
        err = 0;
        goto out_unlock;
    }
    if (s->runs)
        run__delta(s, message_id, delta, reasoning);
    relay(s, m, reasoning);
    if (!reasoning)
        text_save(s, m, false);
out_unlock:
    pthread_mutex_unlock(&s->lock);
    return err;
}

static int host_chunk(void *ctx, const struct effect *fx, const char *message_id,
                      const char *delta)
{
    return host_stream(ctx, fx, message_id, delta, false);
}

/* A `reasoning` frame on the message's stream. */
static int host_reasoning(void *ctx, const struct effect *fx, const char *message_id,
                          const char *delta)
{
    return host_stream(ctx, fx, message_id, delta, true);
}

static void host_event(void *ctx, const char *type, const struct effect *fx)
{
    struct session *s = ctx;
    struct sse_frame *f;

    if (strcmp(type, "effect-started"))
        metrics_effect_done(effect_kind(fx) == RX_EFFECT_ASK_BRAIN ? 0 : 1,
                            effect_elapsed_ms(fx), !strcmp(type, "effect-failed"));
    /* Each effect starts once and ends once: its owner's count stays true. */
    session_table__owner_work(s->table, s->owner,
                              strcmp(type, "effect-started") ? -1 : 1);
    log_debug("session %s: %s %s", s->id, type, effect_key(fx));
    if (s->runs && strcmp(type, "effect-started"))
        run__effect_ended(s);
    if (!sse_channel_has_clients(&s->ch) && !sse_channel_has_clients(&s->patch_ch))
        return;
    /* One frame, shared by both kinds of subscribers. */
    f = event_effect(type, effect_key(fx), s->seq, &s->scratch);
    session_publish_frames(s, &s->ch, &f, 1);
    if (f)
        sse_channel_publish(&s->patch_ch, f);
    sse_frame_unref(f);
}

/* The text shown of a resumed answer; the brain's count starts after it. */
static int host_resume(void *ctx, const char *message_id, char **text, size_t *len)
{
    struct session *s = ctx;
    struct msgstream *m = msgstream_find(s->streams, message_id);
    int err;

    *text = NULL;
    *len = 0;
    if (!m && (err = stream_reopen(s, message_id, &m)))
        return err == -ENOENT ? 0 : err;
    if (!m->text.len) {
        m->streamed[0] = 0;
        return 0;
    }
    if (!(*text = malloc(m->text.len + 1)))
        return -ENOMEM;
    memcpy(*text, m->text.data, m->text.len);
    (*text)[m->text.len] = '\0';
    *len = m->text.len;
    m->streamed[0] = m->text.len;
    return 0;
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
    .resume = host_resume,
    .chunk = host_chunk,
    .reasoning = host_reasoning,
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

struct session *session_create(struct session_table *t, const char *id)
{
    size_t len = strlen(id);
    struct session *s = calloc(1, sizeof(*s) + len + 1);
    struct runtime_config rc = {
        .brain = t->env.brain,
        .tools = t->env.tools,
        .system_prompt = t->env.cfg->system_prompt,
        .backoff_ms = t->env.cfg->backoff_ms,
        .backoff_max_ms = t->env.cfg->backoff_max_ms,
        /* Effects of every session share the process's workers; the first
           session makes the pool (limits.max_running_effects). */
        .pool = runtime_pool_shared(t->env.cfg->max_running_effects),
        .session_max = t->env.cfg->session_running_effects,
    };

    if (!s)
        return NULL;
    memcpy(s->id, id, len + 1);
    rc.key_prefix = s->id; /* tool calls' idempotency keys: "<sid>/<toolCallId>" */
    s->table = t;
    s->refs = 1;
    s->created_at = now_wall_ms();
    s->bytes = sizeof(*s) + len + 1;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->moved, NULL);
    rx_buf_init(&s->scratch, RX_BUF_STATE_MAX);
    sse_channel_init(&s->ch, (size_t)t->env.cfg->sse_queue_max);
    sse_channel_init(&s->patch_ch, (size_t)t->env.cfg->sse_queue_max);
    s->rt = runtime_create(&rc, &host_ops, s);
    if (!s->rt || rx_state_init(&s->state)) {
        runtime_destroy(s->rt);
        s->rt = NULL;
        pthread_cond_destroy(&s->moved);
        pthread_mutex_destroy(&s->lock);
        free(s);
        return NULL;
    }
    return s;
}

void session_destroy(struct session *s)
{
    runtime_destroy(s->rt);
    msgstream_free_all(&s->streams);
    sse_channel_release(&s->ch);
    sse_channel_release(&s->patch_ch);
    rx_state_release(&s->state);
    rx_buf_release(&s->scratch);
    pthread_cond_destroy(&s->moved);
    pthread_mutex_destroy(&s->lock);
    free(s->title);
    free(s);
}

/* The last reference: wait for the effects, free, and tell the table. */
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

void session_stop(struct session *s)
{
    pthread_mutex_lock(&s->lock);
    session__resize(s, 0);
    s->counted = false;
    s->deleted = true;
    runtime_cancel_all(s->rt);
    run__session_stopped(s);
    sse_channel_close_all(&s->ch);
    sse_channel_close_all(&s->patch_ch);
    msgstream_close_all(s->streams);
    pthread_mutex_unlock(&s->lock);
}

bool session_may_act(const struct session *s)
{
    const struct session_env *env = &s->table->env;

    return !s->follower && (!env->may_act || env->may_act(env->cluster));
}

void session__reconcile(struct session *s, const struct effect *cause)
{
    int err = 0;

    if (s->recovering)
        return; /* session_recover reconciles once the calls in doubt are marked */
    if (!s->deleted && session_may_act(s) && s->table->env.cfg->effects)
        err = runtime_reconcile(s->rt, &s->state, cause);
    if (err && !s->reconcile_due)
        log_warn("session %s: cannot start its effects (%s): trying again", s->id,
                 strerror(-err));
    s->reconcile_due = err != 0;
    if (err)
        __atomic_store_n(&s->table->reconcile_due, 1, __ATOMIC_RELEASE);
}

void session_reconcile(struct session *s)
{
    pthread_mutex_lock(&s->lock);
    session__reconcile(s, NULL);
    pthread_mutex_unlock(&s->lock);
}

/*
 * A title from the first user message: its first line, cut at a word. Never
 * over a title already there (one a person gave is kept). True when it set
 * one now.
 */
static bool auto_title(struct session *s)
{
    const char *c;
    size_t n;

    if (s->title || !(n = rx_state_title(&s->state, &c)))
        return false;
    s->title = strndup(c, n);
    return s->title != NULL;
}

/*
 * Called after every input published (session_pipeline.c): the title from
 * the first message, once, and the sessions feed told when the title or the
 * messages changed (session_feed.c, coalesced).
 */
void session_set_title(struct session *s)
{
    if (auto_title(s))
        s->feed_title = true;
    session_feed_changed(&s->table->feed, s);
}

/* A buffer for a streaming answer's text, bounded like a message. */
struct msgstream *session_stream_open(struct session *s, const char *id)
{
    const struct config *cfg = s->table->env.cfg;

    return msgstream_open(&s->streams, id, cfg->message_max, (size_t)cfg->sse_queue_max);
}

void session_restore(struct session *s, struct rx_state *state, int64_t seq,
                     int64_t created_at)
{
    rx_state_release(&s->state);
    s->state = *state;
    session__resize(s, sizeof(*s) + rx_state_bytes(&s->state));
    s->seq = s->applied = seq;
    s->created_at = created_at;
    s->last_stamp = s->state.updated_at;
    (void)auto_title(s); /* not told: the session is not listed yet */
    for (size_t i = s->state.assistant.settled; i < s->state.assistant.len; i++) {
        struct msgstream *m;

        if (s->state.assistant.items[i].status != RX_STATUS_STREAMING)
            continue;
        if (!(m = session_stream_open(s, s->state.assistant.items[i].id)))
            log_warn("session %s: no buffer for message %s", s->id,
                     s->state.assistant.items[i].id);
        else
            session__text_load(s, m); /* before anything streams (SPEC 3.7) */
    }
}

/* ---- reading ------------------------------------------------------------------ */

/* NEW reference: `st` as JSON, through the one encoder. NULL on ENOMEM. */
static json_t *state_to_json(const struct rx_state *st)
{
    struct rx_buf b;
    json_t *j = NULL;

    rx_buf_init(&b, RX_BUF_STATE_MAX);
    if (!rx_state_encode(st, &b) && rx_json_parse(b.data, b.len, 0, &j, NULL))
        j = NULL; /* our own encoding: only memory can fail */
    rx_buf_release(&b);
    return j;
}

/*
 * The one encoder, straight into the caller's buffer: the records' cached
 * encodings are copied, nothing is parsed, and the lock is held only for
 * the copy.
 */
int session_state_encode(struct session *s, struct rx_buf *out)
{
    int err;

    pthread_mutex_lock(&s->lock);
    session_settle_wait(s); /* never a state ahead of the log (group commit) */
    err = rx_state_encode(&s->state, out);
    pthread_mutex_unlock(&s->lock);
    return err;
}

int session_state_at(struct session *s, int64_t seq, json_t **out)
{
    struct store *st = s->table->env.store;
    struct rx_state state;
    int err;

    if (!st)
        return -ENOSYS;
    if ((err = store_state_at(st, s->id, seq, &state)))
        return err;
    *out = state_to_json(&state);
    rx_state_release(&state);
    return *out ? 0 : -ENOMEM;
}

int session_history(struct session *s, int64_t after, int limit, struct rx_buf *out)
{
    int64_t last;

    return session_history_page(s, after, limit, out, &last);
}

int session_history_page(struct session *s, int64_t after, int limit, struct rx_buf *out,
                         int64_t *last)
{
    /* Straight from the log's read-only connection: no session lock either. */
    if (!s->table->env.store)
        return -ENOSYS;
    return store_history_page(s->table->env.store, s->id, after, limit, out, last);
}

int session_title(struct session *s, char **out)
{
    int err = 0;

    pthread_mutex_lock(&s->lock);
    *out = NULL;
    if (s->title && !(*out = strdup(s->title)))
        err = -ENOMEM;
    pthread_mutex_unlock(&s->lock);
    return err;
}

int session_read(struct session *s, session_read_fn fn, void *arg)
{
    struct event_session e;
    int err = -ENOENT;

    pthread_mutex_lock(&s->lock);
    session_settle_wait(s); /* never a state ahead of the log */
    if (!s->deleted) {
        session_feed_entry(s, &e);
        fn(arg, &s->state, s->seq, &e);
        err = 0;
    }
    pthread_mutex_unlock(&s->lock);
    return err;
}

/* ---- following ---------------------------------------------------------------- */

/* limits.sse_queue_bytes as now in force (a reload may change it). */
static size_t queue_bytes(struct session *s)
{
    return __atomic_load_n(&s->table->env.cfg->sse_queue_bytes, __ATOMIC_RELAXED);
}

void *session_subscribe(struct session *s, bool patch, session_attach_fn attach,
                        void *arg)
{
    struct sse_channel *ch = patch ? &s->patch_ch : &s->ch;
    struct sse_frame *first[2] = {NULL, NULL};
    void *r = NULL;

    pthread_mutex_lock(&s->lock);
    /* A state with nothing on its way: its events are all out, so a later
       one never comes before it (session_settle_wait). */
    session_settle_wait(s);
    /* Under the lock: nothing can be published between this state and "live". */
    first[0] = sse_retry_frame(s->table->env.cfg->sse_retry_ms);
    first[1] = event_state(&s->state, s->seq, &s->scratch);
    sse_channel_set_queue_bytes(ch, queue_bytes(s));
    if (first[0] && first[1])
        r = attach(arg, ch, first, 2, s->deleted);
    pthread_mutex_unlock(&s->lock);
    sse_frame_unref(first[0]);
    sse_frame_unref(first[1]);
    return r;
}

/*
 * The message and its stream, under the lock. A message still streaming
 * after a restart gets its buffer back here (its text restarts).
 */
static int find_message(struct session *s, const char *id, const struct rx_message **msg,
                        struct msgstream **m)
{
    *msg = rx_state_find_assistant(&s->state, id);
    *m = msgstream_find(s->streams, id);
    if (!*msg)
        return -ENOENT;
    if ((*msg)->status == RX_STATUS_STREAMING && !*m && (*m = session_stream_open(s, id)))
        session__text_load(s, *m); /* the text kept of it (SPEC 3.7) */
    return 0;
}

int session_message_json(struct session *s, const char *message_id, json_t **out)
{
    const struct rx_message *msg;
    struct msgstream *m;
    int err;

    pthread_mutex_lock(&s->lock);
    session_settle_wait(s); /* only what is durable is told */
    err = find_message(s, message_id, &msg, &m);
    if (!err) {
        *out = msgstream_json(message_id, m, msg);
        err = *out ? 0 : -ENOMEM;
    }
    pthread_mutex_unlock(&s->lock);
    return err;
}

int session_message_subscribe(struct session *s, const char *message_id, long long from,
                              session_attach_fn attach, void *arg, void **out)
{
    const struct rx_message *msg;
    struct msgstream *m;
    struct sse_frame *first[3] = {NULL, NULL, NULL};
    size_t n = 0;
    int err;

    pthread_mutex_lock(&s->lock);
    session_settle_wait(s); /* only what is durable is told */
    if ((err = find_message(s, message_id, &msg, &m)))
        goto out_unlock;
    first[n++] = sse_retry_frame(s->table->env.cfg->sse_retry_ms);
    /* The text and the reasoning so far (a finished one: the state's); a
       client that saw part of it, what it did not see. */
    if (m && from >= 0 && (size_t)from <= m->text.len && !m->reasoning.len)
        first[n++] = event_message("chunk", "delta", m->text.data + from,
                                   m->text.len - (size_t)from, (int64_t)m->text.len);
    else
        first[n++] = msgstream_snapshot(m, msg);
    if (!m) {
        /* Finished: the whole sequence at once, from what the state knows. */
        size_t len = strlen(msg->content);

        first[n++] = event_message(rx_status_name(msg->status), "content", msg->content,
                                   len, (int64_t)len);
    }
    for (size_t i = 0; i < n; i++)
        if (!first[i])
            err = -ENOMEM;
    if (m)
        sse_channel_set_queue_bytes(&m->ch, queue_bytes(s));
    if (!err && !(*out = attach(arg, m ? &m->ch : &s->ch, first, n, !m || s->deleted)))
        err = -ENOMEM;

out_unlock:
    pthread_mutex_unlock(&s->lock);
    for (size_t i = 0; i < n; i++)
        sse_frame_unref(first[i]);
    return err;
}
