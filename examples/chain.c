/*
 * chain - a linear StateGraph: START -> draft -> polish -> sign -> END.
 * Each node writes only the keys it changes (a partial update); "steps"
 * appends. Prints the text and the steps taken.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "graph/rx_graph.h"

static const struct rx_reducer schema[] = {
    {"steps", RX_REDUCER_APPEND, NULL, NULL},
};

static int draft(struct rx_graph_task *t, json_t *in, void *ctx, json_t **update)
{
    (void)t;
    (void)ctx;
    *update =
        json_pack("{s:s++,s:[s]}", "text", "hello ",
                  json_string_value(json_object_get(in, "name")), "", "steps", "draft");
    return *update ? 0 : -ENOMEM;
}

static int polish(struct rx_graph_task *t, json_t *in, void *ctx, json_t **update)
{
    (void)t;
    (void)ctx;
    *update =
        json_pack("{s:s+,s:[s]}", "text", json_string_value(json_object_get(in, "text")),
                  "!", "steps", "polish");
    return *update ? 0 : -ENOMEM;
}

static int sign(struct rx_graph_task *t, json_t *in, void *ctx, json_t **update)
{
    (void)t;
    (void)ctx;
    (void)in;
    *update = json_pack("{s:s,s:[s]}", "signature", "-- reflexor", "steps", "sign");
    return *update ? 0 : -ENOMEM;
}

int main(void)
{
    struct rx_graph *g = rx_graph_create(schema, 1);
    struct rx_graph_result res = {0};
    struct rx_error err = {{0}};
    json_t *in = json_pack("{s:s}", "name", "world");
    char *steps = NULL;
    int rc = 1;

    if (!g || !in || rx_graph_add_node(g, "draft", draft, NULL) ||
        rx_graph_add_node(g, "polish", polish, NULL) ||
        rx_graph_add_node(g, "sign", sign, NULL) ||
        rx_graph_add_edge(g, RX_GRAPH_START, "draft") ||
        rx_graph_add_edge(g, "draft", "polish") ||
        rx_graph_add_edge(g, "polish", "sign") ||
        rx_graph_add_edge(g, "sign", RX_GRAPH_END) || rx_graph_compile(g, &err) ||
        rx_graph_invoke(g, in, NULL, &res, &err)) {
        fprintf(stderr, "chain: %s\n", err.text[0] ? err.text : "out of memory");
        goto out_release;
    }
    steps = json_dumps(json_object_get(res.state, "steps"), JSON_COMPACT);
    printf("%s %s\nsteps: %s\n", json_string_value(json_object_get(res.state, "text")),
           json_string_value(json_object_get(res.state, "signature")), steps);
    rc = 0;
out_release:
    free(steps);
    rx_graph_result_release(&res);
    json_decref(in);
    rx_graph_destroy(g);
    return rc;
}
