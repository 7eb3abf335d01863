/*
 * pgstore - the input log of every session in PostgreSQL (SPEC 6.1), through
 * libpq: the same log as server/store keeps in SQLite, shared by every
 * Reflexor node that opens the same database.
 *
 * server/store dispatches here when its path is a PostgreSQL connection
 * string (store_is_postgres): every store_* call of store.h has a pgstore_*
 * twin with the same arguments, the same semantics and the same errors, as
 * store.h documents them, with these differences:
 *   - Health is not sticky. A lost connection is retried with backoff
 *     (100 ms doubling to 2 s); while it is down, writes fail with -EIO
 *     within 10 s (connect_timeout and keepalives bound every wait, and
 *     every statement is given up after PGSTORE_CALL_MS, 4 s, when a
 *     database that still holds the connection stops answering) and
 *     store_health says STORE_UNAVAILABLE with the reason; service resumes
 *     by itself when the database answers again. A write that failed changes
 *     nothing in the database (its transaction is rolled back or never
 *     committed; a commit whose outcome is unknown is checked by reading the
 *     row back after reconnecting).
 *   - store_set_durable(false) sets synchronous_commit off for the writer.
 *   - store_set_max_bytes is accepted and ignored (0) : PostgreSQL's own
 *     quotas apply; -ENOSPC comes from a full disk (SQLSTATE 53100).
 *   - store_stats' bytes are pg_total_relation_size of the store's tables.
 *   - Search matches words with PostgreSQL's full-text search ('simple'
 *     configuration, so no stemming, the last word as a prefix), case
 *     folded; diacritics are not folded.
 *
 * Group commit as in store.h: one writer thread commits everything queued in
 * one transaction, a notifier thread answers in queue order.
 *
 * Cluster (server/cluster): the same database serves many nodes.
 *   - Fencing: after pgstore_set_node(node), every transaction that writes a
 *     session's inputs first takes a share lock on its `owners` row
 *     (SELECT ... FOR SHARE) and writes only if that row names `node`; the
 *     writes of a session it does not name fail with -ESTALE (nothing
 *     stored). A node that takes a session over updates that row, so it waits
 *     for a writer that holds the share lock, and reads the log after: a
 *     stale owner can never add to a log someone else continues.
 *     store_create_session, store_fork and store_import insert the new
 *     session's owners row naming `node`, in their transaction; deleting a
 *     session (and retention) deletes it. Without a node (NULL, the default)
 *     nothing is checked and no owners row is written: one node alone.
 *   - Notifications, sent inside the transaction that commits the change, so
 *     a listener learns of it once it is committed, in commit order:
 *       channel rx_log:  "<sid> <seq> <input text>" for each input committed,
 *                        or "<sid> <seq>" when the text is over
 *                        PGSTORE_NOTIFY_TEXT_MAX bytes (read it from the log);
 *       channel rx_sess: "created <sid>" (create, fork, import),
 *                        "deleted <sid>" (delete, retention),
 *                        "title <sid>"   (store_set_title).
 *
 * Schema (created on first use, version in table rx_meta; a newer version is
 * refused at open with one line): sessions(id, created_at, updated_at,
 * title), inputs(session_id, seq, input) primary key (session_id, seq),
 * snapshots(session_id, seq, state), search documents, and for the cluster
 * nodes(id text primary key, url text, expires_at timestamptz) and
 * owners(session_id text primary key, node text, since timestamptz).
 * server/cluster reads and writes nodes and owners; pgstore only creates
 * them and checks owners when fencing.
 *
 * Depends on libpq and state_machine/ only, like server/store on SQLite.
 * Thread-safe, as store.h says. No callback is called with a pgstore mutex
 * held.
 * Ownership: as store.h: inputs and states passed in are borrowed; states
 * and json_t handed out are NEW; struct store_write is the caller's.
 */
#ifndef PGSTORE_H
#define PGSTORE_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "server/store.h"

/* The schema this code writes (rx_meta.version); newer databases are refused. */
#define PGSTORE_SCHEMA_VERSION 1
/* The longest input text a rx_log notification carries (PostgreSQL's limit is 8000). */
#define PGSTORE_NOTIFY_TEXT_MAX 7000

struct pgstore;

/* True when `path` is a PostgreSQL connection string: postgres://,
   postgresql:// or libpq keywords ("host=... dbname=..."). */
bool pgstore_is_conninfo(const char *path);

/*
 * Connect to `conninfo`, create or check the schema. NULL with `err` set to
 * "'<conninfo without password>': <why>" (the database unreachable at
 * start-up is an error: a server is not started on a database it cannot
 * reach; later losses are retried).
 */
struct pgstore *pgstore_open(const char *conninfo, struct rx_error *err) RX_WUR;
void pgstore_close(struct pgstore *pg);

/*
 * Fence every later write with `node` (copied; NULL: no fencing), see
 * "Cluster" above. Takes effect from the next transaction.
 */
void pgstore_set_node(struct pgstore *pg, const char *node);

/* The twins of store.h, one for one. */
int pgstore_set_durable(struct pgstore *pg, bool fsync_each_commit) RX_WUR;
void pgstore_last_error(struct pgstore *pg, struct rx_error *err);
enum store_health pgstore_health(struct pgstore *pg, struct rx_error *why);
int pgstore_create_session(struct pgstore *pg, const char *sid,
                           int64_t created_at) RX_WUR;
int pgstore_delete_session(struct pgstore *pg, const char *sid) RX_WUR;
void pgstore_write_queue(struct pgstore *pg, struct store_write *w);
void pgstore_commit_counts(struct pgstore *pg, int64_t *commits, int64_t *writes);
int pgstore_load(struct pgstore *pg, store_each_fn each, void *ctx) RX_WUR;
int pgstore_session_load(struct pgstore *pg, const char *sid, struct rx_state *out,
                         int64_t *seq) RX_WUR;
int pgstore_history_page(struct pgstore *pg, const char *sid, int64_t after_seq,
                         int limit, struct rx_buf *out, int64_t *last) RX_WUR;
int pgstore_state_at(struct pgstore *pg, const char *sid, int64_t seq,
                     struct rx_state *out) RX_WUR;
int pgstore_fork(struct pgstore *pg, const char *sid, int64_t at, const char *new_sid,
                 int64_t created_at) RX_WUR;
int pgstore_gc_list(struct pgstore *pg, int64_t older_than_ms, json_t **removed_ids,
                    int64_t *removed_inputs) RX_WUR;
int pgstore_set_title(struct pgstore *pg, const char *sid, const char *title) RX_WUR;
int pgstore_session_title(struct pgstore *pg, const char *sid, char **out) RX_WUR;
int pgstore_search(struct pgstore *pg, const char *const *words, size_t n,
                   json_t **out) RX_WUR;
int pgstore_import(struct pgstore *pg, const char *sid, int64_t created_at,
                   const char *title, const struct store_text *inputs, size_t n,
                   const struct store_text *snapshot) RX_WUR;
int pgstore_stats(struct pgstore *pg, int64_t *inputs, int64_t *bytes) RX_WUR;

/*
 * One session's created_at, and whether it exists: 0, -ENOENT or -EIO. For
 * a node that learns of a session another node made (rx_sess "created").
 */
int pgstore_session_created(struct pgstore *pg, const char *sid,
                            int64_t *created_at) RX_WUR;

#endif
