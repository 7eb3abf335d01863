/*
 * check_graph_retry - per-node retry policies (LangGraph's RetryPolicy):
 * attempts, backoff and which errors retry, as a table of a flaky node's
 * failures against the policy, with the runs and the result LangGraph
 * would give.
 */
#include <check.h>
#include <errno.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "graph/rx_graph.h"

struct flaky {
    int fails; /* fail this many times first */
    int rc;    /* with this error */
    int runs;
};

static int flaky_node(struct rx_graph_task *task, json_t *input, void *ctx,
                      json_t **update)
{
    struct flaky *f = ctx;

    (void)input;
    /* What a failed attempt wrote must not reach the state. */
    *update = json_pack("{s:i}", "attempt", ++f->runs);
    if (f->runs <= f->fails) {
        rx_graph_task_set_error(task, "flaky");
        return f->rc;
    }
    return 0;
}

static bool only_eio(int rc, void *ctx)
{
    (void)ctx;
    return rc == -EIO;
}

struct retry_case {
    int max_attempts; /* -1: no policy */
    int fails, rc;
    bool only_eio;
    int want_rc, want_runs;
};

static const struct retry_case cases[] = {
    {-1, 1, -EIO, false, -EIO, 1},      /* no policy: one run */
    {3, 2, -EIO, false, 0, 3},          /* the third attempt succeeds */
    {2, 2, -EIO, false, -EIO, 2},       /* out of attempts */
    {0, 2, -EIO, false, 0, 3},          /* 0: LangGraph's default of 3 */
    {5, 1, -EINVAL, false, -EINVAL, 1}, /* a value error is not retried */
    {5, 1, -ECANCELED, false, -ECANCELED, 1},
    {5, 2, -ETIMEDOUT, false, 0, 3},         /* other errors are */
    {5, 2, -ETIMEDOUT, true, -ETIMEDOUT, 1}, /* unless retry_on says no */
    {5, 2, -EIO, true, 0, 3},
};

START_TEST(retry_policy)
{
    const struct retry_case *c = &cases[_i];
    struct flaky f = {c->fails, c->rc, 0};
    struct rx_graph_retry p = {.max_attempts = c->max_attempts,
                               .initial_interval = 0.001,
                               .retry_on = c->only_eio ? only_eio : NULL};
    struct rx_graph *g = rx_graph_create(NULL, 0);
    struct rx_graph_result res = {0};
    struct rx_error e = {{0}};
    json_t *in = json_object();

    ck_assert_int_eq(rx_graph_add_node(g, "f", flaky_node, &f), 0);
    ck_assert_int_eq(rx_graph_add_edge(g, RX_GRAPH_START, "f"), 0);
    if (c->max_attempts >= 0)
        ck_assert_int_eq(rx_graph_set_retry(g, "f", &p), 0);
    ck_assert_int_eq(rx_graph_compile(g, NULL), 0);
    ck_assert_int_eq(rx_graph_invoke(g, in, NULL, &res, &e), c->want_rc);
    ck_assert_int_eq(f.runs, c->want_runs);
    if (!c->want_rc)
        ck_assert_int_eq(json_integer_value(json_object_get(res.state, "attempt")),
                         c->want_runs);
    else
        ck_assert_msg(strstr(e.text, "node 'f' failed: flaky"), "%s", e.text);
    rx_graph_result_release(&res);
    json_decref(in);
    rx_graph_destroy(g);
}
END_TEST

/* The waits grow by the factor: 10 ms then 20 ms before the third attempt. */
START_TEST(retry_backoff)
{
    struct flaky f = {2, -EIO, 0};
    struct rx_graph_retry p = {
        .max_attempts = 3, .initial_interval = 0.01, .backoff_factor = 2};
    struct rx_graph *g = rx_graph_create(NULL, 0);
    struct rx_graph_result res = {0};
    struct timespec t0, t1;
    json_t *in = json_object();
    double ms;

    ck_assert_int_eq(rx_graph_add_node(g, "f", flaky_node, &f), 0);
    ck_assert_int_eq(rx_graph_add_edge(g, RX_GRAPH_START, "f"), 0);
    ck_assert_int_eq(rx_graph_set_retry(g, "f", &p), 0);
    ck_assert_int_eq(rx_graph_compile(g, NULL), 0);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ck_assert_int_eq(rx_graph_invoke(g, in, NULL, &res, NULL), 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    ck_assert_msg(ms >= 29.0, "waited %.1f ms, want >= 30", ms);
    rx_graph_result_release(&res);
    json_decref(in);
    rx_graph_destroy(g);
}
END_TEST

START_TEST(retry_bad_calls)
{
    struct rx_graph_retry bad = {.max_attempts = -1};
    struct rx_graph *g = rx_graph_create(NULL, 0);

    ck_assert_int_eq(rx_graph_set_retry(NULL, "f", NULL), -EINVAL);
    ck_assert_int_eq(rx_graph_set_retry(g, NULL, NULL), -EINVAL);
    ck_assert_int_eq(rx_graph_set_retry(g, "ghost", NULL), -ENOENT);
    ck_assert_int_eq(rx_graph_add_node(g, "f", flaky_node, NULL), 0);
    ck_assert_int_eq(rx_graph_set_retry(g, "f", &bad), -EINVAL);
    ck_assert_int_eq(rx_graph_set_retry(g, "f", NULL), 0);
    ck_assert_int_eq(rx_graph_add_edge(g, RX_GRAPH_START, "f"), 0);
    ck_assert_int_eq(rx_graph_compile(g, NULL), 0);
    ck_assert_int_eq(rx_graph_set_retry(g, "f", NULL), -EBUSY);
    rx_graph_destroy(g);
}
END_TEST

Suite *graph_retry_suite(void);
Suite *graph_retry_suite(void)
{
    Suite *s = suite_create("graph_retry");
    TCase *tc = tcase_create("policy");

    tcase_add_loop_test(tc, retry_policy, 0, (int)(sizeof(cases) / sizeof(cases[0])));
    tcase_add_test(tc, retry_backoff);
    tcase_add_test(tc, retry_bad_calls);
    suite_add_tcase(s, tc);
    return s;
}
