/*
 * sse - Server-Sent Events fan-out over libmicrohttpd.
 *
 * A channel is one stream of events (a session's moorex stream, or one
 * message's chunks). Each event is encoded once into a refcounted frame and
 * shared by every client of the channel. Each client has a queue bounded in
 * frames (queue_max) and in bytes (queue_bytes): a publish that would pass
 * either bound drops the client (its stream ends with an error, the browser
 * reconnects and resyncs), so a slow or stuck reader never stalls the others
 * and costs at most the byte bound. One exception keeps large states
 * flowing: a batch published to an empty queue is always taken, so a client
 * that keeps up gets every event even when one is larger than the bound (a
 * stuck client then holds at most max(bound, one batch)).
 *
 * Connections are suspended while their queue is empty (the reader never
 * returns 0 without suspending: that would busy-loop MHD's thread) and
 * resumed by a publish; a client that is awake is not woken again. Depends
 * on libmicrohttpd only.
 *
 * Locks, in this order: the process-wide list lock (membership: subscribe,
 * detach, the all-clients walks), a channel's lock (its client list; the
 * only one a publish takes; one of a fixed set of striped locks, so a
 * channel holds no mutex), a client's lock (its queue), then MHD (resume).
 * The reader callback takes only its client's lock.
 *
 * Ownership: frames are refcounted (sse_frame_ref/_unref); publishing takes
 * no reference from the caller. A client is owned jointly by its channel and
 * its MHD response; whichever lets go last frees it.
 */
#ifndef SSE_H
#define SSE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <microhttpd.h>

struct sse_frame {
    int refs; /* atomic */
    size_t len;
    char data[];
};

/* A frame `id: <id>\ndata: <json>\n\n` (id < 0: no id line). NULL on ENOMEM. */
struct sse_frame *sse_frame_event(int64_t id, const char *json, size_t len);
/* A raw frame (a comment, a retry line). NULL on ENOMEM. */
struct sse_frame *sse_frame_raw(const char *text, size_t len);
struct sse_frame *sse_frame_ref(struct sse_frame *f);
void sse_frame_unref(struct sse_frame *f);

struct sse_client;

/* The byte bound of a channel's client queues until sse_channel_set_queue_bytes. */
#define SSE_QUEUE_BYTES_DEFAULT ((size_t)8 << 20)

struct sse_channel {
    struct sse_client *clients; /* doubly linked; guarded by the channel's lock */
    size_t n_clients;           /* written under both locks, read atomically */
    size_t queue_max;           /* frames a client may have waiting */
    size_t queue_bytes;         /* bytes a client may have waiting (atomic) */
};

/* An empty channel; its queues hold queue_max frames, SSE_QUEUE_BYTES_DEFAULT bytes. */
void sse_channel_init(struct sse_channel *ch, size_t queue_max);
/* Ends every client's stream, then frees the channel's resources. */
void sse_channel_release(struct sse_channel *ch);
/* The byte bound of the queues of clients that subscribe from now on (0: 1 byte). */
void sse_channel_set_queue_bytes(struct sse_channel *ch, size_t bytes);

/*
 * Queue `f` to every client (the frame is shared, not copied). A client whose
 * queue would pass its bounds is dropped. Takes no reference from the caller.
 */
void sse_channel_publish(struct sse_channel *ch, struct sse_frame *f);
/*
 * Several frames at once, all or none per client: one wake-up per client
 * instead of one per frame, and the reader writes them out together.
 */
void sse_channel_publish_n(struct sse_channel *ch, struct sse_frame *const *f, size_t n);
/* End every client's stream after what is queued. */
void sse_channel_close_all(struct sse_channel *ch);
/*
 * True when the channel has a client (an event nobody reads need not be made).
 * Takes no lock: exact when called under the lock subscribers take (the
 * session's); otherwise a client that just left may still count.
 */
bool sse_channel_has_clients(struct sse_channel *ch);

/*
 * Create an MHD response streaming a new client of `ch`, with `first` frames
 * (n_first of them, borrowed) queued before any live event. The caller queues
 * the response and destroys its reference (MHD keeps it). `closed` true ends
 * the stream after the first frames (a finished message). NULL on ENOMEM.
 * To make "first frames, then live" atomic, call it under the lock the
 * publisher of `ch` holds while publishing.
 */
struct MHD_Response *sse_channel_subscribe(struct sse_channel *ch,
                                           struct MHD_Connection *conn,
                                           struct sse_frame **first, size_t n_first,
                                           bool closed);

/* Frames every client of every channel gets: the retry line and pings. */
struct sse_frame *sse_retry_frame(int retry_ms);

/* Process-wide count of open SSE clients (for /metrics). */
long sse_clients_open(void);
/* Process-wide count of clients dropped for a full queue (frames or bytes). */
long sse_clients_dropped(void);

/*
 * Every client of every channel: end them all (shutdown), or queue a ping
 * comment (keeps proxies from closing idle streams).
 */
void sse_close_everything(void);
void sse_ping_everything(void);
/*
 * End the streams whose peer went away: each idle (suspended) client's socket
 * is peeked without blocking or consuming; end of file or a socket error
 * ends the stream at once. A stream client sends nothing after its request,
 * so this costs one recv per idle stream. Returns how many were ended.
 */
long sse_reap_gone(void);

#endif
