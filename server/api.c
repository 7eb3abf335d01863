/*
 * api - the session routes of SPEC section 4. See api.h.
 */
#include "server/api.h"
#include "server/api_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "effects/log.h"
#include "effects/toolkit.h"
#include "server/metrics.h"
#include "server/relay.h"
#include "server/reply.h"
#include "server/session.h"
#include "server/session_follow.h"
#include "server/session_table.h"
#include "server/sse.h"
#include "state_machine/rx_json.h"

/* A body rx_json_parse refused: 400 for the client's text, 500 for our memory. */
static enum MHD_Result reply_parse_error(struct MHD_Connection *conn, int err,
                                         const struct rx_error *why)
{
    if (err == -ENOMEM)
        return reply_error(conn, 500, "internal", NULL, "out of memory");
    return reply_error(conn, 400, "invalid-json", NULL, "%s", why->text);
}

bool api__content_type_ok(struct MHD_Connection *conn)
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
    /* One allocation: the answer is about 100 bytes plus the messageId. */
    err = rx_buf_reserve(&b, 96 + (in->message_id ? strlen(in->message_id) : 0)) ||
          rx_buf_puts(&b, "{\"success\":true,\"timestamp\":") ||
          rx_buf_put_i64(&b, res->timestamp) || rx_buf_puts(&b, ",\"seq\":") ||
          rx_buf_put_i64(&b, res->seq);
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
    ret = err ? reply_text(conn, 200, "application/json", "{\"success\":true}", 16)
              : reply_text(conn, 200, "application/json", b.data, b.len);
    rx_buf_release(&b);
    return ret;
}

/* The answer to a submitted input; `in` is released. */
static enum MHD_Result submit_answer(struct door *srv, struct MHD_Connection *conn,
                                     int err, const struct submit_result *res,
                                     struct rx_input *in)
{
    if (err) {
        rx_input_release(in);
        if (err == -EBUSY)
            return reply_error(conn, 429, "queue-full", NULL,
                               "too many inputs wait for this session; retry shortly");
        if (err == -ENOENT)
            return reply_error(conn, door_is_stopping(srv) ? 503 : 404, "not-found", NULL,
                               "the session is gone");
        /* Not stored, so not acknowledged: the store's own status. */
        return api__store_error(conn, err);
    }
    if (res->verdict == RX_REJECTED && res->reason == RX_REASON_INVALID) {
        rx_input_release(in);
        return reply_error(conn, 400, "invalid-input", res->field,
                           "'%s' is missing or invalid",
                           res->field ? res->field : "input");
    }
    if (res->verdict == RX_REJECTED) {
        json_t *e = json_pack("{s:s, s:s, s:s}", "error", "rejected", "reason",
                              rx_reason_name(res->reason), "message",
                              "the input does not apply to the current state");

        rx_input_release(in);
        return reply_json(conn, 409, e);
    }
    return send_accepted(conn, res, in);
}

/*
 * A POST whose input waits for the log (group commit, SPEC 6): no MHD thread
 * waits for a commit. The connection is parked (server/park) until the
 * store's thread has the answer (on_durable), which resumes it; MHD then
 * calls the handler again, which answers from here (pending_answer). Two
 * references: the request's and the callback's.
 */
struct api_pending {
    struct park park;
    int refs; /* atomic */
    int err;  /* err and res: written before park_finish, read after the resume */
    struct submit_result res;
    struct rx_input in; /* kept for the answer (its messageId) */
};

static void pending_unref(struct api_pending *p)
{
    if (__atomic_sub_fetch(&p->refs, 1, __ATOMIC_ACQ_REL))
        return;
    rx_input_release(&p->in);
    park_destroy(&p->park);
    free(p);
}

static void pending_release(struct park *park)
{
    pending_unref((struct api_pending *)park);
}

/* session_done_fn, on the store's thread: the input is durable, or is not. */
static void on_durable(void *arg, int err, const struct submit_result *res)
{
    struct api_pending *p = arg;

    p->err = err;
    p->res = *res;
    park_finish(&p->park);
    pending_unref(p);
}

static enum MHD_Result pending_answer(struct park *park, struct door *srv,
                                      struct MHD_Connection *conn)
{
    struct api_pending *p = (struct api_pending *)park;

    return submit_answer(srv, conn, p->err, &p->res, &p->in);
}

static const struct park_ops pending_ops = {pending_answer, pending_release};

static enum MHD_Result submit_parked(struct door *srv, struct MHD_Connection *conn,
                                     struct session *s, const struct rx_buf *body,
                                     struct park **slot, bool *suspended)
{
    struct submit_result res;
    struct api_pending *p;
    struct rx_input in;
    struct rx_error jerr;
    const char *field = NULL;
    struct rx_error why = {""};
    enum MHD_Result ret;
    json_t *j;
    int err;

    if (door_is_stopping(srv))
        return reply_error(conn, 503, "shutting-down", NULL, "the server is stopping");
    if (!api__content_type_ok(conn))
        return reply_error(conn, 415, "unsupported-media-type", NULL,
                           "send the input as Content-Type: application/json");
    if ((err = rx_json_parse(body->data, body->len, 0, &j, &jerr)))
        return reply_parse_error(conn, err, &jerr);
    err = rx_input_parse(j, &in, &field, &why);
    json_decref(j);
    if (err == -ENOMEM)
        return reply_error(conn, 500, "internal", NULL, "out of memory");
    if (err)
        return reply_error(conn, 400, "invalid-input", field, "%s", why.text);
    if (!rx_input_calls_depth_ok(&in)) {
        rx_input_release(&in);
        return reply_error(conn, 400, "invalid-input", "toolCalls",
                           "tool arguments nest deeper than %d levels",
                           RX_JSON_DEPTH_MAX);
    }
    if (rx_input_type_origin(in.type) != RX_ORIGIN_USER &&
        !srv->cfg->allow_agent_inputs) {
        /* The name first: releasing the input resets its type. */
        const char *type = rx_input_type_name(in.type);

        rx_input_release(&in);
        return reply_error(conn, 403, "forbidden", "type",
                           "'%s' inputs come from the server's own effects "
                           "(set api.allow_agent_inputs to accept them)",
                           type);
    }
    p = calloc(1, sizeof(*p));
    if (!p) {
        rx_input_release(&in);
        return reply_error(conn, 500, "internal", NULL, "out of memory");
    }
    park_init(&p->park, &pending_ops, conn);
    p->refs = 2;
    p->in = in; /* moved */
    err = session_submit_start(s, &p->in, NULL, &res, on_durable, p);
    if (err != SESSION_PENDING) {
        ret = submit_answer(srv, conn, err, &res, &p->in);
        pending_unref(p); /* on_durable will not be called */
        pending_unref(p);
        return ret;
    }
    if (!park_suspend(&p->park)) { /* durable already: answer now */
        ret = submit_answer(srv, conn, p->err, &p->res, &p->in);
        pending_unref(p);
        return ret;
    }
    *suspended = true; /* the count taken by submit_input stays until it resumes */
    *slot = &p->park;
    return MHD_YES;
}

enum MHD_Result api__retry_soon(struct MHD_Connection *conn, const char *code,
                                const char *msg)
{
    return reply_json_retry(conn, 503,
                            json_pack("{s:s, s:s}", "error", code, "message", msg), 1);
}

/*
 * POST of one input. The request is counted as parked before the stopping
 * check, so a shutdown that passes park_drain can never meet a POST that
 * slipped in and is about to suspend (MHD_stop_daemon with a suspended
 * connection aborts). A request answered at once gives its count back here.
 */
static enum MHD_Result submit_input(struct door *srv, const struct principal *who,
                                    struct MHD_Connection *conn, struct session *s,
                                    const struct rx_buf *body, struct park **slot)
{
    bool suspended = false;
    enum MHD_Result ret;
    char url[512];

    /* One user's work may not take the whole effect pool. */
    if (!session_table_may_work(srv->sessions, who))
        return reply_json_retry(
            conn, 429,
            json_pack("{s:s, s:s}", "error", "too-many-running-effects", "message",
                      "your sessions run as many effects as a user may "
                      "(limits.user_running_effects)"),
            1);
    park_enter();
    /* In a cluster, a session another node owns: its owner answers. */
    snprintf(url, sizeof(url), "%s/sessions/%s/moorex", srv->cfg->prefix, session_id(s));
    if (!relay_to_owner(srv, who, conn, session_id(s), "POST", url, body, slot,
                        &suspended, &ret))
        ret = submit_parked(srv, conn, s, body, slot, &suspended);
    if (!suspended)
        park_leave();
    return ret;
}

/*
 * session_attach_fn: a channel becomes this connection's SSE response. Streams
 * are exempt from limits.idle_timeout_ms: pings keep them alive, and a peer
 * that went away is noticed by the SSE layer itself.
 */
void *api__attach_stream(void *conn, struct sse_channel *ch, struct sse_frame **first,
                         size_t n, bool closed)
{
    MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, 0U);
    return sse_channel_subscribe(ch, conn, first, n, closed);
}

static bool wants_sse(struct MHD_Connection *conn)
{
    const char *a = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Accept");

    return a && strstr(a, "text/event-stream");
}

/*
 * One status per cause (SPEC 4): -ENOSPC no room for the write (507), -EIO
 * the store is unusable (503, /healthz says why), -ENFILE the session limit
 * (429), never one for another.
 */
enum MHD_Result api__store_error(struct MHD_Connection *conn, int err)
{
    if (err == -ENOENT)
        return reply_error(conn, 404, "not-found", NULL, "no such session in the log");
    if (err == -ERANGE)
        return reply_error(conn, 400, "invalid-input", "at",
                           "'at' is past the last input");
    if (err == -ENOSPC)
        return reply_error(conn, 507, "storage-full", NULL,
                           "the disk or the database quota is full; nothing was stored");
    if (err == -ESTALE || err == -EREMOTE)
        return api__retry_soon(conn, "not-owner",
                               "another node took this session over; retry");
    if (err == -EIO)
        return reply_error(conn, 503, "store-unavailable", NULL,
                           "the store cannot write (see /healthz); nothing was stored");
    if (err == -ENFILE)
        return reply_error(conn, 429, "too-many-sessions", NULL,
                           "the session limit (limits.max_sessions) is reached");
    if (err == -EDQUOT)
        return reply_error(
            conn, 429, "too-many-sessions", NULL,
            "you own as many sessions as a user may (limits.user_sessions)");
    if (err == -ENOSYS)
        return reply_error(
            conn, 501, "no-database", NULL,
            "the server keeps no log (--db :memory:); start it with --db FILE");
    return reply_error(conn, 500, "internal", NULL, "%s", strerror(-err));
}

/*
 * GET .../sessions/<sid>: the current state, encoded once into a buffer that
 * MHD then owns and frees: no JSON tree, no second copy. Its bytes are those
 * reply_json gave when it re-encoded a parse of the same encoding.
 */
static enum MHD_Result state_now(struct MHD_Connection *conn, struct session *s)
{
    struct rx_buf b;
    int err;

    rx_buf_init(&b, RX_BUF_STATE_MAX);
    if ((err = session_state_encode(s, &b))) {
        rx_buf_release(&b);
        return reply_error(conn, 500, "internal", NULL, "%s",
                           err == -E2BIG ? "the state is larger than an answer may be"
                                         : "out of memory");
    }
    return reply_buf(conn, 200, &b);
}

/* GET .../sessions/<sid>?at=<seq>: the state as of that input (time travel). */
static enum MHD_Result state_at(struct MHD_Connection *conn, struct session *s,
                                const char *at)
{
    long long seq = door_parse_count(at);
    json_t *j = NULL;
    int err;

    if (seq < 0)
        return reply_error(conn, 400, "invalid-input", "at",
                           "'at' must be a non-negative integer");
    err = session_state_at(s, seq, &j);
    return err ? api__store_error(conn, err) : reply_json(conn, 200, j);
}

/* GET .../sessions/<sid>/history: pages of `limit` inputs (SPEC 4). */
#define HISTORY_LIMIT_DEFAULT 1000
#define HISTORY_LIMIT_MAX     10000

/*
 * GET .../sessions/<sid>/history[?after=N&limit=M]: the inputs with their
 * seq, copied from the log as stored (never parsed), read through the
 * store's read-only connection: neither the session's lock nor the store's
 * writer waits for it. MHD owns and frees the page.
 */
static enum MHD_Result history(struct MHD_Connection *conn, struct session *s)
{
    const char *a = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "after");
    const char *l = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "limit");
    long long after = a ? door_parse_count(a) : 0, limit = l ? door_parse_count(l) : 0;
    struct rx_buf b;
    int err;

    if (after < 0 || limit < 0)
        return reply_error(conn, 400, "invalid-input", after < 0 ? "after" : "limit",
                           "must be a non-negative integer");
    if (!limit)
        limit = HISTORY_LIMIT_DEFAULT;
    if (limit > HISTORY_LIMIT_MAX)
        limit = HISTORY_LIMIT_MAX;
    rx_buf_init(&b, RX_BUF_STATE_MAX);
    if ((err = session_history(s, after, (int)limit, &b))) {
        rx_buf_release(&b);
        return api__store_error(conn, err);
    }
    return reply_buf(conn, 200, &b);
}

/* POST .../sessions/<sid>/fork {"at": seq}: a new session from that point. */
static enum MHD_Result fork_session(struct door *srv, const struct principal *who,
                                    struct MHD_Connection *conn, struct session *s,
                                    const struct rx_buf *body)
{
    json_t *j, *at;
    struct rx_error jerr;
    struct session *f = NULL;
    json_int_t seq;
    int err;

    if (door_is_stopping(srv))
        return reply_error(conn, 503, "shutting-down", NULL, "the server is stopping");
    if (!api__content_type_ok(conn))
        return reply_error(conn, 415, "unsupported-media-type", NULL,
                           "send {\"at\": seq} as Content-Type: application/json");
    if ((err = rx_json_parse(body->data, body->len, 0, &j, &jerr)))
        return reply_parse_error(conn, err, &jerr);
    at = json_object_get(j, "at");
    if (!json_is_integer(at) || json_integer_value(at) < 0) {
        json_decref(j);
        return reply_error(conn, 400, "invalid-input", "at",
                           "'at' must be a non-negative integer (an input's seq)");
    }
    seq = json_integer_value(at);
    json_decref(j);
    err = session_table_fork(srv->sessions, session_id(s), seq, who, &f);
    if (err)
        return api__store_error(conn, err);
    j = json_pack("{s:s, s:s, s:I}", "id", session_id(f), "from", session_id(s), "at",
                  seq);
    log_info("session %s forked from %s at %lld", session_id(f), session_id(s),
             (long long)seq);
    session_unref(f);
    return reply_json(conn, 201, j);
}

/* Routes under /sessions/<sid>, and the seed's routes on "default". */
static enum MHD_Result session_route(struct door *srv, const struct principal *who,
                                     struct MHD_Connection *conn, const char *method,
                                     struct session *s, const char *rest,
                                     const struct rx_buf *body, struct park **pending)
{
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD");

    if (!*rest) {
        const char *at = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "at");

        if (get && at)
            return state_at(conn, s, at);
        if (get)
            return state_now(conn, s);
        if (!strcmp(method, "DELETE")) {
            int err = session_table_delete(srv->sessions, session_id(s));

            /* 204 only once the deletion is stored. */
            if (err == -ENOENT)
                return reply_error(conn, 404, "not-found", NULL, "no such session");
            if (err)
                return api__store_error(conn, err);
            return reply_text(conn, MHD_HTTP_NO_CONTENT, "application/json", "", 0);
        }
        if (!strcmp(method, "PATCH"))
            return api_session_rename(srv, conn, s, body);
        return reply_method_not_allowed(conn, "GET, PATCH, DELETE");
    }
    if (!strcmp(rest, "/moorex")) {
        if (get) {
            const char *mode =
                MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "mode");

            return reply_stream(conn, session_subscribe(s, mode && !strcmp(mode, "patch"),
                                                        api__attach_stream, conn));
        }
        if (!strcmp(method, "POST"))
            return submit_input(srv, who, conn, s, body, pending);
        return reply_method_not_allowed(conn, "GET, POST");
    }
    if (!strcmp(rest, "/history")) {
        if (!get)
            return reply_method_not_allowed(conn, "GET");
        return history(conn, s);
    }
    if (!strcmp(rest, "/export")) {
        if (!get)
            return reply_method_not_allowed(conn, "GET");
        return api_session_export(srv, conn, s);
    }
    if (!strcmp(rest, "/fork")) {
        if (strcmp(method, "POST"))
            return reply_method_not_allowed(conn, "POST");
        return fork_session(srv, who, conn, s, body);
    }
    if (!strncmp(rest, "/messages/", 10) && rest[10] && !strchr(rest + 10, '/')) {
        void *r = NULL;
        json_t *j = NULL;
        bool sse = wants_sse(conn);
        int err;

        if (!get)
            return reply_method_not_allowed(conn, "GET");
        err =
            sse ? session_message_subscribe(s, rest + 10,
                                            door_parse_count(MHD_lookup_connection_value(
                                                conn, MHD_HEADER_KIND, "Last-Event-ID")),
                                            api__attach_stream, conn, &r)
                : session_message_json(s, rest + 10, &j);
        if (err == -ENOENT)
            return reply_error(conn, 404, "not-found", NULL, "no assistant message '%s'",
                               rest + 10);
        if (err)
            return reply_error(conn, 500, "internal", NULL, "out of memory");
        return sse ? reply_stream(conn, r) : reply_json(conn, 200, j);
    }
    return reply_error(conn, 404, "not-found", NULL, "no such route");
}

static enum MHD_Result sessions_root(struct door *srv, const struct principal *who,
                                     struct MHD_Connection *conn, const char *method)
{
    struct session *s;
    int err;

    if (!strcmp(method, "GET"))
        return api_sessions_list(srv, who, conn);
    if (strcmp(method, "POST"))
        return reply_method_not_allowed(conn, "GET, POST");
    if (door_is_stopping(srv))
        return reply_error(conn, 503, "shutting-down", NULL, "the server is stopping");
    err = session_table_create_session(srv->sessions, NULL, who, &s);
    if (err) /* -ENFILE the limit, -ENOSPC the disk, -EIO the store */
        return api__store_error(conn, err);
    log_info("session %s created", session_id(s));
    {
        json_t *j = json_pack("{s:s}", "id", session_id(s));

        session_unref(s);
        return reply_json(conn, 201, j);
    }
}

/* GET /tools: every tool the agent may use, and the MCP servers' state. */
static enum MHD_Result tools_list(struct door *srv, struct MHD_Connection *conn,
                                  const char *method)
{
    json_t *all;

    if (strcmp(method, "GET") && strcmp(method, "HEAD"))
        return reply_method_not_allowed(conn, "GET, HEAD");
    all = toolkit_describe(session_table_tools(srv->sessions));
    if (!all)
        return reply_error(conn, 500, "internal", NULL, "out of memory");
    return reply_json(conn, 200, all);
}

/* GET /me: who the request comes from (the UI shows who is signed in). */
static enum MHD_Result me(struct door *srv, const struct principal *who,
                          struct MHD_Connection *conn, const char *method)
{
    if (strcmp(method, "GET") && strcmp(method, "HEAD"))
        return reply_method_not_allowed(conn, "GET, HEAD");
    return reply_json(conn, 200,
                      json_pack("{s:s, s:b, s:s}", "name", who->name, "admin", who->admin,
                                "mode",
                                config_auth_mode_name(config_auth_mode(srv->cfg))));
}

static enum MHD_Result api_route(struct door *srv, const struct principal *who,
                                 struct MHD_Connection *conn, const char *method,
                                 const char *path, const struct rx_buf *body,
                                 struct park **pending)
{
    char sid[SESSION_ID_MAX + 1];
    const char *rest;
    struct session *s;
    enum MHD_Result ret;
    size_t n;

    if (!strcmp(path, "/sessions"))
        return sessions_root(srv, who, conn, method);
    if (!strcmp(path, "/me"))
        return me(srv, who, conn, method);
    if (!strcmp(path, "/tools"))
        return tools_list(srv, conn, method);
    if (!strcmp(path, "/events")) {
        if (strcmp(method, "GET"))
            return reply_method_not_allowed(conn, "GET");
        return api_events(srv, who, conn);
    }
    /* Not a session's id: ids are UUIDs (and "default"). */
    if (!strcmp(path, "/sessions/import")) {
        if (strcmp(method, "POST"))
            return reply_method_not_allowed(conn, "POST");
        return api_sessions_import(srv, who, conn, body, pending);
    }
    if (!strncmp(path, "/sessions/", 10)) {
        n = strcspn(path + 10, "/");
        if (!n || n > SESSION_ID_MAX)
            return reply_error(conn, 404, "not-found", NULL, "no such session");
        memcpy(sid, path + 10, n);
        sid[n] = '\0';
        rest = path + 10 + n;
    } else if (!strcmp(path, "/moorex") || !strncmp(path, "/messages/", 10)) {
        strcpy(sid, "default"); /* the seed's routes */
        rest = path;
    } else {
        return reply_error(conn, 404, "not-found", NULL, "no such route");
    }
    /* Not in memory (cold, or made on another node a moment ago): read now. */
    s = session_table_get_as(srv->sessions, sid, who);
    if (!s)
        return reply_error(conn, 404, "not-found", NULL, "no session '%s'", sid);
    ret = session_route(srv, who, conn, method, s, rest, body, pending);
    session_unref(s);
    return ret;
}

static const char *api_prefix(const struct config *cfg)
{
    return cfg->prefix;
}

static enum MHD_Result api_unauthorized(struct MHD_Connection *conn)
{
    return reply_error(conn, 401, "unauthorized", NULL,
                       "send 'Authorization: Bearer <token>'");
}

static enum MHD_Result api_too_large(struct MHD_Connection *conn, const char *why)
{
    return reply_error(conn, 413, "too-large", NULL, "%s", why);
}

static enum MHD_Result api_too_many(struct MHD_Connection *conn, const char *why,
                                    int retry_s)
{
    return reply_json_retry(
        conn, 429, json_pack("{s:s, s:s}", "error", "rate-limited", "message", why),
        retry_s);
}

const struct door_ops api_door = {
    "reflexor",    api_prefix,   api_route, api_unauthorized,
    api_too_large, api_too_many, false};
