/*
 * store - the input log of every session (SPEC 6), the one header callers
 * use: server/ never knows which backend it has. Two backends implement it
 * behind one table (store/store_backend.h): store/sqlite keeps the log in one
 * SQLite file (below), store/pg in PostgreSQL, shared by many nodes (SPEC
 * 6.1; the differences are in store/pg/pg_store.h: health not sticky,
 * fencing, notifications). store_open picks the backend from the path.
 *
 * The log is the source of truth: a session's state is the fold of
 * rx_machine_apply over its accepted inputs from rx_state_init. The store
 * keeps one row per accepted input (its compact JSON from rx_input_encode) and,
 * every N inputs, one snapshot of the state (rx_state_encode), so loading a
 * session replays at most N inputs; only the newest snapshot is kept.
 * Storage grows with the inputs, never with history x steps.
 *
 * SQLite (store/sqlite): the file is in WAL mode, and locked (flock) by the process that
 * opened it: a second server (or `reflexor --gc`) on a file in use fails clearly instead
 * of interleaving two logs. The schema is versioned (application_id and user_version); a
 * newer or foreign schema, a corrupt file or a directory that cannot be written fails at
 * store_open with one line naming the file. Path ":memory:" gives a private in-memory
 * database (tests, benchmarks).
 *
 * Group commit (SPEC 6, both backends: store/store_queue): appends are queued
 * (store_write_queue) and one writer thread commits everything queued as one transaction
 * with one fsync, so the inputs of many sessions that arrive together share the sync; a
 * notifier thread then calls each write's `done` callback, in queue order, while the next
 * batch commits. A commit writes its inputs to `inputs_recent`, in arrival order (a few
 * pages for many sessions), and the writer moves them into `inputs`, ordered by session,
 * in bulk; a checkpointer thread on a connection of its own copies the WAL into the file.
 * Reads (load, history, state-at, stats) take both tables through a second, read-only
 * connection: in WAL mode it reads the last commit while the writer writes, so a long
 * read never holds up a commit, nor a commit a read (":memory:" has one
 * connection). Schema 5: 2 added inputs_recent, 3 the full-text index
 * (search_docs and the FTS5 table search_fts: what people read of each input
 * and the titles they gave), 4 what each session's row keeps of its state
 * (messages, busy, the title from its first message; SPEC 6.2), 5 its owner
 * (SPEC 4.4; older sessions belong to STORE_OWNER_DEFAULT), 6 the
 * streamed text of answers (stream_text, SPEC 3.7). The commit
 * that finds STORE_INDEX_EVERY (1024) rows unindexed indexes them, in its
 * transaction, and so does a merge; the idle writer indexes the rest; a
 * search or a fork first indexes whatever is left (at most about that many
 * rows, or what an older version left), so a search finds every input
 * acknowledged before it began (store/sqlite/sqlite_store_search.c). A file of schema 1
 * to 4 is upgraded at open: the index filled from its log, each session's row computed
 * once from its state (store/sqlite/sqlite_store_sessions.c), the owner column added.
 *
 * Depends on state_machine/ only (its backends on SQLite, libpq and pthreads);
 * nothing from effects/ or server/. Thread-safe: the writer's connection, the reader's
 * and the queue each have their own mutex; creating, deleting, forking and retention run
 * on the caller's thread under the writer's mutex, between two commits. No callback is
 * ever called with a store mutex held. Ownership: struct store is a heap object
 * (store_open/store_close). Inputs and states passed in are borrowed. States handed out
 * (store_load's callback, store_state_at, store_session_load) belong to the receiver, who
 * releases them with rx_state_release. json_t results are NEW references. A struct
 * store_write and what it points to are the caller's, borrowed by the store
 * from store_write_queue until its `done` returns.
 * Errors: 0 or a negative errno: -ENOENT (no such session), -EEXIST (id or seq
 * taken), -ERANGE (seq past the log), -EPROTO (stored data does not fold:
 * corruption), -ENOSPC (no room: the disk, a file size limit or the quota of
 * store_set_max_bytes; nothing of the write is stored and a later write may
 * succeed), -ENOMEM, -EIO (the store is unusable, see below, or anything else
 * SQLite says). The sentence for humans is kept: store_last_error().
 *
 * Health (SPEC 6): a store that cannot keep what it is given says so at once.
 * Every write first checks that the database's path (and its WAL's) still
 * names the file opened, and checks again after its commit; a file removed or
 * replaced while in use, an I/O error or a damaged file makes the store
 * unusable: from then on every write fails with -EIO without touching the
 * file, until a restart (sticky: after a failed write or fsync nothing says
 * the next one would reach the disk). Reads go on from the open file, and a
 * failed read changes no health.
 * store_health() reports ok, full (the last write found no room, until one
 * succeeds) or unavailable, with the reason.
 *
 * Files: store/store.c (the dispatcher over the backends, and what they
 * share: the fold of a stored input, store_load, store_append, the history
 * in JSON), store/store_queue.c (group commit's queue and writer thread) and
 * store/store_notifier.c (the thread that answers committed writes) and
 * store/store_row.c (a session's row computed from its state), for both; store/sqlite/
 * and store/pg/ (the backends).
 */
#ifndef STORE_H
#define STORE_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "state_machine/rx_buf.h"
#include "state_machine/rx_common.h"
#include "state_machine/rx_input.h"
#include "state_machine/rx_state.h"

/* The SQLite schema this code writes (user_version); newer files are refused. */
#define STORE_SCHEMA_VERSION 6
/*
 * Owners (SPEC 4.4): every session belongs to one principal, named by 1 to
 * STORE_OWNER_MAX bytes (no NUL). A NULL owner given to a call that makes a
 * session means STORE_OWNER_DEFAULT, which is also the owner of every
 * session stored before owners were (schema 5 on SQLite, 3 on PostgreSQL).
 */
#define STORE_OWNER_MAX     64
#define STORE_OWNER_DEFAULT "admin"
/* The most bytes of inputs one history page carries (store_history_text). */
#define STORE_HISTORY_PAGE_MAX (16u << 20)

struct store;

/*
 * Open or create the database at `path` (":memory:" for none on disk). The
 * parent directory must exist and be writable (WAL needs its -wal file
 * beside the database). A new reference to the store, or NULL with `err`
 * (may be NULL) set to "'<path>': <why>".
 */
struct store *store_open(const char *path, struct rx_error *err) RX_WUR;
/*
 * Open the database at `path` beside the server that may hold it, for its
 * records only (`reflexor users` on a running server's database): on
 * SQLite without the one-server lock (SQLite's own locks keep the two
 * writers apart; the file must exist, at the current schema or new); on
 * PostgreSQL as store_open. Only store_record_* and store_close may be
 * called on what it returns. As store_open otherwise.
 */
struct store *store_open_beside(const char *path, struct rx_error *err) RX_WUR;
/* Checkpoint the WAL, close the file, free. NULL is allowed. */
void store_close(struct store *st);

/*
 * May several processes use this log at once (PostgreSQL: a cluster, SPEC
 * 6.1)? A SQLite file is one process's (flock).
 */
bool store_is_shared(const struct store *st);
/*
 * Fence every later write with cluster node `node` (copied; NULL: none), see
 * store/pg/pg_store.h. A store that is not shared ignores it.
 */
void store_set_node(struct store *st, const char *node);
/* One session's created_at: 0, -ENOENT or -EIO. */
int store_session_created(struct store *st, const char *sid, int64_t *created_at) RX_WUR;

/*
 * fsync at every commit (true, the default) or leave it to the OS (false).
 * Either way a commit survives kill -9 of the process; only fsync makes it
 * survive a power loss. 0 or -EIO.
 */
int store_set_durable(struct store *st, bool fsync_each_commit) RX_WUR;

/* The last error sentence of any call, copied into `err`. */
void store_last_error(struct store *st, struct rx_error *err);

/*
 * A quota: the database's pages may take at most `max_bytes` (0: no quota,
 * SQLite's own limit), through SQLite's max_page_count, which never goes
 * below the pages already in use. A write past it fails with -ENOSPC, as on a
 * full disk. Per connection: set it after each store_open. 0, -EINVAL
 * (negative) or -EIO.
 */
int store_set_max_bytes(struct store *st, int64_t max_bytes) RX_WUR;

/* What the store can do now; see "Health" above. */
enum store_health {
    STORE_OK,          /* writes are stored */
    STORE_FULL,        /* the last write found no room (-ENOSPC) */
    STORE_UNAVAILABLE, /* unusable: every write fails with -EIO until restart */
};

/*
 * The store's health, after checking its files (so a removed file shows
 * before any write), with the reason in `why` (may be NULL; "" when ok).
 */
enum store_health store_health(struct store *st, struct rx_error *why);
/* "ok", "full" or "unavailable": the words /healthz uses. */
const char *store_health_name(enum store_health h);

/*
 * A new session with no inputs, belonging to `owner` (borrowed; NULL:
 * STORE_OWNER_DEFAULT). 0, -EINVAL (owner empty or longer than
 * STORE_OWNER_MAX), -EEXIST, -ENOSPC or -EIO.
 */
int store_create_session(struct store *st, const char *sid, const char *owner,
                         int64_t created_at) RX_WUR;
/*
 * Remove a session and every row of it, in one transaction: when this does
 * not return 0 the session is still stored. 0, -ENOENT, -ENOSPC or -EIO.
 */
int store_delete_session(struct store *st, const char *sid) RX_WUR;

/*
 * One input to commit: number `seq` of session `sid` (1, 2, ...), its text
 * (rx_input_encode's compact JSON) and, when not NULL, a snapshot of the
 * state once it is applied (rx_state_encode), which replaces the older one;
 * the session's updated_at becomes `updated_at` (the input's timestamp) when
 * that moves it by more than a second (retention counts in days; rewriting
 * the session's row at every input would add its pages to every commit).
 */
struct store_write;
/*
 * How a queued write ends: err 0 when it is in the file and survives kill -9
 * (and a power loss with fsync on); otherwise nothing of it is stored and it
 * must not be acknowledged: -ENOENT (no such session), -EEXIST or -EINVAL
 * (seq is taken, or does not follow the last stored: a write after one that
 * failed fails too), -ENOSPC, -ENOMEM or -EIO (the transaction's error).
 * Called once, on the store's notifier thread, with no store mutex held; `w` may be
 * freed by it.
 */
typedef void (*store_done_fn)(struct store_write *w, int err);

struct store_write {
    /* The caller's, borrowed by the store until `done` returns. */
    const char *sid;
    int64_t seq;
    int64_t updated_at;
    const char *input; /* not NUL-terminated */
    size_t input_len;
    const char *snapshot; /* NULL: none with this input */
    size_t snapshot_len;
    store_done_fn done;
    /*
     * What the sessions list and a restart read without loading the session
     * (SPEC 6.2), as of the state once this input is applied: its messages
     * (user + assistant), whether it wants any effect (rx_effects_any: a
     * restart loads and resumes it at once), and the title it takes from
     * its first message (rx_state_title; NULL: none yet, or already sent).
     * The session's row holds the last write's values; the title is kept
     * once set.
     */
    int64_t messages;
    bool busy;
    const char *title; /* not NUL-terminated, title_len bytes */
    size_t title_len;
    /*
     * An input that ends a streaming answer (brain-send-message-complete, a
     * user-cancel; SPEC 3.7): the streamed text kept of it goes in the same
     * transaction, so the log never keeps an answer twice. NULL: none; a
     * message id; "" every streamed text of the session.
     */
    const char *stream_done;
    /*
     * Streamed text instead of an input (SPEC 3.7, store_stream_text): when
     * set, the write stores input[0..input_len) as bytes [text_offset, ...)
     * of the streamed text of assistant message `message_id` (replacing a
     * batch stored at that offset); seq, snapshot, updated_at and the row's
     * values are not read, and it follows no seq. It fails alone with
     * -ENOENT when the session is gone (nothing is stored). NUL-terminated.
     */
    const char *message_id;
    int64_t text_offset;
    /* The store's. */
    struct store_write *next;
    int err;
};

/*
 * Queue `w` for the writer thread (group commit). Writes are committed in
 * the order they are queued, many to a transaction, and their `done` is
 * called in that order once their transaction committed or failed; a writer
 * that keeps its sessions' writes in order (queues them under its own lock)
 * gets them stored and answered in that order. A batch that failed fails
 * every write in it (each gets the error; when it was -ENOSPC, each write is
 * tried once more alone, so one input too big does not refuse the others).
 * Never fails itself: every outcome comes through `done`. Not after
 * store_close has begun.
 */
void store_write_queue(struct store *st, struct store_write *w);
/*
 * Streamed text (SPEC 3.7: an answer survives a crash). While an answer
 * streams, its text goes to the store in batches (a store_write with
 * `message_id` set, queued like an input and never waited for), so that
 * after kill -9 or a takeover the message keeps every byte that was
 * durable. The input that ends the answer removes its batches
 * (`stream_done`), and so does the deletion of the session (retention
 * too); a fork or an import copies none. SQLite keeps them in table
 * `stream_text(session_id, message_id, off, text)` (schema 6), PostgreSQL
 * likewise (schema 4).
 *
 * Append to `out` the streamed text kept of message `message_id` of session
 * `sid`: its batches from offset 0 on, as far as they follow each other
 * without a gap (a batch that failed leaves the rest unreadable, never
 * wrong). Nothing appended when none is kept. Read without holding up a
 * commit. 0, -ENOMEM (out as it was, or longer: the caller drops it),
 * -E2BIG (past out's bound) or -EIO.
 */
int store_stream_text(struct store *st, const char *sid, const char *message_id,
                      struct rx_buf *out) RX_WUR;
/*
 * The streamed text the store was given to write so far: batches queued and
 * their bytes (for measurements). Pointers may be NULL.
 */
void store_stream_counts(struct store *st, int64_t *batches, int64_t *bytes);

/*
 * Group commit so far: the batches the writer thread has committed (a batch
 * retried write by write after -ENOSPC counts once) and the writes they
 * carried. Pointers may be NULL.
 */
void store_commit_counts(struct store *st, int64_t *commits, int64_t *writes);

/*
 * Commit one accepted input and wait for it: store_write_queue with `in`
 * encoded and, when seq % snapshot_every == 0 (and snapshot_every > 0), a
 * snapshot of `after` (the state once `in` is applied). When this returns 0
 * the input is in the file and survives kill -9; on failure nothing of it is
 * stored and the caller must not acknowledge it (its in-memory state, already
 * changed in place, can be restored with store_session_load). 0, -ENOENT (no
 * such session), -EEXIST (seq taken), -EINVAL (seq does not follow), -ENOSPC,
 * -ENOMEM or -EIO.
 */
int store_append(struct store *st, const char *sid, int64_t seq,
                 const struct rx_input *in, const struct rx_state *after,
                 int snapshot_every) RX_WUR;

/*
 * Called by store_load once per session, oldest first. `state` is initialised
 * and, when the callback returns 0, moved to it (the callback releases it);
 * when it returns non-zero, store_load releases it and stops with that value.
 * `seq` is the number of inputs folded into it; `title` (borrowed for the
 * call) the one a person gave it (store_set_title), else the one its row
 * took from its first message, or NULL; `owner` (borrowed for the call) the
 * principal it belongs to. The store's lock is not held.
 */
typedef int (*store_each_fn)(void *ctx, const char *sid, int64_t created_at,
                             const char *title, const char *owner, struct rx_state *state,
                             int64_t seq);

/*
 * Rebuild every session: its newest snapshot (or rx_state_init), then the
 * inputs after it folded with rx_machine_apply (store_list_sessions, then
 * store_session_load of each; a session deleted meanwhile is skipped). Every stored input
 * must fold as RX_ACCEPTED in seq order with no gap; anything else is corruption:
 * -EPROTO, and store_last_error names the session and the seq. 0, the
 * callback's non-zero value (store_last_error then names the session it
 * refused), -EPROTO, -ENOMEM or -EIO. It holds no descriptor per session.
 */
int store_load(struct store *st, store_each_fn each, void *ctx) RX_WUR;

/* A place in the order sessions are listed in: created_at, then id. */
struct store_cursor {
    int64_t created_at;
    const char *id; /* borrowed */
};

/*
 * One stored session, as store_list_sessions, store_sessions_page,
 * store_sessions_busy and store_session_info give it.
 */
struct store_session_info {
    char *id;    /* owned by the list */
    char *title; /* the one a person gave (store_set_title), else the one from its
                    first message (store_write.title), else NULL; the list's */
    char *owner; /* the principal it belongs to (never NULL); the list's */
    int64_t created_at;
    int64_t updated_at;
    int64_t messages; /* store_write.messages of its last input (0: none) */
};

/* Sessions listed: caller-allocated, zeroed before the first use. */
struct store_list {
    struct store_session_info *v;
    size_t n, cap;
};

/*
 * Append to `out` the stored sessions after `after` (NULL: from the first)
 * in (created_at, id) order, at most `limit` of them (0: all): a page. The
 * next page starts after the last one listed. Read without holding up a
 * commit. 0, -ENOMEM or -EIO; on failure `out` is as it was.
 */
int store_list_sessions(struct store *st, const struct store_cursor *after, size_t limit,
                        struct store_list *out) RX_WUR;
/* Free what the list holds; it is empty (and zeroed) afterwards. */
void store_list_release(struct store_list *l);

/*
 * A page of the sessions list as people see it (SPEC 6.2), newest first:
 * the sessions of `owner` (NULL: everyone's; borrowed) with updated_at <
 * `before` (< 0: no bound), in (updated_at,
 * id) descending order, `limit` of them (>= 1) and every further one that
 * shares the last one's updated_at (so a next page asked with before = that
 * updated_at loses none), appended to `out`. With `n` words (0 to
 * STORE_SEARCH_WORDS_MAX), only the sessions store_search would find for
 * them; a search finds every input whose write was answered before it
 * began. Read without holding up a commit; served by an index on
 * (updated_at, id), and one owner's by an index on (owner, updated_at, id),
 * so a page costs the same among a million sessions.
 * 0, -EINVAL (n out of range, limit 0, or owner empty or longer than
 * STORE_OWNER_MAX), -ENOMEM or -EIO; on failure `out` is as it was.
 */
int store_sessions_page(struct store *st, const char *owner, const char *const *words,
                        size_t n, int64_t before, size_t limit,
                        struct store_list *out) RX_WUR;
/*
 * The sessions whose last input left effects wanted (store_write.busy), in
 * no order, appended to `out`: what a restart must load and resume at
 * once. Served by an index on them: it costs what they are, not what the
 * log holds. 0, -ENOMEM or -EIO.
 */
int store_sessions_busy(struct store *st, struct store_list *out) RX_WUR;
/* How many sessions are stored, in *n. 0 or -EIO. */
int store_sessions_count(struct store *st, int64_t *n) RX_WUR;
/*
 * How many sessions `owner` (borrowed; NULL: everyone, as
 * store_sessions_count) has stored, in *n: what a per-user session limit
 * compares. Counted on the index on (owner, updated_at, id): it costs what
 * that owner has, not what the log holds. 0, -EINVAL (owner empty or longer
 * than STORE_OWNER_MAX) or -EIO.
 */
int store_sessions_owned(struct store *st, const char *owner, int64_t *n) RX_WUR;
/*
 * One session's row: created_at, title, messages and owner as
 * store_sessions_page lists them, into `out` (its strings the caller's: free
 * them with store_session_info_release). 0, -ENOENT, -ENOMEM or -EIO.
 */
int store_session_info(struct store *st, const char *sid,
                       struct store_session_info *out) RX_WUR;
void store_session_info_release(struct store_session_info *info);

/*
 * One session's current state (as store_load builds it) into caller-allocated
 * `out`, with the number of inputs in `*seq`. On failure `out` needs no
 * release. 0, -ENOENT, -EPROTO, -ENOMEM or -EIO.
 */
int store_session_load(struct store *st, const char *sid, struct rx_state *out,
                       int64_t *seq) RX_WUR;

/*
 * Append to `out` the JSON text [{"seq":N,"input":{...}}, ...] of the inputs
 * with seq > after_seq, oldest first, at most `limit` of them (limit <= 0:
 * no count limit), and no more after STORE_HISTORY_PAGE_MAX bytes of inputs
 * (at least one): a client pages on with after = the last seq it got, until
 * a page is empty. The inputs' stored text is copied, never parsed, and read
 * through the read-only connection: writers do not wait for it. `out`'s
 * bound must leave room for a page and one input. On failure `out` is as it
 * was. 0, -ENOENT (no such session), -EPROTO (a damaged row), -ENOMEM or -EIO.
 */
int store_history_text(struct store *st, const char *sid, int64_t after_seq, int limit,
                       struct rx_buf *out) RX_WUR;
/*
 * store_history_text that also says where the page ended: *last is the seq
 * of its last input (after_seq when it is empty), to ask for the next page.
 */
int store_history_page(struct store *st, const char *sid, int64_t after_seq, int limit,
                       struct rx_buf *out, int64_t *last) RX_WUR;
/*
 * The same as a NEW reference in `*out` (parsed: for tests and tools).
 * 0, -ENOENT (no such session), -EPROTO, -ENOMEM or -EIO.
 */
int store_history(struct store *st, const char *sid, int64_t after_seq, int limit,
                  json_t **out) RX_WUR;

/*
 * The state as of input `seq` (0: the initial state) into caller-allocated
 * `out`. On failure `out` needs no release. 0, -ENOENT, -ERANGE (seq < 0 or
 * past the last input), -EPROTO, -ENOMEM or -EIO.
 */
int store_state_at(struct store *st, const char *sid, int64_t seq,
                   struct rx_state *out) RX_WUR;

/*
 * A new session `new_sid` whose log is inputs 1..at of `sid` (at 0: empty),
 * with its title (store_set_title) and their part of the full-text index,
 * created at `created_at`, in one transaction; it belongs to `owner`
 * (borrowed; NULL: STORE_OWNER_DEFAULT), whoever owns `sid`. Its state is
 * then store_session_load(new_sid). 0, -EINVAL (owner empty or longer than
 * STORE_OWNER_MAX), -ENOENT (no `sid`), -EEXIST (`new_sid` taken), -ERANGE
 * (at < 0 or past the last input), -ENOSPC or -EIO.
 */
int store_fork(struct store *st, const char *sid, int64_t at, const char *new_sid,
               const char *owner, int64_t created_at) RX_WUR;

/*
 * Retention: delete every session whose updated_at < older_than_ms with all
 * its rows, in one transaction. Counts go to the pointers that are not NULL;
 * `removed_ids`, when not NULL, gets a NEW array of the ids removed (so the
 * server can drop them from memory). 0, -ENOMEM, -ENOSPC or -EIO (nothing
 * removed).
 */
int store_gc_list(struct store *st, int64_t older_than_ms, json_t **removed_ids,
                  int64_t *removed_inputs) RX_WUR;
/* store_gc_list with counts only. */
int store_gc(struct store *st, int64_t older_than_ms, int *removed_sessions,
             int64_t *removed_inputs) RX_WUR;

/*
 * One logged input's text (rx_input_encode's JSON), the one way the log is
 * read back, for both stores and for a cluster's followers: parsed into
 * `in` (release it), or also folded into `s` (store_input_fold). 0, -EPROTO
 * (not JSON, invalid, or not accepted where it is folded) or -ENOMEM, with
 * `why` saying which ("is not JSON: ...", "does not fold (...)").
 */
int store_input_parse(const char *text, size_t len, struct rx_input *in,
                      struct rx_error *why) RX_WUR;
int store_input_fold(const char *text, size_t len, struct rx_state *s,
                     struct rx_error *why) RX_WUR;

/* ---- titles, search and import (store_search.c) ---- */

/* The longest query store_search takes, in words. */
#define STORE_SEARCH_WORDS_MAX 16

/*
 * The title a person gave the session (NULL: none, the server derives one),
 * kept in its row and in the full-text index, in one transaction. 0, -ENOENT,
 * -ENOSPC or -EIO.
 */
int store_set_title(struct store *st, const char *sid, const char *title) RX_WUR;
/*
 * The title a person gave it: a malloc'd copy in *out (the caller frees it),
 * or NULL when none. 0, -ENOENT, -ENOMEM or -EIO.
 */
int store_session_title(struct store *st, const char *sid, char **out) RX_WUR;
/*
 * The sessions whose indexed text (user messages, finished or stopped
 * answers, the title given) holds every one of `words` (n of them, 1 to
 * STORE_SEARCH_WORDS_MAX, each non-empty; the last one also as a prefix),
 * each anywhere in the session. Words are matched as SQLite's unicode61
 * tokenizer cuts text: runs of letters and digits, case and diacritics
 * folded; a word of several tokens is a phrase. A NEW array of their ids
 * (in no order) in *out, read through the read-only connection. 0, -EINVAL
 * (n out of range), -ENOMEM or -EIO.
 */
int store_search(struct store *st, const char *const *words, size_t n,
                 json_t **out) RX_WUR;

/* One input's text (rx_input_encode's compact JSON), not NUL-terminated. */
struct store_text {
    const char *data;
    size_t len;
};

/*
 * A new session `sid` belonging to `owner` (borrowed; NULL:
 * STORE_OWNER_DEFAULT) whose log is inputs[0..n) (seq 1..n), with `title`
 * (NULL: none), created (and, for retention, last updated) at `created_at`,
 * and a snapshot of its state after them (NULL: none), indexed for search,
 * in one transaction: all of it is stored, or nothing. The caller has
 * folded the inputs (they must fold, or the next load fails). 0, -EINVAL
 * (owner empty or longer than STORE_OWNER_MAX), -EEXIST, -ENOSPC or -EIO.
 */
int store_import(struct store *st, const char *sid, const char *owner, int64_t created_at,
                 const char *title, const struct store_text *inputs, size_t n,
                 const struct store_text *snapshot) RX_WUR;

/*
 * Size figures: the number of stored inputs, and the bytes of the database
 * pages in use (page_count - freelist_count) * page_size, WAL not included.
 * 0 or -EIO.
 */
int store_stats(struct store *st, int64_t *inputs, int64_t *bytes) RX_WUR;

/* ---- records: what the protocols keep beside the log (SPEC 6.2) ---- */

/*
 * A record is a small document a protocol keeps about a session, stored so
 * that it survives restarts and every node sees the same: the /v1
 * continuity map (a conversation's fingerprint -> its session), LangGraph
 * threads' metadata and finished runs. It is named by a `kind` (a word of
 * the protocol's, 1 to STORE_RECORD_KIND_MAX bytes) and a `key` unique in
 * its kind (1 to STORE_RECORD_KEY_MAX bytes), belongs to one session or to
 * none, and holds text (JSON, by convention; at most STORE_RECORD_TEXT_MAX
 * bytes, no NUL). A session's records go with it, in the transaction that
 * deletes it (store_delete_session, retention), on both backends; a fork
 * copies none. Table `records(kind, key, session_id, body)`, created at
 * open in a database of any schema version (IF NOT EXISTS).
 */
#define STORE_RECORD_KIND_MAX 32
#define STORE_RECORD_KEY_MAX  512
#define STORE_RECORD_TEXT_MAX (16u << 20)

/* One record read back: every string the record's, freed by store_record_release. */
struct store_record {
    char *key;
    char *sid;  /* its session, or NULL: none */
    char *text; /* NUL-terminated, `len` bytes */
    size_t len;
};

/* Records listed: caller-allocated, zeroed before the first use. */
struct store_records {
    struct store_record *v;
    size_t n, cap;
};

/*
 * Store record (kind, key) with `text` (text[0..len), borrowed), belonging
 * to session `sid` (NULL: none), replacing the one of that name if there is
 * one. Committed when this returns 0: it waits for the store's writer (for
 * a commit and its fsync), so never call it holding a session's lock.
 * 0, -EINVAL (a name or the text out of bounds), -ENOENT (no session
 * `sid`), -ENOSPC or -EIO.
 */
int store_record_put(struct store *st, const char *kind, const char *key, const char *sid,
                     const char *text, size_t len) RX_WUR;
/*
 * Record (kind, key) into caller-allocated `out` (release it with
 * store_record_release; on failure it needs none). Read without holding up
 * a commit. 0, -EINVAL, -ENOENT (none), -ENOMEM or -EIO.
 */
int store_record_get(struct store *st, const char *kind, const char *key,
                     struct store_record *out) RX_WUR;
void store_record_release(struct store_record *r);
/* Delete record (kind, key). 0, -EINVAL, -ENOENT (none), -ENOSPC or -EIO. */
int store_record_delete(struct store *st, const char *kind, const char *key) RX_WUR;
/*
 * Append to `out` the records of `kind` (of session `sid` only, when not
 * NULL) whose key is after `after` (NULL: from the first), in key order
 * (bytewise), at most `limit` of them (0: all): a page; the next one starts
 * after the last key listed. 0, -EINVAL, -ENOMEM or -EIO; on failure `out`
 * is as it was.
 */
int store_record_list(struct store *st, const char *kind, const char *sid,
                      const char *after, size_t limit, struct store_records *out) RX_WUR;
/* Free what the list holds; it is empty (and zeroed) afterwards. */
void store_records_release(struct store_records *l);

#endif
