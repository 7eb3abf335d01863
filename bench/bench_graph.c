/*
 * bench_graph - invoke overhead of rx_graph with trivial nodes: a 3-node
 * chain and a 5-way fan-out (published anchors: LangGraph ~640 us and
 * ~2260 us; a C++ port ~5 us and ~12 us). Prints the median and p90 of
 * single invokes, no checkpointer, after a warm-up.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <jansson.h>

#include "graph/rx_graph.h"

#define RUNS 5000

static int trivial(struct rx_graph_task *t, json_t *in, void *ctx, json_t **update)
{
    (void)in;
    (void)ctx;
    *update = json_pack("{s:i}", rx_graph_task_node(t), 1);
    return *update ? 0 : -ENOMEM;
}

static double now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static int measure(const char *label, struct rx_graph *g)
{
    static double t[RUNS];
    struct rx_graph_result res;
    struct rx_error err = {{0}};
    json_t *in = json_pack("{s:i}", "n", 0);
    int i;

    if (!in || rx_graph_compile(g, &err)) {
        fprintf(stderr, "%s: %s\n", label, err.text);
        return 1;
    }
    for (i = -RUNS / 10; i < RUNS; i++) {
        double t0 = now_us();

        if (rx_graph_invoke(g, in, NULL, &res, &err)) {
            fprintf(stderr, "%s: %s\n", label, err.text);
            json_decref(in);
            return 1;
        }
        if (i >= 0)
            t[i] = now_us() - t0;
        rx_graph_result_release(&res);
    }
    qsort(t, RUNS, sizeof(t[0]), cmp);
    printf("%-22s median %7.1f us   p90 %7.1f us   (%d invokes)\n", label, t[RUNS / 2],
           t[RUNS * 9 / 10], RUNS);
    json_decref(in);
    return 0;
}

int main(void)
{
    static const char *const fan[] = {"f1", "f2", "f3", "f4", "f5"};
    struct rx_graph *chain = rx_graph_create(NULL, 0), *fanout = rx_graph_create(NULL, 0);
    int rc = 1, i;

    if (!chain || !fanout || rx_graph_add_node(chain, "a", trivial, NULL) ||
        rx_graph_add_node(chain, "b", trivial, NULL) ||
        rx_graph_add_node(chain, "c", trivial, NULL) ||
        rx_graph_add_edge(chain, RX_GRAPH_START, "a") ||
        rx_graph_add_edge(chain, "a", "b") || rx_graph_add_edge(chain, "b", "c") ||
        rx_graph_add_edge(chain, "c", RX_GRAPH_END))
        goto out_release;
    for (i = 0; i < 5; i++)
        if (rx_graph_add_node(fanout, fan[i], trivial, NULL) ||
            rx_graph_add_edge(fanout, RX_GRAPH_START, fan[i]) ||
            rx_graph_add_edge(fanout, fan[i], RX_GRAPH_END))
            goto out_release;
    rc = measure("3-node chain", chain) || measure("5-way fan-out", fanout);
out_release:
    rx_graph_destroy(chain);
    rx_graph_destroy(fanout);
    return rc;
}
