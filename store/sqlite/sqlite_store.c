/*
 * sqlite_store - the input log in SQLite, the backend of store/store.c for a
 * path: opening a file (directory and lock checks, schema and its upgrades,
 * configuration, the reader's and the checkpointer's connections, the
 * threads), closing it, and its table of operations. The connections at work
 * (errors, health, statements, transactions, reads, settings) are in
 * sqlite_store_conn.c, the writer and checkpointer threads in
 * sqlite_store_writer.c, the reads (load, history, state-at, fork, gc, stats)
 * in sqlite_store_read.c, the index, titles, search and import in
 * sqlite_store_search.c; what they share is in sqlite_store_internal.h. See
 * store.h.
 */
#include "store/store.h"
#include "store/sqlite/sqlite_store_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

/* "RFLX": marks a file as ours, so a foreign SQLite file is refused, not adopted. */
#define STORE_APP_ID 0x52464c58
/* How often open looks again at a file another process has locked. */
#define STORE_LOCK_POLL_MS 10
/*
 * The largest file checked (PRAGMA quick_check, which reads every page)
 * before open returns: about a second of reading. A bigger one is checked
 * by the checkpointer's connection after start-up (SPEC 6.2: start-up must
 * not grow with the log; 73 s for a 17 GB log of a million chats), and a
 * damage it finds makes the store unusable, named in /healthz.
 */
#define STORE_CHECK_AT_OPEN_MAX ((off_t)256 << 20)

/* STORE_CHECK_AT_OPEN_MAX, or RX_STORE_CHECK_AT_OPEN_MAX's bytes (tests). */
static off_t check_at_open_max(void)
{
    const char *v = getenv("RX_STORE_CHECK_AT_OPEN_MAX");

    return v && *v ? (off_t)strtoll(v, NULL, 10) : STORE_CHECK_AT_OPEN_MAX;
}
/* Where the database's write-ahead log lives: beside it, named by SQLite. */
#define STORE_WAL_SUFFIX "-wal"

/*
 * The log of a session is its rows of `inputs` and of `inputs_recent`. An
 * input is first committed to inputs_recent, a plain table in the order of
 * arrival: the inputs of many sessions committed together share its last
 * pages, where `inputs`, ordered by session, would take one page of each
 * session into every commit (and its fsync). The writer moves them into
 * `inputs` every STORE_RECENT_MERGE rows (and at open and close), so
 * inputs_recent stays small enough to scan; every read takes both.
 */
#define STORE_RECENT_SQL                                                                 \
    "CREATE TABLE inputs_recent(session_id TEXT NOT NULL, seq INTEGER NOT NULL,"         \
    " input TEXT NOT NULL);"

/*
 * Schema 6: the streamed text of answers still streaming (SPEC 3.7), in
 * batches keyed by their offset; the input that ends an answer removes its
 * batches, and a session's go with its row (the trigger: delete and
 * retention alike).
 */
#define STORE_STREAM_SQL                                                                 \
    "CREATE TABLE IF NOT EXISTS stream_text(session_id TEXT NOT NULL,"                   \
    " message_id TEXT NOT NULL,"                                                         \
    " off INTEGER NOT NULL, text TEXT NOT NULL,"                                         \
    " PRIMARY KEY(session_id, message_id, off)) WITHOUT ROWID;"                          \
    "CREATE TRIGGER IF NOT EXISTS stream_text_session_gone AFTER DELETE ON sessions"     \
    " BEGIN DELETE FROM stream_text WHERE session_id = old.id; END;"

static const char schema_sql[] =
    "CREATE TABLE sessions(id TEXT PRIMARY KEY NOT NULL, created_at INTEGER NOT NULL,"
    " updated_at INTEGER NOT NULL, title TEXT, messages INTEGER NOT NULL DEFAULT 0,"
    " busy INTEGER NOT NULL DEFAULT 0, auto_title TEXT,"
    " owner TEXT NOT NULL DEFAULT '" STORE_OWNER_DEFAULT "');"
    "CREATE TABLE inputs(session_id TEXT NOT NULL, seq INTEGER NOT NULL,"
    " input TEXT NOT NULL, PRIMARY KEY(session_id, seq)) WITHOUT ROWID;"
    "CREATE TABLE snapshots(session_id TEXT NOT NULL, seq INTEGER NOT NULL,"
    " state TEXT NOT NULL, PRIMARY KEY(session_id, seq)) WITHOUT ROWID;" STORE_RECENT_SQL;

/*
 * The stores open in this process, to refuse a second store on a file
 * without opening the file again: closing any descriptor of a file drops
 * every POSIX lock the process holds on it, SQLite's included.
 */
static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sqlite_store *open_stores;
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

/*
 * One server per file: an exclusive flock(2) on the database file, held until
 * store_close (SQLite's own locks are POSIX locks, which flock does not
 * touch). A store of this process on the same file is found in open_stores
 * before the file is opened again. On success st->lock_fd holds the lock and
 * st is in open_stores; otherwise `why` says why. open_lock held.
 */
static int lock_file(struct sqlite_store *st, const char *path, char *why, size_t n)
{
    struct stat sb;
    int fd, e, rc, waited = 0;

    if (!stat(path, &sb))
        for (struct sqlite_store *o = open_stores; o; o = o->next_open)
            if (o->lock_dev == sb.st_dev && o->lock_ino == sb.st_ino) {
                snprintf(why, n, "in use by another process (a store of this one)");
                return -EBUSY;
            }
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        e = errno;
        snprintf(why, n, "cannot open: %s", strerror(e));
        return -e;
    }
    /* A server that is still stopping lets go within moments: wait that long. */
    while ((rc = flock(fd, LOCK_EX | LOCK_NB)) && errno == EWOULDBLOCK &&
           waited < STORE_BUSY_MS) {
        usleep(STORE_LOCK_POLL_MS * 1000);
        waited += STORE_LOCK_POLL_MS;
    }
    if (rc || fstat(fd, &sb)) {
        e = errno;
        if (e == EWOULDBLOCK)
            snprintf(why, n, "in use by another process (it holds the file's lock)");
        else
            snprintf(why, n, "cannot lock: %s", strerror(e));
        close(fd); /* no store of this process has the file open: no lock is lost */
        return -e;
    }
    st->lock_fd = fd;
    st->lock_dev = sb.st_dev;
    st->lock_ino = sb.st_ino;
    st->next_open = open_stores;
    open_stores = st;
    return 0;
}

/* Leave open_stores and drop the file's lock: after every connection closed. */
static void unlock_file(struct sqlite_store *st)
{
    if (st->lock_fd < 0)
        return;
    pthread_mutex_lock(&open_lock);
    for (struct sqlite_store **p = &open_stores; *p; p = &(*p)->next_open) {
        if (*p == st) {
            *p = st->next_open;
            break;
        }
    }
    pthread_mutex_unlock(&open_lock);
    close(st->lock_fd);
    st->lock_fd = -1;
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
            (rc = sqlite3_exec(db, sqlite_store__rows_schema_sql, NULL, NULL, NULL)) ||
            (rc = sqlite3_exec(db, sqlite_store__owner_schema_sql, NULL, NULL, NULL)) ||
            (rc = sqlite3_exec(db, sqlite_store__search_schema_sql, NULL, NULL, NULL)) ||
            (rc = sqlite3_exec(db, STORE_STREAM_SQL, NULL, NULL, NULL)) ||
            (rc = sqlite3_exec(db, sql, NULL, NULL, NULL))) {
            open_why(db, rc, "creating the schema", why, n);
            goto out_rollback;
        }
        ver = STORE_SCHEMA_VERSION;
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
    /* Version 2 adds inputs_recent (group commit), 3 the full-text index,
       filled from the log, 4 the sessions' rows (their values computed after
       open, sqlite_store__rows_upgrade), 5 their owners (the existing ones
       the default's), 6 the streamed text of answers (empty); nothing else
       moves. Each step builds on the one
       before: a file of any older version takes them all, in order. */
    if (ver < STORE_SCHEMA_VERSION) {
        char sql[64];

        snprintf(sql, sizeof(sql), "PRAGMA user_version=%d", STORE_SCHEMA_VERSION);
        if ((ver < 2 && (rc = sqlite3_exec(db, STORE_RECENT_SQL, NULL, NULL, NULL))) ||
            (ver < 3 && ((rc = sqlite3_exec(db, sqlite_store__search_schema_sql, NULL,
                                            NULL, NULL)) ||
                         (rc = sqlite3_exec(db, sqlite_store__search_backfill_sql, NULL,
                                            NULL, NULL)))) ||
            (ver < 4 &&
             (rc = sqlite3_exec(db, sqlite_store__rows_upgrade_sql, NULL, NULL, NULL))) ||
            (ver < 5 && (rc = sqlite3_exec(db, sqlite_store__owner_upgrade_sql, NULL,
                                           NULL, NULL))) ||
            (ver < 6 && (rc = sqlite3_exec(db, STORE_STREAM_SQL, NULL, NULL, NULL))) ||
            (rc = sqlite3_exec(db, sql, NULL, NULL, NULL))) {
            open_why(db, rc, "upgrading the schema", why, n);
            goto out_rollback;
        }
    }
    if ((rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL))) {
        open_why(db, rc, "creating the schema", why, n);
        goto out_rollback;
    }
    return 0;

out_rollback:
    sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    return -EPROTO;
}

void sqlite_store__check_later(struct sqlite_store *st)
{
    char report[160];
    int rc = pragma_text(st->ck, "PRAGMA quick_check", report, sizeof(report));

    if (rc == SQLITE_OK && !strcmp(report, "ok"))
        return;
    for (char *p = report; *p; p++)
        if (*p == '\n')
            *p = ' ';
    pthread_mutex_lock(&st->base.hlock);
    if (!st->unusable && rc == SQLITE_OK)
        (void)sqlite_store__mark_unusable(
            st, "the database is corrupt (quick_check: %s); writes are refused", report);
    else if (!st->unusable)
        (void)sqlite_store__mark_unusable(
            st, "the database could not be checked (%s); writes are refused",
            sqlite3_errstr(rc));
    pthread_mutex_unlock(&st->base.hlock);
}

/*
 * Settings of the writer's connection: WAL (readers and the writer go on side
 * by side; the shared-memory index lets the read-only connection see each
 * commit), then synchronous. One server per file is lock_file's job. SQLite
 * code, with `why` set.
 */
static int configure(sqlite3 *db, bool memory, bool check, char *why, size_t n)
{
    char mode[160];
    int rc;

    sqlite3_busy_timeout(db, STORE_BUSY_MS);
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
     * a power loss. One commit carries every input queued while the one before
     * it synced (group commit), so the fsync is shared.
     * store_set_durable(false) trades that for speed.
     */
    if ((rc = sqlite3_exec(db, "PRAGMA synchronous=FULL", NULL, NULL, NULL))) {
        open_why(db, rc, "setting synchronous", why, n);
        return rc;
    }
    /* Catch a damaged file now, with its name, rather than at some later
       input; a big one is checked after start-up (sqlite_store__check_later). */
    if (check && (rc = pragma_text(db, "PRAGMA quick_check", mode, sizeof(mode)))) {
        open_why(db, rc, "checking the file", why, n);
        return rc;
    }
    if (check && strcmp(mode, "ok")) {
        /* Its report spans lines; the error is one. */
        for (char *p = mode; *p; p++)
            if (*p == '\n')
                *p = ' ';
        snprintf(why, n, "the database is corrupt (quick_check: %s)", mode);
        return SQLITE_CORRUPT;
    }
    return SQLITE_OK;
}

/* Prepare every statement on `c`. SQLite code, with `why` set. */
static int prepare_all(struct store_conn *c, char *why, size_t n)
{
    for (int i = 0; i < Q__COUNT; i++) {
        int rc = sqlite3_prepare_v3(c->db, sqlite_store__sql[i], -1,
                                    SQLITE_PREPARE_PERSISTENT, &c->q[i], NULL);

        if (rc) {
            open_why(c->db, rc, "preparing statements", why, n);
            return rc;
        }
    }
    return SQLITE_OK;
}

/* Finalize and close; NULL members are fine. */
static void conn_close(struct store_conn *c)
{
    for (int i = 0; i < Q__COUNT; i++) {
        sqlite3_finalize(c->q[i]);
        c->q[i] = NULL;
    }
    sqlite3_close(c->db);
    c->db = NULL;
}

/* The read-only connection beside the writer's. SQLite code, with `why` set. */
static int open_reader(struct sqlite_store *st, const char *path, char *why, size_t n)
{
    int rc = sqlite3_open_v2(path, &st->r.db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX,
                             NULL);

    if (rc) {
        open_why(st->r.db, rc, "opening the reader", why, n);
        return rc;
    }
    sqlite3_extended_result_codes(st->r.db, 1);
    sqlite3_busy_timeout(st->r.db, STORE_BUSY_MS);
    return prepare_all(&st->r, why, n);
}

/*
 * The checkpointer's connection: the writer's does no checkpoint of its own
 * (wal_autocheckpoint 0); its WAL hook wakes the checkpointer instead.
 * SQLite code, with `why` set.
 */
static int open_checkpointer(struct sqlite_store *st, const char *path, char *why,
                             size_t n)
{
    int rc =
        sqlite3_open_v2(path, &st->ck, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);

    if (rc) {
        open_why(st->ck, rc, "opening the checkpointer", why, n);
        return rc;
    }
    sqlite3_busy_timeout(st->ck, STORE_BUSY_MS);
    /* A first read opens its WAL: a checkpoint on a connection that never
       read the file does nothing. */
    if ((rc = sqlite3_exec(st->ck, "SELECT count(*) FROM sqlite_master", NULL, NULL,
                           NULL))) {
        open_why(st->ck, rc, "opening the checkpointer", why, n);
        return rc;
    }
    if ((rc = sqlite3_exec(st->w.db, "PRAGMA wal_autocheckpoint=0", NULL, NULL, NULL))) {
        open_why(st->w.db, rc, "wal_autocheckpoint", why, n);
        return rc;
    }
    sqlite3_wal_hook(st->w.db, sqlite_store__wal_hook, st);
    return SQLITE_OK;
}

/* Start one of the store's threads. 0, or the error with `why` set. */
static int start_thread(pthread_t *t, void *(*fn)(void *), struct sqlite_store *st,
                        bool *started, char *why, size_t n)
{
    int rc = pthread_create(t, NULL, fn, st);

    if (rc)
        snprintf(why, n, "cannot start a thread: %s", strerror(rc));
    else
        *started = true;
    return rc;
}

/* Group commit's threads: the notifier, then the writer. 0, or the error with `why`. */
static int writer_start(struct sqlite_store *st, char *why, size_t n)
{
    int rc = store_queue_start(&st->queue, sqlite_store__writer_main, st);

    if (rc)
        snprintf(why, n, "cannot start a thread: %s", strerror(rc));
    return rc;
}

static void sqlite_store_close(struct store *base);

/*
 * Open `path`; `beside` (store_open_beside): next to the server that may
 * hold it, for its records only: no lock of the file, no check, upgrade,
 * reader, checkpointer or writer thread; the writer's connection serves the
 * records, SQLite's own locks keep its writes and the server's apart.
 */
static struct store *open_file(const char *path, bool beside, struct rx_error *err)
{
    char why[RX_ERR_LEN] = "", pages[32];
    bool memory;
    struct sqlite_store *st;
    struct stat sb;
    int rc;

    st = calloc(1, sizeof(*st));
    if (!st) {
        rx_error_set(err, 0, "'%s': out of memory", path ? path : "");
        return NULL;
    }
    st->lock_fd = -1;
    st->durable = true;
    pthread_mutex_init(&st->lock, NULL);
    pthread_mutex_init(&st->rlock, NULL);
    store__base_init(&st->base, &sqlite_store_backend);
    store_queue_init(&st->queue);
    pthread_mutex_init(&st->cklock, NULL);
    pthread_cond_init(&st->ckcond, NULL);
    if (!path || !*path) {
        snprintf(why, sizeof(why), "empty database path");
        goto out_fail;
    }
    memory = !strcmp(path, ":memory:");
    if (!memory && !beside) {
        if (check_directory(path, why, sizeof(why)))
            goto out_fail;
        pthread_mutex_lock(&open_lock);
        rc = lock_file(st, path, why, sizeof(why));
        pthread_mutex_unlock(&open_lock);
        if (rc)
            goto out_fail;
    }
    rc = sqlite3_open_v2(path, &st->w.db,
                         SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                         NULL);
    if (rc) {
        open_why(st->w.db, rc, "cannot open", why, sizeof(why));
        goto out_fail;
    }
    sqlite3_extended_result_codes(st->w.db, 1);
    st->check_later =
        !beside && !memory && !stat(path, &sb) && sb.st_size > check_at_open_max();
    if (configure(st->w.db, memory, !beside && !st->check_later, why, sizeof(why)) ||
        check_schema(st->w.db, why, sizeof(why)) ||
        sqlite_store__records_schema(st->w.db, why, sizeof(why)) ||
        prepare_all(&st->w, why, sizeof(why)))
        goto out_fail;
    st->reader = &st->w;
    if (beside)
        return &st->base;
    if (!memory) {
        if (open_reader(st, path, why, sizeof(why)) ||
            open_checkpointer(st, path, why, sizeof(why)))
            goto out_fail;
        st->reader = &st->r;
    }
    if ((rc = pragma_text(st->w.db, "PRAGMA max_page_count", pages, sizeof(pages)))) {
        open_why(st->w.db, rc, "reading max_page_count", why, sizeof(why));
        goto out_fail;
    }
    st->default_pages = strtoll(pages, NULL, 10);
    /* What the paths name now is what every write checks they still name. */
    if (!memory && (!(st->file.path = strdup(path)) ||
                    asprintf(&st->wal.path, "%s" STORE_WAL_SUFFIX, path) < 0)) {
        st->wal.path = NULL;
        snprintf(why, sizeof(why), "out of memory");
        goto out_fail;
    }
    if (st->file.path && (rc = file_note(&st->file))) {
        snprintf(why, sizeof(why), "cannot stat the file: %s", strerror(-rc));
        goto out_fail;
    }
    if (st->wal.path)
        (void)file_note(&st->wal); /* made by the first transaction, if not yet */
    st->merge_at = STORE_RECENT_MERGE;
    if ((rc = sqlite_store__recent_open(st))) {
        snprintf(why, sizeof(why), "reading recent inputs: %s", strerror(-rc));
        goto out_fail;
    }
    if ((rc = sqlite_store__rows_upgrade(st, path, why, sizeof(why))))
        goto out_fail;
    if ((st->ck && (rc = start_thread(&st->checkpointer, sqlite_store__checkpointer_main,
                                      st, &st->ck_started, why, sizeof(why)))) ||
        (rc = writer_start(st, why, sizeof(why))))
        goto out_fail;
    return &st->base;

out_fail:
    rx_error_set(err, 0, "'%s': %s", path ? path : "", why);
    sqlite_store_close(&st->base);
    return NULL;
}

static struct store *sqlite_store_open(const char *path, struct rx_error *err)
{
    return open_file(path, false, err);
}

static struct store *sqlite_store_open_beside(const char *path, struct rx_error *err)
{
    return open_file(path, true, err);
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
 * took the WAL's path, it is not ours to remove at close. The reader is
 * closed already.
 */
static void close_moved_files(struct sqlite_store *st)
{
    bool wal_ours = file_is_ours(&st->wal);

    if (!file_is_ours(&st->file)) {
        (void)sqlite3_exec(st->w.db, "PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL, NULL);
        if (wal_ours)
            (void)unlink(st->wal.path);
    } else if (!wal_ours && st->wal.known) {
        int persist = 1;

        (void)sqlite3_file_control(st->w.db, "main", SQLITE_FCNTL_PERSIST_WAL, &persist);
    }
}

static void sqlite_store_close(struct store *base)
{
    struct sqlite_store *st = sqlite_store_of(base);

    /* The writer commits what is queued, the notifier answers it, they end. */
    store_queue_close(&st->queue);
    pthread_mutex_lock(&st->cklock);
    st->ck_stop = true;
    pthread_cond_signal(&st->ckcond);
    pthread_mutex_unlock(&st->cklock);
    if (st->ck_started)
        pthread_join(st->checkpointer, NULL);
    /* Leave the file tidy: every input in `inputs` (best effort). */
    if (st->queue.writer_started && st->recent_rows)
        (void)sqlite_store__recent_merge(st);
    sqlite3_close(st->ck);
    conn_close(&st->r); /* none for ":memory:" */
    for (int i = 0; i < Q__COUNT; i++) {
        sqlite3_finalize(st->w.q[i]);
        st->w.q[i] = NULL;
    }
    if (st->file.path && st->w.db)
        close_moved_files(st);
    /* The last close checkpoints the WAL into the file and removes it. */
    conn_close(&st->w);
    unlock_file(st);
    sqlite_store__last_release(&st->last);
    free(st->file.path);
    free(st->wal.path);
    pthread_cond_destroy(&st->ckcond);
    pthread_mutex_destroy(&st->cklock);
    store__base_release(&st->base);
    pthread_mutex_destroy(&st->rlock);
    pthread_mutex_destroy(&st->lock);
    free(st);
}
static bool accepts_any(const char *path)
{
    (void)path;
    return true;
}

const struct store_backend sqlite_store_backend = {
    .name = "sqlite",
    .shared = false, /* one process per file (flock): nobody to fence off */
    .accepts = accepts_any,
    .open = sqlite_store_open,
    .open_beside = sqlite_store_open_beside,
    .close = sqlite_store_close,
    .set_durable = sqlite_store_set_durable,
    .set_max_bytes = sqlite_store_set_max_bytes,
    .set_node = NULL,
    .health = sqlite_store_health,
    .stats = sqlite_store_stats,
    .create_session = sqlite_store_create_session,
    .delete_session = sqlite_store_delete_session,
    .session_created = sqlite_store_session_created,
    .list_sessions = sqlite_store_list_sessions,
    .fork = sqlite_store_fork,
    .import = sqlite_store_import,
    .gc_list = sqlite_store_gc_list,
    .sessions_page = sqlite_store_sessions_page,
    .sessions_busy = sqlite_store_sessions_busy,
    .sessions_count = sqlite_store_sessions_count,
    .sessions_owned = sqlite_store_sessions_owned,
    .session_info = sqlite_store_session_info,
    .write_queue = sqlite_store_write_queue,
    .commit_counts = sqlite_store_commit_counts,
    .stream_text = sqlite_store_stream_text,
    .session_load = sqlite_store_session_load,
    .state_at = sqlite_store_state_at,
    .history_page = sqlite_store_history_page,
    .set_title = sqlite_store_set_title,
    .session_title = sqlite_store_session_title,
    .search = sqlite_store_search,
    .record_put = sqlite_store_record_put,
    .record_get = sqlite_store_record_get,
    .record_delete = sqlite_store_record_delete,
    .record_list = sqlite_store_record_list,
};
