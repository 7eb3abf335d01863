/*
 * react - a ReAct loop as a StateGraph: "chat" (the builtin brain's pure
 * decision, effects/builtin_reply.h) <-> "tools" (the calculator of
 * effects/calculator.h) through a conditional edge: while the last message
 * calls tools, go to "tools", else END. Messages merge with add_messages.
 *
 * Human in the loop, durably: the thread lives in a SQLite file (the
 * SQLite checkpointer) and the graph stops before "tools" (interrupt_before).
 * The example shows the calls and asks on stdin; "y" continues, anything
 * else answers each call with a refusal, written as the tools node would
 * (update_state as "tools"), and the chat goes on from there. Run it again
 * with the same file and the thread continues with the new question.
 * `echo y | build/examples/react "what is 6*7?" react.db` prints the trace
 * and "answer: 6*7 = 42".
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "effects/builtin_reply.h"
#include "effects/calculator.h"
#include "graph/rx_checkpoint_sqlite.h"
#include "graph/rx_graph.h"

static const struct rx_reducer schema[] = {
    {"messages", RX_REDUCER_ADD_MESSAGES, NULL, NULL},
};

static json_t *last_message(json_t *state)
{
    json_t *m = json_object_get(state, "messages");

    return json_array_get(m, json_array_size(m) - 1);
}

/*
 * add_messages holds messages as LangChain does ("type": human, ai, system,
 * tool); the brain reads OpenAI's "role". A new array of shallow copies.
 */
static json_t *to_openai(json_t *messages)
{
    static const char *const roles[][2] = {
        {"human", "user"}, {"ai", "assistant"}, {"system", "system"}, {"tool", "tool"}};
    json_t *out = json_array(), *m, *c;
    const char *type;
    size_t i, k;

    json_array_foreach(messages, i, m)
    {
        type = json_string_value(json_object_get(m, "type"));
        c = json_copy(m);
        for (k = 0; c && type && k < sizeof(roles) / sizeof(roles[0]); k++)
            if (!strcmp(type, roles[k][0]))
                json_object_set_new(c, "role", json_string(roles[k][1]));
        if (!c || json_array_append_new(out, c)) {
            json_decref(out);
            return NULL;
        }
    }
    return out;
}

/* Ask the brain; its reply becomes one assistant message (text or tool calls).
 */
static int chat(struct rx_graph_task *t, json_t *in, void *ctx, json_t **update)
{
    json_t *reply = NULL, *calls, *c, *msg, *oa, *history;
    size_t i;
    int rc;

    (void)t;
    (void)ctx;
    history = to_openai(json_object_get(in, "messages"));
    if (!history)
        return -ENOMEM;
    rc = builtin_reply_decide(history, NULL, &reply);
    json_decref(history);
    if (rc)
        return rc;
    calls = json_object_get(reply, "tool_calls");
    if (!calls) {
        msg = json_pack("{s:s,s:O}", "role", "assistant", "content",
                        json_object_get(reply, "content"));
    } else {
        /* The brain's flat calls, in the OpenAI shape it reads back. */
        oa = json_array();
        json_array_foreach(calls, i, c)
        {
            json_array_append_new(oa, json_pack("{s:O,s:s,s:{s:O,s:O}}", "id",
                                                json_object_get(c, "id"), "type",
                                                "function", "function", "name",
                                                json_object_get(c, "name"), "arguments",
                                                json_object_get(c, "arguments")));
        }
        msg =
            json_pack("{s:s,s:n,s:o}", "role", "assistant", "content", "tool_calls", oa);
    }
    json_decref(reply);
    *update = json_pack("{s:[o]}", "messages", msg);
    return *update ? 0 : -ENOMEM;
}

static int run_calculator(const char *arguments, char *out, size_t size)
{
    struct rx_error err = {""};
    json_t *args = json_loads(arguments, 0, NULL);
    const char *expr = json_string_value(json_object_get(args, "expression"));
    double v;
    int rc = -EINVAL;

    if (expr)
        rc = calculator_eval(expr, &v, &err);
    if (!rc)
        rc = calculator_format(v, out, size);
    if (rc)
        snprintf(out, size, "Error: %s", err.text[0] ? err.text : "bad arguments");
    json_decref(args);
    return 0;
}

/* Run every tool call of the last message; one tool message per call. */
static int tools(struct rx_graph_task *t, json_t *in, void *ctx, json_t **update)
{
    json_t *msgs = json_array(), *c;
    char result[RX_ERR_LEN + CALCULATOR_FMT_LEN];
    size_t i;

    (void)t;
    (void)ctx;
    json_array_foreach(json_object_get(last_message(in), "tool_calls"), i, c)
    {
        json_t *fn = json_object_get(c, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));

        if (name && !strcmp(name, "calculator"))
            run_calculator(json_string_value(json_object_get(fn, "arguments")), result,
                           sizeof(result));
        else
            snprintf(result, sizeof(result), "Error: unknown tool '%s'",
                     name ? name : "");
        json_array_append_new(msgs,
                              json_pack("{s:s,s:O,s:s}", "role", "tool", "tool_call_id",
                                        json_object_get(c, "id"), "content", result));
    }
    *update = json_pack("{s:o}", "messages", msgs);
    return *update ? 0 : -ENOMEM;
}

static int should_continue(json_t *state, void *ctx, struct rx_graph_route *route)
{
    (void)ctx;
    return rx_graph_route_to(route, json_object_get(last_message(state), "tool_calls")
                                        ? "tools"
                                        : RX_GRAPH_END);
}

/* Show the pending tool calls and read y/n from stdin. */
static bool approved(json_t *state)
{
    json_t *c;
    char line[64] = "";
    size_t i;

    json_array_foreach(json_object_get(last_message(state), "tool_calls"), i, c)
    {
        json_t *fn = json_object_get(c, "function");

        printf("approve %s(%s)? [y/N] ", json_string_value(json_object_get(fn, "name")),
               json_string_value(json_object_get(fn, "arguments")));
    }
    fflush(stdout);
    if (!fgets(line, sizeof(line), stdin))
        return false;
    if (!isatty(STDIN_FILENO))
        printf("%s%s", line, strchr(line, '\n') ? "" : "\n"); /* echo a piped answer */
    return line[0] == 'y' || line[0] == 'Y';
}

/* The refusal, as the tools node would have written it: one message per call. */
static json_t *refusal(json_t *state)
{
    json_t *msgs = json_array(), *c;
    size_t i;

    json_array_foreach(json_object_get(last_message(state), "tool_calls"), i, c)
        json_array_append_new(msgs, json_pack("{s:s,s:O,s:s}", "role", "tool",
                                              "tool_call_id", json_object_get(c, "id"),
                                              "content", "Error: the user said no"));
    return json_pack("{s:o}", "messages", msgs);
}

static void print_trace(json_t *state)
{
    json_t *m;
    size_t i;

    json_array_foreach(json_object_get(state, "messages"), i, m)
    {
        json_t *calls = json_object_get(m, "tool_calls");
        const char *role = json_string_value(json_object_get(m, "type"));

        if (calls)
            printf(
                "%s: calls %s(%s)\n", role,
                json_string_value(json_object_get(
                    json_object_get(json_array_get(calls, 0), "function"), "name")),
                json_string_value(json_object_get(
                    json_object_get(json_array_get(calls, 0), "function"), "arguments")));
        else
            printf("%s: %s\n", role, json_string_value(json_object_get(m, "content")));
    }
}

int main(int argc, char **argv)
{
    const char *map[] = {"tools", "tools", RX_GRAPH_END, RX_GRAPH_END, NULL};
    const char *before[] = {"tools", NULL};
    struct rx_graph *g = rx_graph_create(schema, 1);
    struct rx_graph_config cfg = {.thread_id = "react", .interrupt_before = before};
    struct rx_graph_result res = {0};
    struct rx_error err = {{0}};
    json_t *in, *no;
    int rc = 1;

    cfg.checkpointer = rx_checkpoint_sqlite_open(argc > 2 ? argv[2] : "react.db", &err);
    in = json_pack("{s:[{s:s,s:s}]}", "messages", "role", "user", "content",
                   argc > 1 ? argv[1] : "what is 6*7?");
    if (!g || !in || !cfg.checkpointer || rx_graph_add_node(g, "chat", chat, NULL) ||
        rx_graph_add_node(g, "tools", tools, NULL) ||
        rx_graph_add_edge(g, RX_GRAPH_START, "chat") ||
        rx_graph_add_conditional_edges(g, "chat", should_continue, NULL, map) ||
        rx_graph_add_edge(g, "tools", "chat") || rx_graph_compile(g, &err) ||
        rx_graph_invoke(g, in, &cfg, &res, &err))
        goto out_fail;
    /* Paused before "tools": ask, then continue or answer for the tools. */
    while (res.interrupts) {
        if (!approved(res.state)) {
            no = refusal(res.state);
            rc = rx_graph_update_state(g, &cfg, no, "tools", NULL, &err);
            json_decref(no);
            if (rc)
                goto out_fail;
        }
        rx_graph_result_release(&res);
        if (rx_graph_invoke(g, NULL, &cfg, &res, &err))
            goto out_fail;
    }
    print_trace(res.state);
    printf("answer: %s\n",
           json_string_value(json_object_get(last_message(res.state), "content")));
    rc = 0;
    goto out_release;
out_fail:
    rc = 1;
    fprintf(stderr, "react: %s\n", err.text[0] ? err.text : "out of memory");
out_release:
    rx_graph_result_release(&res);
    json_decref(in);
    rx_checkpoint_destroy(cfg.checkpointer);
    rx_graph_destroy(g);
    return rc;
}
