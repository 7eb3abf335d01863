/*
 * runtime_pool - the bounded pool of worker threads the effects of every
 * session run on (docs/ARCHITECTURE.md, "Effects: the pool and what an effect
 * gets"). At most `max` threads for the whole process, made as needed and
 * then reused; effects wait for a worker in one FIFO queue, in the order they
 * were queued. An effect occupies its worker until it returns, blocking
 * included, so `max` bounds the effects running at once, not those started.
 *
 * Not graph/rx_pool (fork-join, unbounded, the caller helps): see there why
 * the two stay apart.
 *
 * The runtime (effects/runtime.c) queues effects and takes back those not yet
 * on a worker through runtime_internal.h; this header is the pool's public
 * side: make, share, measure and destroy it.
 * Depends on pthreads and the effect record of runtime_internal.h only; it
 * touches no runtime, host or session, and nothing from server/.
 * Locking: the pool's lock is a leaf, taken alone or under a session's lock,
 * with nothing taken under it.
 * Ownership: runtime_pool_create's pool is the caller's (runtime_pool_destroy);
 * runtime_pool_shared's belongs to the process and is never destroyed. Queued
 * effects are borrowed: the runtime makes and frees them.
 */
#ifndef RUNTIME_POOL_H
#define RUNTIME_POOL_H

#include "state_machine/rx_common.h"

struct runtime_pool;

/* Workers of the process-wide pool by default. */
#define RUNTIME_POOL_MAX_DEFAULT 64
/* A worker's stack: brains, tools and libcurl run on it. */
#define RUNTIME_WORKER_STACK (256 * 1024)

/*
 * A pool of at most `max_workers` threads (< 1: RUNTIME_POOL_MAX_DEFAULT),
 * none started yet: each is made when an effect is queued and no worker is
 * free, then kept. NULL on ENOMEM.
 */
struct runtime_pool *runtime_pool_create(int max_workers) RX_WUR;
/*
 * Stop the workers (each ends the effect it runs first) and free the pool.
 * Every runtime using it must be idle (runtime_wait_idle). NULL is fine.
 */
void runtime_pool_destroy(struct runtime_pool *p);
/*
 * The process-wide pool, made by the first call with `max_workers` (as for
 * runtime_pool_create); a later call with a larger value raises its maximum,
 * never lowers it. Never destroyed. NULL on ENOMEM.
 */
struct runtime_pool *runtime_pool_shared(int max_workers);

struct runtime_pool_stats {
    int max;     /* workers at most */
    int workers; /* threads made so far */
    int busy;    /* workers running an effect */
    int queued;  /* effects waiting for a worker */
};
/* A consistent reading of the pool's counts (takes the pool's lock). */
void runtime_pool_stats(struct runtime_pool *p, struct runtime_pool_stats *out);

#endif
