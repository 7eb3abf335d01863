/*
 * event - every event the server streams, encoded in one place.
 *
 * The session stream carries `state-updated`, `input-received`,
 * `state-patch` and `effect-*` events (SPEC section 4, id = the input's seq);
 * a message stream carries `snapshot`, `chunk`, `complete` and `stopped`
 * (id = the text length so far, so a reconnecting reader knows where it is);
 * the sessions feed (GET .../events) carries `session-created`,
 * `session-updated` and `session-deleted` (no id: it replays nothing).
 * Each is encoded once into a shared sse_frame. Also the JSON answer for a
 * message to a client that does not want SSE.
 *
 * Depends on state_machine/ (encoders) and server/sse (frames); no locks:
 * callers hold the session's lock while the state is read.
 * Ownership: the state, input and outcome are borrowed; `scratch` is the
 * caller's reusable buffer (its contents are overwritten). Every frame
 * returned is a NEW reference (sse_frame_unref), NULL on ENOMEM or a body
 * over the scratch buffer's bound.
 */
#ifndef EVENT_H
#define EVENT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "state_machine/rx_buf.h"
#include "state_machine/rx_machine.h"
#include "state_machine/rx_state.h"

struct sse_frame;

/* {"type":"state-updated","state":{...}} */
struct sse_frame *event_state(const struct rx_state *st, int64_t seq,
                              struct rx_buf *scratch);
/* {"type":"input-received","input":{...}} */
struct sse_frame *event_input(const struct rx_input *in, int64_t seq,
                              struct rx_buf *scratch);
/* {"type":"state-patch","patch":[RFC 6902 ops]}: what `o` did to `st`. */
struct sse_frame *event_patch(const struct rx_state *st, const struct rx_outcome *o,
                              int64_t seq, struct rx_buf *scratch);
/* {"type":<effect-started|-completed|-canceled|-failed>,"key":<key>} */
struct sse_frame *event_effect(const char *type, const char *key, int64_t seq,
                               struct rx_buf *scratch);
/*
 * {"type":<type>,<field>:<text>} on a message stream, id = `len`: type
 * "snapshot"/"complete"/"stopped" with field "content", "chunk" with "delta".
 * `text` is `len` bytes of UTF-8. Uses its own buffer.
 */
struct sse_frame *event_message(const char *type, const char *field, const char *text,
                                size_t len, int64_t id);
/* One session as GET .../sessions lists it; the strings are borrowed. */
struct event_session {
    const char *id;
    int64_t created_at;
    int64_t updated_at;
    const char *title;
    int64_t message_count;
};

/*
 * {"type":<type>,"id","createdAt","updatedAt","title","messageCount"} on the
 * sessions feed: "session-created" or "session-updated". Uses its own buffer.
 */
struct sse_frame *event_session(const char *type, const struct event_session *e);
/* {"type":"session-deleted","id":<id>} on the sessions feed. */
struct sse_frame *event_session_deleted(const char *id);
/* NEW reference: the list entry {id, createdAt, updatedAt, title, messageCount}. */
json_t *event_session_json(const struct event_session *e);

/* NEW reference: {"messageId","content","status","isComplete"}; NULL on ENOMEM. */
json_t *event_message_json(const char *id, const char *content, const char *status);

#endif
