/*
 * agui - the AG-UI door: routing, the RunAgentInput, resume entries turned
 * into user-review-tool-call inputs, and the answers every route shares.
 * See agui.h; a run's events are agui_run.c.
 */
#include "server/protocols/agui.h"
#include "server/protocols/agui_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server/protocols/lg_msg.h"
#include "server/relay.h"
#include "server/reply.h"
#include "server/session_table.h"
#include "state_machine/rx_json.h"

/* ---- answers ------------------------------------------------------------------ */

enum MHD_Result agui__queue(struct MHD_Connection *conn, unsigned status,
                            struct MHD_Response *r)
{
    const char *origin = door_local_origin(conn);

    if (r && origin) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", origin);
        MHD_add_response_header(r, "Vary", "Origin");
    }
    return reply_queue(conn, status, r);
}

enum MHD_Result agui__error(struct MHD_Connection *conn, unsigned status,
                            const char *code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    json_t *j;
    char *text;
    struct MHD_Response *r;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    j = json_pack("{s:s, s:s}", "error", code, "message", msg);
    /* A message quoting bytes that are not UTF-8 cannot be a JSON string. */
    if (!j)
        j = json_pack("{s:s, s:s}", "error", code, "message",
                      "the request names something that is not UTF-8");
    text = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(j);
    if (!text)
        return reply_out_of_memory(conn);
    r = reply_response("application/json", text, strlen(text));
    free(text);
    return agui__queue(conn, status, r);
}

static enum MHD_Result preflight(struct MHD_Connection *conn)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);

    if (!r)
        return MHD_NO;
    if (door_local_origin(conn)) {
        MHD_add_response_header(r, "Access-Control-Allow-Methods", "POST, OPTIONS");
        MHD_add_response_header(r, "Access-Control-Allow-Headers",
                                "Content-Type, Authorization, X-Api-Key, Accept");
        MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    }
    return agui__queue(conn, 204, r);
}

/* ---- interrupts ---------------------------------------------------------------- */

/* What a resume entry's payload may say, as a JSON Schema (Interrupt.responseSchema). */
static json_t *response_schema(bool doubt)
{
    return doubt
               ? json_pack("{s:s, s:{s:{s:s, s:[sss]}, s:{s:s}}, s:[s]}", "type",
                           "object", "properties", "decision", "type", "string", "enum",
                           "retry", "reject", "resolve", "result", "type", "string",
                           "required", "decision")
               : json_pack("{s:s, s:{s:{s:s, s:[sss]}, s:{s:s}, s:{s:s}}, s:[s]}", "type",
                           "object", "properties", "decision", "type", "string", "enum",
                           "approve", "edit", "reject", "args", "type", "object",
                           "reason", "type", "string", "required", "decision");
}

/* NEW: one call's interrupt. */
static json_t *interrupt_json(const struct rx_tool_call *c)
{
    bool doubt = c->approval == RX_APPROVAL_IN_DOUBT;
    json_t *args = NULL;
    char msg[512];

    if (c->parameters &&
        rx_json_parse(c->parameters, strlen(c->parameters), 0, &args, NULL))
        args = NULL;
    if (doubt)
        snprintf(msg, sizeof(msg),
                 "'%s' was interrupted and may have acted: retry, reject or resolve it",
                 c->name);
    else
        snprintf(msg, sizeof(msg), "'%s' wants to run: approve, edit or reject it",
                 c->name);
    return json_pack("{s:s, s:s, s:s, s:s, s:o, s:{s:s, s:o, s:s}}", "id", c->id,
                     "reason", doubt ? "tool_call_in_doubt" : "tool_call_approval",
                     "message", msg, "toolCallId", c->id, "responseSchema",
                     response_schema(doubt), "metadata", "toolName", c->name, "arguments",
                     args ? args : json_object(), "parameters",
                     c->parameters ? c->parameters : "");
}

json_t *agui__interrupts(const struct rx_state *st)
{
    json_t *out = json_array();

    for (size_t i = st->tools.settled; out && i < st->tools.len; i++) {
        const struct rx_tool_call *c = &st->tools.items[i];

        if (rx_tool_call_is_awaiting(c) &&
            json_array_append_new(out, interrupt_json(c))) {
            json_decref(out);
            return NULL;
        }
    }
    return out;
}

/* ---- resume --------------------------------------------------------------------- */

/* What resume_read makes of the entries, against the state under its lock. */
struct resume {
    json_t *entries; /* borrowed: the request's `resume` */
    struct rx_input *in;
    size_t n;
    unsigned status; /* 0, or the answer's status with `code` and `why` */
    const char *code;
    struct rx_error why;
};

/* NEW: a LangGraph decision (lg_msg_parse_resume's) for one resume entry. */
static json_t *decision_of(json_t *e, const struct rx_tool_call *c)
{
    const char *status = json_string_value(json_object_get(e, "status"));
    json_t *p = json_object_get(e, "payload");
    const char *d = json_string_value(p);
    const char *why = json_string_value(json_object_get(p, "reason"));

    if (!d)
        d = json_string_value(json_object_get(p, "decision"));
    if (!d)
        d = json_string_value(json_object_get(p, "type"));
    if (!why)
        why = json_string_value(json_object_get(p, "message"));
    /* A cancelled interrupt is a refusal; a resolved one without a word, a yes. */
    if (!strcmp(status, "cancelled"))
        d = "reject";
    else if (!d)
        d = c->approval == RX_APPROVAL_IN_DOUBT ? "retry" : "approve";
    if (!strcmp(d, "edit"))
        return json_pack("{s:s, s:{s:s, s:O*}}", "type", "edit", "edited_action", "name",
                         c->name, "args", json_object_get(p, "args"));
    return json_pack("{s:s, s:s*, s:O*}", "type", d, "message", why, "result",
                     json_object_get(p, "result"));
}

/* session_read_fn: the entries checked against the calls that wait, then parsed. */
static void resume_read(void *arg, const struct rx_state *st, int64_t seq,
                        const struct event_session *entry)
{
    struct resume *r = arg;
    json_t *e, *decisions = json_array(), *cmd = NULL;
    size_t i;

    (void)seq;
    (void)entry;
    r->status = 422;
    r->code = "invalid_input";
    json_array_foreach(r->entries, i, e)
    {
        const char *id = json_string_value(json_object_get(e, "interruptId"));
        const char *status = json_string_value(json_object_get(e, "status"));
        const struct rx_tool_call *c = id ? rx_state_find_tool(st, id) : NULL;

        if (!id || !status ||
            (strcmp(status, "resolved") && strcmp(status, "cancelled"))) {
            rx_error_set(&r->why, -EINVAL,
                         "resume[%zu] needs 'interruptId' and 'status' "
                         "(\"resolved\" or \"cancelled\")",
                         i);
            goto out;
        }
        if (!c) {
            r->status = 404;
            r->code = "not_found";
            rx_error_set(&r->why, -ENOENT, "no interrupt '%s' on this thread", id);
            goto out;
        }
        if (!rx_tool_call_is_awaiting(c)) {
            r->status = 409;
            r->code = "already_answered";
            rx_error_set(&r->why, -EALREADY, "the interrupt '%s' was already answered",
                         id);
            goto out;
        }
    }
    /* In record order, one decision per call that waits (lg_msg_parse_resume's). */
    for (i = st->tools.settled; decisions && i < st->tools.len; i++) {
        const struct rx_tool_call *c = &st->tools.items[i];
        json_t *found = NULL;
        size_t k;

        if (!rx_tool_call_is_awaiting(c))
            continue;
        json_array_foreach(r->entries, k, e)
        {
            if (!strcmp(json_string_value(json_object_get(e, "interruptId")), c->id))
                found = e;
        }
        if (!found) {
            rx_error_set(&r->why, -EINVAL,
                         "the interrupt '%s' is not answered: a resume answers every "
                         "pending interrupt",
                         c->id);
            goto out;
        }
        if (json_array_append_new(decisions, decision_of(found, c))) {
            json_decref(decisions);
            decisions = NULL;
        }
    }
    cmd = decisions ? json_pack("{s:{s:O}}", "resume", "decisions", decisions) : NULL;
    if (!cmd) {
        r->status = 500;
        r->code = "internal";
        rx_error_set(&r->why, -ENOMEM, "out of memory");
        goto out;
    }
    if (lg_msg_parse_resume(cmd, st, &r->in, &r->n, &r->why))
        goto out;
    r->status = 0;
out:
    json_decref(cmd);
    json_decref(decisions);
}

/* ---- the request ---------------------------------------------------------------- */

/*
 * The newest message, when it is a user message: its text and id (malloc'd;
 * both NULL when there is none). 0, -EINVAL with `err` (a blank or malformed
 * message), -ENOMEM. Checked before anything is made, so a refusal changes
 * nothing.
 */
static int newest_user(json_t *messages, char **text, char **id, struct rx_error *err)
{
    json_t *m = json_array_get(messages, json_array_size(messages) - 1), *wrap;
    const char *role = json_string_value(json_object_get(m, "role"));
    int rc;

    *text = *id = NULL;
    if (!role || strcmp(role, "user"))
        return 0;
    /* lg_msg reads LangChain messages, whose text parts are AG-UI's too. */
    wrap = json_pack("{s:[{s:s, s:O, s:O*}]}", "messages", "type", "human", "content",
                     json_object_get(m, "content"), "id", json_object_get(m, "id"));
    if (!wrap)
        return -ENOMEM;
    rc = lg_msg_parse_input(wrap, text, id, err);
    json_decref(wrap);
    return rc;
}

/* Whether the thread holds the user message already, read under its lock. */
struct user_read {
    const char *id;
    bool held;
};

static void user_read(void *arg, const struct rx_state *st, int64_t seq,
                      const struct event_session *entry)
{
    struct user_read *u = arg;

    (void)seq;
    (void)entry;
    u->held = rx_state_find_user(st, u->id) != NULL;
}

/*
 * The thread `tid` of `who` (NEW), created on first use when `create`;
 * NULL with the answer in *ret.
 */
static struct session *thread_of(struct door *srv, const struct principal *who,
                                 struct MHD_Connection *conn, const char *tid,
                                 bool create, enum MHD_Result *ret)
{
    struct session *s = session_table_get_as(srv->sessions, tid, who);
    int err = -ENOENT;

    if (s)
        return s;
    if (create)
        err = session_table_create_session(srv->sessions, tid, who, &s);
    if (err == -EEXIST && (s = session_table_get_as(srv->sessions, tid, who)))
        return s; /* created meanwhile by another request of ours */
    switch (err) {
    case 0:
        return s;
    case -ENOENT:
    case -EEXIST: /* another principal's: answered as an unknown id (SPEC 4.4) */
        *ret = agui__error(conn, 404, "not_found", "thread '%s' not found", tid);
        break;
    case -EINVAL:
        *ret = agui__error(conn, 422, "invalid_input",
                           "a threadId is 1 to %d letters, digits, '-', '_' or '.'",
                           SESSION_ID_MAX);
        break;
    case -ENFILE:
    case -EDQUOT:
        *ret = agui__error(conn, 429, "too_many",
                           "no more threads may be created (limits.max_sessions, "
                           "limits.user_sessions)");
        break;
    case -ENOMEM:
        *ret = agui__error(conn, 500, "internal", "out of memory");
        break;
    default:
        *ret = agui__error(conn, 503, "unavailable", "the store is unusable");
        break;
    }
    return NULL;
}

/* POST: one RunAgentInput. */
static enum MHD_Result run_agent(struct door *srv, const struct principal *who,
                                 struct MHD_Connection *conn, const char *path,
                                 const struct rx_buf *body, struct park **slot)
{
    char url[1024];
    struct resume r = {0};
    struct user_read u = {0};
    struct rx_input *in = NULL;
    struct session *s = NULL;
    enum MHD_Result ret = MHD_NO;
    char *text = NULL, *mid = NULL;
    const char *tid, *rid;
    struct rx_error e;
    json_t *q = NULL, *messages;
    size_t n = 0;
    int err;

    if ((err = rx_json_parse(body->data ? body->data : "", body->len, 0, &q, &e)))
        return err == -ENOMEM ? agui__error(conn, 500, "internal", "out of memory")
                              : agui__error(conn, 400, "invalid_json",
                                            "the body is not JSON: %s", e.text);
    tid = json_string_value(json_object_get(q, "threadId"));
    rid = json_string_value(json_object_get(q, "runId"));
    messages = json_object_get(q, "messages");
    r.entries = json_object_get(q, "resume");
    if (!json_is_object(q) || !tid || !*tid || !rid || !*rid ||
        !json_is_array(messages) || (r.entries && !json_is_array(r.entries))) {
        ret = agui__error(conn, 422, "invalid_input",
                          "a RunAgentInput is an object with 'threadId' and 'runId' "
                          "(strings), 'messages' (a list) and optionally 'resume' "
                          "(a list)");
        goto out;
    }
    if ((err = newest_user(messages, &text, &mid, &e))) {
        ret = err == -ENOMEM ? agui__error(conn, 500, "internal", "out of memory")
                             : agui__error(conn, 422, "invalid_input", "%s", e.text);
        goto out;
    }
    /* A resume names interrupts of a thread that exists: none is made for it. */
    if (!(s = thread_of(srv, who, conn, tid, !json_array_size(r.entries), &ret)))
        goto out;
    /* A run lives where its thread's inputs are applied (SPEC 6.1). */
    snprintf(url, sizeof(url), "%s%s", srv->cfg->agui_prefix, path);
    if (relay_route(srv, who, conn, tid, "POST", url, body, slot, &ret))
        goto out;
    if (json_array_size(r.entries) &&
        ((err = session_read(s, resume_read, &r)) || r.status)) {
        ret = err ? agui__error(conn, 404, "not_found", "thread '%s' not found", tid)
                  : agui__error(conn, r.status, r.code, "%s", r.why.text);
        goto out;
    }
    /* Clients resend the conversation: a message the thread holds is not posted. */
    u.id = mid;
    if (text && mid && (err = session_read(s, user_read, &u))) {
        ret = agui__error(conn, 404, "not_found", "thread '%s' not found", tid);
        goto out;
    }
    if (!(in = calloc(r.n + 1, sizeof(*in)))) {
        ret = agui__error(conn, 500, "internal", "out of memory");
        goto out;
    }
    /* The answers first: the new message comes after what it answers. */
    for (size_t i = 0; i < r.n; i++)
        in[n++] = r.in[i];
    r.n = 0;
    if (text && !u.held && (err = lg_msg_user_input(text, mid, &in[n]))) {
        for (size_t i = 0; i < n; i++)
            rx_input_release(&in[i]);
        ret = agui__error(conn, 500, "internal", "out of memory");
        goto out;
    }
    if (text && !u.held)
        n++;
    ret = agui__run(srv, conn, s, rid, in, n, text && !u.held);
out:
    for (size_t i = 0; i < r.n; i++)
        rx_input_release(&r.in[i]);
    free(r.in);
    free(in);
    free(text);
    free(mid);
    if (s)
        session_unref(s);
    json_decref(q);
    return ret;
}

/* ---- the door -------------------------------------------------------------------- */

static enum MHD_Result agui_route(struct door *srv, const struct principal *who,
                                  struct MHD_Connection *conn, const char *method,
                                  const char *path, const struct rx_buf *body,
                                  struct park **slot)
{
    if (strcmp(path, "") && strcmp(path, "/") && strcmp(path, "/agent"))
        return agui__error(conn, 404, "not_found", "no such route: POST the prefix");
    if (!strcmp(method, "OPTIONS"))
        return preflight(conn);
    if (strcmp(method, "POST"))
        return reply_method_not_allowed(conn, "POST, OPTIONS");
    if (door_is_stopping(srv))
        return agui__error(conn, 503, "unavailable", "the server is stopping");
    return run_agent(srv, who, conn, path, body, slot);
}

static const char *agui_prefix(const struct config *cfg)
{
    return cfg->agui_prefix;
}

static enum MHD_Result agui_unauthorized(struct MHD_Connection *conn)
{
    return agui__error(conn, 401, "unauthorized",
                       "send 'Authorization: Bearer <token>' (HttpAgent's headers)");
}

static enum MHD_Result agui_too_large(struct MHD_Connection *conn, const char *why)
{
    return agui__error(conn, 413, "too_large", "%s", why);
}

static enum MHD_Result agui_too_many(struct MHD_Connection *conn, const char *why,
                                     int retry_s)
{
    return reply_json_retry(
        conn, 429, json_pack("{s:s, s:s}", "error", "too_many", "message", why), retry_s);
}

/* A browser's CORS preflight carries no credentials: the route answers it. */
const struct door_ops agui_door = {
    "ag-ui",        agui_prefix,   agui_route, agui_unauthorized,
    agui_too_large, agui_too_many, true};
