/*
 * session - one session's submit pipeline, events and streams. See session.h.
 */
#include "server/session.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "effects/idgen.h"
#include "effects/now.h"
#include "server/config.h"
#include "server/event.h"
#include "effects/log.h"
#include "server/metrics.h"
#include "server/session_internal.h"
#include "server/store.h"
#include "state_machine/rx_json.h"

/* ---- events ---------------------------------------------------------------- */

/* Send each frame made (NULL: could not be encoded, logged) to `ch`, at once. */
static void publish_frames(struct session *s, struct sse_channel *ch,
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

    if (!full && !patch)
        return;
    f[0] = event_input(in, s->seq, &s->scratch);
    if (full) {
        f[1] = event_state(&s->state, s->seq, &s->scratch);
        publish_frames(s, &s->ch, (struct sse_frame *const[]){f[0], f[1]}, 2);
    }
    if (patch) {
        f[2] = event_patch(&s->state, o, s->seq, &s->scratch);
        publish_frames(s, &s->patch_ch, (struct sse_frame *const[]){f[0], f[2]}, 2);
    }
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
    int err = 0;

    pthread_mutex_lock(&s->lock);
    m = msgstream_find(s->streams, message_id);
    /* Checked again under the lock: a cancel may have come in between. */
    if (effect_is_cancelled(fx))
        err = -ECANCELED;
    else if (!m)
        err = -ENOENT;
    else if (msgstream_append(m, delta))
        log_warn("session %s: message %s is over limits.message_max; chunk dropped",
                 s->id, message_id);
    pthread_mutex_unlock(&s->lock);
    return err;
}

static void host_event(void *ctx, const char *type, const struct effect *fx)
{
    struct session *s = ctx;
    struct sse_frame *f;

    if (strcmp(type, "effect-started"))
        metrics_effect_done(effect_kind(fx) == RX_EFFECT_ASK_BRAIN ? 0 : 1,
                            effect_elapsed_ms(fx), !strcmp(type, "effect-failed"));
    log_debug("session %s: %s %s", s->id, type, effect_key(fx));
    if (!sse_channel_has_clients(&s->ch) && !sse_channel_has_clients(&s->patch_ch))
        return;
    /* One frame, shared by both kinds of subscribers. */
    f = event_effect(type, effect_key(fx), s->seq, &s->scratch);
    publish_frames(s, &s->ch, &f, 1);
    if (f)
        sse_channel_publish(&s->patch_ch, f);
    sse_frame_unref(f);
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

struct session *session_create(struct session_table *t, const char *id)
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

void session_destroy(struct session *s)
{
    runtime_destroy(s->rt);
    msgstream_free_all(&s->streams);
    sse_channel_release(&s->ch);
    sse_channel_release(&s->patch_ch);
    rx_state_release(&s->state);
    rx_buf_release(&s->scratch);
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
    s->deleted = true;
    runtime_cancel_all(s->rt);
    sse_channel_close_all(&s->ch);
    sse_channel_close_all(&s->patch_ch);
    msgstream_close_all(s->streams);
    pthread_mutex_unlock(&s->lock);
}

void session_reconcile(struct session *s)
{
    pthread_mutex_lock(&s->lock);
    if (s->table->env.cfg->effects && runtime_reconcile(s->rt, &s->state, NULL))
        log_warn("session %s: out of memory starting effects", s->id);
    pthread_mutex_unlock(&s->lock);
}

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

/* A buffer for a streaming answer's text, bounded like a message. */
static struct msgstream *stream_open(struct session *s, const char *id)
{
    const struct config *cfg = s->table->env.cfg;

    return msgstream_open(&s->streams, id, cfg->message_max, (size_t)cfg->sse_queue_max);
}

void session_restore(struct session *s, struct rx_state *state, int64_t seq,
                     int64_t created_at)
{
    rx_state_release(&s->state);
    s->state = *state;
    s->seq = seq;
    s->created_at = created_at;
    s->last_stamp = s->state.updated_at;
    set_title(s);
    for (size_t i = s->state.assistant.settled; i < s->state.assistant.len; i++)
        if (s->state.assistant.items[i].status == RX_STATUS_STREAMING &&
            !stream_open(s, s->state.assistant.items[i].id))
            log_warn("session %s: no buffer for message %s", s->id,
                     s->state.assistant.items[i].id);
}

/* ---- inputs ----------------------------------------------------------------- */

/*
 * Copy each streaming answer's text so far into a user-cancel (exact replay).
 * Only the server's buffers count: partials a client sent are dropped first,
 * so nobody can put words in the assistant's mouth (SPEC 3.2).
 */
static int add_partials(struct session *s, struct rx_input *in)
{
    rx_input_clear_calls(in);
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
    struct rx_error why;
    int64_t seq = 0;

    store_last_error(st, &why);
    log_error("session %s: input %lld not stored (%s); it is undone", s->id,
              (long long)s->seq, why.text);
    rx_state_release(&s->state);
    if (store_session_load(st, s->id, &s->state, &seq) && rx_state_init(&s->state))
        memset(&s->state, 0, sizeof(s->state)); /* out of memory twice: stay empty */
    s->seq = seq;
}

/* Every input, from a client or an effect, is stamped on entry: max(now, last + 1). */
static void stamp(struct session *s, struct rx_input *in)
{
    if (s->last_stamp < s->state.updated_at)
        s->last_stamp = s->state.updated_at;
    in->timestamp = now_wall_ms();
    if (in->timestamp <= s->last_stamp)
        in->timestamp = s->last_stamp + 1;
    in->has_timestamp = true;
    s->last_stamp = in->timestamp;
}

/*
 * Tool arguments nested deeper than RX_JSON_DEPTH_MAX are refused where they
 * enter (a client with allow_agent_inputs, or a brain relaying an LLM): the
 * tool that would parse them runs on a small effect stack.
 */
static bool calls_within_limits(const struct rx_input *in)
{
    if (in->type != RX_IN_BRAIN_CALL_TOOLS)
        return true;
    for (size_t i = 0; i < in->n_calls; i++)
        if (in->calls[i].parameters && !rx_json_depth_ok(in->calls[i].parameters))
            return false;
    return true;
}

/* Clients wait their turn, but only so many: past that the queue is full. */
static bool queue_enter(struct session *s, const struct effect *cause)
{
    if (cause)
        return true;
    if (__atomic_add_fetch(&s->waiting, 1, __ATOMIC_RELAXED) >
        s->table->env.cfg->session_queue_max) {
        __atomic_sub_fetch(&s->waiting, 1, __ATOMIC_RELAXED);
        return false;
    }
    return true;
}

int session_submit(struct session *s, struct rx_input *in, const struct effect *cause,
                   struct submit_result *res)
{
    const struct session_env *env = &s->table->env;
    struct rx_outcome out;
    char fresh[RX_UUID_LEN];
    int err = 0;

    memset(res, 0, sizeof(*res));
    if (!queue_enter(s, cause))
        return -EBUSY;
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
    if (!calls_within_limits(in)) {
        res->verdict = RX_REJECTED;
        res->reason = RX_REASON_INVALID;
        res->field = "toolCalls";
        metrics_input(res->verdict, res->reason);
        goto out_unlock;
    }
    stamp(s, in);

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
    if (env->store && (err = store_append(env->store, s->id, s->seq, in, &s->state,
                                          env->cfg->snapshot_every))) {
        undo_unstored(s);
        goto out_unlock;
    }
    set_title(s);
    if (in->type == RX_IN_BRAIN_SEND_MESSAGE_START && !stream_open(s, in->message_id))
        log_warn("session %s: no buffer for message %s", s->id, in->message_id);
    publish_input(s, in, &out);
    msgstream_settle(&s->streams, &s->state);
    if (env->cfg->effects && runtime_reconcile(s->rt, &s->state, cause))
        log_warn("session %s: out of memory starting effects", s->id);

out_unlock:
    pthread_mutex_unlock(&s->lock);
    return err;
}

/* ---- reading ------------------------------------------------------------------ */

/* NEW reference: `st` as JSON, through the one encoder. NULL on ENOMEM. */
static json_t *state_to_json(const struct rx_state *st)
{
    struct rx_buf b;
    json_t *j = NULL;

    rx_buf_init(&b, RX_BUF_STATE_MAX);
    if (!rx_state_encode(st, &b))
        j = json_loadb(b.data, b.len, 0, NULL);
    rx_buf_release(&b);
    return j;
}

json_t *session_state_json(struct session *s)
{
    json_t *j;

    pthread_mutex_lock(&s->lock);
    j = state_to_json(&s->state);
    pthread_mutex_unlock(&s->lock);
    return j;
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

int session_history(struct session *s, int64_t after, int limit, json_t **out)
{
    if (!s->table->env.store)
        return -ENOSYS;
    return store_history(s->table->env.store, s->id, after, limit, out);
}

/* ---- following ---------------------------------------------------------------- */

void *session_subscribe(struct session *s, bool patch, session_attach_fn attach,
                        void *arg)
{
    struct sse_frame *first[2] = {NULL, NULL};
    void *r = NULL;

    pthread_mutex_lock(&s->lock);
    /* Under the lock: nothing can be published between this state and "live". */
    first[0] = sse_retry_frame(s->table->env.cfg->sse_retry_ms);
    first[1] = event_state(&s->state, s->seq, &s->scratch);
    if (first[0] && first[1])
        r = attach(arg, patch ? &s->patch_ch : &s->ch, first, 2, s->deleted);
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
    if ((*msg)->status == RX_STATUS_STREAMING && !*m)
        *m = stream_open(s, id);
    return 0;
}

int session_message_json(struct session *s, const char *message_id, json_t **out)
{
    const struct rx_message *msg;
    struct msgstream *m;
    int err;

    pthread_mutex_lock(&s->lock);
    err = find_message(s, message_id, &msg, &m);
    if (!err) {
        *out = event_message_json(message_id,
                                  m && m->text.data ? m->text.data : msg->content,
                                  rx_status_name(msg->status));
        err = *out ? 0 : -ENOMEM;
    }
    pthread_mutex_unlock(&s->lock);
    return err;
}

int session_message_subscribe(struct session *s, const char *message_id,
                              session_attach_fn attach, void *arg, void **out)
{
    const struct rx_message *msg;
    struct msgstream *m;
    struct sse_frame *first[3] = {NULL, NULL, NULL};
    size_t n = 0;
    int err;

    pthread_mutex_lock(&s->lock);
    if ((err = find_message(s, message_id, &msg, &m)))
        goto out_unlock;
    first[n++] = sse_retry_frame(s->table->env.cfg->sse_retry_ms);
    if (m) {
        first[n++] =
            event_message("snapshot", "content", m->text.data ? m->text.data : "",
                          m->text.len, (int64_t)m->text.len);
    } else {
        /* Finished: the whole sequence at once, from what the state knows. */
        size_t len = strlen(msg->content);

        first[n++] =
            event_message("snapshot", "content", msg->content, len, (int64_t)len);
        first[n++] = event_message(rx_status_name(msg->status), "content", msg->content,
                                   len, (int64_t)len);
    }
    for (size_t i = 0; i < n; i++)
        if (!first[i])
            err = -ENOMEM;
    if (!err && !(*out = attach(arg, m ? &m->ch : &s->ch, first, n, !m || s->deleted)))
        err = -ENOMEM;

out_unlock:
    pthread_mutex_unlock(&s->lock);
    for (size_t i = 0; i < n; i++)
        sse_frame_unref(first[i]);
    return err;
}
