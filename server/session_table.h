/*
 * session_table - the sessions of the server: create, load from the log,
 * fork, delete and sweep (all removals take one path), list and count.
 *
 * Depends on server/session and server/store. The table's lock guards the
 * list only; it is held while a session's lock is taken (table -> session),
 * never the other way round.
 * Ownership: the table holds one reference to each listed session; calls
 * that hand a session out give a NEW reference (drop it: session_unref).
 */
#ifndef SESSION_TABLE_H
#define SESSION_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "state_machine/rx_common.h"

struct session;
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
};

struct session_table *session_table_create(const struct session_env *env) RX_WUR;
/* Cancels every effect, waits for them, ends every stream, frees. */
void session_table_destroy(struct session_table *t);

/*
 * Create a session (id NULL: a fresh UUID). 0, -EEXIST, -ENFILE (the session
 * limit, limits.max_sessions), -ENOSPC (no room in the store), -EIO (the store
 * is unusable) or -ENOMEM.
 */
int session_table_create_session(struct session_table *t, const char *id,
                                 struct session **out) RX_WUR;
/* A new reference to the session, or NULL. */
struct session *session_table_get(struct session_table *t, const char *id);
/*
 * Delete a session's log, then remove and stop it. 0, -ENOENT, or the
 * store's -ENOSPC / -EIO, which leave the session in the log and the table.
 */
int session_table_delete(struct session_table *t, const char *id) RX_WUR;
/* NEW reference: [{id, createdAt, updatedAt, title, messageCount}]. NULL on ENOMEM. */
json_t *session_table_list(struct session_table *t);
size_t session_table_count(struct session_table *t);
/* The store the sessions are logged in (borrowed), or NULL (--db :memory:). */
struct store *session_table_store(struct session_table *t);
/* The toolkit every session's effects use (borrowed). */
const struct toolkit *session_table_tools(struct session_table *t);
/*
 * Rebuild every session the store holds (snapshot + tail), then reconcile
 * each at once, so pending tools run again, unanswered messages are answered
 * and interrupted answers resume under their id. 0 or a negative errno (the
 * store's sentence is logged).
 */
int session_table_load(struct session_table *t) RX_WUR;
/*
 * A new session from the first `at` inputs of `sid`. 0 and a new reference in
 * *out; -ENOENT (no sid), -ERANGE (at past the log), -ENOSYS (no database:
 * --db :memory:), -ENFILE (the session limit), -ENOSPC (no room in the store),
 * -ENOMEM, -EIO (the store is unusable).
 */
int session_table_fork(struct session_table *t, const char *sid, int64_t at,
                       struct session **out) RX_WUR;
/* Retention: drop sessions idle since before `older_than_ms`. Number removed. */
int session_table_sweep(struct session_table *t, int64_t older_than_ms);
/* Cancel every effect of every session (shutdown, step one). */
void session_table_cancel_all(struct session_table *t);
/* Number of running effects across sessions. */
int session_table_effects_running(struct session_table *t);

#endif
