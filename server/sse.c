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

struct sse_client {
    struct sse_client *prev, *next;   /* in ch->clients */
    struct sse_client *gprev, *gnext; /* in the process-wide list */
    struct sse_channel *ch;           /* NULL once detached */
    struct MHD_Connection *conn;
    pthread_mutex_t lock; /* guards everything below */
    struct sse_frame **ring;
    size_t head, count, cap;
    size_t offset; /* bytes of ring[head] already written */
    bool suspended;
    bool closed;  /* end the stream once the queue is drained */
    bool dropped; /* overflowed: end it now */
    int refs;     /* the channel's and the response's */
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sse_client *g_clients;
static long g_open, g_dropped;
static bool g_closing; /* shutdown: every new stream ends after its first frames */

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
        c->head = (c->head + 1) % c->cap;
        c->count--;
    }
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

/* Called with c->lock held. false: the queue is full. */
static bool client_push(struct sse_client *c, struct sse_frame *f)
{
    if (c->count == c->cap)
        return false;
    c->ring[(c->head + c->count) % c->cap] = sse_frame_ref(f);
    c->count++;
    return true;
}

static void client_unref(struct sse_client *c)
{
    if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL))
        return;
    client_clear_queue(c);
    free(c->ring);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* Called with g_lock held: the channel lets go of the client. */
static void client_detach(struct sse_client *c)
{
    struct sse_channel *ch = c->ch;

    if (!ch)
        return;
    if (c->prev)
        c->prev->next = c->next;
    else
        ch->clients = c->next;
    if (c->next)
        c->next->prev = c->prev;
    ch->n_clients--;
    c->ch = NULL;
    c->prev = c->next = NULL;
    client_unref(c);
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
    while (c->count && n < max) {
        struct sse_frame *f = c->ring[c->head];
        size_t take = f->len - c->offset;

        if (take > max - n)
            take = max - n;
        memcpy(buf + n, f->data + c->offset, take);
        n += take;
        c->offset += take;
        if (c->offset == f->len) {
            sse_frame_unref(f);
            c->head = (c->head + 1) % c->cap;
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
 * peer is gone). A peer that stopped reading would keep its connection slot
 * until it read again: MHD calls the reader only when the socket takes data.
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
    ch->clients = NULL;
    ch->n_clients = 0;
    ch->queue_max = queue_max ? queue_max : 1;
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
    bool any;

    pthread_mutex_lock(&g_lock);
    any = ch->n_clients > 0;
    pthread_mutex_unlock(&g_lock);
    return any;
}

void sse_channel_release(struct sse_channel *ch)
{
    sse_channel_close_all(ch);
}

void sse_channel_publish_n(struct sse_channel *ch, struct sse_frame *const *f, size_t n)
{
    struct sse_client *c, *next;

    pthread_mutex_lock(&g_lock);
    for (c = ch->clients; c; c = next) {
        bool ok = true;

        next = c->next;
        pthread_mutex_lock(&c->lock);
        for (size_t i = 0; i < n && ok && !c->closed; i++)
            ok = client_push(c, f[i]);
        if (!ok) {
            /* Drop the laggard rather than grow memory or stall the rest. */
            client_drop(c);
            __atomic_add_fetch(&g_dropped, 1, __ATOMIC_RELAXED);
        } else {
            client_wake(c);
        }
        pthread_mutex_unlock(&c->lock);
        if (!ok)
            client_detach(c);
    }
    pthread_mutex_unlock(&g_lock);
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
    c->cap = ch->queue_max + n_first;
    c->ring = calloc(c->cap, sizeof(*c->ring));
    if (!c->ring || pthread_mutex_init(&c->lock, NULL))
        goto out_free;
    c->conn = conn;
    c->closed = closed;
    for (size_t i = 0; i < n_first; i++)
        client_push(c, first[i]);
    r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, client_read, c,
                                          client_free_cb);
    if (!r) {
        client_clear_queue(c);
        pthread_mutex_destroy(&c->lock);
        goto out_free;
    }
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
        c->ch = ch;
        c->next = ch->clients;
        if (c->next)
            c->next->prev = c;
        ch->clients = c;
        ch->n_clients++;
    }
    c->gnext = g_clients;
    if (c->gnext)
        c->gnext->gprev = c;
    g_clients = c;
    __atomic_add_fetch(&g_open, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&g_lock);
    return r;

out_free:
    free(c->ring);
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
        /* A ping never drops a client: a full queue already means traffic. */
        if (!c->closed && client_push(c, f))
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
