/*
 * records - where the protocols keep what they remember of sessions (SPEC
 * 6.2): the /v1 continuity map, LangGraph threads' metadata and finished
 * runs. With a store they are the store's records (store_record_*), so they
 * survive a restart and every node of a cluster reads the same; with
 * `--db :memory:` there is no store and each protocol keeps its own in
 * memory, as before.
 *
 * A record that changes where a session's lock is held (a run or a chat
 * that ends, called back by the engine) cannot wait for the store there
 * (a commit and its fsync): records_put_later queues it for this module's
 * writer thread, which stores the queued records in order. The caller keeps
 * its own copy in memory until then, so this node never misses it; other
 * nodes and a restart see it once written (milliseconds), and
 * records_stop writes everything queued before the store closes.
 *
 * One per process, like the protocols' registries: records_start once the
 * store is open, records_stop before it closes.
 * Depends on store/store.h and effects/log only. Locks: the queue's lock is
 * a leaf; no store call is made with it held.
 * Ownership: the store is borrowed from records_start to records_stop;
 * every string passed in is copied.
 */
#ifndef RECORDS_H
#define RECORDS_H

#include <stddef.h>

#include "state_machine/rx_common.h"

/* The most bytes of record texts waiting for the writer thread at once. */
#define RECORDS_QUEUE_BYTES ((size_t)64 << 20)

struct store;

/*
 * Keep records in `st` (borrowed; NULL: none, records_store() says NULL)
 * and start the writer thread. 0, or -ENOMEM / -EAGAIN (no thread).
 */
int records_start(struct store *st) RX_WUR;
/* Write what is queued, stop the writer, forget the store. Idempotent. */
void records_stop(void);
/* The store records live in, or NULL (keep them in memory). Any thread. */
struct store *records_store(void);

/*
 * Queue store_record_put(kind, key, sid, text[0..len)) for the writer
 * thread (everything copied): for callers that may hold a session's lock.
 * A put that fails is logged (a session deleted meanwhile, -ENOENT, only
 * quietly). 0, -ENOMEM, -ENOBUFS (RECORDS_QUEUE_BYTES of texts wait
 * already: the store is slower than the records come; nothing queued) or
 * -ENODEV (no store).
 */
int records_put_later(const char *kind, const char *key, const char *sid,
                      const char *text, size_t len) RX_WUR;
/* Wait until every put queued before this call is written (or failed). */
void records_flush(void);

#endif
