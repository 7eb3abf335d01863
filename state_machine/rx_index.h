/*
 * rx_index - an id -> position index over one list of records.
 *
 * Pure: no I/O. Depends on rx_alloc (allocation) only. Open addressing with
 * linear probing; the ids themselves stay in the records (the index stores
 * positions and hashes only), so it costs 8 bytes a slot and nothing while
 * empty.
 * Records are only ever appended or replaced in place with the same id, so an
 * index never needs deletion.
 * Ownership: caller-allocated (rx_index_init/_release). The list is borrowed
 * through `key_at` on every call.
 */
#ifndef RX_INDEX_H
#define RX_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "state_machine/rx_common.h"

/* The id of record i of `list`. */
typedef const char *(*rx_index_key_fn)(const void *list, size_t i);

struct rx_index {
    uint32_t *slots; /* position + 1; 0 = empty */
    uint32_t *hashes;
    size_t cap; /* power of two, or 0 */
    size_t used;
};

void rx_index_init(struct rx_index *ix);
void rx_index_release(struct rx_index *ix);
/* Room for `extra` more ids without allocating. 0 or -ENOMEM (index unchanged). */
int rx_index_reserve(struct rx_index *ix, size_t extra) RX_WUR;
/* The hash the index files `id` under (FNV-1a), for other tables of ids. */
uint32_t rx_index_hash(const char *id);
/* Position of `id`, or -1. */
long rx_index_find(const struct rx_index *ix, const char *id, rx_index_key_fn key_at,
                   const void *list);
/* Record that `id` is at position i. Needs reserved room; cannot fail. */
void rx_index_insert(struct rx_index *ix, const char *id, size_t i);
/* Rebuild from the first n records. 0 or -ENOMEM (index then empty). */
int rx_index_rebuild(struct rx_index *ix, size_t n, rx_index_key_fn key_at,
                     const void *list) RX_WUR;

#endif
