/*
 * rx_pool - worker threads that run one superstep's tasks at once.
 *
 * The graph executor's only link to threads (SPEC 8: a step's tasks run
 * concurrently and may block on I/O). Workers are kept between steps, so a
 * fan-out costs a wake-up per task instead of a thread creation; the pool
 * grows until every task of a batch has a thread of its own, never fewer, so
 * a task that blocks never holds another back.
 * Ownership: heap object (rx_pool_create/_destroy); the jobs array is the
 * caller's and must stay valid until rx_pool_run returns.
 */
#ifndef RX_POOL_H
#define RX_POOL_H

#include <stddef.h>

#include "state_machine/rx_buf.h"
#include "state_machine/rx_common.h"

struct rx_pool_job {
    void (*fn)(void *arg);
    void *arg;
    /* The pool's own bookkeeping. */
    struct rx_pool_job *next;
    struct rx_pool_batch *batch;
};

struct rx_pool;

struct rx_pool *rx_pool_create(void);
/* Waits for idle workers to leave; no batch may be running. */
void rx_pool_destroy(struct rx_pool *p);
/*
 * Run every job, concurrently: job 0 on the calling thread, the others on
 * workers. Returns when all have finished. 0, or -ENOMEM/-EAGAIN when no
 * worker could be had (then the remaining jobs ran on the caller, in order).
 */
int rx_pool_run(struct rx_pool *p, struct rx_pool_job *jobs, size_t n) RX_WUR;

#endif
