/*
 * check_graph_semantics - where LangGraph defines a behaviour, rx_graph
 * does the same (SPEC 8). Each table row states LangGraph's result as the
 * expectation: the merge order of edge and Send tasks, what a router sees,
 * the recursion limit, compile()'s reachability and name checks, and
 * add_messages through a graph.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "graph/rx_graph.h"

static const struct rx_reducer schema[] = {
    {"log", RX_REDUCER_APPEND, NULL, NULL},
    {"results", RX_REDUCER_APPEND, NULL, NULL},
    {"messages", RX_REDUCER_ADD_MESSAGES, NULL, NULL},
};
#define NSCHEMA (sizeof(schema) / sizeof(schema[0]))

static void assert_key(json_t *state, const char *key, const char *want)
{
    json_t *w = json_loads(want, JSON_DECODE_ANY, NULL);
    char *got = json_dumps(json_object_get(state, key), JSON_COMPACT | JSON_ENCODE_ANY);

    ck_assert_msg(json_equal(json_object_get(state, key), w), "%s is %s, want %s", key,
                  got, want);
    free(got);
    json_decref(w);
}

/* Appends the Send's "tag", or its node's name for an edge task, to "log". */
static int tag_node(struct rx_graph_task *task, json_t *input, void *ctx, json_t **update)
{
    const char *tag = json_string_value(json_object_get(input, "tag"));

    (void)ctx;
    if (rx_graph_task_send_index(task) < 0)
        tag = rx_graph_task_node(task);
    *update = json_pack("{s:[s]}", "log", tag);
    return *update ? 0 : -ENOMEM;
}

/* ---- merge order: edge tasks by name, then Sends in send order ---- */

struct order_case {
    const char *dests[5]; /* "e:node" a route, "s:node:tag" a Send */
    const char *want;     /* the log */
};

static const struct order_case order_cases[] = {
    /* LangGraph: the Send of 'a' merges after the edge task of 'b'. */
    {{"s:a:a1", "e:b"}, "[\"b\",\"a1\"]"},
    {{"e:c", "s:b:x", "e:a", "s:a:y"}, "[\"a\",\"c\",\"x\",\"y\"]"},
    {{"s:c:1", "s:a:2", "s:b:3"}, "[\"1\",\"2\",\"3\"]"},
    {{"e:b", "e:a", "e:c"}, "[\"a\",\"b\",\"c\"]"},
};

static int order_router(json_t *state, void *ctx, struct rx_graph_route *route)
{
    const struct order_case *c = ctx;
    char node[8], tag[8];
    size_t i;
    int rc = 0;

    (void)state;
    for (i = 0; i < 5 && c->dests[i] && !rc; i++) {
        if (c->dests[i][0] == 'e') {
            rc = rx_graph_route_to(route, c->dests[i] + 2);
            continue;
        }
        ck_assert_int_eq(sscanf(c->dests[i] + 2, "%7[^:]:%7s", node, tag), 2);
        rc = rx_graph_route_send(route, node, json_pack("{s:s}", "tag", tag));
    }
    return rc;
}

START_TEST(merge_order)
{
    const struct order_case *c = &order_cases[_i];
    struct rx_graph *g = rx_graph_create(schema, NSCHEMA);
    struct rx_graph_result res = {0};
    json_t *in = json_object();

    ck_assert_int_eq(rx_graph_add_node(g, "a", tag_node, NULL), 0);
    ck_assert_int_eq(rx_graph_add_node(g, "b", tag_node, NULL), 0);
    ck_assert_int_eq(rx_graph_add_node(g, "c", tag_node, NULL), 0);
    ck_assert_int_eq(
        rx_graph_add_conditional_edges(g, RX_GRAPH_START, order_router, (void *)c, NULL),
        0);
    ck_assert_int_eq(rx_graph_compile(g, NULL), 0);
    ck_assert_int_eq(rx_graph_invoke(g, in, NULL, &res, NULL), 0);
    assert_key(res.state, "log", c->want);
    rx_graph_result_release(&res);
    json_decref(in);
    rx_graph_destroy(g);
}
END_TEST

/* ---- a router sees the state before the step plus its own node's writes ---- */

static int write_key(struct rx_graph_task *task, json_t *input, void *ctx,
                     json_t **update)
{
    const char *tag = json_string_value(json_object_get(input, "tag"));

    (void)ctx;
    if (tag) /* a Send task: its own result */
        *update = json_pack("{s:[s]}", "results", tag);
    else
        *update = json_pack("{s:b}", rx_graph_task_node(task), 1);
    return *update ? 0 : -ENOMEM;
}

struct seen {
    json_t *views; /* one copy of each state a router was given */
};

static int record_router(json_t *state, void *ctx, struct rx_graph_route *route)
{
    struct seen *s = ctx;

    (void)route;
    return json_array_append_new(s->views, json_deep_copy(state)) ? -ENOMEM : 0;
}

static int fan_sends(json_t *state, void *ctx, struct rx_graph_route *route)
{
    (void)state;
    (void)ctx;
    if (rx_graph_route_send(route, "s", json_pack("{s:s}", "tag", "s0")) ||
        rx_graph_route_send(route, "s", json_pack("{s:s}", "tag", "s1")) ||
        rx_graph_route_to(route, "p") || rx_graph_route_to(route, "q"))
        return -ENOMEM;
    return 0;
}

START_TEST(router_sees_own_writes_only)
{
    struct rx_graph *g = rx_graph_create(schema, NSCHEMA);
    struct seen sp = {json_array()}, sq = {json_array()}, ss = {json_array()};
    struct rx_graph_result res = {0};
    json_t *in = json_pack("{s:[s]}", "results", "before"), *v;
    size_t i;

    ck_assert_int_eq(rx_graph_add_node(g, "p", write_key, NULL), 0);
    ck_assert_int_eq(rx_graph_add_node(g, "q", write_key, NULL), 0);
    ck_assert_int_eq(rx_graph_add_node(g, "s", write_key, NULL), 0);
    ck_assert_int_eq(
        rx_graph_add_conditional_edges(g, RX_GRAPH_START, fan_sends, NULL, NULL), 0);
    ck_assert_int_eq(rx_graph_add_conditional_edges(g, "p", record_router, &sp, NULL), 0);
    ck_assert_int_eq(rx_graph_add_conditional_edges(g, "q", record_router, &sq, NULL), 0);
    ck_assert_int_eq(rx_graph_add_conditional_edges(g, "s", record_router, &ss, NULL), 0);
    ck_assert_int_eq(rx_graph_compile(g, NULL), 0);
    ck_assert_int_eq(rx_graph_invoke(g, in, NULL, &res, NULL), 0);
    /* The merged state has every write of the step... */
    ck_assert(json_is_true(json_object_get(res.state, "p")));
    ck_assert(json_is_true(json_object_get(res.state, "q")));
    assert_key(res.state, "results", "[\"before\",\"s0\",\"s1\"]");
    /* ...but p's router saw p's write and not q's, and q's the other way. */
    ck_assert_uint_eq(json_array_size(sp.views), 1);
    v = json_array_get(sp.views, 0);
    ck_assert(json_is_true(json_object_get(v, "p")) && !json_object_get(v, "q"));
    assert_key(v, "results", "[\"before\"]");
    v = json_array_get(sq.views, 0);
    ck_assert(json_is_true(json_object_get(v, "q")) && !json_object_get(v, "p"));
    /* Each Send task routes on its own: twice, each with its own result. */
    ck_assert_uint_eq(json_array_size(ss.views), 2);
    for (i = 0; i < 2; i++) {
        char want[32];

        snprintf(want, sizeof(want), "[\"before\",\"s%zu\"]", i);
        assert_key(json_array_get(ss.views, i), "results", want);
    }
    rx_graph_result_release(&res);
    json_decref(sp.views);
    json_decref(sq.views);
    json_decref(ss.views);
    json_decref(in);
    rx_graph_destroy(g);
}
END_TEST

/* ---- the recursion limit, counted as LangGraph counts it ---- */

struct limit_case {
    int nodes, limit, rc;
};

static const struct limit_case limit_cases[] = {
    {3, 3, -ELOOP}, /* LangGraph: GraphRecursionError */
    {3, 4, 0},      {1, 1, -ELOOP}, {1, 2, 0}, {2, 3, 0}, {5, 5, -ELOOP}, {5, 6, 0},
};

START_TEST(recursion_limit_as_langgraph)
{
    const struct limit_case *c = &limit_cases[_i];
    static const char *const names[] = {"n1", "n2", "n3", "n4", "n5"};
    struct rx_graph *g = rx_graph_create(schema, NSCHEMA);
    struct rx_graph_config cfg = {.recursion_limit = c->limit};
    struct rx_graph_result res = {0};
    struct rx_error e = {{0}};
    json_t *in = json_object();
    int i;

    for (i = 0; i < c->nodes; i++) {
        ck_assert_int_eq(rx_graph_add_node(g, names[i], tag_node, NULL), 0);
        ck_assert_int_eq(
            rx_graph_add_edge(g, i ? names[i - 1] : RX_GRAPH_START, names[i]), 0);
    }
    ck_assert_int_eq(rx_graph_compile(g, NULL), 0);
    ck_assert_int_eq(rx_graph_invoke(g, in, &cfg, &res, &e), c->rc);
    if (c->rc)
        ck_assert_msg(strstr(e.text, "recursion limit"), "%s", e.text);
    else
        ck_assert_int_eq(res.steps, c->nodes);
    rx_graph_result_release(&res);
    json_decref(in);
    rx_graph_destroy(g);
}
END_TEST

/* ---- compile(): names equal to state keys, unreachable nodes ---- */

static int route_nowhere(json_t *state, void *ctx, struct rx_graph_route *route)
{
    (void)state;
    (void)ctx;
    (void)route;
    return 0;
}

struct reach_case {
    const char *nodes[4];
    const char *edges[4][2];
    const char *router_from; /* a router without a path map, or NULL */
    const char *map[5];      /* its path map, if any */
    const char *ends_of, *ends[3];
    const char *want; /* NULL: compiles */
};

static const struct reach_case reach_cases[] = {
    {{"a", "log"},
     {{RX_GRAPH_START, "a"}, {"a", "log"}},
     NULL,
     {NULL},
     NULL,
     {NULL},
     "node 'log': the name is a state key"},
    {{"a", "b"},
     {{RX_GRAPH_START, "a"}},
     NULL,
     {NULL},
     NULL,
     {NULL},
     "node 'b': not reachable"},
    /* A router without a path map may reach any other node... */
    {{"a", "b"}, {{RX_GRAPH_START, "a"}}, "a", {NULL}, NULL, {NULL}, NULL},
    /* ...but not its own source. */
    {{"a"}, {{RX_GRAPH_END, "a"}}, NULL, {NULL}, NULL, {NULL}, "END cannot be a source"},
    {{"a", "b"}, {{"a", "b"}}, RX_GRAPH_START, {"go", "a", NULL}, NULL, {NULL}, NULL},
    {{"a", "b", "c"},
     {{"a", "b"}},
     RX_GRAPH_START,
     {"go", "a", NULL},
     NULL,
     {NULL},
     "node 'c': not reachable"},
    {{"a", "b"}, {{RX_GRAPH_START, "a"}}, NULL, {NULL}, "a", {"b", NULL}, NULL},
    {{"a", "b"},
     {{RX_GRAPH_START, "a"}},
     NULL,
     {NULL},
     "a",
     {"ghost", NULL},
     "node 'ghost': edge to an unknown"},
};

START_TEST(compile_reach_and_names)
{
    const struct reach_case *c = &reach_cases[_i];
    struct rx_graph *g = rx_graph_create(schema, NSCHEMA);
    struct rx_error e = {{0}};
    size_t i;

    for (i = 0; i < 4 && c->nodes[i]; i++)
        ck_assert_int_eq(rx_graph_add_node(g, c->nodes[i], tag_node, NULL), 0);
    for (i = 0; i < 4 && c->edges[i][0]; i++)
        ck_assert_int_eq(rx_graph_add_edge(g, c->edges[i][0], c->edges[i][1]), 0);
    if (c->router_from)
        ck_assert_int_eq(rx_graph_add_conditional_edges(g, c->router_from, route_nowhere,
                                                        NULL, c->map[0] ? c->map : NULL),
                         0);
    if (c->ends_of)
        ck_assert_int_eq(rx_graph_set_ends(g, c->ends_of, c->ends), 0);
    if (!c->want) {
        ck_assert_msg(rx_graph_compile(g, &e) == 0, "case %d: %s", _i, e.text);
    } else {
        ck_assert_int_eq(rx_graph_compile(g, &e), -EINVAL);
        ck_assert_msg(strstr(e.text, c->want), "case %d: '%s' lacks '%s'", _i, e.text,
                      c->want);
    }
    rx_graph_destroy(g);
}
END_TEST

START_TEST(set_ends_errors)
{
    const char *ends[] = {"a", NULL};
    struct rx_graph *g = rx_graph_create(schema, NSCHEMA);

    ck_assert_int_eq(rx_graph_set_ends(g, "nobody", ends), -ENOENT);
    ck_assert_int_eq(rx_graph_set_ends(g, NULL, ends), -EINVAL);
    ck_assert_int_eq(rx_graph_set_ends(NULL, "a", ends), -EINVAL);
    ck_assert_int_eq(rx_graph_add_node(g, "a", tag_node, NULL), 0);
    ck_assert_int_eq(rx_graph_set_ends(g, "a", NULL), -EINVAL);
    ck_assert_int_eq(rx_graph_set_ends(g, "a", ends), 0);
    ck_assert_int_eq(rx_graph_set_ends(g, "a", ends), 0); /* replaces, no leak */
    rx_graph_destroy(g);
}
END_TEST

/* ---- add_messages through a graph: strings, pairs and roles are messages ---- */

static int reply(struct rx_graph_task *task, json_t *input, void *ctx, json_t **update)
{
    (void)task;
    (void)input;
    (void)ctx;
    *update = json_pack("{s:[[s,s]]}", "messages", "assistant", "hello");
    return *update ? 0 : -ENOMEM;
}

START_TEST(add_messages_in_a_graph)
{
    struct rx_graph *g = rx_graph_create(schema, NSCHEMA);
    struct rx_graph_result res = {0};
    json_t *in = json_pack("{s:s}", "messages", "hi"), *msgs;

    ck_assert_int_eq(rx_graph_add_node(g, "bot", reply, NULL), 0);
    ck_assert_int_eq(rx_graph_add_edge(g, RX_GRAPH_START, "bot"), 0);
    ck_assert_int_eq(rx_graph_compile(g, NULL), 0);
    ck_assert_int_eq(rx_graph_invoke(g, in, NULL, &res, NULL), 0);
    msgs = json_object_get(res.state, "messages");
    ck_assert_uint_eq(json_array_size(msgs), 2);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(msgs, 0), "type")),
                     "human");
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(msgs, 1), "type")),
                     "ai");
    ck_assert(json_is_string(json_object_get(json_array_get(msgs, 1), "id")));
    rx_graph_result_release(&res);
    json_decref(in);
    rx_graph_destroy(g);
}
END_TEST

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

Suite *graph_semantics_suite(void);
Suite *graph_semantics_suite(void)
{
    Suite *s = suite_create("graph_semantics");
    TCase *tc = tcase_create("langgraph");

    tcase_add_loop_test(tc, merge_order, 0, N(order_cases));
    tcase_add_test(tc, router_sees_own_writes_only);
    tcase_add_loop_test(tc, recursion_limit_as_langgraph, 0, N(limit_cases));
    tcase_add_loop_test(tc, compile_reach_and_names, 0, N(reach_cases));
    tcase_add_test(tc, set_ends_errors);
    tcase_add_test(tc, add_messages_in_a_graph);
    tcase_set_timeout(tc, 30);
    suite_add_tcase(s, tc);
    return s;
}
