/*
 * check_scale_crash - kill -9 while sessions are loaded and evicted (SPEC
 * 6.2, issue 29): no acknowledged input is lost.
 *
 * A store of 2 000 finished chats (bench/scale_fill through itest_fill),
 * served under limits.resident_sessions 20 and sessions.idle_ms 100, so
 * nearly every request loads a session and evicts another. Each iteration
 * starts the real server on it, first checks that every input acknowledged
 * so far (200) is in its session's state, then lets two clients post user
 * messages to random sessions (each answered by the builtin brain) and touch
 * others, and SIGKILLs the server after a random delay (seeded: RX_SCALE_SEED,
 * default 29). The last start checks everything once more and must stop
 * cleanly. On PostgreSQL (RX_PG_DIR) the same, with a short cluster lease
 * so the restarted node takes its sessions back at once. No timings are
 * asserted: waits only bound hangs.
 */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/integration/itest_scale.h"

#define SESSIONS 2000
#define ACKS_MAX 20000
#define CLIENTS  2
#define RESIDENT 20

static struct itest_server srv;
static struct itest_scale store;
static char **ids; /* store.ids */

/* One acknowledged input: its session and its message id. */
struct ack {
    int session;
    char mid[32];
};

static struct {
    pthread_mutex_t lock;
    struct ack v[ACKS_MAX];
    int n;
    bool stop; /* under lock */
} acks = {.lock = PTHREAD_MUTEX_INITIALIZER};

static const char *config(void)
{
    return itest_on_postgres()
               ? "{\"brain\":{\"builtin\":{\"chunk_chars\":8,\"chunk_delay_ms\":5}},"
                 " \"sessions\":{\"idle_ms\":100}, \"limits\":{\"resident_sessions\":20},"
                 " \"cluster\":{\"lease_ms\":1000}}"
               : "{\"brain\":{\"builtin\":{\"chunk_chars\":8,\"chunk_delay_ms\":5}},"
                 " \"sessions\":{\"idle_ms\":100}, "
                 "\"limits\":{\"resident_sessions\":20}}";
}

static void fill(void)
{
    static const char *const args[] = {"--sessions", "2000", "--messages", "4", NULL};

    ck_assert_msg(itest_scale_fill(&store, args, SESSIONS) == 0,
                  "the store could not be filled");
    ids = store.ids;
}

static void start(void)
{
    const char *args[] = {"--db", store.db, NULL};

    if (itest_server_start(&srv, config(), args)) {
        itest_scale_remove(&store); /* the store is this test's: gone on any failure */
        ck_abort_msg("server did not start");
    }
}

static bool stopping(void)
{
    bool s;

    pthread_mutex_lock(&acks.lock);
    s = acks.stop;
    pthread_mutex_unlock(&acks.lock);
    return s;
}

/* A client: post to one random session, touch another, until told or refused. */
static void *client(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    int iter = (int)((uintptr_t)arg >> 8), who = (int)((uintptr_t)arg & 0xff), k = 0;
    char mid[32], body[160], url[256];

    while (!stopping()) {
        int s = (int)(rand_r(&seed) % SESSIONS);
        struct itest_resp r;
        long status;

        snprintf(mid, sizeof(mid), "k%d-%d-%d", iter, who, k++);
        snprintf(body, sizeof(body),
                 "{\"type\":\"user-send-message\",\"messageId\":\"%s\","
                 "\"content\":\"kill loop message %s\"}",
                 mid, mid);
        status = itest_post_input(&srv, ids[s], body, NULL);
        if (status == 200) {
            pthread_mutex_lock(&acks.lock);
            if (acks.n < ACKS_MAX) {
                acks.v[acks.n].session = s;
                snprintf(acks.v[acks.n].mid, sizeof(acks.v[0].mid), "%s", mid);
                acks.n++;
            }
            pthread_mutex_unlock(&acks.lock);
        } else if (status < 0) {
            break; /* the server is gone */
        }
        snprintf(url, sizeof(url), "%s/api/reflexor/sessions/%s", srv.base,
                 ids[rand_r(&seed) % SESSIONS]);
        /* A touch may die with the server; the next POST says so. */
        (void)itest_request_within("GET", url, NULL, NULL, 10000, &r);
        itest_resp_release(&r);
    }
    return NULL;
}

static bool has_message(json_t *state, const char *mid)
{
    json_t *m;
    size_t i;

    json_array_foreach(json_object_get(state, "userMessages"), i, m)
    {
        const char *id = json_string_value(json_object_get(m, "id"));

        if (id && !strcmp(id, mid))
            return true;
    }
    return false;
}

static int by_session(const void *a, const void *b)
{
    return ((const struct ack *)a)->session - ((const struct ack *)b)->session;
}

/*
 * Every input acknowledged so far is in its session, once loaded again: one
 * GET per session (the acks sorted by session), each loading it cold.
 */
static void check_acks(int iter)
{
    char url[256];
    json_t *st = NULL;
    int lost = 0;

    qsort(acks.v, (size_t)acks.n, sizeof(acks.v[0]), by_session);
    for (int i = 0; i < acks.n; i++) {
        if (!i || acks.v[i].session != acks.v[i - 1].session) {
            struct itest_resp r;

            json_decref(st);
            snprintf(url, sizeof(url), "%s/api/reflexor/sessions/%s", srv.base,
                     ids[acks.v[i].session]);
            ck_assert_int_eq(itest_request("GET", url, NULL, NULL, &r), 0);
            ck_assert_msg(r.status == 200, "iteration %d: GET %s: %ld", iter, url,
                          r.status);
            st = itest_resp_json(&r);
            itest_resp_release(&r);
        }
        if (!has_message(st, acks.v[i].mid)) {
            fprintf(stderr, "check_scale_crash: iteration %d: %s lost from %s\n", iter,
                    acks.v[i].mid, ids[acks.v[i].session]);
            lost++;
        }
    }
    json_decref(st);
    ck_assert_msg(!lost, "iteration %d: %d of %d acknowledged inputs lost", iter, lost,
                  acks.n);
}

START_TEST(test_kill_loop_loses_no_acknowledged_input)
{
    const char *env = getenv("RX_SCALE_SEED");
    unsigned seed = env ? (unsigned)atoi(env) : 29;
    int iterations = itest_scale_slow_build() ? 2 : 5, before;
    long evicted = 0;

    fill();
    for (int iter = 0; iter < iterations; iter++) {
        pthread_t t[CLIENTS];
        struct timespec nap;
        long delay_ms =
            (itest_scale_slow_build() ? 3000 : 400) + (long)(rand_r(&seed) % 1200);

        start();
        check_acks(iter);
        before = acks.n;
        acks.stop = false;
        for (int c = 0; c < CLIENTS; c++)
            ck_assert_int_eq(
                pthread_create(&t[c], NULL, client,
                               (void *)(uintptr_t)(iter << 8 | (c * 97 + 1))),
                0);
        nap = (struct timespec){delay_ms / 1000, (delay_ms % 1000) * 1000000L};
        nanosleep(&nap, NULL);
        if (evicted <= 0)
            evicted = itest_metric(&srv, "reflexor_sessions_evicted_total");
        ck_assert_int_eq(kill(srv.pid, SIGKILL), 0);
        pthread_mutex_lock(&acks.lock);
        acks.stop = true;
        pthread_mutex_unlock(&acks.lock);
        for (int c = 0; c < CLIENTS; c++)
            pthread_join(t[c], NULL);
        (void)itest_server_stop(&srv); /* reaps it: not a clean exit */
        fprintf(stderr,
                "check_scale_crash: iteration %d: %d acknowledged, killed at %ld ms\n",
                iter, acks.n - before, delay_ms);
    }
    start();
    check_acks(iterations);
    ck_assert_msg(acks.n > 0, "nothing was acknowledged");
    ck_assert_msg(evicted > 0, "no session was evicted while the clients ran");
    ck_assert_int_eq(itest_server_stop(&srv), 0);
    itest_scale_remove(&store);
}
END_TEST

Suite *scale_crash_suite(void);
Suite *scale_crash_suite(void)
{
    Suite *s = suite_create("scale_crash");
    TCase *tc = tcase_create("kill");

    tcase_set_timeout(tc, getenv("RX_SERVER_WRAPPER") ? 900 : 300);
    tcase_add_test(tc, test_kill_loop_loses_no_acknowledged_input);
    suite_add_tcase(s, tc);
    return s;
}
