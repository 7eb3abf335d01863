/*
 * relay - a request for a session another node owns, passed to that node
 * and its answer streamed back. See relay.h.
 *
 * The thread's life: headers arrive (status, type, the headers to pass on);
 * an event stream is then answered at once (park_finish) and each whole
 * event the owner writes goes out on the relay's channel; any other answer
 * is kept until it is whole, then answered. The relay's lock orders "what
 * arrived before the client subscribed" against "what is published after":
 * the answer subscribes under it, the thread publishes under it.
 */
#include "server/relay.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

#include "effects/log.h"
#include "server/cluster.h"
#include "server/reply.h"
#include "server/session_follow.h"
#include "server/session_table.h"
#include "server/sse.h"

/* The owner may take as long as the run does; a stream is ended by its client. */
#define RELAY_CONNECT_TIMEOUT_MS 5000L
/* Frames of a relayed stream a slow client may have waiting. */
#define RELAY_QUEUE_MAX 4096

struct relay {
    struct park park;
    int refs; /* atomic */
    pthread_mutex_t lock;
    char *url, *method, *body;
    size_t body_len;
    struct curl_slist *out; /* the request's headers */

    /* The answer, written by the thread (under lock once the park may answer). */
    long status; /* 0: none (yet) */
    char type[128];
    struct curl_slist *in; /* the owner's headers to pass on */
    bool streaming, headers_done, done, too_big;
    struct rx_buf kept;    /* a JSON answer, or a stream's bytes before the client */
    struct sse_channel ch; /* a stream's */
    bool subscribed;
    bool gone; /* the request ended: stop */
};

static void relay_unref(struct relay *r)
{
    if (__atomic_sub_fetch(&r->refs, 1, __ATOMIC_ACQ_REL))
        return;
    free(r->url);
    free(r->method);
    free(r->body);
    curl_slist_free_all(r->out);
    curl_slist_free_all(r->in);
    rx_buf_release(&r->kept);
    sse_channel_release(&r->ch);
    pthread_mutex_destroy(&r->lock);
    park_destroy(&r->park);
    free(r);
}

/* ---- the owner's answer ------------------------------------------------------ */

/*
 * Headers that belong to one connection, or (an answer's) that this node
 * sets itself: never passed on.
 */
static bool own_header(const char *name, size_t n, bool answer)
{
    static const char *const hop[] = {"connection",     "keep-alive", "transfer-encoding",
                                      "content-length", "upgrade",    "proxy-connection",
                                      "host",           "te",         "trailer",
                                      "expect"};
    static const char *const set_here[] = {
        "content-type",    "cache-control", "x-accel-buffering",
        "x-reflexor-node", "date",          "server"};

    for (size_t i = 0; i < sizeof(hop) / sizeof(hop[0]); i++)
        if (strlen(hop[i]) == n && !strncasecmp(hop[i], name, n))
            return true;
    for (size_t i = 0; answer && i < sizeof(set_here) / sizeof(set_here[0]); i++)
        if (strlen(set_here[i]) == n && !strncasecmp(set_here[i], name, n))
            return true;
    return false;
}

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
    struct relay *r = arg;
    size_t len = size * n, k = len;
    const char *colon = memchr(p, ':', len);
    char line[1024];

    while (k && (p[k - 1] == '\n' || p[k - 1] == '\r'))
        k--;
    if (!strncmp(p, "HTTP/", 5)) { /* a status line: a 100 Continue came first */
        curl_slist_free_all(r->in);
        r->in = NULL;
        return len;
    }
    if (colon && !own_header(p, (size_t)(colon - p), true) && k < sizeof(line)) {
        struct curl_slist *l;

        memcpy(line, p, k);
        line[k] = '\0';
        if (!(l = curl_slist_append(r->in, line)))
            return 0;
        r->in = l;
    }
    return len;
}

/* The answer's status and type, known once its body begins (or it ends). */
static void headers_known(struct relay *r, CURL *curl)
{
    char *type = NULL;

    if (r->headers_done)
        return;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &r->status);
    if (!curl_easy_getinfo(curl, CURLINFO_CONTENT_TYPE, &type) && type)
        snprintf(r->type, sizeof(r->type), "%s", type);
    r->streaming = r->status == 200 && !strncmp(r->type, "text/event-stream", 17);
    pthread_mutex_lock(&r->lock);
    r->headers_done = true;
    pthread_mutex_unlock(&r->lock);
    if (r->streaming)
        park_finish(&r->park); /* answer now; the events follow */
}

/* The end of the last whole event in b (after "\n\n"), or 0. */
static size_t whole_events(const struct rx_buf *b)
{
    for (size_t i = b->len; i >= 2; i--)
        if (b->data[i - 1] == '\n' && b->data[i - 2] == '\n')
            return i;
    return 0;
}

/*
 * What arrived, published to the client: whole events only while the
 * owner still writes (a ping between two halves of one would break it),
 * everything once it is done. lock held.
 */
static int publish_kept(struct relay *r)
{
    size_t end = r->done ? r->kept.len : whole_events(&r->kept);
    struct sse_frame *f;

    if (!end)
        return 0;
    if (!(f = sse_frame_raw(r->kept.data, end)))
        return -ENOMEM;
    sse_channel_publish(&r->ch, f);
    sse_frame_unref(f);
    memmove(r->kept.data, r->kept.data + end, r->kept.len - end);
    rx_buf_truncate(&r->kept, r->kept.len - end);
    return 0;
}

struct write_ctx {
    struct relay *r;
    CURL *curl;
};

static size_t on_data(char *p, size_t size, size_t n, void *arg)
{
    struct write_ctx *w = arg;
    struct relay *r = w->r;
    size_t len = size * n;
    int err;

    headers_known(r, w->curl);
    pthread_mutex_lock(&r->lock);
    if (r->gone || (r->subscribed && !sse_channel_has_clients(&r->ch))) {
        pthread_mutex_unlock(&r->lock);
        return 0; /* the client left: stop */
    }
    err = rx_buf_append(&r->kept, p, len);
    if (err && !r->streaming)
        r->too_big = true;
    if (!err && r->subscribed)
        err = publish_kept(r);
    pthread_mutex_unlock(&r->lock);
    return err ? 0 : len;
}

static int on_progress(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut,
                       curl_off_t un)
{
    struct relay *r = arg;
    bool stop;

    (void)dt, (void)dn, (void)ut, (void)un;
    pthread_mutex_lock(&r->lock);
    stop = r->gone || (r->subscribed && !sse_channel_has_clients(&r->ch));
    pthread_mutex_unlock(&r->lock);
    return stop; /* nonzero aborts the transfer */
}

static void *relay_main(void *arg)
{
    struct relay *r = arg;
    struct write_ctx w = {r, curl_easy_init()};
    CURL *curl = w.curl;

    if (curl) {
        curl_easy_setopt(curl, CURLOPT_URL, r->url);
        curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, r->method);
        curl_easy_setopt(curl, CURLOPT_HTTPHEADER, r->out);
        if (r->body_len || strcmp(r->method, "GET")) {
            curl_easy_setopt(curl, CURLOPT_POSTFIELDS, r->body);
            curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, (long)r->body_len);
        }
        if (!strcmp(r->method, "GET"))
            curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
        curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(curl, CURLOPT_HEADERDATA, r);
        curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(curl, CURLOPT_WRITEDATA, &w);
        curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(curl, CURLOPT_XFERINFODATA, r);
        curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, RELAY_CONNECT_TIMEOUT_MS);
        curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
        if (curl_easy_perform(curl) == CURLE_OK)
            headers_known(r, curl);
        else if (!r->headers_done)
            log_warn("cluster: the owner at %s does not answer", r->url);
        curl_easy_cleanup(curl);
    }
    pthread_mutex_lock(&r->lock);
    r->done = true;
    if (r->subscribed) {
        (void)publish_kept(r); /* out of memory: the stream ends short */
        sse_channel_close_all(&r->ch);
    }
    pthread_mutex_unlock(&r->lock);
    if (!r->streaming)
        park_finish(&r->park);
    relay_unref(r);
    return NULL;
}

/* ---- the answer here ---------------------------------------------------------- */

static void add_headers(struct MHD_Response *resp, const struct curl_slist *in)
{
    char name[256];

    for (; resp && in; in = in->next) {
        const char *colon = strchr(in->data, ':'), *v;
        size_t n = colon ? (size_t)(colon - in->data) : 0;

        if (!n || n >= sizeof(name))
            continue;
        memcpy(name, in->data, n);
        name[n] = '\0';
        for (v = colon + 1; *v == ' ' || *v == '\t'; v++)
            ;
        MHD_add_response_header(resp, name, v);
    }
}

static enum MHD_Result relay_answer(struct park *park, struct door *d,
                                    struct MHD_Connection *conn)
{
    struct relay *r = (struct relay *)park;
    struct MHD_Response *resp;
    struct sse_frame *first = NULL;
    size_t end;

    (void)d;
    if (!r->status || r->too_big)
        return reply_json_retry(
            conn, 503,
            json_pack("{s:s, s:s}", "error", "owner-unreachable", "message",
                      r->too_big
                          ? "the owner's answer is too large to relay"
                          : "the node that owns this session does not answer; retry"),
            1);
    if (!r->streaming) {
        resp = reply_response(*r->type ? r->type : "application/json",
                              r->kept.data ? r->kept.data : "", r->kept.len);
        add_headers(resp, r->in);
        return reply_queue(conn, (unsigned)r->status, resp);
    }
    pthread_mutex_lock(&r->lock);
    end = r->done ? r->kept.len : whole_events(&r->kept);
    if (end && !(first = sse_frame_raw(r->kept.data, end))) {
        pthread_mutex_unlock(&r->lock);
        return reply_out_of_memory(conn);
    }
    if (end) {
        memmove(r->kept.data, r->kept.data + end, r->kept.len - end);
        rx_buf_truncate(&r->kept, r->kept.len - end);
    }
    resp = sse_channel_subscribe(&r->ch, conn, first ? &first : NULL, first ? 1 : 0,
                                 r->done);
    r->subscribed = resp != NULL;
    pthread_mutex_unlock(&r->lock);
    if (first)
        sse_frame_unref(first);
    add_headers(resp, r->in);
    return reply_stream(conn, resp);
}

static void relay_release(struct park *park)
{
    struct relay *r = (struct relay *)park;

    pthread_mutex_lock(&r->lock);
    r->gone = true;
    pthread_mutex_unlock(&r->lock);
    relay_unref(r);
}

static const struct park_ops relay_ops = {relay_answer, relay_release};

/* ---- the request -------------------------------------------------------------- */

static enum MHD_Result copy_header(void *cls, enum MHD_ValueKind kind, const char *k,
                                   const char *v)
{
    struct relay *r = cls;
    struct curl_slist *l;
    char *line;

    (void)kind;
    if (!v || own_header(k, strlen(k), false) || !strcasecmp(k, "X-Reflexor-Forwarded"))
        return MHD_YES;
    if (asprintf(&line, "%s: %s", k, v) < 0)
        return MHD_NO;
    l = curl_slist_append(r->out, line);
    free(line);
    if (!l)
        return MHD_NO;
    r->out = l;
    return MHD_YES;
}

struct query {
    struct rx_buf *b;
    int err;
};

static enum MHD_Result copy_arg(void *cls, enum MHD_ValueKind kind, const char *k,
                                const char *v)
{
    struct query *q = cls;
    char *ek = curl_easy_escape(NULL, k, 0),
         *ev = v ? curl_easy_escape(NULL, v, 0) : NULL;

    (void)kind;
    if (!ek || (v && !ev))
        q->err = -ENOMEM;
    if (!q->err)
        q->err = rx_buf_printf(q->b, "%c%s%s%s", q->b->len ? '&' : '?', ek, v ? "=" : "",
                               v ? ev : "");
    curl_free(ek);
    curl_free(ev);
    return q->err ? MHD_NO : MHD_YES;
}

/* The relay's request: the owner's URL, the query, the headers. 0 or -ENOMEM. */
static int build(struct relay *r, struct MHD_Connection *conn, const char *owner,
                 const char *method, const char *url, const struct rx_buf *body)
{
    struct rx_buf qs;
    struct query q = {&qs, 0};
    struct curl_slist *l;
    int err = -ENOMEM;

    rx_buf_init(&qs, 65536);
    MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, copy_arg, &q);
    if (q.err)
        goto out;
    if (asprintf(&r->url, "%s%s%s", owner, url, qs.data ? qs.data : "") < 0) {
        r->url = NULL;
        goto out;
    }
    if (!(r->method = strdup(method)) || !(r->body = malloc(body->len + 1)))
        goto out;
    if (body->len)
        memcpy(r->body, body->data, body->len);
    r->body[body->len] = '\0';
    r->body_len = body->len;
    if (MHD_get_connection_values(conn, MHD_HEADER_KIND, copy_header, r) < 0)
        goto out;
    /* libcurl adds its own Accept and Expect unless told not to. */
    if (!(l = curl_slist_append(r->out, "X-Reflexor-Forwarded: 1")) ||
        !(l = curl_slist_append(l, "Expect:")))
        goto out;
    r->out = l;
    err = 0;
out:
    rx_buf_release(&qs);
    return err;
}

/* Start the relay to `owner`, parked. */
static enum MHD_Result start(struct MHD_Connection *conn, const char *owner,
                             const char *method, const char *url,
                             const struct rx_buf *body, struct park **pending,
                             bool *suspended)
{
    struct relay *r = calloc(1, sizeof(*r));
    pthread_attr_t attr;
    pthread_t t;

    if (!r)
        return reply_out_of_memory(conn);
    rx_buf_init(&r->kept, RELAY_ANSWER_MAX);
    sse_channel_init(&r->ch, RELAY_QUEUE_MAX);
    pthread_mutex_init(&r->lock, NULL);
    park_init(&r->park, &relay_ops, conn);
    r->refs = 2;
    if (build(r, conn, owner, method, url, body))
        goto out_free;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, relay_main, r)) {
        pthread_attr_destroy(&attr);
        goto out_free;
    }
    pthread_attr_destroy(&attr);
    if (!park_suspend(&r->park)) { /* answered already */
        enum MHD_Result ret = relay_answer(&r->park, NULL, conn);

        *pending = &r->park; /* released when the request ends */
        return ret;
    }
    *suspended = true;
    *pending = &r->park;
    return MHD_YES;

out_free:
    r->refs = 1;
    relay_unref(r);
    return reply_out_of_memory(conn);
}

int relay_to_owner(struct door *d, const struct principal *who,
                   struct MHD_Connection *conn, const char *sid, const char *method,
                   const char *url, const struct rx_buf *body, struct park **pending,
                   bool *suspended, enum MHD_Result *ret)
{
    struct cluster *c = __atomic_load_n(&d->cluster, __ATOMIC_ACQUIRE);
    struct session *s;
    char *owner = NULL;
    bool follower, relayed;
    int err = -ENOENT;

    if (!c || !(s = session_table_get_as(d->sessions, sid, who)))
        return 0;
    follower = session_is_follower(s);
    session_unref(s);
    if (!follower)
        return 0;
    /* Relayed here, yet owned elsewhere (it moved meanwhile): claimed if
       nobody's, never relayed again. */
    relayed = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Reflexor-Forwarded");
    for (int tries = 0; tries < 2 && err != 0; tries++) {
        err = relayed ? -ENOENT : cluster_owner_url(c, sid, &owner);
        if (err == -ENOENT && !(err = cluster_claim(c, sid)))
            return 0; /* nobody's: this node's now */
        if (relayed)
            break;
    }
    if (err) {
        *ret = reply_json_retry(
            conn, 503,
            json_pack("{s:s, s:s}", "error", "not-owner", "message",
                      "another node owns this session and cannot be reached now; retry"),
            1);
        return 1;
    }
    *ret = start(conn, owner, method, url, body, pending, suspended);
    free(owner);
    return 1;
}

int relay_route(struct door *d, const struct principal *who, struct MHD_Connection *conn,
                const char *sid, const char *method, const char *url,
                const struct rx_buf *body, struct park **pending, enum MHD_Result *ret)
{
    bool suspended = false;
    int done;

    park_enter();
    done = relay_to_owner(d, who, conn, sid, method, url, body, pending, &suspended, ret);
    if (!suspended)
        park_leave();
    return done;
}
