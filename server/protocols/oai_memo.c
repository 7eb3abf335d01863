/*
 * oai_memo - conversation fingerprints -> sessions. See oai_memo.h.
 *
 * A ring of OAI_MEMO_MAX entries scanned linearly: a lookup compares at most
 * 4096 pairs of 64-bit words, a few microseconds per chat request, which is
 * cheaper to keep right than an index that must forget what the ring drops.
 * With a store the ring is this node's cache of what it wrote lately; the
 * store's records (kind OAI_MEMO_KIND, the fingerprint in hex as key) are
 * the map itself.
 */
#include "server/protocols/oai_memo.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "effects/log.h"
#include "server/records.h"
#include "store/store.h"

/* The record's key: the fingerprint's two words in hex. */
#define OAI_MEMO_KEY_LEN 33

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

static void fp_key(const struct oai_fp *fp, char key[OAI_MEMO_KEY_LEN])
{
    snprintf(key, OAI_MEMO_KEY_LEN, "%016" PRIx64 "%016" PRIx64, fp->h[0], fp->h[1]);
}

/*
 * The entry as a record of the store, written behind (the caller holds the
 * session's lock): {"n_user":N,"seq":S} with the session as its owner, so
 * it goes when the session does. 0 (also with no store) or -ENOMEM.
 */
static int remember(const struct oai_memo_entry *e)
{
    char key[OAI_MEMO_KEY_LEN], text[64];
    int n;

    if (!records_store())
        return 0;
    fp_key(&e->fp, key);
    n = snprintf(text, sizeof(text), "{\"n_user\":%zu,\"seq\":%" PRId64 "}", e->n_user,
                 e->seq);
    return records_put_later(OAI_MEMO_KIND, key, e->sid, text, (size_t)n) ? -ENOMEM : 0;
}

/* The store's entry for `fp` (another node's, or from before a restart). */
static bool recall(const struct oai_fp *fp, struct oai_memo_entry *out)
{
    struct store *st = records_store();
    struct store_record r;
    char key[OAI_MEMO_KEY_LEN];
    json_int_t n_user = -1, seq = -1;
    json_t *j;
    int err;

    if (!st)
        return false;
    fp_key(fp, key);
    if ((err = store_record_get(st, OAI_MEMO_KIND, key, &r))) {
        if (err != -ENOENT)
            log_warn("openai: the continuity map cannot be read (%s)", strerror(-err));
        return false;
    }
    j = json_loadb(r.text, r.len, 0, NULL);
    json_unpack(j, "{s:I, s:I}", "n_user", &n_user, "seq", &seq);
    json_decref(j);
    if (n_user >= 0 && seq >= 0 && r.sid && strlen(r.sid) <= SESSION_ID_MAX) {
        out->fp = *fp;
        snprintf(out->sid, sizeof(out->sid), "%s", r.sid);
        out->n_user = (size_t)n_user;
        out->seq = seq;
    } else {
        n_user = -1;
    }
    store_record_release(&r);
    return n_user >= 0;
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
    return remember(e);
}

bool oai_memo_get(struct oai_memo *m, const struct oai_fp *fp, struct oai_memo_entry *out)
{
    long at;

    pthread_mutex_lock(&m->lock);
    at = m->items ? find(m, fp) : -1;
    if (at >= 0)
        *out = m->items[at];
    pthread_mutex_unlock(&m->lock);
    return at >= 0 || recall(fp, out);
}
