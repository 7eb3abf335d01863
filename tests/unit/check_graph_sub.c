/*
 * check_graph_sub - a compiled graph as a node (LangGraph subgraphs): its
 * output merges through the parent's reducers, its checkpoints live in
 * their own namespace, and its interrupts reach the caller, who resumes the
 * parent and so resumes the subgraph where it paused.
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "graph/rx_graph.h"

static const struct rx_reducer schema[] = {
    {"messages", RX_REDUCER_ADD_MESSAGES, NULL, NULL},
};

static int runs[4]; /* prep, s1, ask, s2 */

static int say(struct rx_graph_task *task, json_t *input, void *ctx, json_t **update)
{
    const char *name = rx_graph_task_node(task);

    (void)input;
    runs[(int)(size_t)ctx]++;
    *update = json_pack("{s:[{s:s,s:s,s:s}]}", "messages", "id", name, "type", "ai",
                        "content", name);
    return *update ? 0 : -ENOMEM;
}

static int ask(struct rx_graph_task *task, json_t *input, void *ctx, json_t **update)
{
    json_t *a;
    int rc;

    (void)input;
    (void)ctx;
    runs[2]++;
    rc = rx_graph_task_interrupt(task, json_string("ok?"), &a);
    if (rc)
        return rc;
    *update = json_pack("{s:[{s:s,s:s,s:O}]}", "messages", "id", "ask", "type", "human",
                        "content", a);
    return *update ? 0 : -ENOMEM;
}

/* sub: START -> s1 -> (ask ->) s2. */
static struct rx_graph *make_sub(bool asking)
{
    struct rx_graph *sub = rx_graph_create(schema, 1);

    ck_assert_int_eq(rx_graph_add_node(sub, "s1", say, (void *)1), 0);
    ck_assert_int_eq(rx_graph_add_node(sub, "s2", say, (void *)3), 0);
    ck_assert_int_eq(rx_graph_add_edge(sub, RX_GRAPH_START, "s1"), 0);
    if (asking) {
        ck_assert_int_eq(rx_graph_add_node(sub, "ask", ask, NULL), 0);
        ck_assert_int_eq(rx_graph_add_edge(sub, "s1", "ask"), 0);
        ck_assert_int_eq(rx_graph_add_edge(sub, "ask", "s2"), 0);
    } else {
        ck_assert_int_eq(rx_graph_add_edge(sub, "s1", "s2"), 0);
    }
    ck_assert_int_eq(rx_graph_compile(sub, NULL), 0);
    return sub;
}

/* parent: START -> prep -> inner -> END. */
static struct rx_graph *make_parent(const struct rx_graph *sub)
{
    struct rx_graph *g = rx_graph_create(schema, 1);

    ck_assert_int_eq(rx_graph_add_node(g, "prep", say, (void *)0), 0);
    ck_assert_int_eq(rx_graph_add_subgraph(g, "inner", sub), 0);
    ck_assert_int_eq(rx_graph_add_edge(g, RX_GRAPH_START, "prep"), 0);
    ck_assert_int_eq(rx_graph_add_edge(g, "prep", "inner"), 0);
    ck_assert_int_eq(rx_graph_compile(g, NULL), 0);
    return g;
}

static void assert_contents(json_t *state, const char *want)
{
    json_t *got = json_array(), *m;
    size_t i;
    char *g;

    json_array_foreach(json_object_get(state, "messages"), i, m)
        json_array_append(got, json_object_get(m, "content"));
    g = json_dumps(got, JSON_COMPACT);
    ck_assert_msg(!strcmp(g, want), "messages %s, want %s", g, want);
    free(g);
    json_decref(got);
}

START_TEST(subgraph_output_merges)
{
    struct rx_graph *sub = make_sub(false), *g = make_parent(sub);
    struct rx_graph_result res = {0};
    json_t *in = json_pack("{s:s}", "messages", "hi");

    memset(runs, 0, sizeof(runs));
    ck_assert_int_eq(rx_graph_invoke(g, in, NULL, &res, NULL), 0);
    /* add_messages merges sub's whole list by id: nothing twice. */
    assert_contents(res.state, "[\"hi\",\"prep\",\"s1\",\"s2\"]");
    ck_assert_int_eq(res.steps, 2);
    rx_graph_result_release(&res);
    json_decref(in);
    rx_graph_destroy(g);
    rx_graph_destroy(sub);
}
END_TEST

START_TEST(subgraph_interrupt_reaches_caller)
{
    struct rx_graph *sub = make_sub(true), *g = make_parent(sub);
    struct rx_checkpoint *cp = rx_checkpoint_memory_create();
    struct rx_graph_config cfg = {.checkpointer = cp, .thread_id = "t"};
    struct rx_graph_result res = {0};
    struct rx_error e = {{0}};
    json_t *in = json_pack("{s:s}", "messages", "hi"), *yes = json_string("yes");
    json_t *snap = NULL, *hist = NULL, *h, *nexts;
    size_t i;
    char *got;

    memset(runs, 0, sizeof(runs));
    ck_assert_int_eq(rx_graph_invoke(g, in, &cfg, &res, &e), 0);
    ck_assert_uint_eq(json_array_size(res.interrupts), 1);
    ck_assert_str_eq(
        json_string_value(json_object_get(json_array_get(res.interrupts, 0), "node")),
        "inner");
    ck_assert_str_eq(
        json_string_value(json_object_get(json_array_get(res.interrupts, 0), "value")),
        "ok?");
    rx_graph_result_release(&res);
    ck_assert_int_eq(rx_graph_get_state(g, &cfg, &snap, &e), 0);
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(snap, "next"), 0)),
                     "inner");
    json_decref(snap);

    cfg.resume = yes;
    ck_assert_msg(rx_graph_invoke(g, NULL, &cfg, &res, &e) == 0, "%s", e.text);
    ck_assert_ptr_null(res.interrupts);
    assert_contents(res.state, "[\"hi\",\"prep\",\"s1\",\"yes\",\"s2\"]");
    /* sub resumed from its checkpoint: s1 did not run again, ask did. */
    ck_assert_int_eq(runs[1], 1);
    ck_assert_int_eq(runs[2], 2);
    ck_assert_int_eq(runs[3], 1);
    rx_graph_result_release(&res);

    /*
     * The parent's history holds the parent's checkpoints and only those,
     * newest first: each one's `next` is a parent node, never one of sub's.
     */
    cfg.resume = NULL;
    ck_assert_int_eq(rx_graph_get_state_history(g, &cfg, &hist, &e), 0);
    nexts = json_array();
    json_array_foreach(hist, i, h)
    {
        json_array_append(nexts, json_object_get(h, "next"));
    }
    got = json_dumps(nexts, JSON_COMPACT);
    ck_assert_msg(!strcmp(got, "[[],[\"inner\"],[\"inner\"],[\"prep\"]]"),
                  "history's next: %s", got);
    free(got);
    json_decref(nexts);
    json_decref(hist);
    json_decref(yes);
    json_decref(in);
    rx_checkpoint_destroy(cp);
    rx_graph_destroy(g);
    rx_graph_destroy(sub);
}
END_TEST

START_TEST(subgraph_bad_calls)
{
    struct rx_graph *sub = rx_graph_create(schema, 1), *g = rx_graph_create(schema, 1);

    ck_assert_int_eq(rx_graph_add_subgraph(g, "x", sub), -EINVAL); /* not compiled */
    ck_assert_int_eq(rx_graph_add_subgraph(g, "x", g), -EINVAL);
    ck_assert_int_eq(rx_graph_add_subgraph(NULL, "x", sub), -EINVAL);
    ck_assert_int_eq(rx_graph_add_subgraph(g, NULL, sub), -EINVAL);
    rx_graph_destroy(g);
    rx_graph_destroy(sub);
}
END_TEST

Suite *graph_sub_suite(void);
Suite *graph_sub_suite(void)
{
    Suite *s = suite_create("graph_sub");
    TCase *tc = tcase_create("subgraphs");

    tcase_add_test(tc, subgraph_output_merges);
    tcase_add_test(tc, subgraph_interrupt_reaches_caller);
    tcase_add_test(tc, subgraph_bad_calls);
    suite_add_tcase(s, tc);
    return s;
}
