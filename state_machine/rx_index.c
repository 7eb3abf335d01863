/*
 * rx_index - id -> position. See rx_index.h.
 */
#include "state_machine/rx_index.h"

#include <errno.h>
#include <string.h>

#include "state_machine/rx_alloc.h"

void rx_index_init(struct rx_index *ix)
{
    memset(ix, 0, sizeof(*ix));
}

void rx_index_release(struct rx_index *ix)
{
    rx_free(ix->slots);
    rx_free(ix->hashes);
    rx_index_init(ix);
}

/* FNV-1a: short ids, no need for more. */
uint32_t rx_index_hash(const char *id)
{
    uint32_t h = 2166136261u;

    for (; *id; id++)
        h = (h ^ (unsigned char)*id) * 16777619u;
    return h;
}

static void place(struct rx_index *ix, uint32_t h, size_t pos)
{
    size_t mask = ix->cap - 1, at = h & mask;

    while (ix->slots[at])
        at = (at + 1) & mask;
    ix->slots[at] = (uint32_t)pos + 1;
    ix->hashes[at] = h;
    ix->used++;
}

int rx_index_reserve(struct rx_index *ix, size_t extra)
{
    struct rx_index grown;
    size_t cap = ix->cap ? ix->cap : 16;
    /* Keep the load under one half: probes stay short. */
    while ((ix->used + extra) * 2 > cap)
        cap *= 2;
    if (cap == ix->cap)
        return 0;
    grown.cap = cap;
    grown.used = 0;
    grown.slots = rx_malloc(cap * sizeof(*grown.slots));
    grown.hashes = rx_malloc(cap * sizeof(*grown.hashes));
    if (!grown.slots || !grown.hashes) {
        rx_free(grown.slots);
        rx_free(grown.hashes);
        return -ENOMEM;
    }
    memset(grown.slots, 0, cap * sizeof(*grown.slots));
    for (size_t i = 0; i < ix->cap; i++)
        if (ix->slots[i])
            place(&grown, ix->hashes[i], ix->slots[i] - 1);
    rx_index_release(ix);
    *ix = grown;
    return 0;
}

long rx_index_find(const struct rx_index *ix, const char *id, rx_index_key_fn key_at,
                   const void *list)
{
    uint32_t h;
    size_t mask, at;

    if (!ix->cap)
        return -1;
    h = rx_index_hash(id);
    mask = ix->cap - 1;
    for (at = h & mask; ix->slots[at]; at = (at + 1) & mask)
        if (ix->hashes[at] == h && !strcmp(key_at(list, ix->slots[at] - 1), id))
            return (long)ix->slots[at] - 1;
    return -1;
}

void rx_index_insert(struct rx_index *ix, const char *id, size_t i)
{
    place(ix, rx_index_hash(id), i);
}

int rx_index_rebuild(struct rx_index *ix, size_t n, rx_index_key_fn key_at,
                     const void *list)
{
    int err;

    rx_index_release(ix);
    if ((err = rx_index_reserve(ix, n)))
        return err;
    for (size_t i = 0; i < n; i++)
        rx_index_insert(ix, key_at(list, i), i);
    return 0;
}
