/*
 * check_metrics - the effect gauges of GET /metrics against the real binary:
 * running, waiting and draining are told apart, and each goes back to zero
 * when its effects end. A command tool that sleeps holds a worker; one place
 * per session (limits.session_running_effects 1) makes the others wait.
 * No timings are asserted: waits only bound hangs.
 */
#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "tests/integration/itest.h"

#define WAIT_MS 20000

static struct itest_server srv;

static const char *const nap_config =
    "{\"api\":{\"allow_agent_inputs\":true},"
    " \"limits\":{\"session_running_effects\":1},"
    " \"tools\":[{\"name\":\"nap\",\"description\":\"sleeps a while\","
    "  \"parameters\":{\"type\":\"object\"},\"command\":[\"/bin/sleep\",\"3\"],"
    "  \"timeout_ms\":30000}]}";

static void start_nap(void)
{
    ck_assert_msg(itest_server_start(&srv, nap_config, NULL) == 0,
                  "server did not start");
}

static void stop(void)
{
    itest_server_stop(&srv);
}

/* Wait until the three gauges read running/waiting/draining; false after WAIT_MS. */
static bool gauges_become(long running, long waiting, long draining)
{
    long end = itest_now_ms() + WAIT_MS;
    long r, w, d;

    do {
        r = itest_metric(&srv, "reflexor_effects_running");
        w = itest_metric(&srv, "reflexor_effects_waiting");
        d = itest_metric(&srv, "reflexor_effects_draining");
        if (r == running && w == waiting && d == draining)
            return true;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    } while (itest_now_ms() < end);
    fprintf(stderr, "check_metrics: gauges %ld/%ld/%ld, wanted %ld/%ld/%ld\n", r, w, d,
            running, waiting, draining);
    return false;
}

/* Three tool calls in one session with one place: one runs, two wait. */
START_TEST(test_running_and_waiting_are_told_apart)
{
    static const char calls[] =
        "{\"type\":\"brain-call-tools\",\"calledBrainAt\":0,\"toolCalls\":{"
        "\"c1\":{\"name\":\"nap\",\"parameters\":\"{}\"},"
        "\"c2\":{\"name\":\"nap\",\"parameters\":\"{}\"},"
        "\"c3\":{\"name\":\"nap\",\"parameters\":\"{}\"}}}";

    ck_assert(gauges_become(0, 0, 0));
    ck_assert_int_eq(itest_post_input(&srv, "default", calls, NULL), 200);
    ck_assert_msg(gauges_become(1, 2, 0), "one running, two waiting");
    /* A cancel frees the waiting ones at once; the running one drains. */
    ck_assert_int_eq(
        itest_post_input(&srv, "default", "{\"type\":\"user-cancel\"}", NULL), 200);
    ck_assert_msg(gauges_become(0, 0, 0), "all back to zero once the effects ended");
}
END_TEST

Suite *metrics_suite(void);
Suite *metrics_suite(void)
{
    Suite *s = suite_create("metrics");
    TCase *nap = tcase_create("nap");

    tcase_add_unchecked_fixture(nap, start_nap, stop);
    tcase_set_timeout(nap, getenv("RX_SERVER_WRAPPER") ? 300 : 60);
    tcase_add_test(nap, test_running_and_waiting_are_told_apart);
    suite_add_tcase(s, nap);
    return s;
}
