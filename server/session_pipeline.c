/*
 * session_pipeline - the path of one input through a session, from apply to
 * durable publish (docs/ARCHITECTURE.md, "The path of one input", steps 2-7):
 * session_submit_start applies an input under the session's lock, makes its
 * log row and frames while the state is the one it made, and queues it to the
 * store (group commit); pending_stored, on the store's notifier thread,
 * finishes the records at the head of `pending` in log order, publishes them
 * and settles the session. Public entry points are in session.h; what it
 * shares with session.c is in session_internal.h.
 *
 * Locks: a record is applied and queued under the session's lock, so the log
 * keeps the order in which inputs were applied; nobody waits for the disk with
 * it held (wait_turn and session_settle_wait wait on `moved`, bounded by one
 * commit). pending_stored takes the session's lock with no store lock held;
 * callers' callbacks (pipeline_answer) run with no lock held. SSE locks are
 * taken inside the session's lock, never the other way round.
 *
 * Ownership: a `struct pending` holds a session reference and the caller's
 * callback; both are released once it is answered.
 */
#include "server/run.h"
#include "server/session_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/idgen.h"
#include "effects/log.h"
#include "base/now.h"
#include "effects/toolkit.h"
#include "server/config.h"
#include "server/event.h"
#include "server/metrics.h"
#include "server/session_import.h"
#include "store/store.h"
#include "state_machine/rx_effects.h"
#include "state_machine/rx_json.h"

/* ---- events ---------------------------------------------------------------- */

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
        session_publish_frames(s, &s->ch, (struct sse_frame *const[]){fr->f[0], fr->f[1]},
                               2);
    if (fr->patch)
        session_publish_frames(s, &s->patch_ch,
                               (struct sse_frame *const[]){fr->f[0], fr->f[2]}, 2);
    frames_drop(fr);
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
    char *stream_done; /* w.stream_done when it names a message (SPEC 3.7) */
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
           session takes no more input until it is read back (a restart; in a
           cluster, its next take-over once the database answers). */
        log_error("session %s: cannot reload it from the log; it refuses inputs until "
                  "it is read back",
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
    free(p->stream_done);
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
    s->settle_due = false;
    msgstream_settle(&s->streams, &s->state);
    session__reconcile(s, s->rebuilt ? NULL : s->last_cause);
    if (s->runs)
        run__settled(s);
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
    session_set_title(s);
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
void session_settle_wait(struct session *s)
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
/*
 * The streamed text an applied input ends (SPEC 3.7: the log must not keep
 * an answer twice): the message a brain-send-message-complete names, every
 * one ("") when no answer streams any more, else none (NULL). Borrowed from
 * `in`. Lock held.
 */
static const char *stream_done(const struct session *s, const struct rx_input *in)
{
    if (in->type == RX_IN_BRAIN_SEND_MESSAGE_COMPLETE && in->message_id)
        return in->message_id;
    if (!s->streams)
        return NULL;
    for (size_t i = s->state.assistant.settled; i < s->state.assistant.len; i++)
        if (s->state.assistant.items[i].status == RX_STATUS_STREAMING)
            return NULL;
    return "";
}

static int pending_fill(struct session *s, struct pending *p, const struct rx_input *in,
                        const struct rx_outcome *o)
{
    const char *title = NULL;
    size_t input_len, title_len = 0;

    if (rx_input_encode(in, &p->input))
        return -ENOMEM;
    input_len = p->input.len;
    /* The title from the first message, kept after the input's text: the
       store reads it after the state may have been rebuilt. */
    if (!s->title && s->state.user.len == 1 &&
        (title_len = rx_state_title(&s->state, &title)) &&
        rx_buf_append(&p->input, title, title_len))
        return -ENOMEM;
    s->logged_since_snapshot += input_len;
    session__resize(s, s->bytes + input_len);
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
    /* What the list and a restart read of it without loading it (SPEC 6.2). */
    p->w.messages = (int64_t)(s->state.user.len + s->state.assistant.len);
    p->w.busy = rx_effects_any(&s->state);
    p->w.input = p->input.data;
    p->w.input_len = input_len;
    p->w.title = title_len ? p->input.data + input_len : NULL;
    p->w.title_len = title_len;
    p->w.done = pending_stored;
    if ((p->w.stream_done = stream_done(s, in)) && *p->w.stream_done) {
        if (!(p->stream_done = strdup(p->w.stream_done)))
            return -ENOMEM;
        p->w.stream_done = p->stream_done;
    }
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
    session_set_title(s);
    s->last_cause = cause;
    settle(s);
}

int session__follow_apply(struct session *s, struct rx_input *in)
{
    struct rx_outcome out;
    int err = rx_machine_apply(&s->state, in, &out);

    if (err)
        return err;
    if (out.verdict != RX_ACCEPTED)
        return -EPROTO; /* the owner stored it because it was accepted */
    s->applied++;
    if (in->type == RX_IN_BRAIN_SEND_MESSAGE_START &&
        !msgstream_find(s->streams, in->message_id) &&
        !session_stream_open(s, in->message_id))
        log_warn("session %s: no buffer for message %s", s->id, in->message_id);
    publish_now(s, in, &out, NULL);
    return 0;
}

/* session_submit_start; a run's input (`run` set) is told to it once applied. */
static int submit_start(struct session *s, struct rx_input *in,
                        const struct effect *cause, struct run *run,
                        struct submit_result *res, session_done_fn done, void *arg)
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
    if (s->follower) {
        err = -EREMOTE; /* another node owns it: the caller forwards */
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
    session_stamp_policies(&s->state, s->table->env.tools, in);
    if (!rx_input_calls_depth_ok(in)) {
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
    /* Before run__applied: the run it starts shows this state whole. */
    if (s->runs)
        run__patch(s, &out, s->applied);
    if (run)
        run__applied(run, s->applied); /* before anything of it is published */
    /* Chunks may stream before the start is durable: the buffer is there. */
    if (in->type == RX_IN_BRAIN_SEND_MESSAGE_START) {
        struct msgstream *m = session_stream_open(s, in->message_id);

        if (m)
            m->open_seq = s->applied;
        else
            log_warn("session %s: no buffer for message %s", s->id, in->message_id);
    }
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

int session_submit_start(struct session *s, struct rx_input *in,
                         const struct effect *cause, struct submit_result *res,
                         session_done_fn done, void *arg)
{
    return submit_start(s, in, cause, NULL, res, done, arg);
}

int session__submit_run(struct session *s, struct rx_input *in, struct run *run,
                        struct submit_result *res, session_done_fn done, void *arg)
{
    return submit_start(s, in, NULL, run, res, done, arg);
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
