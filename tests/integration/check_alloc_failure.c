/*
 * check_alloc_failure - out of memory in the real server (base/fail_alloc.h):
 * the sanitizer-built server is started with RX_FAIL_ALLOC=N, so the Nth
 * allocation after it starts listening fails, and one session goes through
 * an SSE subscribe, a POST, a call of the builtin calculator and a call of
 * an MCP tool (server-everything's echo, over stdio). Whatever N hits, every
 * answer is a clean one (200, or 500/503 for the request that met the
 * failure), every tool call ends with a result (a success or a
 * toolkit-error: an effect that failed is run again), /healthz answers 200
 * afterwards, and the server exits 0 when stopped: no crash, no sanitizer
 * report, no leak (LeakSanitizer fails the exit status).
 *
 * The walk. A run allocates some thousands of times and each N is a server
 * start (node included), so not every N is tried: those of walk[] below,
 * every one up to 8, then about half again each step, then three in the
 * last stretch, where the tool calls run (a run counts some 5900 to 7200;
 * the server logs it at exit, "fail-alloc: ..." with RX_LOG_LEVEL=info);
 * some 30 seconds. RX_FAIL_ALLOC_FROM=a with RX_FAIL_ALLOC_TO=b walks
 * every N of [a, b] instead, or every k-th with RX_FAIL_ALLOC_STEP=k.
 * Threads make the count vary a little from run to run, so an N names a
 * region of the run rather than one call.
 *
 * Only the sanitizer build has the switch; in any other build the test says
 * so on stderr and passes without running (the plain and valgrind runs of
 * `make test` build the same file).
 */
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/integration/itest.h"

Suite *alloc_failure_suite(void);

#ifdef RX_FAIL_ALLOC

#define EVERYTHING "node_modules/@modelcontextprotocol/server-everything/dist/index.js"

/* Bounds on waits; they only catch a hang. */
#define WAIT_MS 20000
#define UP_MS   30000

static const long walk[] = {1,   2,    3,    4,    5,    6,    7,    8,    12,
                            18,  27,   40,   60,   90,   135,  200,  300,  450,
                            700, 1000, 1500, 2200, 3300, 5000, 5500, 5800, 6100};
#define WALK_LEN ((int)(sizeof(walk) / sizeof(walk[0])))

static struct itest_server srv;

static long range_from(void)
{
    const char *from = getenv("RX_FAIL_ALLOC_FROM"), *to = getenv("RX_FAIL_ALLOC_TO");

    return from && to && atol(from) > 0 && atol(to) >= atol(from) ? atol(from) : 0;
}

/* RX_FAIL_ALLOC_STEP (default 1): every how many N of the range. */
static long range_step(void)
{
    const char *step = getenv("RX_FAIL_ALLOC_STEP");

    return step && atol(step) > 0 ? atol(step) : 1;
}

static int walk_len(void)
{
    if (!range_from())
        return WALK_LEN;
    return (int)((atol(getenv("RX_FAIL_ALLOC_TO")) - range_from()) / range_step() + 1);
}

static long walk_n(int i)
{
    return range_from() ? range_from() + i * range_step() : walk[i];
}

static bool str_is(const char *s, const char *want)
{
    return s && !strcmp(s, want);
}

static const char *str_at(json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

/* ---- the server, with the switch set ------------------------------------------ */

static void start(long n)
{
    char cwd[PATH_MAX], script[2 * PATH_MAX], num[32], *text;
    json_t *cfg;
    int rc;

    ck_assert_ptr_nonnull(getcwd(cwd, sizeof(cwd)));
    snprintf(script, sizeof(script), "%s/%s", cwd, EVERYTHING);
    ck_assert_msg(!access(script, R_OK), "%s is missing (run `make integration`)",
                  script);
    /* Effects that failed are run again soon: the walk waits for them. */
    cfg = json_pack("{s:{s:{s:i, s:i}}, s:{s:i, s:i},"
                    " s:{s:{s:s, s:[s,s], s:i}}}",
                    "brain", "builtin", "chunk_chars", 64, "chunk_delay_ms", 0, "runtime",
                    "backoff_ms", 20, "backoff_max_ms", 200, "mcpServers", "everything",
                    "command", "node", "args", script, "stdio", "timeout_ms", 5000);
    text = json_dumps(cfg, JSON_COMPACT);
    json_decref(cfg);
    ck_assert_ptr_nonnull(text);
    snprintf(num, sizeof(num), "%ld", n);
    setenv("RX_FAIL_ALLOC", num, 1);
    rc = itest_server_start(&srv, text, NULL);
    unsetenv("RX_FAIL_ALLOC");
    free(text);
    ck_assert_msg(rc == 0, "N=%ld: the server did not start", n);
}

/* GET path as JSON (NEW) once it answers 200 (a request may meet the failure). */
static json_t *get_json(const char *path, long n)
{
    char url[512];
    struct itest_resp r;
    json_t *j = NULL;

    snprintf(url, sizeof(url), "%s%s", srv.base, path);
    for (int i = 0; i < 2 && !j; i++) {
        if (itest_request("GET", url, NULL, NULL, &r)) {
            itest_resp_release(&r);
            ck_abort_msg("N=%ld: GET %s: no answer (a closed connection or a crash)", n,
                         path);
        }
        ck_assert_msg(r.status == 200 || r.status == 500 || r.status == 503,
                      "N=%ld: GET %s answered %ld", n, path, r.status);
        if (r.status == 200)
            j = itest_resp_json(&r);
        itest_resp_release(&r);
    }
    ck_assert_msg(j != NULL, "N=%ld: GET %s failed twice", n, path);
    return j;
}

static bool mcp_up(json_t *health, void *arg)
{
    (void)arg;
    return str_is(
        str_at(json_object_get(json_object_get(health, "mcp"), "everything"), "status"),
        "up");
}

/* ---- the session ------------------------------------------------------------------ */

/*
 * Answered: the brain's last reply is complete, and the tool call it made,
 * if it made one, has its result. (A brain that met the failure itself
 * answers with the error, "[Error] builtin brain: ...", and calls nothing.)
 */
static bool answered(json_t *state, void *arg)
{
    json_t *rec = itest_tool_record(state, 0);

    (void)arg;
    return str_is(str_at(itest_last_assistant(state), "status"), "complete") &&
           (!rec || json_is_object(json_object_get(rec, "result")));
}

/*
 * POST `content` to a new session of its own: 200, or 500/503 when this
 * request met the failure. Once accepted, the answer must come (answered)
 * within WAIT_MS. The record's result when there is one (NEW), else NULL.
 */
static json_t *converse(const char *content, long n)
{
    char *sid = NULL, *body, url[256];
    json_t *in, *st, *res = NULL;
    long status;

    for (int i = 0; i < 2 && !sid; i++)
        sid = itest_new_session(&srv);
    ck_assert_msg(sid != NULL, "N=%ld: no session could be made twice", n);
    in = json_pack("{s:s, s:s}", "type", "user-send-message", "content", content);
    body = json_dumps(in, JSON_COMPACT);
    status = itest_post_input(&srv, sid, body, NULL);
    free(body);
    json_decref(in);
    ck_assert_msg(status == 200 || status == 500 || status == 503,
                  "N=%ld: POST '%s' answered %ld", n, content, status);
    if (status == 200) {
        snprintf(url, sizeof(url), "%s/api/reflexor/sessions/%s", srv.base, sid);
        st = itest_poll_json(url, answered, NULL, WAIT_MS);
        if (!st || !answered(st, NULL)) {
            char *shown = st ? json_dumps(st, JSON_COMPACT) : NULL;

            ck_abort_msg("N=%ld: '%s' was never answered: %.1500s", n, content,
                         shown ? shown : "(no state)");
        }
        res = json_incref(json_object_get(itest_tool_record(st, 0), "result"));
        json_decref(st);
    }
    free(sid);
    return res;
}

/* A tool's result is a success or a toolkit-error, never a half. */
static void assert_result(json_t *res, const char *tool, long n)
{
    if (!res)
        return; /* the POST met the failure */
    ck_assert_msg(
        json_is_true(json_object_get(res, "isSuccess")) ||
            (json_is_false(json_object_get(res, "isSuccess")) && str_at(res, "error")),
        "N=%ld: %s: neither a success nor a toolkit-error", n, tool);
    json_decref(res);
}

/* An SSE subscriber gets its first state, or a clean refusal (500/503). */
static void subscribe(long n)
{
    char url[256];
    struct itest_sse ev;
    int first;

    snprintf(url, sizeof(url), "%s/api/reflexor/sessions/default/moorex", srv.base);
    ck_assert_int_eq(itest_sse_open(&ev, url, NULL), 0);
    first = itest_sse_wait(&ev, 0, "state-updated", NULL, NULL, WAIT_MS);
    if (first < 0) {
        ck_assert_msg(itest_sse_wait_done(&ev, WAIT_MS), "N=%ld: SSE hangs", n);
        ck_assert_msg(ev.status == 200 || ev.status == 500 || ev.status == 503,
                      "N=%ld: SSE answered %ld", n, ev.status);
    }
    itest_sse_close(&ev);
}

START_TEST(test_walk)
{
    long n = walk_n(_i);
    char url[128];
    json_t *health;

    start(n);
    /* The MCP server comes up after the server listens: its start may meet
       the failure too, and is then tried again a second later. */
    snprintf(url, sizeof(url), "%s/healthz", srv.base);
    health = itest_poll_json(url, mcp_up, NULL, UP_MS);
    ck_assert_msg(mcp_up(health, NULL), "N=%ld: the MCP server never came up", n);
    json_decref(health);
    subscribe(n);
    json_decref(converse("hello", n));
    assert_result(converse("/call calculator {\"expression\":\"2+3\"}", n), "calculator",
                  n);
    assert_result(converse("/call everything__echo {\"message\":\"hi\"}", n),
                  "everything__echo", n);
    json_decref(get_json("/healthz", n));
    ck_assert_msg(itest_server_stop(&srv) == 0,
                  "N=%ld: the server did not exit cleanly (a crash, a sanitizer "
                  "report or a leak: see its stderr)",
                  n);
}
END_TEST

#else /* not the sanitizer build: no switch to walk */

static int walk_len(void)
{
    return 1;
}

START_TEST(test_walk)
{
    (void)_i;
    fprintf(stderr, "check_alloc_failure: not a sanitizer build (no RX_FAIL_ALLOC "
                    "switch): the walk runs in `make SANITIZE=... integration`\n");
}
END_TEST

#endif

Suite *alloc_failure_suite(void)
{
    Suite *s = suite_create("alloc_failure");
    TCase *tc = tcase_create("walk");

    tcase_set_timeout(tc, 90);
    tcase_add_loop_test(tc, test_walk, 0, walk_len());
    suite_add_tcase(s, tc);
    return s;
}
