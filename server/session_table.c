/*
 * session_table - the sessions of the server. See session_table.h.
 */
#include "server/session_table.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/idgen.h"
#include "base/now.h"
#include "server/config.h"
#include "effects/log.h"
#include "server/event.h"
#include "server/session_follow.h"
#include "server/session_import.h"
#include "server/run.h"
#include "server/session_internal.h"
#include "store/store.h"
#include "state_machine/rx_index.h"

#define TABLE_BUCKETS_MIN 64

struct session_table *session_table_create(const struct session_env *env)
{
    struct session_table *t = calloc(1, sizeof(*t));

    if (!t)
        return NULL;
    t->env = *env;
    t->nbuckets = TABLE_BUCKETS_MIN;
    if (!(t->buckets = calloc(t->nbuckets, sizeof(*t->buckets))) ||
        session_feed_init(&t->feed, (size_t)env->cfg->sse_queue_max,
                          env->cfg->sse_retry_ms)) {
        free(t->buckets);
        free(t);
        return NULL;
    }
    pthread_mutex_init(&t->title_lock, NULL);
    pthread_mutex_init(&t->lock, NULL);
    pthread_mutex_init(&t->owners_lock, NULL);
    pthread_cond_init(&t->all_freed, NULL);
    pthread_cond_init(&t->loaded, NULL);
    return t;
}

bool session_id_is_plain(const char *id)
{
    size_t n = strlen(id);

    if (!n || n > SESSION_ID_MAX)
        return false;
    /* Ids appear in URLs and file names: keep them plain. */
    return strspn(id,
                  "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") ==
               n &&
           strcmp(id, ".") && strcmp(id, "..");
}

/*
 * Add a session to the table (session_internal.h): a fresh one (state NULL,
 * recorded in the store) or one rebuilt from the store or an import. The
 * sessions feed hears of a made one before anyone can find it. -ENFILE is
 * the session limit of --db :memory: (limits.max_sessions; with a store,
 * memory only caches sessions and the disk is the limit), kept apart from
 * the store's -ENOSPC (no room on disk) and -EIO (store unusable) so that a
 * full disk is never answered as "too many sessions".
 */
int session_table__add(struct session_table *t, const struct table_add *a,
                       struct session **out)
{
    struct session *s = NULL;
    int err = 0;

    if (!session_id_is_plain(a->id))
        return -EINVAL;
    pthread_mutex_lock(&t->lock);
    if (session_table__find(t, a->id)) {
        err = -EEXIST;
    } else if (!t->env.store && t->count >= (size_t)t->env.cfg->max_sessions) {
        err = -ENFILE;
    } else if (!(s = session_create(t, a->id)) ||
               (a->title && !(s->title = strdup(a->title)))) {
        if (s)
            session_destroy(s);
        err = -ENOMEM;
    } else if (snprintf(s->owner, sizeof(s->owner), "%s",
                        a->owner ? a->owner : PRINCIPAL_ADMIN) >= (int)sizeof(s->owner)) {
        session_destroy(s);
        err = -EINVAL;
    } else if (!a->state && t->env.store &&
               (err =
                    store_create_session(t->env.store, a->id, s->owner, s->created_at))) {
        session_destroy(s); /* never listed: not counted in `live` */
    } else {
        if (a->state)
            session_restore(s, a->state, a->seq, a->created_at);
        s->follower = a->follower;
        session_table__link(t, s);
        t->live++;
        if (!a->quiet) {
            __atomic_add_fetch(&t->stored, 1, __ATOMIC_RELAXED);
            session_feed_created(&t->feed, s);
        }
        if (out) {
            session_ref(s);
            *out = s;
        }
    }
    pthread_mutex_unlock(&t->lock);
    return err;
}

/*
 * The one way out of the table (delete, sweep, shutdown): unlink the session
 * (id NULL: the first one), stop it and drop the table's reference; the feed
 * and the protocols hear of a deletion (`gone`: the log no longer has it,
 * in memory or not). False when it was not in memory.
 */
static bool table_remove(struct session_table *t, const char *id, bool gone)
{
    struct session *s;

    pthread_mutex_lock(&t->lock);
    s = id ? session_table__find(t, id) : t->head;
    if (s)
        session_table__unlink(t, s);
    pthread_mutex_unlock(&t->lock);
    if (s)
        session_stop(s);
    /* After the stop: no update of it can follow its deletion. One not in
       memory (SPEC 6.2) is announced as well: the list shows every session. */
    if (id && (s || gone)) {
        session_feed_deleted(&t->feed, id, s ? s->owner : NULL);
        if (t->env.removed)
            t->env.removed(id);
    }
    session_unref(s);
    return s != NULL;
}

/*
 * Words the routes use where an id could stand: /sessions/import (native),
 * /threads/search and /threads/count (LangGraph). A session by one of these
 * names could be made but never reached by every API, so a client may not
 * choose one.
 */
bool session_id_is_reserved(const char *id)
{
    static const char *const words[] = {"import", "search", "count"};

    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
        if (!strcmp(id, words[i]))
            return true;
    return false;
}

int session_table_create_session(struct session_table *t, const char *id,
                                 const struct principal *who, struct session **out)
{
    char fresh[RX_UUID_LEN];
    int err;

    if (id && session_id_is_reserved(id))
        return -EINVAL;
    if ((err = session_table__owner_has_room(t, who)))
        return err;
    if (!id) {
        idgen_uuid(fresh);
        id = fresh;
    }
    return session_table__add(
        t, &(struct table_add){.id = id, .owner = principal_owner(who)}, out);
}

struct session *session_table_get(struct session_table *t, const char *id)
{
    return session_table__touch(t, id);
}

struct session *session_table_peek(struct session_table *t, const char *id)
{
    struct session *s;

    pthread_mutex_lock(&t->lock);
    if ((s = session_table__find(t, id)))
        session_ref(s);
    pthread_mutex_unlock(&t->lock);
    return s;
}

/*
 * The log first: a deletion that could not be stored leaves the session
 * where it was (in the log and in the table), or it would be back after a
 * restart. An input racing the deletion finds no session in the log and is
 * refused (-ENOENT), so nothing is stored for a session once it is gone.
 */
/* Mark the resident session `id` as being deleted by this node, or unmark it. */
static void mark_deleting(struct session_table *t, const char *id, bool on)
{
    struct session *s;

    pthread_mutex_lock(&t->lock);
    if ((s = session_table__find(t, id)))
        s->deleting = on;
    pthread_mutex_unlock(&t->lock);
}

int session_table_delete(struct session_table *t, const char *id)
{
    bool gone;
    int err = 0;

    /* The log's notice of this deletion may come back before the removal
       below: that one removes and announces it, once (session_table_forget). */
    mark_deleting(t, id, true);
    if (t->env.store && (err = store_delete_session(t->env.store, id)) &&
        err != -ENOENT) {
        struct rx_error why;

        mark_deleting(t, id, false);
        store_last_error(t->env.store, &why);
        log_warn("session %s: not deleted, the log refused: %s", id, why.text);
        return err;
    }
    gone = t->env.store && !err;
    if (gone)
        __atomic_sub_fetch(&t->stored, 1, __ATOMIC_RELAXED);
    /* In a cluster the deletion's notification may have removed it already;
       a session not in memory is only in the log. */
    return table_remove(t, id, gone) || gone ? 0 : -ENOENT;
}

void session_table_cancel_all(struct session_table *t)
{
    pthread_mutex_lock(&t->lock);
    for (struct session *s = t->head; s; s = s->next) {
        pthread_mutex_lock(&s->lock);
        s->deleted = true; /* no input is taken during shutdown */
        runtime_cancel_all(s->rt);
        run__session_stopped(s);
        pthread_mutex_unlock(&s->lock);
    }
    pthread_mutex_unlock(&t->lock);
}

void session_table_destroy(struct session_table *t)
{
    if (!t)
        return;
    /* The feed's held-back updates hold sessions: let them go first. */
    session_feed_stop(&t->feed);
    session_table_cancel_all(t);
    while (table_remove(t, NULL, false))
        ;
    /* Effects hold sessions until they end; the brain must outlive them all. */
    pthread_mutex_lock(&t->lock);
    while (t->live)
        pthread_cond_wait(&t->all_freed, &t->lock);
    pthread_mutex_unlock(&t->lock);
    session_feed_release(&t->feed);
    pthread_cond_destroy(&t->all_freed);
    pthread_cond_destroy(&t->loaded);
    session_table__owners_release(t);
    pthread_mutex_destroy(&t->owners_lock);
    pthread_mutex_destroy(&t->lock);
    pthread_mutex_destroy(&t->title_lock);
    free(t->buckets);
    free(t);
}

size_t session_table_count(struct session_table *t)
{
    size_t n;

    if (t->env.store)
        return (size_t)__atomic_load_n(&t->stored, __ATOMIC_RELAXED);
    pthread_mutex_lock(&t->lock);
    n = t->count;
    pthread_mutex_unlock(&t->lock);
    return n;
}

void session_table_figures(struct session_table *t, struct session_figures *f)
{
    pthread_mutex_lock(&t->lock);
    f->resident = t->count;
    pthread_mutex_unlock(&t->lock);
    f->stored = t->env.store ? __atomic_load_n(&t->stored, __ATOMIC_RELAXED)
                             : (int64_t)f->resident;
    f->bytes = __atomic_load_n(&t->bytes, __ATOMIC_RELAXED);
    f->loads = __atomic_load_n(&t->loads, __ATOMIC_RELAXED);
    f->evictions = __atomic_load_n(&t->evictions, __ATOMIC_RELAXED);
    f->text_batches = f->text_bytes = 0;
    if (t->env.store)
        store_stream_counts(t->env.store, &f->text_batches, &f->text_bytes);
}

void session_table_evict(struct session_table *t)
{
    (void)session_table__evict(t);
}

struct store *session_table_store(struct session_table *t)
{
    return t->env.store;
}

const struct toolkit *session_table_tools(struct session_table *t)
{
    return t->env.tools;
}

/* ---- the log: recovery, forks, retention ---------------------------------------- */

/*
 * Start-up (SPEC 6.2): read no session's state but those with work in
 * flight, which the store names without reading every session; each is
 * loaded as a touch loads it, then reconciled (session_table__touch), so
 * pending tools run again, unanswered messages are answered and
 * interrupted answers resume under their id. The rest load on first touch.
 * In a cluster none is loaded here: the ones in flight are the orphan
 * scan's (the lease thread's first turn, once the node listens), which
 * loads only those this node claims. Loading them all here made every node
 * read every session in flight, those other nodes own included, before it
 * listened
 * (bench/scale_pg.sh, 100 000 chats, 100 in flight: each of three nodes
 * loaded all 100 and listened after 0.85-0.93 s, one on nothing in 66 ms).
 */
int session_table_load(struct session_table *t)
{
    struct store_list busy = {0};
    struct rx_error why;
    int64_t stored = 0;
    size_t resumed = 0;
    int err;

    if (!t->env.store)
        return 0;
    /* On a shared store nothing waits for the count: it is read after. */
    if (t->env.cluster)
        __atomic_store_n(&t->count_due, true, __ATOMIC_RELEASE);
    if ((!t->env.cluster && (err = store_sessions_count(t->env.store, &stored))) ||
        (!t->env.cluster && (err = store_sessions_busy(t->env.store, &busy)))) {
        store_last_error(t->env.store, &why);
        log_error("cannot read the sessions: %s",
                  why.text[0] ? why.text : strerror(-err));
        return err;
    }
    __atomic_store_n(&t->stored, stored, __ATOMIC_RELAXED);
    for (size_t i = 0; i < busy.n; i++) {
        struct session *s = session_table__touch(t, busy.v[i].id);

        resumed += s != NULL;
        session_unref(s);
    }
    if (t->env.cluster)
        log_info("sessions with work in flight are claimed by the cluster's scan");
    else
        log_info("%lld session(s) stored; %zu with work in flight resumed",
                 (long long)stored, resumed);
    store_list_release(&busy);
    return 0;
}

void session_table_count_due(struct session_table *t)
{
    int64_t stored = 0;

    if (!__atomic_exchange_n(&t->count_due, false, __ATOMIC_ACQ_REL))
        return;
    if (store_sessions_count(t->env.store, &stored)) {
        __atomic_store_n(&t->count_due, true, __ATOMIC_RELEASE); /* the next second */
        return;
    }
    /* Creates and deletes since the start moved it already: added to them. */
    __atomic_add_fetch(&t->stored, stored, __ATOMIC_RELAXED);
    log_info("%lld session(s) stored", (long long)stored);
}

int session_table_fork(struct session_table *t, const char *sid, int64_t at,
                       const struct principal *who, struct session **out)
{
    struct rx_state state;
    char fresh[RX_UUID_LEN], *title = NULL;
    int64_t seq;
    int err;

    if (!t->env.store)
        return -ENOSYS;
    if ((err = session_table__owner_has_room(t, who)))
        return err;
    idgen_uuid(fresh);
    if ((err = store_fork(t->env.store, sid, at, fresh, principal_owner(who),
                          now_wall_ms())))
        return err;
    /* A fork keeps the title a person gave (edit and regenerate fork). */
    if ((err = store_session_title(t->env.store, fresh, &title)) ||
        (err = store_session_load(t->env.store, fresh, &state, &seq)))
        goto out_drop;
    if ((err = session_table__add(t,
                                  &(struct table_add){.id = fresh,
                                                      .owner = principal_owner(who),
                                                      .created_at = now_wall_ms(),
                                                      .title = title,
                                                      .state = &state,
                                                      .seq = seq},
                                  out))) {
        rx_state_release(&state);
        goto out_drop;
    }
    free(title);
    session_recover(*out);
    return 0;

out_drop:
    free(title);
    if (store_delete_session(t->env.store, fresh))
        log_warn("session %s: half-made fork left in the log", fresh);
    return err;
}

void session_table_text_due(struct session_table *t)
{
    pthread_mutex_lock(&t->lock);
    for (struct session *s = t->head; s; s = s->next) {
        if (!__atomic_load_n(&s->streams, __ATOMIC_RELAXED))
            continue; /* a hint: one with streams is looked at under its lock */
        pthread_mutex_lock(&s->lock);
        session__text_save_due(s);
        pthread_mutex_unlock(&s->lock);
    }
    pthread_mutex_unlock(&t->lock);
}

void session_table_reconcile_due(struct session_table *t)
{
    struct session **recover = NULL;
    size_t n = 0, cap = 0;
    bool again = false;

    if (!__atomic_exchange_n(&t->reconcile_due, 0, __ATOMIC_ACQ_REL))
        return;
    pthread_mutex_lock(&t->lock);
    for (struct session *s = t->head; s; s = s->next) {
        pthread_mutex_lock(&s->lock);
        /* Unsettled, it is reconciled when it settles: on a durable state. */
        if (s->reconcile_due && s->seq == s->applied)
            session__reconcile(s, NULL);
        again |= s->reconcile_due;
        /* A recovery waiting for its tools: tried again below, unlocked. */
        if (s->recover_due) {
            struct session **v =
                n < cap ? recover : realloc(recover, (cap = cap * 2 + 8) * sizeof(*v));

            if (v) {
                recover = v;
                session_ref(s);
                recover[n++] = s;
            } else {
                again = true;
            }
        }
        pthread_mutex_unlock(&s->lock);
    }
    pthread_mutex_unlock(&t->lock);
    if (again)
        __atomic_store_n(&t->reconcile_due, 1, __ATOMIC_RELEASE);
    for (size_t i = 0; i < n; i++) {
        session_recover(recover[i]); /* sets reconcile_due again if it still waits */
        session_unref(recover[i]);
    }
    free(recover);
}

int session_table_sweep(struct session_table *t, int64_t older_than_ms)
{
    json_t *ids = NULL, *id;
    int64_t inputs = 0;
    size_t i;
    int n = 0;

    if (!t->env.store || store_gc_list(t->env.store, older_than_ms, &ids, &inputs))
        return 0;
    /* The rows are gone already; this only drops the sessions from memory. */
    json_array_foreach(ids, i, id)
    {
        table_remove(t, json_string_value(id), true);
        n++;
    }
    if (n) {
        __atomic_sub_fetch(&t->stored, n, __ATOMIC_RELAXED);
        log_info("retention: removed %d session(s), %lld input(s)", n, (long long)inputs);
    }
    json_decref(ids);
    return n;
}

/* ---- titles, the feed, import ------------------------------------------------------ */

/*
 * The log first, then memory, one rename at a time (title_lock), so the two
 * never disagree about which rename came last. The feed hears of it like of
 * any change (coalesced).
 */
int session_table_rename(struct session_table *t, const char *id, const char *title)
{
    struct session *s = session_table_get(t, id);
    char *copy;
    int err = 0;

    if (!s)
        return -ENOENT;
    if (!(copy = strdup(title))) {
        session_unref(s);
        return -ENOMEM;
    }
    pthread_mutex_lock(&t->title_lock);
    if (t->env.store && (err = store_set_title(t->env.store, id, title)) &&
        err != -ENOENT) {
        struct rx_error why;

        store_last_error(t->env.store, &why);
        log_warn("session %s: not renamed, the log refused: %s", id, why.text);
    }
    if (!err) {
        pthread_mutex_lock(&s->lock);
        if (s->deleted) {
            err = -ENOENT;
        } else {
            free(s->title);
            s->title = copy;
            copy = NULL;
            s->feed_title = true;
            session_feed_changed(&t->feed, s);
        }
        pthread_mutex_unlock(&s->lock);
    }
    pthread_mutex_unlock(&t->title_lock);
    free(copy);
    session_unref(s);
    return err;
}

void *session_table_follow(struct session_table *t, const char *owner,
                           session_attach_fn attach, void *arg)
{
    return session_feed_subscribe(&t->feed, owner, attach, arg);
}

/*
 * The replayed log becomes a session: in the store first (all of it in one
 * transaction), then in the table, then its effects are reconciled once, as
 * after a restart (session_table_load): only what its final state still
 * wants runs.
 */
static int import_made(struct session_table *t, struct session_import *log,
                       const struct principal *who, struct session **out)
{
    char fresh[RX_UUID_LEN];
    int64_t now = now_wall_ms();
    int err;

    idgen_uuid(fresh);
    if (t->env.store &&
        (err = store_import(t->env.store, fresh, principal_owner(who), now, log->title,
                            log->inputs, log->n, log->n ? &log->snapshot : NULL))) {
        struct rx_error why;

        store_last_error(t->env.store, &why);
        log_warn("import: not stored: %s", why.text);
        return err;
    }
    if ((err = session_table__add(t,
                                  &(struct table_add){.id = fresh,
                                                      .owner = principal_owner(who),
                                                      .created_at = now,
                                                      .title = log->title,
                                                      .state = &log->state,
                                                      .seq = (int64_t)log->n},
                                  out))) {
        if (t->env.store && store_delete_session(t->env.store, fresh))
            log_warn("session %s: half-made import left in the log", fresh);
        return err;
    }
    log->state_moved = true;
    session_recover(*out);
    return 0;
}

int session_table_import(struct session_table *t, json_t *doc,
                         const struct principal *who, struct session_import_error *e,
                         struct session **out)
{
    struct session_import log;
    int err;

    if (!t->env.store && session_table_count(t) >= (size_t)t->env.cfg->max_sessions)
        return -ENFILE;
    if ((err = session_table__owner_has_room(t, who)))
        return err;
    if (!(err = session_import_init(&log, t->env.tools, t->env.store != NULL)) &&
        !(err = session_import_replay(doc, &log, e)))
        err = import_made(t, &log, who, out);
    session_import_release(&log);
    return err;
}

int session_table_import_text(struct session_table *t, const char *text, size_t len,
                              int (*check)(void *), void *arg,
                              const struct principal *who, struct session_import_error *e,
                              struct session **out)
{
    struct session_import log;
    int err;

    if (!t->env.store && session_table_count(t) >= (size_t)t->env.cfg->max_sessions)
        return -ENFILE;
    if ((err = session_table__owner_has_room(t, who)))
        return err;
    if (!(err = session_import_init(&log, t->env.tools, t->env.store != NULL))) {
        log.check = check;
        log.check_arg = arg;
        /* Asked once more at the end: a short import is never asked on its
           way, and one that ends after a shutdown began must start nothing. */
        if (!(err = session_import_replay_text(text, len, &log, e)) &&
            !(err = check ? check(arg) : 0))
            err = import_made(t, &log, who, out);
    }
    session_import_release(&log);
    return err;
}

/* ---- a cluster: what other nodes did (session_follow.h) ---------------------------- */

int session_table_adopt(struct session_table *t, const char *sid)
{
    struct store_session_info info = {0};
    struct rx_state state;
    int64_t seq;
    int err;

    if (!t->env.store)
        return -ENOSYS;
    if ((err = store_session_info(t->env.store, sid, &info)))
        goto out_free;
    if ((err = store_session_load(t->env.store, sid, &state, &seq)))
        goto out_free;
    if ((err = session_table__add(t,
                                  &(struct table_add){.id = sid,
                                                      .owner = info.owner,
                                                      .created_at = info.created_at,
                                                      .title = info.title,
                                                      .state = &state,
                                                      .seq = seq,
                                                      .follower = true},
                                  NULL)))
        rx_state_release(&state);
out_free:
    store_session_info_release(&info);
    return err;
}

void session_table_forget(struct session_table *t, const char *sid)
{
    struct session *s;
    bool mine;

    pthread_mutex_lock(&t->lock);
    mine = (s = session_table__find(t, sid)) && s->deleting;
    pthread_mutex_unlock(&t->lock);
    if (!mine)
        table_remove(t, sid, false); /* the deleting node announced it */
}

void session_table_retitle(struct session_table *t, const char *sid)
{
    struct session *s = session_table_get(t, sid);
    char *title = NULL;

    if (!s)
        return;
    if (t->env.store && !store_session_title(t->env.store, sid, &title) && title) {
        pthread_mutex_lock(&s->lock);
        free(s->title);
        s->title = title;
        title = NULL;
        s->feed_title = true;
        session_feed_changed(&t->feed, s);
        pthread_mutex_unlock(&s->lock);
    }
    free(title);
    session_unref(s);
}

int session_table_each(struct session_table *t, void (*fn)(struct session *, void *),
                       void *arg)
{
    struct session **v;
    size_t n = 0;

    pthread_mutex_lock(&t->lock);
    v = malloc((t->count + 1) * sizeof(*v));
    if (v)
        for (struct session *s = t->head; s; s = s->next) {
            session_ref(s);
            v[n++] = s;
        }
    pthread_mutex_unlock(&t->lock);
    if (!v)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        fn(v[i], arg);
        session_unref(v[i]);
    }
    free(v);
    return 0;
}
