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
 * The frames of an accepted input, made while the state is the one it made
 * (later inputs may be applied before it is published): input-received, then
 * the new state for those who follow it whole and its patch for the others.
 * Each frame is made once for all, only if someone follows.
 */
struct input_frames {
    struct sse_frame *f[3]; /* input-received, state-updated, state-patch */
    bool full, patch;       /* someone followed: f[1] / f[2] were made */
};

static void frames_make(struct session *s, const struct rx_input *in,
                        const struct rx_outcome *o, int64_t seq, struct input_frames *fr)
{
    fr->full = sse_channel_has_clients(&s->ch);
    fr->patch = sse_channel_has_clients(&s->patch_ch);
    if (!fr->full && !fr->patch)
        return;
    fr->f[0] = event_input(in, seq, &s->scratch);
    if (fr->full)
        fr->f[1] = event_state(&s->state, seq, &s->scratch);
    if (fr->patch)
        fr->f[2] = event_patch(&s->state, o, seq, &s->scratch);
}

static void frames_drop(struct input_frames *fr)
{
    for (int i = 0; i < 3; i++) {
        sse_frame_unref(fr->f[i]);
        fr->f[i] = NULL;
    }
    fr->full = fr->patch = false;
}

/* Publish them, each client woken once, and drop them. */
static void frames_publish(struct session *s, struct input_frames *fr)
{
    if (fr->full)
        publish_frames(s, &s->ch, (struct sse_frame *const[]){fr->f[0], fr->f[1]}, 2);
    if (fr->patch)
        publish_frames(s, &s->patch_ch, (struct sse_frame *const[]){fr->f[0], fr->f[2]},
                       2);
    frames_drop(fr);
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
        /* Effects of every session share the process's workers; the first
           session makes the pool (limits.max_running_effects). */
        .pool = runtime_pool_shared(t->env.cfg->max_running_effects),
        .session_max = t->env.cfg->session_running_effects,
    };

    if (!s)
        return NULL;
    snprintf(s->id, sizeof(s->id), "%s", id);
    s->table = t;
    s->refs = 1;
    s->created_at = now_wall_ms();
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->moved, NULL);
    rx_buf_init(&s->scratch, RX_BUF_STATE_MAX);
    sse_channel_init(&s->ch, (size_t)t->env.cfg->sse_queue_max);
    sse_channel_init(&s->patch_ch, (size_t)t->env.cfg->sse_queue_max);
    host.ctx = s;
    s->rt = runtime_create(&rc, &host);
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
    s->seq = s->applied = seq;
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

/* ---- the pipeline: durable before anyone hears of it (SPEC 6) --------------- */

/*
 * One accepted input on its way to the log, or a verdict that waits for the
 * inputs applied before it. A session keeps them in `pending`, in the order
 * they were applied; they finish in that order (pipeline_advance) once the
 * store has answered, and only then are they published and answered.
 */
struct pending {
    struct store_write w; /* first: the store's callback gets its address */
    struct pending *next;
    struct session *s; /* a reference, dropped once answered */
    uint64_t gen;      /* s->gen when applied */
    bool stored;       /* the store answered, or nothing is asked of it */
    int err;           /* 0, or why it is not stored */
    struct rx_buf input, snapshot;
    struct input_frames fr;
    const struct effect *cause;
    struct submit_result res;
    session_done_fn done;
    void *arg;
};

/*
 * The store refused an input the state already took, or it could not be
 * encoded: put the state back as the log has it, so memory never runs ahead
 * of the truth. Every input applied after it was applied on the state now
 * gone: they answer `err` as they finish (their gen is older). Lock held.
 */
static void undo_unstored(struct session *s, int err)
{
    struct store *st = s->table->env.store;
    struct rx_error why;
    struct rx_state fresh;
    int64_t seq = 0;

    store_last_error(st, &why);
    log_error("session %s: input %lld not stored (%s); %lld input(s) undone", s->id,
              (long long)s->seq + 1, why.text, (long long)(s->applied - s->seq));
    if (store_session_load(st, s->id, &fresh, &seq)) {
        /* Neither the state that ran ahead nor an empty one is the truth: the
           session takes no more input until a restart rebuilds it. */
        log_error("session %s: cannot reload it from the log; it refuses inputs until "
                  "a restart",
                  s->id);
        s->broken = true;
        seq = s->seq;
    } else {
        rx_state_release(&s->state);
        s->state = fresh;
    }
    s->seq = s->applied = seq;
    s->gen++;
    s->fail_err = err;
    s->exclusive = false;
    s->rebuilt = true;
}

static void pending_free(struct pending *p)
{
    frames_drop(&p->fr);
    rx_buf_release(&p->input);
    rx_buf_release(&p->snapshot);
    free(p);
}

/*
 * Nothing on its way: what waits for a settled state runs now. Effects are
 * reconciled with the state every input so far made, with the cause of the
 * last one (an effect's input always goes alone, so a window of several is
 * of clients' inputs); after a rebuild, with none. Lock held.
 */
static void settle(struct session *s)
{
    const struct config *cfg = s->table->env.cfg;

    s->settle_due = false;
    msgstream_settle(&s->streams, &s->state);
    if (!s->deleted && cfg->effects &&
        runtime_reconcile(s->rt, &s->state, s->rebuilt ? NULL : s->last_cause))
        log_warn("session %s: out of memory starting effects", s->id);
    s->rebuilt = false;
    s->last_cause = NULL;
}

/* Settles are needed when there are effects to reconcile or streams to end. */
static bool needs_settle(struct session *s)
{
    return s->table->env.cfg->effects || s->streams;
}

/* One record reached the head with its answer: make it so. Lock held. */
static void pending_finish(struct session *s, struct pending *p)
{
    if (p->gen != s->gen) {
        p->err = s->fail_err; /* applied on a state since rebuilt from the log */
        return;
    }
    if (p->res.verdict != RX_ACCEPTED)
        return; /* a verdict on stored inputs only: it stands */
    if (p->err) {
        undo_unstored(s, p->err);
        return;
    }
    s->seq = p->res.seq;
    frames_publish(s, &p->fr);
    set_title(s);
    s->last_cause = p->cause;
    if (p->cause)
        s->exclusive = false;
}

/*
 * Finish the records at the head that have their answer, in order, and hand
 * them back to be answered (pipeline_answer) once the lock is released.
 * Lock held.
 */
static struct pending *pipeline_advance(struct session *s)
{
    struct pending *out = NULL, **tail = &out, *p;

    while ((p = s->pending) && p->stored) {
        s->pending = p->next;
        if (!s->pending)
            s->pend_last = NULL;
        pending_finish(s, p);
        p->next = NULL;
        *tail = p;
        tail = &p->next;
    }
    if (!out)
        return NULL;
    if (!s->pending)
        settle(s);
    else if (needs_settle(s))
        s->settle_due = true; /* no new input until this window is through */
    pthread_cond_broadcast(&s->moved);
    return out;
}

/* Answer finished records, lock NOT held: the callers' callbacks run here. */
static void pipeline_answer(struct pending *list)
{
    while (list) {
        struct pending *p = list;
        struct session *s = p->s;

        list = p->next;
        if (!p->cause)
            __atomic_sub_fetch(&s->waiting, 1, __ATOMIC_RELAXED);
        p->done(p->arg, p->err, &p->res);
        pending_free(p);
        session_unref(s);
    }
}

/* The store's answer for one input (store_done_fn), on its notifier thread. */
static void pending_stored(struct store_write *w, int err)
{
    struct pending *p = (struct pending *)w;
    struct session *s = p->s;
    struct pending *finished;

    pthread_mutex_lock(&s->lock);
    p->stored = true;
    p->err = err;
    finished = pipeline_advance(s);
    pthread_mutex_unlock(&s->lock);
    pipeline_answer(finished);
}

/* Append a record to the pipeline, with a session reference. Lock held. */
static void pipeline_push(struct session *s, struct pending *p)
{
    session_ref(s);
    p->s = s;
    p->gen = s->gen;
    if (s->pend_last)
        s->pend_last->next = p;
    else
        s->pending = p;
    s->pend_last = p;
}

/*
 * Wait, lock held, until an input may be applied. A client's waits while a
 * settled state is wanted (a reader, an effect's input, effects to
 * reconcile) or an effect's input is on its way. An effect's input goes
 * alone: it waits until nothing is on its way, and what comes after waits
 * for it, so the reconcile after it knows its cause (runtime_reconcile). The
 * waits are bounded by one commit: nothing on its way waits for anything.
 */
static void wait_turn(struct session *s, const struct effect *cause)
{
    if (!cause) {
        while (s->readers || s->fx_waiting || s->exclusive || s->settle_due)
            pthread_cond_wait(&s->moved, &s->lock);
        return;
    }
    s->fx_waiting++;
    while (s->pending || s->readers || s->exclusive)
        pthread_cond_wait(&s->moved, &s->lock);
    /* Clients wait while an effect's input waits: the last one to leave must
       wake them, also when its input then goes nowhere (cancelled, rejected,
       the session deleted), or a client's POST would sleep until some other
       input came. */
    if (--s->fx_waiting == 0)
        pthread_cond_broadcast(&s->moved);
}

/*
 * Wait, lock held, until nothing is on its way: what a reader then sees of
 * the state is in the log and published (a subscriber's first state, a
 * message). New inputs wait meanwhile, so this ends within one commit.
 */
static void settle_wait(struct session *s)
{
    if (!s->pending)
        return;
    s->readers++;
    while (s->pending)
        pthread_cond_wait(&s->moved, &s->lock);
    if (--s->readers == 0)
        pthread_cond_broadcast(&s->moved);
}

/*
 * A snapshot is due at every store.snapshot_every-th input, unless the
 * inputs logged since the last one are less than 1/SESSION_SNAPSHOT_SHARE of
 * its size: then at the next such input. A long session's state is not
 * rewritten whole for a few small inputs (a 3 MB state every 200 inputs of
 * 100 bytes would write the log 150 times over), and replay stays bounded:
 * what it replays is smaller than a share of the state it would read anyway.
 */
#define SESSION_SNAPSHOT_SHARE 4

static bool snapshot_due(struct session *s)
{
    int every = s->table->env.cfg->snapshot_every;

    return every > 0 && s->applied % every == 0 &&
           s->logged_since_snapshot * SESSION_SNAPSHOT_SHARE >= s->snapshot_bytes;
}

/*
 * Encode what the log keeps of an accepted input (and, when one is due, a
 * snapshot of the state it made) and the frames that will announce it, while
 * the state is the one it made. Lock held. 0 or -ENOMEM.
 */
static int pending_fill(struct session *s, struct pending *p, const struct rx_input *in,
                        const struct rx_outcome *o)
{
    if (rx_input_encode(in, &p->input))
        return -ENOMEM;
    s->logged_since_snapshot += p->input.len;
    if (snapshot_due(s)) {
        if (rx_state_encode(&s->state, &p->snapshot))
            return -ENOMEM;
        p->w.snapshot = p->snapshot.data;
        p->w.snapshot_len = p->snapshot.len;
        s->snapshot_bytes = p->snapshot.len;
        s->logged_since_snapshot = 0;
    }
    p->w.sid = s->id;
    p->w.seq = s->applied;
    p->w.updated_at = in->timestamp;
    p->w.input = p->input.data;
    p->w.input_len = p->input.len;
    p->w.done = pending_stored;
    frames_make(s, in, o, s->applied, &p->fr);
    return 0;
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

/*
 * Clients queue for a session, but only so many: past that the queue is
 * full. A client counts from its arrival until it is answered (applied and,
 * with a log, durable).
 */
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

/* Without a log: published and reconciled at once, as applied. Lock held. */
static void publish_now(struct session *s, const struct rx_input *in,
                        const struct rx_outcome *o, const struct effect *cause)
{
    struct input_frames fr = {{NULL, NULL, NULL}, false, false};

    s->seq = s->applied;
    frames_make(s, in, o, s->seq, &fr);
    frames_publish(s, &fr);
    set_title(s);
    s->last_cause = cause;
    settle(s);
}

int session_submit_start(struct session *s, struct rx_input *in,
                         const struct effect *cause, struct submit_result *res,
                         session_done_fn done, void *arg)
{
    struct store *store = s->table->env.store;
    struct pending *p = NULL;
    struct rx_outcome out;
    char fresh[RX_UUID_LEN];
    int err = 0;

    memset(res, 0, sizeof(*res));
    if (!queue_enter(s, cause))
        return -EBUSY;
    /* Made before the state changes: once it has, the input must be logged. */
    if (store && !(p = calloc(1, sizeof(*p)))) {
        err = -ENOMEM;
        goto out_leave;
    }
    if (p) {
        rx_buf_init(&p->input, RX_BUF_STATE_MAX);
        rx_buf_init(&p->snapshot, RX_BUF_STATE_MAX);
    }
    pthread_mutex_lock(&s->lock);
    wait_turn(s, cause);
    if (s->deleted) {
        err = -ENOENT;
        goto out_unlock;
    }
    if (s->broken) {
        err = -EIO;
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
        goto out_verdict;
    }
    stamp(s, in);

    if ((err = rx_machine_apply(&s->state, in, &out)))
        goto out_unlock;
    metrics_input(out.verdict, out.reason);
    res->verdict = out.verdict;
    res->reason = out.reason;
    res->field = out.field;
    res->timestamp = in->timestamp;
    res->seq = s->applied;
    if (out.verdict != RX_ACCEPTED)
        goto out_verdict;

    s->applied++;
    res->seq = s->applied;
    /* Chunks may stream before the start is durable: the buffer is there. */
    if (in->type == RX_IN_BRAIN_SEND_MESSAGE_START && !stream_open(s, in->message_id))
        log_warn("session %s: no buffer for message %s", s->id, in->message_id);
    if (!store) {
        publish_now(s, in, &out, cause);
        goto out_unlock;
    }
    p->res = *res;
    p->done = done;
    p->arg = arg;
    p->cause = cause;
    if ((err = pending_fill(s, p, in, &out))) {
        /* Applied but it cannot be logged: undone in its turn, like a refusal. */
        if (!s->pending) {
            undo_unstored(s, err);
            goto out_unlock;
        }
        p->err = err;
        p->stored = true;
    } else if (cause) {
        s->exclusive = true;
    }
    /* Queued under the lock: the log keeps the order in which inputs applied. */
    pipeline_push(s, p);
    if (!p->stored)
        store_write_queue(store, &p->w);
    p = NULL;
    err = SESSION_PENDING;
    goto out_unlock;

out_verdict:
    /* Judged on inputs still on their way: it is answered after them. */
    if (p && s->pending) {
        p->res = *res;
        p->done = done;
        p->arg = arg;
        p->cause = cause;
        p->stored = true;
        pipeline_push(s, p);
        p = NULL;
        err = SESSION_PENDING;
    }
out_unlock:
    pthread_mutex_unlock(&s->lock);
    if (p)
        pending_free(p);
out_leave:
    if (err != SESSION_PENDING && !cause)
        __atomic_sub_fetch(&s->waiting, 1, __ATOMIC_RELAXED);
    return err;
}

/* session_submit's wait for an answer that comes through the pipeline. */
struct submit_wait {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool finished;
    int err;
    struct submit_result res;
};

static void submit_wait_done(void *arg, int err, const struct submit_result *res)
{
    struct submit_wait *w = arg;

    pthread_mutex_lock(&w->lock);
    w->err = err;
    w->res = *res;
    w->finished = true;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

int session_submit(struct session *s, struct rx_input *in, const struct effect *cause,
                   struct submit_result *res)
{
    struct submit_wait w = {.finished = false};
    int err;

    pthread_mutex_init(&w.lock, NULL);
    pthread_cond_init(&w.cond, NULL);
    err = session_submit_start(s, in, cause, res, submit_wait_done, &w);
    if (err == SESSION_PENDING) {
        pthread_mutex_lock(&w.lock);
        while (!w.finished)
            pthread_cond_wait(&w.cond, &w.lock);
        pthread_mutex_unlock(&w.lock);
        err = w.err;
        *res = w.res;
    }
    pthread_cond_destroy(&w.cond);
    pthread_mutex_destroy(&w.lock);
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

/*
 * The one encoder, straight into the caller's buffer: the records' cached
 * encodings are copied, nothing is parsed, and the lock is held only for
 * the copy.
 */
int session_state_encode(struct session *s, struct rx_buf *out)
{
    int err;

    pthread_mutex_lock(&s->lock);
    settle_wait(s); /* never a state ahead of the log (group commit) */
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
    /* Straight from the log's read-only connection: no session lock either. */
    if (!s->table->env.store)
        return -ENOSYS;
    return store_history_text(s->table->env.store, s->id, after, limit, out);
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
       one never comes before it (settle_wait). */
    settle_wait(s);
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
    settle_wait(s); /* only what is durable is told */
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
    settle_wait(s); /* only what is durable is told */
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
