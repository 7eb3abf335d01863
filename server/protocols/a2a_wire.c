/*
 * a2a_wire - tasks, messages and their 0.3 shapes. See a2a_wire.h.
 */
#include "server/protocols/a2a_wire.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "server/protocols/lg_msg.h"
#include "server/protocols/timeline.h"
#include "state_machine/rx_buf.h"
#include "state_machine/rx_json.h"

static const char *const names10[] = {
    "TASK_STATE_UNSPECIFIED",    "TASK_STATE_SUBMITTED", "TASK_STATE_WORKING",
    "TASK_STATE_COMPLETED",      "TASK_STATE_FAILED",    "TASK_STATE_CANCELED",
    "TASK_STATE_INPUT_REQUIRED",
};
static const char *const names03[] = {
    "unknown", "submitted", "working",        "completed",
    "failed",  "canceled",  "input-required",
};

const char *a2a_state_name(enum a2a_state s, bool v03)
{
    if ((unsigned)s > A2A_INPUT_REQUIRED)
        s = A2A_UNKNOWN;
    return v03 ? names03[s] : names10[s];
}

enum a2a_state a2a_state_parse(const char *name)
{
    for (int i = 0; name && i <= A2A_INPUT_REQUIRED; i++)
        if (!strcmp(names10[i], name))
            return (enum a2a_state)i;
    return A2A_UNKNOWN;
}

bool a2a_state_terminal(enum a2a_state s)
{
    return s == A2A_COMPLETED || s == A2A_FAILED || s == A2A_CANCELED;
}

/* What the task's stretch of the session holds. */
struct stretch {
    json_t *history;      /* NEW: user message and the agent's answers */
    struct rx_buf answer; /* their text, joined */
    const struct rx_tool_call **awaiting;
    size_t n_awaiting, max_awaiting;
    bool answered;   /* its last item is a complete answer, every call answered */
    bool superseded; /* a newer user message follows it */
};

static json_t *text_message(const char *id, const char *role, const char *text,
                            const struct a2a_task_info *t)
{
    return json_pack("{s:s, s:s, s:s, s:s, s:[{s:s}]}", "messageId", id, "contextId",
                     t->context_id, "taskId", t->id, "role", role, "parts", "text", text);
}

/* Walk the session from the task's user message to the next one. */
static int walk(const struct rx_state *st, const struct a2a_task_info *t,
                struct stretch *s)
{
    struct timeline_pos pos = {0, 0, 0};
    struct timeline_item it;
    bool found = false;

    while (timeline_next(st, &pos, &it)) {
        if (it.kind == TIMELINE_USER) {
            if (found) {
                s->superseded = true;
                break;
            }
            found = !strcmp(it.msg->id, t->umid);
            if (found && s->history &&
                json_array_append_new(s->history, text_message(it.msg->id, "ROLE_USER",
                                                               it.msg->content, t)))
                return -ENOMEM;
            continue;
        }
        if (!found)
            continue;
        if (it.kind == TIMELINE_ASSISTANT) {
            const char *c = it.msg->content ? it.msg->content : "";

            s->answered = it.msg->status == RX_STATUS_COMPLETE;
            if (!*c)
                continue;
            if (s->history &&
                json_array_append_new(s->history,
                                      text_message(it.msg->id, "ROLE_AGENT", c, t)))
                return -ENOMEM;
            if (s->history && ((s->answer.len && rx_buf_puts(&s->answer, "\n\n")) ||
                               rx_buf_puts(&s->answer, c)))
                return -ENOMEM;
            continue;
        }
        s->answered = false;
        for (size_t i = 0; i < it.n_calls; i++)
            if (rx_tool_call_is_awaiting(&it.calls[i])) {
                if (s->n_awaiting < s->max_awaiting)
                    s->awaiting[s->n_awaiting] = &it.calls[i];
                s->n_awaiting++;
            }
    }
    return 0;
}

const struct rx_message *a2a_wire_last_user(const struct rx_state *st)
{
    struct timeline_pos pos = {0, 0, 0};
    const struct rx_message *last = NULL;
    struct timeline_item it;

    while (timeline_next(st, &pos, &it))
        if (it.kind == TIMELINE_USER)
            last = it.msg;
    return last;
}

size_t a2a_wire_awaiting(const struct rx_state *st, const char *umid,
                         const struct rx_tool_call **out, size_t max)
{
    struct a2a_task_info t = {.umid = umid};
    struct stretch s = {.awaiting = out, .max_awaiting = max};

    rx_buf_init(&s.answer, RX_BUF_STATE_MAX);
    (void)walk(st, &t, &s); /* no history: nothing allocated */
    rx_buf_release(&s.answer);
    return s.n_awaiting;
}

/* {"awaiting": [...]}, and the sentence saying what waits, into `b`. */
static json_t *awaiting_json(const struct rx_tool_call *const *calls, size_t n,
                             struct rx_buf *b)
{
    json_t *list = json_array();

    for (size_t i = 0; list && i < n; i++) {
        const struct rx_tool_call *c = calls[i];
        bool doubt = c->approval == RX_APPROVAL_IN_DOUBT;
        json_t *args = NULL;

        if (!c->parameters ||
            rx_json_parse(c->parameters, strlen(c->parameters), 0, &args, NULL))
            args = json_object();
        if (json_array_append_new(
                list,
                json_pack("{s:s, s:s, s:o, s:b, s:[s,s,s]}", "toolCallId", c->id, "name",
                          c->name, "args", args, "inDoubt", doubt, "decisions",
                          doubt ? "retry" : "approve", doubt ? "reject" : "edit",
                          doubt ? "resolve" : "reject")) ||
            rx_buf_printf(b, "%s%s %s(%s) (call %s)", i ? "; " : "",
                          doubt ? "the interrupted call, which may have acted:"
                                : "approval of",
                          c->name, c->parameters ? c->parameters : "{}", c->id)) {
            json_decref(list);
            return NULL;
        }
    }
    if (list && rx_buf_puts(b, ". Answer on this task with a data part {\"decision\": "
                               "\"approve\"|\"reject\"|\"edit\" (\"retry\"|\"reject\"|"
                               "\"resolve\" for an interrupted call)}.")) {
        json_decref(list);
        return NULL;
    }
    return list ? json_pack("{s:o}", "awaiting", list) : NULL;
}

/* The status message: what waits, or why it failed; NULL when none is due. */
static json_t *status_message(const struct a2a_task_info *t, const struct stretch *s)
{
    struct rx_buf b;
    json_t *m = NULL, *data;
    char mid[128];

    snprintf(mid, sizeof(mid), "status-%s", t->id);
    if (t->state == A2A_FAILED)
        return text_message(mid, "ROLE_AGENT", t->why ? t->why : "the task failed", t);
    if (t->state != A2A_INPUT_REQUIRED)
        return json_null();
    rx_buf_init(&b, RX_BUF_STATE_MAX);
    if (!rx_buf_puts(&b, "Waiting for ") &&
        (data = awaiting_json(s->awaiting, s->n_awaiting, &b)))
        m = json_pack("{s:s, s:s, s:s, s:s, s:[{s:s%}, {s:o}]}", "messageId", mid,
                      "contextId", t->context_id, "taskId", t->id, "role", "ROLE_AGENT",
                      "parts", "text", b.data, b.len, "data", data);
    rx_buf_release(&b);
    return m;
}

#define A2A_AWAIT_MAX 64

json_t *a2a_wire_task(const struct rx_state *st, const struct a2a_task_info *t)
{
    const struct rx_tool_call *calls[A2A_AWAIT_MAX];
    struct a2a_task_info shown = *t;
    struct stretch s = {
        .history = json_array(), .awaiting = calls, .max_awaiting = A2A_AWAIT_MAX};
    json_t *task = NULL, *msg = NULL;
    char when[LG_ISO_LEN];

    rx_buf_init(&s.answer, RX_BUF_STATE_MAX);
    if (!s.history || (st && walk(st, t, &s)))
        goto out;
    if (s.n_awaiting > A2A_AWAIT_MAX)
        s.n_awaiting = A2A_AWAIT_MAX;
    /* Answered through another door meanwhile (SPEC 4.3, one approval, every
       door): the agent went on, and may have answered already. */
    /* A newer message ended it unanswered (SPEC 3.6: it refused what waited). */
    if (st && t->idle && !a2a_state_terminal(shown.state))
        shown.state = s.n_awaiting   ? A2A_INPUT_REQUIRED
                      : s.answered   ? A2A_COMPLETED
                      : s.superseded ? A2A_CANCELED
                                     : A2A_WORKING;
    if (!(msg = status_message(&shown, &s)))
        goto out;
    lg_msg_iso(t->updated_ms, when);
    task = json_pack("{s:s, s:s, s:{s:s, s:s}, s:O}", "id", t->id, "contextId",
                     t->context_id, "status", "state", a2a_state_name(shown.state, false),
                     "timestamp", when, "history", s.history);
    if (task && !json_is_null(msg) &&
        json_object_set(json_object_get(task, "status"), "message", msg))
        goto fail;
    if (task && s.answer.len &&
        json_object_set_new(task, "artifacts",
                            json_pack("[{s:s, s:s, s:[{s:s%}]}]", "artifactId", "answer",
                                      "name", "answer", "parts", "text", s.answer.data,
                                      s.answer.len)))
        goto fail;
    goto out;
fail:
    json_decref(task);
    task = NULL;
out:
    json_decref(msg);
    json_decref(s.history);
    rx_buf_release(&s.answer);
    return task;
}

/* ---- 0.3 ---------------------------------------------------------------------- */

/* In place: parts get their kind. */
static int parts_v03(json_t *parts)
{
    size_t i;
    json_t *p;

    json_array_foreach(parts, i, p)
    {
        const char *kind = json_object_get(p, "text")   ? "text"
                           : json_object_get(p, "data") ? "data"
                                                        : "file";

        if (json_object_set_new(p, "kind", json_string(kind)))
            return -ENOMEM;
    }
    return 0;
}

static int message_v03(json_t *m)
{
    const char *role = json_string_value(json_object_get(m, "role"));

    if (!json_is_object(m))
        return 0;
    return json_object_set_new(m, "kind", json_string("message")) ||
                   json_object_set_new(m, "role",
                                       json_string(role && !strcmp(role, "ROLE_USER")
                                                       ? "user"
                                                       : "agent")) ||
                   parts_v03(json_object_get(m, "parts"))
               ? -ENOMEM
               : 0;
}

static int status_v03(json_t *st)
{
    enum a2a_state s = a2a_state_parse(json_string_value(json_object_get(st, "state")));

    if (!json_is_object(st))
        return 0;
    return json_object_set_new(st, "state", json_string(a2a_state_name(s, true))) ||
                   message_v03(json_object_get(st, "message"))
               ? -ENOMEM
               : 0;
}

json_t *a2a_wire_v03(json_t *v10, const char *kind)
{
    json_t *j = json_deep_copy(v10), *m, *a;
    size_t i;
    int err;

    if (!j || json_object_set_new(j, "kind", json_string(kind)))
        goto fail;
    if (!strcmp(kind, "message"))
        err = message_v03(j);
    else
        err = status_v03(json_object_get(j, "status"));
    json_array_foreach(json_object_get(j, "history"), i, m) err |= message_v03(m);
    json_array_foreach(json_object_get(j, "artifacts"), i, a) err |=
        parts_v03(json_object_get(a, "parts"));
    if (json_object_get(j, "artifact"))
        err |= parts_v03(json_object_get(json_object_get(j, "artifact"), "parts"));
    if (!strcmp(kind, "status-update")) {
        enum a2a_state s = a2a_state_parse(
            json_string_value(json_object_get(json_object_get(v10, "status"), "state")));

        err |= json_object_set_new(
            j, "final", json_boolean(a2a_state_terminal(s) || s == A2A_INPUT_REQUIRED));
    }
    if (!err)
        return j;
fail:
    json_decref(j);
    return NULL;
}

/* ---- a client's message ------------------------------------------------------- */

static int opt_id(json_t *m, const char *key, const char **out, struct rx_error *err)
{
    json_t *v = json_object_get(m, key);

    *out = json_string_value(v);
    if (v && !json_is_null(v) && !*out)
        return rx_error_set(err, -EINVAL, "'message.%s' must be a string", key);
    if (*out && !**out)
        *out = NULL;
    return 0;
}

int a2a_wire_parse_message(json_t *m, struct a2a_msg *out, struct rx_error *err)
{
    json_t *parts = json_object_get(m, "parts"), *p;
    const char *role = json_string_value(json_object_get(m, "role"));
    struct rx_buf b;
    size_t i;
    int rc = 0;

    memset(out, 0, sizeof(*out));
    if (!json_is_object(m))
        return rx_error_set(err, -EINVAL, "'message' (an object) is required");
    if (!json_is_array(parts) || !json_array_size(parts))
        return rx_error_set(err, -EINVAL, "'message.parts' must be a non-empty list");
    if (role && strcmp(role, "ROLE_USER") && strcmp(role, "user"))
        return rx_error_set(err, -EINVAL, "'message.role' must be the user's, not '%s'",
                            role);
    if (opt_id(m, "messageId", &out->mid, err) ||
        opt_id(m, "contextId", &out->context_id, err) ||
        opt_id(m, "taskId", &out->task_id, err))
        return -EINVAL;
    rx_buf_init(&b, RX_BUF_STATE_MAX);
    json_array_foreach(parts, i, p)
    {
        json_t *text = json_object_get(p, "text"), *data = json_object_get(p, "data");

        if (json_is_string(text)) {
            if ((b.len && rx_buf_putc(&b, '\n')) ||
                rx_buf_puts(&b, json_string_value(text))) {
                rc = -ENOMEM;
                break;
            }
        } else if (json_is_object(data)) {
            if (!out->data)
                out->data = json_incref(data);
        } else {
            rc = rx_error_set(err, -EINVAL,
                              "part %zu: only text and data (an object) parts are "
                              "understood",
                              i);
            break;
        }
    }
    if (!rc && b.len && !(out->text = strndup(b.data, b.len)))
        rc = -ENOMEM;
    rx_buf_release(&b);
    if (rc)
        a2a_msg_release(out);
    return rc;
}

void a2a_msg_release(struct a2a_msg *m)
{
    free(m->text);
    json_decref(m->data);
    m->text = NULL;
    m->data = NULL;
}
