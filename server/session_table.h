/*
 * session_table - the sessions of the server: create, load from the log,
 * fork, import, rename, delete and sweep (all removals take one path), list,
 * search and count, and the sessions feed that tells every tab of it
 * (server/session_feed). Search is in session_search.c; the resident set
 * (SPEC 6.2: with a store, memory holds only the sessions in use, loaded
 * on first touch and evicted when idle) in session_resident.c.
 *
 * Depends on server/session, server/principal and store/store. The table's lock guards
 * the list only; it is held while a session's lock is taken (table -> session), never the
 * other way round. Renames take the table's title_lock, then the store, then the
 * session's lock. Ownership: the table holds one reference to each listed session; calls
 * that hand a session out give a NEW reference (drop it: session_unref).
 */
#ifndef SESSION_TABLE_H
#define SESSION_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "server/principal.h"
#include "server/session.h"
#include "state_machine/rx_common.h"

struct session;
struct session_import_error;
struct session_table;
struct config;
struct brain;
struct toolkit;
struct store;

/* What every session shares: settings, brain, tools, the store. Borrowed. */
struct session_env {
    const struct config *cfg;
    struct brain *brain;
    const struct toolkit *tools;
    struct store *store; /* NULL: in memory only */
    /*
     * Told when a session leaves the table (deleted, swept; not at shutdown),
     * after it stopped, with no lock held: what a client protocol keeps about
     * it in memory goes with it. May be NULL.
     */
    void (*removed)(const char *id);
    /*
     * A cluster (server/cluster): sessions loaded or learnt of are followers
     * until taken (session_follow.h); `relay` sends the owned answers'
     * streamed deltas to the other nodes, and `may_act` says whether this
     * node's lease still lets it act as an owner, on its own clock: once it
     * says no, no effect starts or streams, whatever lock the lease thread
     * waits for. Both called with `cluster`, from any thread, never block.
     * NULL: one node alone.
     */
    void (*relay)(void *cluster, const char *sid, const char *mid, bool reasoning,
                  size_t offset, const char *delta, size_t len);
    bool (*may_act)(void *cluster);
    /*
     * A session loaded on a touch (SPEC 6.2): this node takes it over when
     * no live node owns it (claims it; its effects resume), so a chat whose
     * owner died is served by whoever touches it first, through any route.
     * Called with no lock held. NULL: one node alone.
     */
    void (*touched)(void *cluster, const char *sid);
    void *cluster;
};

struct session_table *session_table_create(const struct session_env *env) RX_WUR;
/* Cancels every effect, waits for them, ends every stream, frees. */
void session_table_destroy(struct session_table *t);

/* True for the words no client may choose as an id ("import", "search", "count"). */
bool session_id_is_reserved(const char *id);
/*
 * Create a session (id NULL: a fresh UUID) owned by `who` (borrowed; NULL:
 * the server's own, owned by PRINCIPAL_ADMIN). 0, -EEXIST, -EINVAL (an id
 * that is not plain, or reserved: session_id_is_reserved), -ENFILE (the
 * session limit of --db :memory:, limits.max_sessions), -EDQUOT (`who` has
 * limits.user_sessions; admins have no such limit), -ENOSPC (no room in the
 * store), -EIO (the store is unusable) or -ENOMEM.
 */
int session_table_create_session(struct session_table *t, const char *id,
                                 const struct principal *who,
                                 struct session **out) RX_WUR;
/*
 * A new reference to the session, or NULL: a touch. With a store, a session
 * not in memory is loaded from it (its newest snapshot and the inputs
 * after it), once however many touch it at a time, and its effects
 * reconciled; it stays until evicted (session_table_evict). For the
 * server's own work (effects, the cluster); a route asks session_table_get_as.
 */
struct session *session_table_get(struct session_table *t, const char *id);
/*
 * session_table_get for a request of `who` (SPEC 4.4): NULL as well when
 * the session is another principal's (an admin sees all), so that a route
 * answers it exactly as an id that does not exist.
 */
struct session *session_table_get_as(struct session_table *t, const char *id,
                                     const struct principal *who);
/* A new reference to the session if it is in memory (no load), or NULL. */
struct session *session_table_peek(struct session_table *t, const char *id);
/*
 * Delete a session's log, then remove and stop it. 0, -ENOENT, or the
 * store's -ENOSPC / -EIO, which leave the session in the log and the table.
 */
int session_table_delete(struct session_table *t, const char *id) RX_WUR;
/*
 * NEW reference: [{id, createdAt, updatedAt, title, messageCount}] of the
 * sessions `owner` owns (NULL: everyone's; principal_filter says which a
 * request may ask), newest first; with a store, the newest
 * SESSION_LIST_MAX (page on with session_table_search). NULL on ENOMEM or
 * the store's error.
 */
json_t *session_table_list(struct session_table *t, const char *owner);
#define SESSION_LIST_MAX 1000
/* Sessions stored (with a store: counted at start, then kept), or in memory. */
size_t session_table_count(struct session_table *t);

/* What /metrics and /healthz show of the sessions, O(1). */
struct session_figures {
    int64_t stored;    /* session_table_count */
    size_t resident;   /* in memory */
    size_t bytes;      /* their states, about */
    int64_t loads;     /* read from the store on a touch, since start */
    int64_t evictions; /* left memory idle, since start */
    /* Streamed text handed to the store (SPEC 3.7): batches, bytes, since start. */
    int64_t text_batches, text_bytes;
};
void session_table_figures(struct session_table *t, struct session_figures *f);
/*
 * Evict idle sessions (SPEC 6.2): those untouched for sessions.idle_ms,
 * and the least recently touched while more than limits.resident_sessions
 * or limits.resident_bytes are in memory; never one with a stream
 * subscriber, a request holding it, an effect wanted or running, or an
 * input on its way. Nothing with no store (--db :memory:). The
 * housekeeping thread calls it every second; a load past a limit too.
 */
void session_table_evict(struct session_table *t);
/* The store the sessions are logged in (borrowed), or NULL (--db :memory:). */
struct store *session_table_store(struct session_table *t);
/* The toolkit every session's effects use (borrowed). */
const struct toolkit *session_table_tools(struct session_table *t);
/*
 * Start-up: count the stored sessions and load those with work in flight
 * (store_sessions_busy), each reconciled at once, so pending tools run
 * again, unanswered messages are answered and interrupted answers resume
 * under their id; the others load on first touch. 0 or a negative errno
 * (the store's sentence is logged).
 */
int session_table_load(struct session_table *t) RX_WUR;
/*
 * A new session from the first `at` inputs of `sid`, owned by `who` (as
 * session_table_create_session; -EDQUOT too). 0 and a new reference in
 * *out; -ENOENT (no sid), -ERANGE (at past the log), -ENOSYS (no database:
 * --db :memory:), -ENFILE (the session limit), -ENOSPC (no room in the store),
 * -ENOMEM, -EIO (the store is unusable).
 */
int session_table_fork(struct session_table *t, const char *sid, int64_t at,
                       const struct principal *who, struct session **out) RX_WUR;
/* Retention: drop sessions idle since before `older_than_ms`. Number removed. */
int session_table_sweep(struct session_table *t, int64_t older_than_ms);
/*
 * Try again the reconciles that failed (session__reconcile): every settled
 * session whose effects could not all start; and the recoveries that wait
 * for a tool to be known (session_recover, SPEC 3.7). O(1) when there is
 * none; the housekeeping thread calls it every second. Takes the table's
 * lock, then each marked session's; a recovery runs with neither held.
 */
void session_table_reconcile_due(struct session_table *t);
/*
 * Make durable the streamed text of answers that stalled (SPEC 3.7): a
 * batch is made on the chunk path when due, so the tail of an answer whose
 * brain went quiet waits for this, which the housekeeping thread calls every
 * second. Takes the table's lock, then each streaming session's.
 */
void session_table_text_due(struct session_table *t);
/*
 * Count the stored sessions once, after start-up, when the store is shared
 * (PostgreSQL): the count of a million rows is most of a node's start, and
 * nothing needs it before the first /metrics. The housekeeping thread calls
 * it every second; it reads the store once. No lock held.
 */
void session_table_count_due(struct session_table *t);
/*
 * Rename: `title` (borrowed; session_title_is_valid) is stored, then shown,
 * and never replaced by the title from the first message. 0, -ENOENT, -ENOMEM,
 * or the store's -ENOSPC / -EIO (nothing changed).
 */
int session_table_rename(struct session_table *t, const char *id,
                         const char *title) RX_WUR;

/* A page of the sessions list (session_table_search). */
struct session_page {
    json_t *list; /* NEW: [{id, createdAt, updatedAt, title, messageCount}] */
    int64_t next; /* `before` for the next page, or -1 on the last */
};

/* The longest query, in bytes, and the page sizes of session_table_search. */
#define SESSION_SEARCH_QUERY_MAX 1000
#define SESSION_PAGE_DEFAULT     50
#define SESSION_PAGE_MAX         200

/*
 * The sessions of `owner` (NULL: everyone's) whose title or messages hold
 * every word of `q` (NULL or blank: every session), with updatedAt < `before` (< 0: no
 * bound), newest first (updatedAt, then id, descending), `limit` of them (1 to
 * SESSION_PAGE_MAX) and those that share the last one's updatedAt, so that
 * `next` (that updatedAt) loses none. Words are runs of letters and digits,
 * case-insensitive; the last word also matches as a prefix. With a store the
 * full-text index finds them (store_search: case and diacritics folded);
 * without one (--db :memory:) the sessions are scanned (ASCII case folded).
 * 0 and `page` filled; -E2BIG (more than STORE_SEARCH_WORDS_MAX words or
 * SESSION_SEARCH_QUERY_MAX bytes), -ENOMEM or the store's -EIO.
 */
int session_table_search(struct session_table *t, const char *owner, const char *q,
                         int64_t before, int limit, struct session_page *page) RX_WUR;

/*
 * Follow the sessions feed (session_feed.h) of the sessions `owner` owns
 * (NULL: everyone's): the retry line, then session-created, -updated and
 * -deleted events. What `attach` returned, or NULL on ENOMEM.
 */
void *session_table_follow(struct session_table *t, const char *owner,
                           session_attach_fn attach, void *arg);

/*
 * A new session from an exported log (session_import.h): every input replayed
 * through the machine; the session is stored and listed, and only the effects
 * its final state wants start; it is `who`'s (as session_table_create_session).
 * 0 and a new reference in *out; -EINVAL with `e` filled (nothing made);
 * -ENFILE (the session limit), -EDQUOT (`who`'s limit), -ENOSPC, -EIO, -ENOMEM.
 */
int session_table_import(struct session_table *t, json_t *doc,
                         const struct principal *who, struct session_import_error *e,
                         struct session **out) RX_WUR;
/*
 * The same from the document's text (`len` bytes, borrowed), read input by
 * input (session_import_replay_text): what POST .../sessions/import uses, on
 * a thread of its own. check(arg), when not NULL, is asked every 1024 inputs
 * and a nonzero answer (a negative errno, e.g. -ECANCELED at shutdown) stops
 * the import with it, nothing made.
 */
int session_table_import_text(struct session_table *t, const char *text, size_t len,
                              int (*check)(void *), void *arg,
                              const struct principal *who, struct session_import_error *e,
                              struct session **out) RX_WUR;

/*
 * limits.user_running_effects (SPEC 4.4): may `who` give its sessions more
 * work now, or do they run as many effects as one user may? Always true
 * for an admin and for the server itself (NULL).
 */
bool session_table_may_work(struct session_table *t, const struct principal *who);

/* Cancel every effect of every session (shutdown, step one). */
void session_table_cancel_all(struct session_table *t);

#endif
