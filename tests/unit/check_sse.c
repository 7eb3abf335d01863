/*
 * check_sse - the SSE fan-out (server/sse, SPEC 4) through its public API:
 * frames and their references, a client's first frames then live ones (how a
 * reconnect resyncs), frames shared by every client, a queue bounded in frames
 * and in bytes that drops only the client that overflows it, and the ends of a
 * stream.
 *
 * Each test runs a real MHD daemon on 127.0.0.1 (port 0) whose one route
 * subscribes to a test channel, and speaks HTTP/1.1 to it over plain sockets,
 * so a client can also refuse to read (a stuck one). Nothing depends on the
 * wall clock: every wait is for bytes or a count, with a generous limit
 * (HANG_MS) that only turns a hang into a failure.
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "server/sse.h"

#define HANG_MS  60000
#define RETRY_MS 1000

/* ---- waiting ------------------------------------------------------------------ */

static long mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* ---- the server: one route, subscribing to one channel ------------------------- */

enum first_mode {
    FIRST_NONE,  /* live frames only */
    FIRST_STATE, /* the retry line and the "current state" (id = seq), as a session */
};

static struct test_server {
    struct MHD_Daemon *daemon;
    int port;
    struct sse_channel ch;
    /* The publisher's lock: subscribing under it makes "first frames, then live"
       atomic, as sse_channel_subscribe asks (the session's lock in the server). */
    pthread_mutex_t lock;
    int64_t seq; /* the version of the "state" the first frames carry */
    enum first_mode first;
    bool closed;    /* subscribe with closed = true (a finished message) */
    int subscribed; /* requests that got their stream */
} srv;

static struct sse_frame *state_frame(int64_t seq)
{
    char json[64];
    int n = snprintf(json, sizeof(json), "{\"type\":\"state\",\"seq\":%" PRId64 "}", seq);

    return sse_frame_event(seq, json, (size_t)n);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **req_cls)
{
    static int marker;
    struct sse_frame *first[2] = {NULL, NULL};
    struct MHD_Response *r;
    enum MHD_Result ret;
    size_t n = 0;

    (void)cls;
    (void)url;
    (void)method;
    (void)version;
    (void)upload_data;
    (void)upload_data_size;
    if (!*req_cls) {
        *req_cls = &marker;
        return MHD_YES;
    }
    pthread_mutex_lock(&srv.lock);
    /* Like the session: a Last-Event-ID is not replayed from; the current state
       comes first, then live events. */
    if (srv.first == FIRST_STATE) {
        first[n++] = sse_retry_frame(RETRY_MS);
        first[n++] = state_frame(srv.seq);
    }
    r = sse_channel_subscribe(&srv.ch, conn, first, n, srv.closed);
    if (r)
        srv.subscribed++;
    pthread_mutex_unlock(&srv.lock);
    for (size_t i = 0; i < n; i++)
        sse_frame_unref(first[i]);
    if (!r)
        return MHD_NO;
    ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

static void srv_start(size_t queue_max, enum first_mode first, bool closed)
{
    const union MHD_DaemonInfo *info;

    memset(&srv, 0, sizeof(srv));
    pthread_mutex_init(&srv.lock, NULL);
    sse_channel_init(&srv.ch, queue_max);
    srv.first = first;
    srv.closed = closed;
    srv.daemon = MHD_start_daemon(MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ITC |
                                      MHD_ALLOW_SUSPEND_RESUME,
                                  0, NULL, NULL, on_request, NULL, MHD_OPTION_END);
    ck_assert_ptr_nonnull(srv.daemon);
    info = MHD_get_daemon_info(srv.daemon, MHD_DAEMON_INFO_BIND_PORT);
    ck_assert_ptr_nonnull(info);
    srv.port = info->port;
}

static void srv_stop(void)
{
    /* MHD stops only once no connection is suspended: end every stream first. */
    sse_channel_close_all(&srv.ch);
    if (srv.daemon)
        MHD_stop_daemon(srv.daemon);
    srv.daemon = NULL;
    sse_channel_release(&srv.ch);
    pthread_mutex_destroy(&srv.lock);
}

static int subscribed(void)
{
    int n;

    pthread_mutex_lock(&srv.lock);
    n = srv.subscribed;
    pthread_mutex_unlock(&srv.lock);
    return n;
}

static void wait_subscribed(int n)
{
    long limit = mono_ms() + HANG_MS;

    while (subscribed() < n && mono_ms() < limit)
        usleep(1000);
    ck_assert_int_ge(subscribed(), n);
}

/* Publish one event frame and drop the caller's reference at once. */
static void publish(int64_t id, const char *json)
{
    struct sse_frame *f = sse_frame_event(id, json, strlen(json));

    ck_assert_ptr_nonnull(f);
    sse_channel_publish(&srv.ch, f);
    sse_frame_unref(f);
}

/* ---- the clients: HTTP/1.1 over a plain socket, chunked bodies decoded --------- */

struct peer {
    int fd;
    char *raw; /* what came over the socket */
    size_t raw_len, raw_cap, pos;
    bool head_done, chunked;
    char head[1024];
    char *body; /* the decoded body, NUL-terminated */
    size_t body_len, body_cap;
    size_t chunk_left;
    enum { AT_SIZE, AT_DATA, AT_CRLF } at;
    bool ended; /* the last chunk came: a clean end of stream */
    bool eof;   /* the server closed the connection */
};

static void grow(char **buf, size_t *cap, size_t need)
{
    if (need + 1 <= *cap)
        return;
    while (*cap < need + 1)
        *cap = *cap ? *cap * 2 : 4096;
    *buf = realloc(*buf, *cap);
    ck_assert_ptr_nonnull(*buf);
}

static void body_add(struct peer *p, const char *s, size_t n)
{
    grow(&p->body, &p->body_cap, p->body_len + n);
    memcpy(p->body + p->body_len, s, n);
    p->body_len += n;
    p->body[p->body_len] = '\0';
}

/* Decode what can be decoded of p->raw from p->pos on. */
static void peer_parse(struct peer *p)
{
    if (!p->head_done) {
        char *end = p->raw_len ? strstr(p->raw, "\r\n\r\n") : NULL;

        if (!end)
            return;
        p->pos = (size_t)(end - p->raw) + 4;
        snprintf(p->head, sizeof(p->head), "%.*s", (int)p->pos, p->raw);
        p->head_done = true;
        p->chunked = strcasestr(p->head, "\r\ntransfer-encoding: chunked\r\n") != NULL;
    }
    while (p->pos < p->raw_len && !p->ended) {
        char *crlf;

        if (!p->chunked) {
            body_add(p, p->raw + p->pos, p->raw_len - p->pos);
            p->pos = p->raw_len;
        } else if (p->at == AT_SIZE) {
            crlf = strstr(p->raw + p->pos, "\r\n");
            if (!crlf)
                return;
            p->chunk_left = strtoul(p->raw + p->pos, NULL, 16);
            p->pos = (size_t)(crlf - p->raw) + 2;
            p->at = p->chunk_left ? AT_DATA : AT_SIZE;
            p->ended = !p->chunk_left;
        } else if (p->at == AT_DATA) {
            size_t take = p->raw_len - p->pos;

            if (take > p->chunk_left)
                take = p->chunk_left;
            body_add(p, p->raw + p->pos, take);
            p->pos += take;
            p->chunk_left -= take;
            if (!p->chunk_left)
                p->at = AT_CRLF;
        } else {
            if (p->raw_len - p->pos < 2)
                return;
            p->pos += 2;
            p->at = AT_SIZE;
        }
    }
}

/* Connect and send the request; rcvbuf > 0 shrinks the socket's receive buffer. */
static void peer_open(struct peer *p, const char *extra_header, int rcvbuf)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)srv.port)};
    char req[512];
    int n;

    memset(p, 0, sizeof(*p));
    p->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(p->fd, 0);
    if (rcvbuf > 0)
        ck_assert_int_eq(
            setsockopt(p->fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf)), 0);
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    ck_assert_int_eq(connect(p->fd, (struct sockaddr *)&a, sizeof(a)), 0);
    n = snprintf(req, sizeof(req),
                 "GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 "Accept: text/event-stream\r\n%s\r\n",
                 extra_header ? extra_header : "");
    ck_assert_int_eq(write(p->fd, req, (size_t)n), n);
    body_add(p, "", 0);
}

/* Read what arrives within `ms`. */
static void peer_pump(struct peer *p, int ms)
{
    struct pollfd pfd = {.fd = p->fd, .events = POLLIN};
    ssize_t n;

    if (p->eof || poll(&pfd, 1, ms) <= 0)
        return;
    grow(&p->raw, &p->raw_cap, p->raw_len + 65536);
    n = read(p->fd, p->raw + p->raw_len, 65536);
    if (n <= 0) {
        p->eof = true;
        return;
    }
    p->raw_len += (size_t)n;
    p->raw[p->raw_len] = '\0';
    peer_parse(p);
}

/* Read until the decoded body contains `text`; false on end of stream or HANG_MS. */
static bool peer_wait_text(struct peer *p, const char *text)
{
    long limit = mono_ms() + HANG_MS;

    while (!strstr(p->body, text) && !p->eof && !p->ended && mono_ms() < limit)
        peer_pump(p, 50);
    return strstr(p->body, text) != NULL;
}

/* Read until the decoded body holds `len` bytes; false on end of stream or HANG_MS. */
static bool peer_wait_len(struct peer *p, size_t len)
{
    long limit = mono_ms() + HANG_MS;

    while (p->body_len < len && !p->eof && !p->ended && mono_ms() < limit)
        peer_pump(p, 50);
    return p->body_len >= len;
}

/* Read until the server closes the connection. */
static bool peer_wait_eof(struct peer *p)
{
    long limit = mono_ms() + HANG_MS;

    while (!p->eof && mono_ms() < limit)
        peer_pump(p, 50);
    return p->eof;
}

/* Read until the stream ends: cleanly (the last chunk) or not (the server closed
   the connection without it). Keep-alive leaves a clean end's connection open. */
static bool peer_wait_done(struct peer *p)
{
    long limit = mono_ms() + HANG_MS;

    while (!p->ended && !p->eof && mono_ms() < limit)
        peer_pump(p, 50);
    return p->ended || p->eof;
}

static void peer_close(struct peer *p)
{
    if (p->fd >= 0)
        close(p->fd);
    free(p->raw);
    free(p->body);
    p->fd = -1;
    p->raw = p->body = NULL;
}

/* The ids of the complete frames of the body, in order. Returns their number. */
static size_t peer_ids(const struct peer *p, int64_t *ids, size_t max)
{
    const char *at = p->body, *end;
    size_t n = 0;

    while ((end = strstr(at, "\n\n")) != NULL) {
        if (!strncmp(at, "id: ", 4) && n < max)
            ids[n++] = strtoll(at + 4, NULL, 10);
        at = end + 2;
    }
    return n;
}

/* "id: <id>\n": what marks frame `id` in a body. */
static const char *id_line(int64_t id)
{
    static char buf[4][40];
    static int next;
    char *b = buf[next++ % 4];

    snprintf(b, sizeof(buf[0]), "id: %" PRId64 "\n", id);
    return b;
}

/* ---- frames --------------------------------------------------------------------- */

static const struct {
    int64_t id;
    const char *json;
    const char *want;
} event_rows[] = {
    {5, "{\"type\":\"x\"}", "id: 5\ndata: {\"type\":\"x\"}\n\n"},
    {0, "{}", "id: 0\ndata: {}\n\n"},
    {-1, "{}", "data: {}\n\n"},
    {INT64_MAX, "[]", "id: 9223372036854775807\ndata: []\n\n"},
    {7, "", "id: 7\ndata: \n\n"},
};

START_TEST(test_event_frame_bytes)
{
    struct sse_frame *f = sse_frame_event(event_rows[_i].id, event_rows[_i].json,
                                          strlen(event_rows[_i].json));

    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(f->len, strlen(event_rows[_i].want));
    ck_assert_str_eq(f->data, event_rows[_i].want); /* and NUL-terminated */
    ck_assert_int_eq(f->refs, 1);
    sse_frame_unref(f);
}
END_TEST

START_TEST(test_raw_frames_and_references)
{
    struct sse_frame *ping = sse_frame_raw(": ping\n\n", 8),
                     *retry = sse_retry_frame(1500);

    ck_assert_ptr_nonnull(ping);
    ck_assert_ptr_nonnull(retry);
    ck_assert_str_eq(ping->data, ": ping\n\n");
    ck_assert_uint_eq(ping->len, 8);
    ck_assert_str_eq(retry->data, "retry: 1500\n\n");
    ck_assert_uint_eq(retry->len, strlen("retry: 1500\n\n"));
    /* A reference is the same frame, not a copy; the last unref frees it (the
       sanitizers and valgrind see a leak or a double free). */
    ck_assert_ptr_eq(sse_frame_ref(ping), ping);
    ck_assert_int_eq(ping->refs, 2);
    sse_frame_unref(ping);
    ck_assert_int_eq(ping->refs, 1);
    sse_frame_unref(ping);
    sse_frame_unref(retry);
    sse_frame_unref(NULL);
}
END_TEST

/* ---- first frames, then live ---------------------------------------------------- */

static void teardown(void)
{
    srv_stop();
}

/* A subscriber gets its first frames (the retry line, the current state), then
   the live events after them, and the SSE headers. */
START_TEST(test_first_frames_then_live)
{
    struct peer p;

    srv_start(16, FIRST_STATE, false);
    srv.seq = 7;
    peer_open(&p, NULL, 0);
    wait_subscribed(1);
    publish(8, "{\"type\":\"live\"}");
    ck_assert(peer_wait_text(&p, id_line(8)));
    ck_assert(peer_wait_text(&p, "live\"}\n\n"));
    ck_assert_str_eq(p.body, "retry: 1000\n\n"
                             "id: 7\ndata: {\"type\":\"state\",\"seq\":7}\n\n"
                             "id: 8\ndata: {\"type\":\"live\"}\n\n");
    ck_assert_msg(!strncmp(p.head, "HTTP/1.1 200", 12), "%s", p.head);
    ck_assert_ptr_nonnull(
        strcasestr(p.head, "\r\ncontent-type: text/event-stream; charset=utf-8\r\n"));
    ck_assert_ptr_nonnull(strcasestr(p.head, "\r\ncache-control: no-cache\r\n"));
    ck_assert_ptr_nonnull(strcasestr(p.head, "\r\nx-accel-buffering: no\r\n"));
    ck_assert(p.chunked);
    ck_assert(!p.ended);
    peer_close(&p);
}
END_TEST

/*
 * Reconnects while events flow. As implemented (server and this test's route
 * alike), Last-Event-ID is not replayed from: the client gets the current
 * state, then every live event after it. Subscribing under the publisher's
 * lock makes that exact: no event between the state and the first live one is
 * lost or repeated, and nothing older than the state ever follows it.
 */
#define RESYNC_CLIENTS 4
#define RESYNC_AFTER   100 /* events published once every client is in */

static void *publisher(void *arg)
{
    int after = RESYNC_AFTER;

    (void)arg;
    for (;;) {
        char json[64];
        struct sse_frame *f;
        int n;

        pthread_mutex_lock(&srv.lock);
        if (srv.subscribed >= RESYNC_CLIENTS && after-- <= 0) {
            pthread_mutex_unlock(&srv.lock);
            break;
        }
        srv.seq++;
        n = snprintf(json, sizeof(json), "{\"type\":\"input\",\"seq\":%" PRId64 "}",
                     srv.seq);
        f = sse_frame_event(srv.seq, json, (size_t)n);
        if (f)
            sse_channel_publish(&srv.ch, f);
        pthread_mutex_unlock(&srv.lock);
        sse_frame_unref(f);
        usleep(200); /* pacing only: clients connect while events flow */
    }
    sse_channel_close_all(&srv.ch);
    return NULL;
}

START_TEST(test_resync_state_then_every_live_event)
{
    struct peer p[RESYNC_CLIENTS];
    static int64_t ids[1 << 16];
    pthread_t th;
    int64_t last;

    srv_start(1 << 16, FIRST_STATE, false);
    ck_assert_int_eq(pthread_create(&th, NULL, publisher, NULL), 0);
    for (int i = 0; i < RESYNC_CLIENTS; i++) {
        peer_open(&p[i], "Last-Event-ID: 1\r\n", 0);
        wait_subscribed(i + 1);
    }
    pthread_join(th, NULL);
    last = srv.seq;
    for (int i = 0; i < RESYNC_CLIENTS; i++) {
        const char *state;
        size_t n;

        ck_assert(peer_wait_done(&p[i]));
        ck_assert_msg(p[i].ended, "client %d: no clean end", i);
        ck_assert_msg(!strncmp(p[i].body, "retry: 1000\n\nid: ", 17), "client %d: %.60s",
                      i, p[i].body);
        state = strstr(p[i].body, "\"type\":\"state\"");
        ck_assert_ptr_nonnull(state);
        n = peer_ids(&p[i], ids, sizeof(ids) / sizeof(ids[0]));
        ck_assert_uint_ge(n, RESYNC_AFTER);
        /* The state, then each later event once, in order, up to the last. */
        for (size_t k = 1; k < n; k++)
            ck_assert_msg(ids[k] == ids[k - 1] + 1,
                          "client %d: id %" PRId64 " after %" PRId64, i, ids[k],
                          ids[k - 1]);
        ck_assert_int_eq(ids[n - 1], last);
        ck_assert_ptr_null(strstr(state + 1, "\"type\":\"state\""));
        peer_close(&p[i]);
    }
}
END_TEST

/* ---- frames are shared ---------------------------------------------------------- */

/* One frame object goes to every client: each gets the same bytes, the queues
   hold references (the publisher drops its own at once), and once every client
   has it the publisher's reference is the only one left. */
START_TEST(test_frames_are_shared)
{
    struct peer p[3];
    struct sse_frame *f[2];

    srv_start(16, FIRST_NONE, false);
    for (int i = 0; i < 3; i++)
        peer_open(&p[i], NULL, 0);
    wait_subscribed(3);
    ck_assert(sse_channel_has_clients(&srv.ch));
    f[0] = sse_frame_event(1, "{\"n\":1}", 7);
    f[1] = sse_frame_event(2, "{\"n\":2}", 7);
    ck_assert_ptr_nonnull(f[0]);
    ck_assert_ptr_nonnull(f[1]);
    sse_channel_publish_n(&srv.ch, f, 2);
    sse_channel_publish(&srv.ch, f[0]); /* the same frame again */
    for (int i = 0; i < 3; i++) {
        ck_assert(peer_wait_text(&p[i],
                                 "id: 2\ndata: {\"n\":2}\n\nid: 1\ndata: {\"n\":1}\n\n"));
        ck_assert_str_eq(p[i].body, "id: 1\ndata: {\"n\":1}\n\n"
                                    "id: 2\ndata: {\"n\":2}\n\n"
                                    "id: 1\ndata: {\"n\":1}\n\n");
    }
    /* Every client wrote them out: no queue holds a reference any more. */
    ck_assert_int_eq(__atomic_load_n(&f[0]->refs, __ATOMIC_ACQUIRE), 1);
    ck_assert_int_eq(__atomic_load_n(&f[1]->refs, __ATOMIC_ACQUIRE), 1);
    sse_frame_unref(f[0]);
    sse_frame_unref(f[1]);
    /* Frames the publisher let go of at once still arrive whole. */
    publish(3, "{\"n\":3}");
    for (int i = 0; i < 3; i++) {
        ck_assert(peer_wait_text(&p[i], "id: 3\ndata: {\"n\":3}\n\n"));
        peer_close(&p[i]);
    }
}
END_TEST

/*
 * ---- a bounded queue: the laggard is dropped, the others go on ------------------
 * Two bounds, as sse.h says: queue_max frames, and queue_bytes bytes
 * (limits.sse_queue_bytes, SPEC 4).
 */

#define DROP_QUEUE      4
#define DROP_FRAME      (16 * 1024)
#define DROP_MAX_FRAMES 4096 /* far more than the socket buffers of a stuck client */

START_TEST(test_overflow_drops_only_the_laggard)
{
    static char json[DROP_FRAME + 64];
    static int64_t ids[DROP_MAX_FRAMES + 1];
    struct peer stuck, live;
    long dropped = sse_clients_dropped();
    int64_t i, last;
    size_t n;

    srv_start(DROP_QUEUE, FIRST_NONE, false);
    peer_open(&stuck, NULL, 4096); /* never reads until the end */
    peer_open(&live, NULL, 0);
    wait_subscribed(2);
    /* Publish big frames one by one; the live client reads each before the next,
       so its queue never holds more than one. The stuck one's socket fills, then
       its queue, and then it must be dropped. */
    for (i = 1; i <= DROP_MAX_FRAMES && sse_clients_dropped() == dropped; i++) {
        int len = snprintf(json, sizeof(json), "{\"i\":%" PRId64 ",\"pad\":\"", i);

        memset(json + len, 'x', DROP_FRAME);
        strcpy(json + len + DROP_FRAME, "\"}");
        publish(i, json);
        ck_assert_msg(peer_wait_text(&live, id_line(i)),
                      "live client stalled at %" PRId64, i);
    }
    ck_assert_msg(sse_clients_dropped() == dropped + 1,
                  "dropped %ld after %" PRId64 " frames", sse_clients_dropped() - dropped,
                  i - 1);
    /* The live client goes on, and still has every frame, in order. */
    last = i;
    publish(last, "{\"after\":true}");
    ck_assert(peer_wait_text(&live, "{\"after\":true}\n\n"));
    ck_assert(sse_channel_has_clients(&srv.ch));
    n = peer_ids(&live, ids, sizeof(ids) / sizeof(ids[0]));
    ck_assert_int_eq(n, last);
    for (size_t k = 0; k < n; k++)
        ck_assert_int_eq(ids[k], (int64_t)k + 1);
    ck_assert(!live.eof && !live.ended);
    /* The stuck one, read at last: what it had, then the connection closes with no
       clean end (an error, so its browser reconnects and resyncs), and nothing
       published after the drop. */
    ck_assert(peer_wait_eof(&stuck));
    ck_assert(!stuck.ended);
    ck_assert_ptr_null(strstr(stuck.body, "{\"after\":true}"));
    n = peer_ids(&stuck, ids, sizeof(ids) / sizeof(ids[0]));
    ck_assert_int_lt(n, last - 1);
    for (size_t k = 0; k < n; k++)
        ck_assert_int_eq(ids[k], (int64_t)k + 1);
    ck_assert_int_eq(sse_clients_dropped(), dropped + 1);
    peer_close(&stuck);
    peer_close(&live);
}
END_TEST

/* Frames a reference count of `f` (atomic: MHD's threads drop theirs). */
static int refs_of(struct sse_frame *f)
{
    return __atomic_load_n(&f->refs, __ATOMIC_ACQUIRE);
}

#define BYTES_FRAMES 8 /* the byte bound, in DROP_FRAME frames */

/*
 * The byte bound alone drops the laggard: the frame bound is far away
 * (DROP_MAX_FRAMES of them would not reach it), nothing waits on a clock, and
 * the stuck client is dropped as soon as one more frame would pass its bytes.
 * The same frame is published again and again, so its reference count is what
 * the queues hold: the stuck one never holds more than the bound, and once
 * dropped it holds nothing.
 */
START_TEST(test_byte_bound_drops_the_laggard)
{
    static char json[DROP_FRAME + 64];
    struct peer stuck, live;
    struct sse_frame *f;
    long dropped = sse_clients_dropped();
    int len, most = 0;
    int64_t i;

    srv_start(1 << 20, FIRST_NONE, false);
    sse_channel_set_queue_bytes(&srv.ch, BYTES_FRAMES * DROP_FRAME);
    len = snprintf(json, sizeof(json), "{\"pad\":\"");
    memset(json + len, 'x', DROP_FRAME - 32);
    strcpy(json + len + DROP_FRAME - 32, "\"}");
    f = sse_frame_event(1, json, strlen(json));
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_le(f->len, DROP_FRAME);
    peer_open(&stuck, NULL, 4096); /* never reads until the end */
    peer_open(&live, NULL, 0);
    wait_subscribed(2);
    for (i = 1; i <= DROP_MAX_FRAMES && sse_clients_dropped() == dropped; i++) {
        sse_channel_publish(&srv.ch, f);
        /* Ours, at most one in the live client's queue, and the stuck one's. */
        if (refs_of(f) > most)
            most = refs_of(f);
        ck_assert_int_le(refs_of(f), 2 + BYTES_FRAMES * DROP_FRAME / (int)f->len);
        ck_assert_msg(peer_wait_len(&live, (size_t)i * f->len),
                      "live client stalled at %" PRId64, i);
    }
    ck_assert_msg(sse_clients_dropped() == dropped + 1,
                  "dropped %ld after %" PRId64 " frames", sse_clients_dropped() - dropped,
                  i - 1);
    ck_assert_int_gt(most, 2); /* the stuck queue did fill before the drop */
    /* Dropped: its frames were let go at once; the live one has written its own. */
    ck_assert_int_eq(refs_of(f), 1);
    sse_channel_publish(&srv.ch, f);
    ck_assert(peer_wait_len(&live, (size_t)i * f->len));
    ck_assert(!live.eof && !live.ended);
    ck_assert(sse_channel_has_clients(&srv.ch));
    /* The stuck one ends with an error (no clean end), so it reconnects. */
    ck_assert(peer_wait_eof(&stuck));
    ck_assert(!stuck.ended);
    ck_assert_uint_lt(stuck.body_len, (size_t)i * f->len);
    sse_frame_unref(f);
    peer_close(&stuck);
    peer_close(&live);
}
END_TEST

/* An event larger than the byte bound still reaches a client that keeps up: a
   batch published to an empty queue is always taken. */
START_TEST(test_byte_bound_passes_a_large_event_to_an_empty_queue)
{
    static char json[DROP_FRAME + 64];
    long dropped = sse_clients_dropped();
    size_t total = 0;
    struct peer p;

    srv_start(16, FIRST_NONE, false);
    sse_channel_set_queue_bytes(&srv.ch, 1024);
    peer_open(&p, NULL, 0);
    wait_subscribed(1);
    for (int64_t i = 1; i <= 3; i++) {
        int len = snprintf(json, sizeof(json), "{\"i\":%" PRId64 ",\"pad\":\"", i);
        struct sse_frame *f;

        memset(json + len, 'y', DROP_FRAME);
        strcpy(json + len + DROP_FRAME, "\"}");
        f = sse_frame_event(i, json, strlen(json));
        ck_assert_ptr_nonnull(f);
        sse_channel_publish(&srv.ch, f);
        total += f->len;
        ck_assert(peer_wait_len(&p, total));
        ck_assert_str_eq(p.body + total - f->len, f->data);
        sse_frame_unref(f);
    }
    ck_assert_int_eq(sse_clients_dropped(), dropped);
    ck_assert(sse_channel_has_clients(&srv.ch));
    peer_close(&p);
}
END_TEST

/* ---- the ends of a stream ------------------------------------------------------- */

/* close_all ends every stream cleanly after what is queued; the channel is empty
   after it, and the open-stream count goes back once the connections are gone. */
START_TEST(test_close_all_ends_after_the_queue)
{
    struct peer p[2];
    long open_before = sse_clients_open(), limit;

    srv_start(16, FIRST_NONE, false);
    ck_assert(!sse_channel_has_clients(&srv.ch));
    peer_open(&p[0], NULL, 0);
    peer_open(&p[1], NULL, 0);
    wait_subscribed(2);
    ck_assert(sse_channel_has_clients(&srv.ch));
    ck_assert_int_eq(sse_clients_open(), open_before + 2);
    publish(1, "{\"last\":1}");
    sse_channel_close_all(&srv.ch);
    ck_assert(!sse_channel_has_clients(&srv.ch));
    publish(2, "{\"nobody\":2}"); /* no client left: goes nowhere */
    for (int i = 0; i < 2; i++) {
        ck_assert(peer_wait_done(&p[i]));
        ck_assert_msg(p[i].ended, "client %d: no clean end", i);
        ck_assert_str_eq(p[i].body, "id: 1\ndata: {\"last\":1}\n\n");
        peer_close(&p[i]);
    }
    limit = mono_ms() + HANG_MS;
    while (sse_clients_open() != open_before && mono_ms() < limit)
        usleep(1000);
    ck_assert_int_eq(sse_clients_open(), open_before);
}
END_TEST

/* A closed subscription (a finished message) gets its first frames, a clean end,
   and never joins the channel. */
START_TEST(test_closed_subscription)
{
    struct peer p;

    srv_start(16, FIRST_STATE, true);
    srv.seq = 3;
    peer_open(&p, NULL, 0);
    wait_subscribed(1);
    ck_assert(!sse_channel_has_clients(&srv.ch));
    publish(4, "{\"late\":4}");
    ck_assert(peer_wait_done(&p));
    ck_assert(p.ended);
    ck_assert_str_eq(p.body,
                     "retry: 1000\n\nid: 3\ndata: {\"type\":\"state\",\"seq\":3}\n\n");
    peer_close(&p);
}
END_TEST

Suite *sse_suite(void);
Suite *sse_suite(void)
{
    Suite *s = suite_create("sse");
    TCase *frames = tcase_create("frames");
    TCase *stream = tcase_create("stream");
    TCase *queue = tcase_create("bounded-queue");
    TCase *end = tcase_create("end");

    tcase_add_loop_test(frames, test_event_frame_bytes, 0,
                        sizeof(event_rows) / sizeof(event_rows[0]));
    tcase_add_test(frames, test_raw_frames_and_references);
    suite_add_tcase(s, frames);

    tcase_add_checked_fixture(stream, NULL, teardown);
    tcase_set_timeout(stream, 2 * HANG_MS / 1000);
    tcase_add_test(stream, test_first_frames_then_live);
    tcase_add_test(stream, test_resync_state_then_every_live_event);
    tcase_add_test(stream, test_frames_are_shared);
    suite_add_tcase(s, stream);

    tcase_add_checked_fixture(queue, NULL, teardown);
    tcase_set_timeout(queue, 2 * HANG_MS / 1000);
    tcase_add_test(queue, test_overflow_drops_only_the_laggard);
    tcase_add_test(queue, test_byte_bound_drops_the_laggard);
    tcase_add_test(queue, test_byte_bound_passes_a_large_event_to_an_empty_queue);
    suite_add_tcase(s, queue);

    tcase_add_checked_fixture(end, NULL, teardown);
    tcase_set_timeout(end, 2 * HANG_MS / 1000);
    tcase_add_test(end, test_close_all_ends_after_the_queue);
    tcase_add_test(end, test_closed_subscription);
    suite_add_tcase(s, end);
    return s;
}
