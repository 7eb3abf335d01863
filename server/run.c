/*
 * run - one agent run on a session, and the lane of runs. See run.h.
 *
 * A run goes QUEUED (in the lane, not at its head or the session busy) ->
 * KICKED (handed to the submitting thread) -> LIVE (its inputs applied) ->
 * ENDED. Everything about a run's phase is guarded by its session's lock.
 * The submitting thread ("the starter") also drops the lane's references of
 * ended runs, so no run or session is ever freed under a session's lock.
 */
#include "server/run.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "effects/log.h"
#include "server/config.h"
#include "server/session_internal.h"
#include "state_machine/rx_effects.h"

enum run_phase { PHASE_QUEUED, PHASE_KICKED, PHASE_LIVE, PHASE_ENDED };

struct run {
    int refs;          /* atomic */
    struct session *s; /* a reference, for the run's whole life */
    const struct run_ops *ops;
    void *arg;
    /* Guarded by the session's lock. */
    struct run *next; /* in the session's lane */
    enum run_phase phase;
    enum run_status status;
    size_t applied;     /* inputs applied so far */
    bool cancel_wanted; /* ends INTERRUPTED */
    bool cancel_sent;   /* its user-cancel was submitted */
    /* The starter's: the inputs until they are submitted. */
    struct rx_input *in;
    size_t n;
    struct run *kick_next; /* in the starter's queue of runs to submit */
    struct run *reap_next; /* in its queue of ended runs */
};

/*
 * The starter: runs to submit, and ended runs whose lane reference it drops
 * (a run may be in both queues at once: kicked, then ended before its turn).
 */
struct run_queue {
    struct run *head, **tail;
};

static struct {
    pthread_mutex_t lock; /* a leaf: taken under a session's lock, never around one */
    pthread_cond_t wake;
    struct run_queue kick, reap;
    pthread_t thread;
    bool started, stop;
} starter = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};

static const char *const status_names[] = {"pending", "running", "success", "error",
                                           "interrupted"};

const char *run_status_name(enum run_status st)
{
    return status_names[st];
}

void run_ref(struct run *r)
{
    __atomic_add_fetch(&r->refs, 1, __ATOMIC_RELAXED);
}

void run_unref(struct run *r)
{
    if (!r || __atomic_sub_fetch(&r->refs, 1, __ATOMIC_ACQ_REL))
        return;
    for (size_t i = 0; i < r->n; i++)
        rx_input_release(&r->in[i]);
    free(r->in);
    session_unref(r->s);
    free(r);
}

enum run_status run_status(const struct run *r)
{
    return __atomic_load_n(&r->status, __ATOMIC_RELAXED);
}

struct session *run_session(const struct run *r)
{
    return r->s;
}

bool run_lane_busy(struct session *s)
{
    bool busy;

    pthread_mutex_lock(&s->lock);
    busy = s->runs != NULL;
    pthread_mutex_unlock(&s->lock);
    return busy;
}

/* ---- the starter ------------------------------------------------------------ */

static void *starter_main(void *unused);

/*
 * Hand `r` (with a reference for the starter) to the thread, to submit
 * (`reap` false) or to drop. Any lock may be held.
 */
static void starter_push(struct run *r, bool reap)
{
    struct run_queue *q = reap ? &starter.reap : &starter.kick;

    pthread_mutex_lock(&starter.lock);
    if (!q->head)
        q->tail = &q->head;
    *(reap ? &r->reap_next : &r->kick_next) = NULL;
    *q->tail = r;
    q->tail = reap ? &r->reap_next : &r->kick_next;
    pthread_cond_signal(&starter.wake);
    pthread_mutex_unlock(&starter.lock);
}

/* The next run of a queue, or NULL. starter.lock held. */
static struct run *starter_pop(bool reap)
{
    struct run_queue *q = reap ? &starter.reap : &starter.kick;
    struct run *r = q->head;

    if (r)
        q->head = reap ? r->reap_next : r->kick_next;
    return r;
}

/* ---- the lane (session lock held) -------------------------------------------- */

/*
 * Idle: no effect is wanted (a call waiting for a person wants none) or
 * running. Both count: a brain whose own input removed its key (a
 * compress before its answer, the answer itself) runs on to its end, and
 * its next input may want more. With effects off every state is idle.
 */
static bool session_idle(struct session *s)
{
    struct rx_effect_set fx;
    bool idle;

    if (!s->table->env.cfg->effects)
        return true;
    if (runtime_active(s->rt))
        return false;
    rx_effect_set_init(&fx);
    idle = !rx_effects_at(&s->state, &fx) && fx.len == 0;
    rx_effect_set_release(&fx);
    return idle;
}

/* The head of the lane starts when the session is settled and idle. */
static void lane_pump(struct session *s)
{
    struct run *r = s->runs;

    if (!r || r->phase != PHASE_QUEUED || s->deleted || s->pending || !session_idle(s))
        return;
    r->phase = PHASE_KICKED;
    run_ref(r); /* the starter's */
    starter_push(r, false);
}

static void lane_remove(struct session *s, struct run *r)
{
    for (struct run **p = &s->runs; *p; p = &(*p)->next) {
        if (*p == r) {
            *p = r->next;
            r->next = NULL;
            return;
        }
    }
}

/* End `r` (once): tell the protocol, leave the lane, start the next. */
static void run_end(struct session *s, struct run *r, enum run_status status,
                    enum rx_reason reason, const char *why)
{
    if (r->phase == PHASE_ENDED)
        return;
    r->phase = PHASE_ENDED;
    __atomic_store_n(&r->status, status, __ATOMIC_RELAXED);
    lane_remove(s, r);
    r->ops->ended(r->arg, r, status, s->deleted ? NULL : &s->state, reason, why);
    starter_push(r, true); /* the lane's reference, dropped by the starter */
    lane_pump(s);
}

/* The state a LIVE run ends on: waiting for a person, cancelled, or done. */
static enum run_status final_status(struct session *s, const struct run *r)
{
    if (r->cancel_wanted || rx_state_awaiting_approval(&s->state))
        return RUN_INTERRUPTED;
    return RUN_SUCCESS;
}

void run__applied(struct run *r, int64_t seq)
{
    struct session *s = r->s;

    if (r->phase != PHASE_KICKED || ++r->applied < r->n)
        return;
    r->phase = PHASE_LIVE;
    __atomic_store_n(&r->status, RUN_RUNNING, __ATOMIC_RELAXED);
    r->ops->started(r->arg, r, &s->state, seq);
}

void run__patch(struct session *s, const struct rx_outcome *o, int64_t seq)
{
    struct run *r = s->runs;

    if (r && r->phase == PHASE_LIVE && r->ops->patch)
        r->ops->patch(r->arg, r, &s->state, o, seq);
}

void run__settled(struct session *s)
{
    struct run *r = s->runs;

    if (r && r->phase == PHASE_LIVE) {
        r->ops->step(r->arg, r, &s->state, s->seq);
        if (session_idle(s))
            run_end(s, r, final_status(s, r), RX_REASON_NONE, NULL);
    }
    lane_pump(s);
}

void run__effect_ended(struct session *s)
{
    struct run *r = s->runs;

    /* Unsettled: the settle to come judges (its inputs may want more). */
    if (s->pending)
        return;
    if (r && r->phase == PHASE_LIVE && session_idle(s))
        run_end(s, r, final_status(s, r), RX_REASON_NONE, NULL);
    lane_pump(s);
}

void run__delta(struct session *s, const char *mid, const char *delta, bool reasoning)
{
    struct run *r = s->runs;

    if (r && r->phase == PHASE_LIVE)
        r->ops->delta(r->arg, r, mid, delta, reasoning);
}

void run__session_stopped(struct session *s)
{
    while (s->runs)
        run_end(s, s->runs, RUN_ERROR, RX_REASON_NONE,
                "the session was deleted or the server is stopping");
}

/* ---- submitting ---------------------------------------------------------------- */

/* Why an input could not be taken, in words (the protocols show it). */
static const char *submit_error_text(int err)
{
    switch (err) {
    case -EBUSY:
        return "too many inputs are waiting for this session";
    case -ENOENT:
        return "the session was deleted";
    case -ENOSPC:
        return "the store is full";
    case -EIO:
        return "the store is unusable";
    case -EREMOTE:
    case -ESTALE:
        return "another node of the cluster owns this session: run it there";
    case -ENOMEM:
        return "out of memory";
    default:
        return "the input could not be taken";
    }
}

/*
 * One input's answer (session_done_fn, or called directly): a refusal or a
 * failure ends the run; an input that changed nothing (an idempotent retry)
 * counts as applied. No lock held; `arg` carries a reference.
 */
static void input_answered(void *arg, int err, const struct submit_result *res)
{
    struct run *r = arg;
    struct session *s = r->s;

    pthread_mutex_lock(&s->lock);
    if (r->phase != PHASE_ENDED) {
        if (err) {
            run_end(s, r, RUN_ERROR, RX_REASON_NONE, submit_error_text(err));
        } else if (res->verdict == RX_REJECTED) {
            run_end(s, r, RUN_ERROR, res->reason, rx_reason_name(res->reason));
        } else if (res->verdict == RX_UNCHANGED) {
            run__applied(r, res->seq);
            if (r->phase == PHASE_LIVE && !s->pending && session_idle(s))
                run__settled(s);
        }
    }
    pthread_mutex_unlock(&s->lock);
    run_unref(r);
}

/*
 * A run of no inputs (a client that only follows the session): it starts
 * with the state its turn found, and ends as soon as the session is idle.
 */
static void run_follow(struct run *r)
{
    struct session *s = r->s;

    pthread_mutex_lock(&s->lock);
    if (r->phase == PHASE_KICKED) {
        r->phase = PHASE_LIVE;
        __atomic_store_n(&r->status, RUN_RUNNING, __ATOMIC_RELAXED);
        r->ops->started(r->arg, r, &s->state, s->applied);
        if (!s->pending && session_idle(s))
            run_end(s, r, final_status(s, r), RX_REASON_NONE, NULL);
    }
    pthread_mutex_unlock(&s->lock);
}

/* Submit a kicked run's inputs, in order, each as a client's. */
static void run_submit(struct run *r)
{
    struct session *s = r->s;
    struct submit_result res;

    if (!r->n) {
        run_follow(r);
        return;
    }

    for (size_t i = 0; i < r->n; i++) {
        int err;

        pthread_mutex_lock(&s->lock);
        if (r->phase == PHASE_ENDED) { /* cancelled, or its session stopped */
            pthread_mutex_unlock(&s->lock);
            return;
        }
        pthread_mutex_unlock(&s->lock);
        run_ref(r); /* input_answered's */
        err = session__submit_run(s, &r->in[i], r, &res, input_answered, r);
        if (err != SESSION_PENDING)
            input_answered(r, err, &res);
    }
}

/* A cancel asked while the run was being submitted goes in after its inputs. */
static int send_cancel(struct session *s)
{
    struct rx_input in = {.type = RX_IN_USER_CANCEL};
    struct submit_result res;
    int err = session_submit(s, &in, NULL, &res);

    rx_input_release(&in);
    return err;
}

/*
 * A run from the kick queue: a kicked one's inputs are submitted; then a
 * cancel asked for a live run (before or since) is sent, once.
 */
static void run_work(struct run *r)
{
    bool kicked, cancel;

    pthread_mutex_lock(&r->s->lock);
    kicked = r->phase == PHASE_KICKED;
    pthread_mutex_unlock(&r->s->lock);
    if (kicked)
        run_submit(r);
    pthread_mutex_lock(&r->s->lock);
    cancel = r->cancel_wanted && !r->cancel_sent && r->phase == PHASE_LIVE;
    if (cancel)
        r->cancel_sent = true;
    pthread_mutex_unlock(&r->s->lock);
    if (cancel && send_cancel(r->s))
        log_warn("session %s: cannot cancel a run", session_id(r->s));
}

static void *starter_main(void *unused)
{
    (void)unused;
    pthread_mutex_lock(&starter.lock);
    for (;;) {
        struct run *r;
        bool reap = false;

        if (!(r = starter_pop(false)) && (r = starter_pop(true)))
            reap = true;
        if (!r) {
            if (starter.stop)
                break;
            pthread_cond_wait(&starter.wake, &starter.lock);
            continue;
        }
        pthread_mutex_unlock(&starter.lock);
        if (!reap)
            run_work(r);
        run_unref(r);
        pthread_mutex_lock(&starter.lock);
    }
    pthread_mutex_unlock(&starter.lock);
    return NULL;
}

/* Start the thread on first use. 0, or -EAGAIN / -ECANCELED (stopped). */
static int starter_ensure(void)
{
    int err = 0;

    pthread_mutex_lock(&starter.lock);
    if (starter.stop)
        err = -ECANCELED;
    else if (!starter.started &&
             pthread_create(&starter.thread, NULL, starter_main, NULL))
        err = -EAGAIN;
    else
        starter.started = true;
    pthread_mutex_unlock(&starter.lock);
    return err;
}

void run_shutdown(void)
{
    bool join;

    pthread_mutex_lock(&starter.lock);
    starter.stop = true;
    join = starter.started;
    starter.started = false;
    pthread_cond_signal(&starter.wake);
    pthread_mutex_unlock(&starter.lock);
    if (join)
        pthread_join(starter.thread, NULL);
}

/* ---- the protocols' calls --------------------------------------------------------- */

int run_start(struct session *s, struct rx_input *in, size_t n, const struct run_ops *ops,
              void *arg, struct run **out)
{
    int lane_max = s->table->env.cfg->session_queue_max, n_runs = 0;
    struct run *r, **tail;
    int err = starter_ensure();

    *out = NULL;
    r = err ? NULL : calloc(1, sizeof(*r));
    if (r)
        r->in = calloc(n ? n : 1, sizeof(*r->in));
    if (!r || !r->in) {
        free(r);
        for (size_t i = 0; i < n; i++)
            rx_input_release(&in[i]);
        return err ? err : -ENOMEM;
    }
    memcpy(r->in, in, n * sizeof(*in));
    memset(in, 0, n * sizeof(*in));
    r->n = n;
    r->refs = 2; /* the caller's and the lane's */
    session_ref(s);
    r->s = s;
    r->ops = ops;
    r->arg = arg;
    r->status = RUN_PENDING;
    pthread_mutex_lock(&s->lock);
    if (s->deleted) {
        pthread_mutex_unlock(&s->lock);
        r->refs = 1;
        run_unref(r);
        return -ENOENT;
    }
    for (tail = &s->runs; *tail && n_runs < lane_max; tail = &(*tail)->next)
        n_runs++;
    if (n_runs >= lane_max) {
        pthread_mutex_unlock(&s->lock);
        r->refs = 1;
        run_unref(r);
        return -EBUSY;
    }
    *tail = r;
    lane_pump(s);
    pthread_mutex_unlock(&s->lock);
    *out = r;
    return 0;
}

void run_cancel_held(struct run *r)
{
    switch (r->phase) {
    case PHASE_QUEUED:
        run_end(r->s, r, RUN_INTERRUPTED, RX_REASON_NONE, NULL);
        break;
    case PHASE_KICKED: /* the starter sends it after the inputs */
        r->cancel_wanted = true;
        break;
    case PHASE_LIVE:
        if (r->cancel_wanted)
            break;
        r->cancel_wanted = true;
        run_ref(r); /* the starter's */
        starter_push(r, false);
        break;
    case PHASE_ENDED:
        break;
    }
}

void run_cancel(struct run *r)
{
    pthread_mutex_lock(&r->s->lock);
    run_cancel_held(r);
    pthread_mutex_unlock(&r->s->lock);
}
