/*
 * pg_store_internal - what the files of store/pg share (pg_store.c,
 * pg_store_conn.c, pg_store_writer.c, pg_store_admin.c, pg_store_read.c):
 * struct pg_store, its three connections, its operations for the table of
 * store_backend.h, and the helpers for health, reconnecting, queries and
 * binary array parameters. Private to store/pg; everyone else uses
 * store/store.h.
 *
 * Depends on libpq, store/pg/pg_store.h, store/store.h,
 * store/store_backend.h, store/store_notifier.h, store/store_queue.h,
 * base/now and state_machine/ only; never on store/sqlite.
 * Connections: `w` is the writer thread's alone (group commit; no lock);
 * `a` (under alock) carries create, delete, fork, import, title and
 * retention, so none of them waits for a batch to commit, nor a batch for
 * them; `r` (under rlock) every read, so a long history read holds up
 * nobody. Locks, in the order they may nest: alock or rlock, then the base's
 * hlock; the queue's (store/store_queue) and the notifier's
 * (store/store_notifier) alone. No callback
 * is called with any of them held. Ownership: struct pg_store is the heap
 * object of the backend's open and close (store_open/store_close) and owns
 * its connections, strings and threads. PGresult values are freed by whoever
 * received them (PQclear).
 */
#ifndef PG_STORE_INTERNAL_H
#define PG_STORE_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

#include "state_machine/rx_buf.h"
#include "store/pg/pg_store.h"
#include "store/store.h"
#include "store/store_backend.h"
#include "store/store_notifier.h"
#include "store/store_queue.h"

/* The most writes one transaction takes: bounds one commit's time, not the queue. */
#define PG_STORE_BATCH_MAX 1024
/* Every node takes this advisory lock around creating or upgrading the schema. ("RFLX")
 */
#define PG_STORE_SCHEMA_LOCK "1380339800"
/* Backoff between connection attempts after a loss: doubles from MIN to MAX. */
/* The longest one statement may take: a database that stops answering
   fails the call (-EIO, the connection dropped) instead of hanging it. */
#define PG_STORE_CALL_MS        4000
#define PG_STORE_BACKOFF_MIN_MS 100
#define PG_STORE_BACKOFF_MAX_MS 2000
/*
 * The longest node id kept for fencing, with its NUL. A longer id is cut,
 * and then names no owners row: its writes fail -ESTALE, the safe side.
 */
#define PG_STORE_NODE_MAX 256
/* PostgreSQL takes at most 1 GB in one field: one array parameter's bound. */
#define PG_STORE_PARAM_MAX ((size_t)1 << 30)
/* Rows one history query fetches: pages are cut by bytes, rows come in chunks. */
#define PG_STORE_HISTORY_CHUNK 512
/* Type oids of the binary array parameters (catalog/pg_type.h; fixed for good). */
#define PG_STORE_OID_INT8 20
#define PG_STORE_OID_TEXT 25

/* One connection, its backoff, and what it must set again after a reconnect. */
struct pg_conn {
    PGconn *c;           /* NULL: not connected */
    int64_t retry_at_ms; /* monotonic: no attempt before this */
    int backoff_ms;      /* the wait after the next failed attempt */
    const char *name;    /* "writer", "admin", "reader": for messages */
    bool fresh;          /* connected since its owner last looked (settings to apply) */
};

struct pg_store {
    struct store base; /* first: the table, hlock and the error sentence */
    char *conninfo;    /* as given: passed to libpq, never printed */
    char *safe;        /* conninfo without its password: for messages */
    struct pg_conn w;  /* the writer thread's */
    struct pg_conn a;  /* create, delete, fork, import, title, gc: under alock */
    struct pg_conn r;  /* reads: under rlock */
    pthread_mutex_t alock, rlock;

    /* Under base.hlock (a leaf), with base.err, down to `fenced`. */
    bool down;                    /* the last attempt to reach the database failed */
    bool full;                    /* the last write found no room (SQLSTATE 53100) */
    char why[RX_ERR_LEN];         /* why down or full, for store_health */
    char node[PG_STORE_NODE_MAX]; /* fencing (pg_store_set_node); "" with !fenced */
    bool fenced;

    struct store_queue
        queue;        /* the writer, the notifier; its lock guards durable, durable_set */
    bool durable;     /* synchronous_commit on (store_set_durable) */
    bool durable_set; /* the writer's connection has `durable` applied */

    int64_t commits, writes; /* the writer's batches and their writes (atomic) */
};

/* The PostgreSQL store a struct store of this backend is. */
static inline struct pg_store *pg_store_of(struct store *st)
{
    return (struct pg_store *)((char *)st - offsetof(struct pg_store, base));
}

/* ---- the operations of pg_store_backend, by file (see store.h) ---- */

/* pg_store.c */
void pg_store_set_node(struct store *st, const char *node);
int pg_store_set_durable(struct store *st, bool fsync_each_commit);
enum store_health pg_store_health(struct store *st, struct rx_error *why);
void pg_store_commit_counts(struct store *st, int64_t *commits, int64_t *writes);
/* pg_store_admin.c */
int pg_store_create_session(struct store *st, const char *sid, const char *owner,
                            int64_t created_at);
int pg_store_delete_session(struct store *st, const char *sid);
int pg_store_fork(struct store *st, const char *sid, int64_t at, const char *new_sid,
                  const char *owner, int64_t created_at);
int pg_store_gc_list(struct store *st, int64_t older_than_ms, json_t **removed_ids,
                     int64_t *removed_inputs);
int pg_store_set_title(struct store *st, const char *sid, const char *title);
int pg_store_import(struct store *st, const char *sid, const char *owner,
                    int64_t created_at, const char *title,
                    const struct store_text *inputs, size_t n,
                    const struct store_text *snapshot);
/* pg_store_read.c */
int pg_store_list_sessions(struct store *st, const struct store_cursor *after,
                           size_t limit, struct store_list *out);
int pg_store_session_load(struct store *st, const char *sid, struct rx_state *out,
                          int64_t *seq);
int pg_store_session_created(struct store *st, const char *sid, int64_t *created_at);
int pg_store_history_page(struct store *st, const char *sid, int64_t after_seq, int limit,
                          struct rx_buf *out, int64_t *last);
int pg_store_state_at(struct store *st, const char *sid, int64_t seq,
                      struct rx_state *out);
int pg_store_session_title(struct store *st, const char *sid, char **out);
int pg_store_search(struct store *st, const char *const *words, size_t n, json_t **out);
int pg_store_stats(struct store *st, int64_t *inputs, int64_t *bytes);
/* pg_store_writer.c */
void pg_store_write_queue(struct store *st, struct store_write *w);
/* pg_store_sessions.c */
int pg_store_sessions_page(struct store *st, const char *owner, const char *const *words,
                           size_t n, int64_t before, size_t limit,
                           struct store_list *out);
int pg_store_sessions_busy(struct store *st, struct store_list *out);
int pg_store_sessions_count(struct store *st, int64_t *n);
int pg_store_sessions_owned(struct store *st, const char *owner, int64_t *n);
int pg_store_session_info(struct store *st, const char *sid,
                          struct store_session_info *out);

/* ---- pg_store_sessions.c: the sessions' rows (schema 2 and 3, SPEC 6.2, 4.4) ---- */

/* The columns every list of sessions reads, in pg_store__list_rows' order. */
#define PG_STORE_ROW_COLUMNS                                                             \
    "id, created_at, coalesce(title, auto_title), updated_at, messages, owner"
/* Append the rows of r (PG_STORE_ROW_COLUMNS) to `out`: 0 or -ENOMEM. */
int pg_store__list_rows(const PGresult *r, struct store_list *out);
/*
 * At open, on the admin connection: upgrade a schema of version 1 (the
 * rows' columns and indexes, every session listed as due) or 2 (the owner
 * column, 'admin' for every session there, and its index), then compute
 * the row of each due session from its log, a few hundred per transaction,
 * the session's row locked meanwhile (a batch of inputs waits), skipping
 * those another node is doing. *done counts them. 0, or the errno with
 * `why` set.
 */
int pg_store__rows_upgrade(struct pg_store *pg, int64_t *done, char *why, size_t n);
/* The session's row set to r's (fork, upgrade). On `a`, in its transaction. */
int pg_store__row_put(struct pg_store *pg, const char *sid, const struct store_row *r);

/* ---- pg_store_read.c: folding, search ---- */

/*
 * A session's state as of input `upto` (INT64_MAX: the newest) into `out`,
 * with the seq reached: the newest snapshot at or before it, then the
 * inputs after it. On failure `out` needs no release. pc's lock held, in a
 * transaction.
 */
int pg_store__build_state(struct pg_store *pg, struct pg_conn *pc, const char *sid,
                          int64_t upto, struct rx_state *out, int64_t *reached);
/* The SELECT of the sessions matching n words, bound as $first.., appended. */
int pg_store__search_sql(size_t n, size_t first, struct rx_buf *sql);

/* ---- pg_store.c: health ---- */

/* A write committed: the database has room again. */
void pg_store__wrote(struct pg_store *pg);

/* ---- pg_store.c: connections and queries ---- */

/* Milliseconds on the monotonic clock. */
/* libpq's sentence made one line, in place (it ends with a newline, may span lines). */
void pg_store__one_line(char *s);
/* The database cannot be reached (`what`: which connection, `msg`: why): said by
   store_health until a connection succeeds (pg_store__mark_up). hlock taken. */
void pg_store__mark_down(struct pg_store *pg, const char *what, const char *msg);
void pg_store__mark_up(struct pg_store *pg);
/*
 * The connection, connected: 0, or -EIO at once while its backoff runs or
 * when connecting fails (health goes down with the reason). The
 * connection's lock held (or the writer thread's own).
 */
int pg_store__conn_get(struct pg_store *pg, struct pg_conn *pc);
/*
 * Run one parameterised statement (text parameters, lengths implied by
 * NUL; `bin` and `lens` may be NULL, see PQexecParams). The result in
 * *out when it is PGRES_TUPLES_OK or PGRES_COMMAND_OK (out may be NULL: it
 * is cleared); otherwise the errno: -EEXIST (unique violation), -ENOSPC
 * (disk full, health full), -EIO (a lost connection: the connection is
 * dropped and health goes down; anything else), with the error set to
 * "<what>: <PostgreSQL's sentence>".
 */
/*
 * Schema 4: the streamed text of answers still streaming (SPEC 3.7), in
 * batches keyed by offset; a session's go with it (ON DELETE CASCADE).
 */
#define PG_STORE_STREAM_SQL                                                              \
    "CREATE TABLE IF NOT EXISTS stream_text(session_id text NOT NULL"                    \
    " REFERENCES sessions(id) ON DELETE CASCADE, message_id text NOT NULL,"              \
    " off bigint NOT NULL, text text NOT NULL,"                                          \
    " PRIMARY KEY(session_id, message_id, off));"
int pg_store_stream_text(struct store *st, const char *sid, const char *message_id,
                         struct rx_buf *out);
int pg_store__exec(struct pg_store *pg, struct pg_conn *pc, const char *what,
                   const char *sql, int n, const char *const *vals, const int *lens,
                   const int *bin, PGresult **out);
/* BEGIN / COMMIT / ROLLBACK (the latter best effort, when connected). */
int pg_store__begin(struct pg_store *pg, struct pg_conn *pc);
int pg_store__commit(struct pg_store *pg, struct pg_conn *pc);
void pg_store__rollback(struct pg_store *pg, struct pg_conn *pc);
/* Was the connection lost (by the last call)? */
bool pg_store__conn_lost(const struct pg_conn *pc);
/* Forget a broken connection: the next pg_store__conn_get reconnects. */
void pg_store__conn_drop(struct pg_store *pg, struct pg_conn *pc, const char *why);
/* The node to fence with, copied into `out` (PG_STORE_NODE_MAX bytes); false: none. */
bool pg_store__node(struct pg_store *pg, char *out);

/* ---- pg_store.c: binary array parameters ---- */

/*
 * A one-dimensional array in PostgreSQL's binary format (array_recv),
 * bounded by PG_STORE_PARAM_MAX: begin, add elements, end (fills in the
 * count). Elements of a text[] are bytes, of a bigint[] int64.
 */
struct pg_array {
    struct rx_buf b;
    uint32_t n;
    uint32_t oid;
};
void pg_store__array_init(struct pg_array *a, uint32_t oid);
void pg_store__array_release(struct pg_array *a);
int pg_store__array_text(struct pg_array *a, const char *s, size_t len) RX_WUR;
int pg_store__array_i64(struct pg_array *a, int64_t v) RX_WUR;
/* The finished parameter (data, length), valid until the next add or release. */
int pg_store__array_end(struct pg_array *a) RX_WUR;

/* ---- pg_store.c: helpers for results ---- */

/* 0 when `seq` is 0..last (a session's log), else -ERANGE with the error set. */
int pg_store__seq_in_log(struct pg_store *pg, const char *sid, int64_t seq, int64_t last);
int64_t pg_store__i64(const PGresult *r, int row, int col);
/* 'n' formatted as decimal into buf (at least 24 bytes): a text parameter. */
const char *pg_store__fmt_i64(char *buf, int64_t n);

/* ---- pg_store_writer.c: the writer's threads ---- */

void *pg_store__writer_main(void *arg);

/*
 * What a write's rows index for search: the SQL that fills search_docs from
 * unnest($1::text[], $2::bigint[], $3::text[]) AS u(s, q, t) (session id,
 * seq, input text), for the writer and import.
 */
extern const char pg_store__index_sql[];

/* ---- pg_store_records.c: the records of store.h ---- */

/*
 * Run `sql` (a transaction that makes `relation`) unless `relation` exists:
 * a table or index added after the schema's version, made at open. 0, or
 * -EIO with "creating <what>: ..." in why. The admin connection.
 */
int pg_store__ensure(struct pg_store *pg, const char *relation, const char *sql,
                     const char *what, char *why, size_t n);
/* The records table when missing, on `a` at open. 0 or -EIO with why. */
int pg_store__records_schema(struct pg_store *pg, char *why, size_t n);
int pg_store_record_put(struct store *st, const char *kind, const char *key,
                        const char *sid, const char *text, size_t len);
int pg_store_record_get(struct store *st, const char *kind, const char *key,
                        struct store_record *out);
int pg_store_record_delete(struct store *st, const char *kind, const char *key);
int pg_store_record_list(struct store *st, const char *kind, const char *sid,
                         const char *after, size_t limit, struct store_records *out);

#endif
