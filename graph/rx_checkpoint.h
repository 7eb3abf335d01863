/*
 * rx_checkpoint - where rx_graph keeps a checkpoint after every superstep,
 * keyed by thread id: an interface (a struct of functions) and two stores,
 * one in memory and one in SQLite (rx_checkpoint_sqlite.h).
 *
 * The memory store keeps every checkpoint until it is destroyed and loses
 * them all with the process. The SQLite store survives the process, a
 * crash mid-step included, and stores each checkpoint as what changed.
 *
 * Depends on state_machine/ and jansson only (the memory store does no I/O
 * and uses no clock). A checkpoint is a JSON object written by rx_graph
 * ("step", "parent", "source", "state", "next", "joins", "ran", and
 * "pending" and "interrupts" when a node interrupted); a store treats it as
 * opaque except that put() sets "id" in its own copy and hands the id back
 * (the SQLite store also reads "parent" and "state" to store what changed).
 * Ids are strings unique within the store, shorter than
 * RX_CHECKPOINT_ID_LEN (both stores count up from "1").
 *
 * Writes: rx_graph stores each task's result as the task finishes
 * (put_writes, keyed by the checkpoint the step started from and the task's
 * id), so that a run continued after a crash does not run those tasks
 * again (get_writes). A store drops the writes of a checkpoint once a
 * checkpoint that has it as parent is put: that one holds their effect.
 *
 * Thread-safe: both stores take a lock per call (tasks and subgraphs of one
 * superstep call from worker threads at once); an implementation must be.
 * Ownership: a store is a heap object (..._create / rx_checkpoint_destroy).
 * put() and put_writes() borrow what they are given and keep their own
 * copy; get(), list() and get_writes() return new references to deep
 * copies the caller may modify freely.
 * Errors: 0 or a negative errno; -ENOENT for an unknown thread or id,
 * -EINVAL when put() is given something other than an object, -EBADMSG for
 * a stored row that cannot be read (corrupt), -EIO for a failing database,
 * -EOPNOTSUPP for an optional function a store lacks, -ENOMEM.
 */
#ifndef RX_CHECKPOINT_H
#define RX_CHECKPOINT_H

#include <jansson.h>
#include "state_machine/rx_common.h"

#define RX_CHECKPOINT_ID_LEN 64

struct rx_checkpoint {
    /* Store cp under thread_id as its newest checkpoint; its id goes to id_out. */
    int (*put)(struct rx_checkpoint *s, const char *thread_id, json_t *cp,
               char id_out[RX_CHECKPOINT_ID_LEN]);
    /* The checkpoint `id` of the thread, or its newest when id is NULL. */
    int (*get)(struct rx_checkpoint *s, const char *thread_id, const char *id,
               json_t **out);
    /* Every checkpoint of the thread, oldest first (an array). */
    int (*list)(struct rx_checkpoint *s, const char *thread_id, json_t **out);
    /* Free the store and every checkpoint in it. */
    void (*destroy)(struct rx_checkpoint *s);
    /* Optional (NULL: not kept). The result of task `task_id` of the step
     * that started from checkpoint_id. */
    int (*put_writes)(struct rx_checkpoint *s, const char *thread_id,
                      const char *checkpoint_id, const char *task_id, json_t *writes);
    /* Those results as {task_id: writes} ({} for none). */
    int (*get_writes)(struct rx_checkpoint *s, const char *thread_id,
                      const char *checkpoint_id, json_t **out);
    /* Retention: forget the thread and its subgraphs' ("<thread>|..."). */
    int (*delete_thread)(struct rx_checkpoint *s, const char *thread_id);
};

/* A new, empty in-memory store (free with rx_checkpoint_destroy), or NULL. */
struct rx_checkpoint *rx_checkpoint_memory_create(void) RX_WUR;

/* Calls through the struct; the returns are the interface's, above. */
int rx_checkpoint_put(struct rx_checkpoint *s, const char *thread_id, json_t *cp,
                      char id_out[RX_CHECKPOINT_ID_LEN]) RX_WUR;
int rx_checkpoint_get(struct rx_checkpoint *s, const char *thread_id, const char *id,
                      json_t **out) RX_WUR;
int rx_checkpoint_list(struct rx_checkpoint *s, const char *thread_id,
                       json_t **out) RX_WUR;
/* put_writes: 0 when the store keeps no writes; get_writes: {} then. */
int rx_checkpoint_put_writes(struct rx_checkpoint *s, const char *thread_id,
                             const char *checkpoint_id, const char *task_id,
                             json_t *writes) RX_WUR;
int rx_checkpoint_get_writes(struct rx_checkpoint *s, const char *thread_id,
                             const char *checkpoint_id, json_t **out) RX_WUR;
/* 0 (also for a thread with no checkpoints), -EINVAL for NULLs, -EOPNOTSUPP. */
int rx_checkpoint_delete_thread(struct rx_checkpoint *s, const char *thread_id) RX_WUR;
/* NULL is allowed. */
void rx_checkpoint_destroy(struct rx_checkpoint *s);

#endif
