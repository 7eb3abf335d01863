/*
 * msgstream - the text of one streaming assistant message, and the clients
 * that follow it (SPEC section 4, "GET .../messages/:mid").
 *
 * Streaming text never enters the state (seed principle): each answer being
 * streamed has a buffer here until its message completes or stops in the
 * state; then its followers get the final frame and the stream is freed.
 * A model's reasoning streams beside the text: `reasoning` frames live, kept
 * here until the message completes (then the state's message holds it), so a
 * late follower's `snapshot` carries it too.
 * A session keeps its streams in a singly linked list.
 *
 * Depends on state_machine/ (the state tells when a message settles),
 * server/event (frames) and server/sse (channels). No locks of its own: every
 * call is made under the owning session's lock.
 * Ownership: the list owns its streams; strings are copied in.
 */
#ifndef MSGSTREAM_H
#define MSGSTREAM_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "server/sse.h"
#include "state_machine/rx_buf.h"
#include "state_machine/rx_common.h"
#include "state_machine/rx_state.h"

struct msgstream {
    struct msgstream *next;
    char *id;
    struct rx_buf text;      /* what has streamed so far */
    struct rx_buf reasoning; /* the reasoning streamed so far (same bound) */
    bool over_logged;        /* the bound was passed and said so in the log, once */
    /* A cluster's owner relays the text to other nodes once the answer's start
       is in the log (seq open_seq): the bytes relayed so far, text and reasoning. */
    int64_t open_seq;
    size_t relayed[2];
    /* What the brain streamed (text, reasoning) since the answer (re)started:
       where its next delta goes (msgstream_append_at). */
    size_t streamed[2];
    /*
     * Durable text (SPEC 3.7): the bytes of `text` handed to the store so
     * far (the next batch starts there; set back when a batch failed), and
     * when the last batch went (monotonic ms).
     */
    size_t saved;
    int64_t saved_ms;
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
 * Append reasoning `delta` and send it to the followers as
 * {"type":"reasoning","delta":...} (id: the text's length, as chunks have).
 * 0, -E2BIG or -ENOMEM.
 */
int msgstream_append_reasoning(struct msgstream *m, const char *delta) RX_WUR;
/*
 * `delta` (n bytes) at byte `offset` of the answer's text (or its
 * reasoning): what of it lies past what the buffer holds is appended and
 * sent, so an answer streamed again from its start (a new owner resumes it)
 * or relayed from another node adds only what is new; a gap (offset past
 * the buffer) is dropped. 0, -E2BIG or -ENOMEM.
 */
int msgstream_append_at(struct msgstream *m, bool reasoning, size_t offset,
                        const char *delta, size_t n) RX_WUR;
/*
 * The text the store kept of this answer (`text`, n bytes: store_stream_text
 * after a restart or a takeover) back into the buffer: what lies past the
 * buffer is appended and sent as a chunk (a follower that had less gets the
 * rest), and it counts as saved, so it is not written again. 0, -E2BIG or
 * -ENOMEM.
 */
int msgstream_load(struct msgstream *m, const char *text, size_t n) RX_WUR;

/*
 * NEW frame {"type":"snapshot","content":...,"reasoning":...} ("reasoning"
 * only when there is some), id = the content's length: from `m`'s buffers
 * when it streams, else from the state's message `msg`. NULL on ENOMEM.
 */
struct sse_frame *msgstream_snapshot(const struct msgstream *m,
                                     const struct rx_message *msg);
/*
 * NEW reference: the JSON answer for a client that does not want SSE
 * (event_message_json, plus "reasoning" when there is some), from `m` when
 * it streams, else from `msg`. NULL on ENOMEM.
 */
json_t *msgstream_json(const char *id, const struct msgstream *m,
                       const struct rx_message *msg);
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
