/*
 * store - the input log in SQLite. See store.h.
 */
#include "server/store.h"

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
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "state_machine/rx_buf.h"
#include "state_machine/rx_machine.h"

/* "RFLX": marks a file as ours, so a foreign SQLite file is refused, not adopted. */
#define STORE_APP_ID 0x52464c58
/* How long open waits for a lock held by another process before saying so,
   and a connection for one SQLite holds briefly (WAL recovery). */
#define STORE_BUSY_MS 2000
/* How often open looks again at a file another process has locked. */
#define STORE_LOCK_POLL_MS 10
/* Where the database's write-ahead log lives: beside it, named by SQLite. */
#define STORE_WAL_SUFFIX "-wal"
/* The most writes one commit takes: bounds one commit's time, not the queue. */
#define STORE_BATCH_MAX 1024
/* The longest a batch waits for the writes the last commit answered (gather). */
#define STORE_GATHER_MAX_NS 1000000
/* Rows of inputs_recent past which the writer moves them into `inputs`. */
#define STORE_RECENT_MERGE 8192
/* WAL frames past which the checkpointer copies the WAL into the file. */
#define STORE_CHECKPOINT_FRAMES 4000
/* How many times in a row it copies what commits added meanwhile. */
#define STORE_CHECKPOINT_PASSES 8
/*
 * A session's updated_at is rewritten only when it moves by more than this:
 * retention counts in days, and rewriting the session's row (and its index
 * entry) at every input would add their pages to every commit.
 */
#define STORE_TOUCH_SLACK_MS "1000"
/* Room for one history row's framing: {"seq":N,"input":...}, */
#define STORE_HISTORY_ROW_OVERHEAD 40

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

static const char schema_sql[] =
    "CREATE TABLE sessions(id TEXT PRIMARY KEY NOT NULL, created_at INTEGER NOT NULL,"
    " updated_at INTEGER NOT NULL, title TEXT);"
    "CREATE INDEX sessions_updated ON sessions(updated_at);"
    "CREATE TABLE inputs(session_id TEXT NOT NULL, seq INTEGER NOT NULL,"
    " input TEXT NOT NULL, PRIMARY KEY(session_id, seq)) WITHOUT ROWID;"
    "CREATE TABLE snapshots(session_id TEXT NOT NULL, seq INTEGER NOT NULL,"
    " state TEXT NOT NULL, PRIMARY KEY(session_id, seq)) WITHOUT ROWID;" STORE_RECENT_SQL;

/* Every statement, prepared once per connection at open and kept. */
#define STORE_STATEMENTS(X)                                                              \
    X(BEGIN, "BEGIN IMMEDIATE")                                                          \
    X(BEGIN_READ, "BEGIN")                                                               \
    X(COMMIT, "COMMIT")                                                                  \
    X(ROLLBACK, "ROLLBACK")                                                              \
    X(SESSION_INSERT,                                                                    \
      "INSERT INTO sessions(id, created_at, updated_at) VALUES(?1,?2,?2)")               \
    X(SESSION_GET, "SELECT created_at FROM sessions WHERE id=?1")                        \
    X(SESSION_TOUCH, "UPDATE sessions SET updated_at=?2 WHERE id=?1"                     \
                     " AND updated_at<?2-" STORE_TOUCH_SLACK_MS)                         \
    X(SESSION_DELETE, "DELETE FROM sessions WHERE id=?1")                                \
    X(SESSION_LIST, "SELECT id, created_at FROM sessions ORDER BY created_at, id")       \
    X(INPUTS_DELETE, "DELETE FROM inputs WHERE session_id=?1")                           \
    X(RECENT_DELETE, "DELETE FROM inputs_recent WHERE session_id=?1")                    \
    X(SNAPSHOTS_DELETE, "DELETE FROM snapshots WHERE session_id=?1")                     \
    X(RECENT_INSERT, "INSERT INTO inputs_recent(session_id, seq, input)"                 \
                     " VALUES(?1,?2,?3)")                                                \
    X(APPEND_CHECK, "SELECT EXISTS(SELECT 1 FROM sessions WHERE id=?1),"                 \
                    " (SELECT coalesce(max(seq), 0) FROM inputs WHERE session_id=?1)")   \
    X(LAST_SEQ, "SELECT max((SELECT coalesce(max(seq), 0) FROM inputs"                   \
                " WHERE session_id=?1), (SELECT coalesce(max(seq), 0)"                   \
                " FROM inputs_recent WHERE session_id=?1))")                             \
    X(INPUTS_RANGE, "SELECT seq, input FROM inputs WHERE session_id=?1 AND seq>?2"       \
                    " AND seq<=?3 UNION ALL SELECT seq, input FROM inputs_recent"        \
                    " WHERE session_id=?1 AND seq>?2 AND seq<=?3 ORDER BY 1")            \
    X(HISTORY, "SELECT seq, input FROM inputs WHERE session_id=?1 AND seq>?2"            \
               " UNION ALL SELECT seq, input FROM inputs_recent WHERE session_id=?1"     \
               " AND seq>?2 ORDER BY 1 LIMIT ?3")                                        \
    X(RECENT_MERGE, "INSERT INTO inputs(session_id, seq, input) SELECT session_id,"      \
                    " seq, input FROM inputs_recent ORDER BY session_id, seq")           \
    X(RECENT_CLEAR, "DELETE FROM inputs_recent")                                         \
    X(RECENT_COUNT, "SELECT count(*) FROM inputs_recent")                                \
    X(RECENT_LAST, "SELECT session_id, max(seq) FROM inputs_recent GROUP BY session_id") \
    X(SNAPSHOT_INSERT, "INSERT OR REPLACE INTO snapshots(session_id, seq, state)"        \
                       " VALUES(?1,?2,?3)")                                              \
    X(SNAPSHOT_PRUNE, "DELETE FROM snapshots WHERE session_id=?1 AND seq<?2")            \
    X(SNAPSHOT_AT, "SELECT seq, state FROM snapshots WHERE session_id=?1 AND seq<=?2"    \
                   " ORDER BY seq DESC LIMIT 1")                                         \
    X(FORK_INPUTS, "INSERT INTO inputs(session_id, seq, input) SELECT ?1, seq, input"    \
                   " FROM inputs WHERE session_id=?2 AND seq<=?3 UNION ALL SELECT ?1,"   \
                   " seq, input FROM inputs_recent WHERE session_id=?2 AND seq<=?3")     \
    X(FORK_SNAPSHOT, "INSERT INTO snapshots(session_id, seq, state) SELECT ?1, seq,"     \
                     " state FROM snapshots WHERE session_id=?2 AND seq<=?3"             \
                     " ORDER BY seq DESC LIMIT 1")                                       \
    X(EXPIRED, "SELECT id, (SELECT count(*) FROM inputs WHERE session_id=id)"            \
               " + (SELECT count(*) FROM inputs_recent WHERE session_id=id)"             \
               " FROM sessions WHERE updated_at<?1 ORDER BY created_at, id")             \
    X(GC_INPUTS, "DELETE FROM inputs WHERE session_id IN"                                \
                 " (SELECT id FROM sessions WHERE updated_at<?1)")                       \
    X(GC_RECENT, "DELETE FROM inputs_recent WHERE session_id IN"                         \
                 " (SELECT id FROM sessions WHERE updated_at<?1)")                       \
    X(GC_SNAPSHOTS, "DELETE FROM snapshots WHERE session_id IN"                          \
                    " (SELECT id FROM sessions WHERE updated_at<?1)")                    \
    X(GC_SESSIONS, "DELETE FROM sessions WHERE updated_at<?1")                           \
    X(COUNT_INPUTS, "SELECT (SELECT count(*) FROM inputs)"                               \
                    " + (SELECT count(*) FROM inputs_recent)")                           \
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

/*
 * The last seq the log holds of a session: one for every session that has
 * rows in inputs_recent (and for others written since open), so the writer
 * checks that an input follows without scanning inputs_recent. A session
 * without one has all its rows in `inputs`. The writer's: under `lock`.
 */
struct last_seq {
    struct last_seq *next; /* in its bucket */
    int64_t seq;
    char sid[];
};

struct last_map {
    struct last_seq **buckets;
    size_t n_buckets, count;
};

/* What a transaction changed in the map, to put back if it fails. */
struct last_undo {
    struct last_seq *e;
    int64_t old;
    bool created;
};

/* One SQLite connection and its statements; used by one thread at a time. */
struct store_conn {
    sqlite3 *db;
    sqlite3_stmt *q[Q__COUNT];
};

/*
 * Locks, in the order they may nest: `lock` or `rlock`, then `hlock`;
 * `qlock`, `dlock` and `cklock` alone. No callback is called with any of them
 * held. Threads: the writer (commits), the notifier (answers) and the
 * checkpointer (copies the WAL into the file), none for ":memory:" but the
 * first two.
 */
struct store {
    struct store_conn w;       /* every write (the writer thread, create, delete...) */
    struct store_conn r;       /* read-only, beside it: reads never wait for a commit */
    struct store_conn *reader; /* &r, or &w for ":memory:" (a second one is another db) */
    pthread_mutex_t lock;      /* guards w down to `undo` */
    pthread_mutex_t rlock;     /* guards r */
    int64_t max_bytes;         /* the quota (store_set_max_bytes), 0 for none */
    int64_t default_pages;     /* SQLite's own max_page_count, restored for no quota */
    struct last_map last;      /* sessions' last seqs (struct last_seq) */
    int64_t recent_rows;       /* rows in inputs_recent (as far as this process knows) */
    int64_t merge_at;          /* recent_rows at which the writer merges them */
    struct last_undo undo[STORE_BATCH_MAX];

    pthread_mutex_t hlock; /* a leaf: guards everything down to `why` */
    char err[RX_ERR_LEN];
    struct store_file file, wal;
    bool full;            /* the last write found no room; the next may */
    bool unusable;        /* writes are refused until restart; sticky */
    char why[RX_ERR_LEN]; /* why full or unusable, for store_health */

    pthread_mutex_t qlock; /* guards the queue down to `durable` */
    pthread_cond_t queued_cond;
    struct store_write *head, **tail;
    size_t queued; /* writes in the queue */
    bool stopping;
    bool durable; /* commits fsync (store_set_durable) */
    pthread_t writer, notifier;
    bool writer_started, notifier_started;

    pthread_mutex_t dlock; /* guards the committed writes down to `writer_done` */
    pthread_cond_t dcond;
    struct store_write *dhead, **dtail;
    bool writer_done;

    sqlite3 *ck;            /* the checkpointer's connection; NULL: none */
    pthread_mutex_t cklock; /* guards ck_due, ck_stop */
    pthread_cond_t ckcond;
    bool ck_due, ck_stop;
    pthread_t checkpointer;
    bool ck_started;
    int64_t commits, writes; /* the writer's transactions and their writes (atomic) */

    int lock_fd; /* holds flock(LOCK_EX) on the file: one server per file; -1: none */
    dev_t lock_dev;
    ino_t lock_ino;
    struct store *next_open; /* in open_stores */
};

/* One session id and its creation time, as store_load lists them. */
struct store_entry {
    char *id;
    int64_t created_at;
};

/*
 * The stores open in this process, to refuse a second store on a file
 * without opening the file again: closing any descriptor of a file drops
 * every POSIX lock the process holds on it, SQLite's included.
 */
static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
static struct store *open_stores;

/* ---- the sessions' last seqs -------------------------------------------------- */

/* FNV-1a: ids are short and chosen by the server or a client; no secret needed. */
static size_t sid_hash(const char *sid)
{
    uint64_t h = 1469598103934665603ULL;

    for (; *sid; sid++)
        h = (h ^ (unsigned char)*sid) * 1099511628211ULL;
    return (size_t)h;
}

static struct last_seq *last_find(const struct last_map *m, const char *sid)
{
    if (!m->n_buckets)
        return NULL;
    for (struct last_seq *e = m->buckets[sid_hash(sid) % m->n_buckets]; e; e = e->next)
        if (!strcmp(e->sid, sid))
            return e;
    return NULL;
}

/* A new entry (sid not in the map). NULL on ENOMEM, the map unchanged. */
static struct last_seq *last_add(struct last_map *m, const char *sid, int64_t seq)
{
    size_t len = strlen(sid), h;
    struct last_seq *e;

    if (m->count >= m->n_buckets) { /* load <= 1: grow twofold */
        size_t n = m->n_buckets ? m->n_buckets * 2 : 64;
        struct last_seq **b = calloc(n, sizeof(*b));

        if (!b)
            return NULL;
        for (size_t i = 0; i < m->n_buckets; i++) {
            while (m->buckets[i]) {
                struct last_seq *x = m->buckets[i];

                m->buckets[i] = x->next;
                h = sid_hash(x->sid) % n;
                x->next = b[h];
                b[h] = x;
            }
        }
        free(m->buckets);
        m->buckets = b;
        m->n_buckets = n;
    }
    e = malloc(sizeof(*e) + len + 1);
    if (!e)
        return NULL;
    memcpy(e->sid, sid, len + 1);
    e->seq = seq;
    h = sid_hash(sid) % m->n_buckets;
    e->next = m->buckets[h];
    m->buckets[h] = e;
    m->count++;
    return e;
}

static void last_drop(struct last_map *m, const char *sid)
{
    if (!m->n_buckets)
        return;
    for (struct last_seq **p = &m->buckets[sid_hash(sid) % m->n_buckets]; *p;
         p = &(*p)->next) {
        if (!strcmp((*p)->sid, sid)) {
            struct last_seq *e = *p;

            *p = e->next;
            free(e);
            m->count--;
            return;
        }
    }
}

static void last_release(struct last_map *m)
{
    for (size_t i = 0; i < m->n_buckets; i++) {
        while (m->buckets[i]) {
            struct last_seq *e = m->buckets[i];

            m->buckets[i] = e->next;
            free(e);
        }
    }
    free(m->buckets);
    memset(m, 0, sizeof(*m));
}

/* ---- errors ------------------------------------------------------------------ */

static void set_error_locked(struct store *st, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

static void set_error_locked(struct store *st, const char *fmt, va_list ap)
{
    vsnprintf(st->err, sizeof(st->err), fmt, ap);
}

static void set_error(struct store *st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void set_error(struct store *st, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    pthread_mutex_lock(&st->hlock);
    set_error_locked(st, fmt, ap);
    pthread_mutex_unlock(&st->hlock);
    va_end(ap);
}

/*
 * The store can no longer be trusted to keep what it is given: refuse every
 * write from now on (-EIO), and keep the reason, which is also the error.
 * Sticky: after a failed fsync or with the file gone, nothing says the next
 * write would reach the disk, and the process must not acknowledge it.
 * hlock held.
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

/*
 * A write found no room (`sys`: the system's errno, or 0): say so until a
 * write fits. hlock held.
 */
static int mark_full(struct store *st, int sys)
{
    int64_t quota = __atomic_load_n(&st->max_bytes, __ATOMIC_RELAXED);

    if (sys) {
        size_t n = strlen(st->err);

        snprintf(st->err + n, sizeof(st->err) - n, " (%s)", strerror(sys));
    }
    st->full = true;
    if (quota)
        snprintf(st->why, sizeof(st->why), "%.400s (quota store.max_bytes %lld)", st->err,
                 (long long)quota);
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
 * damaged or vanished file; -EIO alone for anything else. On the read-only
 * connection every failure is -EIO (or -ENOMEM) and health is left alone.
 * The connection's lock held.
 */
static int sql_fail(struct store *st, struct store_conn *c, int rc, const char *what)
{
    int sys = (rc & 0xff) == SQLITE_IOERR ? write_errno(c->db) : 0, err;

    pthread_mutex_lock(&st->hlock);
    snprintf(st->err, sizeof(st->err), "%s: %s", what, sqlite3_errmsg(c->db));
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
        err = mark_unusable(st, "%.400s%s%s", st->err, sys ? ": " : "",
                            sys ? strerror(sys) : "");
        break;
    default:
        err = -EIO;
    }
    pthread_mutex_unlock(&st->hlock);
    return err;
}

void store_last_error(struct store *st, struct rx_error *err)
{
    pthread_mutex_lock(&st->hlock);
    rx_error_set(err, 0, "%s", st->err);
    pthread_mutex_unlock(&st->hlock);
}

/* ---- statements ------------------------------------------------------------------ */

/* A kept statement, reset and unbound, ready for new bindings. */
static sqlite3_stmt *stmt(struct store_conn *c, int id)
{
    sqlite3_reset(c->q[id]);
    sqlite3_clear_bindings(c->q[id]);
    return c->q[id];
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

/* Insert (sid, seq, text): an input or a snapshot. 0 or the SQLite code. */
static int put_row(struct store_conn *c, int id, const char *sid, int64_t seq,
                   const char *text, size_t len)
{
    sqlite3_stmt *q = stmt(c, id);

    bind_text(q, 1, sid, strlen(sid));
    sqlite3_bind_int64(q, 2, seq);
    bind_text(q, 3, text, len);
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
 * transaction). hlock held.
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

/* May the store write? 0, or -EIO with the reason as the error. hlock held. */
static int check_writable_locked(struct store *st)
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

static int check_writable(struct store *st)
{
    int err;

    pthread_mutex_lock(&st->hlock);
    err = check_writable_locked(st);
    pthread_mutex_unlock(&st->hlock);
    return err;
}

/* Every write starts here: refused at once when the store is unusable. lock held. */
static int tx_begin(struct store *st)
{
    int rc, err;

    if ((err = check_writable(st)))
        return err;
    rc = run(stmt(&st->w, Q_BEGIN));
    return rc ? sql_fail(st, &st->w, rc, "begin") : 0;
}

/*
 * Commit, then check the files again: a file removed between tx_begin and
 * here took the commit with it, and the caller must not acknowledge it.
 * lock held.
 */
static int tx_commit(struct store *st)
{
    int rc = run(stmt(&st->w, Q_COMMIT)), err;

    if (rc) {
        err = sql_fail(st, &st->w, rc, "commit");
        /* A failed COMMIT may leave the transaction open: end it. */
        if (!sqlite3_get_autocommit(st->w.db))
            (void)run(stmt(&st->w, Q_ROLLBACK));
        return err;
    }
    pthread_mutex_lock(&st->hlock);
    if (!(err = check_writable_locked(st)))
        st->full = false; /* this write found room */
    pthread_mutex_unlock(&st->hlock);
    return err;
}

static void tx_rollback(struct store *st)
{
    if (!sqlite3_get_autocommit(st->w.db))
        (void)run(stmt(&st->w, Q_ROLLBACK));
}

/*
 * The connection reads go through, locked: the read-only one, or for
 * ":memory:" the writer's (under its lock, so between two commits).
 */
static struct store_conn *reader_lock(struct store *st)
{
    pthread_mutex_lock(st->reader == &st->w ? &st->lock : &st->rlock);
    return st->reader;
}

static void reader_unlock(struct store *st)
{
    pthread_mutex_unlock(st->reader == &st->w ? &st->lock : &st->rlock);
}

/*
 * A read transaction: the statements until read_end see one snapshot of the
 * log (WAL), whatever commits meanwhile. 0 or -EIO.
 */
static int read_begin(struct store *st, struct store_conn *c)
{
    int rc = run(stmt(c, Q_BEGIN_READ));

    return rc ? sql_fail(st, c, rc, "begin reading") : 0;
}

static void read_end(struct store_conn *c)
{
    if (!sqlite3_get_autocommit(c->db))
        (void)run(stmt(c, Q_COMMIT));
}

/* One integer from a one-row query with one text parameter (or none). */
static int query_i64(struct store *st, struct store_conn *c, int id, const char *sid,
                     int64_t *out)
{
    sqlite3_stmt *q = stmt(c, id);
    int rc;

    if (sid)
        bind_text(q, 1, sid, strlen(sid));
    rc = sqlite3_step(q);
    if (rc == SQLITE_ROW)
        *out = sqlite3_column_int64(q, 0);
    done(q);
    if (rc != SQLITE_ROW)
        return sql_fail(st, c, rc, statement_sql[id]);
    return 0;
}

/* 0 with the session's creation time, -ENOENT, or -EIO. */
static int session_get(struct store *st, struct store_conn *c, const char *sid,
                       int64_t *created_at)
{
    sqlite3_stmt *q = stmt(c, Q_SESSION_GET);
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
    return rc == SQLITE_ROW ? 0 : sql_fail(st, c, rc, "session lookup");
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
static int lock_file(struct store *st, const char *path, char *why, size_t n)
{
    struct stat sb;
    int fd, e, rc, waited = 0;

    if (!stat(path, &sb))
        for (struct store *o = open_stores; o; o = o->next_open)
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
static void unlock_file(struct store *st)
{
    if (st->lock_fd < 0)
        return;
    pthread_mutex_lock(&open_lock);
    for (struct store **p = &open_stores; *p; p = &(*p)->next_open) {
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
    if (ver == 1) {
        /* Version 2 adds inputs_recent (group commit); nothing else moves. */
        char sql[64];

        snprintf(sql, sizeof(sql), "PRAGMA user_version=%d", STORE_SCHEMA_VERSION);
        if ((rc = sqlite3_exec(db, STORE_RECENT_SQL, NULL, NULL, NULL)) ||
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

/*
 * Settings of the writer's connection: WAL (readers and the writer go on side
 * by side; the shared-memory index lets the read-only connection see each
 * commit), then synchronous. One server per file is lock_file's job. SQLite
 * code, with `why` set.
 */
static int configure(sqlite3 *db, bool memory, char *why, size_t n)
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

/* Prepare every statement on `c`. SQLite code, with `why` set. */
static int prepare_all(struct store_conn *c, char *why, size_t n)
{
    for (int i = 0; i < Q__COUNT; i++) {
        int rc = sqlite3_prepare_v3(c->db, statement_sql[i], -1,
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
static int open_reader(struct store *st, const char *path, char *why, size_t n)
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

static int recent_merge(struct store *st);
static int recent_open(struct store *st);
static void *writer_main(void *arg);
static void *notifier_main(void *arg);
static void *checkpointer_main(void *arg);
static int wal_hook(void *arg, sqlite3 *db, const char *name, int frames);

/*
 * The checkpointer's connection: the writer's does no checkpoint of its own
 * (wal_autocheckpoint 0); its WAL hook wakes the checkpointer instead.
 * SQLite code, with `why` set.
 */
static int open_checkpointer(struct store *st, const char *path, char *why, size_t n)
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
    sqlite3_wal_hook(st->w.db, wal_hook, st);
    return SQLITE_OK;
}

/* Start one of the store's threads. 0, or the error with `why` set. */
static int start_thread(pthread_t *t, void *(*fn)(void *), struct store *st,
                        bool *started, char *why, size_t n)
{
    int rc = pthread_create(t, NULL, fn, st);

    if (rc)
        snprintf(why, n, "cannot start a thread: %s", strerror(rc));
    else
        *started = true;
    return rc;
}

struct store *store_open(const char *path, struct rx_error *err)
{
    char why[RX_ERR_LEN] = "", pages[32];
    bool memory;
    struct store *st;
    int rc;

    st = calloc(1, sizeof(*st));
    if (!st) {
        rx_error_set(err, 0, "'%s': out of memory", path ? path : "");
        return NULL;
    }
    st->lock_fd = -1;
    st->tail = &st->head;
    st->dtail = &st->dhead;
    st->durable = true;
    pthread_mutex_init(&st->lock, NULL);
    pthread_mutex_init(&st->rlock, NULL);
    pthread_mutex_init(&st->hlock, NULL);
    pthread_mutex_init(&st->qlock, NULL);
    pthread_cond_init(&st->queued_cond, NULL);
    pthread_mutex_init(&st->dlock, NULL);
    pthread_cond_init(&st->dcond, NULL);
    pthread_mutex_init(&st->cklock, NULL);
    pthread_cond_init(&st->ckcond, NULL);
    if (!path || !*path) {
        snprintf(why, sizeof(why), "empty database path");
        goto out_fail;
    }
    memory = !strcmp(path, ":memory:");
    if (!memory) {
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
    if (configure(st->w.db, memory, why, sizeof(why)) ||
        check_schema(st->w.db, why, sizeof(why)) || prepare_all(&st->w, why, sizeof(why)))
        goto out_fail;
    st->reader = &st->w;
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
    if ((rc = recent_open(st))) {
        snprintf(why, sizeof(why), "reading recent inputs: %s", strerror(-rc));
        goto out_fail;
    }
    if ((st->ck && (rc = start_thread(&st->checkpointer, checkpointer_main, st,
                                      &st->ck_started, why, sizeof(why)))) ||
        (rc = start_thread(&st->notifier, notifier_main, st, &st->notifier_started, why,
                           sizeof(why))) ||
        (rc = start_thread(&st->writer, writer_main, st, &st->writer_started, why,
                           sizeof(why))))
        goto out_fail;
    return st;

out_fail:
    rx_error_set(err, 0, "'%s': %s", path ? path : "", why);
    store_close(st);
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
 * took the WAL's path, it is not ours to remove at close. The reader is
 * closed already.
 */
static void close_moved_files(struct store *st)
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

void store_close(struct store *st)
{
    if (!st)
        return;
    /* The writer commits what is queued, the notifier answers it, they end. */
    pthread_mutex_lock(&st->qlock);
    st->stopping = true;
    pthread_cond_signal(&st->queued_cond);
    pthread_mutex_unlock(&st->qlock);
    if (st->writer_started) {
        pthread_join(st->writer, NULL);
    } else {
        pthread_mutex_lock(&st->dlock);
        st->writer_done = true;
        pthread_cond_signal(&st->dcond);
        pthread_mutex_unlock(&st->dlock);
    }
    if (st->notifier_started)
        pthread_join(st->notifier, NULL);
    pthread_mutex_lock(&st->cklock);
    st->ck_stop = true;
    pthread_cond_signal(&st->ckcond);
    pthread_mutex_unlock(&st->cklock);
    if (st->ck_started)
        pthread_join(st->checkpointer, NULL);
    /* Leave the file tidy: every input in `inputs` (best effort). */
    if (st->writer_started && st->recent_rows)
        (void)recent_merge(st);
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
    last_release(&st->last);
    free(st->file.path);
    free(st->wal.path);
    pthread_cond_destroy(&st->ckcond);
    pthread_mutex_destroy(&st->cklock);
    pthread_cond_destroy(&st->dcond);
    pthread_mutex_destroy(&st->dlock);
    pthread_cond_destroy(&st->queued_cond);
    pthread_mutex_destroy(&st->qlock);
    pthread_mutex_destroy(&st->hlock);
    pthread_mutex_destroy(&st->rlock);
    pthread_mutex_destroy(&st->lock);
    free(st);
}

int store_set_durable(struct store *st, bool fsync_each_commit)
{
    int rc;

    pthread_mutex_lock(&st->lock);
    rc = sqlite3_exec(st->w.db,
                      fsync_each_commit ? "PRAGMA synchronous=FULL"
                                        : "PRAGMA synchronous=NORMAL",
                      NULL, NULL, NULL);
    rc = rc ? sql_fail(st, &st->w, rc, "synchronous") : 0;
    pthread_mutex_unlock(&st->lock);
    if (!rc) {
        pthread_mutex_lock(&st->qlock);
        st->durable = fsync_each_commit;
        pthread_mutex_unlock(&st->qlock);
    }
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
    if ((err = query_i64(st, &st->w, Q_PAGE_SIZE, NULL, &size)))
        goto out_unlock;
    /* SQLite keeps at least the pages in use: a quota below them only stops growth. */
    pages = max_bytes ? max_bytes / (size > 0 ? size : 1) : st->default_pages;
    snprintf(sql, sizeof(sql), "PRAGMA max_page_count=%lld",
             (long long)(pages > 0 ? pages : 1));
    if ((rc = sqlite3_exec(st->w.db, sql, NULL, NULL, NULL))) {
        err = sql_fail(st, &st->w, rc, "max_page_count");
        goto out_unlock;
    }
    __atomic_store_n(&st->max_bytes, max_bytes, __ATOMIC_RELAXED);
out_unlock:
    pthread_mutex_unlock(&st->lock);
    return err;
}

enum store_health store_health(struct store *st, struct rx_error *why)
{
    enum store_health h;

    /* hlock alone: /healthz never waits for a commit. */
    pthread_mutex_lock(&st->hlock);
    /* Look at the files now: a removed file is news before anyone writes. */
    if (!st->unusable)
        (void)check_writable_locked(st);
    h = st->unusable ? STORE_UNAVAILABLE : st->full ? STORE_FULL : STORE_OK;
    rx_error_set(why, 0, "%s", h == STORE_OK ? "" : st->why);
    pthread_mutex_unlock(&st->hlock);
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
    q = stmt(&st->w, Q_SESSION_INSERT);
    bind_text(q, 1, sid, strlen(sid));
    sqlite3_bind_int64(q, 2, created_at);
    if ((rc = run(q))) {
        err = sql_fail(st, &st->w, rc, "creating a session");
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
    static const int ids[] = {Q_INPUTS_DELETE, Q_RECENT_DELETE, Q_SNAPSHOTS_DELETE,
                              Q_SESSION_DELETE};
    int rc;

    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
        sqlite3_stmt *q = stmt(&st->w, ids[i]);

        bind_text(q, 1, sid, strlen(sid));
        if ((rc = run(q)))
            return sql_fail(st, &st->w, rc, "deleting a session");
    }
    return 0;
}

int store_delete_session(struct store *st, const char *sid)
{
    int err;

    pthread_mutex_lock(&st->lock);
    if ((err = tx_begin(st)))
        goto out_unlock;
    if ((err = session_get(st, &st->w, sid, NULL)) || (err = delete_rows(st, sid))) {
        tx_rollback(st);
        goto out_unlock;
    }
    if (!(err = tx_commit(st)))
        last_drop(&st->last, sid); /* no row of it is left */
out_unlock:
    pthread_mutex_unlock(&st->lock);
    return err;
}

/* ---- group commit ------------------------------------------------------------------ */

/*
 * The rows of one write, inside the batch's transaction, and the session's
 * last seq in the map, noted in `u` to be put back if the transaction fails
 * (*undo_n counts them). A write refused on its own (no such session, a seq
 * that does not follow: -ENOENT, -EEXIST, -EINVAL) is refused before
 * anything of it is written: its error goes to w->err and this returns 0, so
 * the others of the batch go on. Any other error fails the whole transaction
 * and is returned. lock held.
 */
static int append_rows(struct store *st, struct store_write *w, struct last_undo *u,
                       size_t *undo_n)
{
    struct store_conn *c = &st->w;
    struct last_seq *e = last_find(&st->last, w->sid);
    sqlite3_stmt *q;
    int64_t last = e ? e->seq : 0;
    int rc;

    /* Not in the map: none of its rows is in inputs_recent (see struct last_seq). */
    if (!e) {
        int64_t exists = 0;

        q = stmt(c, Q_APPEND_CHECK);
        bind_text(q, 1, w->sid, strlen(w->sid));
        rc = sqlite3_step(q);
        if (rc == SQLITE_ROW) {
            exists = sqlite3_column_int64(q, 0);
            last = sqlite3_column_int64(q, 1);
        }
        done(q);
        if (rc != SQLITE_ROW)
            return sql_fail(st, c, rc, "checking an input");
        if (!exists) {
            set_error(st, "no session '%s'", w->sid);
            w->err = -ENOENT;
            return 0;
        }
    }
    /* A gap would make the log unloadable at the next start: refuse it now. */
    if (w->seq != last + 1) {
        set_error(st, "session '%s': input %lld does not follow %lld", w->sid,
                  (long long)w->seq, (long long)last);
        w->err = w->seq <= last ? -EEXIST : -EINVAL;
        return 0;
    }
    if ((rc = put_row(c, Q_RECENT_INSERT, w->sid, w->seq, w->input, w->input_len)))
        return sql_fail(st, c, rc, "storing an input");
    q = stmt(c, Q_SESSION_TOUCH);
    bind_text(q, 1, w->sid, strlen(w->sid));
    sqlite3_bind_int64(q, 2, w->updated_at);
    if ((rc = run(q)))
        return sql_fail(st, c, rc, "updating the session");
    if (w->snapshot) {
        if ((rc = put_row(c, Q_SNAPSHOT_INSERT, w->sid, w->seq, w->snapshot,
                          w->snapshot_len)))
            return sql_fail(st, c, rc, "storing a snapshot");
        /* Only the newest snapshot is kept: storage grows with inputs alone. */
        q = stmt(c, Q_SNAPSHOT_PRUNE);
        bind_text(q, 1, w->sid, strlen(w->sid));
        sqlite3_bind_int64(q, 2, w->seq);
        if ((rc = run(q)))
            return sql_fail(st, c, rc, "pruning snapshots");
    }
    u->created = !e;
    u->old = last;
    if (!e && !(e = last_add(&st->last, w->sid, w->seq))) {
        set_error(st, "out of memory storing an input");
        return -ENOMEM;
    }
    e->seq = w->seq;
    u->e = e;
    (*undo_n)++;
    return 0;
}

/* A transaction failed: the map as it was before it. lock held. */
static void last_undo(struct store *st, size_t n)
{
    while (n--) {
        struct last_undo *u = &st->undo[n];

        if (u->created)
            last_drop(&st->last, u->e->sid);
        else
            u->e->seq = u->old;
    }
}

/*
 * v[0..n) in one transaction and one fsync. 0, or the error that failed the
 * transaction, which each write not refused on its own gets as its err:
 * nothing of any of them is stored. lock held.
 */
static int commit_some(struct store *st, struct store_write **v, size_t n)
{
    int err = tx_begin(st);
    size_t i, undo_n = 0;

    for (i = 0; !err && i < n; i++)
        err = append_rows(st, v[i], &st->undo[undo_n], &undo_n);
    if (!err)
        err = tx_commit(st);
    else
        tx_rollback(st);
    if (err) {
        last_undo(st, undo_n);
        for (i = 0; i < n; i++)
            if (!v[i]->err)
                v[i]->err = err;
        return err;
    }
    st->recent_rows += (int64_t)undo_n;
    return 0;
}

/*
 * Move inputs_recent into `inputs`, in one transaction: each session's page
 * of `inputs` is written once for many inputs. 0 or the error (the rows stay
 * where they are, as safe). lock held.
 */
static int recent_merge(struct store *st)
{
    int rc, err;

    if ((err = tx_begin(st)))
        return err;
    if ((rc = run(stmt(&st->w, Q_RECENT_MERGE))) ||
        (rc = run(stmt(&st->w, Q_RECENT_CLEAR)))) {
        err = sql_fail(st, &st->w, rc, "moving recent inputs");
        tx_rollback(st);
        return err;
    }
    if (!(err = tx_commit(st)))
        st->recent_rows = 0;
    /* After a failure, not at every batch: once as many rows again came. */
    st->merge_at = st->recent_rows + STORE_RECENT_MERGE;
    return err;
}

/*
 * At open: inputs_recent holds what a process that did not close cleanly left
 * there. Move it (reads then never scan much of it); if that cannot be done
 * now, note each of its sessions' last seq instead. 0 or an error. lock held
 * or not yet shared.
 */
static int recent_open(struct store *st)
{
    sqlite3_stmt *q;
    int rc, err;

    if ((err = query_i64(st, &st->w, Q_RECENT_COUNT, NULL, &st->recent_rows)) ||
        !st->recent_rows || !recent_merge(st))
        return err;
    q = stmt(&st->w, Q_RECENT_LAST);
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        if (!last_add(&st->last, (const char *)sqlite3_column_text(q, 0),
                      sqlite3_column_int64(q, 1))) {
            done(q);
            return -ENOMEM;
        }
    }
    done(q);
    return rc == SQLITE_DONE ? 0 : sql_fail(st, &st->w, rc, "reading recent inputs");
}

/*
 * One batch. When it found no room, each write is tried again alone: one
 * input too big for the room left must not fail the small ones beside it.
 */
static void commit_batch(struct store *st, struct store_write **v, size_t n)
{
    __atomic_add_fetch(&st->commits, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&st->writes, (int64_t)n, __ATOMIC_RELAXED);
    pthread_mutex_lock(&st->lock);
    if (commit_some(st, v, n) == -ENOSPC && n > 1) {
        for (size_t i = 0; i < n; i++) {
            if (v[i]->err != -ENOSPC)
                continue; /* refused on its own: the same again */
            v[i]->err = 0;
            (void)commit_some(st, &v[i], 1);
        }
    }
    pthread_mutex_unlock(&st->lock);
}

/* Nanoseconds on the monotonic clock. */
static int64_t mono_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/*
 * Group commit's one judgement call: after a commit that synced, the writes
 * it answered come back within moments (clients send their next input), so
 * a batch that is still smaller than the last one waits a little for them:
 * until it is as big, or for at most half the last commit's time (capped by
 * STORE_GATHER_MAX_NS). One fsync then carries them all instead of two. A
 * commit that does not sync is cheap, and nothing waits for it. qlock held.
 */
static void gather(struct store *st, size_t want, int64_t last_commit_ns)
{
    int64_t wait_ns = last_commit_ns / 2;
    struct timespec until;

    if (!st->durable || st->queued >= want || wait_ns <= 0)
        return;
    if (wait_ns > STORE_GATHER_MAX_NS)
        wait_ns = STORE_GATHER_MAX_NS;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += (long)wait_ns;
    until.tv_sec += until.tv_nsec / 1000000000;
    until.tv_nsec %= 1000000000;
    while (st->queued < want && !st->stopping &&
           pthread_cond_timedwait(&st->queued_cond, &st->qlock, &until) == 0)
        ;
}

/*
 * The writer: take everything queued (up to STORE_BATCH_MAX), commit it as
 * one transaction, and hand the batch to the notifier, which calls each
 * write's `done` in queue order while the next batch commits. What is queued
 * while one commit syncs is the next batch. At store_close it empties the
 * queue, then tells the notifier it is done.
 */
static void *writer_main(void *arg)
{
    struct store *st = arg;
    struct store_write *batch[STORE_BATCH_MAX];
    size_t last_n = 0;
    int64_t last_ns = 0;

    for (;;) {
        size_t n = 0;
        int64_t t0;

        pthread_mutex_lock(&st->qlock);
        while (!st->head && !st->stopping)
            pthread_cond_wait(&st->queued_cond, &st->qlock);
        gather(st, last_n, last_ns);
        while (st->head && n < STORE_BATCH_MAX) {
            batch[n++] = st->head;
            st->head = st->head->next;
        }
        if (!st->head)
            st->tail = &st->head;
        st->queued -= n;
        pthread_mutex_unlock(&st->qlock);
        if (!n)
            break; /* stopping, and nothing is left */
        t0 = mono_ns();
        commit_batch(st, batch, n);
        last_ns = mono_ns() - t0;
        last_n = n;
        /* To the notifier, in order: the writes are linked again as queued. */
        for (size_t i = 0; i + 1 < n; i++)
            batch[i]->next = batch[i + 1];
        batch[n - 1]->next = NULL;
        pthread_mutex_lock(&st->dlock);
        *st->dtail = batch[0];
        st->dtail = &batch[n - 1]->next;
        pthread_cond_signal(&st->dcond);
        pthread_mutex_unlock(&st->dlock);
        /* Between two batches, while the notifier answers this one. */
        pthread_mutex_lock(&st->lock);
        if (st->recent_rows >= st->merge_at)
            (void)recent_merge(st); /* the rows stay where they are, as safe */
        pthread_mutex_unlock(&st->lock);
    }
    pthread_mutex_lock(&st->dlock);
    st->writer_done = true;
    pthread_cond_signal(&st->dcond);
    pthread_mutex_unlock(&st->dlock);
    return NULL;
}

/*
 * The notifier: each committed (or failed) write's `done`, in the order the
 * writes were queued, with no store lock held. It runs beside the writer, so
 * publishing what one commit made durable overlaps the next commit's fsync.
 */
static void *notifier_main(void *arg)
{
    struct store *st = arg;

    for (;;) {
        struct store_write *w;

        pthread_mutex_lock(&st->dlock);
        while (!st->dhead && !st->writer_done)
            pthread_cond_wait(&st->dcond, &st->dlock);
        w = st->dhead;
        st->dhead = NULL;
        st->dtail = &st->dhead;
        pthread_mutex_unlock(&st->dlock);
        if (!w)
            return NULL; /* the writer ended and everything is answered */
        while (w) {
            struct store_write *next = w->next;

            /* `done` may free its write: nothing of it is read afterwards. */
            w->done(w, w->err);
            w = next;
        }
    }
}

/*
 * SQLite's WAL hook on the writer's connection, after each commit, with the
 * frames now in the WAL: past STORE_CHECKPOINT_FRAMES, wake the
 * checkpointer. Checkpoints never run on the writer (wal_autocheckpoint is
 * off there): copying the WAL into the file and syncing it would hold up
 * every input queued meanwhile.
 */
static int wal_hook(void *arg, sqlite3 *db, const char *name, int frames)
{
    struct store *st = arg;

    (void)db;
    (void)name;
    if (frames >= STORE_CHECKPOINT_FRAMES) {
        pthread_mutex_lock(&st->cklock);
        st->ck_due = true;
        pthread_cond_signal(&st->ckcond);
        pthread_mutex_unlock(&st->cklock);
    }
    return SQLITE_OK;
}

/*
 * The checkpointer: a connection of its own that copies the WAL into the
 * database file (PASSIVE: it never blocks the writer or a reader, and does
 * what it can), so the writer can start the WAL over. A failure leaves the
 * frames in the WAL, where they are as safe; the next wake tries again.
 */
static void *checkpointer_main(void *arg)
{
    struct store *st = arg;

    for (;;) {
        pthread_mutex_lock(&st->cklock);
        while (!st->ck_due && !st->ck_stop)
            pthread_cond_wait(&st->ckcond, &st->cklock);
        if (st->ck_stop) {
            pthread_mutex_unlock(&st->cklock);
            return NULL;
        }
        st->ck_due = false;
        pthread_mutex_unlock(&st->cklock);
        /* Again while commits add frames during the copy, a few times: once
           it has caught up, the writer starts the WAL over, in place. */
        for (int i = 0; i < STORE_CHECKPOINT_PASSES; i++) {
            int log = 0, done_frames = 0;

            if (sqlite3_wal_checkpoint_v2(st->ck, "main", SQLITE_CHECKPOINT_PASSIVE, &log,
                                          &done_frames) != SQLITE_OK ||
                done_frames >= log)
                break;
        }
    }
}

void store_write_queue(struct store *st, struct store_write *w)
{
    w->next = NULL;
    w->err = 0;
    pthread_mutex_lock(&st->qlock);
    *st->tail = w;
    st->tail = &w->next;
    st->queued++;
    pthread_cond_signal(&st->queued_cond);
    pthread_mutex_unlock(&st->qlock);
}

void store_commit_counts(struct store *st, int64_t *commits, int64_t *writes)
{
    if (commits)
        *commits = __atomic_load_n(&st->commits, __ATOMIC_RELAXED);
    if (writes)
        *writes = __atomic_load_n(&st->writes, __ATOMIC_RELAXED);
}

/* store_append's write and the caller waiting for it. */
struct append_wait {
    struct store_write w; /* first: `done` gets its address */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool finished;
};

static void append_done(struct store_write *w, int err)
{
    struct append_wait *a = (struct append_wait *)w;

    (void)err; /* also in w->err */
    pthread_mutex_lock(&a->lock);
    a->finished = true;
    pthread_cond_signal(&a->cond);
    pthread_mutex_unlock(&a->lock);
}

int store_append(struct store *st, const char *sid, int64_t seq,
                 const struct rx_input *in, const struct rx_state *after,
                 int snapshot_every)
{
    struct append_wait a = {
        .w = {.sid = sid, .seq = seq, .updated_at = in->timestamp, .done = append_done}};
    struct rx_buf input, snap;
    int err;

    rx_buf_init(&input, RX_BUF_SMALL_MAX);
    rx_buf_init(&snap, RX_BUF_STATE_MAX);
    if ((err = rx_input_encode(in, &input))) {
        set_error(st, "session '%s': cannot encode input %lld", sid, (long long)seq);
        goto out_release;
    }
    if (snapshot_every > 0 && seq % snapshot_every == 0) {
        if ((err = rx_state_encode(after, &snap))) {
            set_error(st, "session '%s': cannot encode the state at %lld", sid,
                      (long long)seq);
            goto out_release;
        }
        a.w.snapshot = snap.data;
        a.w.snapshot_len = snap.len;
    }
    a.w.input = input.data;
    a.w.input_len = input.len;
    pthread_mutex_init(&a.lock, NULL);
    pthread_cond_init(&a.cond, NULL);
    store_write_queue(st, &a.w);
    pthread_mutex_lock(&a.lock);
    while (!a.finished)
        pthread_cond_wait(&a.cond, &a.lock);
    pthread_mutex_unlock(&a.lock);
    pthread_cond_destroy(&a.cond);
    pthread_mutex_destroy(&a.lock);
    err = a.w.err;
out_release:
    rx_buf_release(&input);
    rx_buf_release(&snap);
    return err == -E2BIG ? -ENOMEM : err;
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
 * On failure `out` needs no release. c's lock held, in a read transaction.
 */
static int build_state(struct store *st, struct store_conn *c, const char *sid,
                       int64_t upto, struct rx_state *out, int64_t *reached)
{
    struct rx_error why = {""};
    struct rx_state s;
    sqlite3_stmt *q;
    int64_t seq = 0;
    int rc, err = 0;

    q = stmt(c, Q_SNAPSHOT_AT);
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
        err = sql_fail(st, c, rc, "reading a snapshot");
    }
    done(q);
    if (err)
        return err;

    q = stmt(c, Q_INPUTS_RANGE);
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
        err = sql_fail(st, c, rc, "reading inputs");
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
static int list_sessions(struct store *st, struct store_conn *c, struct store_entry **out,
                         size_t *n_out)
{
    struct store_entry *v = NULL, *grown;
    size_t n = 0, cap = 0;
    sqlite3_stmt *q = stmt(c, Q_SESSION_LIST);
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
        err = sql_fail(st, c, rc, "listing sessions");
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
    struct store_conn *c;
    size_t n = 0, i;
    int err;

    c = reader_lock(st);
    err = list_sessions(st, c, &v, &n);
    reader_unlock(st);
    for (i = 0; !err && i < n; i++) {
        struct rx_state s;
        int64_t seq;

        c = reader_lock(st);
        if (!(err = read_begin(st, c)))
            err = build_state(st, c, v[i].id, INT64_MAX, &s, &seq);
        read_end(c);
        reader_unlock(st);
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
    struct store_conn *c = reader_lock(st);
    int err = read_begin(st, c);

    if (!err)
        err = session_get(st, c, sid, NULL);
    if (!err)
        err = build_state(st, c, sid, INT64_MAX, out, seq);
    read_end(c);
    reader_unlock(st);
    return err;
}

/* ---- time travel ------------------------------------------------------------------ */

int store_history_text(struct store *st, const char *sid, int64_t after_seq, int limit,
                       struct rx_buf *out)
{
    struct store_conn *c = reader_lock(st);
    size_t start = out->len, rows = 0;
    sqlite3_stmt *q = NULL;
    bool full = false;
    int rc = SQLITE_DONE, err = read_begin(st, c);

    if (!err)
        err = session_get(st, c, sid, NULL);
    if (!err)
        err = rx_buf_putc(out, '[');
    if (!err) {
        q = stmt(c, Q_HISTORY);
        bind_text(q, 1, sid, strlen(sid));
        sqlite3_bind_int64(q, 2, after_seq);
        sqlite3_bind_int64(q, 3, limit > 0 ? limit : -1);
    }
    while (!err && (rc = sqlite3_step(q)) == SQLITE_ROW) {
        int64_t seq = sqlite3_column_int64(q, 0);
        const char *text = (const char *)sqlite3_column_text(q, 1);
        size_t len = (size_t)sqlite3_column_bytes(q, 1);

        if (rows && out->len - start + len + STORE_HISTORY_ROW_OVERHEAD >
                        STORE_HISTORY_PAGE_MAX) {
            full = true; /* the page is as big as pages get: the client asks on */
            break;
        }
        /* The stored text is rx_input_encode's compact JSON, copied as it is;
           a row that cannot be an object is damage, not an input. */
        if (!text || len < 2 || text[0] != '{' || text[len - 1] != '}') {
            set_error(st, "session '%s': input %lld is not JSON", sid, (long long)seq);
            err = -EPROTO;
            break;
        }
        err = (rows ? rx_buf_putc(out, ',') : 0) ||
              rx_buf_printf(out, "{\"seq\":%lld,\"input\":", (long long)seq) ||
              rx_buf_append(out, text, len) || rx_buf_putc(out, '}');
        if (err)
            err = -ENOMEM;
        rows++;
    }
    if (!err && !full && rc != SQLITE_DONE)
        err = sql_fail(st, c, rc, "reading history");
    if (q)
        done(q);
    if (!err && rx_buf_putc(out, ']'))
        err = -ENOMEM;
    if (err == -ENOMEM)
        set_error(st, "session '%s': out of memory reading history", sid);
    if (err)
        rx_buf_truncate(out, start);
    read_end(c);
    reader_unlock(st);
    return err;
}

int store_history(struct store *st, const char *sid, int64_t after_seq, int limit,
                  json_t **out)
{
    struct rx_buf b;
    json_t *arr = NULL;
    int err;

    rx_buf_init(&b, RX_BUF_STATE_MAX);
    err = store_history_text(st, sid, after_seq, limit, &b);
    if (!err && !(arr = json_loadb(b.data, b.len, 0, NULL))) {
        set_error(st, "session '%s': history is not JSON", sid);
        err = -EPROTO;
    }
    rx_buf_release(&b);
    if (!err)
        *out = arr;
    return err;
}

/* -ERANGE unless 0 <= seq <= the session's last seq. c's lock held. */
static int check_seq(struct store *st, struct store_conn *c, const char *sid, int64_t seq)
{
    int64_t last;
    int err = query_i64(st, c, Q_LAST_SEQ, sid, &last);

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
    struct store_conn *c = reader_lock(st);
    int64_t reached;
    int err = read_begin(st, c);

    if (!err && !(err = session_get(st, c, sid, NULL)) &&
        !(err = check_seq(st, c, sid, seq)))
        err = build_state(st, c, sid, seq, out, &reached);
    read_end(c);
    reader_unlock(st);
    return err;
}

int store_fork(struct store *st, const char *sid, int64_t at, const char *new_sid,
               int64_t created_at)
{
    static const int copies[] = {Q_FORK_INPUTS, Q_FORK_SNAPSHOT};
    struct store_conn *c = &st->w;
    sqlite3_stmt *q;
    int rc, err;

    pthread_mutex_lock(&st->lock);
    if ((err = tx_begin(st)))
        goto out_unlock;
    if ((err = session_get(st, c, sid, NULL)) || (err = check_seq(st, c, sid, at)))
        goto out_rollback;
    q = stmt(c, Q_SESSION_INSERT);
    bind_text(q, 1, new_sid, strlen(new_sid));
    sqlite3_bind_int64(q, 2, created_at);
    if ((rc = run(q))) {
        err = sql_fail(st, c, rc, "creating the fork");
        goto out_rollback;
    }
    for (size_t i = 0; i < sizeof(copies) / sizeof(copies[0]); i++) {
        q = stmt(c, copies[i]);
        bind_text(q, 1, new_sid, strlen(new_sid));
        bind_text(q, 2, sid, strlen(sid));
        sqlite3_bind_int64(q, 3, at);
        if ((rc = run(q))) {
            err = sql_fail(st, c, rc, "copying the log");
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

/* The expired ids (when `ids`) and their input count. lock held, in a transaction. */
static int list_expired(struct store *st, int64_t older_than_ms, json_t *ids,
                        int64_t *inputs)
{
    sqlite3_stmt *q = stmt(&st->w, Q_EXPIRED);
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
        err = sql_fail(st, &st->w, rc, "listing expired sessions");
    done(q);
    return err;
}

int store_gc_list(struct store *st, int64_t older_than_ms, json_t **removed_ids,
                  int64_t *removed_inputs)
{
    static const int deletes[] = {Q_GC_INPUTS, Q_GC_RECENT, Q_GC_SNAPSHOTS,
                                  Q_GC_SESSIONS};
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
        sqlite3_stmt *q = stmt(&st->w, deletes[i]);

        sqlite3_bind_int64(q, 1, older_than_ms);
        if ((rc = run(q))) {
            err = sql_fail(st, &st->w, rc, "deleting expired sessions");
            goto out_rollback;
        }
    }
    if ((err = tx_commit(st)))
        goto out_unlock;
    for (size_t i = 0; i < json_array_size(ids); i++)
        last_drop(&st->last, json_string_value(json_array_get(ids, i)));
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
    struct store_conn *c = reader_lock(st);
    int64_t n = 0, pages = 0, size = 0, free_pages = 0;
    int err = read_begin(st, c);

    if (!err && !(err = query_i64(st, c, Q_COUNT_INPUTS, NULL, &n)) &&
        !(err = query_i64(st, c, Q_PAGE_COUNT, NULL, &pages)) &&
        !(err = query_i64(st, c, Q_PAGE_SIZE, NULL, &size)) &&
        !(err = query_i64(st, c, Q_FREELIST, NULL, &free_pages))) {
        if (inputs)
            *inputs = n;
        if (bytes)
            *bytes = (pages - free_pages) * size;
    }
    read_end(c);
    reader_unlock(st);
    return err;
}
