/*
 * check_scale_bytes - limits.resident_bytes (SPEC 6.2, issue 29): the
 * resident set is bounded by the sessions' measured size, not only by their
 * count.
 *
 * 4 000 stored chats of 40 messages (some 7 KB of state each as JSON, so
 * about 28 MB in all: more than the 16 MiB allowed) under a count limit that
 * never binds (limits.resident_sessions 100 000) and an idle time that never
 * passes (sessions.idle_ms 10 minutes): touching every one of them must
 * evict by bytes alone, and leave fewer than all of them resident. The
 * store comes from bench/scale_fill (itest_scale_fill); on PostgreSQL
 * (RX_PG_DIR) the same. No timings are asserted: waits only bound hangs.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>

#include "tests/integration/itest_scale.h"

#define SESSIONS 4000

static struct itest_server srv;
static struct itest_scale store;

static const char config[] =
    "{\"sessions\":{\"idle_ms\":600000},"
    " \"limits\":{\"resident_sessions\":100000, \"resident_bytes\":16777216}}";

static long metric(const char *name)
{
    long v = itest_metric(&srv, name);

    ck_assert_msg(v >= 0, "GET /metrics has no %s", name);
    return v;
}

START_TEST(test_bytes_bound_the_resident_set)
{
    static const char *const fill[] = {"--sessions", "4000", "--messages", "40", NULL};
    const char *args[] = {"--db", store.db, NULL};
    long timeout = getenv("RX_SERVER_WRAPPER") ? 120000 : 30000, resident, evicted;
    char path[256];

    ck_assert_msg(itest_scale_fill(&store, fill, SESSIONS) == 0,
                  "the store could not be filled");
    if (itest_server_start(&srv, config, args)) {
        itest_scale_remove(&store);
        ck_abort_msg("server did not start");
    }
    for (long i = 0; i < SESSIONS; i++) {
        snprintf(path, sizeof(path), "/api/reflexor/sessions/%s", store.ids[i]);
        ck_assert_int_eq(itest_scale_call(&srv, "GET", path, NULL, NULL, timeout, NULL),
                         200);
    }
    resident = metric("reflexor_sessions_resident");
    evicted = metric("reflexor_sessions_evicted_total");
    fprintf(stderr, "check_scale_bytes: %ld resident, %ld evicted after %d touches\n",
            resident, evicted, SESSIONS);
    ck_assert_int_gt(evicted, 0);
    ck_assert_int_lt(resident, SESSIONS);
    ck_assert_int_ge(metric("reflexor_sessions_loaded_total"), SESSIONS);
    ck_assert_int_eq(itest_server_stop(&srv), 0);
    itest_scale_remove(&store);
}
END_TEST

Suite *scale_bytes_suite(void);
Suite *scale_bytes_suite(void)
{
    Suite *s = suite_create("scale_bytes");
    TCase *tc = tcase_create("bytes");

    tcase_set_timeout(tc, getenv("RX_SERVER_WRAPPER") ? 900 : 300);
    tcase_add_test(tc, test_bytes_bound_the_resident_set);
    suite_add_tcase(s, tc);
    return s;
}
