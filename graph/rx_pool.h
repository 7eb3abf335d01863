/*
 * rx_pool - worker threads that run one superstep's tasks at once.
 *
 * The one place graph/ starts threads (SPEC 8: a step's tasks run
 * concurrently and may block on I/O). Depends on pthreads and
 * state_machine/ only. Workers are kept between steps, so a fan-out costs a
 * wake-up per task instead of a thread creation; the pool grows until every
 * queued job has a worker of its own, so a task that blocks never holds
 * another back, and it never shrinks before rx_pool_destroy.
 * Several threads may call rx_pool_run at once (one batch each).
 * Not effects/runtime_pool, on purpose: that one is fire-and-forget under a
 * configured bound (limits.max_running_effects), FIFO across sessions, and
 * takes a queued effect back on cancel; this one is fork-join (the caller
 * waits for its batch, runs job 0 and whatever no worker took yet) and
 * unbounded, since a step's tasks must all run at once (SPEC 8). They share
 * only a worker loop; one pool with both modes would be larger than the two.
 * Ownership: heap object (rx_pool_create/_destroy); the jobs array is the
 * caller's and must stay valid until rx_pool_run returns; the pool owns its
 * workers.
 */
#ifndef RX_POOL_H
#define RX_POOL_H

#include <stddef.h>

#include "state_machine/rx_common.h"

struct rx_pool_job {
    void (*fn)(void *arg); /* the caller's: fn(arg) runs once */
    void *arg;
    /* The pool's own bookkeeping. */
    struct rx_pool_job *next;
    struct rx_pool_batch *batch;
};

struct rx_pool;

/* A new pool with no workers yet (they start on demand), or NULL. */
struct rx_pool *rx_pool_create(void) RX_WUR;
/* Waits for every worker to exit, then frees; no batch may be running. NULL is ok. */
void rx_pool_destroy(struct rx_pool *p);
/*
 * Run every job of jobs[0..n) once, concurrently: job 0 on the calling
 * thread, the others on workers, and the caller also runs any job of the
 * batch no worker has taken yet. Returns when all have finished. 0, or the
 * negative errno of a failed pthread_create (-EAGAIN, ...): fewer workers
 * than jobs, but every job still ran.
 */
int rx_pool_run(struct rx_pool *p, struct rx_pool_job *jobs, size_t n) RX_WUR;

#endif
