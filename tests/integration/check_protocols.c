/*
 * check_protocols - what the two client protocols (SPEC 4.3) share, through
 * the real server: the HTTP layer and the runs under them. The protocols
 * themselves are tested with their real client libraries
 * (tests/clients/, one file per protocol); here is what those do not reach:
 *  - a body over limits.body_max and a missing token are answered in each
 *    protocol's own error shape (OpenAI's {"error":{...}}, LangGraph's
 *    {"detail":...}); the LangGraph SDK's X-Api-Key header is a token too,
 *    and a CORS preflight (which carries none) is answered without one;
 *  - the prefixes are configurable, "" turns a protocol off, and a bad
 *    prefix stops the server at start with a line naming the field;
 *  - a run waits its turn behind work the native API set off on the same
 *    session, and never mixes its answer with that work's;
 *  - a chat completion parked for the agent does not keep the server from
 *    stopping; a session deleted under a run ends it with an error.
 * Requests wait for their answers; the tests time out only on a hang.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/integration/itest.h"

static const char *const JSON_HDR[] = {"Content-Type: application/json", NULL};

static void start(struct itest_server *srv, const char *cfg)
{
    ck_assert_msg(itest_server_start(srv, cfg, NULL) == 0, "server did not start");
}

static void stop(struct itest_server *srv)
{
    ck_assert_int_eq(itest_server_stop(srv), 0);
}

/* POST `body` to base+path; the response in *r. */
static void post(const struct itest_server *srv, const char *path, const char *body,
                 const char *const *headers, struct itest_resp *r)
{
    char url[512];

    snprintf(url, sizeof(url), "%s%s", srv->base, path);
    ck_assert_int_eq(itest_request("POST", url, body, headers ? headers : JSON_HDR, r),
                     0);
}

static void get(const struct itest_server *srv, const char *path,
                const char *const *headers, struct itest_resp *r)
{
    char url[512];

    snprintf(url, sizeof(url), "%s%s", srv->base, path);
    ck_assert_int_eq(itest_request("GET", url, NULL, headers, r), 0);
}

/* The body's JSON has a string at `a` (then `b` inside it, when given). */
static bool has_str(const struct itest_resp *r, const char *a, const char *b)
{
    json_t *j = itest_resp_json(r), *v = j ? json_object_get(j, a) : NULL;
    bool ok;

    if (v && b)
        v = json_object_get(v, b);
    ok = json_is_string(v);
    json_decref(j);
    return ok;
}

static size_t session_count(const struct itest_server *srv)
{
    struct itest_resp r;
    json_t *j;
    size_t n;

    get(srv, "/api/reflexor/sessions", NULL, &r);
    j = itest_resp_json(&r);
    ck_assert_msg(json_is_array(j), "sessions: %s", r.body);
    n = json_array_size(j);
    json_decref(j);
    itest_resp_release(&r);
    return n;
}

/* ---- error shapes --------------------------------------------------------------------
 */

START_TEST(test_too_large_in_each_shape)
{
    struct itest_server srv;
    size_t n = 8192;
    char *big = malloc(n + 64);
    struct itest_resp r;
    size_t before;

    start(&srv, "{\"db\":\":memory:\",\"limits\":{\"body_max\":4096}}");
    before = session_count(&srv);
    snprintf(big, n + 64,
             "{\"model\":\"reflexor\",\"messages\":[{\"role\":\"user\",\"content\":\"%0*"
             "d\"}]}",
             (int)n, 0);
    post(&srv, "/v1/chat/completions", big, NULL, &r);
    ck_assert_int_eq(r.status, 413);
    ck_assert_msg(has_str(&r, "error", "message"), "openai shape: %s", r.body);
    itest_resp_release(&r);
    post(&srv, "/api/langgraph/threads", big, NULL, &r);
    ck_assert_int_eq(r.status, 413);
    ck_assert_msg(has_str(&r, "detail", NULL), "langgraph shape: %s", r.body);
    itest_resp_release(&r);
    post(&srv, "/api/reflexor/sessions", big, NULL, &r);
    ck_assert_int_eq(r.status, 413);
    ck_assert_msg(has_str(&r, "error", NULL), "native shape: %s", r.body);
    itest_resp_release(&r);
    ck_assert_uint_eq(session_count(&srv), before);
    free(big);
    stop(&srv);
}
END_TEST

START_TEST(test_auth_in_each_shape)
{
    static const char *const bearer[] = {"Authorization: Bearer s3cret", NULL};
    static const char *const api_key[] = {"X-Api-Key: s3cret", NULL};
    static const char *const wrong[] = {"X-Api-Key: nope", NULL};
    static const char *const auth_hdr[] = {"Authorization: Bearer s3cret",
                                           "Content-Type: application/json", NULL};
    struct itest_server srv;
    struct itest_resp r;

    start(&srv, "{\"db\":\":memory:\",\"auth\":{\"token\":\"s3cret\"}}");
    get(&srv, "/v1/models", NULL, &r);
    ck_assert_int_eq(r.status, 401);
    ck_assert_msg(has_str(&r, "error", "code"), "openai shape: %s", r.body);
    itest_resp_release(&r);
    get(&srv, "/v1/models", bearer, &r);
    ck_assert_int_eq(r.status, 200);
    itest_resp_release(&r);
    get(&srv, "/api/langgraph/info", NULL, &r);
    ck_assert_int_eq(r.status, 401);
    ck_assert_msg(has_str(&r, "detail", NULL), "langgraph shape: %s", r.body);
    itest_resp_release(&r);
    get(&srv, "/api/langgraph/info", wrong, &r);
    ck_assert_int_eq(r.status, 401);
    itest_resp_release(&r);
    get(&srv, "/api/langgraph/info", api_key, &r);
    ck_assert_int_eq(r.status, 200);
    itest_resp_release(&r);
    /* A browser's CORS preflight carries no credentials, and needs none. */
    {
        static const char *const origin[] = {"Origin: http://localhost:3000",
                                             "Access-Control-Request-Method: POST", NULL};
        char url[256];

        snprintf(url, sizeof(url), "%s/api/langgraph/threads", srv.base);
        ck_assert_int_eq(itest_request("OPTIONS", url, NULL, origin, &r), 0);
        ck_assert_int_eq(r.status, 204);
        itest_resp_release(&r);
    }
    /* The key is a token for every route, the native API's too. */
    get(&srv, "/api/reflexor/sessions", api_key, &r);
    ck_assert_int_eq(r.status, 200);
    itest_resp_release(&r);
    post(&srv, "/v1/chat/completions",
         "{\"model\":\"reflexor\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
         auth_hdr, &r);
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
    itest_resp_release(&r);
    stop(&srv);
}
END_TEST

/* ---- prefixes
 * --------------------------------------------------------------------------- */

START_TEST(test_prefixes_configurable)
{
    struct itest_server srv;
    struct itest_resp r;

    start(&srv, "{\"db\":\":memory:\",\"web_root\":\"/nonexistent\","
                "\"openai\":{\"prefix\":\"\"},\"langgraph\":{\"prefix\":\"/lg\"}}");
    get(&srv, "/v1/models", NULL, &r);
    ck_assert_int_eq(r.status, 404); /* off: not a route any more */
    itest_resp_release(&r);
    get(&srv, "/api/langgraph/info", NULL, &r);
    ck_assert_int_eq(r.status, 404);
    itest_resp_release(&r);
    get(&srv, "/lg/info", NULL, &r);
    ck_assert_int_eq(r.status, 200);
    itest_resp_release(&r);
    stop(&srv);
}
END_TEST

/* A config the server must refuse at start: exit 2, a line naming `field`. */
static void refused(const char *cfg, const char *field)
{
    char path[] = "/tmp/rx-proto-cfg-XXXXXX", cmd[512], line[512] = "";
    const char *bin = getenv("RX_SERVER") ? getenv("RX_SERVER") : "build/reflexor";
    int fd = mkstemp(path), status;
    FILE *p;

    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, cfg, strlen(cfg)), (ssize_t)strlen(cfg));
    close(fd);
    snprintf(cmd, sizeof(cmd), "%s --config %s --listen 127.0.0.1:0 2>&1", bin, path);
    p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    while (fgets(line, sizeof(line), p) && !strstr(line, field))
        ;
    status = pclose(p);
    unlink(path);
    ck_assert_msg(strstr(line, field), "no line names %s", field);
    ck_assert_int_eq(WEXITSTATUS(status), 2);
}

START_TEST(test_bad_protocol_config_refused)
{
    refused("{\"openai\":{\"prefix\":\"v1\"}}", "openai.prefix");
    refused("{\"langgraph\":{\"prefix\":\"/lg/\"}}", "langgraph.prefix");
    refused("{\"openai\":{\"models\":[]}}", "openai.models");
    refused("{\"openai\":{\"models\":[\"a\",7]}}", "openai.models");
    refused("{\"openai\":{\"tool_details\":\"yes\"}}", "openai.tool_details");
    refused("{\"openai\":{\"on_disconnect\":\"stop\"}}", "openai.on_disconnect");
    refused("{\"openai\":{\"colour\":1}}", "openai.colour");
}
END_TEST

/* The cluster section (SPEC 6.1) is checked like every other. */
START_TEST(test_bad_cluster_config_refused)
{
    refused("{\"cluster\":{\"lease_ms\":50}}", "cluster.lease_ms");
    refused("{\"cluster\":{\"lease_ms\":\"5000\"}}", "cluster.lease_ms");
    refused("{\"cluster\":{\"advertise\":\"ftp://10.0.0.1\"}}", "cluster.advertise");
    refused("{\"cluster\":{\"advertise\":7}}", "cluster.advertise");
    refused("{\"cluster\":{\"leases\":1}}", "cluster.leases");
}
END_TEST

/* ---- runs
 * ---------------------------------------------------------------------------------- */

/* The text of the last assistant message of a chat completion, or NULL (malloc'd). */
static char *completion_text(const struct itest_resp *r)
{
    json_t *j = itest_resp_json(r);
    const char *s = json_string_value(json_object_get(
        json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message"),
        "content"));
    char *out = s ? strdup(s) : NULL;

    json_decref(j);
    return out;
}

START_TEST(test_run_waits_for_native_work)
{
    struct itest_server srv;
    struct itest_resp r;
    char hdr[128], body[256], *text, *sid;
    const char *headers[] = {"Content-Type: application/json", hdr, NULL};
    json_t *st;
    char url[256];

    /* Slow enough that the native answer still streams when the run comes. */
    start(&srv, "{\"db\":\":memory:\",\"brain\":{\"provider\":\"builtin\","
                "\"builtin\":{\"chunk_chars\":2,\"chunk_delay_ms\":40}}}");
    sid = itest_new_session(&srv);
    ck_assert_ptr_nonnull(sid);
    ck_assert_int_eq(
        itest_post_input(&srv, sid,
                         "{\"type\":\"user-send-message\",\"content\":\"first from "
                         "the web UI\"}",
                         NULL),
        200);
    snprintf(hdr, sizeof(hdr), "X-Reflexor-Session: %s", sid);
    snprintf(
        body, sizeof(body),
        "{\"model\":\"reflexor\",\"messages\":[{\"role\":\"user\",\"content\":\"second "
        "over openai\"}]}");
    post(&srv, "/v1/chat/completions", body, headers, &r);
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
    text = completion_text(&r);
    ck_assert_ptr_nonnull(text);
    ck_assert_msg(strstr(text, "Echo: second over openai") && !strstr(text, "first"),
                  "the run's answer only: %s", text);
    free(text);
    itest_resp_release(&r);
    /* Both answered, in order, each complete. */
    snprintf(url, sizeof(url), "%s/api/reflexor/sessions/%s", srv.base, sid);
    ck_assert_int_eq(itest_request("GET", url, NULL, NULL, &r), 0);
    st = itest_resp_json(&r);
    {
        json_t *a = json_object_get(st, "assistantMessages");

        ck_assert_uint_eq(json_array_size(a), 2);
        ck_assert_str_eq(
            json_string_value(json_object_get(json_array_get(a, 0), "content")),
            "Echo: first from the web UI");
        ck_assert_str_eq(
            json_string_value(json_object_get(json_array_get(a, 1), "content")),
            "Echo: second over openai");
        ck_assert_str_eq(
            json_string_value(json_object_get(json_array_get(a, 0), "status")),
            "complete");
    }
    json_decref(st);
    itest_resp_release(&r);
    free(sid);
    stop(&srv);
}
END_TEST

/* A chat completion left waiting: what the child got back. */
struct waiter {
    const struct itest_server *srv;
    const char *session;
    struct itest_resp r;
    int rc;
};

static void *wait_completion(void *arg)
{
    struct waiter *w = arg;
    char url[256], hdr[128];
    const char *headers[] = {"Content-Type: application/json", hdr, NULL};

    snprintf(url, sizeof(url), "%s/v1/chat/completions", w->srv->base);
    snprintf(hdr, sizeof(hdr), "X-Reflexor-Session: %s", w->session);
    w->rc =
        itest_request("POST", url,
                      "{\"model\":\"reflexor\",\"messages\":[{\"role\":\"user\","
                      "\"content\":\"a long answer that takes its time to stream\"}]}",
                      headers, &w->r);
    return NULL;
}

/* A server whose slow answer a chat completion waits for (parked) on thread *t. */
static char *park_a_completion(struct itest_server *srv, struct waiter *w, pthread_t *t)
{
    char *sid;

    start(srv, "{\"db\":\":memory:\",\"brain\":{\"provider\":\"builtin\","
               "\"builtin\":{\"chunk_chars\":1,\"chunk_delay_ms\":200}}}");
    sid = itest_new_session(srv);
    ck_assert_ptr_nonnull(sid);
    w->srv = srv;
    w->session = sid;
    pthread_create(t, NULL, wait_completion, w);
    usleep(800 * 1000); /* parked, the answer streaming */
    return sid;
}

START_TEST(test_parked_run_and_shutdown)
{
    struct itest_server srv;
    struct waiter w = {.srv = &srv};
    pthread_t t;
    char *sid = park_a_completion(&srv, &w, &t);

    ck_assert_int_eq(itest_server_stop(&srv), 0); /* stops, and cleanly */
    pthread_join(t, NULL);
    itest_resp_release(&w.r); /* a body even when the request failed */
    free(sid);
}
END_TEST

START_TEST(test_delete_ends_the_run)
{
    struct itest_server srv;
    struct waiter w = {.srv = &srv};
    struct itest_resp r;
    char url[256];
    pthread_t t;
    char *sid = park_a_completion(&srv, &w, &t);

    snprintf(url, sizeof(url), "%s/api/reflexor/sessions/%s", srv.base, sid);
    ck_assert_int_eq(itest_request("DELETE", url, NULL, NULL, &r), 0);
    ck_assert_int_eq(r.status, 204);
    itest_resp_release(&r);
    pthread_join(t, NULL);
    ck_assert_int_eq(w.rc, 0);
    ck_assert_msg(w.r.status >= 400 && has_str(&w.r, "error", "message"),
                  "an OpenAI error, not an answer: %ld %s", w.r.status, w.r.body);
    itest_resp_release(&w.r);
    free(sid);
    stop(&srv);
}
END_TEST

/* ---- what the adversarial review found ------------------------------------------------
 */

/*
 * A run lasts until no effect is wanted *or running*: the builtin brain
 * compresses the history before it answers (compress_after), and the run
 * must not end at that moment with no answer.
 */
START_TEST(test_run_outlives_a_compress)
{
    struct itest_server srv;
    char hdr[128], body[256], want[64], *text, *sid;
    const char *headers[] = {"Content-Type: application/json", hdr, NULL};
    struct itest_resp r;

    start(&srv, "{\"db\":\":memory:\",\"brain\":{\"provider\":\"builtin\","
                "\"builtin\":{\"chunk_delay_ms\":1,\"compress_after\":4,"
                "\"compress_keep\":2}}}");
    sid = itest_new_session(&srv);
    snprintf(hdr, sizeof(hdr), "X-Reflexor-Session: %s", sid);
    for (int i = 0; i < 12; i++) {
        snprintf(body, sizeof(body),
                 "{\"model\":\"reflexor\",\"messages\":[{\"role\":\"user\","
                 "\"content\":\"turn %d\"}]}",
                 i);
        post(&srv, "/v1/chat/completions", body, headers, &r);
        ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
        text = completion_text(&r);
        snprintf(want, sizeof(want), "Echo: turn %d", i);
        ck_assert_msg(text && !strcmp(text, want), "turn %d answered %s", i,
                      text ? text : "(null)");
        free(text);
        itest_resp_release(&r);
    }
    free(sid);
    stop(&srv);
}
END_TEST

/* A session id of the longest length comes back whole, and continues. */
START_TEST(test_longest_session_id)
{
    struct itest_server srv;
    char id[65], body[256], hdr[128], url[256];
    const char *headers[] = {"Content-Type: application/json", hdr, NULL};
    struct itest_resp r;
    json_t *j;

    memset(id, 'd', 64);
    id[64] = '\0';
    start(&srv, "{\"db\":\":memory:\"}");
    snprintf(body, sizeof(body), "{\"thread_id\":\"%s\"}", id);
    post(&srv, "/api/langgraph/threads", body, NULL, &r);
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
    itest_resp_release(&r);
    snprintf(hdr, sizeof(hdr), "X-Reflexor-Session: %s", id);
    snprintf(url, sizeof(url), "%s/v1/chat/completions", srv.base);
    ck_assert_int_eq(
        itest_request("POST", url,
                      "{\"model\":\"reflexor\",\"messages\":[{\"role\":\"user\","
                      "\"content\":\"mine\"}]}",
                      headers, &r),
        0);
    ck_assert_int_eq(r.status, 200);
    itest_resp_release(&r);
    /* Resent without the header: the same session continues (1 more message). */
    post(&srv, "/v1/chat/completions",
         "{\"model\":\"reflexor\",\"messages\":[{\"role\":\"user\",\"content\":\"mine\"},"
         "{\"role\":\"assistant\",\"content\":\"Echo: mine\"},{\"role\":\"user\","
         "\"content\":\"next\"}]}",
         NULL, &r);
    ck_assert_int_eq(r.status, 200);
    itest_resp_release(&r);
    snprintf(url, sizeof(url), "/api/reflexor/sessions/%s", id);
    get(&srv, url, NULL, &r);
    j = itest_resp_json(&r);
    ck_assert_uint_eq(json_array_size(json_object_get(j, "userMessages")), 2);
    json_decref(j);
    itest_resp_release(&r);
    stop(&srv);
}
END_TEST

/* Numbers at the edge of int64 are refused or answered, never overflowed. */
START_TEST(test_huge_numbers)
{
    struct itest_server srv;
    struct itest_resp r;

    start(&srv, "{\"db\":\":memory:\"}");
    post(&srv, "/api/langgraph/threads", "{\"thread_id\":\"t1\"}", NULL, &r);
    itest_resp_release(&r);
    post(&srv, "/api/langgraph/threads/search",
         "{\"offset\":9223372036854775807,\"limit\":10}", NULL, &r);
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
    ck_assert_str_eq(r.body, "[]");
    itest_resp_release(&r);
    post(&srv, "/api/langgraph/threads/search", "{\"limit\":\"5\"}", NULL, &r);
    ck_assert_int_eq(r.status, 422);
    itest_resp_release(&r);
    post(&srv, "/api/langgraph/threads/t1/history",
         "{\"checkpoint\":{\"checkpoint_id\":\"9223372036854775807\"}}", NULL, &r);
    ck_assert_msg(r.status < 500, "%ld %s", r.status, r.body);
    itest_resp_release(&r);
    post(&srv, "/api/langgraph/threads", "{\"thread_id\":\"t2\",\"if_exists\":5}", NULL,
         &r);
    ck_assert_int_eq(r.status, 422);
    itest_resp_release(&r);
    stop(&srv); /* exits 0: under the sanitizers, nothing overflowed */
}
END_TEST

/* A lane holds at most limits.session_queue_max runs; cancelling them is cheap. */
START_TEST(test_lane_bounded)
{
    struct itest_server srv;
    struct itest_resp r;
    const char *run = "{\"assistant_id\":\"agent\",\"input\":{\"messages\":[{\"type\":"
                      "\"human\",\"content\":\"a slow answer to wait for\"}]}}";
    int ok = 0, busy = 0;

    start(&srv,
          "{\"db\":\":memory:\",\"limits\":{\"session_queue_max\":4},"
          "\"brain\":{\"provider\":\"builtin\",\"builtin\":{\"chunk_delay_ms\":100}}}");
    post(&srv, "/api/langgraph/threads", "{\"thread_id\":\"q\"}", NULL, &r);
    itest_resp_release(&r);
    for (int i = 0; i < 8; i++) {
        post(&srv, "/api/langgraph/threads/q/runs", run, NULL, &r);
        ok += r.status == 200;
        busy += r.status == 429;
        itest_resp_release(&r);
    }
    ck_assert_int_eq(ok, 4);
    ck_assert_int_eq(busy, 4);
    /* interrupt: the queued ones end at once, the new one runs. */
    post(&srv, "/api/langgraph/threads/q/runs/wait",
         "{\"assistant_id\":\"agent\",\"multitask_strategy\":\"interrupt\",\"input\":"
         "{\"messages\":[{\"type\":\"human\",\"content\":\"x\"}]}}",
         NULL, &r);
    ck_assert_msg(r.status == 200 && strstr(r.body, "Echo: x"), "%ld %s", r.status,
                  r.body);
    itest_resp_release(&r);
    stop(&srv);
}
END_TEST

/* A thread deleted through the native API takes its LangGraph metadata along. */
START_TEST(test_native_delete_forgets_thread)
{
    struct itest_server srv;
    struct itest_resp r;
    char url[256];

    start(&srv, "{\"db\":\":memory:\"}");
    post(&srv, "/api/langgraph/threads",
         "{\"thread_id\":\"reused\",\"metadata\":{\"owner\":\"alice\"}}", NULL, &r);
    ck_assert_int_eq(r.status, 200);
    itest_resp_release(&r);
    snprintf(url, sizeof(url), "%s/api/reflexor/sessions/reused", srv.base);
    ck_assert_int_eq(itest_request("DELETE", url, NULL, NULL, &r), 0);
    ck_assert_int_eq(r.status, 204);
    itest_resp_release(&r);
    post(&srv, "/api/langgraph/threads", "{\"thread_id\":\"reused\"}", NULL, &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_msg(!strstr(r.body, "alice"), "stale metadata: %s", r.body);
    itest_resp_release(&r);
    stop(&srv);
}
END_TEST

Suite *protocols_suite(void);
Suite *protocols_suite(void)
{
    Suite *s = suite_create("protocols");
    TCase *tc = tcase_create("shared");

    tcase_set_timeout(tc, getenv("RX_SERVER_WRAPPER") ? 900 : 120);
    tcase_add_test(tc, test_too_large_in_each_shape);
    tcase_add_test(tc, test_auth_in_each_shape);
    tcase_add_test(tc, test_prefixes_configurable);
    tcase_add_test(tc, test_bad_protocol_config_refused);
    tcase_add_test(tc, test_bad_cluster_config_refused);
    tcase_add_test(tc, test_run_waits_for_native_work);
    tcase_add_test(tc, test_parked_run_and_shutdown);
    tcase_add_test(tc, test_delete_ends_the_run);
    tcase_add_test(tc, test_run_outlives_a_compress);
    tcase_add_test(tc, test_longest_session_id);
    tcase_add_test(tc, test_huge_numbers);
    tcase_add_test(tc, test_lane_bounded);
    tcase_add_test(tc, test_native_delete_forgets_thread);
    suite_add_tcase(s, tc);
    return s;
}
