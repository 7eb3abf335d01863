/*
 * store_notifier - the thread that answers committed writes, for both
 * backends of the store (store/sqlite, store/pg): group
 * commit (SPEC 6) has a writer thread commit each batch and hand it here,
 * in queue order; this thread calls each write's `done` with no store lock
 * held, so publishing what one commit made durable overlaps the next
 * commit.
 *
 * Depends on store/store.h (struct store_write) and pthreads only.
 * Locks: `lock` is a leaf; no `done` is called with it held.
 * Ownership: struct store_notifier is embedded in its store; the writes are
 * the callers' (store.h), borrowed until their `done` returns.
 */
#ifndef STORE_NOTIFIER_H
#define STORE_NOTIFIER_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "store/store.h"

struct store_notifier {
    pthread_mutex_t lock; /* guards head down to `ended` */
    pthread_cond_t cond;
    struct store_write *head, **tail;
    bool ended; /* the writer is done: answer what is here, then stop */
    pthread_t thread;
    bool started;
};

/* Before anything else of it. Never fails. */
void store_notifier_init(struct store_notifier *n);
/* Start its thread. 0 or a positive pthread error. */
int store_notifier_start(struct store_notifier *n);
/* A batch, first..last linked through `next` in queue order: answer it. */
void store_notifier_push(struct store_notifier *n, struct store_write *first,
                         struct store_write *last);
/* The batch v[0..n) (n > 0), linked again in queue order: answer it. */
void store_notifier_push_batch(struct store_notifier *n, struct store_write **v,
                               size_t count);
/* The writer ended (or never started): answer what is left, then end. */
void store_notifier_end(struct store_notifier *n);
/* After store_notifier_end: wait for the thread and release. */
void store_notifier_release(struct store_notifier *n);

#endif
