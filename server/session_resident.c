/*
 * session_resident - the sessions in memory (SPEC 6.2): the table's index
 * of them, their order of last touch, loading on first touch and eviction.
 * See session_internal.h.
 *
 * The log holds every session; memory only the ones in use. A touch
 * (session_table_get, any route of any protocol) finds a session in the
 * index, or reads it from the store: its newest snapshot and the inputs
 * after it. Two touches of one cold session load it once: the first notes
 * the id in `loading` and reads without the table's lock; the others wait
 * on `loaded` and find it listed. The housekeeping thread evicts, and so
 * does a load that took the table past its limits: from the least recently
 * touched end, only sessions with nothing in flight (session__is_idle). An
 * evicted session is stopped and freed like a deleted one, but the store
 * and the sessions feed are not told: nothing of it is lost, it is only
 * read again at its next touch.
 *
 * Lock order: table -> session (session__is_idle is asked with both held);
 * the store is read with neither held.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/now.h"
#include "effects/log.h"
#include "server/config.h"
#include "server/metrics.h"
#include "server/session_follow.h"
#include "server/session_internal.h"
#include "state_machine/rx_effects.h"
#include "state_machine/rx_index.h"
#include "store/store.h"

/* Sessions an eviction pass may skip (in flight) before it gives up for now:
   the table's lock is not held for a walk of every session. */
#define EVICT_SKIP_MAX 512

/* An id some thread is reading from the store (on that thread's stack). */
struct table_loading {
    const char *id;
    struct table_loading *next;
};

/* ---- the index ----------------------------------------------------------------------
 */

struct session *session_table__find(struct session_table *t, const char *id)
{
    uint32_t h = rx_index_hash(id);

    for (struct session *s = t->buckets[h & (t->nbuckets - 1)]; s; s = s->chain)
        if (s->hash == h && !strcmp(s->id, id))
            return s;
    return NULL;
}

/* Twice the buckets once there are two sessions a bucket (a bucket is 8 of
   an idle session's bytes, a chain of two one more compare). Without the
   memory it stays as it is: the chains grow longer, lookups still work. */
static void table_grow(struct session_table *t)
{
    size_t n = t->nbuckets * 2;
    struct session **b;

    if (t->count < 2 * t->nbuckets || !(b = calloc(n, sizeof(*b))))
        return;
    for (struct session *s = t->head; s; s = s->next) {
        s->chain = b[s->hash & (n - 1)];
        b[s->hash & (n - 1)] = s;
    }
    free(t->buckets);
    t->buckets = b;
    t->nbuckets = n;
}

static void list_push_front(struct session_table *t, struct session *s)
{
    s->prev = NULL;
    s->next = t->head;
    if (t->head)
        t->head->prev = s;
    else
        t->tail = s;
    t->head = s;
}

static void list_remove(struct session_table *t, struct session *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        t->head = s->next;
    if (s->next)
        s->next->prev = s->prev;
    else
        t->tail = s->prev;
}

void session_table__link(struct session_table *t, struct session *s)
{
    struct session **b;

    s->hash = rx_index_hash(s->id);
    s->touched_ms = now_mono_ms();
    list_push_front(t, s);
    b = &t->buckets[s->hash & (t->nbuckets - 1)];
    s->chain = *b;
    *b = s;
    t->count++;
    s->counted = true;
    __atomic_add_fetch(&t->bytes, s->bytes, __ATOMIC_RELAXED);
    table_grow(t);
}

void session_table__unlink(struct session_table *t, struct session *s)
{
    struct session **p = &t->buckets[s->hash & (t->nbuckets - 1)];

    while (*p != s)
        p = &(*p)->chain;
    *p = s->chain;
    list_remove(t, s);
    t->count--;
}

/* ---- bytes --------------------------------------------------------------------------
 */

/* Counted in the table's total only while listed and not stopped: session_stop
   takes it back under the same lock, so the total never drifts. */
void session__resize(struct session *s, size_t bytes)
{
    if (s->counted)
        __atomic_add_fetch(&s->table->bytes, bytes - s->bytes, __ATOMIC_RELAXED);
    s->bytes = bytes;
}

/* ---- loading on touch ---------------------------------------------------------------
 */

static bool loading_has(struct session_table *t, const char *id)
{
    for (struct table_loading *l = t->loading; l; l = l->next)
        if (!strcmp(l->id, id))
            return true;
    return false;
}

static void loading_remove(struct session_table *t, struct table_loading *me)
{
    struct table_loading **p = &t->loading;

    while (*p != me)
        p = &(*p)->next;
    *p = me->next;
}

/*
 * Read session `id` from the store and list it (quietly: it was not made,
 * the sessions feed has nothing to tell). A new reference, or NULL: not
 * stored (-ENOENT, not logged), or not readable (logged).
 */
static struct session *load(struct session_table *t, const char *id)
{
    struct store_session_info info = {0};
    struct session *s = NULL;
    struct rx_state state;
    int64_t seq, t0 = now_mono_ms();
    int err;

    if ((err = store_session_info(t->env.store, id, &info)))
        goto out_fail;
    if ((err = store_session_load(t->env.store, id, &state, &seq)))
        goto out_fail;
    err = session_table__add(t,
                             &(struct table_add){.id = id,
                                                 .owner = info.owner,
                                                 .created_at = info.created_at,
                                                 .title = info.title,
                                                 .state = &state,
                                                 .seq = seq,
                                                 .follower = t->env.relay != NULL,
                                                 .quiet = true},
                             &s);
    if (err)
        rx_state_release(&state);
    if (err == -EEXIST) {
        /* Listed meanwhile by another way in (a cluster's notice of a
           session made elsewhere): that one is the session. */
        pthread_mutex_lock(&t->lock);
        if ((s = session_table__find(t, id)))
            session_ref(s);
        pthread_mutex_unlock(&t->lock);
        store_session_info_release(&info);
        return s;
    }
out_fail:
    store_session_info_release(&info);
    if (err && err != -ENOENT) {
        struct rx_error why;

        store_last_error(t->env.store, &why);
        log_warn("session %s: cannot load it: %s (%s)", id, strerror(-err), why.text);
    }
    if (!err) {
        __atomic_add_fetch(&t->loads, 1, __ATOMIC_RELAXED);
        metrics_session_loaded(now_mono_ms() - t0);
    }
    return err ? NULL : s;
}

struct session *session_table__touch(struct session_table *t, const char *id)
{
    struct table_loading me = {id, NULL};
    struct session *s;

    pthread_mutex_lock(&t->lock);
    while (!(s = session_table__find(t, id)) && loading_has(t, id))
        pthread_cond_wait(&t->loaded, &t->lock);
    if (s || !t->env.store || !session_id_is_plain(id)) {
        if (s) {
            session_ref(s);
            s->touched_ms = now_mono_ms();
            list_remove(t, s);
            list_push_front(t, s);
        }
        pthread_mutex_unlock(&t->lock);
        return s;
    }
    me.next = t->loading;
    t->loading = &me;
    pthread_mutex_unlock(&t->lock);

    s = load(t, id);

    pthread_mutex_lock(&t->lock);
    loading_remove(t, &me);
    pthread_cond_broadcast(&t->loaded);
    pthread_mutex_unlock(&t->lock);
    if (s) {
        /* In a cluster a follower's log may have moved while it was read;
           and one no live node owns is this node's to take. */
        if (session_is_follower(s) && session_follow_catchup(s))
            log_debug("session %s: loaded, not caught up yet", id);
        if (session_is_follower(s) && t->env.touched)
            t->env.touched(t->env.cluster, id);
        session_recover(s);
        (void)session_table__evict(t);
    }
    return s;
}

/* ---- eviction -----------------------------------------------------------------------
 */

bool session__is_idle(struct session *s)
{
    /* The table's reference only: no request, stream, effect or feed holds it. */
    return __atomic_load_n(&s->refs, __ATOMIC_ACQUIRE) == 1 && !s->deleted &&
           s->seq == s->applied && !s->pending &&
           !__atomic_load_n(&s->waiting, __ATOMIC_RELAXED) && !s->fx_waiting &&
           !s->settle_due && !s->reconcile_due && !s->recovering && !s->readers &&
           !s->runs && !s->streams && !s->feed_due && !runtime_running(s->rt) &&
           !sse_channel_has_clients(&s->ch) && !sse_channel_has_clients(&s->patch_ch) &&
           !rx_effects_any(&s->state);
}

/* Whether the table holds more than its limits. Table's lock held. */
static bool over_limits(struct session_table *t)
{
    const struct config *cfg = t->env.cfg;

    return t->count >
               (size_t)__atomic_load_n(&cfg->resident_sessions, __ATOMIC_RELAXED) ||
           __atomic_load_n(&t->bytes, __ATOMIC_RELAXED) >
               __atomic_load_n(&cfg->resident_bytes, __ATOMIC_RELAXED);
}

size_t session_table__evict(struct session_table *t)
{
    int64_t idle_ms = __atomic_load_n(&t->env.cfg->sessions_idle_ms, __ATOMIC_RELAXED);
    int64_t now = now_mono_ms();
    struct session *gone = NULL, *s, *prev;
    size_t n = 0, skipped = 0;

    if (!t->env.store)
        return 0; /* --db :memory: has nowhere to read an evicted session from */
    pthread_mutex_lock(&t->lock);
    for (s = t->tail; s && skipped < EVICT_SKIP_MAX; s = prev) {
        bool idle;

        prev = s->prev;
        /* Last touched first along the list: past here all are fresher. */
        if (!over_limits(t) && now - s->touched_ms < idle_ms)
            break;
        pthread_mutex_lock(&s->lock);
        idle = session__is_idle(s);
        pthread_mutex_unlock(&s->lock);
        if (!idle) {
            skipped++;
            continue;
        }
        session_table__unlink(t, s);
        s->next = gone;
        gone = s;
        n++;
    }
    pthread_mutex_unlock(&t->lock);
    /* Stopped and freed without the table's lock (freeing takes it). */
    while ((s = gone)) {
        gone = s->next;
        session_stop(s);
        session_unref(s);
    }
    if (n)
        __atomic_add_fetch(&t->evictions, (int64_t)n, __ATOMIC_RELAXED);
    return n;
}
