/*
 * sse - Server-Sent Events fan-out. See sse.h.
 */
#include "server/sse.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* Ring slots inside the client: an idle stream needs no second allocation. */
#define RING_INLINE 4

struct sse_client {
    struct sse_client *prev, *next;   /* in ch->clients: g_lock and its channel lock */
    struct sse_client *gprev, *gnext; /* in the process-wide list: g_lock */
    struct sse_channel *ch;           /* NULL once detached: g_lock and channel lock */
    struct MHD_Connection *conn;
    pthread_mutex_t lock;    /* guards everything below */
    struct sse_frame **ring; /* inline_ring, or a heap array once it grew */
    size_t head, count, cap; /* cap: a power of two */
    size_t max_frames;       /* the frame bound: ch->queue_max + the first frames */
    size_t bytes;            /* of the frames queued (the first one whole) */
    size_t max_bytes;        /* the byte bound, from the channel at subscribe */
    size_t offset;           /* bytes of ring[head] already written */
    bool suspended;
    bool closed;  /* end the stream once the queue is drained */
    bool dropped; /* overflowed or gone: end it now */
    int refs;     /* the channel's and the response's */
    struct sse_frame *inline_ring[RING_INLINE];
};

/* Guards g_clients and every channel's membership (with the channel's lock). */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sse_client *g_clients;
static long g_open, g_dropped;
static bool g_closing; /* shutdown: every new stream ends after its first frames */

/*
 * Channel locks are striped: a channel's lock is one of CH_LOCKS picked by its
 * address, so a channel (two in every session) costs no mutex of its own, and
 * publishes to different channels rarely wait for each other. Nobody holds
 * two of them at once.
 */
#define CH_LOCKS 64
static pthread_mutex_t g_ch_locks[CH_LOCKS];
static pthread_once_t g_ch_locks_once = PTHREAD_ONCE_INIT;

static void ch_locks_init(void)
{
    for (size_t i = 0; i < CH_LOCKS; i++)
        pthread_mutex_init(&g_ch_locks[i], NULL);
}

static pthread_mutex_t *ch_lock(const struct sse_channel *ch)
{
    uintptr_t a = (uintptr_t)ch;

    return &g_ch_locks[(a >> 4 ^ a >> 10) % CH_LOCKS];
}

/* ---- frames -------------------------------------------------------------- */

static struct sse_frame *frame_alloc(size_t len)
{
    struct sse_frame *f = malloc(sizeof(*f) + len + 1);

    if (!f)
        return NULL;
    f->refs = 1;
    f->len = len;
    return f;
}

struct sse_frame *sse_frame_event(int64_t id, const char *json, size_t len)
{
    char head[48];
    int n = id >= 0 ? snprintf(head, sizeof(head), "id: %" PRId64 "\ndata: ", id)
                    : snprintf(head, sizeof(head), "data: ");
    struct sse_frame *f = frame_alloc((size_t)n + len + 2);

    if (!f)
        return NULL;
    memcpy(f->data, head, (size_t)n);
    /* Compact JSON has no raw newlines, so one data line holds it. */
    memcpy(f->data + n, json, len);
    memcpy(f->data + n + len, "\n\n", 3);
    return f;
}

struct sse_frame *sse_frame_raw(const char *text, size_t len)
{
    struct sse_frame *f = frame_alloc(len);

    if (!f)
        return NULL;
    memcpy(f->data, text, len);
    f->data[len] = '\0';
    return f;
}

struct sse_frame *sse_retry_frame(int retry_ms)
{
    char buf[32];
    int n = snprintf(buf, sizeof(buf), "retry: %d\n\n", retry_ms);

    return sse_frame_raw(buf, (size_t)n);
}

struct sse_frame *sse_frame_ref(struct sse_frame *f)
{
    __atomic_add_fetch(&f->refs, 1, __ATOMIC_RELAXED);
    return f;
}

void sse_frame_unref(struct sse_frame *f)
{
    if (f && __atomic_sub_fetch(&f->refs, 1, __ATOMIC_ACQ_REL) == 0)
        free(f);
}

/* ---- clients ------------------------------------------------------------- */

static void client_clear_queue(struct sse_client *c)
{
    while (c->count) {
        sse_frame_unref(c->ring[c->head]);
        c->head = (c->head + 1) & (c->cap - 1);
        c->count--;
    }
    c->bytes = 0;
    c->offset = 0;
}

/* Called with c->lock held. */
static void client_wake(struct sse_client *c)
{
    if (c->suspended) {
        c->suspended = false;
        MHD_resume_connection(c->conn);
    }
}

/* c->lock held: room for `want` frames in the ring (doubling). 0 or -ENOMEM. */
static int client_reserve(struct sse_client *c, size_t want)
{
    struct sse_frame **ring;
    size_t cap = c->cap;

    if (want <= cap)
        return 0;
    while (cap < want)
        cap *= 2;
    ring = malloc(cap * sizeof(*ring));
    if (!ring)
        return -ENOMEM;
    /* Unwrap: the queue starts at slot 0 of the new ring. */
    for (size_t i = 0; i < c->count; i++)
        ring[i] = c->ring[(c->head + i) & (c->cap - 1)];
    if (c->ring != c->inline_ring)
        free(c->ring);
    c->ring = ring;
    c->cap = cap;
    c->head = 0;
    return 0;
}

/*
 * c->lock held: queue f[0..n) whole, or nothing. `bounded`: refuse (-ENOSPC)
 * past the frame bound, or past the byte bound unless the queue is empty (a
 * client that keeps up gets even an event larger than the bound). -ENOMEM
 * when the ring cannot grow.
 */
static int client_push_n(struct sse_client *c, struct sse_frame *const *f, size_t n,
                         bool bounded)
{
    size_t need = 0;
    int err;

    for (size_t i = 0; i < n; i++)
        need += f[i]->len;
    if (bounded &&
        (c->count + n > c->max_frames || (c->count && c->bytes + need > c->max_bytes)))
        return -ENOSPC;
    if ((err = client_reserve(c, c->count + n)))
        return err;
    for (size_t i = 0; i < n; i++)
        c->ring[(c->head + c->count++) & (c->cap - 1)] = sse_frame_ref(f[i]);
    c->bytes += need;
    return 0;
}

static void client_unref(struct sse_client *c)
{
    if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL))
        return;
    client_clear_queue(c);
    if (c->ring != c->inline_ring)
        free(c->ring);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* g_lock and the channel's lock held: the channel lets go of the client. */
static void client_detach_locked(struct sse_client *c)
{
    struct sse_channel *ch = c->ch;

    if (c->prev)
        c->prev->next = c->next;
    else
        ch->clients = c->next;
    if (c->next)
        c->next->prev = c->prev;
    __atomic_store_n(&ch->n_clients, ch->n_clients - 1, __ATOMIC_RELAXED);
    c->ch = NULL;
    c->prev = c->next = NULL;
    client_unref(c);
}

/* g_lock held (so c->ch is stable): the channel lets go of the client. */
static void client_detach(struct sse_client *c)
{
    struct sse_channel *ch = c->ch;

    if (!ch)
        return;
    pthread_mutex_lock(ch_lock(ch));
    client_detach_locked(c);
    pthread_mutex_unlock(ch_lock(ch));
}

/* g_lock held: end the stream after what is queued, and let the channel go. */
static void client_end(struct sse_client *c)
{
    pthread_mutex_lock(&c->lock);
    c->closed = true;
    client_wake(c);
    pthread_mutex_unlock(&c->lock);
    client_detach(c);
}

static ssize_t client_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct sse_client *c = cls;
    size_t n = 0;
    ssize_t rc;

    (void)pos;
    pthread_mutex_lock(&c->lock);
    if (c->dropped) {
        rc = MHD_CONTENT_READER_END_WITH_ERROR;
        goto out_unlock;
    }
    /* Every frame that fits goes out in this one write. */
    while (c->count && n < max) {
        struct sse_frame *f = c->ring[c->head];
        size_t take = f->len - c->offset;

        if (take > max - n)
            take = max - n;
        memcpy(buf + n, f->data + c->offset, take);
        n += take;
        c->offset += take;
        if (c->offset == f->len) {
            c->bytes -= f->len;
            sse_frame_unref(f);
            c->head = (c->head + 1) & (c->cap - 1);
            c->count--;
            c->offset = 0;
        }
    }
    if (n) {
        rc = (ssize_t)n;
    } else if (c->closed) {
        rc = MHD_CONTENT_READER_END_OF_STREAM;
    } else {
        /* Nothing to send: sleep until a publish resumes us. Suspending under
           c->lock means a publisher's resume always comes after it. */
        c->suspended = true;
        MHD_suspend_connection(c->conn);
        rc = 0;
    }
out_unlock:
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* The response is gone (connection closed or finished). */
static void client_free_cb(void *cls)
{
    struct sse_client *c = cls;

    pthread_mutex_lock(&g_lock);
    client_detach(c);
    if (c->gprev)
        c->gprev->gnext = c->gnext;
    else
        g_clients = c->gnext;
    if (c->gnext)
        c->gnext->gprev = c->gprev;
    __atomic_sub_fetch(&g_open, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&g_lock);
    client_unref(c);
}

/* The socket of a client's connection, or -1. */
static int client_fd(struct sse_client *c)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(c->conn, MHD_CONNECTION_INFO_CONNECTION_FD);

    return info ? info->connect_fd : -1;
}

/* c->lock held, c suspended (MHD leaves its socket alone): has the peer gone? */
static bool client_peer_gone(struct sse_client *c)
{
    int fd = client_fd(c);
    char byte;
    ssize_t n;

    if (fd < 0)
        return false;
    n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/*
 * c->lock held: end a client now, not after its queue (it overflowed, or its
 * peer is gone). Its frames are let go at once: a dropped client holds no
 * memory. A peer that stopped reading would keep its connection slot until
 * it read again: MHD calls the reader only when the socket takes data.
 * shutdown() (never close: the descriptor stays MHD's) makes the next write
 * fail at once.
 */
static void client_drop(struct sse_client *c)
{
    int fd = client_fd(c);

    c->dropped = true;
    client_clear_queue(c);
    if (fd >= 0)
        shutdown(fd, SHUT_RDWR);
    client_wake(c);
}

/* ---- channels ------------------------------------------------------------ */

void sse_channel_init(struct sse_channel *ch, size_t queue_max)
{
    pthread_once(&g_ch_locks_once, ch_locks_init);
    ch->clients = NULL;
    ch->n_clients = 0;
    ch->queue_max = queue_max ? queue_max : 1;
    ch->queue_bytes = SSE_QUEUE_BYTES_DEFAULT;
}

void sse_channel_set_queue_bytes(struct sse_channel *ch, size_t bytes)
{
    __atomic_store_n(&ch->queue_bytes, bytes ? bytes : 1, __ATOMIC_RELAXED);
}

void sse_channel_close_all(struct sse_channel *ch)
{
    pthread_mutex_lock(&g_lock);
    while (ch->clients)
        client_end(ch->clients);
    pthread_mutex_unlock(&g_lock);
}

bool sse_channel_has_clients(struct sse_channel *ch)
{
    return __atomic_load_n(&ch->n_clients, __ATOMIC_RELAXED) > 0;
}

void sse_channel_release(struct sse_channel *ch)
{
    sse_channel_close_all(ch);
}

/* The clients a publish dropped leave the channel (membership needs g_lock). */
static void channel_detach_dropped(struct sse_channel *ch)
{
    struct sse_client *c, *next;

    pthread_mutex_lock(&g_lock);
    pthread_mutex_lock(ch_lock(ch));
    for (c = ch->clients; c; c = next) {
        bool dropped;

        next = c->next;
        pthread_mutex_lock(&c->lock);
        dropped = c->dropped;
        pthread_mutex_unlock(&c->lock);
        if (dropped)
            client_detach_locked(c);
    }
    pthread_mutex_unlock(ch_lock(ch));
    pthread_mutex_unlock(&g_lock);
}

/*
 * The hot path: only this channel's lock, then each client's for a few
 * pointer stores. A client already awake (its reader will find the frames)
 * is not woken again; a suspended one is resumed after its lock is let go,
 * which is safe: it stays suspended, so MHD cannot free it, until resumed.
 */
void sse_channel_publish_n(struct sse_channel *ch, struct sse_frame *const *f, size_t n)
{
    struct sse_client *c;
    long dropped = 0;

    pthread_mutex_lock(ch_lock(ch));
    for (c = ch->clients; c; c = c->next) {
        bool wake = false;

        pthread_mutex_lock(&c->lock);
        if (c->dropped || c->closed) {
            /* Leaving: nothing more for it. */
        } else if (client_push_n(c, f, n, true)) {
            /* Drop the laggard rather than grow memory or stall the rest. */
            client_drop(c);
            dropped++;
        } else if (c->suspended) {
            c->suspended = false;
            wake = true;
        }
        pthread_mutex_unlock(&c->lock);
        if (wake)
            MHD_resume_connection(c->conn);
    }
    pthread_mutex_unlock(ch_lock(ch));
    if (dropped) {
        __atomic_add_fetch(&g_dropped, dropped, __ATOMIC_RELAXED);
        channel_detach_dropped(ch);
    }
}

void sse_channel_publish(struct sse_channel *ch, struct sse_frame *f)
{
    sse_channel_publish_n(ch, &f, 1);
}

struct MHD_Response *sse_channel_subscribe(struct sse_channel *ch,
                                           struct MHD_Connection *conn,
                                           struct sse_frame **first, size_t n_first,
                                           bool closed)
{
    struct sse_client *c = calloc(1, sizeof(*c));
    struct MHD_Response *r;

    if (!c)
        return NULL;
    c->ring = c->inline_ring;
    c->cap = RING_INLINE;
    c->max_frames = ch->queue_max + n_first;
    c->max_bytes = __atomic_load_n(&ch->queue_bytes, __ATOMIC_RELAXED);
    if (pthread_mutex_init(&c->lock, NULL))
        goto out_free;
    c->conn = conn;
    c->closed = closed;
    /* The first frames are always taken, whatever their size. */
    if (client_push_n(c, first, n_first, false))
        goto out_destroy;
    /*
     * The block size matters only to an HTTP/1.0 peer (no chunked encoding):
     * a chunked stream is written from the connection's own buffer, so a
     * small block keeps an idle stream small.
     */
    r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, client_read, c,
                                          client_free_cb);
    if (!r)
        goto out_destroy;
    MHD_add_response_header(r, "Content-Type", "text/event-stream; charset=utf-8");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    pthread_mutex_lock(&g_lock);
    /* During shutdown no stream may stay suspended: MHD stops only after
       every connection was resumed. */
    closed = closed || g_closing;
    c->closed = closed;
    c->refs = closed ? 1 : 2;
    if (!closed) {
        pthread_mutex_lock(ch_lock(ch));
        c->ch = ch;
        c->next = ch->clients;
        if (c->next)
            c->next->prev = c;
        ch->clients = c;
        __atomic_store_n(&ch->n_clients, ch->n_clients + 1, __ATOMIC_RELAXED);
        pthread_mutex_unlock(ch_lock(ch));
    }
    c->gnext = g_clients;
    if (c->gnext)
        c->gnext->gprev = c;
    g_clients = c;
    __atomic_add_fetch(&g_open, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&g_lock);
    return r;

out_destroy:
    client_clear_queue(c);
    if (c->ring != c->inline_ring)
        free(c->ring);
    pthread_mutex_destroy(&c->lock);
out_free:
    free(c);
    return NULL;
}

/* Counters for /metrics: atomic, so reading them takes no lock. */
long sse_clients_open(void)
{
    return __atomic_load_n(&g_open, __ATOMIC_RELAXED);
}

long sse_clients_dropped(void)
{
    return __atomic_load_n(&g_dropped, __ATOMIC_RELAXED);
}

void sse_close_everything(void)
{
    pthread_mutex_lock(&g_lock);
    g_closing = true;
    for (struct sse_client *c = g_clients; c; c = c->gnext)
        client_end(c);
    pthread_mutex_unlock(&g_lock);
}

void sse_ping_everything(void)
{
    static const char ping[] = ": ping\n\n";
    struct sse_frame *f = sse_frame_raw(ping, sizeof(ping) - 1);

    if (!f)
        return;
    pthread_mutex_lock(&g_lock);
    for (struct sse_client *c = g_clients; c; c = c->gnext) {
        pthread_mutex_lock(&c->lock);
        /* A ping never drops a client: a full queue already means traffic.
           It is not held to the byte bound either (8 bytes). */
        if (!c->closed && !c->dropped && c->count < c->max_frames &&
            !client_push_n(c, &f, 1, false))
            client_wake(c);
        pthread_mutex_unlock(&c->lock);
    }
    pthread_mutex_unlock(&g_lock);
    sse_frame_unref(f);
}

long sse_reap_gone(void)
{
    struct sse_client *c;
    long n = 0;

    pthread_mutex_lock(&g_lock);
    for (c = g_clients; c; c = c->gnext) {
        bool gone;

        pthread_mutex_lock(&c->lock);
        gone = c->suspended && !c->dropped && client_peer_gone(c);
        if (gone) {
            client_drop(c); /* the reader ends the stream with an error */
            n++;
        }
        pthread_mutex_unlock(&c->lock);
        if (gone)
            client_detach(c);
    }
    pthread_mutex_unlock(&g_lock);
    return n;
}
