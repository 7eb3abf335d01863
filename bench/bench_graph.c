/*
 * bench_graph - invoke overhead of rx_graph with trivial nodes: a 3-node
 * chain, a 5-way fan-out and a fan-out + join (published anchors: LangGraph
 * ~640 us and ~2260 us; a C++ port ~5 us and ~12 us), with no checkpointer;
 * then the chain with the SQLite checkpointer, and the bytes on disk of a
 * chat thread (one message in, one out per turn) every 100 turns up to 500
 * (LangGraph users report 219 MB of checkpoint blobs at 500 turns; the goal
 * here is under 1 MB, growing linearly). Prints the median and p90 of single
 * invokes after a warm-up.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "graph/rx_checkpoint_sqlite.h"
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

static double last_median; /* of the last measure, for the verdicts */

/* runs invokes of g; with a checkpointer, each on a new thread. */
static int measure_with(const char *label, struct rx_graph *g, struct rx_checkpoint *cp,
                        int runs)
{
    static double t[RUNS];
    struct rx_graph_result res;
    struct rx_error err = {{0}};
    struct rx_graph_config cfg = {.checkpointer = cp};
    json_t *in = json_pack("{s:i}", "n", 0);
    char thread[32];
    int i;

    if (!in || rx_graph_compile(g, &err)) {
        fprintf(stderr, "%s: %s\n", label, err.text);
        return 1;
    }
    for (i = -runs / 10; i < runs; i++) {
        double t0 = now_us();

        snprintf(thread, sizeof(thread), "bench-%d", i);
        cfg.thread_id = thread;
        if (rx_graph_invoke(g, in, &cfg, &res, &err)) {
            fprintf(stderr, "%s: %s\n", label, err.text);
            json_decref(in);
            return 1;
        }
        if (i >= 0)
            t[i] = now_us() - t0;
        rx_graph_result_release(&res);
    }
    qsort(t, (size_t)runs, sizeof(t[0]), cmp);
    last_median = t[runs / 2];
    printf("%-28s median %7.1f us   p90 %7.1f us   (%d invokes)\n", label, t[runs / 2],
           t[runs * 9 / 10], runs);
    json_decref(in);
    return 0;
}

static int measure(const char *label, struct rx_graph *g, double goal_us)
{
    int rc = measure_with(label, g, NULL, RUNS);

    if (!rc)
        printf("  goal <= %.0f us: %s\n", goal_us,
               last_median <= goal_us ? "met" : "MISSED");
    return rc;
}

static const struct rx_reducer chat_schema[] = {
    {"messages", RX_REDUCER_ADD_MESSAGES, NULL, NULL},
};

/* One assistant message per turn, about as long as the question. */
static int answer(struct rx_graph_task *t, json_t *in, void *ctx, json_t **update)
{
    (void)t;
    (void)ctx;
    *update =
        json_pack("{s:[{s:s,s:s,s:I}]}", "messages", "type", "ai", "content",
                  "Here is a short answer to your question, as a chat model "
                  "would give it.",
                  "n", (json_int_t)json_array_size(json_object_get(in, "messages")));
    return *update ? 0 : -ENOMEM;
}

static long file_size(const char *path)
{
    struct stat st;

    return stat(path, &st) ? 0 : (long)st.st_size;
}

/* 500 turns on one thread, reopening the file every 100 to read its size. */
static int chat_turns(const char *path)
{
    struct rx_graph *g = rx_graph_create(chat_schema, 1);
    struct rx_graph_config cfg = {.thread_id = "chat"};
    struct rx_graph_result res;
    struct rx_error err = {{0}};
    char wal[300];
    double t0, us = 0;
    int turn = 0, k, rc = 1;

    snprintf(wal, sizeof(wal), "%s-wal", path);
    unlink(path);
    if (!g || rx_graph_add_node(g, "chat", answer, NULL) ||
        rx_graph_add_edge(g, RX_GRAPH_START, "chat") || rx_graph_compile(g, &err))
        goto out_release;
    for (k = 1; k <= 5; k++) {
        cfg.checkpointer = rx_checkpoint_sqlite_open(path, &err);
        if (!cfg.checkpointer)
            goto out_release;
        for (; turn < k * 100; turn++) {
            json_t *in =
                json_pack("{s:[{s:s,s:s}]}", "messages", "type", "human", "content",
                          "What is the weather like today, and should I take an "
                          "umbrella?");

            t0 = now_us();
            rc = rx_graph_invoke(g, in, &cfg, &res, &err);
            us += now_us() - t0;
            json_decref(in);
            if (rc)
                break;
            rx_graph_result_release(&res);
        }
        rx_checkpoint_destroy(cfg.checkpointer); /* folds the WAL into the file */
        if (rc)
            goto out_release;
        printf("chat turns %3d (SQLite)      %8ld bytes on disk  (%ld per turn)\n", turn,
               file_size(path) + file_size(wal),
               (file_size(path) + file_size(wal)) / turn);
    }
    printf("chat turn invoke (SQLite)    mean %7.1f us over %d turns\n", us / turn, turn);
    printf("  goal < 1 MB at 500 turns (LangGraph users report 219 MB): %s\n",
           file_size(path) + file_size(wal) < 1024 * 1024 ? "met" : "MISSED");
    rc = 0;
out_release:
    if (rc)
        fprintf(stderr, "chat: %s\n", err.text);
    unlink(path);
    rx_graph_destroy(g);
    return rc;
}

int main(void)
{
    static const char *const fan[] = {"f1", "f2", "f3", "f4", "f5"};
    struct rx_graph *chain = rx_graph_create(NULL, 0), *fanout = rx_graph_create(NULL, 0);
    struct rx_graph *join = rx_graph_create(NULL, 0),
                    *sqlchain = rx_graph_create(NULL, 0);
    struct rx_checkpoint *cp = NULL;
    char path[64];
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
    if (!join || !sqlchain || rx_graph_add_node(join, "z", trivial, NULL) ||
        rx_graph_add_join(join, fan, 5, "z"))
        goto out_release;
    for (i = 0; i < 5; i++)
        if (rx_graph_add_node(join, fan[i], trivial, NULL) ||
            rx_graph_add_edge(join, RX_GRAPH_START, fan[i]))
            goto out_release;
    if (rx_graph_add_node(sqlchain, "a", trivial, NULL) ||
        rx_graph_add_node(sqlchain, "b", trivial, NULL) ||
        rx_graph_add_node(sqlchain, "c", trivial, NULL) ||
        rx_graph_add_edge(sqlchain, RX_GRAPH_START, "a") ||
        rx_graph_add_edge(sqlchain, "a", "b") || rx_graph_add_edge(sqlchain, "b", "c"))
        goto out_release;
    snprintf(path, sizeof(path), "/tmp/bench_graph_%d.db", (int)getpid());
    rc = measure("3-node chain", chain, 5) || measure("5-way fan-out", fanout, 30) ||
         measure("5-way fan-out + join", join, 30);
    if (!rc) {
        cp = rx_checkpoint_sqlite_open(path, NULL);
        rc = !cp || measure_with("3-node chain, SQLite", sqlchain, cp, RUNS / 10);
        rx_checkpoint_destroy(cp);
        unlink(path);
    }
    if (!rc)
        rc = chat_turns(path);
out_release:
    rx_graph_destroy(chain);
    rx_graph_destroy(fanout);
    rx_graph_destroy(join);
    rx_graph_destroy(sqlchain);
    return rc;
}
