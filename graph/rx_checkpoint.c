/*
 * rx_checkpoint - see rx_checkpoint.h. The in-memory store keeps, per thread,
 * an array of deep copies, so nothing a caller or the graph does afterwards
 * can change a past checkpoint (time travel must see what was).
 */
#include "graph/rx_checkpoint.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "state_machine/rx_alloc.h"

struct memory_store {
    struct rx_checkpoint base; /* first: the interface pointer is the store */
    json_t *threads;           /* thread id -> array of checkpoints */
    unsigned long next_id;
};

static int memory_put(struct rx_checkpoint *s, const char *thread_id, json_t *cp,
                      char id_out[RX_CHECKPOINT_ID_LEN])
{
    struct memory_store *m = (struct memory_store *)s;
    json_t *list = json_object_get(m->threads, thread_id);
    json_t *copy;
    char id[RX_CHECKPOINT_ID_LEN];

    if (!json_is_object(cp))
        return -EINVAL;
    snprintf(id, sizeof(id), "%lu", m->next_id + 1);
    copy = json_deep_copy(cp);
    if (!copy || json_object_set_new(copy, "id", json_string(id)))
        goto err_decref_copy;
    if (!list) {
        list = json_array();
        if (json_object_set_new(m->threads, thread_id, list))
            goto err_decref_copy;
    }
    if (json_array_append_new(list, copy))
        return -ENOMEM;
    m->next_id++;
    memcpy(id_out, id, sizeof(id));
    return 0;

err_decref_copy:
    json_decref(copy);
    return -ENOMEM;
}

static int memory_get(struct rx_checkpoint *s, const char *thread_id, const char *id,
                      json_t **out)
{
    struct memory_store *m = (struct memory_store *)s;
    json_t *list = json_object_get(m->threads, thread_id);
    json_t *cp = NULL, *c;
    size_t i;

    if (!list || !json_array_size(list))
        return -ENOENT;
    if (!id) {
        cp = json_array_get(list, json_array_size(list) - 1);
    } else {
        json_array_foreach(list, i, c)
        {
            if (!strcmp(json_string_value(json_object_get(c, "id")), id))
                cp = c;
        }
    }
    if (!cp)
        return -ENOENT;
    *out = json_deep_copy(cp);
    return *out ? 0 : -ENOMEM;
}

static int memory_list(struct rx_checkpoint *s, const char *thread_id, json_t **out)
{
    struct memory_store *m = (struct memory_store *)s;
    json_t *list = json_object_get(m->threads, thread_id);

    if (!list)
        return -ENOENT;
    *out = json_deep_copy(list);
    return *out ? 0 : -ENOMEM;
}

static void memory_destroy(struct rx_checkpoint *s)
{
    struct memory_store *m = (struct memory_store *)s;

    json_decref(m->threads);
    rx_free(m);
}

struct rx_checkpoint *rx_checkpoint_memory_create(void)
{
    struct memory_store *m = rx_malloc(sizeof(*m));

    if (!m)
        return NULL;
    memset(m, 0, sizeof(*m));
    m->threads = json_object();
    if (!m->threads) {
        rx_free(m);
        return NULL;
    }
    m->base.put = memory_put;
    m->base.get = memory_get;
    m->base.list = memory_list;
    m->base.destroy = memory_destroy;
    return &m->base;
}

int rx_checkpoint_put(struct rx_checkpoint *s, const char *thread_id, json_t *cp,
                      char id_out[RX_CHECKPOINT_ID_LEN])
{
    return s->put(s, thread_id, cp, id_out);
}

int rx_checkpoint_get(struct rx_checkpoint *s, const char *thread_id, const char *id,
                      json_t **out)
{
    return s->get(s, thread_id, id, out);
}

int rx_checkpoint_list(struct rx_checkpoint *s, const char *thread_id, json_t **out)
{
    return s->list(s, thread_id, out);
}

void rx_checkpoint_destroy(struct rx_checkpoint *s)
{
    if (s)
        s->destroy(s);
}
