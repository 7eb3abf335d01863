/*
 * session - one Reflexor machine served over HTTP: its state, the effect
 * runtime that acts on it, its SSE channels and the buffers of the answers
 * that are streaming (server/msgstream). The table of sessions is
 * server/session_table.
 *
 * The submit pipeline: session_submit_start() stamps and applies under the
 * session's lock, whoever the input comes from (HTTP or an effect), so
 * effects never go "deaf" and the order is the arrival order; then, with a
 * log, it queues the input to the store and returns without waiting. The
 * input is published, answered and reconciled once it is durable, by the
 * store's notifier thread, in log order (group commit, SPEC 6). The path of
 * one input is drawn in docs/ARCHITECTURE.md.
 *
 * Depends on state_machine/, effects/runtime, store/store, server/event and
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

/* session_submit_start's answer when it comes later, through `done`. */
#define SESSION_PENDING 1

/*
 * How an input that had to wait for the log is answered: `err` and `res` as
 * session_submit gives them (res is borrowed for the call). Called once, on
 * the store's notifier thread, with no lock held, in the session's log order.
 */
typedef void (*session_done_fn)(void *arg, int err, const struct submit_result *res);

/*
 * Stamp and apply one input, then publish and reconcile once it is stored.
 * `cause` is the effect that sent it (NULL for a client). Answers at once
 * (done is then never called): 0 with `res` filled (accepted, unchanged or
 * rejected: with no log, or with nothing else on its way); -EBUSY when too
 * many inputs wait for this session; -ENOENT when the session was deleted;
 * -ECANCELED when `cause` was cancelled; -ENOMEM. Or SESSION_PENDING: the
 * answer comes through done(arg, err, res), once every input applied before
 * it is answered and it is itself durable (0 and `res` as above), or not:
 * -ENOSPC (no room), -EIO (the store is unusable), -ENOENT, -ENOMEM, as the
 * store said for it or for an input applied before it; the state is then put
 * back as the log has it, and nothing of it was acknowledged or published.
 * `in` is borrowed for the call only (it may fill messageId, timestamp,
 * partials). A client may wait here, within one commit, while the session
 * settles for a reader or an effect's input.
 */
int session_submit_start(struct session *s, struct rx_input *in,
                         const struct effect *cause, struct submit_result *res,
                         session_done_fn done, void *arg) RX_WUR;
/*
 * session_submit_start and wait for the answer: 0 with `res` filled, or one
 * of the errors above. For effects, which have a thread to wait on.
 */
int session_submit(struct session *s, struct rx_input *in, const struct effect *cause,
                   struct submit_result *res) RX_WUR;

/*
 * Append the current state, encoded as GET /sessions/<sid> answers it, to
 * `out` (the caller's buffer; rx_buf_take hands the bytes on without a copy).
 * 0, -ENOMEM or -E2BIG (past out's bound); on error `out` is unchanged.
 */
int session_state_encode(struct session *s, struct rx_buf *out) RX_WUR;
/*
 * NEW reference: the state as of input `seq`, from the log. 0, -ENOENT,
 * -ERANGE (seq past the log), -ENOSYS (no log), -ENOMEM, -EIO.
 */
int session_state_at(struct session *s, int64_t seq, json_t **out) RX_WUR;
/*
 * Append to `out` the JSON text [{seq, input}] of the inputs after `after`,
 * at most `limit` (<= 0: no count limit; pages stop at STORE_HISTORY_PAGE_MAX
 * bytes anyway), read without the session's lock or the store's write lock.
 * 0, -ENOENT, -ENOSYS (no log), -EPROTO, -ENOMEM, -EIO.
 */
int session_history(struct session *s, int64_t after, int limit,
                    struct rx_buf *out) RX_WUR;

/*
 * session_history that also gives the seq of the page's last input in
 * *last (`after` when the page is empty), to ask for the next one.
 */
int session_history_page(struct session *s, int64_t after, int limit, struct rx_buf *out,
                         int64_t *last) RX_WUR;
/*
 * The session's title (given by a person, or from its first message): a
 * malloc'd copy in *out, NULL when it has none yet. 0 or -ENOMEM.
 */
int session_title(struct session *s, char **out) RX_WUR;

/*
 * Read the state as it is durable: fn(arg, state, seq, entry) is called once
 * with the session's lock held (everything borrowed for the call; entry is
 * the session's list entry, as GET .../sessions shows it). fn must not call
 * session_* nor block. 0, or -ENOENT for a deleted session.
 */
struct event_session;
typedef void (*session_read_fn)(void *arg, const struct rx_state *st, int64_t seq,
                                const struct event_session *entry);
int session_read(struct session *s, session_read_fn fn, void *arg) RX_WUR;

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
 * Follow one assistant message: snapshot (with the reasoning so far),
 * reasoning and chunks, then complete or stopped (at once for a finished
 * message). `from` is the SSE id the client saw last (Last-Event-ID: a byte
 * offset of the text), or -1: a client resuming a streaming message at an
 * offset the text holds gets a chunk of what follows it instead of the
 * snapshot, so its text continues exactly where it stopped (SPEC 3.7, also
 * after a restart or on another node). 0 with *out from `attach`, -ENOENT
 * for an unknown message, -ENOMEM.
 */
int session_message_subscribe(struct session *s, const char *message_id, long long from,
                              session_attach_fn attach, void *arg, void **out) RX_WUR;
/* NEW reference in *out: one message as JSON (msgstream_json: with its reasoning).
   0, -ENOENT, -ENOMEM. */
int session_message_json(struct session *s, const char *message_id, json_t **out) RX_WUR;

#endif
