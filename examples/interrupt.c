/*
 * interrupt - human in the loop: "plan" proposes, "approve" interrupts with
 * a question, the caller resumes the thread with an answer, "approve" runs
 * again and receives it, "act" follows. Checkpoints in memory.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "graph/rx_graph.h"

static int plan(struct rx_graph_task *t, json_t *in, void *ctx, json_t **update)
{
    (void)t;
    (void)in;
    (void)ctx;
    *update = json_pack("{s:s}", "plan", "delete 3 old files");
    return *update ? 0 : -ENOMEM;
}

static int approve(struct rx_graph_task *t, json_t *in, void *ctx, json_t **update)
{
    json_t *answer;
    int rc;

    (void)ctx;
    rc = rx_graph_task_interrupt(t,
                                 json_pack("{s:s,s:O}", "question", "approve?", "plan",
                                           json_object_get(in, "plan")),
                                 &answer);
    if (rc)
        return rc; /* paused: invoke returns the question */
    *update = json_pack("{s:O}", "approved", answer);
    return *update ? 0 : -ENOMEM;
}

static int act(struct rx_graph_task *t, json_t *in, void *ctx, json_t **update)
{
    (void)t;
    (void)ctx;
    *update =
        json_pack("{s:s}", "outcome",
                  json_is_true(json_object_get(in, "approved")) ? "done" : "skipped");
    return *update ? 0 : -ENOMEM;
}

int main(void)
{
    struct rx_graph *g = rx_graph_create(NULL, 0);
    struct rx_checkpoint *cp = rx_checkpoint_memory_create();
    struct rx_graph_config cfg = {.checkpointer = cp, .thread_id = "demo"};
    struct rx_graph_result res = {0};
    struct rx_error err = {{0}};
    json_t *in = json_object();
    char *q = NULL;
    int rc = 1;

    if (!g || !cp || !in || rx_graph_add_node(g, "plan", plan, NULL) ||
        rx_graph_add_node(g, "approve", approve, NULL) ||
        rx_graph_add_node(g, "act", act, NULL) ||
        rx_graph_add_edge(g, RX_GRAPH_START, "plan") ||
        rx_graph_add_edge(g, "plan", "approve") ||
        rx_graph_add_edge(g, "approve", "act") ||
        rx_graph_add_edge(g, "act", RX_GRAPH_END) || rx_graph_compile(g, &err) ||
        rx_graph_invoke(g, in, &cfg, &res, &err))
        goto out_fail;
    q = json_dumps(json_object_get(json_array_get(res.interrupts, 0), "value"),
                   JSON_COMPACT);
    printf("interrupted: %s\n", q);
    rx_graph_result_release(&res);
    cfg.resume = json_true();
    if (rx_graph_invoke(g, NULL, &cfg, &res, &err))
        goto out_fail;
    printf("resumed with true: outcome %s\n",
           json_string_value(json_object_get(res.state, "outcome")));
    rc = 0;
    goto out_release;
out_fail:
    fprintf(stderr, "interrupt: %s\n", err.text[0] ? err.text : "out of memory");
out_release:
    free(q);
    rx_graph_result_release(&res);
    json_decref(in);
    rx_checkpoint_destroy(cp);
    rx_graph_destroy(g);
    return rc;
}
