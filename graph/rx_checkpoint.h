/*
 * rx_checkpoint - where rx_graph keeps a checkpoint after every superstep,
 * keyed by thread id: an interface (four functions in a struct), and the one
 * implementation that exists today, an in-memory store.
 *
 * The memory store keeps every checkpoint until it is destroyed and loses
 * them all with the process. A durable SQLite checkpointer (SPEC 8: it
 * survives a crash mid-step and stores only what changed) is future work;
 * it will implement this same interface.
 *
 * Depends on state_machine/ and jansson only; the memory store does no I/O
 * and uses no clock or threads. A checkpoint is a JSON object written by
 * rx_graph ("step", "parent", "state", "next", "joins", and "pending" and
 * "interrupts" when a node interrupted); the store treats it as opaque
 * except that put() sets "id" in its own copy and hands the id back. Ids are
 * strings unique within the store, shorter than RX_CHECKPOINT_ID_LEN (the
 * memory store counts up from "1").
 *
 * Not thread-safe: rx_graph calls it from the invoking thread only, so
 * concurrent invokes sharing one store must be serialised by the caller.
 * Ownership: a store is a heap object (rx_checkpoint_memory_create /
 * rx_checkpoint_destroy). put() borrows the checkpoint and keeps its own
 * deep copy; get() and list() return new references to deep copies the
 * caller may modify freely.
 * Errors: 0 or a negative errno; -ENOENT for an unknown thread or id,
 * -EINVAL when put() is given something other than an object, -ENOMEM.
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
/* NULL is allowed. */
void rx_checkpoint_destroy(struct rx_checkpoint *s);

#endif
