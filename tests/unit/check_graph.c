/*
 * check_graph - rx_graph: every compile error, partial updates along a chain,
 * the merge order under random finish times, the concurrent-write error,
 * joins, Send, commands, path maps, the recursion limit and streaming.
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "graph/rx_graph.h"

static const struct rx_reducer schema[] = {
    {"log", RX_REDUCER_APPEND, NULL, NULL},
    {"results", RX_REDUCER_APPEND, NULL, NULL},
    {"count", RX_REDUCER_MAX, NULL, NULL},
};
#define NSCHEMA (sizeof(schema) / sizeof(schema[0]))

static void sleep_us(long us)
{
    struct timespec ts = {0, us * 1000};

    nanosleep(&ts, NULL);
}

/* Appends its own name to "log" after sleeping a random few hundred µs. */
static int log_node(struct rx_graph_task *task, json_t *input, void *ctx, json_t **update)
{
    unsigned seed = (unsigned)(uintptr_t)task ^ (unsigned)time(NULL);

    (void)input;
    if (ctx)
        sleep_us(rand_r(&seed) % 400);
    *update = json_pack("{s:[s]}", "log", rx_graph_task_node(task));
    return *update ? 0 : -ENOMEM;
}

static int noop_node(struct rx_graph_task *task, json_t *input, void *ctx,
                     json_t **update)
{
    (void)task;
    (void)input;
    (void)ctx;
    (void)update;
    return 0;
}

static json_t *log_of(json_t *state)
{
    return json_object_get(state, "log");
}

static void assert_log(json_t *state, const char *want)
{
    json_t *w = json_loads(want, 0, NULL);
    char *got = json_dumps(log_of(state), JSON_COMPACT);

    ck_assert_msg(json_equal(log_of(state), w), "log %s, want %s", got, want);
    free(got);
    json_decref(w);
}

struct compile_case {
    const char *edges[4][2]; /* from, to; NULL ends */
    const char *nodes[3];
    const char *want; /* substring of the error */
};

static const struct compile_case compile_cases[] = {
    {{{"a", RX_GRAPH_END}}, {"a"}, "no entry point"},
    {{{RX_GRAPH_START, "a"}, {"a", "ghost"}}, {"a"}, "node 'ghost': edge to an unknown"},
    {{{RX_GRAPH_START, "a"}, {"ghost", "a"}},
     {"a"},
     "node 'ghost': edge from an unknown"},
    {{{RX_GRAPH_START, "a"}}, {"a", "a"}, "node 'a': added twice"},
    {{{RX_GRAPH_START, "a"}},
     {"a", RX_GRAPH_END},
     "node '__end__': the name is reserved"},
    {{{RX_GRAPH_START, "a"}},
     {"a", RX_GRAPH_START},
     "node '__start__': the name is reserved"},
    {{{RX_GRAPH_START, "a"}, {RX_GRAPH_END, "a"}}, {"a"}, "END cannot be a source"},
    {{{RX_GRAPH_START, "a"}, {"a", RX_GRAPH_START}}, {"a"}, "START cannot be a target"},
};

START_TEST(compile_errors)
{
    const struct compile_case *c = &compile_cases[_i];
    struct rx_graph *g = rx_graph_create(schema, NSCHEMA);
    struct rx_error e = {{0}};
    size_t i;

    for (i = 0; i < 3 && c->nodes[i]; i++)
        ck_assert_int_eq(rx_graph_add_node(g, c->nodes[i], noop_node, NULL), 0);
    for (i = 0; i < 4 && c->edges[i][0]; i++)
        ck_assert_int_eq(rx_graph_add_edge(g, c->edges[i][0], c->edges[i][1]), 0);
    ck_assert_int_eq(rx_graph_compile(g, &e), -EINVAL);
    ck_assert_msg(strstr(e.text, c->want), "error '%s' lacks '%s'", e.text, c->want);
    rx_graph_destroy(g);
}
END_TEST

static int router_a(json_t *state, void *ctx, struct rx_graph_route *route)
{
    (void)state;
    (void)ctx;
    return rx_graph_route_to(route, "go");
}

START_TEST(compile_errors_branch_and_join)
{
    const char *map[] = {"go", "nowhere", NULL};
    const char *srcs[] = {"a", "missing"};
    struct rx_graph *g = rx_graph_create(NULL, 0);
    struct rx_error e = {{0}};

    ck_assert_int_eq(rx_graph_add_node(g, "a", noop_node, NULL), 0);
    ck_assert_int_eq(
        rx_graph_add_conditional_edges(g, RX_GRAPH_START, router_a, NULL, map), 0);
    ck_assert_int_eq(rx_graph_compile(g, &e), -EINVAL);
    ck_assert_ptr_nonnull(strstr(e.text, "node 'nowhere'"));
    rx_graph_destroy(g);

    g = rx_graph_create(NULL, 0);
    ck_assert_int_eq(rx_graph_add_node(g, "a", noop_node, NULL), 0);
    ck_assert_int_eq(rx_graph_add_edge(g, RX_GRAPH_START, "a"), 0);
    ck_assert_int_eq(rx_graph_add_join(g, srcs, 2, "a"), 0);
    ck_assert_int_eq(rx_graph_compile(g, &e), -EINVAL);
    ck_assert_ptr_nonnull(strstr(e.text, "node 'missing'"));
    rx_graph_destroy(g);

    /* Adding after compile is refused, invoking before compile too. */
    g = rx_graph_create(NULL, 0);
    ck_assert_int_eq(rx_graph_add_node(g, "a", noop_node, NULL), 0);
    ck_assert_int_eq(rx_graph_add_edge(g, RX_GRAPH_START, "a"), 0);
    {
        struct rx_graph_result res;
        json_t *in = json_object();

        ck_assert_int_eq(rx_graph_invoke(g, in, NULL, &res, &e), -EINVAL);
        json_decref(in);
    }
    ck_assert_int_eq(rx_graph_compile(g, &e), 0);
    ck_assert_int_eq(rx_graph_add_node(g, "b", noop_node, NULL), -EBUSY);
    rx_graph_destroy(g);
}
END_TEST

START_TEST(linear_chain_partial_updates)
{
    struct rx_graph *g = rx_graph_create(schema, NSCHEMA);
    struct rx_graph_result res = {0};
    json_t *in = json_pack("{s:[s],s:s}", "log", "in", "keep", "me");

    ck_assert_int_eq(rx_graph_add_node(g, "one", log_node, NULL), 0);
    ck_assert_int_eq(rx_graph_add_node(g, "two", log_node, NULL), 0);
    ck_assert_int_eq(rx_graph_add_node(g, "three", log_node, NULL), 0);
    ck_assert_int_eq(rx_graph_add_edge(g, RX_GRAPH_START, "one"), 0);
    ck_assert_int_eq(rx_graph_add_edge(g, "one", "two"), 0);
    ck_assert_int_eq(rx_graph_add_edge(g, "two", "three"), 0);
    ck_assert_int_eq(rx_graph_add_edge(g, "three", RX_GRAPH_END), 0);
    ck_assert_int_eq(rx_graph_compile(g, NULL), 0);
    ck_assert_int_eq(rx_graph_invoke(g, in, NULL, &res, NULL), 0);
    assert_log(res.state, "[\"in\",\"one\",\"two\",\"three\"]");
    ck_assert_str_eq(json_string_value(json_object_get(res.state, "keep")), "me");
    ck_assert_int_eq(res.steps, 3);
    ck_assert_ptr_null(res.interrupts);
    rx_graph_result_release(&res);
    json_decref(in);
    rx_graph_destroy(g);
}
END_TEST

START_TEST(merge_order_under_random_finish)
{
    static const char *const names[] = {"e", "c", "a", "d", "b"};
    struct rx_graph *g = rx_graph_create(schema, NSCHEMA);
    const char *srcs[5];
    int round, i;

    for (i = 0; i < 5; i++) {
        ck_assert_int_eq(rx_graph_add_node(g, names[i], log_node, (void *)1), 0);
        ck_assert_int_eq(rx_graph_add_edge(g, RX_GRAPH_START, names[i]), 0);
        srcs[i] = names[i];
    }
    ck_assert_int_eq(rx_graph_add_node(g, "z", log_node, NULL), 0);
    ck_assert_int_eq(rx_graph_add_join(g, srcs, 5, "z"), 0);
    ck_assert_int_eq(rx_graph_compile(g, NULL), 0);
    for (round = 0; round < 20; round++) {
        struct rx_graph_result res = {0};
        json_t *in = json_object();

        ck_assert_int_eq(rx_graph_invoke(g, in, NULL, &res, NULL), 0);
        assert_log(res.state, "[\"a\",\"b\",\"c\",\"d\",\"e\",\"z\"]");
        ck_assert_int_eq(res.steps, 2);
        rx_graph_result_release(&res);
        json_decref(in);
    }
    rx_graph_destroy(g);
}
END_TEST

static int write_x(struct rx_graph_task *task, json_t *input, void *ctx, json_t **update)
{
    (void)task;
    (void)input;
    (void)ctx;
    *update = json_pack("{s:i}", "x", 1);
    return 0;
}

START_TEST(concurrent_write_is_an_error)
{
    struct rx_graph *g = rx_graph_create(schema, NSCHEMA);
    struct rx_graph_result res = {0};
    struct rx_error e = {{0}};
    json_t *in = json_object();

    ck_assert_int_eq(rx_graph_add_node(g, "p", write_x, NULL), 0);
    ck_assert_int_eq(rx_graph_add_node(g, "q", write_x, NULL), 0);
    ck_assert_int_eq(rx_graph_add_edge(g, RX_GRAPH_START, "p"), 0);
    ck_assert_int_eq(rx_graph_add_edge(g, RX_GRAPH_START, "q"), 0);
    ck_assert_int_eq(rx_graph_compile(g, NULL), 0);
    ck_assert_int_eq(rx_graph_invoke(g, in, NULL, &res, &e), -EINVAL);
    ck_assert_ptr_null(res.state);
    ck_assert_msg(strstr(e.text, "key 'x'") && strstr(e.text, "'p' and 'q'"), "%s",
                  e.text);
    json_decref(in);
    rx_graph_destroy(g);
}
END_TEST

START_TEST(join_waits_for_all_sources)
{
    const char *srcs[] = {"a", "b2"};
    struct rx_graph *g = rx_graph_create(schema, NSCHEMA);
    struct rx_graph_result res = {0};
    json_t *in = json_object();

    ck_assert_int_eq(rx_graph_add_node(g, "a", log_node, NULL), 0);
    ck_assert_int_eq(rx_graph_add_node(g, "b", log_node, NULL), 0);
    ck_assert_int_eq(rx_graph_add_node(g, "b2", log_node, NULL), 0);
    ck_assert_int_eq(rx_graph_add_node(g, "c", log_node, NULL), 0);
    ck_assert_int_eq(rx_graph_add_edge(g, RX_GRAPH_START, "a"), 0);
    ck_assert_int_eq(rx_graph_add_edge(g, RX_GRAPH_START, "b"), 0);
    ck_assert_int_eq(rx_graph_add_edge(g, "b", "b2"), 0);
    ck_assert_int_eq(rx_graph_add_join(g, srcs, 2, "c"), 0);
    ck_assert_int_eq(rx_graph_compile(g, NULL), 0);
    ck_assert_int_eq(rx_graph_invoke(g, in, NULL, &res, NULL), 0);
    /* c runs once, after b2, although a finished a step earlier. */
    assert_log(res.state, "[\"a\",\"b\",\"b2\",\"c\"]");
    ck_assert_int_eq(res.steps, 3);
    rx_graph_result_release(&res);
    json_decref(in);
    rx_graph_destroy(g);
}
END_TEST

static int fan_out(json_t *state, void *ctx, struct rx_graph_route *route)
{
    json_t *items = json_object_get(state, "items"), *v;
    size_t i;
    int rc;

    (void)ctx;
    json_array_foreach(items, i, v)
    {
        rc = rx_graph_route_send(
            route, "square",
            json_pack("{s:O,s:i}", "n", v, "delay", (int)(json_array_size(items) - i)));
        if (rc)
            return rc;
    }
    return 0;
}

static int square(struct rx_graph_task *task, json_t *input, void *ctx, json_t **update)
{
    json_int_t n = json_integer_value(json_object_get(input, "n"));

    (void)ctx;
    ck_assert_int_eq(rx_graph_task_send_index(task), (int)n - 1);
    /* Later Sends finish first: the merge must still follow Send order. */
    sleep_us(200 * json_integer_value(json_object_get(input, "delay")));
    *update = json_pack("{s:[I]}", "results", n * n);
    return 0;
}

static int sum(struct rx_graph_task *task, json_t *input, void *ctx, json_t **update)
{
    json_t *v;
    size_t i;
    json_int_t total = 0;

    (void)task;
    (void)ctx;
    json_array_foreach(json_object_get(input, "results"), i, v) total +=
        json_integer_value(v);
    *update = json_pack("{s:I,s:[s]}", "total", total, "log", "sum");
    return 0;
}

START_TEST(send_map_reduce)
{
    struct rx_graph *g = rx_graph_create(schema, NSCHEMA);
    struct rx_graph_result res = {0};
    json_t *in = json_pack("{s:[i,i,i,i]}", "items", 1, 2, 3, 4);
    json_t *want = json_pack("[i,i,i,i]", 1, 4, 9, 16);

    ck_assert_int_eq(rx_graph_add_node(g, "square", square, NULL), 0);
    ck_assert_int_eq(rx_graph_add_node(g, "sum", sum, NULL), 0);
    ck_assert_int_eq(
        rx_graph_add_conditional_edges(g, RX_GRAPH_START, fan_out, NULL, NULL), 0);
    ck_assert_int_eq(rx_graph_add_edge(g, "square", "sum"), 0);
    ck_assert_int_eq(rx_graph_compile(g, NULL), 0);
    ck_assert_int_eq(rx_graph_invoke(g, in, NULL, &res, NULL), 0);
    ck_assert(json_equal(json_object_get(res.state, "results"), want));
    ck_assert_int_eq(json_integer_value(json_object_get(res.state, "total")), 30);
    assert_log(res.state, "[\"sum\"]"); /* sum ran once for four Sends */
    rx_graph_result_release(&res);
    json_decref(want);
    json_decref(in);
    rx_graph_destroy(g);
}
END_TEST

/* A command: count up, go back to itself until 3, then to "done". */
static int counter_cmd(struct rx_graph_task *task, json_t *input, void *ctx,
                       json_t **update)
{
    json_int_t n = json_integer_value(json_object_get(input, "count")) + 1;

    (void)ctx;
    *update = json_pack("{s:I}", "count", n);
    return rx_graph_task_goto(task, n < 3 ? "counter" : "done");
}

START_TEST(command_goto)
{
    struct rx_graph *g = rx_graph_create(schema, NSCHEMA);
    struct rx_graph_result res = {0};
    json_t *in = json_pack("{s:i}", "count", 0);

    ck_assert_int_eq(rx_graph_add_node(g, "counter", counter_cmd, NULL), 0);
    ck_assert_int_eq(rx_graph_add_node(g, "done", log_node, NULL), 0);
    ck_assert_int_eq(rx_graph_add_edge(g, RX_GRAPH_START, "counter"), 0);
    /* LangGraph: a node only a command goes to is declared as the node's ends. */
    {
        const char *ends[] = {"counter", "done", NULL};

        ck_assert_int_eq(rx_graph_set_ends(g, "counter", ends), 0);
    }
    ck_assert_int_eq(rx_graph_compile(g, NULL), 0);
    ck_assert_int_eq(rx_graph_invoke(g, in, NULL, &res, NULL), 0);
    ck_assert_int_eq(json_integer_value(json_object_get(res.state, "count")), 3);
    assert_log(res.state, "[\"done\"]");
    ck_assert_int_eq(res.steps, 4);
    rx_graph_result_release(&res);
    json_decref(in);
    rx_graph_destroy(g);
}
END_TEST

static int route_by_count(json_t *state, void *ctx, struct rx_graph_route *route)
{
    (void)ctx;
    if (json_integer_value(json_object_get(state, "count")) >= 2)
        return rx_graph_route_to(route, "stop");
    return rx_graph_route_to(
        route, json_is_true(json_object_get(state, "bad")) ? "nokey" : "again");
}

static int incr(struct rx_graph_task *task, json_t *input, void *ctx, json_t **update)
{
    (void)task;
    (void)ctx;
    *update = json_pack("{s:I}", "count",
                        json_integer_value(json_object_get(input, "count")) + 1);
    return 0;
}

static int count_steps(void *ctx, int step, json_t *updates, json_t *values)
{
    int *n = ctx;

    ck_assert_int_eq(step, *n);
    ck_assert(json_is_array(updates));
    ck_assert(json_is_object(values));
    ++*n;
    return 0;
}

START_TEST(path_map_and_stream)
{
    const char *map[] = {"again", "incr", "stop", RX_GRAPH_END, NULL};
    struct rx_graph *g = rx_graph_create(schema, NSCHEMA);
    struct rx_graph_result res = {0};
    struct rx_error e = {{0}};
    int steps = 0;
    struct rx_graph_config cfg = {.on_step = count_steps, .on_step_ctx = &steps};
    json_t *in = json_pack("{s:i}", "count", 0), *bad = json_pack("{s:b}", "bad", 1);

    ck_assert_int_eq(rx_graph_add_node(g, "incr", incr, NULL), 0);
    ck_assert_int_eq(rx_graph_add_edge(g, RX_GRAPH_START, "incr"), 0);
    ck_assert_int_eq(rx_graph_add_conditional_edges(g, "incr", route_by_count, NULL, map),
                     0);
    ck_assert_int_eq(rx_graph_compile(g, NULL), 0);
    ck_assert_int_eq(rx_graph_invoke(g, in, &cfg, &res, NULL), 0);
    ck_assert_int_eq(json_integer_value(json_object_get(res.state, "count")), 2);
    ck_assert_int_eq(steps, 3); /* the input step and two runs of incr */
    rx_graph_result_release(&res);
    ck_assert_int_eq(rx_graph_invoke(g, bad, NULL, &res, &e), -EINVAL);
    ck_assert_ptr_nonnull(strstr(e.text, "'nokey'"));
    json_decref(bad);
    json_decref(in);
    rx_graph_destroy(g);
}
END_TEST

START_TEST(recursion_limit)
{
    struct rx_graph *g = rx_graph_create(schema, NSCHEMA);
    struct rx_graph_result res = {0};
    struct rx_error e = {{0}};
    struct rx_graph_config cfg = {.recursion_limit = 10};
    json_t *in = json_object();

    ck_assert_int_eq(rx_graph_add_node(g, "ping", log_node, NULL), 0);
    ck_assert_int_eq(rx_graph_add_node(g, "pong", log_node, NULL), 0);
    ck_assert_int_eq(rx_graph_add_edge(g, RX_GRAPH_START, "ping"), 0);
    ck_assert_int_eq(rx_graph_add_edge(g, "ping", "pong"), 0);
    ck_assert_int_eq(rx_graph_add_edge(g, "pong", "ping"), 0);
    ck_assert_int_eq(rx_graph_compile(g, NULL), 0);
    ck_assert_int_eq(rx_graph_invoke(g, in, &cfg, &res, &e), -ELOOP);
    ck_assert_ptr_nonnull(strstr(e.text, "recursion limit of 10"));
    ck_assert_int_eq(rx_graph_invoke(g, in, NULL, &res, &e), -ELOOP);
    ck_assert_ptr_nonnull(strstr(e.text, "recursion limit of 25"));
    json_decref(in);
    rx_graph_destroy(g);
}
END_TEST

static int failing(struct rx_graph_task *task, json_t *input, void *ctx, json_t **update)
{
    (void)input;
    (void)ctx;
    (void)update;
    rx_graph_task_set_error(task, "the tool is broken");
    return -EIO;
}

START_TEST(node_error_names_the_node)
{
    struct rx_graph *g = rx_graph_create(schema, NSCHEMA);
    struct rx_graph_result res = {0};
    struct rx_error e = {{0}};
    json_t *in = json_object();

    ck_assert_int_eq(rx_graph_add_node(g, "bad", failing, NULL), 0);
    ck_assert_int_eq(rx_graph_add_node(g, "ok", log_node, NULL), 0);
    ck_assert_int_eq(rx_graph_add_edge(g, RX_GRAPH_START, "bad"), 0);
    ck_assert_int_eq(rx_graph_add_edge(g, RX_GRAPH_START, "ok"), 0);
    ck_assert_int_eq(rx_graph_compile(g, NULL), 0);
    ck_assert_int_eq(rx_graph_invoke(g, in, NULL, &res, &e), -EIO);
    ck_assert_str_eq(e.text, "node 'bad' failed: the tool is broken");
    json_decref(in);
    rx_graph_destroy(g);
}
END_TEST

Suite *graph_suite(void);
Suite *graph_suite(void)
{
    Suite *s = suite_create("graph");
    TCase *tc = tcase_create("core");

    tcase_add_loop_test(tc, compile_errors, 0,
                        (int)(sizeof(compile_cases) / sizeof(compile_cases[0])));
    tcase_add_test(tc, compile_errors_branch_and_join);
    tcase_add_test(tc, linear_chain_partial_updates);
    tcase_add_test(tc, merge_order_under_random_finish);
    tcase_add_test(tc, concurrent_write_is_an_error);
    tcase_add_test(tc, join_waits_for_all_sources);
    tcase_add_test(tc, send_map_reduce);
    tcase_add_test(tc, command_goto);
    tcase_add_test(tc, path_map_and_stream);
    tcase_add_test(tc, recursion_limit);
    tcase_add_test(tc, node_error_names_the_node);
    tcase_set_timeout(tc, 30);
    suite_add_tcase(s, tc);
    return s;
}
