/*
 * lg_run_internal - what the files of server/protocols/lg_run share: the record
 * itself, the registry's entry points and the event and waiter helpers.
 * Private to lg_run.c (record, engine callbacks), lg_run_table.c (the
 * registry), lg_run_wait.c (streams and waiters) and lg_run_store.c (the
 * records of runs that are over, in the store); the rest of the module
 * uses lg_run.h.
 * Depends on server/protocols/lg_run, lg_frames (the kept frames) and
 * server/sse (the live channel).
 * Locks as in lg_run.h. Ownership: as in lg_run.h; a record owns its texts,
 * frames, channel and one reference to each of last, streamed, emitted and
 * final.
 */
#ifndef LG_RUN_INTERNAL_H
#define LG_RUN_INTERNAL_H

#include <pthread.h>

#include "server/protocols/lg_frames.h"
#include "server/protocols/lg_run.h"
#include "server/sse.h"

struct lg_waiter;

struct lg_run {
    int refs;             /* atomic */
    pthread_mutex_t lock; /* guards everything below but the ids and `over` reads */
    char id[RX_UUID_LEN];
    char tid[SESSION_ID_MAX + 1];
    int64_t created_at, updated_at;
    enum run_status status;
    bool over;   /* written under the lock, read atomically */
    bool listed; /* in the registry (registry's lock) */
    bool kept;   /* its frames are kept (registry's lock) */
    unsigned modes;
    enum lg_multitask mt;
    /* What the run object shows, kept as compact JSON text: a tree of a
       0.7 MB request's metadata and config took ~13x its size (issue 28). */
    char *metadata, *kwargs;
    size_t bytes; /* kept once over: texts, frames, final (registry's lock) */
    bool counted; /* `bytes` is in the registry's sum (registry's lock) */
    const struct config *cfg;
    struct run *run; /* the engine's run, once started */
    struct lg_frames frames;
    struct sse_channel ch;
    int64_t step;
    json_t *last;     /* the messages as the last step settled them */
    json_t *streamed; /* {message id: true} for messages streamed as chunks */
    json_t *emitted;  /* {message id: true} for messages sent whole (messages-tuple) */
    json_t *final;    /* what waiters get: the final values, or {"__error__"} */
    struct lg_waiter *waiters;
    struct lg_run *prev, *next; /* the registry, newest first */
};

extern const char *const lg_run__mt_names[];

/* Register `lr` (the registry takes a reference) and keep the registry bounded. */
void lg_run__add(struct lg_run *lr);
/*
 * `lr` is over (no lock held but the session's): count what it keeps and
 * unlist the oldest finished records past limits.lg_runs_bytes. Their
 * registry references wait for an HTTP thread to drop them (never under a
 * session's lock, where freeing another thread's run is not allowed).
 */
void lg_run__ended(struct lg_run *lr);
/* Unregister `lr` (drops the registry's reference) when it is listed. */
void lg_run__remove(struct lg_run *lr);
/* NEW: the run object (record's lock held). */
json_t *lg_run__json_locked(struct lg_run *lr);
/* One event, kept and published (record's lock held); `j` is stolen. */
void lg_run__emit_json(struct lg_run *lr, const char *event, json_t *j);
/* The run is over (record's lock held): answer every waiter. */
void lg_run__finish_waiters(struct lg_run *lr);

/*
 * A record of thread `tid` with its texts (malloc'd, stolen, even on
 * failure; NULL is a failure), its channel and frames, status pending, no
 * id, not registered. NEW reference, or NULL on ENOMEM.
 */
struct lg_run *lg_run__alloc(const struct config *cfg, const char *tid, char *metadata,
                             char *kwargs);

/* ---- lg_run_store.c: the durable record of a run that is over ---- */

/*
 * `lr` is over: its record (the run object's fields, the error if any) is
 * queued for the store (server/records; nothing without a store). No lock
 * held but the session's.
 */
void lg_run__persist(struct lg_run *lr);
/* Delete `lr`'s record from the store (DELETE .../runs/<rid>); none: nothing. */
void lg_run__unstore(struct lg_run *lr);
/* Did the last run of `tid` that the store knows of end with an error? (false: no store)
 */
bool lg_run__last_failed(const char *tid);
/* NEW: the runs of `tid` the registry holds, newest first, `status` (NULL: any), paged.
 */
json_t *lg_run__list_memory(const char *tid, const char *status, size_t limit,
                            size_t offset);

#endif
