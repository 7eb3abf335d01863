/*
 * store - the input log in SQLite. See store.h.
 */
#include "server/store.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "state_machine/rx_buf.h"
#include "state_machine/rx_machine.h"

/* "RFLX": marks a file as ours, so a foreign SQLite file is refused, not adopted. */
#define STORE_APP_ID 0x52464c58
/* How long open waits for a lock held by another process before saying so. */
#define STORE_BUSY_MS 2000
/* Where the database's write-ahead log lives: beside it, named by SQLite. */
#define STORE_WAL_SUFFIX "-wal"

static const char schema_sql[] =
    "CREATE TABLE sessions(id TEXT PRIMARY KEY NOT NULL, created_at INTEGER NOT NULL,"
    " updated_at INTEGER NOT NULL, title TEXT);"
    "CREATE INDEX sessions_updated ON sessions(updated_at);"
    "CREATE TABLE inputs(session_id TEXT NOT NULL, seq INTEGER NOT NULL,"
    " input TEXT NOT NULL, PRIMARY KEY(session_id, seq)) WITHOUT ROWID;"
    "CREATE TABLE snapshots(session_id TEXT NOT NULL, seq INTEGER NOT NULL,"
    " state TEXT NOT NULL, PRIMARY KEY(session_id, seq)) WITHOUT ROWID;";

/* Every statement, prepared once at open and kept. */
#define STORE_STATEMENTS(X)                                                              \
    X(BEGIN, "BEGIN IMMEDIATE")                                                          \
    X(COMMIT, "COMMIT")                                                                  \
    X(ROLLBACK, "ROLLBACK")                                                              \
    X(SESSION_INSERT,                                                                    \
      "INSERT INTO sessions(id, created_at, updated_at) VALUES(?1,?2,?2)")               \
    X(SESSION_GET, "SELECT created_at FROM sessions WHERE id=?1")                        \
    X(SESSION_TOUCH, "UPDATE sessions SET updated_at=?2 WHERE id=?1")                    \
    X(SESSION_DELETE, "DELETE FROM sessions WHERE id=?1")                                \
    X(SESSION_LIST, "SELECT id, created_at FROM sessions ORDER BY created_at, id")       \
    X(INPUTS_DELETE, "DELETE FROM inputs WHERE session_id=?1")                           \
    X(SNAPSHOTS_DELETE, "DELETE FROM snapshots WHERE session_id=?1")                     \
    X(INPUT_INSERT, "INSERT INTO inputs(session_id, seq, input) VALUES(?1,?2,?3)")       \
    X(LAST_SEQ, "SELECT coalesce(max(seq), 0) FROM inputs WHERE session_id=?1")          \
    X(INPUTS_RANGE, "SELECT seq, input FROM inputs WHERE session_id=?1 AND seq>?2"       \
                    " AND seq<=?3 ORDER BY seq")                                         \
    X(HISTORY, "SELECT seq, input FROM inputs WHERE session_id=?1 AND seq>?2"            \
               " ORDER BY seq LIMIT ?3")                                                 \
    X(SNAPSHOT_INSERT, "INSERT OR REPLACE INTO snapshots(session_id, seq, state)"        \
                       " VALUES(?1,?2,?3)")                                              \
    X(SNAPSHOT_PRUNE, "DELETE FROM snapshots WHERE session_id=?1 AND seq<?2")            \
    X(SNAPSHOT_AT, "SELECT seq, state FROM snapshots WHERE session_id=?1 AND seq<=?2"    \
                   " ORDER BY seq DESC LIMIT 1")                                         \
    X(FORK_INPUTS, "INSERT INTO inputs(session_id, seq, input) SELECT ?1, seq, input"    \
                   " FROM inputs WHERE session_id=?2 AND seq<=?3")                       \
    X(FORK_SNAPSHOT, "INSERT INTO snapshots(session_id, seq, state) SELECT ?1, seq,"     \
                     " state FROM snapshots WHERE session_id=?2 AND seq<=?3"             \
                     " ORDER BY seq DESC LIMIT 1")                                       \
    X(EXPIRED, "SELECT id, (SELECT count(*) FROM inputs WHERE session_id=id)"            \
               " FROM sessions WHERE updated_at<?1 ORDER BY created_at, id")             \
    X(GC_INPUTS, "DELETE FROM inputs WHERE session_id IN"                                \
                 " (SELECT id FROM sessions WHERE updated_at<?1)")                       \
    X(GC_SNAPSHOTS, "DELETE FROM snapshots WHERE session_id IN"                          \
                    " (SELECT id FROM sessions WHERE updated_at<?1)")                    \
    X(GC_SESSIONS, "DELETE FROM sessions WHERE updated_at<?1")                           \
    X(COUNT_INPUTS, "SELECT count(*) FROM inputs")                                       \
    X(PAGE_COUNT, "PRAGMA page_count")                                                   \
    X(PAGE_SIZE, "PRAGMA page_size")                                                     \
    X(FREELIST, "PRAGMA freelist_count")

enum {
#define STORE_X(e, sql) Q_##e,
    STORE_STATEMENTS(STORE_X)
#undef STORE_X
        Q__COUNT
};

static const char *const statement_sql[Q__COUNT] = {
#define STORE_X(e, sql) [Q_##e] = sql,
    STORE_STATEMENTS(STORE_X)
#undef STORE_X
};

/* One file the store writes, as it was when opened: what its path must still name. */
struct store_file {
    char *path; /* NULL: none (":memory:") */
    dev_t dev;
    ino_t ino;
    bool known; /* dev and ino were read */
};

struct store {
    sqlite3 *db;
    pthread_mutex_t lock; /* guards everything below */
    sqlite3_stmt *q[Q__COUNT];
    struct rx_buf buf; /* encodes inputs and snapshots */
    char err[RX_ERR_LEN];
    struct store_file file, wal;
    int64_t max_bytes;     /* the quota (store_set_max_bytes), 0 for none */
    int64_t default_pages; /* SQLite's own max_page_count, restored for no quota */
    bool full;             /* the last write found no room; the next may */
    bool unusable;         /* writes are refused until restart; sticky */
    char why[RX_ERR_LEN];  /* why full or unusable, for store_health */
};

/* One session id and its creation time, as store_load lists them. */
struct store_entry {
    char *id;
    int64_t created_at;
};

/* ---- errors ------------------------------------------------------------------ */

static void set_error(struct store *st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void set_error(struct store *st, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(st->err, sizeof(st->err), fmt, ap);
    va_end(ap);
}

/*
 * The store can no longer be trusted to keep what it is given: refuse every
 * write from now on (-EIO), and keep the reason, which is also the error.
 * Sticky: after a failed fsync or with the file gone, nothing says the next
 * write would reach the disk, and the process must not acknowledge it.
 */
static int mark_unusable(struct store *st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int mark_unusable(struct store *st, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(st->why, sizeof(st->why), fmt, ap);
    va_end(ap);
    st->unusable = true;
    st->full = false;
    snprintf(st->err, sizeof(st->err), "%s", st->why);
    return -EIO;
}

/* A write found no room (`sys`: the system's errno, or 0): say so until a write fits. */
static int mark_full(struct store *st, int sys)
{
    if (sys) {
        size_t n = strlen(st->err);

        snprintf(st->err + n, sizeof(st->err) - n, " (%s)", strerror(sys));
    }
    st->full = true;
    if (st->max_bytes)
        snprintf(st->why, sizeof(st->why), "%.400s (quota store.max_bytes %lld)", st->err,
                 (long long)st->max_bytes);
    else
        snprintf(st->why, sizeof(st->why), "%s", st->err);
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
 * damaged or vanished file; -EIO alone for anything else.
 */
static int sql_fail(struct store *st, int rc, const char *what)
{
    int sys;

    set_error(st, "%s: %s", what, sqlite3_errmsg(st->db));
    sys = (rc & 0xff) == SQLITE_IOERR ? write_errno(st->db) : 0;
    switch (rc & 0xff) {
    case SQLITE_CONSTRAINT:
        return -EEXIST;
    case SQLITE_NOMEM:
        return -ENOMEM;
    case SQLITE_FULL:
        return mark_full(st, 0);
    case SQLITE_IOERR:
        if (rc == SQLITE_IOERR_WRITE && (sys == ENOSPC || sys == EDQUOT || sys == EFBIG))
            return mark_full(st, sys);
        /* fall through */
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
    case SQLITE_CANTOPEN:
    case SQLITE_READONLY:
        return mark_unusable(st, "%.400s%s%s", st->err, sys ? ": " : "",
                             sys ? strerror(sys) : "");
    default:
        return -EIO;
    }
}

void store_last_error(struct store *st, struct rx_error *err)
{
    pthread_mutex_lock(&st->lock);
    rx_error_set(err, 0, "%s", st->err);
    pthread_mutex_unlock(&st->lock);
}

/* ---- statements ------------------------------------------------------------------ */

/* A kept statement, reset and unbound, ready for new bindings. */
static sqlite3_stmt *stmt(struct store *st, int id)
{
    sqlite3_reset(st->q[id]);
    sqlite3_clear_bindings(st->q[id]);
    return st->q[id];
}

/* Bindings are SQLITE_STATIC: every caller resets the statement before the
 * bound memory goes away (stmt() on next use, or done()). */
static void bind_text(sqlite3_stmt *q, int i, const char *s, size_t n)
{
    sqlite3_bind_text(q, i, s, (int)n, SQLITE_STATIC);
}

static void done(sqlite3_stmt *q)
{
    sqlite3_reset(q);
    sqlite3_clear_bindings(q);
}

/* Run a statement that returns no row. 0 or the SQLite code. */
static int run(sqlite3_stmt *q)
{
    int rc = sqlite3_step(q);

    done(q);
    return rc == SQLITE_DONE ? 0 : rc;
}

/* Insert (sid, seq, the encoded text in st->buf): an input or a snapshot. */
static int put_row(struct store *st, int id, const char *sid, int64_t seq)
{
    sqlite3_stmt *q = stmt(st, id);

    bind_text(q, 1, sid, strlen(sid));
    sqlite3_bind_int64(q, 2, seq);
    bind_text(q, 3, st->buf.data, st->buf.len);
    return run(q);
}

/* Read the identity of `f`'s path into it. 0 or a negative errno. */
static int file_note(struct store_file *f)
{
    struct stat sb;

    if (stat(f->path, &sb))
        return -errno;
    f->dev = sb.st_dev;
    f->ino = sb.st_ino;
    f->known = true;
    return 0;
}

/*
 * Does the path of `f` still name the file SQLite writes? A file removed or
 * replaced (renamed over, restored from a backup) while open keeps taking
 * writes that the next start will not find. 0, or -EIO with the store marked
 * unusable. A file not yet seen is noted (the WAL appears with the first
 * transaction). Lock held.
 */
static int file_check(struct store *st, struct store_file *f, const char *name)
{
    struct stat sb;

    if (!f->path)
        return 0;
    if (stat(f->path, &sb)) {
        int e = errno;

        if (!f->known && e == ENOENT)
            return 0;
        if (e == ENOENT)
            return mark_unusable(st,
                                 "the %s was removed while in use; writes are refused "
                                 "until a restart",
                                 name);
        return mark_unusable(st, "the %s cannot be checked: %s", name, strerror(e));
    }
    if (!f->known) {
        f->dev = sb.st_dev;
        f->ino = sb.st_ino;
        f->known = true;
    } else if (sb.st_dev != f->dev || sb.st_ino != f->ino) {
        return mark_unusable(st,
                             "the %s was replaced by another file while in use; "
                             "writes are refused until a restart",
                             name);
    }
    return 0;
}

/* May the store write? 0, or -EIO with the reason as the error. Lock held. */
static int check_writable(struct store *st)
{
    int err;

    if (st->unusable) {
        snprintf(st->err, sizeof(st->err), "%s", st->why);
        return -EIO;
    }
    if ((err = file_check(st, &st->file, "database file")) ||
        (err = file_check(st, &st->wal, "database's write-ahead log")))
        return err;
    return 0;
}

/* Every write starts here: refused at once when the store is unusable. */
static int tx_begin(struct store *st)
{
    int rc, err;

    if ((err = check_writable(st)))
        return err;
    rc = run(stmt(st, Q_BEGIN));
    return rc ? sql_fail(st, rc, "begin") : 0;
}

/*
 * Commit, then check the files again: a file removed between tx_begin and
 * here took the commit with it, and the caller must not acknowledge it.
 */
static int tx_commit(struct store *st)
{
    int rc = run(stmt(st, Q_COMMIT)), err;

    if (rc) {
        err = sql_fail(st, rc, "commit");
        /* A failed COMMIT may leave the transaction open: end it. */
        if (!sqlite3_get_autocommit(st->db))
            (void)run(stmt(st, Q_ROLLBACK));
        return err;
    }
    if ((err = check_writable(st)))
        return err;
    st->full = false; /* this write found room */
    return 0;
}

static void tx_rollback(struct store *st)
{
    if (!sqlite3_get_autocommit(st->db))
        (void)run(stmt(st, Q_ROLLBACK));
}

/* One integer from a one-row query with one text parameter (or none). */
static int query_i64(struct store *st, int id, const char *sid, int64_t *out)
{
    sqlite3_stmt *q = stmt(st, id);
    int rc;

    if (sid)
        bind_text(q, 1, sid, strlen(sid));
    rc = sqlite3_step(q);
    if (rc == SQLITE_ROW)
        *out = sqlite3_column_int64(q, 0);
    done(q);
    if (rc != SQLITE_ROW)
        return sql_fail(st, rc, statement_sql[id]);
    return 0;
}

/* 0 with the session's creation time, -ENOENT, or -EIO. */
static int session_get(struct store *st, const char *sid, int64_t *created_at)
{
    sqlite3_stmt *q = stmt(st, Q_SESSION_GET);
    int rc;

    bind_text(q, 1, sid, strlen(sid));
    rc = sqlite3_step(q);
    if (rc == SQLITE_ROW && created_at)
        *created_at = sqlite3_column_int64(q, 0);
    done(q);
    if (rc == SQLITE_DONE) {
        set_error(st, "no session '%s'", sid);
        return -ENOENT;
    }
    return rc == SQLITE_ROW ? 0 : sql_fail(st, rc, "session lookup");
}

/* ---- open / close ------------------------------------------------------------------ */

/* The parent directory must exist and be writable: say which and why if not. */
static int check_directory(const char *path, char *why, size_t n)
{
    const char *slash = strrchr(path, '/');
    char dir[PATH_MAX];
    struct stat sb;

    if (!slash)
        snprintf(dir, sizeof(dir), ".");
    else if (slash == path)
        snprintf(dir, sizeof(dir), "/");
    else
        snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
    /* Directory names are cut to fit the one-line message. */
    if (stat(dir, &sb)) {
        int e = errno;

        snprintf(why, n, "directory '%.160s': %s", dir, strerror(e));
        return -e;
    }
    if (!S_ISDIR(sb.st_mode)) {
        snprintf(why, n, "'%.160s' is not a directory", dir);
        return -ENOTDIR;
    }
    /* access() honours read-only mounts even for root. */
    if (access(dir, W_OK | X_OK)) {
        int e = errno;

        snprintf(why, n, "directory '%.160s' is not writable: %s", dir, strerror(e));
        return -e;
    }
    if (!stat(path, &sb)) {
        if (!S_ISREG(sb.st_mode)) {
            snprintf(why, n, "not a regular file");
            return -EINVAL;
        }
        if (access(path, R_OK | W_OK)) {
            int e = errno;

            snprintf(why, n, "not writable: %s", strerror(e));
            return -e;
        }
    }
    return 0;
}

/* Why SQLite failed, in words an operator can act on. */
static void open_why(sqlite3 *db, int rc, const char *what, char *why, size_t n)
{
    const char *msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);

    switch (rc & 0xff) {
    case SQLITE_NOTADB:
        snprintf(why, n, "not a SQLite database (%s)", msg);
        break;
    case SQLITE_CORRUPT:
        snprintf(why, n, "the database is corrupt (%s)", msg);
        break;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        snprintf(why, n, "in use by another process (%s)", msg);
        break;
    default:
        /* "unable to open database file" alone does not say why. */
        if (db && sqlite3_system_errno(db))
            snprintf(why, n, "%s: %s (%s)", what, msg,
                     strerror(sqlite3_system_errno(db)));
        else
            snprintf(why, n, "%s: %s", what, msg);
    }
}

/* The first column of the first row of `sql` as text into out. SQLite code. */
static int pragma_text(sqlite3 *db, const char *sql, char *out, size_t n)
{
    sqlite3_stmt *q = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &q, NULL);

    if (rc == SQLITE_OK) {
        rc = sqlite3_step(q);
        if (rc == SQLITE_ROW) {
            const unsigned char *t = sqlite3_column_text(q, 0);

            snprintf(out, n, "%s", t ? (const char *)t : "");
            rc = SQLITE_OK;
        } else if (rc == SQLITE_DONE) {
            out[0] = '\0';
            rc = SQLITE_OK;
        }
    }
    sqlite3_finalize(q);
    return rc;
}

/*
 * Check the schema, creating it in a fresh file, inside one transaction so a
 * crash half-way leaves a fresh file, never half a schema. 0 or -EPROTO /
 * -EIO with `why`.
 */
static int check_schema(sqlite3 *db, char *why, size_t n)
{
    char app[32], version[32], tables[32];
    long long app_id, ver, ntables;
    int rc;

    if ((rc = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL))) {
        open_why(db, rc, "begin", why, n);
        return -EIO;
    }
    if ((rc = pragma_text(db, "PRAGMA application_id", app, sizeof(app))) ||
        (rc = pragma_text(db, "PRAGMA user_version", version, sizeof(version))) ||
        (rc = pragma_text(db, "SELECT count(*) FROM sqlite_master", tables,
                          sizeof(tables)))) {
        open_why(db, rc, "reading the schema", why, n);
        goto out_rollback;
    }
    app_id = strtoll(app, NULL, 10);
    ver = strtoll(version, NULL, 10);
    ntables = strtoll(tables, NULL, 10);
    if (app_id == 0 && ver == 0 && ntables == 0) {
        char sql[64];

        snprintf(sql, sizeof(sql), "PRAGMA application_id=%d; PRAGMA user_version=%d",
                 STORE_APP_ID, STORE_SCHEMA_VERSION);
        if ((rc = sqlite3_exec(db, schema_sql, NULL, NULL, NULL)) ||
            (rc = sqlite3_exec(db, sql, NULL, NULL, NULL))) {
            open_why(db, rc, "creating the schema", why, n);
            goto out_rollback;
        }
    } else if ((uint32_t)app_id != STORE_APP_ID) {
        snprintf(why, n, "not a reflexor database (application_id %lld, %lld tables)",
                 app_id, ntables);
        goto out_rollback;
    } else if (ver > STORE_SCHEMA_VERSION) {
        snprintf(why, n,
                 "schema version %lld is newer than this reflexor supports (%d); "
                 "use a newer reflexor",
                 ver, STORE_SCHEMA_VERSION);
        goto out_rollback;
    } else if (ver < 1) {
        snprintf(why, n, "unknown schema version %lld", ver);
        goto out_rollback;
    }
    /* Versions 1..STORE_SCHEMA_VERSION-1 would be migrated here. */
    if ((rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL))) {
        open_why(db, rc, "creating the schema", why, n);
        goto out_rollback;
    }
    return 0;

out_rollback:
    sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    return -EPROTO;
}

/*
 * Settings of the connection, in this order: the exclusive lock mode before
 * WAL (so no shared-memory index is made and a second process is refused),
 * WAL, then synchronous. SQLite code, with `why` set.
 */
static int configure(sqlite3 *db, bool memory, char *why, size_t n)
{
    char mode[160];
    int rc;

    sqlite3_busy_timeout(db, STORE_BUSY_MS);
    if ((rc = sqlite3_exec(db, "PRAGMA locking_mode=EXCLUSIVE", NULL, NULL, NULL))) {
        open_why(db, rc, "locking", why, n);
        return rc;
    }
    if ((rc = pragma_text(db, "PRAGMA journal_mode=WAL", mode, sizeof(mode)))) {
        open_why(db, rc, "setting WAL mode", why, n);
        return rc;
    }
    if (strcmp(mode, memory ? "memory" : "wal")) {
        snprintf(why, n, "cannot use WAL mode (journal mode stays '%s')", mode);
        return SQLITE_ERROR;
    }
    /*
     * FULL: fsync the WAL at every commit. kill -9 needs only that the commit
     * reached the OS (NORMAL would do), but "acknowledged" should also survive
     * a power loss, and inputs are few (one per message or tool step, never per
     * streamed token), so the fsync is affordable. store_set_durable(false)
     * trades that for speed.
     */
    if ((rc = sqlite3_exec(db, "PRAGMA synchronous=FULL", NULL, NULL, NULL))) {
        open_why(db, rc, "setting synchronous", why, n);
        return rc;
    }
    /* Catch a damaged file now, with its name, rather than at some later input. */
    if ((rc = pragma_text(db, "PRAGMA quick_check", mode, sizeof(mode)))) {
        open_why(db, rc, "checking the file", why, n);
        return rc;
    }
    if (strcmp(mode, "ok")) {
        /* Its report spans lines; the error is one. */
        for (char *p = mode; *p; p++)
            if (*p == '\n')
                *p = ' ';
        snprintf(why, n, "the database is corrupt (quick_check: %s)", mode);
        return SQLITE_CORRUPT;
    }
    return SQLITE_OK;
}

struct store *store_open(const char *path, struct rx_error *err)
{
    char why[RX_ERR_LEN] = "", pages[32];
    bool memory;
    struct store *st = NULL;
    sqlite3 *db = NULL;
    int rc;

    if (!path || !*path) {
        snprintf(why, sizeof(why), "empty database path");
        goto out_report;
    }
    memory = !strcmp(path, ":memory:");
    if (!memory && check_directory(path, why, sizeof(why)))
        goto out_report;
    rc = sqlite3_open_v2(path, &db,
                         SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                         NULL);
    if (rc) {
        open_why(db, rc, "cannot open", why, sizeof(why));
        goto out_close_db;
    }
    sqlite3_extended_result_codes(db, 1);
    if (configure(db, memory, why, sizeof(why)) || check_schema(db, why, sizeof(why)))
        goto out_close_db;

    st = calloc(1, sizeof(*st));
    if (!st) {
        snprintf(why, sizeof(why), "out of memory");
        goto out_close_db;
    }
    st->db = db;
    for (int i = 0; i < Q__COUNT; i++) {
        rc = sqlite3_prepare_v3(db, statement_sql[i], -1, SQLITE_PREPARE_PERSISTENT,
                                &st->q[i], NULL);
        if (rc) {
            open_why(db, rc, "preparing statements", why, sizeof(why));
            goto out_finalize;
        }
    }
    if ((rc = pragma_text(db, "PRAGMA max_page_count", pages, sizeof(pages)))) {
        open_why(db, rc, "reading max_page_count", why, sizeof(why));
        goto out_finalize;
    }
    st->default_pages = strtoll(pages, NULL, 10);
    /* What the paths name now is what every write checks they still name. */
    if (!memory && (!(st->file.path = strdup(path)) ||
                    asprintf(&st->wal.path, "%s" STORE_WAL_SUFFIX, path) < 0)) {
        st->wal.path = NULL;
        snprintf(why, sizeof(why), "out of memory");
        goto out_free_paths;
    }
    if (st->file.path && (rc = file_note(&st->file))) {
        snprintf(why, sizeof(why), "cannot stat the file: %s", strerror(-rc));
        goto out_free_paths;
    }
    if (st->wal.path)
        (void)file_note(&st->wal); /* made by the first transaction, if not yet */
    pthread_mutex_init(&st->lock, NULL);
    rx_buf_init(&st->buf, RX_BUF_STATE_MAX);
    return st;

out_free_paths:
    free(st->file.path);
    free(st->wal.path);
out_finalize:
    for (int i = 0; i < Q__COUNT; i++)
        sqlite3_finalize(st->q[i]);
    free(st);
    st = NULL;
out_close_db:
    sqlite3_close(db);
out_report:
    rx_error_set(err, 0, "'%s': %s", path ? path : "", why);
    return NULL;
}

/* Does the path of `f` still name the file it named at open? */
static bool file_is_ours(const struct store_file *f)
{
    struct stat sb;

    return f->known && !stat(f->path, &sb) && sb.st_dev == f->dev && sb.st_ino == f->ino;
}

/*
 * Before the last close, when the files moved. SQLite does not checkpoint
 * into a database file that moved, and then leaves the WAL at its path, where
 * the next open would replay it onto whatever file is there now. So: copy
 * the WAL into the file open (still someone's, if it was only renamed) and
 * empty it, then remove it if the path is still ours. And when another file
 * took the WAL's path, it is not ours to remove at close.
 */
static void close_moved_files(struct store *st)
{
    bool wal_ours = file_is_ours(&st->wal);

    if (!file_is_ours(&st->file)) {
        (void)sqlite3_exec(st->db, "PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL, NULL);
        if (wal_ours)
            (void)unlink(st->wal.path);
    } else if (!wal_ours && st->wal.known) {
        int persist = 1;

        (void)sqlite3_file_control(st->db, "main", SQLITE_FCNTL_PERSIST_WAL, &persist);
    }
}

void store_close(struct store *st)
{
    if (!st)
        return;
    for (int i = 0; i < Q__COUNT; i++)
        sqlite3_finalize(st->q[i]);
    if (st->file.path)
        close_moved_files(st);
    /* The last close checkpoints the WAL into the file and removes it. */
    sqlite3_close(st->db);
    free(st->file.path);
    free(st->wal.path);
    rx_buf_release(&st->buf);
    pthread_mutex_destroy(&st->lock);
    free(st);
}

int store_set_durable(struct store *st, bool fsync_each_commit)
{
    int rc;

    pthread_mutex_lock(&st->lock);
    rc = sqlite3_exec(st->db,
                      fsync_each_commit ? "PRAGMA synchronous=FULL"
                                        : "PRAGMA synchronous=NORMAL",
                      NULL, NULL, NULL);
    rc = rc ? sql_fail(st, rc, "synchronous") : 0;
    pthread_mutex_unlock(&st->lock);
    return rc;
}

int store_set_max_bytes(struct store *st, int64_t max_bytes)
{
    char sql[64];
    int64_t size, pages;
    int rc, err;

    if (max_bytes < 0)
        return -EINVAL;
    pthread_mutex_lock(&st->lock);
    if ((err = query_i64(st, Q_PAGE_SIZE, NULL, &size)))
        goto out_unlock;
    /* SQLite keeps at least the pages in use: a quota below them only stops growth. */
    pages = max_bytes ? max_bytes / (size > 0 ? size : 1) : st->default_pages;
    snprintf(sql, sizeof(sql), "PRAGMA max_page_count=%lld",
             (long long)(pages > 0 ? pages : 1));
    if ((rc = sqlite3_exec(st->db, sql, NULL, NULL, NULL))) {
        err = sql_fail(st, rc, "max_page_count");
        goto out_unlock;
    }
    st->max_bytes = max_bytes;
out_unlock:
    pthread_mutex_unlock(&st->lock);
    return err;
}

enum store_health store_health(struct store *st, struct rx_error *why)
{
    enum store_health h;

    pthread_mutex_lock(&st->lock);
    /* Look at the files now: a removed file is news before anyone writes. */
    if (!st->unusable)
        (void)check_writable(st);
    h = st->unusable ? STORE_UNAVAILABLE : st->full ? STORE_FULL : STORE_OK;
    rx_error_set(why, 0, "%s", h == STORE_OK ? "" : st->why);
    pthread_mutex_unlock(&st->lock);
    return h;
}

const char *store_health_name(enum store_health h)
{
    switch (h) {
    case STORE_OK:
        return "ok";
    case STORE_FULL:
        return "full";
    case STORE_UNAVAILABLE:
        return "unavailable";
    }
    return "?";
}

/* ---- sessions ------------------------------------------------------------------ */

int store_create_session(struct store *st, const char *sid, int64_t created_at)
{
    sqlite3_stmt *q;
    int rc, err;

    pthread_mutex_lock(&st->lock);
    if ((err = tx_begin(st)))
        goto out_unlock;
    q = stmt(st, Q_SESSION_INSERT);
    bind_text(q, 1, sid, strlen(sid));
    sqlite3_bind_int64(q, 2, created_at);
    if ((rc = run(q))) {
        err = sql_fail(st, rc, "creating a session");
        tx_rollback(st);
        goto out_unlock;
    }
    err = tx_commit(st);
out_unlock:
    pthread_mutex_unlock(&st->lock);
    return err;
}

/* Delete the rows of one session. Inside a transaction. */
static int delete_rows(struct store *st, const char *sid)
{
    static const int ids[] = {Q_INPUTS_DELETE, Q_SNAPSHOTS_DELETE, Q_SESSION_DELETE};
    int rc;

    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
        sqlite3_stmt *q = stmt(st, ids[i]);

        bind_text(q, 1, sid, strlen(sid));
        if ((rc = run(q)))
            return sql_fail(st, rc, "deleting a session");
    }
    return 0;
}

int store_delete_session(struct store *st, const char *sid)
{
    int err;

    pthread_mutex_lock(&st->lock);
    if ((err = tx_begin(st)))
        goto out_unlock;
    if ((err = session_get(st, sid, NULL)) || (err = delete_rows(st, sid))) {
        tx_rollback(st);
        goto out_unlock;
    }
    err = tx_commit(st);
out_unlock:
    pthread_mutex_unlock(&st->lock);
    return err;
}

/* ---- append ------------------------------------------------------------------ */

/* The steps of store_append inside its transaction. */
static int append_rows(struct store *st, const char *sid, int64_t seq,
                       const struct rx_input *in, const struct rx_state *after,
                       int snapshot_every)
{
    sqlite3_stmt *q;
    int64_t last;
    int rc, err;

    q = stmt(st, Q_SESSION_TOUCH);
    bind_text(q, 1, sid, strlen(sid));
    sqlite3_bind_int64(q, 2, in->timestamp);
    if ((rc = run(q)))
        return sql_fail(st, rc, "updating the session");
    if (sqlite3_changes(st->db) == 0) {
        set_error(st, "no session '%s'", sid);
        return -ENOENT;
    }
    /* A gap would make the log unloadable at the next start: refuse it now. */
    if ((err = query_i64(st, Q_LAST_SEQ, sid, &last)))
        return err;
    if (seq != last + 1) {
        set_error(st, "session '%s': input %lld does not follow %lld", sid,
                  (long long)seq, (long long)last);
        return seq <= last ? -EEXIST : -EINVAL;
    }

    rx_buf_reset(&st->buf);
    if ((err = rx_input_encode(in, &st->buf))) {
        set_error(st, "session '%s': cannot encode input %lld", sid, (long long)seq);
        return err == -E2BIG ? -ENOMEM : err;
    }
    if ((rc = put_row(st, Q_INPUT_INSERT, sid, seq)))
        return sql_fail(st, rc, "storing an input");

    if (snapshot_every <= 0 || seq % snapshot_every)
        return 0;
    rx_buf_reset(&st->buf);
    if ((err = rx_state_encode(after, &st->buf))) {
        set_error(st, "session '%s': cannot encode the state at %lld", sid,
                  (long long)seq);
        return err == -E2BIG ? -ENOMEM : err;
    }
    if ((rc = put_row(st, Q_SNAPSHOT_INSERT, sid, seq)))
        return sql_fail(st, rc, "storing a snapshot");
    /* Only the newest snapshot is kept: storage grows with inputs alone. */
    q = stmt(st, Q_SNAPSHOT_PRUNE);
    bind_text(q, 1, sid, strlen(sid));
    sqlite3_bind_int64(q, 2, seq);
    if ((rc = run(q)))
        return sql_fail(st, rc, "pruning snapshots");
    return 0;
}

int store_append(struct store *st, const char *sid, int64_t seq,
                 const struct rx_input *in, const struct rx_state *after,
                 int snapshot_every)
{
    int err;

    pthread_mutex_lock(&st->lock);
    if ((err = tx_begin(st)))
        goto out_unlock;
    if ((err = append_rows(st, sid, seq, in, after, snapshot_every))) {
        tx_rollback(st);
        goto out_unlock;
    }
    err = tx_commit(st);
out_unlock:
    pthread_mutex_unlock(&st->lock);
    return err;
}

/* ---- folding ------------------------------------------------------------------ */

/* Apply one stored input (its JSON text) to s. 0, -EPROTO with the error set, -ENOMEM. */
static int fold_one(struct store *st, const char *sid, int64_t seq, const char *text,
                    size_t len, struct rx_state *s)
{
    struct rx_error why = {""};
    const char *field = NULL;
    struct rx_input in;
    struct rx_outcome out;
    json_error_t je;
    json_t *j;
    int err;

    j = json_loadb(text, len, 0, &je);
    if (!j) {
        set_error(st, "session '%s': input %lld is not JSON: %s", sid, (long long)seq,
                  je.text);
        return -EPROTO;
    }
    err = rx_input_parse(j, &in, &field, &why);
    json_decref(j);
    if (err == -ENOMEM)
        goto out_nomem;
    if (err) {
        set_error(st, "session '%s': input %lld is invalid: %s", sid, (long long)seq,
                  why.text[0] ? why.text
                  : field     ? field
                              : "?");
        return -EPROTO;
    }
    err = rx_machine_apply(s, &in, &out);
    rx_input_release(&in);
    if (err)
        goto out_nomem;
    if (out.verdict != RX_ACCEPTED) {
        set_error(st, "session '%s': input %lld does not fold (%s: %s)", sid,
                  (long long)seq, rx_verdict_name(out.verdict),
                  rx_reason_name(out.reason));
        return -EPROTO;
    }
    return 0;

out_nomem:
    set_error(st, "session '%s': out of memory at input %lld", sid, (long long)seq);
    return -ENOMEM;
}

/*
 * Build a session's state as of input `upto` (INT64_MAX: the newest) into
 * `out`, with the seq reached in *reached: the newest snapshot at or before
 * `upto`, then the inputs after it, which must follow each other without gap.
 * On failure `out` needs no release. Called with the lock held.
 */
static int build_state(struct store *st, const char *sid, int64_t upto,
                       struct rx_state *out, int64_t *reached)
{
    struct rx_error why = {""};
    struct rx_state s;
    sqlite3_stmt *q;
    int64_t seq = 0;
    int rc, err = 0;

    q = stmt(st, Q_SNAPSHOT_AT);
    bind_text(q, 1, sid, strlen(sid));
    sqlite3_bind_int64(q, 2, upto);
    rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) {
        json_error_t je;
        json_t *j = json_loadb((const char *)sqlite3_column_text(q, 1),
                               (size_t)sqlite3_column_bytes(q, 1), 0, &je);

        seq = sqlite3_column_int64(q, 0);
        err = j ? rx_state_decode(j, &s, &why) : -EINVAL;
        json_decref(j);
        if (err == -ENOMEM) {
            set_error(st, "session '%s': out of memory decoding a snapshot", sid);
        } else if (err) {
            set_error(st, "session '%s': snapshot at %lld does not decode: %s", sid,
                      (long long)seq, j ? why.text : je.text);
            err = -EPROTO;
        }
    } else if (rc == SQLITE_DONE) {
        if ((err = rx_state_init(&s)))
            set_error(st, "out of memory");
    } else {
        err = sql_fail(st, rc, "reading a snapshot");
    }
    done(q);
    if (err)
        return err;

    q = stmt(st, Q_INPUTS_RANGE);
    bind_text(q, 1, sid, strlen(sid));
    sqlite3_bind_int64(q, 2, seq);
    sqlite3_bind_int64(q, 3, upto);
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        int64_t row = sqlite3_column_int64(q, 0);

        if (row != seq + 1) {
            set_error(st, "session '%s': input %lld is missing", sid,
                      (long long)(seq + 1));
            err = -EPROTO;
            break;
        }
        err = fold_one(st, sid, row, (const char *)sqlite3_column_text(q, 1),
                       (size_t)sqlite3_column_bytes(q, 1), &s);
        if (err)
            break;
        seq = row;
    }
    if (!err && rc != SQLITE_DONE)
        err = sql_fail(st, rc, "reading inputs");
    done(q);
    if (err) {
        rx_state_release(&s);
        return err;
    }
    *out = s;
    *reached = seq;
    return 0;
}

/* The sessions, oldest first, copied out so no lock is held while each runs. */
static int list_sessions(struct store *st, struct store_entry **out, size_t *n_out)
{
    struct store_entry *v = NULL, *grown;
    size_t n = 0, cap = 0;
    sqlite3_stmt *q = stmt(st, Q_SESSION_LIST);
    int rc, err = 0;

    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            grown = realloc(v, cap * sizeof(*v));
            if (!grown) {
                err = -ENOMEM;
                break;
            }
            v = grown;
        }
        v[n].id = strdup((const char *)sqlite3_column_text(q, 0));
        v[n].created_at = sqlite3_column_int64(q, 1);
        if (!v[n].id) {
            err = -ENOMEM;
            break;
        }
        n++;
    }
    if (!err && rc != SQLITE_DONE)
        err = sql_fail(st, rc, "listing sessions");
    else if (err)
        set_error(st, "out of memory listing sessions");
    done(q);
    if (err) {
        for (size_t i = 0; i < n; i++)
            free(v[i].id);
        free(v);
        return err;
    }
    *out = v;
    *n_out = n;
    return 0;
}

int store_load(struct store *st, store_each_fn each, void *ctx)
{
    struct store_entry *v = NULL;
    size_t n = 0, i;
    int err;

    pthread_mutex_lock(&st->lock);
    err = list_sessions(st, &v, &n);
    pthread_mutex_unlock(&st->lock);
    for (i = 0; !err && i < n; i++) {
        struct rx_state s;
        int64_t seq;

        pthread_mutex_lock(&st->lock);
        err = build_state(st, v[i].id, INT64_MAX, &s, &seq);
        pthread_mutex_unlock(&st->lock);
        if (err)
            break;
        err = each(ctx, v[i].id, v[i].created_at, &s, seq);
        if (err)
            rx_state_release(&s);
    }
    for (i = 0; i < n; i++)
        free(v[i].id);
    free(v);
    return err;
}

int store_session_load(struct store *st, const char *sid, struct rx_state *out,
                       int64_t *seq)
{
    int err;

    pthread_mutex_lock(&st->lock);
    err = session_get(st, sid, NULL);
    if (!err)
        err = build_state(st, sid, INT64_MAX, out, seq);
    pthread_mutex_unlock(&st->lock);
    return err;
}

/* ---- time travel ------------------------------------------------------------------ */

int store_history(struct store *st, const char *sid, int64_t after_seq, int limit,
                  json_t **out)
{
    json_t *arr = NULL;
    sqlite3_stmt *q;
    int rc, err;

    pthread_mutex_lock(&st->lock);
    if ((err = session_get(st, sid, NULL)))
        goto out_unlock;
    arr = json_array();
    if (!arr) {
        err = -ENOMEM;
        goto out_unlock;
    }
    q = stmt(st, Q_HISTORY);
    bind_text(q, 1, sid, strlen(sid));
    sqlite3_bind_int64(q, 2, after_seq);
    sqlite3_bind_int64(q, 3, limit > 0 ? limit : -1);
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        int64_t seq = sqlite3_column_int64(q, 0);
        json_t *in = json_loadb((const char *)sqlite3_column_text(q, 1),
                                (size_t)sqlite3_column_bytes(q, 1), 0, NULL);

        if (!in) {
            set_error(st, "session '%s': input %lld is not JSON", sid, (long long)seq);
            err = -EPROTO;
            break;
        }
        /* "o" steals `in`, even when the pack fails. */
        if (json_array_append_new(
                arr, json_pack("{s:I, s:o}", "seq", (json_int_t)seq, "input", in))) {
            err = -ENOMEM;
            break;
        }
    }
    if (!err && rc != SQLITE_DONE)
        err = sql_fail(st, rc, "reading history");
    done(q);
    if (err) {
        json_decref(arr);
        goto out_unlock;
    }
    *out = arr;
out_unlock:
    pthread_mutex_unlock(&st->lock);
    return err;
}

/* -ERANGE unless 0 <= seq <= the session's last seq. Lock held. */
static int check_seq(struct store *st, const char *sid, int64_t seq)
{
    int64_t last;
    int err = query_i64(st, Q_LAST_SEQ, sid, &last);

    if (err)
        return err;
    if (seq < 0 || seq > last) {
        set_error(st, "session '%s': seq %lld is not in 0..%lld", sid, (long long)seq,
                  (long long)last);
        return -ERANGE;
    }
    return 0;
}

int store_state_at(struct store *st, const char *sid, int64_t seq, struct rx_state *out)
{
    int64_t reached;
    int err;

    pthread_mutex_lock(&st->lock);
    if (!(err = session_get(st, sid, NULL)) && !(err = check_seq(st, sid, seq)))
        err = build_state(st, sid, seq, out, &reached);
    pthread_mutex_unlock(&st->lock);
    return err;
}

int store_fork(struct store *st, const char *sid, int64_t at, const char *new_sid,
               int64_t created_at)
{
    static const int copies[] = {Q_FORK_INPUTS, Q_FORK_SNAPSHOT};
    sqlite3_stmt *q;
    int rc, err;

    pthread_mutex_lock(&st->lock);
    if ((err = tx_begin(st)))
        goto out_unlock;
    if ((err = session_get(st, sid, NULL)) || (err = check_seq(st, sid, at)))
        goto out_rollback;
    q = stmt(st, Q_SESSION_INSERT);
    bind_text(q, 1, new_sid, strlen(new_sid));
    sqlite3_bind_int64(q, 2, created_at);
    if ((rc = run(q))) {
        err = sql_fail(st, rc, "creating the fork");
        goto out_rollback;
    }
    for (size_t i = 0; i < sizeof(copies) / sizeof(copies[0]); i++) {
        q = stmt(st, copies[i]);
        bind_text(q, 1, new_sid, strlen(new_sid));
        bind_text(q, 2, sid, strlen(sid));
        sqlite3_bind_int64(q, 3, at);
        if ((rc = run(q))) {
            err = sql_fail(st, rc, "copying the log");
            goto out_rollback;
        }
    }
    err = tx_commit(st);
    goto out_unlock;

out_rollback:
    tx_rollback(st);
out_unlock:
    pthread_mutex_unlock(&st->lock);
    return err;
}

/* ---- retention and size ------------------------------------------------------------ */

/* The expired ids (when `ids`) and their input count. Lock held, in a transaction. */
static int list_expired(struct store *st, int64_t older_than_ms, json_t *ids,
                        int64_t *inputs)
{
    sqlite3_stmt *q = stmt(st, Q_EXPIRED);
    int rc, err = 0;

    *inputs = 0;
    sqlite3_bind_int64(q, 1, older_than_ms);
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        *inputs += sqlite3_column_int64(q, 1);
        if (json_array_append_new(ids,
                                  json_string((const char *)sqlite3_column_text(q, 0)))) {
            set_error(st, "out of memory listing expired sessions");
            err = -ENOMEM;
            break;
        }
    }
    if (!err && rc != SQLITE_DONE)
        err = sql_fail(st, rc, "listing expired sessions");
    done(q);
    return err;
}

int store_gc_list(struct store *st, int64_t older_than_ms, json_t **removed_ids,
                  int64_t *removed_inputs)
{
    static const int deletes[] = {Q_GC_INPUTS, Q_GC_SNAPSHOTS, Q_GC_SESSIONS};
    json_t *ids = json_array();
    int64_t inputs = 0;
    int rc, err;

    if (!ids)
        return -ENOMEM;
    pthread_mutex_lock(&st->lock);
    if ((err = tx_begin(st)))
        goto out_unlock;
    if ((err = list_expired(st, older_than_ms, ids, &inputs)))
        goto out_rollback;
    for (size_t i = 0; i < sizeof(deletes) / sizeof(deletes[0]); i++) {
        sqlite3_stmt *q = stmt(st, deletes[i]);

        sqlite3_bind_int64(q, 1, older_than_ms);
        if ((rc = run(q))) {
            err = sql_fail(st, rc, "deleting expired sessions");
            goto out_rollback;
        }
    }
    if ((err = tx_commit(st)))
        goto out_unlock;
    if (removed_inputs)
        *removed_inputs = inputs;
    if (removed_ids) {
        *removed_ids = ids;
        ids = NULL;
    }
    goto out_unlock;

out_rollback:
    tx_rollback(st);
out_unlock:
    pthread_mutex_unlock(&st->lock);
    json_decref(ids);
    return err;
}

int store_gc(struct store *st, int64_t older_than_ms, int *removed_sessions,
             int64_t *removed_inputs)
{
    json_t *ids = NULL;
    int err = store_gc_list(st, older_than_ms, &ids, removed_inputs);

    if (!err && removed_sessions)
        *removed_sessions = (int)json_array_size(ids);
    json_decref(ids);
    return err;
}

int store_stats(struct store *st, int64_t *inputs, int64_t *bytes)
{
    int64_t n = 0, pages = 0, size = 0, free_pages = 0;
    int err;

    pthread_mutex_lock(&st->lock);
    if (!(err = query_i64(st, Q_COUNT_INPUTS, NULL, &n)) &&
        !(err = query_i64(st, Q_PAGE_COUNT, NULL, &pages)) &&
        !(err = query_i64(st, Q_PAGE_SIZE, NULL, &size)) &&
        !(err = query_i64(st, Q_FREELIST, NULL, &free_pages))) {
        if (inputs)
            *inputs = n;
        if (bytes)
            *bytes = (pages - free_pages) * size;
    }
    pthread_mutex_unlock(&st->lock);
    return err;
}
