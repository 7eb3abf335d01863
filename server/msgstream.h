/*
 * msgstream - the text of one streaming assistant message, and the clients
 * that follow it (SPEC section 4, "GET .../messages/:mid").
 *
 * Streaming text never enters the state (seed principle): each answer being
 * streamed has a buffer here until its message completes or stops in the
 * state; then its followers get the final frame and the stream is freed.
 * A session keeps its streams in a singly linked list.
 *
 * Depends on state_machine/ (the state tells when a message settles),
 * server/event (frames) and server/sse (channels). No locks of its own: every
 * call is made under the owning session's lock.
 * Ownership: the list owns its streams; strings are copied in.
 */
#ifndef MSGSTREAM_H
#define MSGSTREAM_H

#include <stddef.h>

#include "server/sse.h"
#include "state_machine/rx_buf.h"
#include "state_machine/rx_common.h"
#include "state_machine/rx_state.h"

struct msgstream {
    struct msgstream *next;
    char *id;
    struct rx_buf text; /* what has streamed so far */
    struct sse_channel ch;
};

/* The stream of message `id` in the list, or NULL. */
struct msgstream *msgstream_find(struct msgstream *head, const char *id);
/*
 * Add a stream for `id` at the head of the list: its text bounded by
 * `text_max` bytes, each follower's queue by `queue_max` frames. NULL on ENOMEM.
 */
struct msgstream *msgstream_open(struct msgstream **head, const char *id, size_t text_max,
                                 size_t queue_max) RX_WUR;
/* Append `delta` and send it to the followers as a chunk. 0, -E2BIG or -ENOMEM. */
int msgstream_append(struct msgstream *m, const char *delta) RX_WUR;
/*
 * Finish the streams whose message no longer streams in `st`: followers get
 * a `complete` or `stopped` frame with the final content, and the stream is
 * freed (also when the message is gone from the state).
 */
void msgstream_settle(struct msgstream **head, const struct rx_state *st);
/* The session is gone: every follower gets `stopped` with the text so far, then
   its stream ends. */
void msgstream_close_all(struct msgstream *head);
/* Free every stream of the list; *head becomes NULL. */
void msgstream_free_all(struct msgstream **head);

#endif
