/*
 * a2a_decide - a person's decision sent over A2A (SPEC 4.3, 3.6, 3.7): a
 * data part {"decision": ...} on the task that waits, or on its context
 * (one approval, every door: what waits there, made through any door),
 * turned into user-review-tool-call inputs as LangGraph's resume is
 * (lg_msg_review_one). See a2a_internal.h.
 */
#include "server/protocols/a2a_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "server/protocols/lg_msg.h"
#include "server/session_table.h"

/* A task the caller may see and its session (both NEW), or the error answered. */
int a2a__task_of(struct call *c, const char *id, struct a2a_task **t, struct session **s,
                 enum MHD_Result *ret)
{
    *s = NULL;
    if (!id || !*id) {
        *ret = a2a__error(c->conn, c->rpc_id, A2A_INVALID_PARAMS,
                          "'id' (the task's id, a string) is required");
        return -EINVAL;
    }
    if (!(*t = a2a_task_get(c->d->cfg, id)) ||
        !(*s = session_table_get_as(c->d->sessions, a2a_task_context(*t), c->who))) {
        a2a_task_unref(*t);
        *t = NULL;
        *ret =
            a2a__error(c->conn, c->rpc_id, A2A_TASK_NOT_FOUND, "Task %s not found", id);
        return -ENOENT;
    }
    return 0;
}

/* The decisions of `data` on the calls of task `t` that wait, read under the lock. */
struct decide {
    const char *umid;
    json_t *data;
    struct rx_input *in;
    size_t n;
    int err;
    struct rx_error why;
};

/* {"decision", "args", "reason"|"message", "result"} as a command.resume decision. */
static json_t *lg_decision(json_t *data)
{
    const char *type = json_string_value(json_object_get(data, "decision"));
    json_t *args = json_object_get(data, "args"), *d = json_pack("{s:s}", "type", type);
    json_t *reason = json_object_get(data, "reason");

    if (!reason)
        reason = json_object_get(data, "message");
    if (d && args &&
        json_object_set_new(d, "edited_action", json_pack("{s:O}", "args", args)))
        goto fail;
    if (d && reason && json_object_set(d, "message", reason))
        goto fail;
    if (d && json_object_get(data, "result") &&
        json_object_set(d, "result", json_object_get(data, "result")))
        goto fail;
    return d;
fail:
    json_decref(d);
    return NULL;
}

static void decide_read(void *arg, const struct rx_state *st, int64_t seq,
                        const struct event_session *e)
{
    const struct rx_tool_call *calls[64];
    struct decide *x = arg;
    const char *pick = json_string_value(json_object_get(x->data, "toolCallId"));
    size_t n = a2a_wire_awaiting(st, x->umid, calls, 64), k = 0;
    json_t *d;

    (void)seq;
    (void)e;
    if (n > 64)
        n = 64;
    if (!n) {
        x->err = rx_error_set(&x->why, -ENOENT,
                              "nothing on this task waits for a decision (answered "
                              "already?)");
        return;
    }
    if (!(d = lg_decision(x->data)) || !(x->in = calloc(n, sizeof(*x->in)))) {
        json_decref(d);
        x->err = -ENOMEM;
        return;
    }
    for (size_t i = 0; i < n && !x->err; i++) {
        if (pick && strcmp(pick, calls[i]->id))
            continue;
        x->err = lg_msg_review_one(d, calls[i], &x->in[k], &x->why);
        k += !x->err;
    }
    if (!x->err && !k)
        x->err = rx_error_set(&x->why, -ENOENT, "no call '%s' waits on this task", pick);
    json_decref(d);
    if (x->err) {
        for (size_t i = 0; i < k; i++)
            rx_input_release(&x->in[i]);
        free(x->in);
        x->in = NULL;
        return;
    }
    x->n = k;
}

/* A message on an existing task: the decision it carries. */
enum MHD_Result a2a__send_decision(struct call *c, struct a2a_msg *m,
                                   struct a2a_task **out, bool *started)
{
    struct decide x = {.data = m->data};
    enum MHD_Result ret;
    struct session *s;
    struct a2a_task *t;
    enum a2a_state st;
    int err;

    *started = false;
    if (a2a__task_of(c, m->task_id, &t, &s, &ret))
        return ret;
    x.umid = a2a_task_umid(t);
    st = a2a_task_state(t);
    if (m->context_id && strcmp(m->context_id, a2a_task_context(t)))
        ret = a2a__error(c->conn, c->rpc_id, A2A_INVALID_PARAMS,
                         "task %s belongs to another contextId", m->task_id);
    else if (a2a_task_busy(t))
        ret =
            a2a__error(c->conn, c->rpc_id, A2A_INVALID_PARAMS,
                       "task %s is still working: wait for it, or cancel it", m->task_id);
    else if (a2a_state_terminal(st))
        ret = a2a__error(c->conn, c->rpc_id, A2A_UNSUPPORTED_OPERATION,
                         "task %s is %s: send a new message with its contextId (and "
                         "no taskId) to go on",
                         m->task_id, a2a_state_name(st, true));
    else if (!json_is_string(json_object_get(m->data, "decision")))
        ret = a2a__error(c->conn, c->rpc_id, A2A_INVALID_PARAMS,
                         "task %s waits for a decision: send a data part "
                         "{\"decision\": \"approve\"|\"reject\"|\"edit\"}",
                         m->task_id);
    else if ((err = session_read(s, decide_read, &x)) || (err = x.err))
        ret = err == -ENOMEM
                  ? a2a__error(c->conn, c->rpc_id, A2A_INTERNAL_ERROR, "out of memory")
                  : a2a__error(c->conn, c->rpc_id, A2A_INVALID_PARAMS, "task %s: %s",
                               m->task_id,
                               *x.why.text ? x.why.text : "the context is gone");
    else if ((err = a2a_task_start(t, s, x.in, x.n, false)))
        ret = a2a__error(c->conn, c->rpc_id, A2A_INTERNAL_ERROR,
                         "the decision cannot be run (%s)", strerror(-err));
    else
        *started = true;
    free(x.in);
    session_unref(s);
    if (*started)
        *out = t;
    else
        a2a_task_unref(t);
    return ret;
}

/* The context's newest user message: its id and text, copied. */
struct last_user {
    char *id, *text;
};

static void last_user_read(void *arg, const struct rx_state *st, int64_t seq,
                           const struct event_session *e)
{
    const struct rx_message *m = a2a_wire_last_user(st);
    struct last_user *u = arg;

    (void)seq;
    (void)e;
    if (m) {
        u->id = strdup(m->id);
        u->text = strdup(m->content ? m->content : "");
    }
}

/*
 * A decision sent to a context, with no taskId (SPEC 4.3, one approval,
 * every door): the calls that wait there, made to wait through any door,
 * answered as a new task that opens at the context's newest user message.
 */
enum MHD_Result a2a__send_context_decision(struct call *c, struct a2a_msg *m,
                                           struct a2a_task **out)
{
    struct session *s = session_table_get_as(c->d->sessions, m->context_id, c->who);
    struct last_user u = {NULL, NULL};
    struct decide x = {.data = m->data};
    struct a2a_task *t = NULL;
    enum MHD_Result ret = MHD_YES;
    int err;

    if (!s)
        return a2a__error(c->conn, c->rpc_id, A2A_INVALID_PARAMS,
                          "contextId '%s' not found", m->context_id);
    if ((err = session_read(s, last_user_read, &u)) || !u.id || !u.text) {
        ret = a2a__error(c->conn, c->rpc_id, A2A_INVALID_PARAMS,
                         "nothing in context '%s' waits for a decision", m->context_id);
        goto out;
    }
    x.umid = u.id;
    if ((err = session_read(s, decide_read, &x)) || (err = x.err)) {
        ret = err == -ENOMEM
                  ? a2a__error(c->conn, c->rpc_id, A2A_INTERNAL_ERROR, "out of memory")
                  : a2a__error(c->conn, c->rpc_id, A2A_INVALID_PARAMS, "context %s: %s",
                               m->context_id, *x.why.text ? x.why.text : "it is gone");
        goto out;
    }
    if (!(t = a2a_task_create(c->d->cfg, session_id(s), u.id, u.text))) {
        ret = a2a__error(c->conn, c->rpc_id, A2A_INTERNAL_ERROR, "out of memory");
        for (size_t i = 0; i < x.n; i++)
            rx_input_release(&x.in[i]);
    } else if ((err = a2a_task_start(t, s, x.in, x.n, false))) {
        ret = a2a__error(c->conn, c->rpc_id, A2A_INTERNAL_ERROR,
                         "the decision cannot be run (%s)", strerror(-err));
        a2a_task_unref(t);
        t = NULL;
    }
    *out = t;
out:
    free(x.in);
    free(u.id);
    free(u.text);
    session_unref(s);
    return ret;
}
