/*
 * oai_memo - conversation fingerprints -> sessions. See oai_memo.h.
 *
 * A ring of OAI_MEMO_MAX entries scanned linearly: a lookup compares at most
 * 4096 pairs of 64-bit words, a few microseconds per chat request, which is
 * cheaper to keep right than an index that must forget what the ring drops.
 */
#include "server/protocols/oai_memo.h"

#include <errno.h>
#include <stdlib.h>

void oai_memo_init(struct oai_memo *m)
{
    pthread_mutex_init(&m->lock, NULL);
    m->items = NULL;
    m->len = m->next = 0;
}

void oai_memo_release(struct oai_memo *m)
{
    free(m->items);
    m->items = NULL;
    m->len = m->next = 0;
    pthread_mutex_destroy(&m->lock);
}

/* The slot holding `fp`, or -1. Lock held. */
static long find(const struct oai_memo *m, const struct oai_fp *fp)
{
    for (size_t i = 0; i < m->len; i++)
        if (oai_fp_equal(&m->items[i].fp, fp))
            return (long)i;
    return -1;
}

int oai_memo_put(struct oai_memo *m, const struct oai_memo_entry *e)
{
    long at;

    pthread_mutex_lock(&m->lock);
    if (!m->items && !(m->items = calloc(OAI_MEMO_MAX, sizeof(*m->items)))) {
        pthread_mutex_unlock(&m->lock);
        return -ENOMEM;
    }
    at = find(m, &e->fp);
    if (at < 0) {
        at = (long)m->next;
        m->next = (m->next + 1) % OAI_MEMO_MAX;
        if (m->len < OAI_MEMO_MAX)
            m->len++;
    }
    m->items[at] = *e;
    pthread_mutex_unlock(&m->lock);
    return 0;
}

bool oai_memo_get(struct oai_memo *m, const struct oai_fp *fp, struct oai_memo_entry *out)
{
    long at;

    pthread_mutex_lock(&m->lock);
    at = m->items ? find(m, fp) : -1;
    if (at >= 0)
        *out = m->items[at];
    pthread_mutex_unlock(&m->lock);
    return at >= 0;
}
