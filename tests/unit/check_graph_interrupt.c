/*
 * check_graph_interrupt - interrupts and the state API with LangGraph's
 * behaviour as the expectation (SPEC 8): several interrupt() calls in one
 * node, parallel interrupts answered by id, the paused state with the
 * finished tasks' writes, interrupt_before / interrupt_after, get_state,
 * get_state_history, update_state(as_node), forks, and the errors of bad
 * calls (NULLs, unknown nodes and ids, no pending interrupt, corrupt
 * checkpoints).
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

static int runs[8]; /* per node, by the name's first letter from 'a' */

static const char *str(json_t *o, const char *key)
{
    const char *v = json_string_value(json_object_get(o, key));

    return v ? v : "";
}

static void assert_json(json_t *got, const char *want)
{
    json_t *w = json_loads(want, JSON_DECODE_ANY, NULL);
    char *g = json_dumps(got, JSON_COMPACT | JSON_ENCODE_ANY);

    /* "null" also stands for a key that is not there. */
    ck_assert_msg(w && (json_equal(got, w) || (!got && json_is_null(w))),
                  "got %s, want %s", g, want);
    free(g);
    json_decref(w);
}

static int log_node(struct rx_graph_task *task, json_t *input, void *ctx, json_t **update)
{
    const char *name = rx_graph_task_node(task);

    (void)input;
    (void)ctx;
    runs[name[0] - 'a']++;
    *update = json_pack("{s:[s]}", "log", name);
    return *update ? 0 : -ENOMEM;
}

/* Asks twice; logs "name:first/second" with both answers. */
static int ask_twice(struct rx_graph_task *task, json_t *input, void *ctx,
                     json_t **update)
{
    const char *name = rx_graph_task_node(task);
    json_t *a1, *a2;
    int rc;

    (void)input;
    (void)ctx;
    runs[name[0] - 'a']++;
    rc = rx_graph_task_interrupt(task, json_pack("{s:s,s:i}", "ask", name, "n", 1), &a1);
    if (rc)
        return rc;
    rc = rx_graph_task_interrupt(task, json_pack("{s:s,s:i}", "ask", name, "n", 2), &a2);
    if (rc)
        return rc;
    *update = json_pack("{s:[s++++]}", "log", name, ":", json_string_value(a1), "/",
                        json_string_value(a2));
    return *update ? 0 : -ENOMEM;
}

/* Asks once; logs "name=answer". */
static int ask_once(struct rx_graph_task *task, json_t *input, void *ctx, json_t **update)
{
    const char *name = rx_graph_task_node(task);
    json_t *a;
    int rc;

    (void)input;
    (void)ctx;
    runs[name[0] - 'a']++;
    rc = rx_graph_task_interrupt(task, json_string(name), &a);
    if (rc)
        return rc;
    *update = json_pack("{s:[s++]}", "log", name, "=", json_string_value(a));
    return *update ? 0 : -ENOMEM;
}

/* START -> each of names[] (fn for each), then END. */
static struct rx_graph *fan(const char *const *names, const rx_graph_node_fn *fns)
{
    struct rx_graph *g = rx_graph_create(schema, 1);
    size_t i;

    for (i = 0; names[i]; i++) {
        ck_assert_int_eq(rx_graph_add_node(g, names[i], fns[i], NULL), 0);
        ck_assert_int_eq(rx_graph_add_edge(g, RX_GRAPH_START, names[i]), 0);
    }
    ck_assert_int_eq(rx_graph_compile(g, NULL), 0);
    return g;
}

/* START -> a -> b -> c -> END. */
static struct rx_graph *chain(void)
{
    struct rx_graph *g = rx_graph_create(schema, 1);

    ck_assert_int_eq(rx_graph_add_node(g, "a", log_node, NULL), 0);
    ck_assert_int_eq(rx_graph_add_node(g, "b", log_node, NULL), 0);
    ck_assert_int_eq(rx_graph_add_node(g, "c", log_node, NULL), 0);
    ck_assert_int_eq(rx_graph_add_edge(g, RX_GRAPH_START, "a"), 0);
    ck_assert_int_eq(rx_graph_add_edge(g, "a", "b"), 0);
    ck_assert_int_eq(rx_graph_add_edge(g, "b", "c"), 0);
    ck_assert_int_eq(rx_graph_compile(g, NULL), 0);
    return g;
}

struct fixture {
    struct rx_checkpoint *cp;
    struct rx_graph_config cfg;
    struct rx_graph_result res;
    struct rx_error err;
    json_t *in;
};

static struct fixture f;

static void setup(void)
{
    memset(&f, 0, sizeof(f));
    memset(runs, 0, sizeof(runs));
    f.cp = rx_checkpoint_memory_create();
    f.cfg.checkpointer = f.cp;
    f.cfg.thread_id = "t";
    f.in = json_object();
}

static void teardown(void)
{
    rx_graph_result_release(&f.res);
    json_decref(f.in);
    rx_checkpoint_destroy(f.cp);
}

/* LangGraph: each interrupt() pauses in turn; earlier ones replay their answers. */
START_TEST(two_interrupts_in_one_node)
{
    const char *names[] = {"a", NULL};
    const rx_graph_node_fn fns[] = {ask_twice};
    struct rx_graph *g = fan(names, fns);
    json_t *x = json_string("x"), *y = json_string("y");

    ck_assert_int_eq(rx_graph_invoke(g, f.in, &f.cfg, &f.res, &f.err), 0);
    assert_json(json_object_get(json_array_get(f.res.interrupts, 0), "value"),
                "{\"ask\":\"a\",\"n\":1}");
    rx_graph_result_release(&f.res);
    f.cfg.resume = x;
    ck_assert_int_eq(rx_graph_invoke(g, NULL, &f.cfg, &f.res, &f.err), 0);
    /* The second call pauses now, instead of returning the first answer. */
    ck_assert_uint_eq(json_array_size(f.res.interrupts), 1);
    assert_json(json_object_get(json_array_get(f.res.interrupts, 0), "value"),
                "{\"ask\":\"a\",\"n\":2}");
    rx_graph_result_release(&f.res);
    f.cfg.resume = y;
    ck_assert_int_eq(rx_graph_invoke(g, NULL, &f.cfg, &f.res, &f.err), 0);
    ck_assert_ptr_null(f.res.interrupts);
    assert_json(json_object_get(f.res.state, "log"), "[\"a:x/y\"]");
    ck_assert_int_eq(runs[0], 3);
    rx_graph_result_release(&f.res);
    /* Nothing is pending any more. */
    ck_assert_int_eq(rx_graph_invoke(g, NULL, &f.cfg, &f.res, &f.err), -EINVAL);
    ck_assert_msg(strstr(f.err.text, "no interrupt to resume"), "%s", f.err.text);
    json_decref(x);
    json_decref(y);
    rx_graph_destroy(g);
}
END_TEST

/* Parallel interrupts: answered by id; the finished sibling is not rerun. */
START_TEST(parallel_interrupts_by_id)
{
    const char *names[] = {"a", "b", "c", NULL};
    const rx_graph_node_fn fns[] = {ask_once, ask_once, log_node};
    struct rx_graph *g = fan(names, fns);
    json_t *map, *one = json_string("1"), *snap = NULL;
    char ida[32], idb[32];

    ck_assert_int_eq(rx_graph_invoke(g, f.in, &f.cfg, &f.res, &f.err), 0);
    ck_assert_uint_eq(json_array_size(f.res.interrupts), 2);
    snprintf(ida, sizeof(ida), "%s", str(json_array_get(f.res.interrupts, 0), "id"));
    snprintf(idb, sizeof(idb), "%s", str(json_array_get(f.res.interrupts, 1), "id"));
    ck_assert_str_eq(str(json_array_get(f.res.interrupts, 0), "node"), "a");
    ck_assert_str_ne(ida, idb);
    /* The paused state holds the write of c, which finished. */
    assert_json(json_object_get(f.res.state, "log"), "[\"c\"]");
    rx_graph_result_release(&f.res);

    /* get_state shows the same: next, tasks with their interrupts, ids. */
    ck_assert_int_eq(rx_graph_get_state(g, &f.cfg, &snap, &f.err), 0);
    assert_json(json_object_get(snap, "next"), "[\"a\",\"b\",\"c\"]");
    assert_json(json_object_get(json_object_get(snap, "values"), "log"), "[\"c\"]");
    ck_assert_uint_eq(json_array_size(json_object_get(snap, "interrupts")), 2);
    ck_assert_str_eq(
        str(json_array_get(
                json_object_get(json_array_get(json_object_get(snap, "tasks"), 1),
                                "interrupts"),
                0),
            "id"),
        idb);
    ck_assert(json_is_true(
        json_object_get(json_array_get(json_object_get(snap, "tasks"), 2), "done")));
    json_decref(snap);

    /* One answer for two pauses is ambiguous; an unknown id is an error. */
    f.cfg.resume = one;
    ck_assert_int_eq(rx_graph_invoke(g, NULL, &f.cfg, &f.res, &f.err), -EINVAL);
    ck_assert_msg(strstr(f.err.text, "2 interrupts are pending"), "%s", f.err.text);
    f.cfg.resume = NULL;
    map = json_pack("{s:s}", "nope", "1");
    f.cfg.resume_map = map;
    ck_assert_int_eq(rx_graph_invoke(g, NULL, &f.cfg, &f.res, &f.err), -EINVAL);
    ck_assert_msg(strstr(f.err.text, "no pending interrupt 'nope'"), "%s", f.err.text);
    json_decref(map);

    /* Answer a only: b pauses again, with the same id. */
    map = json_pack("{s:s}", ida, "yes");
    f.cfg.resume_map = map;
    ck_assert_int_eq(rx_graph_invoke(g, NULL, &f.cfg, &f.res, &f.err), 0);
    ck_assert_uint_eq(json_array_size(f.res.interrupts), 1);
    ck_assert_str_eq(str(json_array_get(f.res.interrupts, 0), "id"), idb);
    assert_json(json_object_get(f.res.state, "log"), "[\"a=yes\",\"c\"]");
    rx_graph_result_release(&f.res);
    json_decref(map);
    map = json_pack("{s:s}", idb, "no");
    f.cfg.resume_map = map;
    ck_assert_int_eq(rx_graph_invoke(g, NULL, &f.cfg, &f.res, &f.err), 0);
    ck_assert_ptr_null(f.res.interrupts);
    /* LangGraph's merge order: a, b, c by name. */
    assert_json(json_object_get(f.res.state, "log"), "[\"a=yes\",\"b=no\",\"c\"]");
    ck_assert_int_eq(runs[2], 1); /* c ran once */
    ck_assert_int_eq(runs[0], 2);
    ck_assert_int_eq(runs[1], 3);
    json_decref(map);
    json_decref(one);
    rx_graph_destroy(g);
}
END_TEST

/* ---- static breakpoints ---- */

struct bp_case {
    const char *before[2], *after[2];
    const char *pauses[3]; /* the log at each pause */
    const char *next[3];   /* get_state's next at each pause */
};

static const struct bp_case bp_cases[] = {
    {{"b"}, {NULL}, {"[\"a\"]"}, {"[\"b\"]"}},
    {{NULL}, {"b"}, {"[\"a\",\"b\"]"}, {"[\"c\"]"}},
    {{"a", "c"}, {NULL}, {"null", "[\"a\",\"b\"]"}, {"[\"a\"]", "[\"c\"]"}},
    {{NULL},
     {"*"},
     {"[\"a\"]", "[\"a\",\"b\"]", "[\"a\",\"b\",\"c\"]"},
     {"[\"b\"]", "[\"c\"]", "[]"}},
    {{"b"}, {"a"}, {"[\"a\"]"}, {"[\"b\"]"}}, /* after a; continuing passes b */
};

START_TEST(static_breakpoints)
{
    const struct bp_case *c = &bp_cases[_i];
    const char *before[3] = {c->before[0], c->before[1], NULL};
    const char *after[3] = {c->after[0], c->after[1], NULL};
    struct rx_graph *g = chain();
    json_t *snap;
    size_t k;

    f.cfg.interrupt_before = before;
    f.cfg.interrupt_after = after;
    ck_assert_int_eq(rx_graph_invoke(g, f.in, &f.cfg, &f.res, &f.err), 0);
    for (k = 0; k < 3 && c->pauses[k]; k++) {
        ck_assert_msg(f.res.interrupts != NULL, "case %d: no pause %zu", _i, k);
        ck_assert_uint_eq(json_array_size(f.res.interrupts), 0);
        assert_json(json_object_get(f.res.state, "log"), c->pauses[k]);
        ck_assert_int_eq(rx_graph_get_state(g, &f.cfg, &snap, &f.err), 0);
        assert_json(json_object_get(snap, "next"), c->next[k]);
        json_decref(snap);
        rx_graph_result_release(&f.res);
        ck_assert_int_eq(rx_graph_invoke(g, NULL, &f.cfg, &f.res, &f.err), 0);
    }
    ck_assert_ptr_null(f.res.interrupts);
    assert_json(json_object_get(f.res.state, "log"), "[\"a\",\"b\",\"c\"]");
    ck_assert_int_eq(runs[0] + runs[1] + runs[2], 3); /* nothing ran twice */
    rx_graph_destroy(g);
}
END_TEST

/* ---- get_state_history, update_state, forks ---- */

START_TEST(history_newest_first)
{
    struct rx_graph *g = chain();
    json_t *hist = NULL, *h;
    size_t i;

    ck_assert_int_eq(rx_graph_get_state_history(g, &f.cfg, &hist, &f.err), 0);
    ck_assert_uint_eq(json_array_size(hist), 0);
    json_decref(hist);
    ck_assert_int_eq(rx_graph_invoke(g, f.in, &f.cfg, &f.res, &f.err), 0);
    ck_assert_int_eq(rx_graph_get_state_history(g, &f.cfg, &hist, &f.err), 0);
    ck_assert_uint_eq(json_array_size(hist), 4); /* input and three steps */
    json_array_foreach(hist, i, h)
    {
        json_t *older = json_array_get(hist, i + 1);

        ck_assert_int_eq(
            json_integer_value(json_object_get(json_object_get(h, "metadata"), "step")),
            3 - (int)i);
        if (older)
            ck_assert_str_eq(str(h, "parent_checkpoint_id"), str(older, "checkpoint_id"));
        else
            ck_assert(json_is_null(json_object_get(h, "parent_checkpoint_id")));
    }
    ck_assert_str_eq(str(json_array_get(hist, 0), "checkpoint_id"), f.res.checkpoint_id);
    assert_json(json_object_get(json_array_get(hist, 0), "next"), "[]");
    assert_json(json_object_get(json_array_get(hist, 3), "next"), "[\"a\"]");
    ck_assert_str_eq(str(json_object_get(json_array_get(hist, 3), "metadata"), "source"),
                     "input");
    json_decref(hist);
    rx_graph_destroy(g);
}
END_TEST

struct update_case {
    const char *as_node; /* NULL: inferred */
    const char *values;
    int rc;
    const char *next;  /* get_state's next after the update */
    const char *final; /* the log after continuing */
};

static const struct update_case update_cases[] = {
    /* Paused before c: write as b, c still follows. */
    {"b", "{\"log\":[\"edit\"]}", 0, "[\"c\"]", "[\"a\",\"b\",\"edit\",\"c\"]"},
    /* As a: b follows again. */
    {"a", "{\"log\":[\"edit\"]}", 0, "[\"b\"]", "[\"a\",\"b\",\"edit\",\"b\",\"c\"]"},
    /* Inferred: the last step ran only b. */
    {NULL, "{\"log\":[\"edit\"]}", 0, "[\"c\"]", "[\"a\",\"b\",\"edit\",\"c\"]"},
    {RX_GRAPH_END, "{\"log\":[\"edit\"]}", 0, "[]", "[\"a\",\"b\",\"edit\"]"},
    {"c", NULL, 0, "[]", "[\"a\",\"b\"]"},
    {"ghost", "{}", -EINVAL, NULL, NULL},
    {"b", "[1]", -EINVAL, NULL, NULL},
    {"b", "{\"log\":3}", -EINVAL, NULL, NULL},
};

START_TEST(update_state_as_node)
{
    const struct update_case *c = &update_cases[_i];
    const char *before[] = {"c", NULL};
    struct rx_graph *g = chain();
    json_t *values = c->values ? json_loads(c->values, 0, NULL) : NULL, *snap, *hist;
    char id[RX_CHECKPOINT_ID_LEN] = "";
    size_t nhist;

    f.cfg.interrupt_before = before;
    ck_assert_int_eq(rx_graph_invoke(g, f.in, &f.cfg, &f.res, &f.err), 0);
    rx_graph_result_release(&f.res);
    ck_assert_int_eq(rx_graph_get_state_history(g, &f.cfg, &hist, &f.err), 0);
    nhist = json_array_size(hist);
    json_decref(hist);
    ck_assert_int_eq(rx_graph_update_state(g, &f.cfg, values, c->as_node, id, &f.err),
                     c->rc);
    ck_assert(!c->rc || f.err.text[0]);
    ck_assert_int_eq(rx_graph_get_state_history(g, &f.cfg, &hist, &f.err), 0);
    if (c->rc) {
        ck_assert_uint_eq(json_array_size(hist), nhist); /* nothing stored */
    } else {
        ck_assert_uint_eq(json_array_size(hist), nhist + 1);
        ck_assert_int_eq(rx_graph_get_state(g, &f.cfg, &snap, &f.err), 0);
        ck_assert_str_eq(str(snap, "checkpoint_id"), id);
        ck_assert_str_eq(str(json_object_get(snap, "metadata"), "source"), "update");
        assert_json(json_object_get(snap, "next"), c->next);
        json_decref(snap);
        f.cfg.interrupt_before = NULL;
        ck_assert_int_eq(rx_graph_invoke(g, NULL, &f.cfg, &f.res, &f.err), 0);
        assert_json(json_object_get(f.res.state, "log"), c->final);
    }
    json_decref(hist);
    json_decref(values);
    rx_graph_destroy(g);
}
END_TEST

START_TEST(update_state_ambiguous_and_new_thread)
{
    const char *names[] = {"a", "b", NULL};
    const rx_graph_node_fn fns[] = {log_node, log_node};
    struct rx_graph *g = fan(names, fns);
    json_t *v = json_pack("{s:[s]}", "log", "x"), *snap;

    /* A new thread: the update is the input, START's edges follow. */
    ck_assert_int_eq(rx_graph_update_state(g, &f.cfg, v, NULL, NULL, &f.err), 0);
    ck_assert_int_eq(rx_graph_get_state(g, &f.cfg, &snap, &f.err), 0);
    assert_json(json_object_get(snap, "next"), "[\"a\",\"b\"]");
    json_decref(snap);
    ck_assert_int_eq(rx_graph_invoke(g, NULL, &f.cfg, &f.res, &f.err), 0);
    assert_json(json_object_get(f.res.state, "log"), "[\"x\",\"a\",\"b\"]");
    /* The last step ran a and b: which one wrote this? */
    ck_assert_int_eq(rx_graph_update_state(g, &f.cfg, v, NULL, NULL, &f.err), -EINVAL);
    ck_assert_msg(strstr(f.err.text, "ambiguous"), "%s", f.err.text);
    json_decref(v);
    rx_graph_destroy(g);
}
END_TEST

START_TEST(fork_from_any_checkpoint)
{
    struct rx_graph *g = chain();
    json_t *hist = NULL, *v = json_pack("{s:[s]}", "log", "fork"), *snap;
    char after_a[RX_CHECKPOINT_ID_LEN], fork[RX_CHECKPOINT_ID_LEN],
        last[RX_CHECKPOINT_ID_LEN];

    ck_assert_int_eq(rx_graph_invoke(g, f.in, &f.cfg, &f.res, &f.err), 0);
    memcpy(last, f.res.checkpoint_id, sizeof(last));
    rx_graph_result_release(&f.res);
    ck_assert_int_eq(rx_graph_get_state_history(g, &f.cfg, &hist, &f.err), 0);
    snprintf(after_a, sizeof(after_a), "%s",
             str(json_array_get(hist, 2), "checkpoint_id"));
    json_decref(hist);
    /* Update the past as a: the fork's parent is that checkpoint. */
    f.cfg.checkpoint_id = after_a;
    ck_assert_int_eq(rx_graph_update_state(g, &f.cfg, v, "a", fork, &f.err), 0);
    f.cfg.checkpoint_id = fork;
    ck_assert_int_eq(rx_graph_get_state(g, &f.cfg, &snap, &f.err), 0);
    ck_assert_str_eq(str(snap, "parent_checkpoint_id"), after_a);
    json_decref(snap);
    ck_assert_int_eq(rx_graph_invoke(g, NULL, &f.cfg, &f.res, &f.err), 0);
    assert_json(json_object_get(f.res.state, "log"), "[\"a\",\"fork\",\"b\",\"c\"]");
    rx_graph_result_release(&f.res);
    /* Replaying from the past without a change runs the rest again. */
    f.cfg.checkpoint_id = after_a;
    ck_assert_int_eq(rx_graph_invoke(g, NULL, &f.cfg, &f.res, &f.err), 0);
    assert_json(json_object_get(f.res.state, "log"), "[\"a\",\"b\",\"c\"]");
    /* The original end is still there, unchanged. */
    f.cfg.checkpoint_id = last;
    ck_assert_int_eq(rx_graph_get_state(g, &f.cfg, &snap, &f.err), 0);
    assert_json(json_object_get(json_object_get(snap, "values"), "log"),
                "[\"a\",\"b\",\"c\"]");
    json_decref(snap);
    json_decref(v);
    rx_graph_destroy(g);
}
END_TEST

/* ---- bad calls: a clear error, no crash ---- */

START_TEST(bad_calls)
{
    struct rx_graph *g = chain();
    struct rx_graph_config nocp = {0};
    json_t *snap = NULL, *yes = json_true(), *bogus;
    char id[RX_CHECKPOINT_ID_LEN];

    ck_assert_int_eq(rx_graph_get_state(NULL, &f.cfg, &snap, &f.err), -EINVAL);
    ck_assert_int_eq(rx_graph_get_state(g, NULL, &snap, &f.err), -EINVAL);
    ck_assert_int_eq(rx_graph_get_state(g, &nocp, &snap, &f.err), -EINVAL);
    ck_assert_msg(strstr(f.err.text, "checkpointer"), "%s", f.err.text);
    ck_assert_int_eq(rx_graph_get_state(g, &f.cfg, NULL, &f.err), -EINVAL);
    ck_assert_int_eq(rx_graph_get_state_history(g, NULL, &snap, &f.err), -EINVAL);
    ck_assert_int_eq(rx_graph_update_state(NULL, &f.cfg, NULL, "a", id, &f.err), -EINVAL);
    ck_assert_int_eq(rx_graph_invoke(NULL, f.in, &f.cfg, &f.res, &f.err), -EINVAL);
    ck_assert_int_eq(rx_graph_invoke(g, f.in, &f.cfg, NULL, &f.err), -EINVAL);
    /* A new thread: empty state; resume with nothing pending. */
    ck_assert_int_eq(rx_graph_get_state(g, &f.cfg, &snap, &f.err), 0);
    assert_json(json_object_get(snap, "values"), "{}");
    ck_assert(json_is_null(json_object_get(snap, "checkpoint_id")));
    json_decref(snap);
    f.cfg.resume = yes;
    ck_assert_int_eq(rx_graph_invoke(g, NULL, &f.cfg, &f.res, &f.err), -EINVAL);
    ck_assert_msg(strstr(f.err.text, "no interrupt to resume"), "%s", f.err.text);
    f.cfg.resume = NULL;
    /* A checkpoint id that does not exist. */
    f.cfg.checkpoint_id = "999";
    ck_assert_int_eq(rx_graph_invoke(g, NULL, &f.cfg, &f.res, &f.err), -ENOENT);
    ck_assert_msg(strstr(f.err.text, "no checkpoint '999'"), "%s", f.err.text);
    ck_assert_int_eq(rx_graph_get_state(g, &f.cfg, &snap, &f.err), -ENOENT);
    ck_assert_int_eq(rx_graph_update_state(g, &f.cfg, NULL, "a", id, &f.err), -ENOENT);
    f.cfg.checkpoint_id = NULL;
    /* Corrupt rows: the wrong shape, a node this graph lacks. */
    bogus = json_pack("{s:i,s:{},s:[{s:s}],s:[]}", "step", 1, "state", "next", "node",
                      "ghost", "joins");
    ck_assert_int_eq(rx_checkpoint_put(f.cp, "t", bogus, id), 0);
    ck_assert_int_eq(rx_graph_invoke(g, NULL, &f.cfg, &f.res, &f.err), -EINVAL);
    ck_assert_msg(strstr(f.err.text, "corrupt"), "%s", f.err.text);
    ck_assert_int_eq(rx_graph_get_state(g, &f.cfg, &snap, &f.err), -EINVAL);
    ck_assert_int_eq(rx_graph_get_state_history(g, &f.cfg, &snap, &f.err), -EINVAL);
    json_decref(bogus);
    bogus = json_pack("{s:s}", "state", "not an object");
    ck_assert_int_eq(rx_checkpoint_put(f.cp, "t", bogus, id), 0);
    ck_assert_int_eq(rx_graph_invoke(g, NULL, &f.cfg, &f.res, &f.err), -EINVAL);
    ck_assert_int_eq(rx_graph_update_state(g, &f.cfg, NULL, "a", id, &f.err), -EINVAL);
    json_decref(bogus);
    /* interrupt() with NULLs. */
    ck_assert_int_eq(rx_graph_task_interrupt(NULL, json_true(), &snap), -EINVAL);
    json_decref(yes);
    rx_graph_destroy(g);
}
END_TEST

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

Suite *graph_interrupt_suite(void);
Suite *graph_interrupt_suite(void)
{
    Suite *s = suite_create("graph_interrupt");
    TCase *tc = tcase_create("langgraph");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, two_interrupts_in_one_node);
    tcase_add_test(tc, parallel_interrupts_by_id);
    tcase_add_loop_test(tc, static_breakpoints, 0, N(bp_cases));
    tcase_add_test(tc, history_newest_first);
    tcase_add_loop_test(tc, update_state_as_node, 0, N(update_cases));
    tcase_add_test(tc, update_state_ambiguous_and_new_thread);
    tcase_add_test(tc, fork_from_any_checkpoint);
    tcase_add_test(tc, bad_calls);
    tcase_set_timeout(tc, 30);
    suite_add_tcase(s, tc);
    return s;
}
