/*
 * map_reduce - Send: a router fans one "count" task out per word (each task
 * gets its own input), the results append in Send order whatever order the
 * threads finish in, and "total" reduces them once.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "graph/rx_graph.h"

static const struct rx_reducer schema[] = {
    {"lengths", RX_REDUCER_APPEND, NULL, NULL},
};

static int split(json_t *state, void *ctx, struct rx_graph_route *route)
{
    json_t *w;
    size_t i;

    (void)ctx;
    json_array_foreach(json_object_get(state, "words"), i, w)
    {
        if (rx_graph_route_send(route, "count", json_pack("{s:O}", "word", w)))
            return -ENOMEM;
    }
    return 0;
}

static int count(struct rx_graph_task *t, json_t *in, void *ctx, json_t **update)
{
    const char *w = json_string_value(json_object_get(in, "word"));

    (void)ctx;
    *update = json_pack("{s:[{s:s,s:i,s:i}]}", "lengths", "word", w, "length",
                        (int)strlen(w), "send", rx_graph_task_send_index(t));
    return *update ? 0 : -ENOMEM;
}

static int total(struct rx_graph_task *t, json_t *in, void *ctx, json_t **update)
{
    json_t *v;
    size_t i;
    json_int_t sum = 0;

    (void)t;
    (void)ctx;
    json_array_foreach(json_object_get(in, "lengths"), i, v)
    {
        sum += json_integer_value(json_object_get(v, "length"));
    }
    *update = json_pack("{s:I}", "total", sum);
    return *update ? 0 : -ENOMEM;
}

int main(void)
{
    struct rx_graph *g = rx_graph_create(schema, 1);
    struct rx_graph_result res = {0};
    struct rx_error err = {{0}};
    json_t *in = json_pack("{s:[s,s,s,s]}", "words", "map", "reduce", "with", "send");
    json_t *v;
    size_t i;
    int rc = 1;

    if (!g || !in || rx_graph_add_node(g, "count", count, NULL) ||
        rx_graph_add_node(g, "total", total, NULL) ||
        rx_graph_add_conditional_edges(g, RX_GRAPH_START, split, NULL, NULL) ||
        rx_graph_add_edge(g, "count", "total") ||
        rx_graph_add_edge(g, "total", RX_GRAPH_END) || rx_graph_compile(g, &err) ||
        rx_graph_invoke(g, in, NULL, &res, &err)) {
        fprintf(stderr, "map_reduce: %s\n", err.text[0] ? err.text : "out of memory");
        goto out_release;
    }
    json_array_foreach(json_object_get(res.state, "lengths"), i, v)
    {
        printf("%s=%d ", json_string_value(json_object_get(v, "word")),
               (int)json_integer_value(json_object_get(v, "length")));
    }
    printf("\ntotal: %d\n", (int)json_integer_value(json_object_get(res.state, "total")));
    rc = 0;
out_release:
    rx_graph_result_release(&res);
    json_decref(in);
    rx_graph_destroy(g);
    return rc;
}
