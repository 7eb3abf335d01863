/*
 * lg_msg - the LangGraph protocol's view of a session. See lg_msg.h.
 */
#include "server/protocols/lg_msg.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/protocols/timeline.h"
#include "state_machine/rx_json.h"

void lg_msg_iso(int64_t ms, char out[LG_ISO_LEN])
{
    time_t secs = (time_t)(ms / 1000);
    struct tm tm;
    size_t n;

    if (ms < 0 || !gmtime_r(&secs, &tm) ||
        !(n = strftime(out, LG_ISO_LEN - 6, "%Y-%m-%dT%H:%M:%S", &tm))) {
        snprintf(out, LG_ISO_LEN, "1970-01-01T00:00:00.000Z");
        return;
    }
    snprintf(out + n, LG_ISO_LEN - n, ".%03uZ", (unsigned)((uint64_t)ms % 1000u));
}

/* "<prefix><id>" as a JSON string. */
static json_t *prefixed(const char *prefix, const char *id)
{
    size_t n = strlen(prefix) + strlen(id) + 1;
    char *s = malloc(n);
    json_t *j;

    if (!s)
        return NULL;
    snprintf(s, n, "%s%s", prefix, id);
    j = json_string(s);
    free(s);
    return j;
}

/* The fields every LangChain message dict has; "o" steals content and id. */
static json_t *base_message(const char *type, json_t *content, json_t *id)
{
    return json_pack("{s:o, s:{}, s:{}, s:s, s:n, s:o}", "content", content,
                     "additional_kwargs", "response_metadata", "type", type, "name", "id",
                     id);
}

static json_t *human(const struct rx_message *m)
{
    json_t *j = base_message("human", json_string(m->content), json_string(m->id));

    if (j && json_object_set_new(j, "example", json_false())) {
        json_decref(j);
        return NULL;
    }
    return j;
}

static json_t *usage(const struct rx_usage *u)
{
    if (!u->present)
        return json_null();
    return json_pack("{s:I, s:I, s:I}", "input_tokens", (json_int_t)u->prompt_tokens,
                     "output_tokens", (json_int_t)u->completion_tokens, "total_tokens",
                     (json_int_t)(u->prompt_tokens + u->completion_tokens));
}

/* The ai-only fields; `j` keeps its reference whatever happens. */
static int ai_fields(json_t *j, json_t *tool_calls, json_t *invalid, json_t *use)
{
    return json_object_set_new(j, "example", json_false()) |
           json_object_set_new(j, "tool_calls", tool_calls) |
           json_object_set_new(j, "invalid_tool_calls", invalid) |
           json_object_set_new(j, "usage_metadata", use);
}

static json_t *assistant(const struct rx_message *m)
{
    json_t *j = base_message("ai", json_string(m->content), json_string(m->id));
    bool stopped = m->status == RX_STATUS_STOPPED;

    if (!j)
        return NULL;
    if (ai_fields(j, json_array(), json_array(), usage(&m->usage)) ||
        json_object_set_new(json_object_get(j, "response_metadata"), "status",
                            json_string(stopped ? "stopped" : "complete")) ||
        (!stopped && json_object_set_new(json_object_get(j, "response_metadata"),
                                         "finish_reason", json_string("stop"))) ||
        (m->reasoning &&
         json_object_set_new(json_object_get(j, "additional_kwargs"), "reasoning_content",
                             json_string(m->reasoning)))) {
        json_decref(j);
        return NULL;
    }
    return j;
}

/* A call's arguments as an object, or NULL (not JSON, or not an object). */
static json_t *call_args(const struct rx_tool_call *c)
{
    json_t *a;

    if (rx_json_parse(c->parameters, strlen(c->parameters), 0, &a, NULL))
        return NULL;
    if (!json_is_object(a)) {
        json_decref(a);
        a = NULL;
    }
    return a;
}

/* The ai message of one brain-call-tools: content "" and its tool calls. */
static json_t *tool_batch(const struct rx_tool_call *calls, size_t n)
{
    json_t *j = base_message("ai", json_string(""), prefixed("ai-tools-", calls[0].id));
    json_t *tc = json_array(), *bad = json_array();

    if (!j || !tc || !bad)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        json_t *args = call_args(&calls[i]);

        /* Arguments that are not an object cannot be a tool_call: LangChain
           lists them as an invalid_tool_call, with the text as sent. */
        if (args ? json_array_append_new(tc, json_pack("{s:s, s:o, s:s, s:s}", "name",
                                                       calls[i].name, "args", args, "id",
                                                       calls[i].id, "type", "tool_call"))
                 : json_array_append_new(
                       bad, json_pack("{s:s, s:s, s:s, s:s, s:s}", "name", calls[i].name,
                                      "args", calls[i].parameters, "id", calls[i].id,
                                      "error", "the arguments are not a JSON object",
                                      "type", "invalid_tool_call")))
            goto fail;
    }
    if (json_object_set_new(json_object_get(j, "response_metadata"), "finish_reason",
                            json_string("tool_calls")))
        goto fail;
    /* ai_fields takes both lists, even when it fails. */
    if (ai_fields(j, tc, bad, json_null()))
        goto fail_lists_taken;
    return j;

fail:
    json_decref(tc);
    json_decref(bad);
fail_lists_taken:
    json_decref(j);
    return NULL;
}

static json_t *tool_result(const struct rx_tool_call *c)
{
    const struct rx_tool_result *r = &c->result;
    json_t *j, *content;

    /* An error reads as the model reads it (rx_context): "Error: <why>". */
    if (r->is_success) {
        content = json_string(r->text);
    } else {
        size_t n = strlen(r->text) + 8;
        char *s = malloc(n);

        if (!s)
            return NULL;
        snprintf(s, n, "Error: %s", r->text);
        content = json_string(s);
        free(s);
    }
    j = base_message("tool", content, prefixed("tool-result-", c->id));
    if (j && (json_object_set_new(j, "name", json_string(c->name)) |
              json_object_set_new(j, "tool_call_id", json_string(c->id)) |
              json_object_set_new(j, "artifact", json_null()) |
              json_object_set_new(j, "status",
                                  json_string(r->is_success ? "success" : "error")))) {
        json_decref(j);
        return NULL;
    }
    return j;
}

json_t *lg_msg_messages(const struct rx_state *st)
{
    struct timeline_pos pos = {0, 0, 0};
    struct timeline_item it;
    json_t *out = json_array();

    while (out && timeline_next(st, &pos, &it)) {
        int rc = 0;

        switch (it.kind) {
        case TIMELINE_USER:
            rc = json_array_append_new(out, human(it.msg));
            break;
        case TIMELINE_ASSISTANT:
            /* A streaming answer is not settled yet, and an empty one says
               nothing (rx_context leaves both out of the model's context). */
            if (it.msg->status == RX_STATUS_STREAMING || !*it.msg->content)
                break;
            rc = json_array_append_new(out, assistant(it.msg));
            break;
        case TIMELINE_TOOLS:
            rc = json_array_append_new(out, tool_batch(it.calls, it.n_calls));
            for (size_t i = 0; !rc && i < it.n_calls; i++)
                if (it.calls[i].result.present)
                    rc = json_array_append_new(out, tool_result(&it.calls[i]));
            break;
        }
        if (rc) {
            json_decref(out);
            return NULL;
        }
    }
    return out;
}

static bool awaits(const struct rx_tool_call *c)
{
    return rx_tool_call_is_awaiting(c);
}

/* The first record awaiting approval, or NULL. */
static const struct rx_tool_call *first_awaiting(const struct rx_state *st)
{
    for (size_t i = st->tools.settled; i < st->tools.len; i++)
        if (awaits(&st->tools.items[i]))
            return &st->tools.items[i];
    return NULL;
}

int lg_msg_task_id(const struct rx_state *st, char **out)
{
    const struct rx_tool_call *c = first_awaiting(st);
    size_t n;

    *out = NULL;
    if (!c)
        return 0;
    n = strlen(c->id) + 6;
    if (!(*out = malloc(n)))
        return -ENOMEM;
    snprintf(*out, n, "task-%s", c->id);
    return 0;
}

/* HumanInTheLoopMiddleware's default description: a prefix, the tool, its args. */
static json_t *description(const struct rx_tool_call *c, json_t *args)
{
    char *a = args ? json_dumps(args, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    const char *shown = a ? a : c->parameters;
    size_t n = strlen(c->name) + strlen(shown) + 160;
    char *s = malloc(n);
    json_t *j = NULL;

    if (s) {
        snprintf(s, n, "%s\n\nTool: %s\nArgs: %s",
                 c->approval == RX_APPROVAL_IN_DOUBT
                     ? "Tool execution was interrupted after it started and may have "
                       "acted: retry, reject, or resolve with what happened"
                     : "Tool execution requires approval",
                 c->name, shown);
        j = json_string(s);
    }
    free(s);
    free(a);
    return j;
}

static bool has_config(json_t *configs, const char *name)
{
    size_t i;
    json_t *v;

    json_array_foreach(configs, i, v)
    {
        if (!strcmp(json_string_value(json_object_get(v, "action_name")), name))
            return true;
    }
    return false;
}

json_t *lg_msg_interrupts(const struct rx_state *st)
{
    const struct rx_tool_call *first = first_awaiting(st);
    json_t *out = json_array(), *reqs = json_array(), *configs = json_array();

    if (!out || !reqs || !configs)
        goto fail;
    if (!first) {
        json_decref(reqs);
        json_decref(configs);
        return out;
    }
    for (const struct rx_tool_call *c = first; c < st->tools.items + st->tools.len; c++) {
        json_t *args;

        if (!awaits(c))
            continue;
        args = call_args(c);
        if (json_array_append_new(reqs,
                                  json_pack("{s:s, s:o, s:o}", "name", c->name, "args",
                                            args ? json_incref(args) : json_object(),
                                            "description", description(c, args)))) {
            json_decref(args);
            goto fail;
        }
        json_decref(args);
        if (!has_config(configs, c->name) &&
            json_array_append_new(
                configs,
                c->approval == RX_APPROVAL_IN_DOUBT
                    ? json_pack("{s:s, s:[sss]}", "action_name", c->name,
                                "allowed_decisions", "retry", "reject", "resolve")
                    : json_pack("{s:s, s:[sss]}", "action_name", c->name,
                                "allowed_decisions", "approve", "edit", "reject")))
            goto fail;
    }
    if (json_array_append_new(out,
                              json_pack("{s:{s:o, s:o}, s:o}", "value", "action_requests",
                                        reqs, "review_configs", configs, "id",
                                        prefixed("interrupt-", first->id))))
        goto fail_taken;
    return out;

fail:
    json_decref(reqs);
    json_decref(configs);
fail_taken:
    json_decref(out);
    return NULL;
}

json_t *lg_msg_values(const struct rx_state *st, bool interrupt)
{
    json_t *v = json_pack("{s:o}", "messages", lg_msg_messages(st));

    if (v && interrupt && first_awaiting(st) &&
        json_object_set_new(v, "__interrupt__", lg_msg_interrupts(st))) {
        json_decref(v);
        return NULL;
    }
    return v;
}

int lg_msg_chunk_encode(struct rx_buf *b, const char *mid, const char *delta,
                        bool reasoning)
{
    size_t len = b->len;
    int err;

    if ((err = rx_buf_puts(b, "{\"content\":")) ||
        (err = rx_buf_put_json_str(b, reasoning ? "" : delta)) ||
        (err = rx_buf_puts(b, ",\"additional_kwargs\":{")) ||
        (reasoning && ((err = rx_buf_puts(b, "\"reasoning_content\":")) ||
                       (err = rx_buf_put_json_str(b, delta)))) ||
        (err = rx_buf_puts(b, "},\"response_metadata\":{},\"type\":\"AIMessageChunk\","
                              "\"name\":null,\"id\":")) ||
        (err = rx_buf_put_json_str(b, mid)) ||
        (err = rx_buf_puts(b, ",\"example\":false,\"tool_calls\":[],"
                              "\"invalid_tool_calls\":[],\"usage_metadata\":null,"
                              "\"tool_call_chunks\":[]}")))
        rx_buf_truncate(b, len);
    return err;
}

/* ---- requests -> inputs --------------------------------------------------------- */

/* Every role LangChain coerces a message from; the first two are human. */
static const char *const roles[] = {"human",  "user",      "ai",   "assistant",
                                    "system", "developer", "tool", "function",
                                    "remove", NULL};

/* A message's role and content (borrowed), whatever form it was sent in. */
static int role_of(json_t *m, const char **role, json_t **content)
{
    json_t *t;

    if (json_is_string(m)) {
        *role = "human";
        *content = m;
    } else if (json_is_array(m) && json_array_size(m) == 2) {
        *role = json_string_value(json_array_get(m, 0));
        *content = json_array_get(m, 1);
    } else if (json_is_object(m)) {
        t = json_object_get(m, "type");
        *role = json_string_value(t ? t : json_object_get(m, "role"));
        *content = json_object_get(m, "content");
    } else {
        return -EINVAL;
    }
    if (!*role)
        return -EINVAL;
    for (size_t i = 0; roles[i]; i++)
        if (!strcmp(*role, roles[i]))
            return 0;
    return -EINVAL;
}

/* Content as text: a string, or text parts joined (LangChain's `.text`). */
static int content_text(json_t *content, char **out, struct rx_error *err)
{
    size_t i, len = 0;
    json_t *p;
    char *s;

    if (json_is_string(content)) {
        *out = strdup(json_string_value(content));
        return *out ? 0 : -ENOMEM;
    }
    if (!json_is_array(content))
        return rx_error_set(err, -EINVAL,
                            "'content' must be a string or a list of parts");
    json_array_foreach(content, i, p)
    {
        json_t *text = json_is_string(p) ? p : json_object_get(p, "text");
        const char *type = json_string_value(json_object_get(p, "type"));

        if (!json_is_string(text) ||
            (json_is_object(p) && (!type || strcmp(type, "text"))))
            return rx_error_set(err, -EINVAL, "only text content parts are supported");
        len += json_string_length(text);
    }
    if (!(s = malloc(len + 1)))
        return -ENOMEM;
    len = 0;
    json_array_foreach(content, i, p)
    {
        json_t *text = json_is_string(p) ? p : json_object_get(p, "text");

        memcpy(s + len, json_string_value(text), json_string_length(text));
        len += json_string_length(text);
    }
    s[len] = '\0';
    *out = s;
    return 0;
}

/* A client's message id, kept when it is one the machine takes as it is. */
static char *plain_id(json_t *m)
{
    const char *id = json_string_value(json_object_get(m, "id"));
    size_t n = id ? strlen(id) : 0;

    if (!n || n > RX_ID_MAX ||
        strspn(id,
               "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:") != n)
        return NULL;
    return strdup(id);
}

int lg_msg_parse_input(json_t *input, char **text, char **id, struct rx_error *err)
{
    json_t *msgs = json_object_get(input, "messages"), *m, *content = NULL;
    const char *role = NULL;
    char *t = NULL;
    size_t i;
    int rc;

    if (!json_is_object(input))
        return rx_error_set(err, -EINVAL, "'input' must be an object with 'messages'");
    if (!json_is_array(msgs) || !json_array_size(msgs))
        return rx_error_set(err, -EINVAL, "'input.messages' must be a non-empty list");
    json_array_foreach(msgs, i, m)
    {
        if (role_of(m, &role, &content))
            return rx_error_set(err, -EINVAL, "'input.messages[%zu]' has no known role",
                                i);
    }
    m = json_array_get(msgs, json_array_size(msgs) - 1);
    if (strcmp(role, "human") && strcmp(role, "user"))
        return rx_error_set(err, -EINVAL,
                            "the last message must be a human message, not '%s'", role);
    if ((rc = content_text(content, &t, err)))
        return rc;
    if (rx_text_is_blank(t)) {
        free(t);
        return rx_error_set(err, -EINVAL, "the human message is blank");
    }
    *id = json_is_object(m) ? plain_id(m) : NULL;
    *text = t;
    return 0;
}

int lg_msg_user_input(const char *text, const char *id, struct rx_input *in)
{
    memset(in, 0, sizeof(*in));
    in->type = RX_IN_USER_SEND_MESSAGE;
    if (rx_input_set_str(&in->content, text) ||
        (id && rx_input_set_str(&in->message_id, id))) {
        rx_input_release(in);
        return -ENOMEM;
    }
    return 0;
}

/* The decisions list inside command.resume, in any of its accepted shapes. */
static json_t *decisions_of(json_t *resume)
{
    json_t *d = json_object_get(resume, "decisions");

    if (json_is_array(resume))
        return resume;
    if (json_is_array(d))
        return d;
    /* A resume map {interrupt id: value}: one interrupt is ever pending. */
    if (json_is_object(resume) && json_object_size(resume) == 1) {
        void *it = json_object_iter(resume);

        return decisions_of(json_object_iter_value(it));
    }
    return NULL;
}

/*
 * A decision on a call in doubt (SPEC 3.7): "retry" (or approve/accept: run
 * it again), "reject" (or ignore), "resolve" (or response) with what
 * happened in `result` (or `args`, `message`) as the call's result.
 */
static int doubt_review_json(json_t *d, const char *type, const struct rx_tool_call *c,
                             json_t **out, struct rx_error *err)
{
    const char *decision, *result = NULL;

    if (!strcmp(type, "retry") || !strcmp(type, "approve") || !strcmp(type, "accept")) {
        decision = "retry";
    } else if (!strcmp(type, "reject") || !strcmp(type, "ignore")) {
        decision = "reject";
    } else if (!strcmp(type, "resolve") || !strcmp(type, "response")) {
        decision = "resolve";
        for (const char *const *k =
                 (const char *const[]){"result", "args", "message", NULL};
             *k && !result; k++)
            result = json_string_value(json_object_get(d, *k));
        if (!result)
            return rx_error_set(
                err, -EINVAL, "resolving a call in doubt needs 'result': what happened");
    } else {
        return rx_error_set(err, -EINVAL,
                            "the call '%s' was interrupted and may have acted: decide "
                            "'retry', 'reject' or 'resolve', not '%s'",
                            c->name, type);
    }
    *out = json_pack("{s:s, s:s, s:s}", "type", "user-review-tool-call", "toolCallId",
                     c->id, "decision", decision);
    if (*out && result && json_object_set_new(*out, "result", json_string(result))) {
        json_decref(*out);
        *out = NULL;
    }
    return *out ? 0 : -ENOMEM;
}

/* One decision as a user-review-tool-call input (JSON, parsed by rx_input). */
static int review_json(json_t *d, const struct rx_tool_call *c, json_t **out,
                       struct rx_error *err)
{
    const char *type = json_string_value(json_object_get(d, "type"));
    const char *reason = NULL;
    json_t *args = NULL, *j;
    char *params = NULL;
    bool approve;

    if (!type)
        return rx_error_set(err, -EINVAL, "a decision needs a 'type'");
    if (c->approval == RX_APPROVAL_IN_DOUBT)
        return doubt_review_json(d, type, c, out, err);
    if (!strcmp(type, "approve") || !strcmp(type, "accept")) {
        approve = true;
    } else if (!strcmp(type, "edit")) {
        json_t *action = json_object_get(d, "edited_action");
        const char *name = json_string_value(json_object_get(action, "name"));

        approve = true;
        /* An edit may change the arguments, not the tool: another name is refused. */
        if (name && strcmp(name, c->name))
            return rx_error_set(err, -EINVAL,
                                "an edit may not change the tool ('%s' waits, not '%s')",
                                c->name, name);
        /* agent-inbox sends {"args": {"action", "args"}}. */
        args = json_object_get(action ? action : json_object_get(d, "args"), "args");
        if (!json_is_object(args))
            return rx_error_set(err, -EINVAL,
                                "an edit needs 'edited_action.args' (an object)");
    } else if (!strcmp(type, "reject") || !strcmp(type, "ignore") ||
               !strcmp(type, "response")) {
        json_t *why = json_object_get(d, !strcmp(type, "response") ? "args" : "message");

        approve = false;
        if (why && !json_is_null(why) && !(reason = json_string_value(why)))
            return rx_error_set(err, -EINVAL, "a rejection's message must be a string");
    } else {
        return rx_error_set(err, -EINVAL, "unknown decision type '%s'", type);
    }
    if (args && !(params = json_dumps(args, JSON_COMPACT | JSON_PRESERVE_ORDER)))
        return -ENOMEM;
    j = json_pack("{s:s, s:s, s:s}", "type", "user-review-tool-call", "toolCallId", c->id,
                  "decision", approve ? "approve" : "reject");
    if (!j || (params && json_object_set_new(j, "parameters", json_string(params))) ||
        (reason && *reason && json_object_set_new(j, "reason", json_string(reason)))) {
        json_decref(j);
        free(params);
        return -ENOMEM;
    }
    free(params);
    *out = j;
    return 0;
}

static void inputs_free(struct rx_input *in, size_t n)
{
    for (size_t i = 0; i < n; i++)
        rx_input_release(&in[i]);
    free(in);
}

int lg_msg_parse_resume(json_t *command, const struct rx_state *st, struct rx_input **out,
                        size_t *n, struct rx_error *err)
{
    json_t *resume = json_object_get(command, "resume"), *decisions;
    size_t waiting = 0, k = 0;
    struct rx_input *in;
    const char *field;
    int rc = 0;

    if (!json_is_object(command) || !resume || json_is_null(resume))
        return rx_error_set(err, -EINVAL,
                            "'command' must hold 'resume' (goto and update "
                            "are not supported)");
    if (json_object_get(command, "goto") || json_object_get(command, "update"))
        return rx_error_set(err, -EINVAL,
                            "'command.goto' and 'command.update' are not "
                            "supported");
    for (size_t i = st->tools.settled; i < st->tools.len; i++)
        waiting += awaits(&st->tools.items[i]);
    if (!waiting)
        return rx_error_set(err, -ENOENT, "the thread has no interrupt to resume");
    if (!(decisions = decisions_of(resume)))
        return rx_error_set(err, -EINVAL,
                            "'command.resume' must hold 'decisions' (a list)");
    if (json_array_size(decisions) != waiting)
        return rx_error_set(err, -EINVAL,
                            "%zu decisions for %zu actions awaiting a decision",
                            json_array_size(decisions), waiting);
    if (!(in = calloc(waiting, sizeof(*in))))
        return -ENOMEM;
    for (size_t i = st->tools.settled; !rc && i < st->tools.len; i++) {
        json_t *j = NULL;

        if (!awaits(&st->tools.items[i]))
            continue;
        rc = review_json(json_array_get(decisions, k), &st->tools.items[i], &j, err);
        if (!rc && (rc = rx_input_parse(j, &in[k], &field, err)) == -EINVAL)
            rx_error_set(err, -EINVAL, "decision %zu: '%s' is invalid", k, field);
        json_decref(j);
        k += !rc;
    }
    if (rc) {
        inputs_free(in, k);
        return rc;
    }
    *out = in;
    *n = waiting;
    return 0;
}

int lg_msg_review_one(json_t *decision, const struct rx_tool_call *c, struct rx_input *in,
                      struct rx_error *err)
{
    const char *field;
    json_t *j = NULL;
    int rc = review_json(decision, c, &j, err);

    if (!rc && (rc = rx_input_parse(j, in, &field, err)) == -EINVAL)
        rx_error_set(err, -EINVAL, "the decision's '%s' is invalid", field);
    json_decref(j);
    return rc;
}
