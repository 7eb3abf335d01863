/*
 * sqlite_store_internal - what the files of store/sqlite share (sqlite_store.c,
 * sqlite_store_writer.c, sqlite_store_read.c, sqlite_store_search.c): struct
 * sqlite_store, its statements, its operations for the table of
 * store_backend.h, and the helpers for errors, statements, transactions,
 * reads, the writer's threads and the full-text index. Private to
 * store/sqlite; everyone else uses store/store.h.
 *
 * Depends on SQLite, store/store.h, store/store_backend.h,
 * store/store_notifier.h, store/store_queue.h and state_machine/ only; never
 * on store/pg.
 * Locks, in the order they may nest: `lock` or `rlock`, then the base's
 * `hlock`; the queue's lock (store/store_queue), the notifier's lock
 * (store/store_notifier) and `cklock`
 * alone (see struct sqlite_store). Each helper says which lock it needs held.
 * Ownership: struct sqlite_store is the heap object of the backend's open and
 * close (store_open/store_close) and owns its connections, statements, queue
 * links and last-seq map; text bound with sqlite_store__bind_text is borrowed
 * until the statement is reset.
 */
#ifndef SQLITE_STORE_INTERNAL_H
#define SQLITE_STORE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <sqlite3.h>

#include "store/store.h"
#include "store/store_backend.h"
#include "store/store_notifier.h"
#include "store/store_queue.h"

#include "state_machine/rx_buf.h"

/* How long open waits for a lock held by another process before saying so,
   and a connection for one SQLite holds briefly (WAL recovery). */
#define STORE_BUSY_MS 2000
/* The most writes one commit takes: bounds one commit's time, not the queue. */
#define STORE_BATCH_MAX 1024
/* Rows of inputs_recent past which the writer moves them into `inputs`. */
#define STORE_RECENT_MERGE 8192
/*
 * A session's updated_at is rewritten only when it moves by more than this:
 * retention counts in days, and rewriting the session's row (and its index
 * entry) at every input would add their pages to every commit.
 */
#define STORE_TOUCH_SLACK_MS "1000"

/*
 * The inputs the full-text index reads (sqlite_store_search.c), told by the type
 * rx_input_encode writes first: a compare, no JSON parse.
 */
#define STORE_IS_MESSAGE                                                                 \
    "substr(input, 1, 28) = '{\"type\":\"user-send-message\",' OR substr(input, 1, 38)"  \
    " = '{\"type\":\"brain-send-message-complete\",'"
#define STORE_IS_CANCEL "substr(input, 1, 22) = '{\"type\":\"user-cancel\",'"
/* The first ?1 ranges a merge left unindexed (sqlite_store_search.c). */
#define STORE_PENDING                                                                    \
    "(SELECT session_id, lo, hi FROM search_pending ORDER BY rowid LIMIT ?1)"

/* The columns every list of sessions reads, in sqlite_store__list_rows' order. */
#define STORE_ROW_COLUMNS                                                                \
    "id, created_at, coalesce(title, auto_title), updated_at, messages, owner"
/* The cut of a page among the sessions `where` (SQL) picks: ?2 rows and the ties of
   the last one, newest first. */
#define STORE_PAGE_CUT(where)                                                            \
    " updated_at>=coalesce((SELECT updated_at FROM sessions WHERE " where                \
    " ORDER BY updated_at DESC, id DESC LIMIT 1 OFFSET ?2-1),"                           \
    " -9223372036854775807-1) ORDER BY updated_at DESC, id DESC"

/* Every statement, prepared once per connection at open and kept. */
#define STORE_STATEMENTS(X)                                                              \
    X(BEGIN, "BEGIN IMMEDIATE")                                                          \
    X(BEGIN_READ, "BEGIN")                                                               \
    X(COMMIT, "COMMIT")                                                                  \
    X(ROLLBACK, "ROLLBACK")                                                              \
    X(SESSION_INSERT, "INSERT INTO sessions(id, created_at, updated_at, owner)"          \
                      " VALUES(?1,?2,?2,?3)")                                            \
    X(SESSION_GET, "SELECT created_at FROM sessions WHERE id=?1")                        \
    X(SESSION_ROW,                                                                       \
      "UPDATE sessions SET updated_at=CASE WHEN updated_at<?2-" STORE_TOUCH_SLACK_MS     \
      " THEN ?2 ELSE updated_at END, messages=?3,"                                       \
      " busy=?4, auto_title=coalesce(auto_title, ?5) WHERE id=?1 AND"                    \
      " (updated_at<?2-" STORE_TOUCH_SLACK_MS " OR messages!=?3 OR"                      \
      " busy!=?4 OR (auto_title IS NULL AND ?5 IS NOT NULL))")                           \
    X(SESSION_ROW_SET, "UPDATE sessions SET messages=?2, busy=?3, auto_title=?4"         \
                       " WHERE id=?1")                                                   \
    X(SESSIONS_PAGE, "SELECT " STORE_ROW_COLUMNS " FROM sessions WHERE updated_at<?1"    \
                     " AND" STORE_PAGE_CUT("updated_at<?1"))                             \
    X(SESSIONS_PAGE_OWNER,                                                               \
      "SELECT " STORE_ROW_COLUMNS " FROM sessions WHERE owner=?3"                        \
      " AND updated_at<?1 AND" STORE_PAGE_CUT("owner=?3 AND updated_at<?1"))             \
    X(SESSIONS_BUSY, "SELECT " STORE_ROW_COLUMNS " FROM sessions WHERE busy")            \
    X(SESSIONS_COUNT, "SELECT n FROM sessions_count")                                    \
    X(SESSIONS_OWNED, "SELECT count(*) FROM sessions WHERE owner=?1")                    \
    X(SESSION_INFO, "SELECT " STORE_ROW_COLUMNS " FROM sessions WHERE id=?1")            \
    X(SESSION_DELETE, "DELETE FROM sessions WHERE id=?1")                                \
    X(SESSION_PAGE, "SELECT " STORE_ROW_COLUMNS " FROM sessions WHERE (created_at, id)"  \
                    " > (?1, ?2) ORDER BY created_at, id LIMIT ?3")                      \
    X(SESSION_TITLE_SET, "UPDATE sessions SET title=?2 WHERE id=?1")                     \
    X(SESSION_TITLE_GET, "SELECT title FROM sessions WHERE id=?1")                       \
    X(SESSION_IMPORT, "INSERT INTO sessions(id, created_at, updated_at, title,"          \
                      " messages, busy, auto_title, owner)"                              \
                      " VALUES(?1,?2,?3,?4,?5,?6,?7,?8)")                                \
    X(INPUT_INSERT, "INSERT INTO inputs(session_id, seq, input) VALUES(?1,?2,?3)")       \
    X(INPUTS_DELETE, "DELETE FROM inputs WHERE session_id=?1")                           \
    X(RECENT_DELETE, "DELETE FROM inputs_recent WHERE session_id=?1")                    \
    X(SNAPSHOTS_DELETE, "DELETE FROM snapshots WHERE session_id=?1")                     \
    X(DOCS_DELETE, "DELETE FROM search_docs WHERE session_id=?1")                        \
    X(DOCS_CONTENT, "INSERT INTO search_docs(session_id, seq, body) SELECT ?1, ?2, b"    \
                    " FROM (SELECT json_extract(?3, '$.content') AS b) WHERE b != ''")   \
    X(DOCS_PARTIALS, "INSERT INTO search_docs(session_id, seq, body) SELECT ?1, ?2,"     \
                     " value FROM json_each(?3, '$.partialContents')"                    \
                     " WHERE type = 'text' AND value != ''")                             \
    X(INDEX_MARK, "SELECT upto FROM search_mark")                                        \
    X(INDEX_MARK_SET, "UPDATE search_mark SET upto=?1")                                  \
    X(INDEX_MARK_CLAMP, "UPDATE search_mark SET upto=min(upto, (SELECT"                  \
                        " coalesce(max(rowid), 0) FROM inputs_recent))")                 \
    X(RECENT_TOP, "SELECT coalesce(max(rowid), 0) FROM inputs_recent")                   \
    X(PENDING_ADD, "INSERT INTO search_pending(session_id, lo, hi) SELECT session_id,"   \
                   " min(seq), max(seq) FROM inputs_recent WHERE rowid >"                \
                   " (SELECT upto FROM search_mark) GROUP BY session_id")                \
    X(PENDING_ANY, "SELECT EXISTS(SELECT 1 FROM search_pending)")                        \
    X(PENDING_DELETE, "DELETE FROM search_pending WHERE session_id=?1")                  \
    X(PENDING_CONTENT, "INSERT INTO search_docs(session_id, seq, body) SELECT"           \
                       " session_id, seq, b FROM (SELECT i.session_id, i.seq,"           \
                       " json_extract(i.input, '$.content') AS b FROM " STORE_PENDING    \
                       " AS p JOIN inputs AS i ON i.session_id=p.session_id AND"         \
                       " i.seq>=p.lo AND i.seq<=p.hi WHERE (" STORE_IS_MESSAGE "))"      \
                       " WHERE b != ''")                                                 \
    X(PENDING_PARTIALS, "INSERT INTO search_docs(session_id, seq, body) SELECT"          \
                        " r.session_id, r.seq, j.value FROM (SELECT i.session_id,"       \
                        " i.seq, i.input FROM " STORE_PENDING " AS p JOIN inputs AS i"   \
                        " ON i.session_id=p.session_id AND i.seq>=p.lo AND i.seq<=p.hi"  \
                        " WHERE " STORE_IS_CANCEL ") AS r, json_each(r.input,"           \
                        " '$.partialContents') AS j WHERE j.type = 'text'"               \
                        " AND j.value != ''")                                            \
    X(PENDING_DONE, "DELETE FROM search_pending WHERE rowid IN (SELECT rowid FROM"       \
                    " search_pending ORDER BY rowid LIMIT ?1)")                          \
    X(INDEX_CONTENT, "INSERT INTO search_docs(session_id, seq, body) SELECT"             \
                     " session_id, seq, b FROM (SELECT session_id, seq,"                 \
                     " json_extract(input, '$.content') AS b FROM inputs_recent"         \
                     " WHERE rowid>?1 AND rowid<=?2 AND (" STORE_IS_MESSAGE "))"         \
                     " WHERE b != '' ORDER BY session_id, seq")                          \
    X(INDEX_PARTIALS, "INSERT INTO search_docs(session_id, seq, body) SELECT"            \
                      " r.session_id, r.seq, p.value FROM (SELECT * FROM inputs_recent"  \
                      " WHERE rowid>?1 AND rowid<=?2 AND " STORE_IS_CANCEL ") AS r,"     \
                      " json_each(r.input, '$.partialContents') AS p"                    \
                      " WHERE p.type = 'text' AND p.value != ''"                         \
                      " ORDER BY r.session_id, r.seq")                                   \
    X(DOCS_TITLE_DELETE, "DELETE FROM search_docs WHERE session_id=?1 AND seq=0")        \
    X(DOCS_TITLE_INSERT, "INSERT INTO search_docs(session_id, seq, body)"                \
                         " VALUES(?1, 0, ?2)")                                           \
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
    X(FORK_DOCS, "INSERT INTO search_docs(session_id, seq, body) SELECT ?1, seq, body"   \
                 " FROM search_docs WHERE session_id=?2 AND seq<=?3 ORDER BY id")        \
    X(FORK_TITLE, "UPDATE sessions SET title=(SELECT title FROM sessions WHERE id=?2)"   \
                  " WHERE id=?1")                                                        \
    X(EXPIRED, "SELECT id, (SELECT count(*) FROM inputs WHERE session_id=id)"            \
               " + (SELECT count(*) FROM inputs_recent WHERE session_id=id)"             \
               " FROM sessions WHERE updated_at<?1 ORDER BY created_at, id")             \
    X(GC_INPUTS, "DELETE FROM inputs WHERE session_id IN"                                \
                 " (SELECT id FROM sessions WHERE updated_at<?1)")                       \
    X(GC_RECENT, "DELETE FROM inputs_recent WHERE session_id IN"                         \
                 " (SELECT id FROM sessions WHERE updated_at<?1)")                       \
    X(GC_DOCS, "DELETE FROM search_docs WHERE session_id IN"                             \
               " (SELECT id FROM sessions WHERE updated_at<?1)")                         \
    X(GC_PENDING, "DELETE FROM search_pending WHERE session_id IN"                       \
                  " (SELECT id FROM sessions WHERE updated_at<?1)")                      \
    X(GC_SNAPSHOTS, "DELETE FROM snapshots WHERE session_id IN"                          \
                    " (SELECT id FROM sessions WHERE updated_at<?1)")                    \
    X(GC_SESSIONS, "DELETE FROM sessions WHERE updated_at<?1")                           \
    X(COUNT_INPUTS, "SELECT (SELECT count(*) FROM inputs)"                               \
                    " + (SELECT count(*) FROM inputs_recent)")                           \
    X(PAGE_COUNT, "PRAGMA page_count")                                                   \
    X(PAGE_SIZE, "PRAGMA page_size")                                                     \
    X(FREELIST, "PRAGMA freelist_count")                                                 \
    X(STREAM_PUT,                                                                        \
      "INSERT OR REPLACE INTO stream_text(session_id, message_id, off, text)"            \
      " SELECT ?1, ?2, ?3, ?4 WHERE EXISTS(SELECT 1 FROM sessions"                       \
      " WHERE id=?1)")                                                                   \
    X(STREAM_DONE, "DELETE FROM stream_text WHERE session_id=?1 AND message_id=?2")      \
    X(STREAM_CLEAR, "DELETE FROM stream_text WHERE session_id=?1")                       \
    X(STREAM_READ, "SELECT off, text FROM stream_text WHERE session_id=?1"               \
                   " AND message_id=?2 ORDER BY off")

enum {
#define STORE_X(e, sql) Q_##e,
    STORE_STATEMENTS(STORE_X)
#undef STORE_X
        Q__COUNT
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
    /* Within batch number `batch` (sqlite_store.batch): its last write, whose
       values the row takes, and its first with a title (NULL: none). */
    uint64_t batch;
    const struct store_write *row_w, *title_w;
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
 * the queue's, the notifier's and `cklock` alone. No callback is called with any of them
 * held. Threads: the writer (commits), the notifier (answers) and the
 * checkpointer (copies the WAL into the file), none for ":memory:" but the
 * first two.
 */
struct sqlite_store {
    struct store base;         /* first: the table, hlock and the error sentence */
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
    uint64_t batch;            /* the writer's transactions so far (struct last_seq) */
    int64_t unindexed;         /* rows committed since the last index_batch (a trigger) */
    struct last_undo undo[STORE_BATCH_MAX];

    /* Under base.hlock (a leaf), with base.err. */
    struct store_file file, wal;
    bool full;            /* the last write found no room; the next may */
    bool unusable;        /* writes are refused until restart; sticky */
    bool check_later;     /* too big to check at open: the checkpointer checks it */
    char why[RX_ERR_LEN]; /* why full or unusable, for store_health */

    struct store_queue queue; /* the writer, the notifier; its lock guards durable */
    bool durable;             /* commits fsync (store_set_durable) */

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
    struct sqlite_store *next_open; /* in open_stores */
};

/* The SQLite store a struct store of this backend is. */
static inline struct sqlite_store *sqlite_store_of(struct store *st)
{
    return (struct sqlite_store *)((char *)st - offsetof(struct sqlite_store, base));
}

/* ---- the operations of sqlite_store_backend, by file (see store.h) ---- */

/* sqlite_store_conn.c */
int sqlite_store_set_durable(struct store *st, bool fsync_each_commit);
int sqlite_store_set_max_bytes(struct store *st, int64_t max_bytes);
enum store_health sqlite_store_health(struct store *st, struct rx_error *why);
int sqlite_store_session_created(struct store *st, const char *sid, int64_t *created_at);
/* sqlite_store_writer.c */
int sqlite_store_create_session(struct store *st, const char *sid, const char *owner,
                                int64_t created_at);
int sqlite_store_delete_session(struct store *st, const char *sid);
void sqlite_store_write_queue(struct store *st, struct store_write *w);
void sqlite_store_commit_counts(struct store *st, int64_t *commits, int64_t *writes);
int sqlite_store_stream_text(struct store *st, const char *sid, const char *message_id,
                             struct rx_buf *out);
/* sqlite_store_read.c */
int sqlite_store_list_sessions(struct store *st, const struct store_cursor *after,
                               size_t limit, struct store_list *out);
int sqlite_store_session_load(struct store *st, const char *sid, struct rx_state *out,
                              int64_t *seq);
int sqlite_store_history_page(struct store *st, const char *sid, int64_t after_seq,
                              int limit, struct rx_buf *out, int64_t *last);
int sqlite_store_state_at(struct store *st, const char *sid, int64_t seq,
                          struct rx_state *out);
int sqlite_store_fork(struct store *st, const char *sid, int64_t at, const char *new_sid,
                      const char *owner, int64_t created_at);
int sqlite_store_gc_list(struct store *st, int64_t older_than_ms, json_t **removed_ids,
                         int64_t *removed_inputs);
int sqlite_store_stats(struct store *st, int64_t *inputs, int64_t *bytes);
/* sqlite_store_search.c */
int sqlite_store_set_title(struct store *st, const char *sid, const char *title);
int sqlite_store_session_title(struct store *st, const char *sid, char **out);
int sqlite_store_search(struct store *st, const char *const *words, size_t n,
                        json_t **out);
int sqlite_store_import(struct store *st, const char *sid, const char *owner,
                        int64_t created_at, const char *title,
                        const struct store_text *inputs, size_t n,
                        const struct store_text *snapshot);

/*
 * The store can no longer be trusted to keep what it is given: every write
 * is refused from now on (-EIO, returned), `fmt` the reason /healthz and
 * the errors give. Sticky. hlock held.
 */
int sqlite_store__mark_unusable(struct sqlite_store *st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/*
 * The file's check (PRAGMA quick_check) on the checkpointer's connection,
 * for a file too big to check at open: a damage found makes the store
 * unusable (sticky, with its report as the reason). Checkpointer thread.
 */
void sqlite_store__check_later(struct sqlite_store *st);

/* sqlite_store_sessions.c */
/* Append the rows of q (its columns: STORE_ROW_COLUMNS) to `out`. c's lock
   held. 0, -ENOMEM or -EIO. */
int sqlite_store__list_rows(struct sqlite_store *st, struct store_conn *c,
                            sqlite3_stmt *q, struct store_list *out) RX_WUR;
int sqlite_store_sessions_page(struct store *st, const char *owner,
                               const char *const *words, size_t n, int64_t before,
                               size_t limit, struct store_list *out);
int sqlite_store_sessions_busy(struct store *st, struct store_list *out);
int sqlite_store_sessions_count(struct store *st, int64_t *n);
int sqlite_store_sessions_owned(struct store *st, const char *owner, int64_t *n);
int sqlite_store_session_info(struct store *st, const char *sid,
                              struct store_session_info *out);

/* ---- sqlite_store_sessions.c: the sessions' rows (schema 4) ---- */

/*
 * What schema 4 adds to a new file once `sessions` has its columns (indexes,
 * the count), and what upgrades an older one (the columns too, and the list
 * of sessions whose rows are still to compute). For check_schema, inside its
 * transaction.
 */
extern const char sqlite_store__rows_schema_sql[];
extern const char sqlite_store__rows_upgrade_sql[];
/*
 * Schema 5, the sessions' owners (SPEC 4.4): the index on (owner,
 * updated_at, id) for a new file, whose `sessions` has the column; the
 * column (existing rows get STORE_OWNER_DEFAULT) and the index for an older
 * one. For check_schema, inside its transaction.
 */
extern const char sqlite_store__owner_schema_sql[];
extern const char sqlite_store__owner_upgrade_sql[];
/*
 * At open, after an upgrade: each listed session folded from its log, its
 * row written, in transactions of a few hundred, and one line on stderr
 * saying how many (those whose log does not fold are left at zero: loading
 * one names the damage). 0, or an errno with `why` set (what is done stays
 * done; the next open goes on). Not yet shared: no thread runs.
 */
int sqlite_store__rows_upgrade(struct sqlite_store *st, const char *path, char *why,
                               size_t n);
/*
 * The session's row after a batch: updated_at (when it moves by more than
 * STORE_TOUCH_SLACK_MS), messages and busy as `w` (its last write in the
 * batch) says, the title of `titled` (its first with one; NULL: none) if the
 * row has none yet; written only when one of them changes. Inside the
 * batch's transaction. 0 or an errno. lock held.
 */
int sqlite_store__row_write(struct sqlite_store *st, const struct store_write *w,
                            const struct store_write *titled);
/* The row's messages, busy and title set to r's. In the caller's transaction. */
int sqlite_store__row_put(struct sqlite_store *st, const char *sid,
                          const struct store_row *r);

/* ---- sqlite_store_conn.c: the statements' text, by id (for prepare and messages) ----
 */

extern const char *const sqlite_store__sql[Q__COUNT];

/* ---- sqlite_store_conn.c: errors ---- */

/*
 * Record "<what>: <SQLite's sentence>" for rc on connection c and give the
 * errno (-ENOSPC, -EIO with the store marked unusable, -EEXIST, -ENOMEM,
 * -EIO). The connection's lock held.
 */
int sqlite_store__sql_fail(struct sqlite_store *st, struct store_conn *c, int rc,
                           const char *what);

/* ---- sqlite_store_conn.c: statements ---- */

/* Statement `id` of c, reset and unbound; owned by c. */
sqlite3_stmt *sqlite_store__stmt(struct store_conn *c, int id);
/* Bind s[0..n) as parameter i, SQLITE_STATIC: s is borrowed until the reset. */
void sqlite_store__bind_text(sqlite3_stmt *q, int i, const char *s, size_t n);
/* Reset q and clear its bindings. */
void sqlite_store__done(sqlite3_stmt *q);
/* Run a statement that returns no row: 0 or the SQLite code. */
int sqlite_store__run(sqlite3_stmt *q);
/* Insert (sid, seq, text) with statement `id`: 0 or the SQLite code. */
int sqlite_store__put_row(struct store_conn *c, int id, const char *sid, int64_t seq,
                          const char *text, size_t len);
/* One integer from a one-row query (one text parameter, or none): 0 or an errno. */
int sqlite_store__query_i64(struct sqlite_store *st, struct store_conn *c, int id,
                            const char *sid, int64_t *out);
/* 0 with the session's creation time (created_at may be NULL), -ENOENT or -EIO. */
int sqlite_store__session_get(struct sqlite_store *st, struct store_conn *c,
                              const char *sid, int64_t *created_at);

/* ---- sqlite_store_conn.c: transactions on the writer's connection (lock held) ---- */

/*
 * May the store write? 0, or -EIO with the reason as the error (the files
 * are checked: one removed or replaced marks the store unusable). hlock held.
 */
int sqlite_store__check_writable_locked(struct sqlite_store *st);

/* BEGIN IMMEDIATE, refused with -EIO when the store is unusable. 0 or an errno. */
int sqlite_store__tx_begin(struct sqlite_store *st);
/* COMMIT, then check the files again. 0 or an errno (the commit not acknowledged). */
int sqlite_store__tx_commit(struct sqlite_store *st);
/* ROLLBACK if a transaction is open. */
void sqlite_store__tx_rollback(struct sqlite_store *st);
/* A part of a write transaction: 0 or an errno (which rolls it back). lock held. */
typedef int (*sqlite_store_tx_fn)(struct sqlite_store *st, void *arg);
/*
 * Take `lock`, begin, run `body`, commit (or roll back when it failed), and
 * after a commit run `after` (may be NULL; its result is ignored), still
 * under the lock. 0 or the first error: nothing of a failed one is stored.
 */
int sqlite_store__write_tx(struct sqlite_store *st, sqlite_store_tx_fn body,
                           sqlite_store_tx_fn after, void *arg);

/* ---- sqlite_store_conn.c: reads ---- */

/* The connection reads go through, locked (rlock, or lock for ":memory:"). */
struct store_conn *sqlite_store__reader_lock(struct sqlite_store *st);
void sqlite_store__reader_unlock(struct sqlite_store *st);
/* A read transaction on c (one snapshot of the log): 0 or -EIO. */
int sqlite_store__read_begin(struct sqlite_store *st, struct store_conn *c);
void sqlite_store__read_end(struct store_conn *c);

/* ---- sqlite_store_search.c: the full-text index (schema 3) ---- */

/*
 * The index's schema (search_docs, the FTS5 table search_fts over it, and the
 * triggers that keep them together), and the text that fills it from a log
 * of an older schema. For check_schema, inside its transaction.
 */
extern const char sqlite_store__search_schema_sql[];
extern const char sqlite_store__search_backfill_sql[];
/*
 * Index what a person reads of one input written straight into `inputs`
 * (import): the content of a user-send-message or a
 * brain-send-message-complete, the partial texts of a user-cancel; other
 * inputs cost a prefix compare. Inside the caller's transaction. 0 or an
 * errno. lock held.
 */
int sqlite_store__index_input(struct sqlite_store *st, const char *sid, int64_t seq,
                              const char *text, size_t len);
/* Rows one step of indexing takes (sqlite_store__index_step): bounds how long it holds
   the writer. */
#define STORE_INDEX_CHUNK 2048
/* The writer indexes after this long with nothing to commit. */
#define STORE_INDEX_IDLE_MS 200

/*
 * One step of catching up the index (see sqlite_store_search.c): the first range
 * of `inputs` a merge left unindexed, or else the rows of inputs_recent past
 * the mark, at most `max_rows` of them; *more: there may be more to do.
 * Inside the caller's transaction. 0 or an errno. lock held.
 */
int sqlite_store__index_step(struct sqlite_store *st, int64_t max_rows, bool *more);
/* Every step, inside the caller's transaction (a fork copies the index). lock held. */
int sqlite_store__index_all(struct sqlite_store *st);
/*
 * The writer, idle for STORE_INDEX_IDLE_MS: one step in a transaction of its
 * own. 1 when more may remain, 0 when the index is caught up, or an errno.
 * lock held.
 */
int sqlite_store__index_idle(struct sqlite_store *st);
/*
 * Before inputs_recent moves into `inputs`: note the seq ranges of its rows
 * past the mark (search_pending), to index from `inputs` later. Inside the
 * caller's transaction. 0 or an errno. lock held.
 */
int sqlite_store__index_defer(struct sqlite_store *st);
/*
 * After rows of inputs_recent were deleted: the mark no higher than the
 * last row left, so rows that take the freed rowids are indexed. Inside the
 * caller's transaction. 0 or an errno. lock held.
 */
int sqlite_store__index_clamp(struct sqlite_store *st);

/* ---- sqlite_store_read.c: folding ---- */

/*
 * A session's state as of input `upto` (INT64_MAX: the newest) into `out`,
 * with the seq reached: its newest snapshot at or before `upto`, then the
 * inputs after it. On failure `out` needs no release. c's lock held (or not
 * yet shared), in a transaction.
 */
int sqlite_store__build_state(struct sqlite_store *st, struct store_conn *c,
                              const char *sid, int64_t upto, struct rx_state *out,
                              int64_t *reached);

/* ---- sqlite_store_search.c: the search's SQL, and catching up ---- */

/* The SELECT of the sessions matching n words (bound as ?1..?n), appended. */
int sqlite_store__search_sql(size_t n, struct rx_buf *sql);
/* Bind the n words of a search to ?1..?n of q. 0 or -ENOMEM. */
int sqlite_store__search_bind(sqlite3_stmt *q, const char *const *words, size_t n);
/*
 * Before a search: every input committed so far indexed, a step at a time,
 * `lock` let go between steps. A store that cannot write answers from the
 * index as it is. lock not held.
 */
void sqlite_store__index_sync(struct sqlite_store *st);
/*
 * Rows of inputs_recent a commit leaves unindexed at most: the batch that
 * reaches it indexes them all, in its transaction (one FTS5 segment for
 * about this many rows, not one per batch). Bounds what a search indexes
 * before it reads.
 */
#define STORE_INDEX_EVERY 1024
/*
 * In a write transaction: when at least `min_rows` rows of inputs_recent
 * wait past the mark, index them all and move the mark to the last. 0 or
 * an errno (which fails the transaction). lock held.
 */
int sqlite_store__index_batch(struct sqlite_store *st, int64_t min_rows);

/* ---- sqlite_store_writer.c: the sessions' last seqs (lock held) ---- */

/* A session's row (sid, owner, created_at) inside the caller's transaction: 0 or an
   errno with the error "<what>: ...". lock held. */
int sqlite_store__insert_session(struct sqlite_store *st, const char *sid,
                                 const char *owner, int64_t created_at, const char *what);

void sqlite_store__last_drop(struct last_map *m, const char *sid);
/* Free every entry; m is empty afterwards. */
void sqlite_store__last_release(struct last_map *m);

/* ---- sqlite_store_writer.c: the writer's side of open and close ---- */

/* SQLite's WAL hook on the writer's connection (arg: the store): wakes the checkpointer.
 */
int sqlite_store__wal_hook(void *arg, sqlite3 *db, const char *name, int frames);
/* Move inputs_recent into `inputs`. 0 or an errno. lock held. */
int sqlite_store__recent_merge(struct sqlite_store *st);
/* At open: merge or note what inputs_recent holds. 0 or an errno. */
int sqlite_store__recent_open(struct sqlite_store *st);
/* The threads' bodies; arg is the struct sqlite_store. */
void *sqlite_store__writer_main(void *arg);
void *sqlite_store__checkpointer_main(void *arg);

/* ---- sqlite_store_records.c: the records of store.h ---- */

/* The records table, its index and trigger, at open (IF NOT EXISTS). 0 or -EIO with why.
 */
int sqlite_store__records_schema(sqlite3 *db, char *why, size_t n);
int sqlite_store_record_put(struct store *st, const char *kind, const char *key,
                            const char *sid, const char *text, size_t len);
int sqlite_store_record_get(struct store *st, const char *kind, const char *key,
                            struct store_record *out);
int sqlite_store_record_delete(struct store *st, const char *kind, const char *key);
int sqlite_store_record_list(struct store *st, const char *kind, const char *sid,
                             const char *after, size_t limit, struct store_records *out);

#endif
