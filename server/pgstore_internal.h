/*
 * pgstore_internal - what server/pgstore.c, server/pgstore_writer.c and
 * server/pgstore_read.c share: struct pgstore, its three connections and
 * the helpers for errors, health, reconnecting, queries and binary array
 * parameters. Private to server/pgstore*.c (and server/store.c, which
 * forwards its error sentences here); everyone else uses pgstore.h.
 *
 * Depends on libpq and state_machine/ only, like pgstore.
 * Connections: `w` is the writer thread's alone (group commit; no lock);
 * `a` (under alock) carries create, delete, fork, import, title and
 * retention, so none of them waits for a batch to commit, nor a batch for
 * them; `r` (under rlock) every read, so a long history read holds up
 * nobody. Locks, in the order they may nest: alock or rlock, then hlock;
 * qlock and the notifier's (server/store_notifier) alone. No callback is called with any
 * of them held. Ownership: struct pgstore is the heap object of pgstore_open/_close and
 * owns its connections, strings and threads. PGresult values are freed by
 * whoever received them (PQclear).
 */
#ifndef PGSTORE_INTERNAL_H
#define PGSTORE_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

#include "server/pgstore.h"
#include "server/store_notifier.h"
#include "state_machine/rx_buf.h"

/* The most writes one transaction takes: bounds one commit's time, not the queue. */
#define PGSTORE_BATCH_MAX 1024
/* Backoff between connection attempts after a loss: doubles from MIN to MAX. */
/* The longest one statement may take: a database that stops answering
   fails the call (-EIO, the connection dropped) instead of hanging it. */
#define PGSTORE_CALL_MS        4000
#define PGSTORE_BACKOFF_MIN_MS 100
#define PGSTORE_BACKOFF_MAX_MS 2000
/*
 * The longest node id kept for fencing, with its NUL. A longer id is cut,
 * and then names no owners row: its writes fail -ESTALE, the safe side.
 */
#define PGSTORE_NODE_MAX 256
/* PostgreSQL takes at most 1 GB in one field: one array parameter's bound. */
#define PGSTORE_PARAM_MAX ((size_t)1 << 30)
/* Rows one history query fetches: pages are cut by bytes, rows come in chunks. */
#define PGSTORE_HISTORY_CHUNK 512
/* Type oids of the binary array parameters (catalog/pg_type.h; fixed for good). */
#define PGSTORE_OID_INT8 20
#define PGSTORE_OID_TEXT 25

/* One connection, its backoff, and what it must set again after a reconnect. */
struct pg_conn {
    PGconn *c;           /* NULL: not connected */
    int64_t retry_at_ms; /* monotonic: no attempt before this */
    int backoff_ms;      /* the wait after the next failed attempt */
    const char *name;    /* "writer", "admin", "reader": for messages */
    bool fresh;          /* connected since its owner last looked (settings to apply) */
};

struct pgstore {
    char *conninfo;   /* as given: passed to libpq, never printed */
    char *safe;       /* conninfo without its password: for messages */
    struct pg_conn w; /* the writer thread's */
    struct pg_conn a; /* create, delete, fork, import, title, gc: under alock */
    struct pg_conn r; /* reads: under rlock */
    pthread_mutex_t alock, rlock;

    pthread_mutex_t hlock;       /* a leaf: guards down to `node` */
    char err[RX_ERR_LEN];        /* store_last_error */
    bool down;                   /* the last attempt to reach the database failed */
    bool full;                   /* the last write found no room (SQLSTATE 53100) */
    char why[RX_ERR_LEN];        /* why down or full, for store_health */
    char node[PGSTORE_NODE_MAX]; /* fencing (pgstore_set_node); "" with !fenced */
    bool fenced;

    pthread_mutex_t qlock; /* guards the queue down to `durable` */
    pthread_cond_t queued_cond;
    struct store_write *head, **tail;
    bool stopping;
    bool durable;     /* synchronous_commit on (store_set_durable) */
    bool durable_set; /* the writer's connection has `durable` applied */
    pthread_t writer;
    bool writer_started;

    struct store_notifier notifier; /* answers committed writes, in order */

    int64_t commits, writes; /* the writer's batches and their writes (atomic) */
};

/* ---- pgstore.c: errors and health ---- */

/* The sentence store_last_error gives, under hlock. */
void pgstore__set_error(struct pgstore *pg, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void pgstore__set_error_v(struct pgstore *pg, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));
/* A write committed: the database has room again. */
void pgstore__wrote(struct pgstore *pg);

/* ---- pgstore.c: connections and queries ---- */

/* Milliseconds on the monotonic clock. */
/* libpq's sentence made one line, in place (it ends with a newline, may span lines). */
void pgstore__one_line(char *s);
/* The database cannot be reached (`what`: which connection, `msg`: why): said by
   store_health until a connection succeeds (pgstore__mark_up). hlock taken. */
void pgstore__mark_down(struct pgstore *pg, const char *what, const char *msg);
void pgstore__mark_up(struct pgstore *pg);
int64_t pgstore__now_ms(void);
/*
 * The connection, connected: 0, or -EIO at once while its backoff runs or
 * when connecting fails (health goes down with the reason). The
 * connection's lock held (or the writer thread's own).
 */
int pgstore__conn_get(struct pgstore *pg, struct pg_conn *pc);
/*
 * Run one parameterised statement (text parameters, lengths implied by
 * NUL; `bin` and `lens` may be NULL, see PQexecParams). The result in
 * *out when it is PGRES_TUPLES_OK or PGRES_COMMAND_OK (out may be NULL: it
 * is cleared); otherwise the errno: -EEXIST (unique violation), -ENOSPC
 * (disk full, health full), -EIO (a lost connection: the connection is
 * dropped and health goes down; anything else), with the error set to
 * "<what>: <PostgreSQL's sentence>".
 */
int pgstore__exec(struct pgstore *pg, struct pg_conn *pc, const char *what,
                  const char *sql, int n, const char *const *vals, const int *lens,
                  const int *bin, PGresult **out);
/* BEGIN / COMMIT / ROLLBACK (the latter best effort, when connected). */
int pgstore__begin(struct pgstore *pg, struct pg_conn *pc);
int pgstore__commit(struct pgstore *pg, struct pg_conn *pc);
void pgstore__rollback(struct pgstore *pg, struct pg_conn *pc);
/* Was the connection lost (by the last call)? */
bool pgstore__conn_lost(const struct pg_conn *pc);
/* Forget a broken connection: the next pgstore__conn_get reconnects. */
void pgstore__conn_drop(struct pgstore *pg, struct pg_conn *pc, const char *why);
/* The node to fence with, copied into `out` (PGSTORE_NODE_MAX bytes); false: none. */
bool pgstore__node(struct pgstore *pg, char *out);

/* ---- pgstore.c: binary array parameters ---- */

/*
 * A one-dimensional array in PostgreSQL's binary format (array_recv),
 * bounded by PGSTORE_PARAM_MAX: begin, add elements, end (fills in the
 * count). Elements of a text[] are bytes, of a bigint[] int64.
 */
struct pg_array {
    struct rx_buf b;
    uint32_t n;
    uint32_t oid;
};
void pgstore__array_init(struct pg_array *a, uint32_t oid);
void pgstore__array_release(struct pg_array *a);
int pgstore__array_text(struct pg_array *a, const char *s, size_t len) RX_WUR;
int pgstore__array_i64(struct pg_array *a, int64_t v) RX_WUR;
/* The finished parameter (data, length), valid until the next add or release. */
int pgstore__array_end(struct pg_array *a) RX_WUR;

/* ---- pgstore.c: helpers for results ---- */

/* 0 when `seq` is 0..last (a session's log), else -ERANGE with the error set. */
int pgstore__seq_in_log(struct pgstore *pg, const char *sid, int64_t seq, int64_t last);
int64_t pgstore__i64(const PGresult *r, int row, int col);
/* 'n' formatted as decimal into buf (at least 24 bytes): a text parameter. */
const char *pgstore__fmt_i64(char *buf, int64_t n);

/* ---- pgstore_writer.c: the writer's threads ---- */

void *pgstore__writer_main(void *arg);

/*
 * What a write's rows index for search: the SQL that fills search_docs from
 * unnest($1::text[], $2::bigint[], $3::text[]) AS u(s, q, t) (session id,
 * seq, input text), for the writer and import.
 */
extern const char pgstore__index_sql[];

#endif
