/*
 * pg_store - the input log in PostgreSQL, the backend of store/store.c for a
 * connection string: telling one from a path, opening (three connections,
 * the schema), closing, settings, health, binary array parameters and the
 * table of operations. Connections, reconnecting with backoff, statements
 * and transactions are in pg_store_conn.c, the writer thread in
 * pg_store_writer.c, create/delete/fork/gc/title/import in pg_store_admin.c,
 * the reads in pg_store_read.c; what they share is in pg_store_internal.h.
 * See pg_store.h.
 */
#include "store/pg/pg_store.h"
#include "store/pg/pg_store_internal.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libpq-fe.h>

/*
 * Created on first use. IF NOT EXISTS alone races (two nodes creating one
 * table both pass the check, one fails on pg_type's unique index), hence
 * the transaction-scoped advisory lock: nodes starting together take turns.
 * search_docs: what people read of each input (seq > 0) and the title they
 * gave (seq 0), with its words for full-text search.
 */
static const char schema_sql[] =
    "BEGIN;"
    "SELECT pg_advisory_xact_lock(" PG_STORE_SCHEMA_LOCK ");"
    "CREATE TABLE IF NOT EXISTS rx_meta(k text PRIMARY KEY, v bigint NOT NULL);"
    "CREATE TABLE IF NOT EXISTS sessions(id text PRIMARY KEY, created_at bigint NOT NULL,"
    " updated_at bigint NOT NULL, title text, messages bigint NOT NULL DEFAULT 0,"
    " busy boolean NOT NULL DEFAULT false, auto_title text,"
    " owner text NOT NULL DEFAULT '" STORE_OWNER_DEFAULT "');"
    "CREATE INDEX IF NOT EXISTS sessions_page ON sessions(updated_at, id);"
    "CREATE INDEX IF NOT EXISTS sessions_owner ON sessions(owner, updated_at, id);"
    "CREATE INDEX IF NOT EXISTS sessions_busy ON sessions(id) WHERE busy;"
    "CREATE TABLE IF NOT EXISTS inputs(session_id text NOT NULL, seq bigint NOT NULL,"
    " input text NOT NULL, PRIMARY KEY(session_id, seq));"
    "CREATE TABLE IF NOT EXISTS snapshots(session_id text NOT NULL, seq bigint NOT NULL,"
    " state text NOT NULL, PRIMARY KEY(session_id, seq));"
    "CREATE TABLE IF NOT EXISTS search_docs(id bigserial PRIMARY KEY,"
    " session_id text NOT NULL, seq bigint NOT NULL, body text NOT NULL,"
    " words tsvector GENERATED ALWAYS AS (to_tsvector('simple', body)) STORED);"
    "CREATE INDEX IF NOT EXISTS search_docs_session ON search_docs(session_id, seq);"
    "CREATE INDEX IF NOT EXISTS search_docs_words ON search_docs USING gin(words);"
    "CREATE TABLE IF NOT EXISTS nodes(id text PRIMARY KEY, url text,"
    " expires_at timestamptz);"
    "CREATE TABLE IF NOT EXISTS owners(session_id text PRIMARY KEY, node text,"
    " since timestamptz);" PG_STORE_STREAM_SQL
    "INSERT INTO rx_meta(k, v) VALUES('version', 4) ON CONFLICT (k) DO NOTHING;"
    "COMMIT";

/* ---- connection strings ------------------------------------------------------ */

static bool pg_store_is_conninfo(const char *path)
{
    PQconninfoOption *opts;
    char *msg = NULL;

    if (!path)
        return false;
    if (!strncmp(path, "postgres://", 11) || !strncmp(path, "postgresql://", 13))
        return true;
    /* Keywords: "host=... dbname=..."; a file name has no valid keyword=value. */
    if (!strchr(path, '='))
        return false;
    opts = PQconninfoParse(path, &msg);
    PQfreemem(msg);
    if (!opts)
        return false;
    PQconninfoFree(opts);
    return true;
}

/* Remove [from, to) of s in place. */
static void cut(char *s, size_t from, size_t to)
{
    memmove(s + from, s + to, strlen(s + to) + 1);
}

/*
 * The connection string without its password, for every message: in a
 * URL the ":password" of user:password@ and a password= parameter, in
 * keywords the value of password=. A malloc'd copy, or NULL (ENOMEM).
 */
static char *redact(const char *conninfo)
{
    char *s = strdup(conninfo), *p;

    if (!s)
        return NULL;
    if ((p = strstr(s, "://"))) {
        char *auth = p + 3, *end = auth + strcspn(auth, "/?"), *at = NULL, *colon;

        for (char *q = auth; q < end; q++)
            if (*q == '@')
                at = q;
        if (at && (colon = memchr(auth, ':', (size_t)(at - auth))))
            cut(s, (size_t)(colon - s), (size_t)(at - s));
        while ((p = strstr(s, "password="))) {
            size_t from = (size_t)(p - s), to = from + strcspn(p, "&");

            if (from && (s[from - 1] == '?' || s[from - 1] == '&'))
                from--;
            else if (s[to] == '&')
                to++;
            cut(s, from, to);
        }
        return s;
    }
    for (p = strstr(s, "password"); p; p = strstr(p + 1, "password")) {
        char *v = p + 8;
        size_t from, to;

        while (*v == ' ')
            v++;
        if (*v != '=' || (p > s && p[-1] != ' '))
            continue;
        from = (size_t)(p - s);
        v++;
        while (*v == ' ')
            v++;
        if (*v == '\'') {
            for (v++; *v && *v != '\''; v++)
                if (*v == '\\' && v[1])
                    v++;
            if (*v)
                v++;
        } else {
            v += strcspn(v, " ");
        }
        to = (size_t)(v - s);
        cut(s, from, to);
        p = s + from - (from ? 1 : 0);
    }
    return s;
}

/* ---- errors and health ------------------------------------------------------ */

/* libpq's sentences end with a newline and may span lines: the error is one line. */
void pg_store__one_line(char *s)
{
    size_t n = strlen(s);

    while (n && (s[n - 1] == '\n' || s[n - 1] == ' '))
        s[--n] = '\0';
    for (char *p = s; *p; p++)
        if (*p == '\n' || *p == '\t')
            *p = ' ';
}

/* The database cannot be reached: say so until a connection succeeds. */
void pg_store__mark_down(struct pg_store *pg, const char *what, const char *msg)
{
    pthread_mutex_lock(&pg->base.hlock);
    snprintf(pg->why, sizeof(pg->why),
             "the database '%.200s' is unreachable (%s): %.200s", pg->safe, what, msg);
    pg_store__one_line(pg->why);
    snprintf(pg->base.err, sizeof(pg->base.err), "%s", pg->why);
    pg->down = true;
    pthread_mutex_unlock(&pg->base.hlock);
}

void pg_store__mark_up(struct pg_store *pg)
{
    pthread_mutex_lock(&pg->base.hlock);
    pg->down = false;
    pthread_mutex_unlock(&pg->base.hlock);
}

void pg_store__wrote(struct pg_store *pg)
{
    pthread_mutex_lock(&pg->base.hlock);
    pg->full = false;
    pg->down = false;
    pthread_mutex_unlock(&pg->base.hlock);
}

/* Not sticky: the state of the last attempt; hlock only, never a query. */
enum store_health pg_store_health(struct store *base, struct rx_error *why)
{
    struct pg_store *pg = pg_store_of(base);
    enum store_health h;

    pthread_mutex_lock(&pg->base.hlock);
    h = pg->down ? STORE_UNAVAILABLE : pg->full ? STORE_FULL : STORE_OK;
    rx_error_set(why, 0, "%s", h == STORE_OK ? "" : pg->why);
    pthread_mutex_unlock(&pg->base.hlock);
    return h;
}

/* ---- binary arrays ------------------------------------------------------------ */

static int put_u32(struct rx_buf *b, uint32_t v)
{
    unsigned char x[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 8), (unsigned char)v};

    return rx_buf_append(b, x, sizeof(x));
}

void pg_store__array_init(struct pg_array *a, uint32_t oid)
{
    rx_buf_init(&a->b, PG_STORE_PARAM_MAX);
    a->n = 0;
    a->oid = oid;
}

void pg_store__array_release(struct pg_array *a)
{
    rx_buf_release(&a->b);
}

/* array_recv's header: ndim 1, no nulls, the element type, count, lower bound 1. */
static int array_head(struct pg_array *a)
{
    if (a->b.len)
        return 0;
    return put_u32(&a->b, 1) || put_u32(&a->b, 0) || put_u32(&a->b, a->oid) ||
                   put_u32(&a->b, 0) || put_u32(&a->b, 1)
               ? -ENOMEM
               : 0;
}

int pg_store__array_text(struct pg_array *a, const char *s, size_t len)
{
    if (len > PG_STORE_PARAM_MAX || array_head(a) || put_u32(&a->b, (uint32_t)len) ||
        rx_buf_append(&a->b, s, len))
        return -ENOMEM;
    a->n++;
    return 0;
}

int pg_store__array_i64(struct pg_array *a, int64_t v)
{
    uint64_t u = (uint64_t)v;

    if (array_head(a) || put_u32(&a->b, 8) || put_u32(&a->b, (uint32_t)(u >> 32)) ||
        put_u32(&a->b, (uint32_t)u))
        return -ENOMEM;
    a->n++;
    return 0;
}

int pg_store__array_end(struct pg_array *a)
{
    if (array_head(a))
        return -ENOMEM;
    if (!a->n) { /* an empty array has no dimension */
        rx_buf_reset(&a->b);
        return put_u32(&a->b, 0) || put_u32(&a->b, 0) || put_u32(&a->b, a->oid) ? -ENOMEM
                                                                                : 0;
    }
    /* The count, at byte 12 of the header. */
    for (int i = 0; i < 4; i++)
        ((unsigned char *)a->b.data)[12 + i] = (unsigned char)(a->n >> (24 - 8 * i));
    return 0;
}

/* ---- open / close --------------------------------------------------------------- */

/* Create or check the schema on `pc`. 0, or -EPROTO/-EIO with `why` set. */
static int check_schema(struct pg_store *pg, struct pg_conn *pc, char *why, size_t n)
{
    PGresult *r;
    int64_t ver;
    int err = 0;

    /* A schema in place is only read: its DDL (CREATE INDEX IF NOT EXISTS
       too) would take locks that deadlock with the live nodes' commits. */
    r = PQexec(pc->c, "SELECT to_regclass('rx_meta') IS NOT NULL");
    if (r && PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) &&
        !strcmp(PQgetvalue(r, 0, 0), "t")) {
        PQclear(r);
        goto out_version;
    }
    PQclear(r);
    r = PQexec(pc->c, schema_sql);
    if (!r || PQresultStatus(r) != PGRES_COMMAND_OK) {
        snprintf(why, n, "creating the schema: %s",
                 r ? PQresultErrorMessage(r) : PQerrorMessage(pc->c));
        PQclear(r);
        pg_store__rollback(pg, pc);
        return -EIO;
    }
    PQclear(r);
out_version:
    if ((err = pg_store__exec(pg, pc, "reading the schema version",
                              "SELECT v FROM rx_meta WHERE k = 'version'", 0, NULL, NULL,
                              NULL, &r))) {
        pthread_mutex_lock(&pg->base.hlock);
        snprintf(why, n, "%s", pg->base.err);
        pthread_mutex_unlock(&pg->base.hlock);
        return err;
    }
    ver = PQntuples(r) ? pg_store__i64(r, 0, 0) : 0;
    PQclear(r);
    if (ver > PG_STORE_SCHEMA_VERSION) {
        snprintf(why, n,
                 "schema version %lld is newer than this reflexor supports (%d); "
                 "use a newer reflexor",
                 (long long)ver, PG_STORE_SCHEMA_VERSION);
        return -EPROTO;
    }
    if (ver < 1) {
        snprintf(why, n, "unknown schema version %lld", (long long)ver);
        return -EPROTO;
    }
    return 0;
}

/*
 * The index the cluster's scan reads its own sessions by (SELECT session_id
 * FROM owners WHERE node = $1, every lease_ms / 4 on every node): without
 * it each scan read every owners row, one per session ever owned, 7-22 ms
 * at 100 000 chats, 50-105 ms at a million (bench/scale_pg.sh).
 * Created at open when missing, in a database of any schema version, as the
 * records table is: only when missing, since DDL on a live database takes
 * locks the nodes' commits wait for (the build blocks claims while it
 * runs, once; not measured at a million rows).
 */
static const char owners_index_sql[] =
    "BEGIN;"
    "SELECT pg_advisory_xact_lock(" PG_STORE_SCHEMA_LOCK ");"
    "CREATE INDEX IF NOT EXISTS owners_node ON owners(node);"
    "COMMIT";

int pg_store__ensure(struct pg_store *pg, const char *relation, const char *sql,
                     const char *what, char *why, size_t n)
{
    const char *name[1] = {relation};
    PGresult *r = PQexecParams(pg->a.c, "SELECT to_regclass($1) IS NOT NULL", 1, NULL,
                               name, NULL, NULL, 0);
    bool there = r && PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) &&
                 !strcmp(PQgetvalue(r, 0, 0), "t");

    PQclear(r);
    if (there)
        return 0;
    r = PQexec(pg->a.c, sql);
    if (!r || PQresultStatus(r) != PGRES_COMMAND_OK) {
        snprintf(why, n, "creating %s: %s", what,
                 r ? PQresultErrorMessage(r) : PQerrorMessage(pg->a.c));
        PQclear(r);
        pg_store__rollback(pg, &pg->a);
        return -EIO;
    }
    PQclear(r);
    return 0;
}

static int owners_index(struct pg_store *pg, char *why, size_t n)
{
    return pg_store__ensure(pg, "owners_node", owners_index_sql, "the owners' index", why,
                            n);
}

/* Connect `pc` at open: the database unreachable at start-up is an error. */
static int open_conn(struct pg_store *pg, struct pg_conn *pc, const char *name, char *why,
                     size_t n)
{
    pc->name = name;
    pc->backoff_ms = PG_STORE_BACKOFF_MIN_MS;
    if (pg_store__conn_get(pg, pc)) {
        pthread_mutex_lock(&pg->base.hlock);
        snprintf(why, n, "%s", pg->why);
        pthread_mutex_unlock(&pg->base.hlock);
        return -EIO;
    }
    return 0;
}

/*
 * A schema 1 or 2 database upgraded: the owner column added (2 to 3) and, from
 * schema 1, each session's row computed from its log, once (by whichever
 * nodes start meanwhile, each taking the next); the line says how many this
 * node did. 0, or the errno with `why` set.
 */
static int rows_upgrade(struct pg_store *pg, char *why, size_t n)
{
    int64_t done = 0;
    int err = pg_store__rows_upgrade(pg, &done, why, n);

    if (!err && done)
        fprintf(stderr,
                "reflexor: database '%s': upgraded %lld session(s) to schema %d\n",
                pg->safe, (long long)done, PG_STORE_SCHEMA_VERSION);
    return err;
}

static void pg_store_close(struct store *base);

static struct store *pg_store_open(const char *conninfo, struct rx_error *err)
{
    char why[RX_ERR_LEN] = "";
    struct pg_store *pg;
    int rc;

    pg = calloc(1, sizeof(*pg));
    if (!pg) {
        rx_error_set(err, 0, "out of memory opening the database");
        return NULL;
    }
    pg->durable = true;
    pthread_mutex_init(&pg->alock, NULL);
    pthread_mutex_init(&pg->rlock, NULL);
    store__base_init(&pg->base, &pg_store_backend);
    store_queue_init(&pg->queue);
    pg->conninfo = strdup(conninfo);
    pg->safe = redact(conninfo);
    if (!pg->conninfo || !pg->safe) {
        snprintf(why, sizeof(why), "out of memory");
        goto out_fail;
    }
    if (open_conn(pg, &pg->a, "admin", why, sizeof(why)) ||
        check_schema(pg, &pg->a, why, sizeof(why)) ||
        pg_store__records_schema(pg, why, sizeof(why)) ||
        owners_index(pg, why, sizeof(why)) ||
        open_conn(pg, &pg->r, "reader", why, sizeof(why)) ||
        open_conn(pg, &pg->w, "writer", why, sizeof(why)))
        goto out_fail;
    if (rows_upgrade(pg, why, sizeof(why)))
        goto out_fail;
    if ((rc = store_queue_start(&pg->queue, pg_store__writer_main, pg))) {
        snprintf(why, sizeof(why), "cannot start a thread: %s", strerror(rc));
        goto out_fail;
    }
    return &pg->base;

out_fail:
    pg_store__one_line(why);
    rx_error_set(err, 0, "'%s': %s", pg->safe ? pg->safe : "", why);
    pg_store_close(&pg->base);
    return NULL;
}

static void pg_store_close(struct store *base)
{
    struct pg_store *pg = pg_store_of(base);

    /* The writer commits what is queued, the notifier answers it, they end. */
    store_queue_close(&pg->queue);
    PQfinish(pg->w.c);
    PQfinish(pg->a.c);
    PQfinish(pg->r.c);
    free(pg->safe);
    free(pg->conninfo);
    store__base_release(&pg->base);
    pthread_mutex_destroy(&pg->rlock);
    pthread_mutex_destroy(&pg->alock);
    free(pg);
}

void pg_store_set_node(struct store *base, const char *node)
{
    struct pg_store *pg = pg_store_of(base);

    pthread_mutex_lock(&pg->base.hlock);
    pg->fenced = node != NULL;
    snprintf(pg->node, sizeof(pg->node), "%s", node ? node : "");
    pthread_mutex_unlock(&pg->base.hlock);
}

/* Applied by the writer before its next batch (its connection is its own). */
int pg_store_set_durable(struct store *base, bool fsync_each_commit)
{
    struct pg_store *pg = pg_store_of(base);
    pthread_mutex_lock(&pg->queue.lock);
    pg->durable = fsync_each_commit;
    pg->durable_set = false;
    pthread_mutex_unlock(&pg->queue.lock);
    return 0;
}

void pg_store_commit_counts(struct store *base, int64_t *commits, int64_t *writes)
{
    struct pg_store *pg = pg_store_of(base);
    if (commits)
        *commits = __atomic_load_n(&pg->commits, __ATOMIC_RELAXED);
    if (writes)
        *writes = __atomic_load_n(&pg->writes, __ATOMIC_RELAXED);
}

/* PostgreSQL's own quotas apply: accepted and ignored (pg_store.h). */
static int pg_store_set_max_bytes(struct store *st, int64_t max_bytes)
{
    (void)st;
    (void)max_bytes;
    return 0;
}

const struct store_backend pg_store_backend = {
    .name = "postgresql",
    .shared = true, /* any number of nodes on one database (SPEC 6.1) */
    .accepts = pg_store_is_conninfo,
    .open = pg_store_open,
    .open_beside = pg_store_open, /* shared by design: a second opener is a node */
    .close = pg_store_close,
    .set_durable = pg_store_set_durable,
    .set_max_bytes = pg_store_set_max_bytes,
    .set_node = pg_store_set_node,
    .health = pg_store_health,
    .stats = pg_store_stats,
    .create_session = pg_store_create_session,
    .delete_session = pg_store_delete_session,
    .session_created = pg_store_session_created,
    .list_sessions = pg_store_list_sessions,
    .fork = pg_store_fork,
    .import = pg_store_import,
    .gc_list = pg_store_gc_list,
    .sessions_page = pg_store_sessions_page,
    .sessions_busy = pg_store_sessions_busy,
    .sessions_count = pg_store_sessions_count,
    .sessions_owned = pg_store_sessions_owned,
    .session_info = pg_store_session_info,
    .write_queue = pg_store_write_queue,
    .commit_counts = pg_store_commit_counts,
    .stream_text = pg_store_stream_text,
    .session_load = pg_store_session_load,
    .state_at = pg_store_state_at,
    .history_page = pg_store_history_page,
    .set_title = pg_store_set_title,
    .session_title = pg_store_session_title,
    .search = pg_store_search,
    .record_put = pg_store_record_put,
    .record_get = pg_store_record_get,
    .record_delete = pg_store_record_delete,
    .record_list = pg_store_record_list,
};
