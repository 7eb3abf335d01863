/*
 * check_checkpoint - rx_checkpoint's memory store, and rx_graph over it: a
 * checkpoint per step, continuing after a failure, interrupt and resume
 * (a parallel task that finished is not rerun), and forking from the past.
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "graph/rx_graph.h"

static const struct rx_reducer schema[] = {
    {"log", RX_REDUCER_APPEND, NULL, NULL},
};

struct counts {
    int runs[4];
    int fail_once;
};

/* Logs its name; ctx counts runs per node (index from the name's letter). */
static int log_node(struct rx_graph_task *task, json_t *input, void *ctx, json_t **update)
{
    struct counts *c = ctx;
    const char *name = rx_graph_task_node(task);

    (void)input;
    c->runs[name[0] - 'a']++;
    if (name[0] == 'b' && c->fail_once) {
        c->fail_once = 0;
        return -EIO;
    }
    *update = json_pack("{s:[s]}", "log", name);
    return 0;
}

/* Asks for approval; writes the answer when resumed. */
static int ask_node(struct rx_graph_task *task, json_t *input, void *ctx, json_t **update)
{
    struct counts *c = ctx;
    json_t *answer;
    int rc;

    (void)input;
    c->runs[3]++;
    rc = rx_graph_task_interrupt(task, json_string("approve?"), &answer);
    if (rc)
        return rc;
    *update = json_pack("{s:O,s:[s]}", "answer", answer, "log", "d");
    return 0;
}

static struct rx_graph *chain(struct counts *c, bool with_ask)
{
    struct rx_graph *g = rx_graph_create(schema, 1);

    ck_assert_int_eq(rx_graph_add_node(g, "a", log_node, c), 0);
    ck_assert_int_eq(rx_graph_add_node(g, "b", log_node, c), 0);
    ck_assert_int_eq(rx_graph_add_node(g, "c", log_node, c), 0);
    ck_assert_int_eq(rx_graph_add_edge(g, RX_GRAPH_START, "a"), 0);
    ck_assert_int_eq(rx_graph_add_edge(g, "a", "b"), 0);
    ck_assert_int_eq(rx_graph_add_edge(g, "b", "c"), 0);
    if (with_ask) {
        ck_assert_int_eq(rx_graph_add_node(g, "d", ask_node, c), 0);
        ck_assert_int_eq(rx_graph_add_edge(g, "a", "d"), 0);
    }
    ck_assert_int_eq(rx_graph_compile(g, NULL), 0);
    return g;
}

static const char *rx_json_str(json_t *o, const char *key)
{
    const char *v = json_string_value(json_object_get(o, key));

    return v ? v : "";
}

static void assert_json(json_t *got, const char *want)
{
    json_t *w = json_loads(want, 0, NULL);
    char *g = json_dumps(got, JSON_COMPACT);

    ck_assert_msg(json_equal(got, w), "got %s, want %s", g, want);
    free(g);
    json_decref(w);
}

START_TEST(memory_store)
{
    struct rx_checkpoint *s = rx_checkpoint_memory_create();
    char id1[RX_CHECKPOINT_ID_LEN], id2[RX_CHECKPOINT_ID_LEN];
    json_t *cp = json_pack("{s:i}", "step", 1), *out = NULL;

    ck_assert_int_eq(rx_checkpoint_get(s, "t", NULL, &out), -ENOENT);
    ck_assert_int_eq(rx_checkpoint_put(s, "t", cp, id1), 0);
    json_object_set_new(cp, "step", json_integer(2)); /* the store kept a copy */
    ck_assert_int_eq(rx_checkpoint_put(s, "t", cp, id2), 0);
    ck_assert_str_ne(id1, id2);
    ck_assert_int_eq(rx_checkpoint_get(s, "t", id1, &out), 0);
    ck_assert_int_eq(json_integer_value(json_object_get(out, "step")), 1);
    json_decref(out);
    ck_assert_int_eq(rx_checkpoint_get(s, "t", NULL, &out), 0);
    ck_assert_str_eq(json_string_value(json_object_get(out, "id")), id2);
    json_decref(out);
    ck_assert_int_eq(rx_checkpoint_get(s, "t", "nope", &out), -ENOENT);
    ck_assert_int_eq(rx_checkpoint_list(s, "t", &out), 0);
    ck_assert_uint_eq(json_array_size(out), 2);
    json_decref(out);
    ck_assert_int_eq(rx_checkpoint_list(s, "other", &out), -ENOENT);
    json_decref(cp);
    rx_checkpoint_destroy(s);
}
END_TEST

START_TEST(checkpoint_per_step_and_next_run)
{
    struct counts c = {{0}, 0};
    struct rx_graph *g = chain(&c, false);
    struct rx_checkpoint *s = rx_checkpoint_memory_create();
    struct rx_graph_config cfg = {.checkpointer = s, .thread_id = "t1"};
    struct rx_graph_result res = {0};
    json_t *in = json_pack("{s:[s]}", "log", "x"), *list = NULL;

    ck_assert_int_eq(rx_graph_invoke(g, in, &cfg, &res, NULL), 0);
    ck_assert_int_eq(rx_checkpoint_list(s, "t1", &list), 0);
    ck_assert_uint_eq(json_array_size(list), 4); /* input + three steps */
    assert_json(json_object_get(json_array_get(list, 1), "next"), "[{\"node\":\"b\"}]");
    assert_json(json_object_get(json_object_get(json_array_get(list, 1), "state"), "log"),
                "[\"x\",\"a\"]");
    ck_assert_str_eq(res.checkpoint_id,
                     json_string_value(json_object_get(json_array_get(list, 3), "id")));
    json_decref(list);
    rx_graph_result_release(&res);
    /* A second input on the same thread starts from the state it left. */
    ck_assert_int_eq(rx_graph_invoke(g, in, &cfg, &res, NULL), 0);
    assert_json(json_object_get(res.state, "log"),
                "[\"x\",\"a\",\"b\",\"c\",\"x\",\"a\",\"b\",\"c\"]");
    rx_graph_result_release(&res);
    json_decref(in);
    rx_checkpoint_destroy(s);
    rx_graph_destroy(g);
}
END_TEST

START_TEST(continue_after_failure)
{
    struct counts c = {{0}, 1};
    struct rx_graph *g = chain(&c, false);
    struct rx_checkpoint *s = rx_checkpoint_memory_create();
    struct rx_graph_config cfg = {.checkpointer = s, .thread_id = "t"};
    struct rx_graph_result res = {0};
    struct rx_error e = {{0}};
    json_t *in = json_object();

    ck_assert_int_eq(rx_graph_invoke(g, in, &cfg, &res, &e), -EIO);
    ck_assert_ptr_nonnull(strstr(e.text, "node 'b'"));
    /* No input: continue where it stopped; a does not run again. */
    ck_assert_int_eq(rx_graph_invoke(g, NULL, &cfg, &res, &e), 0);
    assert_json(json_object_get(res.state, "log"), "[\"a\",\"b\",\"c\"]");
    ck_assert_int_eq(c.runs[0], 1);
    ck_assert_int_eq(c.runs[1], 2);
    rx_graph_result_release(&res);
    /* Nothing left to do: the state comes back as it is. */
    ck_assert_int_eq(rx_graph_invoke(g, NULL, &cfg, &res, &e), 0);
    ck_assert_int_eq(res.steps, 0);
    rx_graph_result_release(&res);
    json_decref(in);
    rx_checkpoint_destroy(s);
    rx_graph_destroy(g);
}
END_TEST

START_TEST(interrupt_and_resume)
{
    struct counts c = {{0}, 0};
    struct rx_graph *g = chain(&c, true);
    struct rx_checkpoint *s = rx_checkpoint_memory_create();
    struct rx_graph_config cfg = {.checkpointer = s, .thread_id = "t"};
    struct rx_graph_result res = {0};
    struct rx_error e = {{0}};
    json_t *in = json_object(), *yes = json_string("yes");

    ck_assert_int_eq(rx_graph_invoke(g, in, &cfg, &res, &e), 0);
    ck_assert_uint_eq(json_array_size(res.interrupts), 1);
    ck_assert_str_eq(rx_json_str(json_array_get(res.interrupts, 0), "node"), "d");
    ck_assert_str_eq(rx_json_str(json_array_get(res.interrupts, 0), "value"), "approve?");
    ck_assert_uint_eq(strlen(rx_json_str(json_array_get(res.interrupts, 0), "id")), 16);
    /* LangGraph: the paused state holds the writes of b, which finished. */
    assert_json(json_object_get(res.state, "log"), "[\"a\",\"b\"]");
    ck_assert_int_eq(c.runs[1], 1); /* b ran beside d */
    rx_graph_result_release(&res);

    cfg.resume = yes;
    ck_assert_int_eq(rx_graph_invoke(g, NULL, &cfg, &res, &e), 0);
    ck_assert_ptr_null(res.interrupts);
    ck_assert_str_eq(json_string_value(json_object_get(res.state, "answer")), "yes");
    assert_json(json_object_get(res.state, "log"), "[\"a\",\"b\",\"d\",\"c\"]");
    ck_assert_int_eq(c.runs[1], 1); /* b finished before the interrupt: not rerun */
    ck_assert_int_eq(c.runs[3], 2); /* d ran again and got the answer */
    rx_graph_result_release(&res);
    /* Nothing to resume any more. */
    ck_assert_int_eq(rx_graph_invoke(g, NULL, &cfg, &res, &e), -EINVAL);
    json_decref(yes);
    json_decref(in);
    rx_checkpoint_destroy(s);
    rx_graph_destroy(g);
}
END_TEST

START_TEST(fork_from_past_checkpoint)
{
    struct counts c = {{0}, 0};
    struct rx_graph *g = chain(&c, false);
    struct rx_checkpoint *s = rx_checkpoint_memory_create();
    struct rx_graph_config cfg = {.checkpointer = s, .thread_id = "t"};
    struct rx_graph_result res = {0};
    struct rx_error e = {{0}};
    json_t *in = json_object(), *list = NULL;
    char past[RX_CHECKPOINT_ID_LEN];

    ck_assert_int_eq(rx_graph_invoke(g, in, &cfg, &res, &e), 0);
    rx_graph_result_release(&res);
    ck_assert_int_eq(rx_checkpoint_list(s, "t", &list), 0);
    /* The checkpoint after a ran, with b next. */
    snprintf(past, sizeof(past), "%s",
             json_string_value(json_object_get(json_array_get(list, 1), "id")));
    json_decref(list);
    cfg.checkpoint_id = past;
    ck_assert_int_eq(rx_graph_invoke(g, NULL, &cfg, &res, &e), 0);
    assert_json(json_object_get(res.state, "log"), "[\"a\",\"b\",\"c\"]");
    ck_assert_int_eq(res.steps, 2);
    ck_assert_int_eq(c.runs[0], 1);
    ck_assert_int_eq(c.runs[1], 2);
    rx_graph_result_release(&res);
    /* The fork's checkpoints name the past one as parent. */
    ck_assert_int_eq(rx_checkpoint_list(s, "t", &list), 0);
    ck_assert_str_eq(
        json_string_value(json_object_get(json_array_get(list, 4), "parent")), past);
    json_decref(list);
    cfg.checkpoint_id = "999";
    ck_assert_int_eq(rx_graph_invoke(g, NULL, &cfg, &res, &e), -ENOENT);
    json_decref(in);
    rx_checkpoint_destroy(s);
    rx_graph_destroy(g);
}
END_TEST

Suite *checkpoint_suite(void);
Suite *checkpoint_suite(void)
{
    Suite *s = suite_create("checkpoint");
    TCase *tc = tcase_create("core");

    tcase_add_test(tc, memory_store);
    tcase_add_test(tc, checkpoint_per_step_and_next_run);
    tcase_add_test(tc, continue_after_failure);
    tcase_add_test(tc, interrupt_and_resume);
    tcase_add_test(tc, fork_from_past_checkpoint);
    suite_add_tcase(s, tc);
    return s;
}
