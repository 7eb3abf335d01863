/*
 * rx_checkpoint_sqlite - see rx_checkpoint_sqlite.h. A checkpoint row is
 * (id, thread, parent, delta, meta): delta is {"s": {key: value}, "a":
 * {key: [new items]}, "d": [key]} against the parent's state, meta the rest
 * of the checkpoint. The state of a row is its parent's with the delta
 * applied, so reading walks up to a remembered state (the cache) or to the
 * thread's first row, then forward.
 */
#include "graph/rx_checkpoint_sqlite.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "graph/rx_state_delta.h"
#include "state_machine/rx_alloc.h"

#define CACHE_SLOTS 8         /* states remembered, most recent first replaced last */
#define MAX_CHAIN   (1 << 20) /* a parent loop in a corrupt file stops here */

struct cache_slot {
    char *thread;
    sqlite3_int64 id;
    json_t *state; /* never modified, never handed out: readers get copies */
};

struct sql_store {
    struct rx_checkpoint base; /* first: the interface pointer is the store */
    pthread_mutex_t lock;
    sqlite3 *db;
    struct cache_slot cache[CACHE_SLOTS];
    unsigned next_slot;
};

static const char schema_sql[] =
    "PRAGMA journal_mode=WAL;"
    "PRAGMA synchronous=NORMAL;"
    "CREATE TABLE IF NOT EXISTS rx_checkpoints(id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " thread TEXT NOT NULL, parent INTEGER, delta TEXT NOT NULL, meta TEXT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS rx_checkpoints_thread ON rx_checkpoints(thread, id);"
    "CREATE TABLE IF NOT EXISTS rx_writes(thread TEXT NOT NULL, checkpoint INTEGER NOT "
    "NULL, task TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY(thread, checkpoint, "
    "task)) WITHOUT ROWID;";

static int db_error(int rc)
{
    switch (rc & 0xff) {
    case SQLITE_NOMEM:
        return -ENOMEM;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
        return -EBADMSG;
    default:
        return -EIO;
    }
}

static int exec_sql(struct sql_store *s, const char *sql)
{
    int rc = sqlite3_exec(s->db, sql, NULL, NULL, NULL);

    return rc == SQLITE_OK ? 0 : db_error(rc);
}

/* A statement with text/int parameters bound in order: "t" text, "i" int64. */
static int prepare(struct sql_store *s, const char *sql, sqlite3_stmt **st,
                   const char *types, ...)
{
    va_list ap;
    int rc, i;

    rc = sqlite3_prepare_v2(s->db, sql, -1, st, NULL);
    if (rc != SQLITE_OK)
        return db_error(rc);
    va_start(ap, types);
    for (i = 0; types[i] && rc == SQLITE_OK; i++) {
        if (types[i] == 't')
            rc = sqlite3_bind_text(*st, i + 1, va_arg(ap, const char *), -1,
                                   SQLITE_TRANSIENT);
        else
            rc = sqlite3_bind_int64(*st, i + 1, va_arg(ap, sqlite3_int64));
    }
    va_end(ap);
    if (rc != SQLITE_OK) {
        sqlite3_finalize(*st);
        *st = NULL;
        return db_error(rc);
    }
    return 0;
}

/* Run a statement that returns no rows, then finalize it. */
static int exec_stmt(sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);

    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : db_error(rc);
}

static bool parse_id(const char *text, sqlite3_int64 *id)
{
    char *end;
    long long v;

    if (!text || !*text)
        return false;
    errno = 0;
    v = strtoll(text, &end, 10);
    if (errno || *end || v <= 0)
        return false;
    *id = (sqlite3_int64)v;
    return true;
}

/* ---- the cache of reconstructed states ---- */

static struct cache_slot *cache_find(struct sql_store *s, const char *thread,
                                     sqlite3_int64 id)
{
    size_t i;

    for (i = 0; i < CACHE_SLOTS; i++)
        if (s->cache[i].state && s->cache[i].id == id &&
            !strcmp(s->cache[i].thread, thread))
            return &s->cache[i];
    return NULL;
}

/* Remember `state` (a reference is taken over). Out of memory: just not cached. */
static void cache_put(struct sql_store *s, const char *thread, sqlite3_int64 id,
                      json_t *state)
{
    struct cache_slot *c = cache_find(s, thread, id);
    char *copy;

    if (c) {
        json_decref(state);
        return;
    }
    copy = rx_strdup(thread);
    if (!copy) {
        json_decref(state);
        return;
    }
    c = &s->cache[s->next_slot++ % CACHE_SLOTS];
    rx_free(c->thread);
    json_decref(c->state);
    c->thread = copy;
    c->id = id;
    c->state = state;
}

/* Forget the states of a thread and of its subgraphs. */
static void cache_drop(struct sql_store *s, const char *thread)
{
    size_t i, n = strlen(thread);

    for (i = 0; i < CACHE_SLOTS; i++) {
        const char *t = s->cache[i].thread;

        if (!t || strncmp(t, thread, n) || (t[n] && t[n] != '|'))
            continue;
        rx_free(s->cache[i].thread);
        json_decref(s->cache[i].state);
        s->cache[i].thread = NULL;
        s->cache[i].state = NULL;
    }
}

/*
 * The state of row `id` of `thread` (a new reference the caller must not
 * modify in place: it shares members with the cache). Walks up to a cached
 * state or the first row, then applies the deltas forward.
 */
static int state_at(struct sql_store *s, const char *thread, sqlite3_int64 id,
                    json_t **out)
{
    json_t *deltas = json_array(), *state = NULL, *d;
    struct cache_slot *c;
    sqlite3_stmt *st = NULL;
    sqlite3_int64 cur = id;
    size_t i;
    int rc = 0, step;

    if (!deltas)
        return -ENOMEM;
    while (!state) {
        c = cache_find(s, thread, cur);
        if (c) {
            state = json_copy(c->state);
            rc = state ? 0 : -ENOMEM;
            break;
        }
        if (json_array_size(deltas) >= MAX_CHAIN) {
            rc = -EBADMSG;
            break;
        }
        rc =
            prepare(s, "SELECT parent, delta FROM rx_checkpoints WHERE id=? AND thread=?",
                    &st, "it", cur, thread);
        if (rc)
            break;
        step = sqlite3_step(st);
        if (step != SQLITE_ROW) {
            rc = step == SQLITE_DONE ? (cur == id ? -ENOENT : -EBADMSG) : db_error(step);
            break;
        }
        d = json_loads((const char *)sqlite3_column_text(st, 1), 0, NULL);
        if (!d || json_array_append_new(deltas, d)) {
            rc = -EBADMSG;
            break;
        }
        if (sqlite3_column_type(st, 0) == SQLITE_NULL) {
            state = json_object();
            rc = state ? 0 : -ENOMEM;
        } else {
            cur = sqlite3_column_int64(st, 0);
        }
        sqlite3_finalize(st);
        st = NULL;
    }
    sqlite3_finalize(st);
    for (i = json_array_size(deltas); !rc && i > 0; i--)
        rc = rx_state_delta_apply(state, json_array_get(deltas, i - 1));
    json_decref(deltas);
    if (rc) {
        json_decref(state);
        return rc;
    }
    cache_put(s, thread, id, json_incref(state));
    *out = state;
    return 0;
}

/* ---- the interface ---- */

static int sql_put(struct rx_checkpoint *base, const char *thread, json_t *cp,
                   char id_out[RX_CHECKPOINT_ID_LEN])
{
    struct sql_store *s = (struct sql_store *)base;
    json_t *state = json_object_get(cp, "state"), *prev = NULL, *delta = NULL, *meta;
    const char *ptext = json_string_value(json_object_get(cp, "parent"));
    char *dtext = NULL, *mtext = NULL;
    sqlite3_stmt *st = NULL;
    sqlite3_int64 parent = 0, id;
    int rc;

    if (!json_is_object(cp) || !json_is_object(state) ||
        (ptext && !parse_id(ptext, &parent)))
        return -EINVAL;
    pthread_mutex_lock(&s->lock);
    rc = parent ? state_at(s, thread, parent, &prev) : 0;
    if (rc)
        goto out_unlock;
    rc = -ENOMEM;
    delta = rx_state_delta_make(prev, state);
    meta = json_copy(cp);
    if (meta) {
        json_object_del(meta, "state");
        json_object_del(meta, "parent");
        json_object_del(meta, "id");
        mtext = json_dumps(meta, JSON_COMPACT);
        json_decref(meta);
    }
    dtext = delta ? json_dumps(delta, JSON_COMPACT) : NULL;
    if (!dtext || !mtext)
        goto out_unlock;
    /* One transaction: the row, and dropping the writes it now holds. */
    rc = exec_sql(s, "BEGIN IMMEDIATE");
    if (rc)
        goto out_unlock;
    rc = prepare(
        s, "INSERT INTO rx_checkpoints(thread, parent, delta, meta) VALUES(?,?,?,?)", &st,
        "t", thread);
    if (!rc) {
        if (parent)
            sqlite3_bind_int64(st, 2, parent);
        else
            sqlite3_bind_null(st, 2);
        sqlite3_bind_text(st, 3, dtext, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 4, mtext, -1, SQLITE_STATIC);
        rc = exec_stmt(st);
    }
    id = sqlite3_last_insert_rowid(s->db);
    if (!rc && parent) {
        rc = prepare(s, "DELETE FROM rx_writes WHERE thread=? AND checkpoint=?", &st,
                     "ti", thread, parent);
        if (!rc)
            rc = exec_stmt(st);
    }
    if (!rc)
        rc = exec_sql(s, "COMMIT");
    if (rc) {
        if (exec_sql(s, "ROLLBACK")) {
            /* Nothing was committed either way; the next BEGIN says if it is stuck. */
        }
        goto out_unlock;
    }
    snprintf(id_out, RX_CHECKPOINT_ID_LEN, "%" PRId64, (int64_t)id);
    /*
     * Our own deep copy: the caller's state shares its lists with what invoke
     * hands out, and nothing stops a caller from changing those in place.
     */
    cache_put(s, thread, id, json_deep_copy(state));
out_unlock:
    pthread_mutex_unlock(&s->lock);
    free(dtext);
    free(mtext);
    json_decref(delta);
    json_decref(prev);
    return rc;
}

/* Checkpoint `id` of `thread`, whole, as a new deep copy. */
static int load_one(struct sql_store *s, const char *thread, sqlite3_int64 id,
                    json_t **out)
{
    sqlite3_stmt *st = NULL;
    json_t *cp = NULL, *state = NULL, *copy;
    char idtext[RX_CHECKPOINT_ID_LEN];
    int rc, step;

    rc = prepare(s, "SELECT parent, meta FROM rx_checkpoints WHERE id=? AND thread=?",
                 &st, "it", id, thread);
    if (rc)
        return rc;
    step = sqlite3_step(st);
    if (step != SQLITE_ROW) {
        rc = step == SQLITE_DONE ? -ENOENT : db_error(step);
        goto out_release;
    }
    cp = json_loads((const char *)sqlite3_column_text(st, 1), 0, NULL);
    if (!json_is_object(cp)) {
        rc = -EBADMSG;
        goto out_release;
    }
    if (sqlite3_column_type(st, 0) != SQLITE_NULL) {
        snprintf(idtext, sizeof(idtext), "%" PRId64,
                 (int64_t)sqlite3_column_int64(st, 0));
        if (json_object_set_new(cp, "parent", json_string(idtext)))
            goto out_nomem;
    }
    rc = state_at(s, thread, id, &state);
    if (rc)
        goto out_release;
    copy = json_deep_copy(state); /* the caller may change it freely */
    snprintf(idtext, sizeof(idtext), "%" PRId64, (int64_t)id);
    if (json_object_set_new(cp, "state", copy) ||
        json_object_set_new(cp, "id", json_string(idtext)))
        goto out_nomem;
    *out = cp;
    cp = NULL;
    goto out_release;
out_nomem:
    rc = -ENOMEM;
out_release:
    sqlite3_finalize(st);
    json_decref(state);
    json_decref(cp);
    return rc;
}

static int sql_get(struct rx_checkpoint *base, const char *thread, const char *idtext,
                   json_t **out)
{
    struct sql_store *s = (struct sql_store *)base;
    sqlite3_stmt *st = NULL;
    sqlite3_int64 id = 0;
    int rc = 0;

    if (idtext && !parse_id(idtext, &id))
        return -ENOENT;
    pthread_mutex_lock(&s->lock);
    if (!idtext) {
        rc = prepare(s, "SELECT max(id) FROM rx_checkpoints WHERE thread=?", &st, "t",
                     thread);
        if (!rc) {
            rc = sqlite3_step(st) == SQLITE_ROW ? 0 : -EIO;
            if (!rc && sqlite3_column_type(st, 0) == SQLITE_NULL)
                rc = -ENOENT;
            if (!rc)
                id = sqlite3_column_int64(st, 0);
            sqlite3_finalize(st);
        }
    }
    if (!rc || idtext)
        rc = load_one(s, thread, id, out);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sql_list(struct rx_checkpoint *base, const char *thread, json_t **out)
{
    struct sql_store *s = (struct sql_store *)base;
    sqlite3_stmt *st = NULL;
    json_t *list = json_array(), *cp;
    int rc, step = SQLITE_DONE;

    if (!list)
        return -ENOMEM;
    pthread_mutex_lock(&s->lock);
    rc = prepare(s, "SELECT id FROM rx_checkpoints WHERE thread=? ORDER BY id", &st, "t",
                 thread);
    while (!rc && (step = sqlite3_step(st)) == SQLITE_ROW) {
        rc = load_one(s, thread, sqlite3_column_int64(st, 0), &cp);
        if (!rc && json_array_append_new(list, cp))
            rc = -ENOMEM;
    }
    if (!rc && step != SQLITE_DONE)
        rc = db_error(step);
    sqlite3_finalize(st);
    pthread_mutex_unlock(&s->lock);
    if (!rc && !json_array_size(list))
        rc = -ENOENT;
    if (rc) {
        json_decref(list);
        return rc;
    }
    *out = list;
    return 0;
}

static int sql_put_writes(struct rx_checkpoint *base, const char *thread,
                          const char *cptext, const char *task, json_t *writes)
{
    struct sql_store *s = (struct sql_store *)base;
    sqlite3_stmt *st = NULL;
    sqlite3_int64 cp;
    char *text;
    int rc;

    if (!parse_id(cptext, &cp))
        return -ENOENT;
    text = json_dumps(writes, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!text)
        return -ENOMEM;
    pthread_mutex_lock(&s->lock);
    rc = prepare(s,
                 "INSERT OR REPLACE INTO rx_writes(thread, checkpoint, task, value) "
                 "VALUES(?,?,?,?)",
                 &st, "titt", thread, cp, task, text);
    if (!rc)
        rc = exec_stmt(st);
    pthread_mutex_unlock(&s->lock);
    free(text);
    return rc;
}

static int sql_get_writes(struct rx_checkpoint *base, const char *thread,
                          const char *cptext, json_t **out)
{
    struct sql_store *s = (struct sql_store *)base;
    sqlite3_stmt *st = NULL;
    json_t *all = json_object(), *v;
    sqlite3_int64 cp;
    int rc, step = SQLITE_DONE;

    if (!all)
        return -ENOMEM;
    if (!parse_id(cptext, &cp)) {
        *out = all;
        return 0;
    }
    pthread_mutex_lock(&s->lock);
    rc = prepare(s, "SELECT task, value FROM rx_writes WHERE thread=? AND checkpoint=?",
                 &st, "ti", thread, cp);
    while (!rc && (step = sqlite3_step(st)) == SQLITE_ROW) {
        v = json_loads((const char *)sqlite3_column_text(st, 1), JSON_DECODE_ANY, NULL);
        if (!v)
            rc = -EBADMSG;
        else if (json_object_set_new(all, (const char *)sqlite3_column_text(st, 0), v))
            rc = -ENOMEM;
    }
    if (!rc && step != SQLITE_DONE)
        rc = db_error(step);
    sqlite3_finalize(st);
    pthread_mutex_unlock(&s->lock);
    if (rc) {
        json_decref(all);
        return rc;
    }
    *out = all;
    return 0;
}

static int sql_delete_thread(struct rx_checkpoint *base, const char *thread)
{
    static const char *const sql[] = {
        "DELETE FROM rx_checkpoints WHERE thread=?1 OR substr(thread, 1, length(?1) + 1) "
        "= ?1 || '|'",
        "DELETE FROM rx_writes WHERE thread=?1 OR substr(thread, 1, length(?1) + 1) = ?1 "
        "|| '|'",
    };
    struct sql_store *s = (struct sql_store *)base;
    sqlite3_stmt *st;
    size_t i;
    int rc = 0;

    pthread_mutex_lock(&s->lock);
    cache_drop(s, thread);
    for (i = 0; !rc && i < 2; i++) {
        rc = prepare(s, sql[i], &st, "t", thread);
        if (!rc)
            rc = exec_stmt(st);
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static void sql_destroy(struct rx_checkpoint *base)
{
    struct sql_store *s = (struct sql_store *)base;
    size_t i;

    for (i = 0; i < CACHE_SLOTS; i++) {
        rx_free(s->cache[i].thread);
        json_decref(s->cache[i].state);
    }
    sqlite3_close(s->db);
    pthread_mutex_destroy(&s->lock);
    rx_free(s);
}

struct rx_checkpoint *rx_checkpoint_sqlite_open(const char *path, struct rx_error *err)
{
    struct sql_store *s;
    int rc;

    if (!path) {
        rx_error_set(err, -EINVAL, "no database path");
        return NULL;
    }
    s = rx_malloc(sizeof(*s));
    if (!s) {
        rx_error_set(err, -ENOMEM, "out of memory");
        return NULL;
    }
    memset(s, 0, sizeof(*s));
    rc = sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(s->db, schema_sql, NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        rx_error_set(err, db_error(rc), "checkpoint database '%s': %s", path,
                     s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
        sqlite3_close(s->db);
        rx_free(s);
        return NULL;
    }
    sqlite3_busy_timeout(s->db, 5000);
    pthread_mutex_init(&s->lock, NULL);
    s->base.put = sql_put;
    s->base.get = sql_get;
    s->base.list = sql_list;
    s->base.destroy = sql_destroy;
    s->base.put_writes = sql_put_writes;
    s->base.get_writes = sql_get_writes;
    s->base.delete_thread = sql_delete_thread;
    return &s->base;
}
