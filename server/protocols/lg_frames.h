/*
 * lg_frames - the events of one LangGraph run, kept so that a client that
 * joins late or reconnects (GET .../runs/<rid>/stream, Last-Event-ID) gets
 * what it missed: every event is numbered 1, 2, 3... in order, encoded once
 * as an SSE frame `event: <name>\ndata: <json>\nid: <n>\n\n`, and kept
 * until the log passes its byte bound; then the oldest frames go (a join
 * after an id that is gone starts at the oldest kept frame).
 *
 * Depends on server/sse (frames) and state_machine/rx_buf; no locks: the
 * owner (server/protocols/lg_run) guards the log with its run's lock.
 * Invariants: frames f[start .. start+len) have ids first_id .. first_id+len-1;
 * `bytes` is the sum of their lengths; after an append, bytes <= max_bytes
 * or only the newest frame is left.
 * Ownership: struct lg_frames is caller-allocated (init/release) and holds
 * one reference to each kept frame; frames handed out are borrowed (take a
 * reference, sse_frame_ref, to keep one past the next append or release).
 */
#ifndef LG_FRAMES_H
#define LG_FRAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "state_machine/rx_common.h"

struct sse_frame;

/* The bytes of frames one run keeps for joins. */
#define LG_FRAMES_BYTES ((size_t)1 << 20)

struct lg_frames {
    struct sse_frame **f;
    size_t start, len, cap;
    size_t bytes, max_bytes;
    int64_t first_id; /* id of f[start] (the next id when empty) */
};

void lg_frames_init(struct lg_frames *fl, size_t max_bytes);
/* Drop every frame; the log is empty (ids go on from where they were). */
void lg_frames_release(struct lg_frames *fl);

/*
 * Encode and append one event (`data`: `len` bytes of JSON). 0, -ENOMEM or
 * -EINVAL (an event name with a line break); the log is unchanged on error.
 * *out (may be NULL) gets the frame, borrowed.
 */
int lg_frames_add(struct lg_frames *fl, const char *event, const char *data, size_t len,
                  struct sse_frame **out) RX_WUR;
/* The id the next frame will get. */
int64_t lg_frames_next_id(const struct lg_frames *fl);
/*
 * The kept frames with an id above `after` (borrowed, contiguous, in order):
 * *n of them, from the returned pointer. after < 0: all kept frames.
 */
struct sse_frame **lg_frames_after(const struct lg_frames *fl, int64_t after, size_t *n);

bool lg_frames_check_invariants(const struct lg_frames *fl);

#endif
