/*
 * a2a - the A2A door: the agent card, JSON-RPC's envelope and errors, and
 * the methods. See a2a.h; tasks are a2a_task.c, their shapes a2a_wire.c.
 */
#include "server/protocols/a2a.h"
#include "server/protocols/a2a_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/idgen.h"
#include "server/protocols/lg_msg.h"
#include "server/relay.h"
#include "server/reply.h"
#include "server/session_table.h"
#include "state_machine/rx_json.h"

/* ---- JSON-RPC answers --------------------------------------------------------- */

char *a2a__envelope(const char *rpc_id, json_t *result)
{
    char *r = result ? json_dumps(result, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    char *out = NULL;

    if (r &&
        asprintf(&out, "{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":%s}", rpc_id, r) < 0)
        out = NULL;
    free(r);
    return out;
}

static enum MHD_Result send_text(struct MHD_Connection *conn, char *text)
{
    enum MHD_Result ret;

    if (!text)
        return reply_out_of_memory(conn);
    ret = reply_text(conn, 200, "application/json", text, strlen(text));
    free(text);
    return ret;
}

enum MHD_Result a2a__result(struct MHD_Connection *conn, const char *rpc_id,
                            json_t *result)
{
    char *text = a2a__envelope(rpc_id, result);

    json_decref(result);
    return send_text(conn, text);
}

enum MHD_Result a2a__error(struct MHD_Connection *conn, const char *rpc_id, int code,
                           const char *fmt, ...)
{
    char msg[512], *e = NULL, *out = NULL;
    json_t *j;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    /* A message quoting bytes that are not UTF-8 cannot be a JSON string. */
    if (!(j = json_pack("{s:i, s:s}", "code", code, "message", msg)))
        j = json_pack("{s:i, s:s}", "code", code, "message",
                      "the request holds something that is not UTF-8");
    e = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(j);
    if (e &&
        asprintf(&out, "{\"jsonrpc\":\"2.0\",\"id\":%s,\"error\":%s}", rpc_id, e) < 0)
        out = NULL;
    free(e);
    return send_text(conn, out);
}

/* ---- the methods -------------------------------------------------------------- */

/* The task as the method's result: {"task": ...} (1.0), or the 0.3 Task. */
static json_t *task_result(json_t *view, bool v03)
{
    json_t *r = !view ? NULL
                : v03 ? a2a_wire_v03(view, "task")
                      : json_pack("{s:O}", "task", view);

    json_decref(view);
    return r;
}

/* The context a new task runs in (NEW), or the error answered. */
static struct session *context_of(struct call *c, const char *ctx, enum MHD_Result *ret)
{
    struct session *s = ctx ? session_table_get_as(c->d->sessions, ctx, c->who) : NULL;
    int err;

    if (s)
        return s;
    if (!(err = session_table_create_session(c->d->sessions, ctx, c->who, &s)))
        return s;
    if (err == -EEXIST || err == -EINVAL)
        *ret = a2a__error(
            c->conn, c->rpc_id, A2A_INVALID_PARAMS,
            "contextId '%s' cannot be used: leave it out to start a new one", ctx);
    else
        *ret = a2a__error(c->conn, c->rpc_id, A2A_INTERNAL_ERROR,
                          "no new context can be made (%s)", strerror(-err));
    return NULL;
}

/* A client's message id when the machine takes it as it is, else a fresh one. */
static void message_id(const char *mid, char out[RX_ID_MAX + 1])
{
    size_t n = mid ? strlen(mid) : 0;
    char uuid[RX_UUID_LEN];

    if (n && n <= RX_ID_MAX &&
        strspn(mid,
               "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:") ==
            n) {
        memcpy(out, mid, n + 1);
        return;
    }
    idgen_uuid(uuid);
    snprintf(out, RX_ID_MAX + 1, "a2a-%s", uuid);
}

/* A message opening a new task. */
static enum MHD_Result send_new(struct call *c, struct a2a_msg *m, struct a2a_task **out)
{
    enum MHD_Result ret = MHD_NO;
    struct rx_input *in;
    struct session *s;
    struct a2a_task *t;
    char umid[RX_ID_MAX + 1];
    int err;

    if ((!m->text || !m->text[strspn(m->text, " \t\r\n")]) && m->context_id &&
        json_is_string(json_object_get(m->data, "decision")))
        return a2a__send_context_decision(c, m, out);
    if (!m->text || !m->text[strspn(m->text, " \t\r\n")])
        return a2a__error(c->conn, c->rpc_id, A2A_INVALID_PARAMS,
                          "the message has no text (a decision goes on the task that "
                          "waits for it, or on its contextId)");
    if (!(s = context_of(c, m->context_id, &ret)))
        return ret;
    message_id(m->mid, umid);
    in = calloc(1, sizeof(*in));
    if (!in || lg_msg_user_input(m->text, umid, in) ||
        !(t = a2a_task_create(c->d->cfg, session_id(s), umid, m->text))) {
        if (in)
            rx_input_release(in);
        free(in);
        session_unref(s);
        return a2a__error(c->conn, c->rpc_id, A2A_INTERNAL_ERROR, "out of memory");
    }
    err = a2a_task_start(t, s, in, 1, false);
    free(in);
    session_unref(s);
    if (err) {
        a2a_task_unref(t);
        return a2a__error(c->conn, c->rpc_id, A2A_INTERNAL_ERROR,
                          "the message cannot be run (%s)", strerror(-err));
    }
    *out = t;
    return MHD_YES;
}

static enum MHD_Result send_message(struct call *c, bool stream)
{
    json_t *conf = json_object_get(c->params, "configuration");
    struct a2a_task *t = NULL;
    struct rx_error why = {""};
    enum MHD_Result ret = MHD_NO;
    struct a2a_msg m;
    bool started, wait;
    int err;

    if ((err = a2a_wire_parse_message(json_object_get(c->params, "message"), &m, &why)))
        return a2a__error(c->conn, c->rpc_id,
                          err == -ENOMEM ? A2A_INTERNAL_ERROR : A2A_INVALID_PARAMS, "%s",
                          err == -ENOMEM ? "out of memory" : why.text);
    wait = c->v03 ? !json_is_false(json_object_get(conf, "blocking"))
                  : !json_is_true(json_object_get(conf, "returnImmediately"));
    if (!session_table_may_work(c->d->sessions, c->who))
        ret = a2a__error(c->conn, c->rpc_id, A2A_INTERNAL_ERROR,
                         "your contexts run as many effects as a user may "
                         "(limits.user_running_effects): try again shortly");
    else if (m.task_id)
        ret = a2a__send_decision(c, &m, &t, &started);
    else
        ret = send_new(c, &m, &t);
    a2a_msg_release(&m);
    if (!t)
        return ret;
    if (stream)
        ret = a2a_task_stream(t, c->conn, c->rpc_id, c->v03);
    else if (wait)
        ret = a2a_task_wait(t, c->d, c->conn, c->rpc_id, c->v03, true, c->slot);
    else
        ret =
            a2a__result(c->conn, c->rpc_id, task_result(a2a_task_view(t, NULL), c->v03));
    a2a_task_unref(t);
    return ret;
}

static enum MHD_Result get_task(struct call *c)
{
    json_t *hl = json_object_get(c->params, "historyLength"), *view, *h;
    enum MHD_Result ret;
    struct a2a_task *t;
    struct session *s;

    if (hl && !json_is_null(hl) && (!json_is_integer(hl) || json_integer_value(hl) < 0))
        return a2a__error(c->conn, c->rpc_id, A2A_INVALID_PARAMS,
                          "'historyLength' must be a non-negative integer");
    if (a2a__task_of(c, json_string_value(json_object_get(c->params, "id")), &t, &s,
                     &ret))
        return ret;
    view = a2a_task_view(t, s);
    h = json_object_get(view, "history");
    /* The newest historyLength messages. */
    while (view && json_is_integer(hl) &&
           json_array_size(h) > (size_t)json_integer_value(hl))
        json_array_remove(h, 0);
    session_unref(s);
    a2a_task_unref(t);
    /* GetTask's result is the Task itself, in either version. */
    h = c->v03 ? a2a_wire_v03(view, "task") : json_incref(view);
    json_decref(view);
    return a2a__result(c->conn, c->rpc_id, h);
}

static enum MHD_Result cancel_task(struct call *c)
{
    struct rx_input *in = NULL;
    enum MHD_Result ret;
    struct a2a_task *t;
    struct session *s;
    json_t *view;
    enum a2a_state st;
    int err = 0;

    if (a2a__task_of(c, json_string_value(json_object_get(c->params, "id")), &t, &s,
                     &ret))
        return ret;
    view = a2a_task_view(t, s);
    st = a2a_state_parse(
        json_string_value(json_object_get(json_object_get(view, "status"), "state")));
    json_decref(view);
    if (a2a_task_busy(t)) {
        a2a_task_cancel(t);
    } else if (st == A2A_INPUT_REQUIRED) {
        /* Nothing runs: a user-cancel refuses what waits, and the task ends. */
        if (!(in = calloc(1, sizeof(*in))))
            err = -ENOMEM;
        else
            in->type = RX_IN_USER_CANCEL;
        if (!err)
            err = a2a_task_start(t, s, in, 1, true);
        free(in);
    } else {
        err = -EALREADY;
    }
    session_unref(s);
    if (err == -EALREADY)
        ret = a2a__error(c->conn, c->rpc_id, A2A_TASK_NOT_CANCELABLE,
                         "Task %s is %s: it cannot be canceled",
                         json_string_value(json_object_get(c->params, "id")),
                         a2a_state_name(st, true));
    else if (err)
        ret = a2a__error(c->conn, c->rpc_id, A2A_INTERNAL_ERROR,
                         "the cancel cannot be run (%s)", strerror(-err));
    else
        ret = a2a_task_wait(t, c->d, c->conn, c->rpc_id, c->v03, false, c->slot);
    a2a_task_unref(t);
    return ret;
}

static enum MHD_Result subscribe(struct call *c)
{
    enum MHD_Result ret;
    struct a2a_task *t;
    struct session *s;
    enum a2a_state st;

    if (a2a__task_of(c, json_string_value(json_object_get(c->params, "id")), &t, &s,
                     &ret))
        return ret;
    json_decref(a2a_task_view(t, s)); /* brought up to date */
    session_unref(s);
    st = a2a_task_state(t);
    if (!a2a_task_busy(t) && a2a_state_terminal(st))
        ret =
            a2a__error(c->conn, c->rpc_id, A2A_UNSUPPORTED_OPERATION,
                       "task %s is %s: nothing more will happen to it (GetTask shows it)",
                       json_string_value(json_object_get(c->params, "id")),
                       a2a_state_name(st, true));
    else
        ret = a2a_task_stream(t, c->conn, c->rpc_id, c->v03);
    a2a_task_unref(t);
    return ret;
}

/* ---- routing ------------------------------------------------------------------ */

static const struct {
    const char *v10, *v03;
    enum { M_SEND, M_STREAM, M_GET, M_CANCEL, M_SUBSCRIBE } m;
} methods[] = {
    {"SendMessage", "message/send", M_SEND},
    {"SendStreamingMessage", "message/stream", M_STREAM},
    {"GetTask", "tasks/get", M_GET},
    {"CancelTask", "tasks/cancel", M_CANCEL},
    {"SubscribeToTask", "tasks/resubscribe", M_SUBSCRIBE},
};

/*
 * A call for a session another node owns (its contextId, or its task's):
 * passed to the owner, where the task's runs live (SPEC 6.1). True with
 * *ret answered.
 */
static bool relayed(struct call *c, bool message, enum MHD_Result *ret)
{
    json_t *m = json_object_get(c->params, "message");
    const char *ctx = message ? json_string_value(json_object_get(m, "contextId")) : NULL;
    const char *tid = message ? json_string_value(json_object_get(m, "taskId"))
                              : json_string_value(json_object_get(c->params, "id"));
    struct a2a_task *t = NULL;
    bool done;

    if (!__atomic_load_n(&c->d->cluster, __ATOMIC_ACQUIRE))
        return false;
    if (!ctx && tid && (t = a2a_task_get(c->d->cfg, tid)))
        ctx = a2a_task_context(t);
    done = ctx && relay_route(c->d, c->who, c->conn, ctx, "POST", c->d->cfg->a2a_prefix,
                              c->body, c->slot, ret);
    a2a_task_unref(t);
    return done;
}

static enum MHD_Result dispatch(struct call *c, json_t *req, const char *version)
{
    enum MHD_Result ret;
    const char *name = json_string_value(json_object_get(req, "method"));
    json_t *params = json_object_get(req, "params");
    size_t i, n = sizeof(methods) / sizeof(*methods);

    for (i = 0; i < n; i++)
        if (!strcmp(name, methods[i].v10) || !strcmp(name, methods[i].v03))
            break;
    if (i == n)
        return a2a__error(c->conn, c->rpc_id, A2A_METHOD_NOT_FOUND,
                          "Method not found: %s (this server answers SendMessage, "
                          "SendStreamingMessage, GetTask, CancelTask, SubscribeToTask "
                          "and their 0.3 names)",
                          name);
    c->v03 = !strcmp(name, methods[i].v03) || !version || !strncmp(version, "0.", 2);
    if (version && !c->v03 && strncmp(version, "1.", 2) && strcmp(version, "1"))
        return a2a__error(c->conn, c->rpc_id, A2A_VERSION_NOT_SUPPORTED,
                          "A2A-Version %s is not supported: 1.0 and 0.3 are", version);
    if (!json_is_object(params))
        return a2a__error(c->conn, c->rpc_id, A2A_INVALID_PARAMS,
                          "'params' must be an object");
    c->params = params;
    if (relayed(c, methods[i].m == M_SEND || methods[i].m == M_STREAM, &ret))
        return ret;
    switch (methods[i].m) {
    case M_SEND:
        return send_message(c, false);
    case M_STREAM:
        return send_message(c, true);
    case M_GET:
        return get_task(c);
    case M_CANCEL:
        return cancel_task(c);
    default:
        return subscribe(c);
    }
}

static enum MHD_Result a2a_route(struct door *d, const struct principal *who,
                                 struct MHD_Connection *conn, const char *method,
                                 const char *path, const struct rx_buf *body,
                                 struct park **slot)
{
    struct call c = {d, who, conn, "null", NULL, false, slot, body};
    const char *version =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "A2A-Version");
    json_t *req = NULL, *id;
    enum MHD_Result ret;
    char *idtext = NULL;
    struct rx_error e;

    if (*path && strcmp(path, "/"))
        return a2a__error(conn, "null", A2A_INVALID_REQUEST,
                          "no such path: the JSON-RPC endpoint is %s itself",
                          d->cfg->a2a_prefix);
    if (strcmp(method, "POST"))
        return reply_method_not_allowed(conn, "POST");
    if (door_is_stopping(d))
        return a2a__error(conn, "null", A2A_INTERNAL_ERROR, "the server is stopping");
    if (rx_json_parse(body->data ? body->data : "", body->len, 0, &req, &e))
        return a2a__error(conn, "null", A2A_PARSE_ERROR, "Parse error: %s", e.text);
    id = json_object_get(req, "id");
    if (json_is_string(id) || json_is_integer(id))
        c.rpc_id = idtext = json_dumps(id, JSON_COMPACT | JSON_ENCODE_ANY);
    if ((json_is_string(id) || json_is_integer(id)) && !idtext)
        ret = reply_out_of_memory(conn);
    else if (!json_is_object(req) || !json_is_string(json_object_get(req, "method")) ||
             !json_is_string(json_object_get(req, "jsonrpc")) ||
             strcmp(json_string_value(json_object_get(req, "jsonrpc")), "2.0") ||
             (id && !json_is_null(id) && !json_is_string(id) && !json_is_integer(id)))
        ret = a2a__error(conn, c.rpc_id, A2A_INVALID_REQUEST,
                         "Invalid Request: a JSON-RPC 2.0 request object is expected "
                         "(\"jsonrpc\": \"2.0\", \"method\", \"params\", \"id\")");
    else
        ret = dispatch(&c, req, version);
    free(idtext);
    json_decref(req);
    return ret;
}

void a2a_shutdown(void)
{
    a2a_task_shutdown();
}

static const char *a2a_prefix(const struct config *cfg)
{
    return cfg->a2a_prefix;
}

static enum MHD_Result a2a_unauthorized(struct MHD_Connection *conn)
{
    return reply_error(conn, 401, "unauthorized", NULL,
                       "send 'Authorization: Bearer <token>' (the agent card says so)");
}

static enum MHD_Result a2a_too_large(struct MHD_Connection *conn, const char *why)
{
    return reply_error(conn, 413, "too-large", NULL, "%s", why);
}

static enum MHD_Result a2a_too_many(struct MHD_Connection *conn, const char *why,
                                    int retry_s)
{
    return reply_json_retry(
        conn, 429, json_pack("{s:s, s:s}", "error", "too-many", "message", why), retry_s);
}

const struct door_ops a2a_door = {
    "a2a", a2a_prefix, a2a_route, a2a_unauthorized, a2a_too_large, a2a_too_many, false};
