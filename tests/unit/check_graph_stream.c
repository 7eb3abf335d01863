/*
 * check_graph_stream - LangGraph's stream modes (values, updates, custom,
 * messages): each table row is a mode mask and the exact [mode, chunk]
 * sequence LangGraph would send for the same graph (updates in merge order).
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "graph/rx_graph.h"

static const struct rx_reducer schema[] = {
    {"log", RX_REDUCER_APPEND, NULL, NULL},
    {"messages", RX_REDUCER_ADD_MESSAGES, NULL, NULL},
};

static int log_node(struct rx_graph_task *task, json_t *input, void *ctx, json_t **update)
{
    (void)input;
    (void)ctx;
    *update = json_pack("{s:[s]}", "log", rx_graph_task_node(task));
    return *update ? 0 : -ENOMEM;
}

/* Writes two custom chunks, streams a message as tokens, returns two messages. */
static int talker(struct rx_graph_task *task, json_t *input, void *ctx, json_t **update)
{
    int rc;

    (void)input;
    (void)ctx;
    rc = rx_graph_task_write(task, json_pack("{s:i}", "progress", 1));
    if (!rc)
        rc = rx_graph_task_stream_message(
            task, json_pack("{s:s,s:s}", "id", "m1", "content", "hel"));
    if (!rc)
        rc = rx_graph_task_stream_message(
            task, json_pack("{s:s,s:s}", "id", "m1", "content", "lo"));
    if (!rc)
        rc = rx_graph_task_write(task, json_pack("{s:i}", "progress", 2));
    if (rc)
        return rc;
    *update =
        json_pack("{s:[{s:s,s:s,s:s},{s:s,s:s,s:s}]}", "messages", "id", "m1", "type",
                  "ai", "content", "hello", "id", "m2", "type", "ai", "content", "whole");
    return *update ? 0 : -ENOMEM;
}

static int ask(struct rx_graph_task *task, json_t *input, void *ctx, json_t **update)
{
    json_t *a;

    (void)input;
    (void)ctx;
    (void)update;
    return rx_graph_task_interrupt(task, json_string("ok?"), &a);
}

struct sink {
    json_t *got; /* [[mode, chunk], ...] */
    int stop_at; /* answer non-zero to this chunk (1-based), 0: never */
};

static int collect(void *ctx, const char *mode, json_t *chunk)
{
    struct sink *s = ctx;

    json_array_append_new(s->got, json_pack("[s,O]", mode, chunk));
    return s->stop_at && (int)json_array_size(s->got) == s->stop_at;
}

struct stream_case {
    unsigned modes;
    int graph; /* 0: a -> b chain, 1: talker, 2: ask */
    const char *want;
};

#define V RX_GRAPH_STREAM_VALUES
#define U RX_GRAPH_STREAM_UPDATES
#define C RX_GRAPH_STREAM_CUSTOM
#define M RX_GRAPH_STREAM_MESSAGES

static const struct stream_case cases[] = {
    {V, 0,
     "[[\"values\",{}],[\"values\",{\"log\":[\"a\"]}],"
     "[\"values\",{\"log\":[\"a\",\"b\"]}]]"},
    {U, 0,
     "[[\"updates\",{\"a\":{\"log\":[\"a\"]}}],[\"updates\",{\"b\":{\"log\":[\"b\"]}}]]"},
    {V | U, 0,
     "[[\"values\",{}],[\"updates\",{\"a\":{\"log\":[\"a\"]}}],"
     "[\"values\",{\"log\":[\"a\"]}],[\"updates\",{\"b\":{\"log\":[\"b\"]}}],"
     "[\"values\",{\"log\":[\"a\",\"b\"]}]]"},
    {C, 1, "[[\"custom\",{\"progress\":1}],[\"custom\",{\"progress\":2}]]"},
    /* Tokens as they come, then only the message that was not streamed. */
    {M, 1,
     "[[\"messages\",[{\"id\":\"m1\",\"content\":\"hel\"},"
     "{\"langgraph_node\":\"t\",\"langgraph_step\":1}]],"
     "[\"messages\",[{\"id\":\"m1\",\"content\":\"lo\"},"
     "{\"langgraph_node\":\"t\",\"langgraph_step\":1}]],"
     "[\"messages\",[{\"id\":\"m2\",\"type\":\"ai\",\"content\":\"whole\"},"
     "{\"langgraph_node\":\"t\",\"langgraph_step\":1}]]]"},
    {0, 1, "[]"},
    {U, 2,
     "[[\"updates\",{\"__interrupt__\":[{\"id\":\"*\",\"node\":\"q\",\"value\":\"ok?\"}]}"
     "]]"},
};

static struct rx_graph *build(int which)
{
    struct rx_graph *g = rx_graph_create(schema, 2);

    if (which == 0) {
        ck_assert_int_eq(rx_graph_add_node(g, "a", log_node, NULL), 0);
        ck_assert_int_eq(rx_graph_add_node(g, "b", log_node, NULL), 0);
        ck_assert_int_eq(rx_graph_add_edge(g, RX_GRAPH_START, "a"), 0);
        ck_assert_int_eq(rx_graph_add_edge(g, "a", "b"), 0);
    } else {
        ck_assert_int_eq(
            rx_graph_add_node(g, which == 1 ? "t" : "q", which == 1 ? talker : ask, NULL),
            0);
        ck_assert_int_eq(rx_graph_add_edge(g, RX_GRAPH_START, which == 1 ? "t" : "q"), 0);
    }
    ck_assert_int_eq(rx_graph_compile(g, NULL), 0);
    return g;
}

/* Interrupt ids are hashes: "*" in the expectation matches any. */
static void blank_ids(json_t *v)
{
    const char *k;
    json_t *x;
    size_t i;

    if (json_is_object(v)) {
        if (json_is_string(json_object_get(v, "id")) && json_object_get(v, "node"))
            json_object_set_new(v, "id", json_string("*"));
        json_object_foreach(v, k, x) blank_ids(x);
    } else if (json_is_array(v)) {
        json_array_foreach(v, i, x) blank_ids(x);
    }
}

START_TEST(stream_modes)
{
    const struct stream_case *c = &cases[_i];
    struct rx_graph *g = build(c->graph);
    struct rx_checkpoint *cp = rx_checkpoint_memory_create();
    struct sink s = {json_array(), 0};
    struct rx_graph_config cfg = {.checkpointer = cp,
                                  .thread_id = "t",
                                  .stream_mode = c->modes,
                                  .on_stream = collect,
                                  .on_stream_ctx = &s};
    struct rx_graph_result res = {0};
    struct rx_error e = {{0}};
    json_t *in = json_object(), *want = json_loads(c->want, 0, NULL);
    char *got;

    ck_assert_ptr_nonnull(want);
    ck_assert_msg(rx_graph_invoke(g, in, &cfg, &res, &e) == 0, "%s", e.text);
    blank_ids(s.got);
    got = json_dumps(s.got, JSON_COMPACT);
    ck_assert_msg(json_equal(s.got, want), "case %d: got %s, want %s", _i, got, c->want);
    free(got);
    rx_graph_result_release(&res);
    json_decref(want);
    json_decref(s.got);
    json_decref(in);
    rx_checkpoint_destroy(cp);
    rx_graph_destroy(g);
}
END_TEST

/* A "stop" answer to a node's own chunk: its write says so, invoke is cancelled. */
START_TEST(stop_from_a_node_chunk)
{
    struct rx_graph *g = build(1);
    struct sink s = {json_array(), 1};
    struct rx_graph_config cfg = {
        .stream_mode = C | V, .on_stream = collect, .on_stream_ctx = &s};
    struct rx_graph_result res = {0};
    struct rx_error e = {{0}};
    json_t *in = json_object();

    s.stop_at = 2; /* the values of the input, then the first custom chunk */
    ck_assert_int_eq(rx_graph_invoke(g, in, &cfg, &res, &e), -ECANCELED);
    ck_assert_msg(strstr(e.text, "stopped by the stream callback"), "%s", e.text);
    ck_assert_uint_eq(json_array_size(s.got), 2); /* nothing after the stop */
    ck_assert_ptr_null(res.state);
    ck_assert_int_eq(rx_graph_task_write(NULL, json_true()), -EINVAL);
    ck_assert_int_eq(rx_graph_task_stream_message(NULL, NULL), -EINVAL);
    json_decref(s.got);
    json_decref(in);
    rx_graph_destroy(g);
}
END_TEST

Suite *graph_stream_suite(void);
Suite *graph_stream_suite(void)
{
    Suite *s = suite_create("graph_stream");
    TCase *tc = tcase_create("modes");

    tcase_add_loop_test(tc, stream_modes, 0, (int)(sizeof(cases) / sizeof(cases[0])));
    tcase_add_test(tc, stop_from_a_node_chunk);
    suite_add_tcase(s, tc);
    return s;
}
