/*
 * lg_threads - the thread routes of the LangGraph subset: create, get,
 * patch, delete and copy (a fork of the session); search is lg_search.c. A thread is a
 * session (thread_id = its id); what it shows (the thread object, its
 * ThreadState and history) is lg_state.c.
 *
 * Threads' metadata: every thread has {"graph_id":"agent","assistant_id":...},
 * which clients filter on (agent-chat-ui lists threads by graph_id), under
 * what its clients set. With a store (server/records) what they set is the
 * thread's record (kind LG_THREAD_KIND, key the thread id, owned by its
 * session: deleted with it), written when it changes and read when shown,
 * so it survives restarts and every node shows the same; with --db
 * :memory: it lives here, in memory (lost on restart).
 * Depends on server/session, server/session_table, server/records,
 * server/protocols/lg_msg, server/protocols/lg_run.
 */
#include "server/protocols/lg.h"
#include "server/protocols/lg_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "effects/log.h"
#include "server/event.h"
#include "server/protocols/lg_msg.h"
#include "server/protocols/lg_run.h"
#include "server/records.h"
#include "server/run.h"
#include "server/session_table.h"
#include "store/store.h"

/* The store's records of threads' metadata. */
#define LG_THREAD_KIND "lg.thread"
/* Metadata records read at a time by a search. */
#define LG_META_PAGE 512

/* ---- metadata ----------------------------------------------------------------- */

static pthread_mutex_t meta_lock = PTHREAD_MUTEX_INITIALIZER;
static json_t *meta_all; /* {tid: {...}}: what clients set */

/*
 * What clients set on thread `tid`, as a NEW object in *out (NULL: nothing),
 * from the store's record. 0, or the store's errno (logged).
 */
static int meta_read(struct store *st, const char *tid, json_t **out)
{
    struct store_record r;
    int err = store_record_get(st, LG_THREAD_KIND, tid, &r);

    *out = NULL;
    if (err == -ENOENT)
        return 0;
    if (err) {
        log_warn("thread %s: its metadata cannot be read (%s)", tid, strerror(-err));
        return err;
    }
    *out = json_loadb(r.text, r.len, 0, NULL);
    store_record_release(&r);
    if (!json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        return -EPROTO; /* damaged, or no memory to load it: shown as none */
    }
    return 0;
}

json_t *lg__thread_meta_with(json_t *set)
{
    json_t *m =
        json_pack("{s:s, s:s}", "graph_id", LG_GRAPH_ID, "assistant_id", LG_ASSISTANT_ID);

    if (m && set && json_object_update(m, set)) {
        json_decref(m);
        m = NULL;
    }
    return m;
}

json_t *lg__thread_meta_all(int *err)
{
    struct store *st = records_store();
    struct store_records l = {0};
    char after[SESSION_ID_MAX + 1] = "";
    json_t *all = st ? json_object() : NULL;
    size_t n = 0;

    *err = st && !all ? -ENOMEM : 0;
    /* A page at a time: the texts of one page, parsed, are all that is held twice. */
    while (all && !*err && (!n || l.n == LG_META_PAGE)) {
        store_records_release(&l);
        *err = store_record_list(st, LG_THREAD_KIND, NULL, *after ? after : NULL,
                                 LG_META_PAGE, &l);
        for (size_t i = 0; !*err && i < l.n; i++) {
            json_t *m = json_loadb(l.v[i].text, l.v[i].len, 0, NULL);

            if (json_is_object(m) && json_object_set_new(all, l.v[i].key, m))
                *err = -ENOMEM;
            else if (!json_is_object(m))
                json_decref(m); /* damaged: shown as none, as lg__thread_meta does */
        }
        if (!*err && l.n)
            snprintf(after, sizeof(after), "%s", l.v[l.n - 1].key);
        n++;
    }
    store_records_release(&l);
    if (*err) {
        json_decref(all);
        all = NULL;
    }
    return all;
}

json_t *lg__thread_meta(const char *tid)
{
    json_t *set = NULL, *m;
    struct store *st = records_store();

    if (st) {
        /* A record that cannot be read shows the defaults: the thread is there. */
        if (meta_read(st, tid, &set))
            set = NULL;
        m = lg__thread_meta_with(set);
        json_decref(set);
        return m;
    }
    m = json_pack("{s:s, s:s}", "graph_id", LG_GRAPH_ID, "assistant_id", LG_ASSISTANT_ID);
    pthread_mutex_lock(&meta_lock);
    set = json_object_get(meta_all, tid);
    if (m && set && json_object_update(m, set)) {
        json_decref(m);
        m = NULL;
    }
    /* A copy: a PATCH may change the stored one while this is encoded. */
    if (m) {
        json_t *copy = json_deep_copy(m);

        json_decref(m);
        m = copy;
    }
    pthread_mutex_unlock(&meta_lock);
    return m;
}

/* The bytes `m` takes as compact JSON: what limits.lg_metadata_max bounds. */
static size_t meta_bytes(const json_t *m)
{
    return m ? json_dumpb(m, NULL, 0, JSON_COMPACT) : 0;
}

/*
 * Merge `m` (borrowed object) into the thread's; `reset` forgets the old.
 * The merge is made on a copy and kept only when it fits in `max` bytes, so
 * a thread's metadata never grows past the limit however many PATCHes add
 * to it. 0, -E2BIG (nothing changed) or -ENOMEM.
 */
/*
 * meta_set on the store's record: read, merged, written back (deleted when
 * empty). The module's lock keeps this node's PATCHes of one thread from
 * losing each other's keys; two nodes patching one thread at once may
 * (the last write wins). 0, -E2BIG, -ENOMEM or the store's errno.
 */
static int meta_set_stored(struct store *st, const char *tid, json_t *m, bool reset,
                           size_t max)
{
    json_t *have = NULL, *next = NULL;
    char *text = NULL;
    int err = 0;

    pthread_mutex_lock(&meta_lock);
    if (!reset && (err = meta_read(st, tid, &have)))
        goto out_unlock;
    if (!(next = have ? json_incref(have) : json_object()) || json_object_update(next, m))
        err = -ENOMEM;
    else if (meta_bytes(next) > max)
        err = -E2BIG;
    else if (!json_object_size(next))
        err = (err = store_record_delete(st, LG_THREAD_KIND, tid)) == -ENOENT ? 0 : err;
    else if (!(text = json_dumps(next, JSON_COMPACT | JSON_PRESERVE_ORDER)))
        err = -ENOMEM;
    else
        err = store_record_put(st, LG_THREAD_KIND, tid, tid, text, strlen(text));
out_unlock:
    pthread_mutex_unlock(&meta_lock);
    free(text);
    json_decref(next);
    json_decref(have);
    return err;
}

static int meta_set(const char *tid, json_t *m, bool reset, size_t max)
{
    json_t *have, *next = NULL;
    struct store *st = records_store();
    int err = 0;

    if (st)
        return meta_set_stored(st, tid, m, reset, max);
    pthread_mutex_lock(&meta_lock);
    if (!meta_all)
        meta_all = json_object();
    have = reset ? NULL : json_object_get(meta_all, tid);
    if (!meta_all || !(next = have ? json_deep_copy(have) : json_object()) ||
        json_object_update(next, m)) {
        err = -ENOMEM;
    } else if (meta_bytes(next) > max) {
        err = -E2BIG;
    } else if (!json_object_size(next)) {
        json_object_del(meta_all, tid);
    } else {
        err = json_object_set(meta_all, tid, next) ? -ENOMEM : 0;
    }
    json_decref(next);
    pthread_mutex_unlock(&meta_lock);
    return err;
}

/* 413 in LangGraph's shape: the metadata would pass limits.lg_metadata_max. */
static enum MHD_Result meta_too_big(struct MHD_Connection *conn, size_t max)
{
    return lg__detail(conn, 413,
                      "a thread's metadata may take at most %zu bytes as JSON "
                      "(limits.lg_metadata_max)",
                      max);
}

/* With a store the record went with the session, in its transaction. */
static void meta_forget(const char *tid)
{
    pthread_mutex_lock(&meta_lock);
    json_object_del(meta_all, tid);
    pthread_mutex_unlock(&meta_lock);
}

void lg_thread_removed(const char *tid)
{
    meta_forget(tid);
    lg_run_forget_thread(tid);
}

void lg_threads_shutdown(void)
{
    pthread_mutex_lock(&meta_lock);
    json_decref(meta_all);
    meta_all = NULL;
    pthread_mutex_unlock(&meta_lock);
}

/* ---- routes ------------------------------------------------------------------- */

enum MHD_Result lg__table_error(struct MHD_Connection *conn, int err, const char *tid)
{
    switch (err) {
    case -ENOENT:
        return lg__detail(conn, 404, "Thread with ID %s not found", tid);
    case -EEXIST:
        return lg__detail(conn, 409, "Thread already exists");
    case -EINVAL:
        return lg__detail(conn, 422,
                          "a thread_id is 1 to %d letters, digits, '-', '_' or '.', "
                          "and not 'import', 'search' or 'count' (words the routes use)",
                          SESSION_ID_MAX);
    case -ENFILE:
        return lg__detail(conn, 429,
                          "the server's session limit (limits.max_sessions) "
                          "is reached");
    case -EDQUOT:
        return lg__detail(conn, 429,
                          "you own as many threads as a user may (limits.user_sessions)");
    case -ENOSPC:
        return lg__detail(conn, 507, "no room left in the store");
    case -ENOSYS:
        return lg__detail(conn, 405,
                          "this needs a database (the server runs with "
                          "--db :memory:)");
    case -ENOMEM:
        return lg__detail(conn, 500, "out of memory");
    default:
        return lg__detail(conn, 503, "the store is unusable (see /healthz)");
    }
}

/* POST /threads {thread_id?, metadata?, if_exists?}. */
static enum MHD_Result create(struct door *srv, const struct principal *who,
                              struct MHD_Connection *conn, const struct rx_buf *body)
{
    enum MHD_Result ret;
    json_t *q = lg__body(conn, body, &ret), *meta, *tidj;
    size_t max = __atomic_load_n(&srv->cfg->lg_metadata_max, __ATOMIC_RELAXED);
    const char *tid, *if_exists;
    struct session *s = NULL;
    int err;

    if (!q)
        return ret;
    meta = json_object_get(q, "metadata");
    tidj = json_object_get(q, "thread_id");
    tid = json_string_value(tidj);
    if_exists = json_string_value(json_object_get(q, "if_exists"));
    if (!if_exists && json_object_get(q, "if_exists") &&
        !json_is_null(json_object_get(q, "if_exists")))
        if_exists = "?"; /* not a string: refused below, as a wrong word is */
    if ((meta && !json_is_null(meta) && !json_is_object(meta)) ||
        (tidj && !json_is_null(tidj) && !tid) ||
        (if_exists && strcmp(if_exists, "raise") && strcmp(if_exists, "do_nothing"))) {
        json_decref(q);
        return lg__detail(conn, 422,
                          "'metadata' must be an object, 'thread_id' a string "
                          "and 'if_exists' \"raise\" or \"do_nothing\"");
    }
    if (json_is_object(meta) && meta_bytes(meta) > max) {
        json_decref(q);
        return meta_too_big(conn, max);
    }
    err = session_table_create_session(srv->sessions, tid, who, &s);
    if (err == -EEXIST && if_exists && !strcmp(if_exists, "do_nothing")) {
        s = session_table_get_as(srv->sessions, tid, who);
        err = s ? 0 : -ENOENT;
    } else if (!err && json_is_object(meta)) {
        err = meta_set(session_id(s), meta, true, max);
    }
    /* tid is the body's: answered before the body goes. */
    ret = err ? lg__table_error(conn, err, tid ? tid : "") : lg__reply_thread(conn, s);
    json_decref(q);
    if (s)
        session_unref(s);
    return ret;
}

/* PATCH /threads/<tid> {"metadata": {...}}: merged into the thread's. */
static enum MHD_Result patch(struct door *srv, struct MHD_Connection *conn,
                             struct session *s, const struct rx_buf *body)
{
    size_t max = __atomic_load_n(&srv->cfg->lg_metadata_max, __ATOMIC_RELAXED);
    enum MHD_Result ret;
    json_t *q = lg__body(conn, body, &ret), *meta;
    int err = 0;

    if (!q)
        return ret;
    meta = json_object_get(q, "metadata");
    if (meta && !json_is_null(meta) && !json_is_object(meta))
        ret = lg__detail(conn, 422, "'metadata' must be an object");
    else if (json_is_object(meta) && (err = meta_set(session_id(s), meta, false, max)))
        ret = err == -E2BIG ? meta_too_big(conn, max)
                            : lg__table_error(conn, err, session_id(s));
    else
        ret = lg__reply_thread(conn, s);
    json_decref(q);
    return ret;
}

static enum MHD_Result delete_thread(struct door *srv, struct MHD_Connection *conn,
                                     const char *tid)
{
    int err = session_table_delete(srv->sessions, tid);

    if (err)
        return lg__table_error(conn, err, tid);
    meta_forget(tid);
    lg_run_forget_thread(tid);
    return lg__empty(conn, 204);
}

/* POST /threads/<tid>/copy: a new thread from the whole log (a fork). */
static enum MHD_Result copy(struct door *srv, const struct principal *who,
                            struct MHD_Connection *conn, struct session *s)
{
    struct session *fork = NULL;
    json_t *meta = lg__thread_meta(session_id(s));
    enum MHD_Result ret;
    int64_t seq;
    int err;

    if (!meta || (err = lg__thread_seq(s, &seq))) {
        json_decref(meta);
        return lg__table_error(conn, meta ? err : -ENOMEM, session_id(s));
    }
    err = session_table_fork(srv->sessions, session_id(s), seq, who, &fork);
    if (!err && json_object_set_new(meta, "thread_id", json_string(session_id(fork))))
        err = -ENOMEM;
    if (!err) /* the source's metadata is within the bound already */
        err = meta_set(session_id(fork), meta, true, SIZE_MAX);
    json_decref(meta);
    ret = err ? lg__table_error(conn, err, session_id(s)) : lg__reply_thread(conn, fork);
    if (fork)
        session_unref(fork);
    return ret;
}

/* One thread's routes: `rest` follows /threads/<tid>. */
static enum MHD_Result thread_route(struct door *srv, const struct principal *who,
                                    struct MHD_Connection *conn, const char *method,
                                    struct session *s, const char *rest,
                                    const struct rx_buf *body)
{
    bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");

    if (!*rest) {
        if (get)
            return lg__reply_thread(conn, s);
        if (!strcmp(method, "PATCH"))
            return patch(srv, conn, s, body);
        if (!strcmp(method, "DELETE"))
            return delete_thread(srv, conn, session_id(s));
    } else if (!strncmp(rest, "/state", 6) || !strcmp(rest, "/history")) {
        return lg__state_route(srv, conn, method, s, rest, body);
    } else if (!strcmp(rest, "/copy")) {
        if (post)
            return copy(srv, who, conn, s);
    } else {
        return lg__detail(conn, 404, "Not Found");
    }
    return lg__detail(conn, 405, "Method Not Allowed");
}

enum MHD_Result lg_threads_route(struct door *srv, const struct principal *who,
                                 struct MHD_Connection *conn, const char *method,
                                 const char *path, const struct rx_buf *body)
{
    char tid[SESSION_ID_MAX + 1];
    struct session *s;
    enum MHD_Result ret;
    size_t n;

    if (!*path || !strcmp(path, "/")) {
        if (strcmp(method, "POST"))
            return lg__detail(conn, 405, "Method Not Allowed");
        return create(srv, who, conn, body);
    }
    if (!strcmp(path, "/search")) {
        if (strcmp(method, "POST"))
            return lg__detail(conn, 405, "Method Not Allowed");
        return lg__threads_search(srv, who, conn, body);
    }
    n = strcspn(path + 1, "/");
    if (*path != '/' || !n || n > SESSION_ID_MAX)
        return lg__detail(conn, 404, "Not Found");
    memcpy(tid, path + 1, n);
    tid[n] = '\0';
    if (!(s = lg__thread(srv, who, conn, tid, &ret)))
        return ret;
    ret = thread_route(srv, who, conn, method, s, path + 1 + n, body);
    session_unref(s);
    return ret;
}
