/*
 * session - one Reflexor machine served over HTTP: its state, the effect
 * runtime that acts on it, its SSE channel and the buffers of the answers
 * that are streaming. And session_table, the sessions of the server.
 *
 * One input at a time: session_submit() stamps, applies, publishes and
 * reconciles under the session's lock, whoever the input comes from (HTTP or
 * an effect), so effects never go "deaf" and the order is the arrival order.
 * Streaming text never enters the state (seed principle): it lives in a
 * per-message buffer with its own SSE channel until the message completes.
 * Depends on state_machine/, effects/ and server/sse.
 * Ownership: sessions are refcounted; session_table_get() returns a new
 * reference that the caller drops with session_unref(). Inputs passed to
 * session_submit are borrowed (it may fill messageId, timestamp, partials).
 */
#ifndef SESSION_H
#define SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>
#include <microhttpd.h>

#include "effects/runtime.h"
#include "server/config.h"
#include "server/sse.h"
#include "state_machine/rx_machine.h"
#include "state_machine/rx_common.h"

#define SESSION_ID_MAX 64

struct session;
struct session_table;
struct store;

struct submit_result {
    enum rx_verdict verdict;
    enum rx_reason reason;
    const char *field; /* for RX_REASON_INVALID */
    int64_t timestamp;
    int64_t seq;
};

/* What every session shares: settings, brain, tools, the store. Borrowed. */
struct session_env {
    const struct config *cfg;
    struct brain *brain;
    const struct toolkit *tools;
    struct store *store; /* NULL: in memory only */
};

struct session_table *session_table_create(const struct session_env *env);
/* Cancels every effect, waits for them, ends every stream, frees. */
void session_table_destroy(struct session_table *t);

/* Create a session (id NULL: a fresh UUID). 0, -EEXIST, -ENOSPC (limit) or -ENOMEM. */
int session_table_create_session(struct session_table *t, const char *id,
                                 struct session **out) RX_WUR;
/* A new reference to the session, or NULL. */
struct session *session_table_get(struct session_table *t, const char *id);
/* Remove and stop a session. 0 or -ENOENT. */
int session_table_delete(struct session_table *t, const char *id) RX_WUR;
/* NEW reference: [{id, createdAt, updatedAt, title, messageCount}], newest first. */
json_t *session_table_list(struct session_table *t);
size_t session_table_count(struct session_table *t);
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
 * --db :memory:), -ENOSPC, -ENOMEM, -EIO. The same -ENOSYS for the two below.
 */
int session_table_fork(struct session_table *t, const char *sid, int64_t at,
                       struct session **out) RX_WUR;
/* Retention: drop sessions idle since before `older_than_ms`. Number removed. */
int session_table_sweep(struct session_table *t, int64_t older_than_ms);
/* Cancel every effect of every session (shutdown, step one). */
void session_table_cancel_all(struct session_table *t);
/* Number of running effects across sessions. */
int session_table_effects_running(struct session_table *t);

void session_ref(struct session *s);
void session_unref(struct session *s);
const char *session_id(const struct session *s);

/*
 * Stamp and apply one input, then publish and reconcile. `cause` is the
 * effect that sent it (NULL for a client). 0 with `res` filled (accepted,
 * unchanged or rejected); -EBUSY when too many inputs wait for this session;
 * -ENOENT when the session was deleted; -EIO when the log could not keep an
 * accepted input (it is then undone and not acknowledged); -ENOMEM.
 */
int session_submit(struct session *s, struct rx_input *in, const struct effect *cause,
                   struct submit_result *res) RX_WUR;

/* NEW reference: the state as JSON. NULL on ENOMEM. */
json_t *session_state_json(struct session *s);
/*
 * NEW reference: the state as of input `seq`, from the log. 0, -ENOENT,
 * -ERANGE (seq past the log), -ENOMEM, -EIO.
 */
int session_state_at(struct session *s, int64_t seq, json_t **out) RX_WUR;
/* NEW reference: [{seq, input}] after `after`, at most `limit` (<= 0: all). */
int session_history(struct session *s, int64_t after, int limit, json_t **out) RX_WUR;

/*
 * An SSE response for the session's stream: the retry line, the current
 * state, then live events. With `patch`, each later change comes as a
 * {"type":"state-patch","patch":[RFC 6902 ops]} event instead of the whole
 * state. NULL on ENOMEM.
 */
struct MHD_Response *session_subscribe(struct session *s, struct MHD_Connection *conn,
                                       bool patch);

/*
 * The stream of one assistant message: SSE (snapshot, chunks, complete or
 * stopped) when `sse`, else a JSON answer. 0 with *resp set, -ENOENT for an
 * unknown message, -ENOMEM.
 */
int session_message_response(struct session *s, const char *message_id, bool sse,
                             struct MHD_Connection *conn,
                             struct MHD_Response **resp) RX_WUR;

#endif
