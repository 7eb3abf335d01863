/*
 * sqlite_store_records - the records of store.h (what the protocols keep
 * beside the log) in SQLite: the `records` table, its index by session and
 * the trigger that deletes a session's records with its row, so that
 * store_delete_session and retention take them in their own transaction
 * without knowing of them.
 *
 * Writes go through the writer's connection under its lock, between two
 * commits (sqlite_store__write_tx); reads through the read-only one. The
 * statements are prepared at each call: a record is read or written once
 * per request at most, and the shared statement table stays the log's.
 */
#include "store/sqlite/sqlite_store_internal.h"

#include <errno.h>
#include <string.h>

/* Created at open in any schema version: a table the log never reads. */
static const char records_schema_sql[] =
    "BEGIN IMMEDIATE;"
    "CREATE TABLE IF NOT EXISTS records(kind TEXT NOT NULL, key TEXT NOT NULL,"
    " session_id TEXT, body TEXT NOT NULL, PRIMARY KEY(kind, key)) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS records_session ON records(session_id, kind, key);"
    "CREATE TRIGGER IF NOT EXISTS records_session_gone AFTER DELETE ON sessions"
    " BEGIN DELETE FROM records WHERE session_id = old.id; END;"
    "COMMIT";

int sqlite_store__records_schema(sqlite3 *db, char *why, size_t n)
{
    char *msg = NULL;
    int rc = sqlite3_exec(db, records_schema_sql, NULL, NULL, &msg);

    if (rc) {
        snprintf(why, n, "creating the records table: %s",
                 msg ? msg : sqlite3_errstr(rc));
        sqlite3_free(msg);
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
        return -EIO;
    }
    return 0;
}

/* One statement of c's, prepared now; NULL with the error recorded. */
static sqlite3_stmt *prepare(struct sqlite_store *st, struct store_conn *c,
                             const char *sql, int *err)
{
    sqlite3_stmt *q = NULL;
    int rc = sqlite3_prepare_v2(c->db, sql, -1, &q, NULL);

    if (rc)
        *err = sqlite_store__sql_fail(st, c, rc, "preparing a records statement");
    return q;
}

/* What a put writes, for its transaction. */
struct record_put {
    const char *kind, *key, *sid, *text;
    size_t len;
};

static int put_body(struct sqlite_store *st, void *arg)
{
    const struct record_put *p = arg;
    sqlite3_stmt *q;
    int err = 0, rc;

    if (p->sid && (err = sqlite_store__session_get(st, &st->w, p->sid, NULL)))
        return err;
    if (!(q = prepare(st, &st->w,
                      "INSERT INTO records(kind, key, session_id, body)"
                      " VALUES(?1, ?2, ?3, ?4) ON CONFLICT(kind, key) DO UPDATE"
                      " SET session_id = excluded.session_id, body = excluded.body",
                      &err)))
        return err;
    sqlite_store__bind_text(q, 1, p->kind, strlen(p->kind));
    sqlite_store__bind_text(q, 2, p->key, strlen(p->key));
    if (p->sid)
        sqlite_store__bind_text(q, 3, p->sid, strlen(p->sid));
    sqlite_store__bind_text(q, 4, p->text, p->len);
    if ((rc = sqlite3_step(q)) != SQLITE_DONE)
        err = sqlite_store__sql_fail(st, &st->w, rc, "storing a record");
    sqlite3_finalize(q);
    return err;
}

int sqlite_store_record_put(struct store *base, const char *kind, const char *key,
                            const char *sid, const char *text, size_t len)
{
    struct record_put p = {kind, key, sid, text, len};

    return sqlite_store__write_tx(sqlite_store_of(base), put_body, NULL, &p);
}

static int delete_body(struct sqlite_store *st, void *arg)
{
    const struct record_put *p = arg;
    sqlite3_stmt *q;
    int err = 0, rc;

    if (!(q = prepare(st, &st->w, "DELETE FROM records WHERE kind = ?1 AND key = ?2",
                      &err)))
        return err;
    sqlite_store__bind_text(q, 1, p->kind, strlen(p->kind));
    sqlite_store__bind_text(q, 2, p->key, strlen(p->key));
    if ((rc = sqlite3_step(q)) != SQLITE_DONE)
        err = sqlite_store__sql_fail(st, &st->w, rc, "deleting a record");
    else if (!sqlite3_changes(st->w.db))
        err = -ENOENT;
    sqlite3_finalize(q);
    return err;
}

int sqlite_store_record_delete(struct store *base, const char *kind, const char *key)
{
    struct record_put p = {.kind = kind, .key = key};

    return sqlite_store__write_tx(sqlite_store_of(base), delete_body, NULL, &p);
}

/* Row `q` (key, session_id, body) copied into `out` or appended to `list`. */
static int take_row(sqlite3_stmt *q, struct store_record *out, struct store_records *list)
{
    const char *key = (const char *)sqlite3_column_text(q, 0);
    const char *sid = (const char *)sqlite3_column_text(q, 1);
    const char *text = (const char *)sqlite3_column_text(q, 2);
    size_t len = (size_t)sqlite3_column_bytes(q, 2);

    if (!key || !text)
        return -ENOMEM; /* SQLite could not make the text */
    return out ? store__record_fill(out, key, sid, text, len)
               : store__records_add(list, key, sid, text, len);
}

int sqlite_store_record_get(struct store *base, const char *kind, const char *key,
                            struct store_record *out)
{
    struct sqlite_store *st = sqlite_store_of(base);
    struct store_conn *c = sqlite_store__reader_lock(st);
    sqlite3_stmt *q;
    int err = 0, rc;

    if (!(q = prepare(st, c,
                      "SELECT key, session_id, body FROM records"
                      " WHERE kind = ?1 AND key = ?2",
                      &err)))
        goto out_unlock;
    sqlite_store__bind_text(q, 1, kind, strlen(kind));
    sqlite_store__bind_text(q, 2, key, strlen(key));
    rc = sqlite3_step(q);
    if (rc == SQLITE_ROW)
        err = take_row(q, out, NULL);
    else if (rc == SQLITE_DONE)
        err = -ENOENT;
    else
        err = sqlite_store__sql_fail(st, c, rc, "reading a record");
    sqlite3_finalize(q);
out_unlock:
    sqlite_store__reader_unlock(st);
    return err;
}

int sqlite_store_record_list(struct store *base, const char *kind, const char *sid,
                             const char *after, size_t limit, struct store_records *out)
{
    struct sqlite_store *st = sqlite_store_of(base);
    struct store_conn *c = sqlite_store__reader_lock(st);
    /* Two texts, so each has its index: by session, or the primary key. */
    const char *sql = sid ? "SELECT key, session_id, body FROM records"
                            " WHERE session_id = ?2 AND kind = ?1 AND key > ?3"
                            " ORDER BY key LIMIT ?4"
                          : "SELECT key, session_id, body FROM records"
                            " WHERE kind = ?1 AND key > ?3 ORDER BY key LIMIT ?4";
    sqlite3_stmt *q;
    int err = 0, rc;

    if (!(q = prepare(st, c, sql, &err)))
        goto out_unlock;
    sqlite_store__bind_text(q, 1, kind, strlen(kind));
    if (sid)
        sqlite_store__bind_text(q, 2, sid, strlen(sid));
    sqlite_store__bind_text(q, 3, after ? after : "", after ? strlen(after) : 0);
    sqlite3_bind_int64(q, 4, limit ? (sqlite3_int64)limit : -1);
    while (!err && (rc = sqlite3_step(q)) == SQLITE_ROW)
        err = take_row(q, NULL, out);
    if (!err && rc != SQLITE_DONE)
        err = sqlite_store__sql_fail(st, c, rc, "listing records");
    sqlite3_finalize(q);
out_unlock:
    sqlite_store__reader_unlock(st);
    return err;
}
