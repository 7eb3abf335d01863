/*
 * pg_store_sessions - what PostgreSQL keeps of each session in its row
 * (schema 2, SPEC 6.2) and the reads that use it without loading any
 * session: pages of the list newest first (with words: only what the
 * full-text search finds, in one statement), the busy set, the count and
 * one row; and the upgrade of a schema 1 database, whose rows are computed
 * once from each session's log. The writer keeps the rows (pg_store_writer.c),
 * create, fork and import fill them (pg_store_admin.c). Private to store/pg
 * through pg_store_internal.h; see pg_store.h.
 *
 * Schema 2 on `sessions`: messages, busy and auto_title, an index on
 * (updated_at, id) for the pages and retention (it replaces the one on
 * updated_at), and a partial index on the busy ones. The count is
 * count(*): exact, an index-only scan; a per-row counter would be one row
 * every node's create and delete wait for.
 *
 * Schema 3 adds each session's owner (SPEC 4.4; STORE_OWNER_DEFAULT for the
 * sessions there: a default, so the ALTER rewrites nothing) and an index on
 * (owner, updated_at, id): one owner's page walks it as the global page
 * walks (updated_at, id), and an owner's count is an index-only scan of its
 * own entries.
 */
#include "store/pg/pg_store.h"
#include "store/pg/pg_store_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "state_machine/rx_buf.h"

/*
 * Version 1 to 2, under the schema's advisory lock: the columns, the
 * indexes, and every session listed as due (its row computed below).
 */
static const char upgrade_sql[] =
    "ALTER TABLE sessions ADD COLUMN IF NOT EXISTS messages bigint NOT NULL DEFAULT 0,"
    " ADD COLUMN IF NOT EXISTS busy boolean NOT NULL DEFAULT false,"
    " ADD COLUMN IF NOT EXISTS auto_title text;"
    "DROP INDEX IF EXISTS sessions_updated;"
    "CREATE INDEX IF NOT EXISTS sessions_page ON sessions(updated_at, id);"
    "CREATE INDEX IF NOT EXISTS sessions_busy ON sessions(id) WHERE busy;"
    "CREATE TABLE IF NOT EXISTS sessions_due(id text PRIMARY KEY);"
    "INSERT INTO sessions_due SELECT id FROM sessions ON CONFLICT DO NOTHING;"
    "UPDATE rx_meta SET v = 2 WHERE k = 'version' AND v < 2";

/* Version 2 to 3, under the same lock, after the one above when from 1. */
static const char owner_upgrade_sql[] =
    "ALTER TABLE sessions ADD COLUMN IF NOT EXISTS owner text NOT NULL DEFAULT "
    "'" STORE_OWNER_DEFAULT "';"
    "CREATE INDEX IF NOT EXISTS sessions_owner ON sessions(owner, updated_at, id);"
    "UPDATE rx_meta SET v = 3 WHERE k = 'version' AND v < 3";

/* Version 3 to 4: the streamed text of answers (SPEC 3.7). */
static const char stream_upgrade_sql[] =
    PG_STORE_STREAM_SQL "UPDATE rx_meta SET v = 4 WHERE k = 'version' AND v < 4";

/* The cut of a page: `limit` rows ($2) and the ties of the last one. */
#define PAGE_CUT(from)                                                                   \
    " updated_at >= coalesce((SELECT updated_at FROM " from " ORDER BY updated_at"       \
    " DESC, id DESC LIMIT 1 OFFSET $2::bigint - 1), -9223372036854775807 - 1)"           \
    " ORDER BY updated_at DESC, id DESC"

static const char page_sql[] =
    "SELECT " PG_STORE_ROW_COLUMNS
    " FROM sessions WHERE updated_at < $1::bigint AND" PAGE_CUT(
        "sessions WHERE updated_at < $1::bigint");

/* One owner's ($3): the same, on the index on (owner, updated_at, id). */
static const char owner_page_sql[] =
    "SELECT " PG_STORE_ROW_COLUMNS
    " FROM sessions WHERE owner = $3 AND updated_at < $1::bigint AND" PAGE_CUT(
        "sessions WHERE owner = $3 AND updated_at < $1::bigint");

int pg_store__list_rows(const PGresult *r, struct store_list *out)
{
    int err = 0;

    for (int i = 0; !err && i < PQntuples(r); i++)
        err = store__list_add(out, PQgetvalue(r, i, 0),
                              PQgetisnull(r, i, 2) ? NULL : PQgetvalue(r, i, 2),
                              PQgetvalue(r, i, 5), pg_store__i64(r, i, 1),
                              pg_store__i64(r, i, 3), pg_store__i64(r, i, 4));
    return err;
}

int pg_store__row_put(struct pg_store *pg, const char *sid, const struct store_row *r)
{
    char m[24];
    const char *vals[4] = {sid, pg_store__fmt_i64(m, r->messages), r->busy ? "t" : "f",
                           r->title};

    return pg_store__exec(pg, &pg->a, "writing the session's row",
                          "UPDATE sessions SET messages = $2, busy = $3, auto_title = $4"
                          " WHERE id = $1",
                          4, vals, NULL, NULL, NULL);
}

/* ---- the upgrades to schema 2 and 3 --------------------------------------------------
 */

/* One simple-protocol text (several statements) on `a`: 0 or -EIO with `why`. */
static int exec_simple(struct pg_store *pg, const char *sql, char *why, size_t n)
{
    PGresult *r = PQexec(pg->a.c, sql);
    int err = 0;

    if (!r ||
        (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK)) {
        snprintf(why, n, "upgrading the schema: %s",
                 r ? PQresultErrorMessage(r) : PQerrorMessage(pg->a.c));
        err = -EIO;
    }
    PQclear(r);
    return err;
}

/* Versions 1 and 2: the columns and indexes, in one transaction under the lock. */
static int upgrade_schema(struct pg_store *pg, char *why, size_t n)
{
    PGresult *r = NULL;
    int err;

    if ((err = exec_simple(
             pg, "BEGIN; SELECT pg_advisory_xact_lock(" PG_STORE_SCHEMA_LOCK ")", why,
             n)))
        goto out_rollback;
    /* Read again under the lock: another node may have just done it. */
    if ((err = pg_store__exec(pg, &pg->a, "reading the schema version",
                              "SELECT v FROM rx_meta WHERE k = 'version'", 0, NULL, NULL,
                              NULL, &r)))
        goto out_rollback;
    if (PQntuples(r) && pg_store__i64(r, 0, 0) < 2 &&
        (err = exec_simple(pg, upgrade_sql, why, n)))
        goto out_rollback;
    if (PQntuples(r) && pg_store__i64(r, 0, 0) < 3 &&
        (err = exec_simple(pg, owner_upgrade_sql, why, n)))
        goto out_rollback;
    if (PQntuples(r) && pg_store__i64(r, 0, 0) < 4 &&
        (err = exec_simple(pg, stream_upgrade_sql, why, n)))
        goto out_rollback;
    PQclear(r);
    return exec_simple(pg, "COMMIT", why, n);

out_rollback:
    PQclear(r);
    pg_store__rollback(pg, &pg->a);
    return err;
}

/*
 * One due session, in a transaction of its own that holds its row's lock
 * (a batch writing to it waits, then writes what it writes on top), so no
 * two locks are ever held at once: nothing to deadlock with the writers of
 * a live cluster. Losing such a commit in a crash loses nothing: the
 * session is still due. *found: there was one.
 */
static int upgrade_one(struct pg_store *pg, bool *found)
{
    struct store_row row = {0};
    PGresult *r = NULL;
    struct rx_state s;
    const char *vals[1];
    int64_t seq;
    int err;

    *found = false;
    if ((err = pg_store__begin(pg, &pg->a)) ||
        (err = pg_store__exec(pg, &pg->a, "upgrading sessions",
                              "SET LOCAL synchronous_commit = off", 0, NULL, NULL, NULL,
                              NULL)) ||
        (err =
             pg_store__exec(pg, &pg->a, "upgrading sessions",
                            "SELECT id FROM sessions_due LIMIT 1 FOR UPDATE SKIP LOCKED",
                            0, NULL, NULL, NULL, &r)) ||
        !(*found = PQntuples(r) > 0))
        goto out_finish;
    vals[0] = PQgetvalue(r, 0, 0);
    if ((err = pg_store__exec(pg, &pg->a, "upgrading sessions",
                              "SELECT 1 FROM sessions WHERE id = $1 FOR UPDATE", 1, vals,
                              NULL, NULL, NULL)))
        goto out_finish;
    /* A log that does not fold keeps the zero row: loading it names the damage. */
    err = pg_store__build_state(pg, &pg->a, vals[0], INT64_MAX, &s, &seq);
    if (!err) {
        err = store__row_of(&s, &row);
        rx_state_release(&s);
        if (!err)
            err = pg_store__row_put(pg, vals[0], &row);
        store__row_release(&row);
    } else if (err == -EPROTO || err == -ENOENT) {
        err = 0;
    }
    if (!err)
        err = pg_store__exec(pg, &pg->a, "upgrading sessions",
                             "DELETE FROM sessions_due WHERE id = $1", 1, vals, NULL,
                             NULL, NULL);
out_finish:
    PQclear(r);
    if (!err)
        return pg_store__commit(pg, &pg->a);
    pg_store__rollback(pg, &pg->a);
    return err;
}

int pg_store__rows_upgrade(struct pg_store *pg, int64_t *done, char *why, size_t n)
{
    PGresult *r = NULL;
    bool found = true, due;
    int err;

    *done = 0;
    why[0] = '\0';
    if ((err = pg_store__exec(pg, &pg->a, "reading the schema version",
                              "SELECT v, to_regclass('sessions_due') IS NOT NULL FROM"
                              " rx_meta WHERE k = 'version'",
                              0, NULL, NULL, NULL, &r)))
        goto out_why;
    due = PQntuples(r) && !strcmp(PQgetvalue(r, 0, 1), "t");
    if (PQntuples(r) && pg_store__i64(r, 0, 0) < PG_STORE_SCHEMA_VERSION) {
        if ((err = upgrade_schema(pg, why, n)))
            goto out_why;
        due = due || pg_store__i64(r, 0, 0) < 2;
    }
    /* The table stays, empty: dropping it would fail a node still reading it. */
    while (due && found && !(err = upgrade_one(pg, &found)))
        if (found)
            (*done)++;
out_why:
    if (err && !*why) {
        pthread_mutex_lock(&pg->base.hlock);
        snprintf(why, n, "upgrading the sessions' rows: %.400s", pg->base.err);
        pthread_mutex_unlock(&pg->base.hlock);
    }
    PQclear(r);
    return err;
}

/* ---- reads ------------------------------------------------------------------------ */

/* `sql` with text parameters on the reader, its rows appended to `out`. */
static int read_list(struct pg_store *pg, const char *sql, int n, const char *const *vals,
                     struct store_list *out)
{
    PGresult *r = NULL;
    int err;

    pthread_mutex_lock(&pg->rlock);
    err = pg_store__exec(pg, &pg->r, "listing sessions", sql, n, vals, NULL, NULL, &r);
    pthread_mutex_unlock(&pg->rlock);
    if (!err)
        err = pg_store__list_rows(r, out);
    PQclear(r);
    return err;
}

/*
 * With words: the sessions the search finds ($3...), those before $1 (and of
 * owner $n+3, when `owned`), cut as a page. The hits come from the words'
 * index, then are ordered: a page costs what the words find, not what the
 * log holds. Every input is indexed in the transaction that commits it
 * (pg_store_writer.c), so the search sees every input committed before it
 * began.
 */
static int words_sql(size_t n, bool owned, struct rx_buf *sql)
{
    if (rx_buf_puts(sql, "WITH hits AS (") || pg_store__search_sql(n, 3, sql) ||
        rx_buf_puts(sql, "), page AS MATERIALIZED (SELECT id, created_at,"
                         " coalesce(title, auto_title) AS title, updated_at, messages,"
                         " owner FROM sessions WHERE id IN (SELECT session_id FROM hits)"
                         " AND updated_at < $1::bigint") ||
        (owned && rx_buf_printf(sql, " AND owner = $%zu", n + 3)) ||
        rx_buf_puts(sql, ") SELECT * FROM page WHERE" PAGE_CUT("page")))
        return -ENOMEM;
    return 0;
}

int pg_store_sessions_page(struct store *base, const char *owner,
                           const char *const *words, size_t n, int64_t before,
                           size_t limit, struct store_list *out)
{
    struct pg_store *pg = pg_store_of(base);
    const char *vals[3 + STORE_SEARCH_WORDS_MAX];
    char before_s[24], limit_s[24];
    struct rx_buf sql;
    int err = 0;

    vals[0] = pg_store__fmt_i64(before_s, before);
    vals[1] = pg_store__fmt_i64(limit_s, (int64_t)limit);
    for (size_t i = 0; i < n; i++)
        vals[2 + i] = words[i];
    vals[2 + n] = owner;
    if (!n)
        return read_list(pg, owner ? owner_page_sql : page_sql, owner ? 3 : 2, vals, out);
    rx_buf_init(&sql, RX_BUF_SMALL_MAX);
    if (!(err = words_sql(n, owner != NULL, &sql)))
        err = read_list(pg, sql.data, (int)n + (owner ? 3 : 2), vals, out);
    rx_buf_release(&sql);
    return err;
}

int pg_store_sessions_busy(struct store *base, struct store_list *out)
{
    return read_list(pg_store_of(base),
                     "SELECT " PG_STORE_ROW_COLUMNS " FROM sessions WHERE busy", 0, NULL,
                     out);
}

int pg_store_sessions_count(struct store *base, int64_t *n)
{
    struct pg_store *pg = pg_store_of(base);
    PGresult *r = NULL;
    int err;

    pthread_mutex_lock(&pg->rlock);
    err = pg_store__exec(pg, &pg->r, "counting sessions", "SELECT count(*) FROM sessions",
                         0, NULL, NULL, NULL, &r);
    pthread_mutex_unlock(&pg->rlock);
    if (!err)
        *n = pg_store__i64(r, 0, 0);
    PQclear(r);
    return err;
}

int pg_store_sessions_owned(struct store *base, const char *owner, int64_t *n)
{
    struct pg_store *pg = pg_store_of(base);
    const char *vals[1] = {owner};
    PGresult *r = NULL;
    int err;

    pthread_mutex_lock(&pg->rlock);
    err = pg_store__exec(pg, &pg->r, "counting sessions",
                         "SELECT count(*) FROM sessions WHERE owner = $1", 1, vals, NULL,
                         NULL, &r);
    pthread_mutex_unlock(&pg->rlock);
    if (!err)
        *n = pg_store__i64(r, 0, 0);
    PQclear(r);
    return err;
}

int pg_store_session_info(struct store *base, const char *sid,
                          struct store_session_info *out)
{
    struct pg_store *pg = pg_store_of(base);
    const char *vals[1] = {sid};
    struct store_list l = {0};
    int err = read_list(pg, "SELECT " PG_STORE_ROW_COLUMNS " FROM sessions WHERE id = $1",
                        1, vals, &l);

    if (!err && !l.n) {
        store__set_error(&pg->base, "no session '%s'", sid);
        err = -ENOENT;
    }
    if (!err) {
        *out = l.v[0]; /* its strings move to the caller */
        l.n = 0;
    }
    store_list_release(&l);
    return err;
}
