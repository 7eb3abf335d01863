/*
 * sqlite_store_conn - the SQLite store's connections at work: errors (and
 * what they say of its health: full, or unusable for good), the kept
 * statements, the checks that the files are still the ones opened,
 * transactions on the writer's connection, reads on the reader's, and the
 * settings and health that rest on them. Shared by the files of store/sqlite
 * through sqlite_store_internal.h; opening and closing are in sqlite_store.c.
 * See store.h.
 */
#include "store/sqlite/sqlite_store_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <sqlite3.h>

const char *const sqlite_store__sql[Q__COUNT] = {
#define STORE_X(e, sql) [Q_##e] = sql,
    STORE_STATEMENTS(STORE_X)
#undef STORE_X
};

/* ---- errors ------------------------------------------------------------------ */

/*
 * The store can no longer be trusted to keep what it is given: refuse every
 * write from now on (-EIO), and keep the reason, which is also the error.
 * Sticky: after a failed fsync or with the file gone, nothing says the next
 * write would reach the disk, and the process must not acknowledge it.
 * hlock held.
 */
int sqlite_store__mark_unusable(struct sqlite_store *st, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(st->why, sizeof(st->why), fmt, ap);
    va_end(ap);
    st->unusable = true;
    st->full = false;
    snprintf(st->base.err, sizeof(st->base.err), "%s", st->why);
    return -EIO;
}

/*
 * A write found no room (`sys`: the system's errno, or 0): say so until a
 * write fits. hlock held.
 */
static int mark_full(struct sqlite_store *st, int sys)
{
    int64_t quota = __atomic_load_n(&st->max_bytes, __ATOMIC_RELAXED);

    if (sys) {
        size_t n = strlen(st->base.err);

        snprintf(st->base.err + n, sizeof(st->base.err) - n, " (%s)", strerror(sys));
    }
    st->full = true;
    if (quota)
        snprintf(st->why, sizeof(st->why), "%.400s (quota store.max_bytes %lld)",
                 st->base.err, (long long)quota);
    else
        snprintf(st->why, sizeof(st->why), "%s", st->base.err);
    return -ENOSPC;
}

/*
 * The errno of a failed write: SQLite's own record of it is often cleared by
 * the calls that follow, so ask the files (the database, then its WAL or
 * journal, where commits write) for the last errno they saw. 0 if none.
 */
static int write_errno(sqlite3 *db)
{
    sqlite3_file *f = NULL;
    int e = sqlite3_system_errno(db);

    if (!e && sqlite3_file_control(db, "main", SQLITE_FCNTL_LAST_ERRNO, &e) != SQLITE_OK)
        e = 0;
    if (!e &&
        sqlite3_file_control(db, "main", SQLITE_FCNTL_JOURNAL_POINTER, &f) == SQLITE_OK &&
        f && f->pMethods &&
        f->pMethods->xFileControl(f, SQLITE_FCNTL_LAST_ERRNO, &e) != SQLITE_OK)
        e = 0;
    return e;
}

/*
 * Record "<what>: <SQLite's sentence>" and give the errno for rc: -ENOSPC
 * for no room (SQLITE_FULL, the quota, or a write the system refused with
 * ENOSPC, EDQUOT or EFBIG: the transaction is rolled back and the store
 * stays usable); -EIO, and the store marked unusable, for an I/O error or a
 * damaged or vanished file; -EIO alone for anything else. On the read-only
 * connection every failure is -EIO (or -ENOMEM) and health is left alone.
 * The connection's lock held.
 */
int sqlite_store__sql_fail(struct sqlite_store *st, struct store_conn *c, int rc,
                           const char *what)
{
    int sys = (rc & 0xff) == SQLITE_IOERR ? write_errno(c->db) : 0, err;

    pthread_mutex_lock(&st->base.hlock);
    snprintf(st->base.err, sizeof(st->base.err), "%s: %s", what, sqlite3_errmsg(c->db));
    /* Only writes say what the store can keep: a read that failed is its own. */
    switch (c == &st->w || (rc & 0xff) == SQLITE_NOMEM ? rc & 0xff : SQLITE_ERROR) {
    case SQLITE_CONSTRAINT:
        err = -EEXIST;
        break;
    case SQLITE_NOMEM:
        err = -ENOMEM;
        break;
    case SQLITE_FULL:
        err = mark_full(st, 0);
        break;
    case SQLITE_IOERR:
        if (rc == SQLITE_IOERR_WRITE &&
            (sys == ENOSPC || sys == EDQUOT || sys == EFBIG)) {
            err = mark_full(st, sys);
            break;
        }
        /* fall through */
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
    case SQLITE_CANTOPEN:
    case SQLITE_READONLY:
        err = sqlite_store__mark_unusable(st, "%.400s%s%s", st->base.err, sys ? ": " : "",
                                          sys ? strerror(sys) : "");
        break;
    default:
        err = -EIO;
    }
    pthread_mutex_unlock(&st->base.hlock);
    return err;
}

/* ---- statements ------------------------------------------------------------------ */

/* A kept statement, reset and unbound, ready for new bindings. */
sqlite3_stmt *sqlite_store__stmt(struct store_conn *c, int id)
{
    sqlite3_reset(c->q[id]);
    sqlite3_clear_bindings(c->q[id]);
    return c->q[id];
}

/* Bindings are SQLITE_STATIC: every caller resets the statement before the
 * bound memory goes away (sqlite_store__stmt() on next use, or sqlite_store__done()). */
void sqlite_store__bind_text(sqlite3_stmt *q, int i, const char *s, size_t n)
{
    sqlite3_bind_text(q, i, s, (int)n, SQLITE_STATIC);
}

void sqlite_store__done(sqlite3_stmt *q)
{
    sqlite3_reset(q);
    sqlite3_clear_bindings(q);
}

/* Run a statement that returns no row. 0 or the SQLite code. */
int sqlite_store__run(sqlite3_stmt *q)
{
    int rc = sqlite3_step(q);

    sqlite_store__done(q);
    return rc == SQLITE_DONE ? 0 : rc;
}

/* Insert (sid, seq, text): an input or a snapshot. 0 or the SQLite code. */
int sqlite_store__put_row(struct store_conn *c, int id, const char *sid, int64_t seq,
                          const char *text, size_t len)
{
    sqlite3_stmt *q = sqlite_store__stmt(c, id);

    sqlite_store__bind_text(q, 1, sid, strlen(sid));
    sqlite3_bind_int64(q, 2, seq);
    sqlite_store__bind_text(q, 3, text, len);
    return sqlite_store__run(q);
}

/*
 * Does the path of `f` still name the file SQLite writes? A file removed or
 * replaced (renamed over, restored from a backup) while open keeps taking
 * writes that the next start will not find. 0, or -EIO with the store marked
 * unusable. A file not yet seen is noted (the WAL appears with the first
 * transaction). hlock held.
 */
static int file_check(struct sqlite_store *st, struct store_file *f, const char *name)
{
    struct stat sb;

    if (!f->path)
        return 0;
    if (stat(f->path, &sb)) {
        int e = errno;

        if (!f->known && e == ENOENT)
            return 0;
        if (e == ENOENT)
            return sqlite_store__mark_unusable(
                st,
                "the %s was removed while in use; writes are refused "
                "until a restart",
                name);
        return sqlite_store__mark_unusable(st, "the %s cannot be checked: %s", name,
                                           strerror(e));
    }
    if (!f->known) {
        f->dev = sb.st_dev;
        f->ino = sb.st_ino;
        f->known = true;
    } else if (sb.st_dev != f->dev || sb.st_ino != f->ino) {
        return sqlite_store__mark_unusable(
            st,
            "the %s was replaced by another file while in use; "
            "writes are refused until a restart",
            name);
    }
    return 0;
}

/* May the store write? 0, or -EIO with the reason as the error. hlock held. */
int sqlite_store__check_writable_locked(struct sqlite_store *st)
{
    int err;

    if (st->unusable) {
        snprintf(st->base.err, sizeof(st->base.err), "%s", st->why);
        return -EIO;
    }
    if ((err = file_check(st, &st->file, "database file")) ||
        (err = file_check(st, &st->wal, "database's write-ahead log")))
        return err;
    return 0;
}

static int check_writable(struct sqlite_store *st)
{
    int err;

    pthread_mutex_lock(&st->base.hlock);
    err = sqlite_store__check_writable_locked(st);
    pthread_mutex_unlock(&st->base.hlock);
    return err;
}

/* Every write starts here: refused at once when the store is unusable. lock held. */
int sqlite_store__tx_begin(struct sqlite_store *st)
{
    int rc, err;

    if ((err = check_writable(st)))
        return err;
    rc = sqlite_store__run(sqlite_store__stmt(&st->w, Q_BEGIN));
    return rc ? sqlite_store__sql_fail(st, &st->w, rc, "begin") : 0;
}

/*
 * Commit, then check the files again: a file removed between tx_begin and
 * here took the commit with it, and the caller must not acknowledge it.
 * lock held.
 */
int sqlite_store__tx_commit(struct sqlite_store *st)
{
    int rc = sqlite_store__run(sqlite_store__stmt(&st->w, Q_COMMIT)), err;

    if (rc) {
        err = sqlite_store__sql_fail(st, &st->w, rc, "commit");
        /* A failed COMMIT may leave the transaction open: end it. */
        if (!sqlite3_get_autocommit(st->w.db))
            (void)sqlite_store__run(sqlite_store__stmt(&st->w, Q_ROLLBACK));
        return err;
    }
    pthread_mutex_lock(&st->base.hlock);
    if (!(err = sqlite_store__check_writable_locked(st)))
        st->full = false; /* this write found room */
    pthread_mutex_unlock(&st->base.hlock);
    return err;
}

void sqlite_store__tx_rollback(struct sqlite_store *st)
{
    if (!sqlite3_get_autocommit(st->w.db))
        (void)sqlite_store__run(sqlite_store__stmt(&st->w, Q_ROLLBACK));
}

/*
 * Every write beside group commit (create, delete, fork, retention, titles,
 * import): one transaction on the writer's connection, under its lock,
 * between two commits. `after` runs under the lock once the commit is in,
 * for what must change with it (the sessions' last seqs).
 */
int sqlite_store__write_tx(struct sqlite_store *st, sqlite_store_tx_fn body,
                           sqlite_store_tx_fn after, void *arg)
{
    int err;

    pthread_mutex_lock(&st->lock);
    if ((err = sqlite_store__tx_begin(st)))
        goto out_unlock;
    if ((err = body(st, arg))) {
        sqlite_store__tx_rollback(st);
        goto out_unlock;
    }
    if (!(err = sqlite_store__tx_commit(st)) && after)
        (void)after(st, arg);
out_unlock:
    pthread_mutex_unlock(&st->lock);
    return err;
}

/*
 * The connection reads go through, locked: the read-only one, or for
 * ":memory:" the writer's (under its lock, so between two commits).
 */
struct store_conn *sqlite_store__reader_lock(struct sqlite_store *st)
{
    pthread_mutex_lock(st->reader == &st->w ? &st->lock : &st->rlock);
    return st->reader;
}

void sqlite_store__reader_unlock(struct sqlite_store *st)
{
    pthread_mutex_unlock(st->reader == &st->w ? &st->lock : &st->rlock);
}

/*
 * A read transaction: the statements until read_end see one snapshot of the
 * log (WAL), whatever commits meanwhile. 0 or -EIO.
 */
int sqlite_store__read_begin(struct sqlite_store *st, struct store_conn *c)
{
    int rc = sqlite_store__run(sqlite_store__stmt(c, Q_BEGIN_READ));

    return rc ? sqlite_store__sql_fail(st, c, rc, "begin reading") : 0;
}

void sqlite_store__read_end(struct store_conn *c)
{
    if (!sqlite3_get_autocommit(c->db))
        (void)sqlite_store__run(sqlite_store__stmt(c, Q_COMMIT));
}

/* One integer from a one-row query with one text parameter (or none). */
int sqlite_store__query_i64(struct sqlite_store *st, struct store_conn *c, int id,
                            const char *sid, int64_t *out)
{
    sqlite3_stmt *q = sqlite_store__stmt(c, id);
    int rc;

    if (sid)
        sqlite_store__bind_text(q, 1, sid, strlen(sid));
    rc = sqlite3_step(q);
    if (rc == SQLITE_ROW)
        *out = sqlite3_column_int64(q, 0);
    sqlite_store__done(q);
    if (rc != SQLITE_ROW)
        return sqlite_store__sql_fail(st, c, rc, sqlite_store__sql[id]);
    return 0;
}

/* 0 with the session's creation time, -ENOENT, or -EIO. */
int sqlite_store__session_get(struct sqlite_store *st, struct store_conn *c,
                              const char *sid, int64_t *created_at)
{
    sqlite3_stmt *q = sqlite_store__stmt(c, Q_SESSION_GET);
    int rc;

    sqlite_store__bind_text(q, 1, sid, strlen(sid));
    rc = sqlite3_step(q);
    if (rc == SQLITE_ROW && created_at)
        *created_at = sqlite3_column_int64(q, 0);
    sqlite_store__done(q);
    if (rc == SQLITE_DONE) {
        store__set_error(&st->base, "no session '%s'", sid);
        return -ENOENT;
    }
    return rc == SQLITE_ROW ? 0 : sqlite_store__sql_fail(st, c, rc, "session lookup");
}

int sqlite_store_set_durable(struct store *base, bool fsync_each_commit)
{
    struct sqlite_store *st = sqlite_store_of(base);
    int rc;

    pthread_mutex_lock(&st->lock);
    rc = sqlite3_exec(st->w.db,
                      fsync_each_commit ? "PRAGMA synchronous=FULL"
                                        : "PRAGMA synchronous=NORMAL",
                      NULL, NULL, NULL);
    rc = rc ? sqlite_store__sql_fail(st, &st->w, rc, "synchronous") : 0;
    pthread_mutex_unlock(&st->lock);
    if (!rc) {
        pthread_mutex_lock(&st->queue.lock);
        st->durable = fsync_each_commit;
        pthread_mutex_unlock(&st->queue.lock);
    }
    return rc;
}

int sqlite_store_set_max_bytes(struct store *base, int64_t max_bytes)
{
    struct sqlite_store *st = sqlite_store_of(base);
    char sql[64];
    int64_t size, pages;
    int rc, err;

    pthread_mutex_lock(&st->lock);
    if ((err = sqlite_store__query_i64(st, &st->w, Q_PAGE_SIZE, NULL, &size)))
        goto out_unlock;
    /* SQLite keeps at least the pages in use: a quota below them only stops growth. */
    pages = max_bytes ? max_bytes / (size > 0 ? size : 1) : st->default_pages;
    snprintf(sql, sizeof(sql), "PRAGMA max_page_count=%lld",
             (long long)(pages > 0 ? pages : 1));
    if ((rc = sqlite3_exec(st->w.db, sql, NULL, NULL, NULL))) {
        err = sqlite_store__sql_fail(st, &st->w, rc, "max_page_count");
        goto out_unlock;
    }
    __atomic_store_n(&st->max_bytes, max_bytes, __ATOMIC_RELAXED);
out_unlock:
    pthread_mutex_unlock(&st->lock);
    return err;
}

enum store_health sqlite_store_health(struct store *base, struct rx_error *why)
{
    struct sqlite_store *st = sqlite_store_of(base);
    enum store_health h;

    /* hlock alone: /healthz never waits for a commit. */
    pthread_mutex_lock(&st->base.hlock);
    /* Look at the files now: a removed file is news before anyone writes. */
    if (!st->unusable)
        (void)sqlite_store__check_writable_locked(st);
    h = st->unusable ? STORE_UNAVAILABLE : st->full ? STORE_FULL : STORE_OK;
    rx_error_set(why, 0, "%s", h == STORE_OK ? "" : st->why);
    pthread_mutex_unlock(&st->base.hlock);
    return h;
}

int sqlite_store_session_created(struct store *base, const char *sid, int64_t *created_at)
{
    struct sqlite_store *st = sqlite_store_of(base);
    struct store_conn *c;
    int err;

    c = sqlite_store__reader_lock(st);
    err = sqlite_store__session_get(st, c, sid, created_at);
    sqlite_store__reader_unlock(st);
    return err;
}
