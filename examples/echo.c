/*
 * echo - the EchoAgent of seed 002 as a one-node graph:
 * `build/examples/echo "你好"` prints 你好.
 */
#include <stdio.h>

#include <jansson.h>

#include "graph/rx_agent.h"

static const struct rx_reducer schema[] = {
    {"messages", RX_REDUCER_ADD_MESSAGES, NULL, NULL},
};

int main(int argc, char **argv)
{
    struct rx_graph *g = rx_graph_create(schema, 1);
    struct rx_graph_result res = {0};
    struct rx_error err = {{0}};
    json_t *in, *msgs;
    int rc = 1;

    if (argc != 2) {
        fprintf(stderr, "usage: %s TEXT\n", argv[0]);
        rx_graph_destroy(g);
        return 2;
    }
    in = json_pack("{s:[{s:s,s:s}]}", "messages", "role", "user", "content", argv[1]);
    if (!g || !in ||
        rx_graph_add_node(g, "echo", rx_agent_node, (void *)&rx_agent_echo) ||
        rx_graph_add_edge(g, RX_GRAPH_START, "echo") ||
        rx_graph_add_edge(g, "echo", RX_GRAPH_END) || rx_graph_compile(g, &err) ||
        rx_graph_invoke(g, in, NULL, &res, &err)) {
        fprintf(stderr, "echo: %s\n", err.text[0] ? err.text : "out of memory");
        goto out_release;
    }
    msgs = json_object_get(res.state, "messages");
    printf("%s\n", json_string_value(json_object_get(
                       json_array_get(msgs, json_array_size(msgs) - 1), "content")));
    rc = 0;
out_release:
    rx_graph_result_release(&res);
    json_decref(in);
    rx_graph_destroy(g);
    return rc;
}
