/*
 * http - routes and responses. See http.h.
 */
#include "server/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <stdarg.h>
#include <unistd.h>

#include "base/now.h"
#include "effects/toolkit.h"
#include "server/api.h"
#include "server/auth.h"
#include "server/cluster.h"
#include "server/protocols/a2a.h"
#include "server/protocols/agui.h"
#include "server/protocols/lg.h"
#include "server/protocols/oai.h"
#include "server/park.h"
#include "effects/log.h"
#include "server/metrics.h"
#include "server/session_table.h"
#include "server/reply.h"
#include "server/sse.h"
#include "server/static_files.h"
#include "store/store.h"

/* Bytes of an announced body reserved at once: with its NUL, a 4 KB buffer. */
#define BODY_RESERVE_MAX 4095

/* Per-request state, kept between the access handler's calls. */
struct request {
    struct rx_buf body;
    bool too_big;
    bool nul_in_path;     /* the raw URI had %00: MHD would cut the value there */
    int64_t begun_ms;     /* when the request's headers were complete */
    struct park *pending; /* a request suspended until its answer is ready */
};

/*
 * The most bytes of body a request may send: limits.body_max, or for an
 * import (a whole chat in one document) limits.import_max. Read atomically:
 * a SIGHUP may change them.
 */
static size_t body_bound(struct http_server *srv, const char *uri)
{
    static const char import[] = "/sessions/import";
    size_t plen = strlen(srv->door.cfg->prefix), n = uri ? strcspn(uri, "?") : 0;

    if (n == plen + sizeof(import) - 1 && !strncmp(uri, srv->door.cfg->prefix, plen) &&
        !strncmp(uri + plen, import, sizeof(import) - 1))
        return __atomic_load_n(&srv->door.cfg->import_max, __ATOMIC_RELAXED);
    return __atomic_load_n(&srv->door.cfg->body_max, __ATOMIC_RELAXED);
}

/*
 * MHD's URI log callback sees the request line before it is unescaped: the
 * only place a %00 can be told from the end of the path. Its return value
 * becomes the request's state.
 */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
    struct http_server *srv = cls;
    struct request *req = calloc(1, sizeof(*req));

    (void)conn;
    if (!req)
        return NULL;
    rx_buf_init(&req->body, body_bound(srv, uri));
    /* Anywhere, query included: MHD cuts every unescaped value at a NUL. */
    req->nul_in_path = uri && strstr(uri, "%00");
    return req;
}

/* Each MCP server's state, by name: {"fs": {"status": "up", "error": null}}.
   A server that is down never makes the process unhealthy: it is only shown. */
static json_t *mcp_status(struct http_server *srv)
{
    json_t *all = toolkit_mcp_servers(session_table_tools(srv->door.sessions));
    json_t *out = json_object(), *v;
    size_t i;

    json_array_foreach(all, i, v)
    {
        json_object_set_new(
            out, json_string_value(json_object_get(v, "name")),
            json_pack("{s:O, s:O}", "status", json_object_get(v, "status"), "error",
                      json_object_get(v, "error") ? json_object_get(v, "error")
                                                  : json_null()));
    }
    json_decref(all);
    return out;
}

/*
 * Liveness, and whether writes are stored: "degraded" with the store's
 * status and reason when its disk is full or it is unusable (SPEC 6). Still
 * a 200: the process is alive and serves reads. Anyone may ask; only an
 * admin is shown more than the status word (SPEC 4.4).
 */
static enum MHD_Result health(struct http_server *srv, struct MHD_Connection *conn)
{
    struct principal who;
    struct store *st = session_table_store(srv->door.sessions);
    struct rx_error why = {""};
    enum store_health h = st ? store_health(st, &why) : STORE_OK;
    json_t *mcp = mcp_status(srv);
    json_t *store =
        h == STORE_OK
            ? json_pack("{s:s, s:b}", "status", "ok", "persistent", st != NULL)
            : json_pack("{s:s, s:s}", "status", store_health_name(h), "error", why.text);

    struct cluster *c = __atomic_load_n(&srv->door.cluster, __ATOMIC_ACQUIRE);
    bool leased = true;
    json_t *j;

    /* "o" steals `store` and `mcp`, even when the pack fails. */
    j = json_pack("{s:s, s:I, s:I, s:s, s:o, s:o}", "status",
                  door_is_stopping(&srv->door) ? "stopping"
                  : h != STORE_OK              ? "degraded"
                                               : "ok",
                  "sessions", (json_int_t)session_table_count(srv->door.sessions),
                  "uptimeMs", (json_int_t)(now_wall_ms() - srv->door.started_ms), "brain",
                  srv->door.brain_name, "store", store, "mcp", mcp);
    /* In a cluster: this node, and whether its lease lets it own sessions. */
    if (j && c) {
        leased = cluster_healthy(c, &why);
        json_object_set_new(
            j, "cluster",
            leased ? json_pack("{s:s, s:s}", "node", cluster_url(c), "lease", "ok")
                   : json_pack("{s:s, s:s, s:s}", "node", cluster_url(c), "lease",
                               "lapsed", "error", why.text));
        if (!leased && h == STORE_OK && !door_is_stopping(&srv->door))
            json_object_set_new(j, "status", json_string("degraded"));
    }
    if (j && (auth_identify(srv->auth, conn, &who) || !who.admin)) {
        json_t *brief = json_pack("{s:O}", "status", json_object_get(j, "status"));

        json_decref(j);
        j = brief;
    }
    return reply_json(conn, 200, j);
}

static enum MHD_Result metrics(struct http_server *srv, struct MHD_Connection *conn)
{
    struct session_figures sf;
    struct runtime_gauges fx;
    struct principal who;
    struct rx_buf b;
    enum MHD_Result ret;

    /* Counts of everyone's work: an admin's, or a scraper's with metrics.token. */
    if (!auth_metrics_token(srv->auth, conn) &&
        (auth_identify(srv->auth, conn, &who) || !who.admin))
        return reply_error(conn, 401, "unauthorized", NULL,
                           "/metrics needs an admin's credential or metrics.token");

    runtime_gauges(&fx);
    session_table_figures(srv->door.sessions, &sf);
    rx_buf_init(&b, RX_BUF_SMALL_MAX);
    if (metrics_render(&b, &sf, sse_clients_open(), sse_clients_dropped(), &fx) ||
        toolkit_metrics(session_table_tools(srv->door.sessions), &b)) {
        rx_buf_release(&b);
        return reply_error(conn, 500, "internal", NULL, "out of memory");
    }
    ret = reply_text(conn, 200, "text/plain; version=0.0.4", b.data, b.len);
    rx_buf_release(&b);
    return ret;
}

static enum MHD_Result static_route(struct http_server *srv, struct MHD_Connection *conn,
                                    const char *method, const char *url)
{
    struct MHD_Response *r = NULL;
    int err;

    if (strcmp(method, "GET") && strcmp(method, "HEAD"))
        return reply_method_not_allowed(conn, "GET, HEAD");
    if (!srv->web_root)
        return reply_error(conn, 404, "not-found", NULL, "no web root configured");
    err = static_files_response(srv->web_root, url, &r);
    if (err == -EACCES)
        return reply_error(conn, 403, "forbidden", NULL, "path refused");
    if (err == -ENOENT)
        return reply_error(conn, 404, "not-found", NULL, "no such file");
    if (err)
        return reply_error(conn, 500, "internal", NULL, "out of memory");
    return reply_queue(conn, MHD_HTTP_OK, r);
}

/*
 * What the web UI must know before it can call the API: the prefix (never
 * hard-coded in the page) and whether it must ask for a token. Open like
 * /healthz; it tells nothing secret.
 */
static enum MHD_Result client_config(struct http_server *srv, struct MHD_Connection *conn)
{
    return reply_json(conn, 200,
                      json_pack("{s:s, s:b, s:s}", "apiPrefix", srv->door.cfg->prefix,
                                "authRequired", auth_asks_credential(srv->auth),
                                "authMode", auth_mode_name(srv->auth)));
}

/*
 * Who the request comes from, into *who: 0, or the answer already queued
 * (a 401, or a 429 past limits.user_rate) in *ret. A CORS preflight carries
 * no credentials: it is nobody's, and sees nothing.
 */
static int identify(struct http_server *srv, const struct door_ops *d,
                    struct MHD_Connection *conn, const char *method,
                    struct principal *who, enum MHD_Result *ret)
{
    char why[96];
    int retry_s;

    if (d->open_preflight && !strcmp(method, "OPTIONS")) {
        memset(who, 0, sizeof(*who));
        return 0;
    }
    if (auth_identify(srv->auth, conn, who)) {
        *ret = d->unauthorized(conn);
        return -EACCES;
    }
    if (auth_admit(srv->auth, who, &retry_s)) {
        snprintf(why, sizeof(why), "more than %d requests a second (limits.user_rate)",
                 __atomic_load_n(&srv->door.cfg->user_rate, __ATOMIC_RELAXED));
        *ret = d->too_many(conn, why, retry_s);
        return -EAGAIN;
    }
    return 0;
}

/* The answer of a resumed request, once (the park stays in the slot until
   the request ends: its release frees it). */
static enum MHD_Result park_answer(struct http_server *srv, struct MHD_Connection *conn,
                                   struct park *p)
{
    /* The lock orders what the finishing thread wrote before park_finish. */
    pthread_mutex_lock(&p->lock);
    pthread_mutex_unlock(&p->lock);
    return p->ops->answer(p, &srv->door, conn);
}

/* `url` is under `prefix` ("" never matches): what follows it, else NULL. */
static const char *under(const char *url, const char *prefix)
{
    size_t n = strlen(prefix);

    if (!n || strncmp(url, prefix, n) || (url[n] != '/' && url[n]))
        return NULL;
    return url + n;
}

/* The client protocols, each under its own prefix (SPEC 4.3). */
static const struct door_ops *const doors[] = {&api_door, &oai_door, &lg_door, &agui_door,
                                               &a2a_door};

/* The door `url` goes through, and in *rest what follows its prefix; NULL. */
static const struct door_ops *door_of(struct http_server *srv, const char *url,
                                      const char **rest)
{
    for (size_t i = 0; i < sizeof(doors) / sizeof(doors[0]); i++)
        if ((*rest = under(url, doors[i]->prefix(srv->door.cfg))))
            return doors[i];
    return NULL;
}

/* 413 in the shape of the protocol the URL speaks. */
static enum MHD_Result too_large(struct http_server *srv, struct MHD_Connection *conn,
                                 const char *url, size_t max)
{
    const struct door_ops *d;
    const char *rest;
    char msg[96];

    snprintf(msg, sizeof(msg), "the body is over %zu bytes", max);
    if ((d = door_of(srv, url, &rest)))
        return d->too_large(conn, msg);
    return reply_error(conn, 413, "too-large", NULL, "%s", msg);
}

static enum MHD_Result route(struct http_server *srv, struct MHD_Connection *conn,
                             const char *url, const char *method, struct request *req)
{
    const struct door_ops *d;
    const char *rest;

    if (req->too_big)
        return too_large(srv, conn, url, req->body.max);
    /* Agent discovery: open, like /client.json; it shows nothing private. */
    if (!strcmp(url, A2A_CARD_PATH))
        return a2a_card(&srv->door, conn, method);
    if ((d = door_of(srv, url, &rest))) {
        struct principal who;
        enum MHD_Result ret;

        if (identify(srv, d, conn, method, &who, &ret))
            return ret;
        return d->route(&srv->door, &who, conn, method, rest, &req->body, &req->pending);
    }
    if (!strcmp(url, "/healthz"))
        return health(srv, conn);
    if (!strcmp(url, "/metrics"))
        return metrics(srv, conn);
    if (!strcmp(url, "/client.json"))
        return client_config(srv, conn);
    return static_route(srv, conn, method, url);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    struct http_server *srv = cls;
    struct request *req = *con_cls;

    (void)version;
    if (!req)
        return reply_out_of_memory(conn); /* on_uri could not make one */
    if (!req->begun_ms) {
        const char *cl =
            MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
        unsigned long long announced;

        req->begun_ms = now_mono_ms();
        if (req->nul_in_path)
            return reply_error(conn, 400, "bad-request", NULL,
                               "the path contains a NUL byte (%%00)");
        /* Refuse a body announced too big before reading a byte of it. */
        announced = cl ? strtoull(cl, NULL, 10) : 0;
        if (announced > req->body.max) {
            req->too_big = true;
            return too_large(srv, conn, url, req->body.max);
        }
        /* A small body in one allocation, not grown byte run by byte run. Only
           a small one: a length is only announced, and a client that then
           sends nothing must not hold more. (Without the memory, it grows.) */
        if (announced && announced <= BODY_RESERVE_MAX)
            rx_buf_reserve(&req->body, (size_t)announced);
        return MHD_YES;
    }
    if (*upload_data_size) {
        /* A body still incomplete well past its start (a slow trickle) is
           dropped: the idle timeout alone never fires while bytes trickle. */
        if (now_mono_ms() - req->begun_ms > srv->door.cfg->idle_timeout_ms) {
            log_info("dropping a request whose body is still incomplete after %d ms",
                     srv->door.cfg->idle_timeout_ms);
            return MHD_NO;
        }
        if (!req->too_big && rx_buf_append(&req->body, upload_data, *upload_data_size))
            req->too_big = true; /* keep reading, answer 413 at the end */
        *upload_data_size = 0;
        return MHD_YES;
    }
    /* Resumed: its answer is ready; answer, do not route again. */
    if (req->pending)
        return park_answer(srv, conn, req->pending);
    return route(srv, conn, url, method, req);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct request *req = *con_cls;

    (void)cls;
    (void)conn;
    (void)toe;
    if (req) {
        if (req->pending) {
            park_end(req->pending);
            req->pending->ops->release(req->pending);
        }
        rx_buf_release(&req->body);
        free(req);
        *con_cls = NULL;
    }
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    char line[512];

    (void)cls;
    vsnprintf(line, sizeof(line), fmt, ap);
    line[strcspn(line, "\n")] = '\0';
    log_debug("mhd: %s", line);
}

int http_server_start(struct http_server *srv, const struct config *cfg,
                      struct session_table *sessions, const char *brain_name)
{
    struct sockaddr_in addr = {.sin_family = AF_INET};
    const union MHD_DaemonInfo *info;
    char real[PATH_MAX];
    int threads;

    memset(srv, 0, sizeof(*srv));
    {
        struct rx_error why = {""};
        int err = auth_create(cfg, session_table_store(sessions), &srv->auth, &why);

        if (err) {
            log_error("%s", err == -ENOMEM ? "out of memory" : why.text);
            return err;
        }
    }
    srv->door.cfg = cfg;
    srv->door.sessions = sessions;
    srv->door.brain_name = brain_name;
    srv->door.started_ms = now_wall_ms();
    /* build/web is web/ plus its npm libraries; web/ alone still serves a page. */
    if (realpath(cfg->web_root, real) || realpath("web", real))
        srv->web_root = strdup(real);
    else
        log_warn("web root '%s' not found: only the API is served", cfg->web_root);
    addr.sin_port = htons((uint16_t)cfg->listen_port);
    if (inet_pton(AF_INET, cfg->listen_host, &addr.sin_addr) != 1) {
        log_error("listen address '%s': not an IPv4 address", cfg->listen_host);
        auth_destroy(srv->auth);
        free(srv->web_root);
        return -EINVAL;
    }
    /* Several epoll threads share the connections: an event fanned out to a
       thousand streams is written by every core, not one. */
    threads = cfg->http_threads ? cfg->http_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (threads < 1)
        threads = 1;
    if (!cfg->http_threads && threads > 4)
        threads = 4;
    srv->daemon = MHD_start_daemon(
        MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ITC | MHD_ALLOW_SUSPEND_RESUME |
            MHD_USE_ERROR_LOG,
        0, NULL, NULL, on_request, srv, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->max_connections,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv, MHD_OPTION_EXTERNAL_LOGGER,
        on_mhd_log, NULL, MHD_OPTION_URI_LOG_CALLBACK, on_uri, srv,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)((cfg->idle_timeout_ms + 999) / 1000),
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)threads, MHD_OPTION_END);
    if (!srv->daemon) {
        log_error("cannot listen on %s:%d: %s", cfg->listen_host, cfg->listen_port,
                  strerror(errno ? errno : EADDRINUSE));
        auth_destroy(srv->auth);
        free(srv->web_root);
        return -EADDRINUSE;
    }
    info = MHD_get_daemon_info(srv->daemon, MHD_DAEMON_INFO_BIND_PORT);
    srv->port = info ? info->port : cfg->listen_port;
    return 0;
}

void http_server_quiesce(struct http_server *srv)
{
    /*
     * From here every new request is answered 503 "stopping"; connections are
     * still accepted until MHD_stop_daemon. MHD_quiesce_daemon is not used:
     * in libmicrohttpd 0.9.75 it races a worker thread that wakes (an open
     * stream's traffic is enough) and takes the listening socket out of its
     * epoll set first, and then aborts ("Failed to remove listen FD from
     * epoll set"); closing the socket here aborted the same way.
     */
    __atomic_store_n(&srv->door.stopping, true, __ATOMIC_RELEASE);
}

void http_server_stop(struct http_server *srv)
{
    /* Every POST suspended for the log is resumed within a commit. */
    park_drain();
    if (srv->daemon)
        MHD_stop_daemon(srv->daemon);
    srv->daemon = NULL;
    auth_destroy(srv->auth);
    srv->auth = NULL;
    free(srv->web_root);
    srv->web_root = NULL;
}
