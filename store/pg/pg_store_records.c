/*
 * pg_store_records - the records of store.h (what the protocols keep beside
 * the log) in PostgreSQL, shared by every node: the `records` table, whose
 * session_id references sessions ON DELETE CASCADE, so a session deleted by
 * any node (DELETE, retention) takes its records in the same transaction.
 *
 * Writes are one statement each on the admin connection (under alock),
 * reads on the reader's (under rlock): neither waits for a batch of inputs
 * to commit. Record writes are not fenced: a record is what a protocol
 * remembers of a session, not an input, and any node may serve the route
 * that writes it. Keys are compared bytewise (COLLATE "C"), as SQLite does,
 * so pages follow the same order on both backends.
 */
#include "store/pg/pg_store_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The same advisory lock as the rest of the schema ("RFLX"): nodes take turns. */
#define PG_STORE_SCHEMA_LOCK "1380339800"

/*
 * Created at open when missing, in a database of any schema version. Only
 * when missing: DDL on a live database takes locks the nodes' commits wait
 * for (see pg_store.c).
 */
static const char records_schema_sql[] =
    "BEGIN;"
    "SELECT pg_advisory_xact_lock(" PG_STORE_SCHEMA_LOCK ");"
    "CREATE TABLE IF NOT EXISTS records(kind text NOT NULL, key text COLLATE \"C\""
    " NOT NULL, session_id text REFERENCES sessions(id) ON DELETE CASCADE,"
    " body text NOT NULL, PRIMARY KEY(kind, key));"
    "CREATE INDEX IF NOT EXISTS records_session ON records(session_id, kind, key);"
    "COMMIT";

int pg_store__records_schema(struct pg_store *pg, char *why, size_t n)
{
    return pg_store__ensure(pg, "records", records_schema_sql, "the records table", why,
                            n);
}

/* Rows a command touched. */
static long long changed(PGresult *r)
{
    return strtoll(PQcmdTuples(r), NULL, 10);
}

int pg_store_record_put(struct store *base, const char *kind, const char *key,
                        const char *sid, const char *text, size_t len)
{
    struct pg_store *pg = pg_store_of(base);
    /* Text parameters end at their NUL: the body is copied to have one. */
    char *body = strndup(text, len);
    const char *vals[4] = {kind, key, sid, body};
    PGresult *r = NULL;
    int err;

    if (!body)
        return -ENOMEM;
    pthread_mutex_lock(&pg->alock);
    err = pg_store__exec(
        pg, &pg->a, "storing a record",
        "INSERT INTO records(kind, key, session_id, body) SELECT $1, $2, $3, $4"
        " WHERE $3::text IS NULL OR EXISTS(SELECT 1 FROM sessions WHERE id = $3)"
        " ON CONFLICT (kind, key) DO UPDATE"
        " SET session_id = EXCLUDED.session_id, body = EXCLUDED.body",
        4, vals, NULL, NULL, &r);
    pthread_mutex_unlock(&pg->alock);
    if (!err && !changed(r)) {
        store__set_error(base, "no session '%s'", sid ? sid : "");
        err = -ENOENT;
    }
    if (!err)
        pg_store__wrote(pg);
    PQclear(r);
    free(body);
    return err;
}

int pg_store_record_delete(struct store *base, const char *kind, const char *key)
{
    struct pg_store *pg = pg_store_of(base);
    const char *vals[2] = {kind, key};
    PGresult *r = NULL;
    int err;

    pthread_mutex_lock(&pg->alock);
    err = pg_store__exec(pg, &pg->a, "deleting a record",
                         "DELETE FROM records WHERE kind = $1 AND key = $2", 2, vals,
                         NULL, NULL, &r);
    pthread_mutex_unlock(&pg->alock);
    if (!err && !changed(r))
        err = -ENOENT;
    PQclear(r);
    return err;
}

/* Row `i` of r (key, session_id, body) copied into `out` or appended to `list`. */
static int take_row(PGresult *r, int i, struct store_record *out,
                    struct store_records *list)
{
    const char *key = PQgetvalue(r, i, 0), *text = PQgetvalue(r, i, 2);
    const char *sid = PQgetisnull(r, i, 1) ? NULL : PQgetvalue(r, i, 1);
    size_t len = (size_t)PQgetlength(r, i, 2);

    return out ? store__record_fill(out, key, sid, text, len)
               : store__records_add(list, key, sid, text, len);
}

int pg_store_record_get(struct store *base, const char *kind, const char *key,
                        struct store_record *out)
{
    struct pg_store *pg = pg_store_of(base);
    const char *vals[2] = {kind, key};
    PGresult *r = NULL;
    int err;

    pthread_mutex_lock(&pg->rlock);
    err = pg_store__exec(pg, &pg->r, "reading a record",
                         "SELECT key, session_id, body FROM records"
                         " WHERE kind = $1 AND key = $2",
                         2, vals, NULL, NULL, &r);
    pthread_mutex_unlock(&pg->rlock);
    if (!err)
        err = PQntuples(r) ? take_row(r, 0, out, NULL) : -ENOENT;
    PQclear(r);
    return err;
}

int pg_store_record_list(struct store *base, const char *kind, const char *sid,
                         const char *after, size_t limit, struct store_records *out)
{
    struct pg_store *pg = pg_store_of(base);
    char lim[24];
    /* NULL: LIMIT ALL. */
    const char *vals[4] = {kind, sid, after ? after : "",
                           limit ? pg_store__fmt_i64(lim, (int64_t)limit) : NULL};
    const char *sql = sid ? "SELECT key, session_id, body FROM records"
                            " WHERE session_id = $2 AND kind = $1 AND key > $3"
                            " ORDER BY key LIMIT $4::bigint"
                          : "SELECT key, session_id, body FROM records"
                            " WHERE kind = $1 AND ($2::text IS NULL) AND key > $3"
                            " ORDER BY key LIMIT $4::bigint";
    PGresult *r = NULL;
    int err;

    pthread_mutex_lock(&pg->rlock);
    err = pg_store__exec(pg, &pg->r, "listing records", sql, 4, vals, NULL, NULL, &r);
    pthread_mutex_unlock(&pg->rlock);
    for (int i = 0; !err && i < PQntuples(r); i++)
        err = take_row(r, i, NULL, out);
    PQclear(r);
    return err;
}
