/*
 * subgraph - a compiled graph as a node of another (LangGraph subgraphs).
 * The parent plans, hands the question to a "research" subgraph (search,
 * then a reviewer that asks a person whether the sources are good enough),
 * and writes the answer. The reviewer's interrupt() reaches the caller of
 * the parent; resuming the parent resumes the subgraph where it paused
 * (search does not run again). Both keep checkpoints in one memory store,
 * the subgraph in its own namespace of the thread.
 * `build/examples/subgraph` prints the messages and "searches: 1".
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include <jansson.h>

#include "graph/rx_graph.h"

static const struct rx_reducer schema[] = {
    {"messages", RX_REDUCER_ADD_MESSAGES, NULL, NULL},
};

static int searches;

/* An AI message with fixed text: what each node of this demo says. */
static int say(const char *text, json_t **update)
{
    *update = json_pack("{s:[[s,s]]}", "messages", "ai", text);
    return *update ? 0 : -ENOMEM;
}

static int plan(struct rx_graph_task *t, json_t *in, void *ctx, json_t **update)
{
    (void)t;
    (void)in;
    (void)ctx;
    return say("plan: look it up, then answer", update);
}

static int search(struct rx_graph_task *t, json_t *in, void *ctx, json_t **update)
{
    (void)t;
    (void)in;
    (void)ctx;
    searches++;
    return say("search: 3 sources found", update);
}

static int review(struct rx_graph_task *t, json_t *in, void *ctx, json_t **update)
{
    json_t *answer;
    int rc;

    (void)in;
    (void)ctx;
    rc = rx_graph_task_interrupt(t, json_string("are 3 sources enough?"), &answer);
    if (rc)
        return rc;
    *update = json_pack("{s:[[s,O]]}", "messages", "human", answer);
    return *update ? 0 : -ENOMEM;
}

static int write_answer(struct rx_graph_task *t, json_t *in, void *ctx, json_t **update)
{
    (void)t;
    (void)in;
    (void)ctx;
    return say("write: the answer, from 3 sources", update);
}

int main(void)
{
    struct rx_graph *research = rx_graph_create(schema, 1),
                    *g = rx_graph_create(schema, 1);
    struct rx_checkpoint *cp = rx_checkpoint_memory_create();
    struct rx_graph_config cfg = {.checkpointer = cp, .thread_id = "demo"};
    struct rx_graph_result res = {0};
    struct rx_error err = {{0}};
    json_t *in = json_pack("{s:s}", "messages", "why is the sky blue?"), *m;
    json_t *yes = json_string("yes, go on");
    size_t i;
    int rc = 1;

    if (!research || !g || !cp || !in || !yes ||
        rx_graph_add_node(research, "search", search, NULL) ||
        rx_graph_add_node(research, "review", review, NULL) ||
        rx_graph_add_edge(research, RX_GRAPH_START, "search") ||
        rx_graph_add_edge(research, "search", "review") ||
        rx_graph_compile(research, &err) || rx_graph_add_node(g, "plan", plan, NULL) ||
        rx_graph_add_subgraph(g, "research", research) ||
        rx_graph_add_node(g, "write", write_answer, NULL) ||
        rx_graph_add_edge(g, RX_GRAPH_START, "plan") ||
        rx_graph_add_edge(g, "plan", "research") ||
        rx_graph_add_edge(g, "research", "write") || rx_graph_compile(g, &err) ||
        rx_graph_invoke(g, in, &cfg, &res, &err))
        goto out_fail;
    printf(
        "paused in %s: %s\n",
        json_string_value(json_object_get(json_array_get(res.interrupts, 0), "node")),
        json_string_value(json_object_get(json_array_get(res.interrupts, 0), "value")));
    rx_graph_result_release(&res);
    cfg.resume = yes;
    if (rx_graph_invoke(g, NULL, &cfg, &res, &err))
        goto out_fail;
    json_array_foreach(json_object_get(res.state, "messages"), i, m)
        printf("%s: %s\n", json_string_value(json_object_get(m, "type")),
               json_string_value(json_object_get(m, "content")));
    printf("searches: %d\n", searches);
    rc = 0;
    goto out_release;
out_fail:
    fprintf(stderr, "subgraph: %s\n", err.text[0] ? err.text : "out of memory");
out_release:
    rx_graph_result_release(&res);
    json_decref(in);
    json_decref(yes);
    rx_checkpoint_destroy(cp);
    rx_graph_destroy(g);
    rx_graph_destroy(research);
    return rc;
}
