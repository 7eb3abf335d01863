/*
 * runtime_internal - what effects/runtime.c and effects/runtime_pool.c share
 * and nothing else may see: struct effect (an effect's record), its place,
 * and the intrusive FIFO (struct fx_queue) that links effects both in a
 * runtime's `waiting` list and in the pool's queue.
 *
 * An effect lives in one place at a time:
 *   FX_WAITING  in its runtime's `waiting` list: the session has `session_max`
 *               effects on workers already (host lock);
 *   FX_QUEUED   in the pool's queue, counted in the runtime's `active`;
 *   FX_ACTIVE   taken by a worker (until it ends), counted in `active`.
 * Independently it is in rt->running (started, not cancelled; at most one per
 * key) or rt->draining (cancelled, still on a worker). A cancel of a waiting
 * or queued effect frees it on the spot. FX_QUEUED -> FX_ACTIVE happens under
 * the pool's lock only, so a cancel (host lock, then pool lock) knows whether
 * a worker has it.
 *
 * Only for effects/runtime.c and effects/runtime_pool.c. Depends on
 * effects/runtime and state_machine/ (the effects a state wants); nothing
 * from server/.
 * Ownership: a struct effect is made and freed by the runtime (runtime.c);
 * the pool only links it into its queue (borrowed) and hands it to
 * effect_run() on a worker, which frees it.
 */
#ifndef RUNTIME_INTERNAL_H
#define RUNTIME_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "effects/runtime.h"
#include "state_machine/rx_effects.h"
#include "state_machine/rx_state.h"

enum fx_place { FX_WAITING, FX_QUEUED, FX_ACTIVE };

/*
 * Which of the process-wide gauges (runtime_gauges) counts an effect. Moved
 * under its runtime's host lock only: waiting from its start until a worker
 * takes it up under that lock, running until it ends, draining once cancelled
 * on a worker. An effect freed before a worker had it leaves from waiting.
 */
enum fx_gauge { FX_G_NONE, FX_G_WAITING, FX_G_RUNNING, FX_G_DRAINING };

struct effect {
    struct runtime *rt;
    struct effect *next;          /* in rt->running or rt->draining */
    struct effect *qprev, *qnext; /* in rt->waiting or the pool's queue */
    enum fx_place place;
    enum fx_gauge gauge;
    struct rx_effect spec;
    /* What it gets, made under the host's lock when a worker takes it up. */
    struct rx_state view; /* an ask's (rx_context_view) */
    bool has_view;
    char *resume_id;   /* an ask's own streaming message, or NULL */
    char *resume_text; /* what was shown of it (host->resume), or NULL */
    size_t resume_len;
    char *tool_name;       /* a tool's record: name and parameters (the id is */
    char *tool_parameters; /* spec.tool_call_id) */
    int cancel_fd;         /* eventfd, readable once cancelled; -1 until taken up */
    bool cancelled;
    /* Its own input removed its key, which is still gone: only a client's input
       cancels it now (see runtime_reconcile). Lock held. */
    bool orphan;
    int attempt; /* 0 for a start by reconcile, n for the nth restart since */
    struct timespec started;
};

/* An intrusive FIFO of effects (qprev/qnext). */
struct fx_queue {
    struct effect *head, *tail;
    int len;
};

/* Appends fx to the tail of q. */
static inline void fx_queue_push(struct fx_queue *q, struct effect *fx)
{
    fx->qnext = NULL;
    fx->qprev = q->tail;
    if (q->tail)
        q->tail->qnext = fx;
    else
        q->head = fx;
    q->tail = fx;
    q->len++;
}

/* Takes fx out of q, wherever it is; fx must be in q. */
static inline void fx_queue_unlink(struct fx_queue *q, struct effect *fx)
{
    if (fx->qprev)
        fx->qprev->qnext = fx->qnext;
    else
        q->head = fx->qnext;
    if (fx->qnext)
        fx->qnext->qprev = fx->qprev;
    else
        q->tail = fx->qprev;
    fx->qprev = fx->qnext = NULL;
    q->len--;
}

/* The head of q, taken out; NULL when q is empty. */
static inline struct effect *fx_queue_pop(struct fx_queue *q)
{
    struct effect *fx = q->head;

    if (fx)
        fx_queue_unlink(q, fx);
    return fx;
}

/*
 * Queue fx for a worker of p (runtime_pool.c): a sleeping one is woken, or one
 * more is made while the queue holds more effects than there are sleepers to
 * take them. Takes the pool's lock. 0, or -EAGAIN / -ENOMEM when there is no
 * worker at all (fx is then not queued and is FX_WAITING again).
 */
int runtime_pool_push(struct runtime_pool *p, struct effect *fx) RX_WUR;
/*
 * Where fx is, read under the pool's lock (a worker moves it from QUEUED to
 * ACTIVE under that lock alone); a QUEUED one is taken out of the queue.
 */
enum fx_place runtime_pool_take_back(struct runtime_pool *p, struct effect *fx);

/*
 * runtime.c, called by a worker with no lock held: run fx to its end and free
 * it. Neither fx nor its runtime may be touched after it returns.
 */
void effect_run(struct effect *fx);

#endif
