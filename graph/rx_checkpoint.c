/*
 * rx_checkpoint - see rx_checkpoint.h. The in-memory store keeps, per thread,
 * an array of deep copies, so nothing a caller or the graph does afterwards
 * can change a past checkpoint (time travel must see what was).
 */
#include "graph/rx_checkpoint.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "state_machine/rx_alloc.h"

struct memory_store {
    struct rx_checkpoint base; /* first: the interface pointer is the store */
    pthread_mutex_t lock;      /* subgraphs of one step write at once */
    json_t *threads;           /* thread id -> array of checkpoints */
    json_t *writes;            /* thread id -> {checkpoint id -> {task -> writes}} */
    unsigned long next_id;
};

static int memory_put_locked(struct rx_checkpoint *s, const char *thread_id, json_t *cp,
                             char id_out[RX_CHECKPOINT_ID_LEN])
{
    struct memory_store *m = (struct memory_store *)s;
    json_t *list = json_object_get(m->threads, thread_id);
    json_t *copy;
    const char *parent;
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
    /* The new checkpoint holds what its parent's writes did. */
    parent = json_string_value(json_object_get(cp, "parent"));
    if (parent)
        json_object_del(json_object_get(m->writes, thread_id), parent);
    memcpy(id_out, id, sizeof(id));
    return 0;

err_decref_copy:
    json_decref(copy);
    return -ENOMEM;
}

static int memory_get_locked(struct rx_checkpoint *s, const char *thread_id,
                             const char *id, json_t **out)
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

static int memory_list_locked(struct rx_checkpoint *s, const char *thread_id,
                              json_t **out)
{
    struct memory_store *m = (struct memory_store *)s;
    json_t *list = json_object_get(m->threads, thread_id);

    if (!list)
        return -ENOENT;
    *out = json_deep_copy(list);
    return *out ? 0 : -ENOMEM;
}

static int memory_put(struct rx_checkpoint *s, const char *thread_id, json_t *cp,
                      char id_out[RX_CHECKPOINT_ID_LEN])
{
    struct memory_store *m = (struct memory_store *)s;
    int rc;

    pthread_mutex_lock(&m->lock);
    rc = memory_put_locked(s, thread_id, cp, id_out);
    pthread_mutex_unlock(&m->lock);
    return rc;
}

static int memory_get(struct rx_checkpoint *s, const char *thread_id, const char *id,
                      json_t **out)
{
    struct memory_store *m = (struct memory_store *)s;
    int rc;

    pthread_mutex_lock(&m->lock);
    rc = memory_get_locked(s, thread_id, id, out);
    pthread_mutex_unlock(&m->lock);
    return rc;
}

static int memory_list(struct rx_checkpoint *s, const char *thread_id, json_t **out)
{
    struct memory_store *m = (struct memory_store *)s;
    int rc;

    pthread_mutex_lock(&m->lock);
    rc = memory_list_locked(s, thread_id, out);
    pthread_mutex_unlock(&m->lock);
    return rc;
}

static int memory_put_writes(struct rx_checkpoint *s, const char *thread_id,
                             const char *checkpoint_id, const char *task_id,
                             json_t *writes)
{
    struct memory_store *m = (struct memory_store *)s;
    json_t *t, *c;
    int rc = -ENOMEM;

    pthread_mutex_lock(&m->lock);
    t = json_object_get(m->writes, thread_id);
    if (!t && json_object_set_new(m->writes, thread_id, t = json_object()))
        goto out_unlock;
    c = json_object_get(t, checkpoint_id);
    if (!c && json_object_set_new(t, checkpoint_id, c = json_object()))
        goto out_unlock;
    rc = json_object_set_new(c, task_id, json_deep_copy(writes)) ? -ENOMEM : 0;
out_unlock:
    pthread_mutex_unlock(&m->lock);
    return rc;
}

static int memory_get_writes(struct rx_checkpoint *s, const char *thread_id,
                             const char *checkpoint_id, json_t **out)
{
    struct memory_store *m = (struct memory_store *)s;
    json_t *c;

    pthread_mutex_lock(&m->lock);
    c = json_object_get(json_object_get(m->writes, thread_id), checkpoint_id);
    *out = c ? json_deep_copy(c) : json_object();
    pthread_mutex_unlock(&m->lock);
    return *out ? 0 : -ENOMEM;
}

/* Is `key` the thread itself or one of its subgraphs' namespaces? */
static bool of_thread(const char *key, const char *thread_id)
{
    size_t n = strlen(thread_id);

    return !strncmp(key, thread_id, n) && (!key[n] || key[n] == '|');
}

static int memory_delete_thread(struct rx_checkpoint *s, const char *thread_id)
{
    struct memory_store *m = (struct memory_store *)s;
    const char *key;
    json_t *v, *maps[2];
    void *tmp;
    size_t i;

    pthread_mutex_lock(&m->lock);
    maps[0] = m->threads;
    maps[1] = m->writes;
    for (i = 0; i < 2; i++) {
        json_object_foreach_safe(maps[i], tmp, key, v)
        {
            if (of_thread(key, thread_id))
                json_object_del(maps[i], key);
        }
    }
    pthread_mutex_unlock(&m->lock);
    return 0;
}

static void memory_destroy(struct rx_checkpoint *s)
{
    struct memory_store *m = (struct memory_store *)s;

    pthread_mutex_destroy(&m->lock);
    json_decref(m->threads);
    json_decref(m->writes);
    rx_free(m);
}

struct rx_checkpoint *rx_checkpoint_memory_create(void)
{
    struct memory_store *m = rx_malloc(sizeof(*m));

    if (!m)
        return NULL;
    memset(m, 0, sizeof(*m));
    m->threads = json_object();
    m->writes = json_object();
    if (!m->threads || !m->writes) {
        json_decref(m->threads);
        json_decref(m->writes);
        rx_free(m);
        return NULL;
    }
    pthread_mutex_init(&m->lock, NULL);
    m->base.put = memory_put;
    m->base.get = memory_get;
    m->base.list = memory_list;
    m->base.destroy = memory_destroy;
    m->base.put_writes = memory_put_writes;
    m->base.get_writes = memory_get_writes;
    m->base.delete_thread = memory_delete_thread;
    return &m->base;
}

int rx_checkpoint_put(struct rx_checkpoint *s, const char *thread_id, json_t *cp,
                      char id_out[RX_CHECKPOINT_ID_LEN])
{
    if (!s || !thread_id || !cp || !id_out)
        return -EINVAL;
    return s->put(s, thread_id, cp, id_out);
}

int rx_checkpoint_get(struct rx_checkpoint *s, const char *thread_id, const char *id,
                      json_t **out)
{
    if (!s || !thread_id || !out)
        return -EINVAL;
    return s->get(s, thread_id, id, out);
}

int rx_checkpoint_list(struct rx_checkpoint *s, const char *thread_id, json_t **out)
{
    if (!s || !thread_id || !out)
        return -EINVAL;
    return s->list(s, thread_id, out);
}

int rx_checkpoint_put_writes(struct rx_checkpoint *s, const char *thread_id,
                             const char *checkpoint_id, const char *task_id,
                             json_t *writes)
{
    if (!s || !thread_id || !checkpoint_id || !task_id || !writes)
        return -EINVAL;
    return s->put_writes ? s->put_writes(s, thread_id, checkpoint_id, task_id, writes)
                         : 0;
}

int rx_checkpoint_get_writes(struct rx_checkpoint *s, const char *thread_id,
                             const char *checkpoint_id, json_t **out)
{
    if (!s || !thread_id || !checkpoint_id || !out)
        return -EINVAL;
    if (!s->get_writes) {
        *out = json_object();
        return *out ? 0 : -ENOMEM;
    }
    return s->get_writes(s, thread_id, checkpoint_id, out);
}

int rx_checkpoint_delete_thread(struct rx_checkpoint *s, const char *thread_id)
{
    if (!s || !thread_id)
        return -EINVAL;
    return s->delete_thread ? s->delete_thread(s, thread_id) : -EOPNOTSUPP;
}

void rx_checkpoint_destroy(struct rx_checkpoint *s)
{
    if (s)
        s->destroy(s);
}
