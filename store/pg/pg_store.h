/*
 * pg_store - the input log of every session in PostgreSQL (SPEC 6.1), through
 * libpq: the same log as store/sqlite keeps in SQLite, shared by every
 * Reflexor node that opens the same database.
 *
 * store/store.c opens this backend (pg_store_backend, store_backend.h) when
 * its path is a PostgreSQL connection string (postgres://, postgresql:// or
 * libpq keywords), and then store_is_shared says so: every store_* call of
 * store.h goes through the table to a pg_store_* operation with the same
 * arguments, semantics and errors, as store.h documents them, with these
 * differences:
 *   - Health is not sticky. A lost connection is retried with backoff
 *     (100 ms doubling to 2 s); while it is down, writes fail with -EIO
 *     within 10 s (connect_timeout and keepalives bound every wait, and
 *     every statement is given up after PG_STORE_CALL_MS, 4 s, when a
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
 *   - Fencing: after store_set_node(node), every transaction that writes a
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
 *                        PG_STORE_NOTIFY_TEXT_MAX bytes (read it from the log);
 *       channel rx_sess: "created <sid>" (create, fork, import),
 *                        "deleted <sid>" (delete, retention),
 *                        "title <sid>"   (store_set_title).
 *
 * Schema (created on first use, version in table rx_meta; a newer version is
 * refused at open with one line; versions 1 to 3 are upgraded at open, see
 * pg_store_sessions.c; 4 adds stream_text(session_id, message_id, off,
 * text), the streamed text of answers, SPEC 3.7): sessions(id, created_at, updated_at,
 * title, messages, busy, auto_title, owner: the principal it belongs to, SPEC 4.4, not to
 * be confused with the cluster's `owners` below, which names the node writing it),
 * inputs(session_id, seq, input) primary key (session_id, seq), snapshots(session_id,
 * seq, state), search documents, and for the cluster nodes(id text primary key, url text,
 * expires_at timestamptz) and owners(session_id text primary key, node text, since
 * timestamptz). server/cluster reads and writes nodes and owners; pg_store only creates
 * them and checks owners when fencing.
 *
 * The files of store/pg share pg_store_internal.h; nothing else includes
 * them: this header only documents the backend and its two constants.
 * Depends on libpq, store/store_backend.h and state_machine/ only; never on
 * store/sqlite.
 * Thread-safe, as store.h says. No callback is called with a pg_store mutex
 * held.
 * Ownership: as store.h: inputs and states passed in are borrowed; states
 * and json_t handed out are NEW; struct store_write is the caller's.
 */
#ifndef PG_STORE_H
#define PG_STORE_H

/* The schema this code writes (rx_meta.version); newer databases are refused. */
#define PG_STORE_SCHEMA_VERSION 4
/* The longest input text a rx_log notification carries (PostgreSQL's limit is 8000). */
#define PG_STORE_NOTIFY_TEXT_MAX 7000

#endif
