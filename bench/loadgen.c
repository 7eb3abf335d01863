/*
 * loadgen - the load generator of bench/run.sh: one epoll loop, non-blocking
 * sockets, HTTP/1.1 keep-alive, only ever 127.0.0.1.
 *
 * One piece on purpose (past the 700 lines a file may have): a standalone
 * program the benchmarks build on its own, whose every mode below is a way
 * of driving the one connection loop; split, the loop's state would be
 * shared across files for no reader's gain.
 *
 *   loadgen post   PORT CONNS SECS SESSIONS
 *       CONNS closed-loop connections POST user-send-message inputs for SECS
 *       seconds after a 0.5 s warm-up. SESSIONS > 0: that many sessions are
 *       created first and the POSTs go round-robin over them, so no session's
 *       history grows past a few dozen messages; 0: every POST goes to a
 *       fixed path (the bare baseline answers any path). Each request is a
 *       pre-built template with a unique messageId patched in.
 *       -> post conns=.. rps=.. p50_us=.. p99_us=.. errors=.. n=..
 *   loadgen session PORT
 *       Creates one session. -> session id=..
 *   loadgen postto PORT CONNS SECS SID
 *       As `post`, every POST to the one session SID (its history grows).
 *       -> post conns=.. rps=.. p50_us=.. p99_us=.. errors=.. n=..
 *   loadgen fill   PORT CONNS N SID
 *       N user messages POSTed to session SID as fast as CONNS closed-loop
 *       connections go (answers other than 200 are retried), then the
 *       session's message count (GET /sessions).
 *       -> fill n=.. secs=.. rps=.. messages=..
 *   loadgen count  PORT SID
 *       The records of session SID's state (GET /sessions/SID): user
 *       messages, assistant messages, and those complete.
 *       -> count users=.. answers=.. complete=..
 *   loadgen fanout PORT PID SUBS RATE SECS [QUERY]
 *       SUBS streams (GET .../moorex plus QUERY, e.g. "?mode=patch") on one
 *       new session; once every one has its initial
 *       state, POSTs at RATE per second for SECS seconds (open loop, over a
 *       few keep-alive connections) and matches every input-received event
 *       to its POST by messageId.
 *       -> fanout subs=.. deliveries_per_s=.. p50_ms=.. p99_ms=.. cpu_pct=..
 *   loadgen memory PORT PID SESSIONS STREAMS
 *       VmRSS of the server idle, after SESSIONS new sessions and after
 *       STREAMS open streams on one session.
 *       -> memory idle_kb=.. session_bytes=.. stream_bytes=..
 *   loadgen relay  PORT MESSAGES
 *       For a server on the openai brain pointed at bench/fake_llm: sends a
 *       user message, follows the answer's /messages/<mid> stream and takes
 *       now - stamp for every token (the fake writes its clock in the text).
 *       -> relay tokens=.. p50_us=.. p99_us=..
 *   loadgen direct PORT MESSAGES
 *       The relay's floor: the same fake LLM read directly by this process.
 *       -> direct tokens=.. p50_us=.. p99_us=..
 *   loadgen idle   PORT PID CONNS
 *       VmRSS growth of a (bare) server per idle keep-alive connection that
 *       has served one POST: the floor under a stream's memory.
 *       -> idle idle_kb=.. conn_bytes=..
 *   loadgen stuck  PORT PID STATE_KB INPUTS
 *       A session whose state is STATE_KB (100 KB messages), one stream on it
 *       that never reads (4 KB receive buffer), then INPUTS inputs one by
 *       one: the server's RSS growth over a baseline taken once a reader that
 *       keeps up has seen two inputs (peak: VmHWM, reset at the baseline),
 *       whether the stream was dropped (it ends), and the POSTs' latency.
 *       -> stuck state_kb=.. peak_growth_kb=.. end_growth_kb=.. dropped=0|1 ..
 *   loadgen getstate PORT PID SID REPS
 *       GET /sessions/SID (the whole state) REPS times in a row: its size,
 *       time, and the server's peak (VmHWM) and lasting RSS growth.
 *       -> getstate bytes=.. p50_ms=.. max_ms=.. peak_growth_kb=.. end_growth_kb=..
 *
 * Results go to stdout as one `key=value` line; errors to stderr, exit 1.
 * Every loop is bounded in time.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define API        "/api/reflexor"
#define SID_MAX    128
#define IN_MAX     8192
#define PREFIX_MAX 512
#define WARMUP_NS  500000000LL

static int g_port;
/* "Authorization: Bearer <LOADGEN_BEARER>\r\n", or "": what every request of
   post and setup sends (a server with auth.mode keys or token). */
static char g_auth[256];

/* ---- small helpers --------------------------------------------------------- */

static int64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

static void die(const char *what)
{
    fprintf(stderr, "loadgen: %s\n", what);
    exit(1);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return (x > y) - (x < y);
}

/* Percentile p (0..100) of v[0..n), sorted in place; 0 when empty. */
static int64_t pct(int64_t *v, size_t n, double p)
{
    size_t i;

    if (!n)
        return 0;
    qsort(v, n, sizeof(*v), cmp_i64);
    i = (size_t)((double)n * p / 100.0);
    return v[i < n ? i : n - 1];
}

struct samples {
    int64_t *v;
    size_t n, cap;
};

static void samples_add(struct samples *s, int64_t x)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 4096;
        int64_t *v = realloc(s->v, cap * sizeof(*v));

        if (!v)
            die("out of memory");
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = x;
}

static void set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);

    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK))
        die("fcntl");
}

/* A TCP connection to 127.0.0.1:g_port, blocking, TCP_NODELAY. */
static int connect_local(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

    a.sin_port = htons((uint16_t)g_port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0)
        die("socket (is RLIMIT_NOFILE high enough?)");
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)))
        die("connect to 127.0.0.1");
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

static void write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);

        if (w < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (w <= 0)
            die("send");
        p += w;
        n -= (size_t)w;
    }
}

/*
 * Length of a complete Content-Length response at the start of buf[0..len),
 * with its status in *status; 0 while incomplete.
 */
static size_t response_len(const char *buf, size_t len, int *status)
{
    const char *end = memmem(buf, len, "\r\n\r\n", 4), *cl;
    size_t head, body = 0;

    if (!end)
        return 0;
    head = (size_t)(end + 4 - buf);
    cl = memmem(buf, head, "\r\nContent-Length:", 17);
    if (!cl)
        cl = memmem(buf, head, "\r\ncontent-length:", 17);
    if (cl)
        body = strtoul(cl + 17, NULL, 10);
    if (len < head + body)
        return 0;
    *status = len > 12 ? atoi(buf + 9) : 0;
    return head + body;
}

/* One blocking request on a keep-alive connection; the body goes to out. */
static int request_sync(int fd, const char *method, const char *path, const char *body,
                        char *out, size_t out_max)
{
    char buf[IN_MAX];
    size_t len = 0, n;
    int status = 0;
    int64_t deadline = now_ns() + 10000000000LL;

    n = (size_t)snprintf(
        buf, sizeof(buf),
        "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s"
        "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
        method, path, g_auth, strlen(body), body);
    write_all(fd, buf, n);
    while (!(n = response_len(buf, len, &status))) {
        ssize_t r = recv(fd, buf + len, sizeof(buf) - 1 - len, 0);

        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0 || now_ns() > deadline)
            die("setup request: no complete answer");
        len += (size_t)r;
        buf[len] = '\0';
    }
    if (out) {
        const char *b = strstr(buf, "\r\n\r\n") + 4;
        size_t blen = n - (size_t)(b - buf);

        if (blen >= out_max)
            blen = out_max - 1;
        memcpy(out, b, blen);
        out[blen] = '\0';
    }
    return status;
}

/* POST /sessions; the new id goes to sid (SID_MAX + 1 bytes). */
static void create_session(int fd, char *sid)
{
    char body[512];
    const char *p;
    size_t n;

    if (request_sync(fd, "POST", API "/sessions", "", body, sizeof(body)) != 201 ||
        !(p = strstr(body, "\"id\":\"")))
        die("cannot create a session (limits.max_sessions?)");
    p += 6;
    n = strcspn(p, "\"");
    if (n > SID_MAX)
        die("session id too long");
    memcpy(sid, p, n);
    sid[n] = '\0';
}

/* utime + stime of a process, in clock ticks. */
static long long proc_cpu_ticks(int pid)
{
    char path[64], buf[1024];
    unsigned long long ut = 0, st = 0;
    const char *p;
    FILE *f;
    size_t n;

    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    if (!(f = fopen(path, "r")))
        die("cannot read /proc/<pid>/stat");
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* Fields 14 and 15, counted after the ")" that ends the command name. */
    if (!(p = strrchr(buf, ')')) ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut,
               &st) != 2)
        die("cannot parse /proc/<pid>/stat");
    return (long long)(ut + st);
}

static long proc_rss_kb(int pid)
{
    char path[64], line[256];
    long kb = -1;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    if (!(f = fopen(path, "r")))
        die("cannot read /proc/<pid>/status");
    while (fgets(line, sizeof(line), f))
        if (!strncmp(line, "VmRSS:", 6))
            kb = strtol(line + 6, NULL, 10);
    fclose(f);
    if (kb < 0)
        die("no VmRSS");
    return kb;
}

/* A "Key:   N kB" line of /proc/<pid>/status (VmRSS, VmHWM), or -1. */
static long proc_status_kb(int pid, const char *key)
{
    char path[64], line[256];
    size_t n = strlen(key);
    long kb = -1;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    if (!(f = fopen(path, "r")))
        die("cannot read /proc/<pid>/status");
    while (fgets(line, sizeof(line), f))
        if (!strncmp(line, key, n))
            kb = strtol(line + n, NULL, 10);
    fclose(f);
    return kb;
}

/* Reset the peak RSS (VmHWM) of a process to its current RSS. False if refused. */
static bool proc_reset_hwm(int pid)
{
    char path[64];
    FILE *f;
    bool ok;

    snprintf(path, sizeof(path), "/proc/%d/clear_refs", pid);
    if (!(f = fopen(path, "w")))
        return false;
    ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok;
}

static void raise_nofile(rlim_t want)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl))
        return;
    if (rl.rlim_cur < want) {
        rl.rlim_cur = want < rl.rlim_max ? want : rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

/* ---- POST connections (keep-alive, one request in flight) ------------------ */

struct pconn {
    int fd;
    bool busy;
    char out[1024];
    size_t out_len, out_off;
    char in[IN_MAX];
    size_t in_len;
    int64_t t0;
    long tag;   /* caller's number for the request in flight */
    size_t rr;  /* round-robin position over this connection's sessions */
    int status; /* of the last answer */
};

/* A request template: bytes up to the messageId digits, ten digits, the rest. */
struct tmpl {
    char bytes[1024];
    size_t len, digits;
};

static void tmpl_build(struct tmpl *t, const char *path, const char *id_prefix)
{
    static const char fmt_body[] =
        "{\"type\":\"user-send-message\",\"messageId\":\"%s%010d\","
        "\"content\":\"hello from the benchmark\"}";
    char body[256];
    int blen = snprintf(body, sizeof(body), fmt_body, id_prefix, 0);
    const char *d;

    t->len = (size_t)snprintf(t->bytes, sizeof(t->bytes),
                              "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s"
                              "Content-Type: application/json\r\nContent-Length: %d\r\n"
                              "\r\n%s",
                              path, g_auth, blen, body);
    d = strstr(t->bytes, "\"messageId\":\"");
    t->digits = (size_t)(d - t->bytes) + 13 + strlen(id_prefix);
}

static void pconn_open(struct pconn *c, int ep)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};

    c->fd = connect_local();
    set_nonblock(c->fd);
    c->busy = false;
    c->in_len = 0;
    if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev))
        die("epoll_ctl");
}

static void pconn_flush(struct pconn *c, int ep)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};

    while (c->out_off < c->out_len) {
        ssize_t w =
            send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);

        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN) {
            ev.events = EPOLLIN | EPOLLOUT;
            epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
            return;
        }
        if (w <= 0)
            die("send on a POST connection");
        c->out_off += (size_t)w;
    }
    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
}

/* Start one request from template t with messageId number `num`. */
static void pconn_send(struct pconn *c, int ep, const struct tmpl *t, long num, long tag)
{
    char digits[16];

    memcpy(c->out, t->bytes, t->len);
    snprintf(digits, sizeof(digits), "%010ld", num % 10000000000L);
    memcpy(c->out + t->digits, digits, 10);
    c->out_len = t->len;
    c->out_off = 0;
    c->busy = true;
    c->tag = tag;
    c->t0 = now_ns();
    pconn_flush(c, ep);
}

/*
 * Read what is there. Returns 1 when an answer completed (c->status set),
 * 0 when more is needed, -1 when the server closed the connection.
 */
static int pconn_read(struct pconn *c)
{
    size_t n;

    for (;;) {
        ssize_t r = recv(c->fd, c->in + c->in_len, sizeof(c->in) - 1 - c->in_len, 0);

        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && errno == EAGAIN)
            break;
        if (r <= 0)
            return -1;
        c->in_len += (size_t)r;
        if (c->in_len >= sizeof(c->in) - 1)
            die("answer too large");
    }
    if (!(n = response_len(c->in, c->in_len, &c->status)))
        return 0;
    memmove(c->in, c->in + n, c->in_len - n);
    c->in_len -= n;
    c->busy = false;
    return 1;
}

static void pconn_reopen(struct pconn *c, int ep)
{
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    pconn_open(c, ep);
}

/* The closed loop of `post` over templates t[0..n_t); prints the result line. */
static int post_loop(int conns, int secs, const struct tmpl *t, int n_t)
{
    struct pconn *cs = calloc((size_t)conns, sizeof(*cs));
    struct samples lat = {0};
    struct epoll_event evs[256];
    long seq = 0, errors = 0;
    int64_t start, warm_end, end;
    int ep = epoll_create1(EPOLL_CLOEXEC), i;

    if (!cs || ep < 0)
        die("out of memory");
    /* Fresh message ids across runs against the same server. */
    seq = (long)(now_ns() / 1000) % 1000000000L;
    for (i = 0; i < conns; i++)
        pconn_open(&cs[i], ep);
    start = now_ns();
    warm_end = start + WARMUP_NS;
    end = warm_end + (int64_t)secs * 1000000000;
    for (i = 0; i < conns; i++) {
        cs[i].rr = (size_t)i;
        pconn_send(&cs[i], ep, &t[cs[i].rr % (size_t)n_t], seq++, 0);
    }
    while (now_ns() < end) {
        int n = epoll_wait(ep, evs, 256, 50);

        for (i = 0; i < n; i++) {
            struct pconn *c = evs[i].data.ptr;
            int64_t t1;
            int r;

            if (evs[i].events & EPOLLOUT)
                pconn_flush(c, ep);
            if (!(evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
                continue;
            r = pconn_read(c);
            if (!r)
                continue;
            t1 = now_ns();
            if (r < 0) {
                errors++;
                pconn_reopen(c, ep);
            } else if (c->t0 >= warm_end && t1 <= end) {
                if (c->status == 200)
                    samples_add(&lat, t1 - c->t0);
                else
                    errors++;
            }
            if (t1 < end) {
                c->rr += (size_t)conns;
                pconn_send(c, ep, &t[c->rr % (size_t)n_t], seq++, 0);
            }
        }
    }
    printf("post conns=%d rps=%.0f p50_us=%.1f p99_us=%.1f errors=%ld n=%zu\n", conns,
           (double)lat.n / secs, (double)pct(lat.v, lat.n, 50) / 1e3,
           (double)pct(lat.v, lat.n, 99) / 1e3, errors, lat.n);
    for (i = 0; i < conns; i++)
        close(cs[i].fd);
    close(ep);
    free(lat.v);
    free(cs);
    return 0;
}

static int cmd_post(int conns, int secs, int n_sessions)
{
    int n_t = n_sessions > 0 ? n_sessions : 1, i, rc;
    struct tmpl *t = calloc((size_t)n_t, sizeof(*t));

    if (!t)
        die("out of memory");
    if (n_sessions > 0) {
        int fd = connect_local();
        char sid[SID_MAX + 1], path[256];

        for (i = 0; i < n_sessions; i++) {
            create_session(fd, sid);
            snprintf(path, sizeof(path), API "/sessions/%s/moorex", sid);
            tmpl_build(&t[i], path, "m-");
        }
        close(fd);
    } else {
        tmpl_build(&t[0], API "/sessions/bare/moorex", "m-");
    }
    rc = post_loop(conns, secs, t, n_t);
    free(t);
    return rc;
}

static int cmd_session(void)
{
    int fd = connect_local();
    char sid[SID_MAX + 1];

    create_session(fd, sid);
    close(fd);
    printf("session id=%s\n", sid);
    return 0;
}

/* A session id from the command line, checked (it goes into a request line). */
static const char *arg_sid(const char *sid)
{
    if (!*sid || strlen(sid) > SID_MAX ||
        strspn(sid, "abcdefghijklmnopqrstuvwxyz"
                    "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                    "0123456789-_") != strlen(sid))
        die("bad session id");
    return sid;
}

static int cmd_postto(int conns, int secs, const char *sid)
{
    struct tmpl t;
    char path[256];

    snprintf(path, sizeof(path), API "/sessions/%s/moorex", arg_sid(sid));
    tmpl_build(&t, path, "m-");
    return post_loop(conns, secs, &t, 1);
}

/* messageCount of session sid in GET /sessions, or -1. */
static long message_count(const char *sid)
{
    static char body[1 << 20];
    int fd = connect_local();
    char key[SID_MAX + 16];
    const char *p, *m;

    if (request_sync(fd, "GET", API "/sessions", "", body, sizeof(body)) != 200)
        die("GET /sessions failed");
    close(fd);
    snprintf(key, sizeof(key), "\"id\":\"%s\"", sid);
    if (!(p = strstr(body, key)) || !(m = strstr(p, "\"messageCount\":")))
        return -1;
    return strtol(m + 15, NULL, 10);
}

static long occurrences(const char *hay, const char *needle)
{
    long n = 0;

    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

/* Count the records of one session's state (its encoding is read whole). */
static int cmd_count(const char *sid)
{
    char req[512], *buf = NULL;
    size_t len = 0, cap = 1 << 20, n;
    int fd = connect_local(), status = 0;
    int64_t deadline = now_ns() + 30000000000LL;

    snprintf(req, sizeof(req),
             "GET " API "/sessions/%s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", arg_sid(sid));
    write_all(fd, req, strlen(req));
    for (;;) {
        ssize_t r;

        if (len + 1 >= cap || !buf) {
            char *b = realloc(buf, cap *= 2);

            if (!b)
                die("out of memory");
            buf = b;
        }
        if ((n = response_len(buf, len, &status)))
            break;
        r = recv(fd, buf + len, cap - 1 - len, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0 || now_ns() > deadline)
            die("count: no complete answer");
        len += (size_t)r;
        buf[len] = '\0';
    }
    close(fd);
    if (status != 200)
        die("count: GET /sessions/SID failed");
    printf("count users=%ld answers=%ld complete=%ld\n",
           occurrences(buf, "\"kind\":\"user\""),
           occurrences(buf, "\"kind\":\"assistant\""),
           occurrences(buf, "\"status\":\"complete\""));
    free(buf);
    return 0;
}

/* N user messages into one session, as fast as the connections go. */
static int cmd_fill(int conns, long n, const char *sid)
{
    struct pconn *cs = calloc((size_t)conns, sizeof(*cs));
    struct epoll_event evs[256];
    struct tmpl t;
    char path[256];
    long seq, sent = 0, done = 0;
    int64_t start = now_ns(), deadline = start + 600 * 1000000000LL;
    int ep = epoll_create1(EPOLL_CLOEXEC), i;
    double secs;

    if (!cs || ep < 0)
        die("out of memory");
    snprintf(path, sizeof(path), API "/sessions/%s/moorex", arg_sid(sid));
    tmpl_build(&t, path, "f-");
    seq = (long)(now_ns() / 1000) % 1000000000L;
    for (i = 0; i < conns && sent < n; i++, sent++) {
        pconn_open(&cs[i], ep);
        pconn_send(&cs[i], ep, &t, seq++, 0);
    }
    while (done < n) {
        int k = epoll_wait(ep, evs, 256, 50);

        if (now_ns() > deadline)
            die("fill: no end after 600 s");
        for (i = 0; i < k; i++) {
            struct pconn *c = evs[i].data.ptr;
            int r;

            if (evs[i].events & EPOLLOUT)
                pconn_flush(c, ep);
            if (!(evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
                continue;
            r = pconn_read(c);
            if (!r)
                continue;
            if (r < 0) {
                pconn_reopen(c, ep);
                sent--; /* lost: send another */
            } else if (c->status == 200) {
                done++;
            } else {
                sent--; /* 429 and the like: the same count, another try */
            }
            if (sent < n) {
                pconn_send(c, ep, &t, seq++, 0);
                sent++;
            }
        }
    }
    secs = (double)(now_ns() - start) / 1e9;
    for (i = 0; i < conns; i++)
        if (cs[i].fd > 0)
            close(cs[i].fd);
    close(ep);
    free(cs);
    printf("fill n=%ld secs=%.2f rps=%.0f messages=%ld\n", done, secs,
           (double)done / secs, message_count(sid));
    return 0;
}

/* ---- SSE subscribers ------------------------------------------------------- */

struct sub;
typedef void sub_frame_fn(struct sub *s, const char *frame, size_t len, int64_t now);

enum { CH_SIZE, CH_DATA, CH_CRLF };

struct sub {
    int fd;
    bool in_body, chunked, dead;
    char head[2048];
    size_t head_len;
    /* chunked transfer decoding */
    int ch_state;
    size_t ch_left;
    char ch_line[24];
    size_t ch_line_len;
    /* the current event: its first PREFIX_MAX bytes, and whether the last
       byte seen was a newline (an empty line ends an event) */
    char prefix[PREFIX_MAX + 1];
    size_t prefix_len;
    bool nl;
    long data_frames; /* events with a data line */
    long matched;     /* POSTs matched by messageId */
    int64_t last_rx;
    sub_frame_fn *on_frame;
    void *ctx;
};

static void sub_send_get(struct sub *s, const char *path)
{
    char req[512];
    int n = snprintf(req, sizeof(req),
                     "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n"
                     "Cache-Control: no-cache\r\n\r\n",
                     path);

    write_all(s->fd, req, (size_t)n);
}

static void sub_open(struct sub *s, int ep, const char *path, sub_frame_fn *fn, void *ctx)
{
    struct epoll_event ev = {.events = EPOLLIN};

    memset(s, 0, sizeof(*s));
    s->on_frame = fn;
    s->ctx = ctx;
    s->fd = connect_local();
    sub_send_get(s, path);
    set_nonblock(s->fd);
    ev.data.ptr = s;
    if (epoll_ctl(ep, EPOLL_CTL_ADD, s->fd, &ev))
        die("epoll_ctl");
}

/* Event bytes (transfer framing removed): split at empty lines. */
static void sub_events(struct sub *s, const char *p, size_t n, int64_t now)
{
    while (n) {
        const char *nl = memchr(p, '\n', n);
        size_t take = nl ? (size_t)(nl - p) + 1 : n;
        size_t room = PREFIX_MAX - s->prefix_len;

        memcpy(s->prefix + s->prefix_len, p, take < room ? take : room);
        s->prefix_len += take < room ? take : room;
        if (nl && (take == 1 ? s->nl : false)) {
            s->prefix[s->prefix_len] = '\0';
            if (strstr(s->prefix, "data:")) {
                s->data_frames++;
                if (s->on_frame)
                    s->on_frame(s, s->prefix, s->prefix_len, now);
            }
            s->prefix_len = 0;
            s->nl = false;
        } else {
            s->nl = nl != NULL;
        }
        p += take;
        n -= take;
    }
}

static void sub_body(struct sub *s, const char *p, size_t n, int64_t now)
{
    if (!s->chunked) {
        sub_events(s, p, n, now);
        return;
    }
    while (n) {
        if (s->ch_state == CH_SIZE) {
            char c = *p++;

            n--;
            if (c != '\n') {
                if (s->ch_line_len < sizeof(s->ch_line) - 1)
                    s->ch_line[s->ch_line_len++] = c;
                continue;
            }
            s->ch_line[s->ch_line_len] = '\0';
            s->ch_left = strtoul(s->ch_line, NULL, 16);
            s->ch_line_len = 0;
            if (!s->ch_left) {
                s->dead = true; /* last chunk: the stream ended */
                return;
            }
            s->ch_state = CH_DATA;
        } else if (s->ch_state == CH_DATA) {
            size_t take = n < s->ch_left ? n : s->ch_left;

            sub_events(s, p, take, now);
            p += take;
            n -= take;
            if (!(s->ch_left -= take)) {
                s->ch_state = CH_CRLF;
                s->ch_left = 2;
            }
        } else {
            size_t take = n < s->ch_left ? n : s->ch_left;

            p += take;
            n -= take;
            if (!(s->ch_left -= take))
                s->ch_state = CH_SIZE;
        }
    }
}

/* Drain the socket. False once the stream is over (closed or dropped). */
static bool sub_read(struct sub *s, int ep)
{
    char buf[65536];

    while (!s->dead) {
        ssize_t r = recv(s->fd, buf, sizeof(buf), 0);
        int64_t now = now_ns();
        size_t off = 0;

        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && errno == EAGAIN)
            break;
        if (r <= 0) {
            s->dead = true;
            break;
        }
        s->last_rx = now;
        if (!s->in_body) {
            size_t take = (size_t)r;
            char *end;

            if (take > sizeof(s->head) - 1 - s->head_len)
                take = sizeof(s->head) - 1 - s->head_len;
            memcpy(s->head + s->head_len, buf, take);
            s->head_len += take;
            s->head[s->head_len] = '\0';
            if (!(end = strstr(s->head, "\r\n\r\n"))) {
                if (s->head_len >= sizeof(s->head) - 1)
                    die("stream answer header too large");
                continue;
            }
            if (strncmp(s->head + 9, "200", 3)) {
                fprintf(stderr, "loadgen: stream refused: %.60s\n", s->head);
                s->dead = true;
                break;
            }
            s->in_body = true;
            s->chunked = strcasestr(s->head, "\r\ntransfer-encoding: chunked") != NULL;
            /* Bytes of this read after the header belong to the body. */
            off = (size_t)(end + 4 - s->head) - (s->head_len - take);
        }
        sub_body(s, buf + off, (size_t)r - off, now);
        /* A short read drained the socket: no second recv to hear EAGAIN
           (epoll is level-triggered and reports what comes later). */
        if ((size_t)r < sizeof(buf))
            break;
    }
    if (s->dead) {
        epoll_ctl(ep, EPOLL_CTL_DEL, s->fd, NULL);
        close(s->fd);
        s->fd = -1;
    }
    return !s->dead;
}

/* Pump every subscriber until `done(ctx)` or the deadline. */
static void subs_pump(int ep, int64_t deadline, bool (*done)(void *), void *ctx)
{
    struct epoll_event evs[512];

    while (!done(ctx) && now_ns() < deadline) {
        int n = epoll_wait(ep, evs, 512, 20), i;

        for (i = 0; i < n; i++)
            sub_read(evs[i].data.ptr, ep);
    }
}

struct ready_wait {
    struct sub *subs;
    int n;
};

static bool all_ready(void *arg)
{
    struct ready_wait *w = arg;
    int i;

    for (i = 0; i < w->n; i++)
        if (!w->subs[i].dead && w->subs[i].data_frames < 1)
            return false;
    return true;
}

static int count_alive(const struct sub *subs, int n)
{
    int i, k = 0;

    for (i = 0; i < n; i++)
        k += !subs[i].dead && subs[i].data_frames >= 1;
    return k;
}

/* Open n streams to `path`, returns once each has its initial state. */
static struct sub *subs_open_all(int ep, int n, const char *path, sub_frame_fn *fn,
                                 void *ctx)
{
    struct sub *subs = calloc((size_t)n, sizeof(*subs));
    struct ready_wait w = {subs, n};
    int i;

    if (!subs)
        die("out of memory");
    for (i = 0; i < n; i++) {
        sub_open(&subs[i], ep, path, fn, ctx);
        /* Drain as we go so the accept backlog never overflows. */
        if (i % 64 == 63)
            subs_pump(ep, now_ns() + 1000000, all_ready, &w);
    }
    subs_pump(ep, now_ns() + 20000000000LL, all_ready, &w);
    if (count_alive(subs, n) < n)
        fprintf(stderr, "loadgen: only %d of %d streams opened\n", count_alive(subs, n),
                n);
    return subs;
}

static void subs_close_all(struct sub *subs, int n)
{
    int i;

    for (i = 0; i < n; i++)
        if (subs[i].fd >= 0 && !subs[i].dead)
            close(subs[i].fd);
    free(subs);
}

/* ---- fan-out ------------------------------------------------------------- */

struct fanout {
    int64_t *post_t; /* when POST k was written; 0 before */
    long n_posts;
    struct samples lat;
    int64_t last_rx;
};

static void fanout_frame(struct sub *s, const char *frame, size_t len, int64_t now)
{
    struct fanout *f = s->ctx;
    const char *m;
    long k;

    (void)len;
    if (!strstr(frame, "\"input-received\"") || !(m = strstr(frame, "\"messageId\":\"f")))
        return;
    k = strtol(m + 14, NULL, 10);
    if (k >= 0 && k < f->n_posts && f->post_t[k]) {
        samples_add(&f->lat, now - f->post_t[k]);
        s->matched++;
    }
    f->last_rx = now;
}

static int cmd_fanout(int pid, int n_subs, int rate, int secs, const char *query)
{
    enum { POST_CONNS = 8 };
    struct fanout f = {0};
    struct pconn pc[POST_CONNS];
    struct tmpl t;
    struct epoll_event evs[512];
    char sid[SID_MAX + 1], path[256];
    long next = 0, late = 0, errors = 0, frames0 = 0, frames1 = 0;
    long long cpu0, cpu1;
    int64_t start, post_end, deadline, t_end;
    int ep = epoll_create1(EPOLL_CLOEXEC), fd, i, alive;
    struct sub *subs;

    raise_nofile((rlim_t)n_subs + 256);
    f.n_posts = (long)rate * secs;
    f.post_t = calloc((size_t)f.n_posts, sizeof(*f.post_t));
    if (ep < 0 || !f.post_t)
        die("out of memory");
    fd = connect_local();
    create_session(fd, sid);
    close(fd);
    snprintf(path, sizeof(path), API "/sessions/%s/moorex", sid);
    tmpl_build(&t, path, "f");
    {
        char get[320];

        snprintf(get, sizeof(get), "%s%s", path, query);
        subs = subs_open_all(ep, n_subs, get, fanout_frame, &f);
    }
    alive = count_alive(subs, n_subs);
    for (i = 0; i < n_subs; i++)
        frames0 += subs[i].data_frames;
    for (i = 0; i < POST_CONNS; i++)
        pconn_open(&pc[i], ep);

    cpu0 = proc_cpu_ticks(pid);
    start = now_ns();
    post_end = start + (int64_t)secs * 1000000000;
    deadline = post_end + 5000000000LL;
    for (;;) {
        int64_t now = now_ns(), due;
        int n, timeout;
        long matched = 0;

        /* Open loop: POST k is due at start + k / rate. */
        while (next < f.n_posts && (due = start + next * 1000000000LL / rate) <= now) {
            for (i = 0; i < POST_CONNS && pc[i].busy; i++)
                ;
            if (i == POST_CONNS) {
                late++; /* every connection busy: this POST goes out late */
                break;
            }
            pconn_send(&pc[i], ep, &t, next, next);
            f.post_t[next] = pc[i].t0;
            next++;
        }
        if (next == f.n_posts) {
            for (i = 0; i < n_subs; i++)
                matched += subs[i].dead ? f.n_posts : subs[i].matched;
            if (matched >= (long)n_subs * f.n_posts || now > deadline)
                break;
        }
        timeout = next < f.n_posts ? 1 : 20;
        n = epoll_wait(ep, evs, 512, timeout);
        for (i = 0; i < n; i++) {
            void *p = evs[i].data.ptr;

            if (p >= (void *)pc && p < (void *)(pc + POST_CONNS)) {
                struct pconn *c = p;
                int r;

                if (evs[i].events & EPOLLOUT)
                    pconn_flush(c, ep);
                r = pconn_read(c);
                if (r < 0 || (r > 0 && c->status != 200))
                    errors++;
                if (r < 0)
                    pconn_reopen(c, ep);
            } else {
                sub_read(p, ep);
            }
        }
    }
    t_end = f.last_rx > start ? f.last_rx : now_ns();
    cpu1 = proc_cpu_ticks(pid);
    for (i = 0; i < n_subs; i++)
        frames1 += subs[i].data_frames;
    {
        double wall = (double)(t_end - start) / 1e9;
        int dropped = alive - count_alive(subs, n_subs);

        printf("fanout subs=%d alive=%d rate=%d posts=%ld deliveries=%ld "
               "deliveries_per_s=%.0f p50_ms=%.2f p99_ms=%.2f cpu_pct=%.0f "
               "dropped=%d late_posts=%ld errors=%ld matched=%zu\n",
               n_subs, alive, rate, next, frames1 - frames0,
               (double)(frames1 - frames0) / wall,
               (double)pct(f.lat.v, f.lat.n, 50) / 1e6,
               (double)pct(f.lat.v, f.lat.n, 99) / 1e6,
               100.0 * (double)(cpu1 - cpu0) / (double)sysconf(_SC_CLK_TCK) / wall,
               dropped, late, errors, f.lat.n);
    }
    for (i = 0; i < POST_CONNS; i++)
        close(pc[i].fd);
    subs_close_all(subs, n_subs);
    close(ep);
    free(f.lat.v);
    free(f.post_t);
    return 0;
}

/* ---- memory -------------------------------------------------------------- */

static int cmd_memory(int pid, int n_sessions, int n_streams)
{
    char sid[SID_MAX + 1], path[256];
    long idle, s0, s1, t0, t1;
    int fd, ep, i, alive;
    struct sub *warm, *subs;

    raise_nofile((rlim_t)n_streams + 256);
    idle = proc_rss_kb(pid);
    fd = connect_local();
    /* Warm up: the first sessions pay for one-time allocations. */
    for (i = 0; i < 16; i++)
        create_session(fd, sid);
    sleep_ms(200);
    s0 = proc_rss_kb(pid);
    for (i = 0; i < n_sessions; i++)
        create_session(fd, sid);
    sleep_ms(200);
    s1 = proc_rss_kb(pid);
    close(fd);

    snprintf(path, sizeof(path), API "/sessions/%s/moorex", sid);
    ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0)
        die("epoll_create1");
    warm = subs_open_all(ep, 16, path, NULL, NULL); /* the same warm-up, kept open */
    sleep_ms(200);
    t0 = proc_rss_kb(pid);
    subs = subs_open_all(ep, n_streams, path, NULL, NULL);
    alive = count_alive(subs, n_streams);
    sleep_ms(300);
    t1 = proc_rss_kb(pid);
    printf("memory idle_kb=%ld sessions=%d session_bytes=%.0f streams=%d "
           "stream_bytes=%.0f rss_end_kb=%ld\n",
           idle, n_sessions, 1024.0 * (double)(s1 - s0) / n_sessions, alive,
           alive ? 1024.0 * (double)(t1 - t0) / alive : 0.0, t1);
    subs_close_all(subs, n_streams);
    subs_close_all(warm, 16);
    close(ep);
    return 0;
}

/* ---- token relay ------------------------------------------------------------ */

struct relay {
    char mid[SID_MAX + 1]; /* the answer being streamed, "" until known */
    bool complete;
    struct samples lat;
};

/* Moorex stream: learn the assistant message id from brain-send-message-start. */
static void relay_moorex_frame(struct sub *s, const char *frame, size_t len, int64_t now)
{
    struct relay *r = s->ctx;
    const char *m;
    size_t n;

    (void)len;
    (void)now;
    if (r->mid[0] || !strstr(frame, "\"brain-send-message-start\"") ||
        !(m = strstr(frame, "\"messageId\":\"")))
        return;
    m += 13;
    n = strcspn(m, "\"");
    if (n <= SID_MAX) {
        memcpy(r->mid, m, n);
        r->mid[n] = '\0';
    }
}

/* Message stream: every chunk carries "<stamp>|" tokens. */
static void relay_message_frame(struct sub *s, const char *frame, size_t len, int64_t now)
{
    struct relay *r = s->ctx;
    const char *p;

    (void)len;
    if (strstr(frame, "\"type\":\"complete\"") || strstr(frame, "\"type\":\"stopped\"")) {
        r->complete = true;
        return;
    }
    if (!(p = strstr(frame, "\"type\":\"chunk\"")) || !(p = strstr(p, "\"delta\":\"")))
        return;
    p += 9;
    while (*p >= '0' && *p <= '9') {
        char *end;
        long long stamp = strtoll(p, &end, 10);

        if (*end != '|')
            break;
        samples_add(&r->lat, now - stamp);
        p = end + 1;
    }
}

static bool relay_has_mid(void *arg)
{
    return ((struct relay *)arg)->mid[0] != '\0';
}

static bool relay_complete(void *arg)
{
    return ((struct relay *)arg)->complete;
}

static int cmd_relay(int n_msgs)
{
    struct relay r = {.complete = false};
    char sid[SID_MAX + 1], path[512], body[256];
    struct sub *moorex, msg;
    int fd, ep = epoll_create1(EPOLL_CLOEXEC), i;

    if (ep < 0)
        die("epoll_create1");
    fd = connect_local();
    create_session(fd, sid);
    snprintf(path, sizeof(path), API "/sessions/%s/moorex", sid);
    moorex = subs_open_all(ep, 1, path, relay_moorex_frame, &r);
    for (i = 0; i < n_msgs; i++) {
        r.mid[0] = '\0';
        r.complete = false;
        snprintf(body, sizeof(body),
                 "{\"type\":\"user-send-message\",\"messageId\":\"r%d\","
                 "\"content\":\"relay %d\"}",
                 i, i);
        if (request_sync(fd, "POST", path, body, NULL, 0) != 200)
            die("relay: POST refused");
        subs_pump(ep, now_ns() + 10000000000LL, relay_has_mid, &r);
        if (!r.mid[0])
            die("relay: no brain-send-message-start within 10 s (is the brain up?)");
        snprintf(path, sizeof(path), API "/sessions/%s/messages/%s", sid, r.mid);
        sub_open(&msg, ep, path, relay_message_frame, &r);
        subs_pump(ep, now_ns() + 20000000000LL, relay_complete, &r);
        if (!msg.dead) {
            epoll_ctl(ep, EPOLL_CTL_DEL, msg.fd, NULL);
            close(msg.fd);
        }
        snprintf(path, sizeof(path), API "/sessions/%s/moorex", sid);
    }
    printf("relay messages=%d tokens=%zu p50_us=%.1f p99_us=%.1f\n", n_msgs, r.lat.n,
           (double)pct(r.lat.v, r.lat.n, 50) / 1e3,
           (double)pct(r.lat.v, r.lat.n, 99) / 1e3);
    subs_close_all(moorex, 1);
    close(fd);
    close(ep);
    free(r.lat.v);
    return 0;
}

/* The floor of the relay: the same fake LLM read directly, no Reflexor. */
static void direct_frame(struct sub *s, const char *frame, size_t len, int64_t now)
{
    struct relay *r = s->ctx;
    const char *p = strstr(frame, "\"content\":\"");

    (void)len;
    if (!p)
        return;
    for (p += 11; *p >= '0' && *p <= '9';) {
        char *end;
        long long stamp = strtoll(p, &end, 10);

        if (*end != '|')
            break;
        samples_add(&r->lat, now - stamp);
        p = end + 1;
    }
}

static bool sub_is_dead(void *arg)
{
    return ((struct sub *)arg)->dead;
}

static int cmd_direct(int n_msgs)
{
    struct relay r = {.complete = false};
    struct sub s;
    int ep = epoll_create1(EPOLL_CLOEXEC), i;

    if (ep < 0)
        die("epoll_create1");
    for (i = 0; i < n_msgs; i++) {
        sub_open(&s, ep, "/v1/chat/completions", direct_frame, &r);
        subs_pump(ep, now_ns() + 20000000000LL, sub_is_dead, &s);
        if (!s.dead) {
            epoll_ctl(ep, EPOLL_CTL_DEL, s.fd, NULL);
            close(s.fd);
        }
    }
    printf("direct messages=%d tokens=%zu p50_us=%.1f p99_us=%.1f\n", n_msgs, r.lat.n,
           (double)pct(r.lat.v, r.lat.n, 50) / 1e3,
           (double)pct(r.lat.v, r.lat.n, 99) / 1e3);
    close(ep);
    free(r.lat.v);
    return 0;
}

/* ---- idle keep-alive connections (the bare baseline of a stream's memory) -- */

static int cmd_idle(int pid, int n)
{
    int *fds = calloc((size_t)n, sizeof(*fds)), i;
    long before, after;

    if (!fds)
        die("out of memory");
    raise_nofile((rlim_t)n + 256);
    for (i = 0; i < 16; i++) { /* warm-up, as in `memory` */
        int fd = connect_local();

        request_sync(fd, "POST", API "/sessions/bare/moorex", "{}", NULL, 0);
        close(fd);
    }
    sleep_ms(200);
    before = proc_rss_kb(pid);
    for (i = 0; i < n; i++) {
        fds[i] = connect_local();
        request_sync(fds[i], "POST", API "/sessions/bare/moorex", "{}", NULL, 0);
    }
    sleep_ms(300);
    after = proc_rss_kb(pid);
    printf("idle idle_kb=%ld conns=%d conn_bytes=%.0f\n", before, n,
           1024.0 * (double)(after - before) / n);
    for (i = 0; i < n; i++)
        close(fds[i]);
    free(fds);
    return 0;
}

/* ---- bounded memory: a stream that never reads, a large state --------------- */

#define BIG_MSG (100 * 1024) /* content bytes of each message of a large state */

/* The status of the answer on fd (blocking); its body, up to a size, discarded. */
static int answer_status(int fd, size_t *body_len)
{
    size_t cap = IN_MAX, len = 0, n;
    char *buf = malloc(cap + 1);
    int64_t deadline = now_ns() + 60000000000LL;
    int status = 0;

    if (!buf)
        die("out of memory");
    while (!(n = response_len(buf, len, &status))) {
        ssize_t r;

        if (len == cap) {
            char *b = realloc(buf, 2 * cap + 1);

            if (!b)
                die("out of memory");
            buf = b;
            cap *= 2;
        }
        r = recv(fd, buf + len, cap - len, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0 || now_ns() > deadline)
            die("no complete answer");
        len += (size_t)r;
        buf[len] = '\0';
    }
    if (body_len)
        *body_len = n - (size_t)(strstr(buf, "\r\n\r\n") + 4 - buf);
    free(buf);
    return status;
}

/* POST a user message of `len` content bytes on a keep-alive connection. */
static int post_sized(int fd, const char *path, const char *id, size_t len)
{
    char head[512], body_head[256];
    int bh = snprintf(body_head, sizeof(body_head),
                      "{\"type\":\"user-send-message\",\"messageId\":\"%s\","
                      "\"content\":\"",
                      id);
    size_t body_len = (size_t)bh + len + 2;
    int hl = snprintf(head, sizeof(head),
                      "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                      path, body_len);
    char *req = malloc((size_t)hl + body_len);

    if (!req)
        die("out of memory");
    memcpy(req, head, (size_t)hl);
    memcpy(req + hl, body_head, (size_t)bh);
    memset(req + hl + bh, 'x', len);
    memcpy(req + (size_t)hl + body_len - 2, "\"}", 2);
    write_all(fd, req, (size_t)hl + body_len);
    free(req);
    return answer_status(fd, NULL);
}

static bool warm_done(void *arg)
{
    return ((struct sub *)arg)->data_frames >= 5 || ((struct sub *)arg)->dead;
}

/* Read a stream without parsing it until end of file (true) or `ms` pass. */
static bool drain_to_eof(int fd, int ms)
{
    static char buf[1 << 16];
    int64_t end = now_ns() + (int64_t)ms * 1000000;

    set_nonblock(fd);
    while (now_ns() < end) {
        ssize_t r = recv(fd, buf, sizeof(buf), 0);

        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
            return true;
        if (r < 0)
            sleep_ms(1);
    }
    return false;
}

/*
 * A stream that never reads (receive buffer shrunk to 4 KB) on a session
 * whose state is STATE_KB, while INPUTS inputs arrive one by one: how much
 * the server grows. The baseline is taken after a reader that keeps up has
 * seen two inputs (the session's encoding buffer and the allocator are then
 * sized for this state), so the growth is what the stuck stream costs.
 */
static int cmd_stuck(int pid, int state_kb, int inputs)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    char sid[SID_MAX + 1], path[256], id[64], body[256], req[512];
    struct samples lat = {0};
    struct sub warm;
    int fd, stuck, ep, rcv = 4096, i, n_big = (state_kb * 1024 + BIG_MSG - 1) / BIG_MSG;
    long base, peak, end, hwm = -1, errors = 0;
    bool hwm_ok, dropped;

    fd = connect_local();
    create_session(fd, sid);
    snprintf(path, sizeof(path), API "/sessions/%s/moorex", sid);
    for (i = 0; i < n_big; i++) {
        snprintf(id, sizeof(id), "big%d", i);
        if (post_sized(fd, path, id, BIG_MSG) != 200)
            die("stuck: a large message was refused (limits.body_max?)");
    }
    if ((ep = epoll_create1(EPOLL_CLOEXEC)) < 0)
        die("epoll_create1");
    sub_open(&warm, ep, path, NULL, NULL);
    subs_pump(ep, now_ns() + 10000000000LL, all_ready, &(struct ready_wait){&warm, 1});
    for (i = 0; i < 2; i++) {
        snprintf(body, sizeof(body),
                 "{\"type\":\"user-send-message\",\"messageId\":\"w%d\","
                 "\"content\":\"warm\"}",
                 i);
        if (request_sync(fd, "POST", path, body, NULL, 0) != 200)
            die("stuck: warm-up POST refused");
    }
    subs_pump(ep, now_ns() + 10000000000LL, warm_done, &warm);
    if (!warm.dead)
        close(warm.fd);
    close(ep);
    sleep_ms(300);
    base = proc_rss_kb(pid);
    hwm_ok = proc_reset_hwm(pid);
    peak = base;

    stuck = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    a.sin_port = htons((uint16_t)g_port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (stuck < 0 || setsockopt(stuck, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv)) ||
        connect(stuck, (struct sockaddr *)&a, sizeof(a)))
        die("stuck: cannot connect");
    i = snprintf(
        req, sizeof(req),
        "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n", path);
    write_all(stuck, req, (size_t)i);
    sleep_ms(100); /* subscribed, and its socket full */
    for (i = 0; i < inputs; i++) {
        int64_t t0 = now_ns();
        long rss;

        snprintf(body, sizeof(body),
                 "{\"type\":\"user-send-message\",\"messageId\":\"s%d\","
                 "\"content\":\"while one stream is stuck\"}",
                 i);
        if (request_sync(fd, "POST", path, body, NULL, 0) != 200)
            errors++;
        samples_add(&lat, now_ns() - t0);
        if ((rss = proc_rss_kb(pid)) > peak)
            peak = rss;
    }
    sleep_ms(300);
    end = proc_rss_kb(pid);
    if (hwm_ok && (hwm = proc_status_kb(pid, "VmHWM:")) > peak)
        peak = hwm;
    /* A dropped stream ends (after what its socket buffers held); one that is
       not keeps streaming its queue. */
    dropped = drain_to_eof(stuck, 3000);
    printf("stuck state_kb=%d inputs=%d base_kb=%ld peak_growth_kb=%ld end_growth_kb=%ld "
           "dropped=%d post_p50_us=%.1f post_p99_us=%.1f errors=%ld hwm=%s\n",
           n_big * BIG_MSG / 1024, inputs, base, peak - base, end - base, dropped,
           (double)pct(lat.v, lat.n, 50) / 1e3, (double)pct(lat.v, lat.n, 99) / 1e3,
           errors, hwm_ok ? "yes" : "sampled");
    close(stuck);
    close(fd);
    free(lat.v);
    return 0;
}

/*
 * GET /sessions/SID (the whole state) REPS times, one after another on one
 * connection: the time of each, and how much the server's RSS rises (its
 * peak, VmHWM, reset first) and stays risen. A stream opened and closed
 * before them warms up: its first state fills the state's cached record
 * encodings (they stay, whoever encodes the state first).
 */
static int cmd_getstate(int pid, const char *sid, int reps)
{
    struct samples lat = {0};
    char path[256];
    struct sub warm;
    size_t bytes = 0;
    long base, peak, end, hwm;
    bool hwm_ok;
    int fd = connect_local(), ep, i;

    snprintf(path, sizeof(path), API "/sessions/%s/moorex", arg_sid(sid));
    if ((ep = epoll_create1(EPOLL_CLOEXEC)) < 0)
        die("epoll_create1");
    sub_open(&warm, ep, path, NULL, NULL);
    subs_pump(ep, now_ns() + 60000000000LL, all_ready, &(struct ready_wait){&warm, 1});
    if (!warm.dead)
        close(warm.fd);
    close(ep);
    sleep_ms(300);
    base = peak = proc_rss_kb(pid);
    hwm_ok = proc_reset_hwm(pid);
    snprintf(path, sizeof(path), API "/sessions/%s", sid);
    for (i = 0; i < reps; i++) {
        char req[512];
        int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
                         path);
        int64_t t0 = now_ns();
        long rss;

        write_all(fd, req, (size_t)n);
        if (answer_status(fd, &bytes) != 200)
            die("getstate: GET refused");
        samples_add(&lat, now_ns() - t0);
        if ((rss = proc_rss_kb(pid)) > peak)
            peak = rss;
    }
    sleep_ms(300);
    end = proc_rss_kb(pid);
    if (hwm_ok && (hwm = proc_status_kb(pid, "VmHWM:")) > peak)
        peak = hwm;
    printf("getstate bytes=%zu reps=%d p50_ms=%.2f max_ms=%.2f base_kb=%ld "
           "peak_growth_kb=%ld end_growth_kb=%ld hwm=%s\n",
           bytes, reps, (double)pct(lat.v, lat.n, 50) / 1e6,
           (double)pct(lat.v, lat.n, 100) / 1e6, base, peak - base, end - base,
           hwm_ok ? "yes" : "sampled");
    close(fd);
    free(lat.v);
    return 0;
}

/* ---- main ------------------------------------------------------------------ */

static int arg_int(int argc, char **argv, int i)
{
    if (i >= argc)
        die("missing argument (see the usage at the top of bench/loadgen.c)");
    return atoi(argv[i]);
}

int main(int argc, char **argv)
{
    const char *cmd = argc > 1 ? argv[1] : "";

    signal(SIGPIPE, SIG_IGN);
    if (getenv("LOADGEN_BEARER"))
        snprintf(g_auth, sizeof(g_auth), "Authorization: Bearer %.200s\r\n",
                 getenv("LOADGEN_BEARER"));
    g_port = arg_int(argc, argv, 2);
    if (!strcmp(cmd, "post"))
        return cmd_post(arg_int(argc, argv, 3), arg_int(argc, argv, 4),
                        arg_int(argc, argv, 5));
    if (!strcmp(cmd, "session"))
        return cmd_session();
    if (!strcmp(cmd, "postto"))
        return cmd_postto(arg_int(argc, argv, 3), arg_int(argc, argv, 4),
                          argc > 5 ? argv[5] : "");
    if (!strcmp(cmd, "fill"))
        return cmd_fill(arg_int(argc, argv, 3), arg_int(argc, argv, 4),
                        argc > 5 ? argv[5] : "");
    if (!strcmp(cmd, "count"))
        return cmd_count(argc > 3 ? argv[3] : "");
    if (!strcmp(cmd, "fanout"))
        return cmd_fanout(arg_int(argc, argv, 3), arg_int(argc, argv, 4),
                          arg_int(argc, argv, 5), arg_int(argc, argv, 6),
                          argc > 7 ? argv[7] : "");
    if (!strcmp(cmd, "memory"))
        return cmd_memory(arg_int(argc, argv, 3), arg_int(argc, argv, 4),
                          arg_int(argc, argv, 5));
    if (!strcmp(cmd, "relay"))
        return cmd_relay(arg_int(argc, argv, 3));
    if (!strcmp(cmd, "direct"))
        return cmd_direct(arg_int(argc, argv, 3));
    if (!strcmp(cmd, "idle"))
        return cmd_idle(arg_int(argc, argv, 3), arg_int(argc, argv, 4));
    if (!strcmp(cmd, "stuck"))
        return cmd_stuck(arg_int(argc, argv, 3), arg_int(argc, argv, 4),
                         arg_int(argc, argv, 5));
    if (!strcmp(cmd, "getstate"))
        return cmd_getstate(arg_int(argc, argv, 3), argc > 4 ? argv[4] : "",
                            arg_int(argc, argv, 5));
    die("usage: loadgen "
        "post|session|postto|fill|count|fanout|memory|relay|direct|idle|stuck|"
        "getstate PORT ...");
    return 1;
}
