/*
 * session - one Reflexor machine served over HTTP: its state, the effect
 * runtime that acts on it, its SSE channels and the buffers of the answers
 * that are streaming (server/msgstream). The table of sessions is
 * server/session_table.
 *
 * The submit pipeline: session_submit() stamps, applies, stores, publishes
 * and reconciles under the session's lock, whoever the input comes from (HTTP
 * or an effect), so effects never go "deaf" and the order is the arrival
 * order. The path of one input is drawn in docs/ARCHITECTURE.md.
 *
 * Depends on state_machine/, effects/runtime, server/store, server/event and
 * server/sse; not on libmicrohttpd (HTTP responses are made by the caller,
 * through a session_attach_fn).
 * Ownership: sessions are refcounted (session_ref/_unref). Inputs passed to
 * session_submit are borrowed (it may fill messageId, timestamp, partials).
 */
#ifndef SESSION_H
#define SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "state_machine/rx_common.h"
#include "state_machine/rx_machine.h"

#define SESSION_ID_MAX 64

struct session;
struct effect;
struct sse_channel;
struct sse_frame;

struct submit_result {
    enum rx_verdict verdict;
    enum rx_reason reason;
    const char *field; /* for RX_REASON_INVALID */
    int64_t timestamp;
    int64_t seq;
};

void session_ref(struct session *s);
void session_unref(struct session *s);
const char *session_id(const struct session *s);

/*
 * Stamp and apply one input, then store, publish and reconcile. `cause` is
 * the effect that sent it (NULL for a client). 0 with `res` filled (accepted,
 * unchanged or rejected); -EBUSY when too many inputs wait for this session;
 * -ENOENT when the session was deleted; -ECANCELED when `cause` was
 * cancelled; -EIO when the log could not keep an accepted input (it is then
 * undone and not acknowledged); -ENOMEM.
 */
int session_submit(struct session *s, struct rx_input *in, const struct effect *cause,
                   struct submit_result *res) RX_WUR;

/* NEW reference: the state as JSON. NULL on ENOMEM. */
json_t *session_state_json(struct session *s);
/*
 * NEW reference: the state as of input `seq`, from the log. 0, -ENOENT,
 * -ERANGE (seq past the log), -ENOSYS (no log), -ENOMEM, -EIO.
 */
int session_state_at(struct session *s, int64_t seq, json_t **out) RX_WUR;
/* NEW reference: [{seq, input}] after `after`, at most `limit` (<= 0: all). */
int session_history(struct session *s, int64_t after, int limit, json_t **out) RX_WUR;

/*
 * How a caller turns a channel into a stream (server/http: an MHD response):
 * called under the session's lock, so nothing is published between the
 * `first` frames (n of them, borrowed) and the live ones; `closed` ends the
 * stream after the first frames. Returns what the caller wants back, NULL on
 * failure.
 */
typedef void *(*session_attach_fn)(void *arg, struct sse_channel *ch,
                                   struct sse_frame **first, size_t n, bool closed);

/*
 * Follow the session: the retry line, the current state, then live events.
 * With `patch`, each later change comes as a {"type":"state-patch"} event
 * instead of the whole state. What `attach` returned, or NULL on ENOMEM.
 */
void *session_subscribe(struct session *s, bool patch, session_attach_fn attach,
                        void *arg);
/*
 * Follow one assistant message: snapshot, chunks, then complete or stopped
 * (at once for a finished message). 0 with *out from `attach`, -ENOENT for an
 * unknown message, -ENOMEM.
 */
int session_message_subscribe(struct session *s, const char *message_id,
                              session_attach_fn attach, void *arg, void **out) RX_WUR;
/* NEW reference in *out: one message as JSON (event_message_json). 0, -ENOENT, -ENOMEM.
 */
int session_message_json(struct session *s, const char *message_id, json_t **out) RX_WUR;

#endif
