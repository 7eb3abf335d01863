/*
 * rx_agent - see rx_agent.h. The adapter diffs the agent's output against
 * its input because an Agent returns a whole state (seed 002) while a graph
 * node returns a partial update (seed 004): without the diff, an append or
 * add_messages key would get its old items a second time.
 */
#include "graph/rx_agent.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

static int echo_run(const struct rx_agent *agent, json_t *state, json_t **out)
{
    json_t *messages = json_object_get(state, "messages");
    json_t *last, *next, *copy;
    const char *role;
    bool langchain;

    (void)agent;
    if (messages && !json_is_array(messages))
        return -EINVAL;
    copy = json_copy(state);
    if (!copy)
        return -ENOMEM;
    last = json_array_get(messages, json_array_size(messages) - 1);
    /* OpenAI's shape, or LangChain's as add_messages leaves it (SPEC 8). */
    role = json_string_value(json_object_get(last, "role"));
    langchain = !role;
    if (!role)
        role = json_string_value(json_object_get(last, "type"));
    if (!role || strcmp(role, langchain ? "human" : "user") ||
        !json_is_string(json_object_get(last, "content"))) {
        *out = copy; /* nothing to answer */
        return 0;
    }
    /* A new list (shallow), so the caller's state stays as it was. */
    next = json_copy(messages);
    if (!next ||
        json_array_append_new(next, json_pack("{s:s,s:O}", langchain ? "type" : "role",
                                              langchain ? "ai" : "assistant", "content",
                                              json_object_get(last, "content"))) ||
        json_object_set_new(copy, "messages", next)) {
        json_decref(copy);
        return -ENOMEM;
    }
    *out = copy;
    return 0;
}

const struct rx_agent rx_agent_echo = {"echo", echo_run, NULL};

int rx_agent_run(const struct rx_agent *agent, json_t *state, json_t **out)
{
    if (!agent || !agent->run || !json_is_object(state))
        return -EINVAL;
    return agent->run(agent, state, out);
}

/* True when `list` starts with every item of `prefix`. */
static bool starts_with(json_t *list, json_t *prefix)
{
    size_t i;

    if (!json_is_array(list) || !json_is_array(prefix) ||
        json_array_size(list) < json_array_size(prefix))
        return false;
    for (i = 0; i < json_array_size(prefix); i++)
        if (!json_equal(json_array_get(list, i), json_array_get(prefix, i)))
            return false;
    return true;
}

static int diff_key(const struct rx_reducer *r, const char *key, json_t *old, json_t *now,
                    json_t *update)
{
    enum rx_reducer_kind kind = r ? r->kind : RX_REDUCER_LAST_VALUE;
    json_t *tail;
    size_t i;

    if (old && json_equal(old, now))
        return 0;
    if (kind != RX_REDUCER_APPEND && kind != RX_REDUCER_ADD_MESSAGES &&
        kind != RX_REDUCER_PATCH_BY_ID)
        return json_object_set(update, key, now) ? -ENOMEM : 0;
    if (!old || json_is_null(old) || starts_with(now, old)) {
        tail = json_array();
        if (!tail)
            return -ENOMEM;
        for (i = old && json_is_array(old) ? json_array_size(old) : 0;
             i < json_array_size(now); i++) {
            if (json_array_append(tail, json_array_get(now, i))) {
                json_decref(tail);
                return -ENOMEM;
            }
        }
        return json_object_set_new(update, key, tail) ? -ENOMEM : 0;
    }
    if (kind == RX_REDUCER_APPEND)
        return -EINVAL;
    return json_object_set(update, key, now) ? -ENOMEM : 0;
}

int rx_agent_node(struct rx_graph_task *task, json_t *input, void *ctx, json_t **update)
{
    const struct rx_agent *agent = ctx;
    json_t *out = NULL, *upd, *v;
    const char *key;
    int rc;

    rc = rx_agent_run(agent, input, &out);
    if (rc)
        return rc;
    rc = -ENOMEM;
    upd = json_object();
    if (!upd)
        goto out_release;
    json_object_foreach(out, key, v)
    {
        rc = diff_key(rx_graph_task_reducer(task, key), key, json_object_get(input, key),
                      v, upd);
        if (rc) {
            if (rc == -EINVAL)
                rx_graph_task_set_error(task, "agent rewrote an append-only key");
            json_decref(upd);
            goto out_release;
        }
    }
    *update = upd;
    rc = 0;
out_release:
    json_decref(out);
    return rc;
}
