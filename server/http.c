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

#include "effects/now.h"
#include "server/log.h"
#include "server/metrics.h"
#include "server/session_table.h"
#include "server/sse.h"
#include "server/static_files.h"

/* Per-request state, kept between the access handler's calls. */
struct request {
    struct rx_buf body;
    bool too_big;
};

/* Written by the main thread at shutdown, read by every MHD thread. */
static bool http_is_stopping(const struct http_server *srv)
{
    return __atomic_load_n(&srv->stopping, __ATOMIC_ACQUIRE);
}

/* ---- responses ------------------------------------------------------------ */

static enum MHD_Result send_text(struct MHD_Connection *conn, unsigned status,
                                 const char *type, const char *text, size_t len)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)text, MHD_RESPMEM_MUST_COPY);
    enum MHD_Result ret;

    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    MHD_add_response_header(r, "Cache-Control", "no-store");
    ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

/* Steals `j`. */
static enum MHD_Result send_json(struct MHD_Connection *conn, unsigned status, json_t *j)
{
    char *text = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    enum MHD_Result ret;

    json_decref(j);
    if (!text)
        return MHD_NO;
    ret = send_text(conn, status, "application/json", text, strlen(text));
    free(text);
    return ret;
}

/* Every error is JSON: {"error": code, "message": why, ["field": f]}. */
static enum MHD_Result send_error(struct MHD_Connection *conn, unsigned status,
                                  const char *code, const char *field, const char *fmt,
                                  ...) __attribute__((format(printf, 5, 6)));

static enum MHD_Result send_error(struct MHD_Connection *conn, unsigned status,
                                  const char *code, const char *field, const char *fmt,
                                  ...)
{
    char msg[512];
    va_list ap;
    json_t *j;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    metrics_http_error((int)status);
    j = json_pack("{s:s, s:s}", "error", code, "message", msg);
    /* A message quoting a path that is not UTF-8 cannot be a JSON string;
       the answer must still be JSON. */
    if (!j)
        j = json_pack("{s:s, s:s}", "error", code, "message",
                      "the request names something that is not valid UTF-8");
    if (j && field)
        json_object_set_new(j, "field", json_string(field));
    return send_json(conn, status, j);
}

static enum MHD_Result send_stream(struct MHD_Connection *conn, struct MHD_Response *r)
{
    enum MHD_Result ret;

    if (!r)
        return send_error(conn, 500, "internal", NULL, "out of memory");
    ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result method_not_allowed(struct MHD_Connection *conn, const char *allow)
{
    json_t *j = json_pack("{s:s, s:s}", "error", "method-not-allowed", "message",
                          "this route takes other methods");
    char *text = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    struct MHD_Response *r;
    enum MHD_Result ret = MHD_NO;

    json_decref(j);
    if (!text)
        return MHD_NO;
    r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "application/json");
    MHD_add_response_header(r, "Allow", allow);
    metrics_http_error(405);
    ret = MHD_queue_response(conn, MHD_HTTP_METHOD_NOT_ALLOWED, r);
    MHD_destroy_response(r);
    return ret;
}

/* ---- handlers ------------------------------------------------------------- */

static bool content_type_ok(struct MHD_Connection *conn)
{
    const char *ct = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Type");
    size_t n;

    if (!ct)
        return false;
    n = strcspn(ct, "; \t");
    /* text/plain is what the original accepted (a fetch without preflight). */
    return (n == 16 && !strncasecmp(ct, "application/json", n)) ||
           (n == 10 && !strncasecmp(ct, "text/plain", n));
}

/* The hot path's answer, written directly: no JSON tree for four fields. */
static enum MHD_Result send_accepted(struct MHD_Connection *conn,
                                     const struct submit_result *res, struct rx_input *in)
{
    struct rx_buf b;
    enum MHD_Result ret;
    int err;

    rx_buf_init(&b, RX_BUF_SMALL_MAX);
    err = rx_buf_printf(&b, "{\"success\":true,\"timestamp\":%lld,\"seq\":%lld",
                        (long long)res->timestamp, (long long)res->seq);
    if (!err && in->message_id)
        err =
            rx_buf_puts(&b, ",\"messageId\":") || rx_buf_put_json_str(&b, in->message_id);
    if (!err && res->verdict == RX_UNCHANGED)
        err = rx_buf_puts(&b, ",\"unchanged\":true");
    if (!err)
        err = rx_buf_putc(&b, '}');
    rx_input_release(in);
    /* The input is applied and stored by now: never answer it with an error
       (a client would retry it); the short form still says it was taken. */
    ret = err ? send_text(conn, 200, "application/json", "{\"success\":true}", 16)
              : send_text(conn, 200, "application/json", b.data, b.len);
    rx_buf_release(&b);
    return ret;
}

static enum MHD_Result submit_input(struct http_server *srv, struct MHD_Connection *conn,
                                    struct session *s, struct request *req)
{
    struct submit_result res;
    struct rx_input in;
    json_error_t jerr;
    const char *field = NULL;
    struct rx_error why = {""};
    json_t *j;
    int err;

    if (http_is_stopping(srv))
        return send_error(conn, 503, "shutting-down", NULL, "the server is stopping");
    if (!content_type_ok(conn))
        return send_error(conn, 415, "unsupported-media-type", NULL,
                          "send the input as Content-Type: application/json");
    j = json_loadb(req->body.data ? req->body.data : "", req->body.len, 0, &jerr);
    if (!j)
        return send_error(conn, 400, "invalid-json", NULL, "line %d, column %d: %s",
                          jerr.line, jerr.column, jerr.text);
    err = rx_input_parse(j, &in, &field, &why);
    json_decref(j);
    if (err == -ENOMEM)
        return send_error(conn, 500, "internal", NULL, "out of memory");
    if (err)
        return send_error(conn, 400, "invalid-input", field, "%s", why.text);
    if (rx_input_type_origin(in.type) != RX_ORIGIN_USER &&
        !srv->cfg->allow_agent_inputs) {
        rx_input_release(&in);
        return send_error(conn, 403, "forbidden", "type",
                          "'%s' inputs come from the server's own effects "
                          "(set api.allow_agent_inputs to accept them)",
                          rx_input_type_name(in.type));
    }
    err = session_submit(s, &in, NULL, &res);
    if (err) {
        rx_input_release(&in);
        if (err == -EBUSY)
            return send_error(conn, 429, "queue-full", NULL,
                              "too many inputs wait for this session; retry shortly");
        if (err == -ENOENT)
            return send_error(conn, http_is_stopping(srv) ? 503 : 404, "not-found", NULL,
                              "the session is gone");
        return send_error(conn, 500, "internal", NULL, "%s", strerror(-err));
    }
    if (res.verdict == RX_REJECTED && res.reason == RX_REASON_INVALID) {
        rx_input_release(&in);
        return send_error(conn, 400, "invalid-input", res.field,
                          "'%s' is missing or invalid", res.field ? res.field : "input");
    }
    if (res.verdict == RX_REJECTED) {
        json_t *e = json_pack("{s:s, s:s, s:s}", "error", "rejected", "reason",
                              rx_reason_name(res.reason), "message",
                              "the input does not apply to the current state");

        rx_input_release(&in);
        metrics_http_error(409);
        return send_json(conn, 409, e);
    }
    return send_accepted(conn, &res, &in);
}

/* session_attach_fn: a channel becomes this connection's SSE response. */
static void *attach_stream(void *conn, struct sse_channel *ch, struct sse_frame **first,
                           size_t n, bool closed)
{
    return sse_channel_subscribe(ch, conn, first, n, closed);
}

static bool wants_sse(struct MHD_Connection *conn)
{
    const char *a = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Accept");

    return a && strstr(a, "text/event-stream");
}

/* A non-negative integer query value, or -1. */
static long long parse_seq(const char *v)
{
    char *end;
    long long n;

    if (!v || !*v)
        return -1;
    errno = 0;
    n = strtoll(v, &end, 10);
    return *end || errno || n < 0 ? -1 : n;
}

static enum MHD_Result store_error_answer(struct MHD_Connection *conn, int err)
{
    if (err == -ENOENT)
        return send_error(conn, 404, "not-found", NULL, "no such session in the log");
    if (err == -ERANGE)
        return send_error(conn, 400, "invalid-input", "at",
                          "'at' is past the last input");
    if (err == -ENOSPC)
        return send_error(conn, 507, "storage-full", NULL, "the database is full");
    if (err == -ENOSYS)
        return send_error(
            conn, 501, "no-database", NULL,
            "the server keeps no log (--db :memory:); start it with --db FILE");
    return send_error(conn, 500, "internal", NULL, "%s", strerror(-err));
}

/* GET .../sessions/<sid>?at=<seq>: the state as of that input (time travel). */
static enum MHD_Result state_at(struct MHD_Connection *conn, struct session *s,
                                const char *at)
{
    long long seq = parse_seq(at);
    json_t *j = NULL;
    int err;

    if (seq < 0)
        return send_error(conn, 400, "invalid-input", "at",
                          "'at' must be a non-negative integer");
    err = session_state_at(s, seq, &j);
    return err ? store_error_answer(conn, err) : send_json(conn, 200, j);
}

/* GET .../sessions/<sid>/history[?after=N&limit=M]: the inputs with their seq. */
static enum MHD_Result history(struct MHD_Connection *conn, struct session *s)
{
    const char *a = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "after");
    const char *l = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "limit");
    long long after = a ? parse_seq(a) : 0, limit = l ? parse_seq(l) : 0;
    json_t *j = NULL;
    int err;

    if (after < 0 || limit < 0)
        return send_error(conn, 400, "invalid-input", after < 0 ? "after" : "limit",
                          "must be a non-negative integer");
    err = session_history(s, after, (int)(limit > 100000 ? 100000 : limit), &j);
    return err ? store_error_answer(conn, err) : send_json(conn, 200, j);
}

/* POST .../sessions/<sid>/fork {"at": seq}: a new session from that point. */
static enum MHD_Result fork_session(struct http_server *srv, struct MHD_Connection *conn,
                                    struct session *s, struct request *req)
{
    json_t *j, *at;
    json_error_t jerr;
    struct session *f = NULL;
    json_int_t seq;
    int err;

    if (http_is_stopping(srv))
        return send_error(conn, 503, "shutting-down", NULL, "the server is stopping");
    if (!content_type_ok(conn))
        return send_error(conn, 415, "unsupported-media-type", NULL,
                          "send {\"at\": seq} as Content-Type: application/json");
    j = json_loadb(req->body.data ? req->body.data : "", req->body.len, 0, &jerr);
    if (!j)
        return send_error(conn, 400, "invalid-json", NULL, "line %d, column %d: %s",
                          jerr.line, jerr.column, jerr.text);
    at = json_object_get(j, "at");
    if (!json_is_integer(at) || json_integer_value(at) < 0) {
        json_decref(j);
        return send_error(conn, 400, "invalid-input", "at",
                          "'at' must be a non-negative integer (an input's seq)");
    }
    seq = json_integer_value(at);
    json_decref(j);
    err = session_table_fork(srv->sessions, session_id(s), seq, &f);
    if (err)
        return store_error_answer(conn, err);
    j = json_pack("{s:s, s:s, s:I}", "id", session_id(f), "from", session_id(s), "at",
                  seq);
    log_info("session %s forked from %s at %lld", session_id(f), session_id(s),
             (long long)seq);
    session_unref(f);
    return send_json(conn, 201, j);
}

/* Routes under /sessions/<sid>, and the seed's routes on "default". */
static enum MHD_Result session_route(struct http_server *srv, struct MHD_Connection *conn,
                                     const char *method, struct session *s,
                                     const char *rest, struct request *req)
{
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD");

    if (!*rest) {
        const char *at = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "at");

        if (get && at)
            return state_at(conn, s, at);
        if (get)
            return send_json(conn, 200, session_state_json(s));
        if (!strcmp(method, "DELETE")) {
            if (session_table_delete(srv->sessions, session_id(s)))
                return send_error(conn, 404, "not-found", NULL, "no such session");
            return send_text(conn, MHD_HTTP_NO_CONTENT, "application/json", "", 0);
        }
        return method_not_allowed(conn, "GET, DELETE");
    }
    if (!strcmp(rest, "/moorex")) {
        if (get) {
            const char *mode =
                MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "mode");

            return send_stream(conn, session_subscribe(s, mode && !strcmp(mode, "patch"),
                                                       attach_stream, conn));
        }
        if (!strcmp(method, "POST"))
            return submit_input(srv, conn, s, req);
        return method_not_allowed(conn, "GET, POST");
    }
    if (!strcmp(rest, "/history")) {
        if (!get)
            return method_not_allowed(conn, "GET");
        return history(conn, s);
    }
    if (!strcmp(rest, "/fork")) {
        if (strcmp(method, "POST"))
            return method_not_allowed(conn, "POST");
        return fork_session(srv, conn, s, req);
    }
    if (!strncmp(rest, "/messages/", 10) && rest[10] && !strchr(rest + 10, '/')) {
        void *r = NULL;
        json_t *j = NULL;
        bool sse = wants_sse(conn);
        int err;

        if (!get)
            return method_not_allowed(conn, "GET");
        err = sse ? session_message_subscribe(s, rest + 10, attach_stream, conn, &r)
                  : session_message_json(s, rest + 10, &j);
        if (err == -ENOENT)
            return send_error(conn, 404, "not-found", NULL, "no assistant message '%s'",
                              rest + 10);
        if (err)
            return send_error(conn, 500, "internal", NULL, "out of memory");
        return sse ? send_stream(conn, r) : send_json(conn, 200, j);
    }
    return send_error(conn, 404, "not-found", NULL, "no such route");
}

static enum MHD_Result sessions_root(struct http_server *srv, struct MHD_Connection *conn,
                                     const char *method)
{
    struct session *s;
    int err;

    if (!strcmp(method, "GET"))
        return send_json(conn, 200, session_table_list(srv->sessions));
    if (strcmp(method, "POST"))
        return method_not_allowed(conn, "GET, POST");
    if (http_is_stopping(srv))
        return send_error(conn, 503, "shutting-down", NULL, "the server is stopping");
    err = session_table_create_session(srv->sessions, NULL, &s);
    if (err == -ENOSPC)
        return send_error(conn, 429, "too-many-sessions", NULL,
                          "the session limit (limits.max_sessions) is reached");
    if (err)
        return send_error(conn, 500, "internal", NULL, "%s", strerror(-err));
    log_info("session %s created", session_id(s));
    {
        json_t *j = json_pack("{s:s}", "id", session_id(s));

        session_unref(s);
        return send_json(conn, 201, j);
    }
}

static enum MHD_Result api_route(struct http_server *srv, struct MHD_Connection *conn,
                                 const char *method, const char *path,
                                 struct request *req)
{
    char sid[SESSION_ID_MAX + 1];
    const char *rest;
    struct session *s;
    enum MHD_Result ret;
    size_t n;

    if (!strcmp(path, "/sessions"))
        return sessions_root(srv, conn, method);
    if (!strncmp(path, "/sessions/", 10)) {
        n = strcspn(path + 10, "/");
        if (!n || n > SESSION_ID_MAX)
            return send_error(conn, 404, "not-found", NULL, "no such session");
        memcpy(sid, path + 10, n);
        sid[n] = '\0';
        rest = path + 10 + n;
    } else if (!strcmp(path, "/moorex") || !strncmp(path, "/messages/", 10)) {
        strcpy(sid, "default"); /* the seed's routes */
        rest = path;
    } else {
        return send_error(conn, 404, "not-found", NULL, "no such route");
    }
    s = session_table_get(srv->sessions, sid);
    if (!s)
        return send_error(conn, 404, "not-found", NULL, "no session '%s'", sid);
    ret = session_route(srv, conn, method, s, rest, req);
    session_unref(s);
    return ret;
}

static enum MHD_Result health(struct http_server *srv, struct MHD_Connection *conn)
{
    return send_json(conn, 200,
                     json_pack("{s:s, s:I, s:I, s:s}", "status",
                               http_is_stopping(srv) ? "stopping" : "ok", "sessions",
                               (json_int_t)session_table_count(srv->sessions), "uptimeMs",
                               (json_int_t)(now_wall_ms() - srv->started_ms), "brain",
                               srv->brain_name));
}

static enum MHD_Result metrics(struct http_server *srv, struct MHD_Connection *conn)
{
    struct rx_buf b;
    enum MHD_Result ret;

    rx_buf_init(&b, RX_BUF_SMALL_MAX);
    if (metrics_render(&b, session_table_count(srv->sessions), sse_clients_open(),
                       sse_clients_dropped(),
                       session_table_effects_running(srv->sessions))) {
        rx_buf_release(&b);
        return send_error(conn, 500, "internal", NULL, "out of memory");
    }
    ret = send_text(conn, 200, "text/plain; version=0.0.4", b.data, b.len);
    rx_buf_release(&b);
    return ret;
}

static enum MHD_Result static_route(struct http_server *srv, struct MHD_Connection *conn,
                                    const char *method, const char *url)
{
    struct MHD_Response *r = NULL;
    enum MHD_Result ret;
    int err;

    if (strcmp(method, "GET") && strcmp(method, "HEAD"))
        return method_not_allowed(conn, "GET, HEAD");
    if (!srv->web_root)
        return send_error(conn, 404, "not-found", NULL, "no web root configured");
    err = static_files_response(srv->web_root, url, &r);
    if (err == -EACCES)
        return send_error(conn, 403, "forbidden", NULL, "path refused");
    if (err == -ENOENT)
        return send_error(conn, 404, "not-found", NULL, "no such file");
    if (err)
        return send_error(conn, 500, "internal", NULL, "out of memory");
    ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

/* Bearer token, or ?token= for EventSource (which cannot set headers). */
static bool authorized(struct http_server *srv, struct MHD_Connection *conn)
{
    const char *want = srv->cfg->auth_token, *got;
    size_t n = strlen(want), diff = 0;

    if (!*want)
        return true;
    got = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    if (got && !strncmp(got, "Bearer ", 7))
        got += 7;
    else
        got = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "token");
    if (!got || strlen(got) != n)
        return false;
    for (size_t i = 0; i < n; i++) /* constant time: no early exit */
        diff |= (size_t)(got[i] ^ want[i]);
    return diff == 0;
}

static enum MHD_Result route(struct http_server *srv, struct MHD_Connection *conn,
                             const char *url, const char *method, struct request *req)
{
    size_t plen = strlen(srv->cfg->prefix);

    if (req->too_big)
        return send_error(conn, 413, "too-large", NULL, "the body is over %zu bytes",
                          srv->cfg->body_max);
    if (!strncmp(url, srv->cfg->prefix, plen) && (url[plen] == '/' || !url[plen])) {
        if (!authorized(srv, conn))
            return send_error(conn, 401, "unauthorized", NULL,
                              "send 'Authorization: Bearer <token>'");
        return api_route(srv, conn, method, url + plen, req);
    }
    if (!strcmp(url, "/healthz"))
        return health(srv, conn);
    if (!strcmp(url, "/metrics"))
        return metrics(srv, conn);
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
    if (!req) {
        const char *cl =
            MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");

        req = calloc(1, sizeof(*req));
        if (!req)
            return MHD_NO;
        rx_buf_init(&req->body, srv->cfg->body_max);
        *con_cls = req;
        /* Refuse a body announced too big before reading a byte of it. */
        if (cl && strtoull(cl, NULL, 10) > srv->cfg->body_max) {
            req->too_big = true;
            return send_error(conn, 413, "too-large", NULL, "the body is over %zu bytes",
                              srv->cfg->body_max);
        }
        return MHD_YES;
    }
    if (*upload_data_size) {
        if (!req->too_big && rx_buf_append(&req->body, upload_data, *upload_data_size))
            req->too_big = true; /* keep reading, answer 413 at the end */
        *upload_data_size = 0;
        return MHD_YES;
    }
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
    srv->cfg = cfg;
    srv->sessions = sessions;
    srv->brain_name = brain_name;
    srv->started_ms = now_wall_ms();
    /* build/web is web/ plus its npm libraries; web/ alone still serves a page. */
    if (realpath(cfg->web_root, real) || realpath("web", real))
        srv->web_root = strdup(real);
    else
        log_warn("web root '%s' not found: only the API is served", cfg->web_root);
    addr.sin_port = htons((uint16_t)cfg->listen_port);
    if (inet_pton(AF_INET, cfg->listen_host, &addr.sin_addr) != 1) {
        log_error("listen address '%s': not an IPv4 address", cfg->listen_host);
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
        on_mhd_log, NULL, MHD_OPTION_LISTENING_ADDRESS_REUSE, 1U,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)threads, MHD_OPTION_END);
    if (!srv->daemon) {
        log_error("cannot listen on %s:%d: %s", cfg->listen_host, cfg->listen_port,
                  strerror(errno ? errno : EADDRINUSE));
        free(srv->web_root);
        return -EADDRINUSE;
    }
    info = MHD_get_daemon_info(srv->daemon, MHD_DAEMON_INFO_BIND_PORT);
    srv->port = info ? info->port : cfg->listen_port;
    return 0;
}

void http_server_quiesce(struct http_server *srv)
{
    __atomic_store_n(&srv->stopping, true, __ATOMIC_RELEASE);
    if (srv->daemon) {
        MHD_socket s = MHD_quiesce_daemon(srv->daemon);

        if (s != MHD_INVALID_SOCKET)
            close(s);
    }
}

void http_server_stop(struct http_server *srv)
{
    if (srv->daemon)
        MHD_stop_daemon(srv->daemon);
    srv->daemon = NULL;
    free(srv->web_root);
    srv->web_root = NULL;
}
