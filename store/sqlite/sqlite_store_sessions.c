/*
 * sqlite_store_sessions - what the SQLite store keeps of each session in its
 * row (schema 4, SPEC 6.2) and the reads that use it without loading any
 * session: the row's messages, busy flag and title from the first message,
 * written by the writer once per session per batch; the pages of the list
 * newest first (with words: only what the full-text index finds), the busy
 * set, the count and one row; and the upgrade of an older file, whose rows
 * are computed once from each session's log at open. Private helpers come
 * from sqlite_store_internal.h; see store.h.
 *
 * Schema 4 on `sessions`: messages, busy and auto_title (kept once set), an
 * index on (updated_at, id) that serves the pages (and retention, which the
 * old index on updated_at alone served), a partial index on the busy ones,
 * and a one-row count kept by triggers, so a count costs one read however
 * many sessions there are. An upgrade adds them and lists every session in
 * sessions_due; each is folded, its row written and its name taken off the
 * list, a few hundred per transaction, so a crash half-way resumes.
 *
 * Schema 5 adds each session's owner (SPEC 4.4; 'admin' for the rows an
 * older file has: an ALTER TABLE with a default, nothing to compute) and an
 * index on (owner, updated_at, id): one owner's page walks it as the
 * global page walks (updated_at, id), and counting an owner's sessions
 * reads only that owner's entries.
 */
#include "store/store.h"
#include "store/sqlite/sqlite_store_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "state_machine/rx_buf.h"

/* Sessions whose rows one transaction of the upgrade computes. */
#define STORE_UPGRADE_BATCH 256

/* What schema 4 adds beside the columns, for a new file and an upgrade alike. */
#define STORE_ROWS_SQL                                                                   \
    "DROP INDEX IF EXISTS sessions_updated;"                                             \
    "CREATE INDEX sessions_page ON sessions(updated_at, id);"                            \
    "CREATE INDEX sessions_busy ON sessions(id) WHERE busy;"                             \
    "CREATE TABLE sessions_count(n INTEGER NOT NULL);"                                   \
    "INSERT INTO sessions_count SELECT count(*) FROM sessions;"                          \
    "CREATE TRIGGER sessions_count_insert AFTER INSERT ON sessions BEGIN"                \
    " UPDATE sessions_count SET n = n + 1; END;"                                         \
    "CREATE TRIGGER sessions_count_delete AFTER DELETE ON sessions BEGIN"                \
    " UPDATE sessions_count SET n = n - 1; END;"

const char sqlite_store__rows_schema_sql[] = STORE_ROWS_SQL;

const char sqlite_store__rows_upgrade_sql[] =
    "ALTER TABLE sessions ADD COLUMN messages INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE sessions ADD COLUMN busy INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE sessions ADD COLUMN auto_title TEXT;" STORE_ROWS_SQL
    "CREATE TABLE sessions_due(id TEXT PRIMARY KEY NOT NULL) WITHOUT ROWID;"
    "INSERT INTO sessions_due SELECT id FROM sessions;";

#define STORE_OWNER_INDEX_SQL                                                            \
    "CREATE INDEX sessions_owner ON sessions(owner, updated_at, id);"

const char sqlite_store__owner_schema_sql[] = STORE_OWNER_INDEX_SQL;

const char sqlite_store__owner_upgrade_sql[] =
    "ALTER TABLE sessions ADD COLUMN owner TEXT NOT NULL DEFAULT '" STORE_OWNER_DEFAULT
    "';" STORE_OWNER_INDEX_SQL;

/* ---- writing the row -------------------------------------------------------------- */

/* Bind a title of `len` bytes, or NULL when there is none. */
static void bind_title(sqlite3_stmt *q, int i, const char *title, size_t len)
{
    if (title && len)
        sqlite_store__bind_text(q, i, title, len);
    else
        sqlite3_bind_null(q, i);
}

int sqlite_store__row_write(struct sqlite_store *st, const struct store_write *w,
                            const struct store_write *titled)
{
    sqlite3_stmt *q = sqlite_store__stmt(&st->w, Q_SESSION_ROW);
    int rc;

    sqlite_store__bind_text(q, 1, w->sid, strlen(w->sid));
    sqlite3_bind_int64(q, 2, w->updated_at);
    sqlite3_bind_int64(q, 3, w->messages);
    sqlite3_bind_int(q, 4, w->busy);
    if (titled)
        bind_title(q, 5, titled->title, titled->title_len);
    rc = sqlite_store__run(q);
    return rc ? sqlite_store__sql_fail(st, &st->w, rc, "updating the session") : 0;
}

int sqlite_store__row_put(struct sqlite_store *st, const char *sid,
                          const struct store_row *r)
{
    sqlite3_stmt *q = sqlite_store__stmt(&st->w, Q_SESSION_ROW_SET);
    int rc;

    sqlite_store__bind_text(q, 1, sid, strlen(sid));
    sqlite3_bind_int64(q, 2, r->messages);
    sqlite3_bind_int(q, 3, r->busy);
    bind_title(q, 4, r->title, r->title ? strlen(r->title) : 0);
    rc = sqlite_store__run(q);
    return rc ? sqlite_store__sql_fail(st, &st->w, rc, "writing the session's row") : 0;
}

/* ---- the upgrade to schema 4 ------------------------------------------------------ */

/*
 * One session of sessions_due: its state folded from the log, its row
 * written, its name taken off. A log that does not fold keeps the zero row
 * (loading it says why, with its session and seq) and counts in *bad.
 * Inside the caller's transaction. 0 or an errno.
 */
static int upgrade_one(struct sqlite_store *st, sqlite3_stmt *drop, const char *sid,
                       int64_t *bad)
{
    struct store_row row = {0};
    struct rx_state s;
    int64_t seq;
    int rc, err = sqlite_store__build_state(st, &st->w, sid, INT64_MAX, &s, &seq);

    if (err == -EPROTO) {
        (*bad)++;
        err = 0;
    } else if (!err) {
        err = store__row_of(&s, &row);
        rx_state_release(&s);
        if (!err)
            err = sqlite_store__row_put(st, sid, &row);
        store__row_release(&row);
    }
    if (err)
        return err;
    sqlite3_reset(drop);
    sqlite3_bind_text(drop, 1, sid, -1, SQLITE_TRANSIENT);
    rc = sqlite_store__run(drop);
    return rc ? sqlite_store__sql_fail(st, &st->w, rc, "upgrading sessions") : 0;
}

/* Up to STORE_UPGRADE_BATCH of them in one transaction; *left: some remain. */
static int upgrade_batch(struct sqlite_store *st, sqlite3_stmt *next, sqlite3_stmt *drop,
                         int64_t *done, int64_t *bad, bool *left)
{
    char *ids[STORE_UPGRADE_BATCH];
    size_t n = 0;
    int rc = SQLITE_DONE, err;

    sqlite3_reset(next);
    while (n < STORE_UPGRADE_BATCH && (rc = sqlite3_step(next)) == SQLITE_ROW)
        if (!(ids[n++] = strdup((const char *)sqlite3_column_text(next, 0))))
            break;
    *left = n == STORE_UPGRADE_BATCH;
    /* A failed read is not the end of the list: the table must not go yet. */
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        err = sqlite_store__sql_fail(st, &st->w, rc, "upgrading sessions");
    else
        err = n && !ids[n - 1] ? -ENOMEM : 0;
    sqlite3_reset(next);
    if (!err && (err = sqlite_store__tx_begin(st)))
        goto out_free;
    for (size_t i = 0; !err && i < n; i++)
        err = upgrade_one(st, drop, ids[i], bad);
    if (err)
        sqlite_store__tx_rollback(st);
    else if (!(err = sqlite_store__tx_commit(st)))
        *done += (int64_t)n;
out_free:
    for (size_t i = 0; i < n; i++)
        free(ids[i]);
    return err;
}

/* Every session of sessions_due, batch after batch; the table dropped at the end. */
static int rows_upgrade(struct sqlite_store *st, int64_t *done, int64_t *bad)
{
    sqlite3_stmt *next = NULL, *drop = NULL;
    bool left = true;
    int rc, err = 0;

    *done = *bad = 0;
    rc = sqlite3_prepare_v2(st->w.db, "SELECT id FROM sessions_due", -1, &next, NULL);
    if (rc == SQLITE_ERROR) /* no such table: nothing to upgrade */
        return 0;
    if (rc || (rc = sqlite3_prepare_v2(st->w.db, "DELETE FROM sessions_due WHERE id=?1",
                                       -1, &drop, NULL))) {
        err = sqlite_store__sql_fail(st, &st->w, rc, "upgrading sessions");
        goto out_finalize;
    }
    while (!err && left)
        err = upgrade_batch(st, next, drop, done, bad, &left);
    sqlite3_finalize(next);
    sqlite3_finalize(drop);
    next = drop = NULL;
    if (!err &&
        (rc = sqlite3_exec(st->w.db, "DROP TABLE sessions_due", NULL, NULL, NULL)))
        err = sqlite_store__sql_fail(st, &st->w, rc, "upgrading sessions");
out_finalize:
    sqlite3_finalize(next);
    sqlite3_finalize(drop);
    return err;
}

/* The line says how many: a long log takes a while, once. */
int sqlite_store__rows_upgrade(struct sqlite_store *st, const char *path, char *why,
                               size_t n)
{
    int64_t done = 0, bad = 0;
    int err = rows_upgrade(st, &done, &bad);

    if (err) {
        pthread_mutex_lock(&st->base.hlock);
        snprintf(why, n, "upgrading the sessions' rows: %.400s", st->base.err);
        pthread_mutex_unlock(&st->base.hlock);
        return err;
    }
    if (done)
        fprintf(stderr,
                "reflexor: database '%s': upgraded %lld session(s) to schema %d "
                "(%lld whose log does not fold left empty)\n",
                path, (long long)done, STORE_SCHEMA_VERSION, (long long)bad);
    return 0;
}

/* ---- reads ------------------------------------------------------------------------ */

int sqlite_store__list_rows(struct sqlite_store *st, struct store_conn *c,
                            sqlite3_stmt *q, struct store_list *out)
{
    int rc, err = 0;

    while (!err && (rc = sqlite3_step(q)) == SQLITE_ROW)
        err = store__list_add(out, (const char *)sqlite3_column_text(q, 0),
                              (const char *)sqlite3_column_text(q, 2),
                              (const char *)sqlite3_column_text(q, 5),
                              sqlite3_column_int64(q, 1), sqlite3_column_int64(q, 3),
                              sqlite3_column_int64(q, 4));
    if (!err && rc != SQLITE_DONE)
        err = sqlite_store__sql_fail(st, c, rc, "listing sessions");
    return err;
}

/*
 * The page's SQL with words: the sessions the search finds (its SQL, words
 * bound as ?1..?n), those before ?n+1 (and of owner ?n+3, when `owned`),
 * then the same cut as Q_SESSIONS_PAGE (?n+2 rows and the ties of the
 * last). The hits are found by the index, then ordered: a page costs what
 * the words find, not what the log holds.
 */
static int page_sql(size_t n, bool owned, struct rx_buf *sql)
{
    if (rx_buf_puts(sql, "WITH hits(id) AS (") || sqlite_store__search_sql(n, sql))
        return -ENOMEM;
    if (rx_buf_printf(sql,
                      "), page AS MATERIALIZED (SELECT " STORE_ROW_COLUMNS
                      " FROM sessions"
                      " WHERE id IN hits AND updated_at < ?%zu",
                      n + 1) ||
        (owned && rx_buf_printf(sql, " AND owner = ?%zu", n + 3)) ||
        rx_buf_printf(sql,
                      ") SELECT * FROM page"
                      " WHERE updated_at >= coalesce((SELECT updated_at FROM page ORDER"
                      " BY updated_at DESC, id DESC LIMIT 1 OFFSET ?%zu - 1), %lld)"
                      " ORDER BY updated_at DESC, id DESC",
                      n + 2, (long long)INT64_MIN))
        return -ENOMEM;
    return 0;
}

/* A page with words: its SQL prepared for the call, on c. c's lock held. */
static int page_words(struct sqlite_store *st, struct store_conn *c, const char *owner,
                      const char *const *words, size_t n, int64_t before, size_t limit,
                      struct store_list *out)
{
    sqlite3_stmt *q = NULL;
    struct rx_buf sql;
    int rc, err;

    rx_buf_init(&sql, RX_BUF_SMALL_MAX);
    if ((err = page_sql(n, owner != NULL, &sql)))
        goto out_release;
    if ((rc = sqlite3_prepare_v2(c->db, sql.data, (int)sql.len, &q, NULL))) {
        err = sqlite_store__sql_fail(st, c, rc, "preparing a search");
        goto out_release;
    }
    if (!(err = sqlite_store__search_bind(q, words, n))) {
        sqlite3_bind_int64(q, (int)n + 1, before);
        sqlite3_bind_int64(q, (int)n + 2, (int64_t)limit);
        if (owner)
            sqlite_store__bind_text(q, (int)n + 3, owner, strlen(owner));
        err = sqlite_store__list_rows(st, c, q, out);
    }
out_release:
    sqlite3_finalize(q);
    rx_buf_release(&sql);
    return err;
}

int sqlite_store_sessions_page(struct store *base, const char *owner,
                               const char *const *words, size_t n, int64_t before,
                               size_t limit, struct store_list *out)
{
    struct sqlite_store *st = sqlite_store_of(base);
    struct store_conn *c;
    sqlite3_stmt *q;
    int err;

    /* A search sees every input committed before it began. */
    if (n)
        sqlite_store__index_sync(st);
    c = sqlite_store__reader_lock(st);
    if (!(err = sqlite_store__read_begin(st, c))) {
        if (n) {
            err = page_words(st, c, owner, words, n, before, limit, out);
        } else {
            q = sqlite_store__stmt(c, owner ? Q_SESSIONS_PAGE_OWNER : Q_SESSIONS_PAGE);
            sqlite3_bind_int64(q, 1, before);
            sqlite3_bind_int64(q, 2, (int64_t)limit);
            if (owner)
                sqlite_store__bind_text(q, 3, owner, strlen(owner));
            err = sqlite_store__list_rows(st, c, q, out);
            sqlite_store__done(q);
        }
    }
    sqlite_store__read_end(c);
    sqlite_store__reader_unlock(st);
    return err;
}

int sqlite_store_sessions_busy(struct store *base, struct store_list *out)
{
    struct sqlite_store *st = sqlite_store_of(base);
    struct store_conn *c = sqlite_store__reader_lock(st);
    sqlite3_stmt *q = sqlite_store__stmt(c, Q_SESSIONS_BUSY);
    int err = sqlite_store__list_rows(st, c, q, out);

    sqlite_store__done(q);
    sqlite_store__reader_unlock(st);
    return err;
}

int sqlite_store_sessions_count(struct store *base, int64_t *n)
{
    struct sqlite_store *st = sqlite_store_of(base);
    struct store_conn *c = sqlite_store__reader_lock(st);
    int err = sqlite_store__query_i64(st, c, Q_SESSIONS_COUNT, NULL, n);

    sqlite_store__reader_unlock(st);
    return err;
}

int sqlite_store_sessions_owned(struct store *base, const char *owner, int64_t *n)
{
    struct sqlite_store *st = sqlite_store_of(base);
    struct store_conn *c = sqlite_store__reader_lock(st);
    int err = sqlite_store__query_i64(st, c, Q_SESSIONS_OWNED, owner, n);

    sqlite_store__reader_unlock(st);
    return err;
}

int sqlite_store_session_info(struct store *base, const char *sid,
                              struct store_session_info *out)
{
    struct sqlite_store *st = sqlite_store_of(base);
    struct store_conn *c = sqlite_store__reader_lock(st);
    sqlite3_stmt *q = sqlite_store__stmt(c, Q_SESSION_INFO);
    struct store_list l = {0};
    int err;

    sqlite_store__bind_text(q, 1, sid, strlen(sid));
    err = sqlite_store__list_rows(st, c, q, &l);
    sqlite_store__done(q);
    sqlite_store__reader_unlock(st);
    if (!err && !l.n) {
        store__set_error(&st->base, "no session '%s'", sid);
        err = -ENOENT;
    }
    if (!err) {
        *out = l.v[0]; /* its strings move to the caller */
        l.n = 0;
    }
    store_list_release(&l);
    return err;
}
