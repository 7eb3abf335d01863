/*
 * store_queue - the writes on their way to a backend's writer thread, for
 * both backends (store/sqlite, store/pg): group commit (SPEC 6) has callers
 * queue their writes (store_write_queue) and one writer thread take them in
 * batches, commit each batch as one transaction and hand it to the notifier
 * (store/store_notifier), which answers the writes in queue order. What is
 * queued while one batch commits is the next batch. Also here: the one
 * judgement call of group commit, gathering (store_queue_gather), and the
 * timed waits of an idle writer.
 *
 * The queue also carries the two threads of group commit: the backend's
 * writer (store_queue_start) and the notifier (store/store_notifier), and
 * stops both in order at close.
 *
 * Depends on store/store.h (struct store_write), store/store_notifier.h and
 * pthreads only.
 * Locks: `lock` is a leaf but for the backend's own settings it guards
 * beside the queue (a backend's `durable`); the writer holds it only to wait
 * and to take a batch, never across a commit. No `done` is called with it.
 * Ownership: struct store_queue is embedded in its backend's struct
 * (store_queue_init/_release); the writes are the callers' (store.h),
 * borrowed from store_queue_push until their `done` returns.
 */
#ifndef STORE_QUEUE_H
#define STORE_QUEUE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/store.h"
#include "store/store_notifier.h"

struct store_queue {
    pthread_mutex_t lock; /* guards everything below */
    pthread_cond_t cond;  /* a write was queued (see wake_at), or stopping */
    struct store_write *head, **tail;
    size_t queued; /* writes in the queue */
    /*
     * The queue length at which store_queue_push wakes the writer: 1 while it
     * waits for a first write, the size it gathers for while it gathers. A
     * wake for every write of a batch cost the writer a context switch each,
     * and the thread that queued a futex call.
     */
    size_t wake_at;
    bool stopping; /* store_queue_close: commit what is queued, then end */

    /* Not under the lock: set before the threads run, read at close. */
    pthread_t writer;
    bool writer_started;
    struct store_notifier notifier; /* answers committed writes, in order */
};

/* Before anything else of it. Never fails. */
void store_queue_init(struct store_queue *q);
/*
 * Start the notifier, then the writer: `writer_main(arg)` takes batches
 * (store_queue_take), commits them, hands each to the notifier
 * (store_notifier_push_batch on q->notifier) and, once it takes none after
 * the queue stopped, ends the notifier (store_notifier_end) and returns.
 * 0 or a positive pthread error.
 */
int store_queue_start(struct store_queue *q, void *(*writer_main)(void *), void *arg);
/*
 * The store closes: the writer commits what is queued, the notifier answers
 * it, both end; then the queue is released. After store_queue_init, whether
 * or not store_queue_start ran or succeeded.
 */
void store_queue_close(struct store_queue *q);
/* Queue `w` (its `next` and `err` are reset): store_write_queue. Never fails. */
void store_queue_push(struct store_queue *q, struct store_write *w);

/*
 * lock held. Wait until something is queued or the queue stops, at most
 * `ms` milliseconds (< 0: no limit). true when the wait timed out with
 * nothing queued and the queue not stopping: the writer's idle time.
 */
bool store_queue_wait(struct store_queue *q, int ms);
/*
 * lock held. After a commit that synced (`durable`), the writes it answered
 * come back within moments (clients send their next input), so a batch that
 * is still smaller than the last one (`want`) waits a little for them: until
 * it is as big, or for at most half the last commit's time
 * (`last_commit_ns`), capped by `max_ns`. One fsync then carries them all
 * instead of two. Only the write that completes the batch wakes it.
 */
void store_queue_gather(struct store_queue *q, size_t want, int64_t last_commit_ns,
                        int64_t max_ns, bool durable);
/* lock held. Move up to `max` queued writes, in order, into v: how many. */
size_t store_queue_take(struct store_queue *q, struct store_write **v, size_t max);

#endif
