/*
 * check_integration - the real reflexor binary on 127.0.0.1, driven over HTTP
 * and SSE with libcurl (SPEC 4). Each TCase starts its own server (unchecked
 * fixture, in the runner's process) and every test talks to it.
 * No timings are asserted: waits have generous limits and only bound hangs.
 */
#include <arpa/inet.h>
#include <check.h>
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/integration/itest.h"

#define WAIT_MS 20000

static struct itest_server srv;

static const char base_config[] =
    "{\"brain\":{\"builtin\":{\"chunk_chars\":3,\"chunk_delay_ms\":15}},"
    " \"limits\":{\"body_max\":4096, \"sse_queue_max\":256},"
    " \"sse\":{\"retry_ms\":1000, \"ping_ms\":500},"
    " \"api\":{\"allow_agent_inputs\":false},"
    " \"tools\":[{\"name\":\"sleeper\",\"description\":\"hangs\","
    "   \"parameters\":{\"type\":\"object\"},"
    "   \"command\":[\"/bin/sleep\",\"60\"],\"timeout_ms\":300}]}";

static const char agent_config[] =
    "{\"brain\":{\"builtin\":{\"chunk_chars\":3,\"chunk_delay_ms\":15}},"
    " \"api\":{\"allow_agent_inputs\":true},"
    " \"tools\":[{\"name\":\"sleeper\",\"description\":\"hangs\","
    "   \"parameters\":{\"type\":\"object\"},"
    "   \"command\":[\"/bin/sleep\",\"60\"],\"timeout_ms\":300}]}";

static const char slow_config[] =
    "{\"brain\":{\"builtin\":{\"chunk_chars\":2,\"chunk_delay_ms\":15,"
    "\"slow_factor\":10}}}";

static const char auth_config[] = "{\"auth\":{\"token\":\"s3cret\"}}";

static void start_with(const char *config)
{
    ck_assert_msg(itest_server_start(&srv, config, NULL) == 0, "server did not start");
}

static void start_base(void)
{
    start_with(base_config);
}

static void start_agent(void)
{
    start_with(agent_config);
}

static void start_slow(void)
{
    start_with(slow_config);
}

static void start_auth(void)
{
    start_with(auth_config);
}

static void stop(void)
{
    ck_assert_int_eq(itest_server_stop(&srv), 0);
}

/* ---- helpers ------------------------------------------------------------------ */

static char *new_session(void)
{
    char url[128];
    struct itest_resp r;
    json_t *j;
    char *id;

    snprintf(url, sizeof(url), "%s/api/reflexor/sessions", srv.base);
    ck_assert_int_eq(itest_request("POST", url, "", NULL, &r), 0);
    ck_assert_int_eq(r.status, 201);
    j = itest_resp_json(&r);
    ck_assert_ptr_nonnull(j);
    id = strdup(json_string_value(json_object_get(j, "id")));
    json_decref(j);
    itest_resp_release(&r);
    return id;
}

static void session_url(char *buf, size_t n, const char *sid, const char *tail)
{
    snprintf(buf, n, "%s/api/reflexor/sessions/%s%s", srv.base, sid, tail);
}

/* The session's state once pred holds (fails the test after WAIT_MS). */
static json_t *state_when(const char *sid, bool (*pred)(json_t *, void *), void *arg)
{
    char url[256];
    json_t *j;

    session_url(url, sizeof(url), sid, "");
    j = itest_poll_json(url, pred, arg, WAIT_MS);
    ck_assert_msg(j && pred(j, arg), "state never reached the expected shape");
    return j;
}

static json_t *last_assistant(json_t *state)
{
    json_t *a = json_object_get(state, "assistantMessages");

    return json_array_get(a, json_array_size(a) - 1);
}

static bool has_complete_answer(json_t *state, void *arg)
{
    json_t *m = last_assistant(state);
    const char *st = json_string_value(json_object_get(m, "status"));

    (void)arg;
    return st && !strcmp(st, "complete") &&
           json_array_size(json_object_get(state, "assistantMessages")) >=
               (size_t)(arg ? *(int *)arg : 1);
}

static bool has_streaming(json_t *state, void *arg)
{
    const char *st = json_string_value(json_object_get(last_assistant(state), "status"));

    (void)arg;
    return st && !strcmp(st, "streaming");
}

static long post(const char *sid, const char *json, json_t **answer)
{
    return itest_post_input(&srv, sid, json, answer);
}

/* ---- the conversation -------------------------------------------------------- */

START_TEST(test_streamed_answer_matches_final)
{
    char *sid = new_session(), url[512];
    struct itest_sse msg;
    json_t *st, *ev;
    const char *mid;
    char text[4096] = "";
    int i, done;

    ck_assert_int_eq(post(sid,
                          "{\"type\":\"user-send-message\",\"messageId\":\"u1\","
                          "\"content\":\"tell me a story about streams\"}",
                          NULL),
                     200);
    st = state_when(sid, has_streaming, NULL);
    mid = json_string_value(json_object_get(last_assistant(st), "id"));
    session_url(url, sizeof(url), sid, "/messages/");
    strcat(url, mid);
    ck_assert_int_eq(itest_sse_open(&msg, url, NULL), 0);
    done = itest_sse_wait(&msg, 0, "complete", NULL, NULL, WAIT_MS);
    ck_assert_int_ge(done, 1);
    ev = itest_sse_event(&msg, 0);
    ck_assert_str_eq(json_string_value(json_object_get(ev, "type")), "snapshot");
    strcat(text, json_string_value(json_object_get(ev, "content")));
    for (i = 1; i < done; i++) {
        ev = itest_sse_event(&msg, (size_t)i);
        ck_assert_str_eq(json_string_value(json_object_get(ev, "type")), "chunk");
        strcat(text, json_string_value(json_object_get(ev, "delta")));
    }
    ev = itest_sse_event(&msg, (size_t)done);
    ck_assert_str_eq(text, json_string_value(json_object_get(ev, "content")));
    ck_assert_msg(strstr(text, "tell me a story about streams"), "echo answer: %s", text);
    ck_assert(itest_sse_wait_done(&msg, WAIT_MS));
    ck_assert_str_eq(msg.content_type, "text/event-stream; charset=utf-8");
    itest_sse_close(&msg);
    json_decref(st);
    /* The final state holds the same text. */
    st = state_when(sid, has_complete_answer, NULL);
    ck_assert_str_eq(json_string_value(json_object_get(last_assistant(st), "content")),
                     text);
    json_decref(st);
    free(sid);
}
END_TEST

static bool tool_answered(json_t *state, void *arg)
{
    json_t *rec = json_array_get(json_object_get(state, "toolCallRecords"), 0);

    return json_is_object(json_object_get(rec, "result")) &&
           has_complete_answer(state, arg);
}

START_TEST(test_arithmetic_calls_calculator)
{
    char *sid = new_session(), url[256];
    struct itest_sse ev;
    json_t *st, *rec;
    const char *answer;

    session_url(url, sizeof(url), sid, "/moorex");
    ck_assert_int_eq(itest_sse_open(&ev, url, NULL), 0);
    ck_assert_int_ge(itest_sse_wait(&ev, 0, "state-updated", NULL, NULL, WAIT_MS), 0);
    ck_assert_int_eq(post(sid,
                          "{\"type\":\"user-send-message\",\"content\":\"what is "
                          "12*(3+4)?\"}",
                          NULL),
                     200);
    st = state_when(sid, tool_answered, NULL);
    rec = json_array_get(json_object_get(st, "toolCallRecords"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(rec, "name")), "calculator");
    ck_assert(json_is_true(json_object_get(json_object_get(rec, "result"), "isSuccess")));
    ck_assert_str_eq(
        json_string_value(json_object_get(json_object_get(rec, "result"), "content")),
        "84");
    answer = json_string_value(json_object_get(last_assistant(st), "content"));
    ck_assert_msg(strstr(answer, "84"), "answer lacks the value: %s", answer);
    /* The stream told the story: the brain's call, the toolkit's answer, effects. */
    ck_assert_int_ge(itest_sse_wait(&ev, 0, "effect-started", NULL, NULL, WAIT_MS), 0);
    ck_assert_int_ge(
        itest_sse_wait(&ev, 0, "effect-completed", "key", "request-toolkit-", 100), -1);
    {
        int i = itest_sse_wait(&ev, 0, "input-received", NULL, NULL, WAIT_MS);
        bool saw_call = false, saw_result = false;

        for (; i >= 0 && (size_t)i < itest_sse_count(&ev); i++) {
            json_t *in = json_object_get(itest_sse_event(&ev, (size_t)i), "input");
            const char *t = json_string_value(json_object_get(in, "type"));

            saw_call |= t && !strcmp(t, "brain-call-tools");
            saw_result |= t && !strcmp(t, "toolkit-respond");
        }
        ck_assert(saw_call && saw_result);
    }
    itest_sse_close(&ev);
    json_decref(st);
    free(sid);
}
END_TEST

static bool user_count_is(json_t *state, void *arg)
{
    return json_array_size(json_object_get(state, "userMessages")) ==
           (size_t) * (int *)arg;
}

START_TEST(test_sessions_isolated_and_default_routes)
{
    char *a = new_session(), *b = new_session(), url[256];
    struct itest_resp r;
    int one = 1, zero = 0;
    json_t *st;

    ck_assert_int_eq(
        post(a, "{\"type\":\"user-send-message\",\"content\":\"only in a\"}", NULL), 200);
    st = state_when(a, user_count_is, &one);
    json_decref(st);
    st = state_when(b, user_count_is, &zero);
    json_decref(st);
    /* The seed's routes are the session "default". */
    snprintf(url, sizeof(url), "%s/api/reflexor/moorex", srv.base);
    ck_assert_int_eq(itest_request("POST", url,
                                   "{\"type\":\"user-send-message\",\"messageId\":\"d1\","
                                   "\"content\":\"to default\"}",
                                   NULL, &r),
                     0);
    ck_assert_int_eq(r.status, 200);
    itest_resp_release(&r);
    st = state_when("default", user_count_is, &one);
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_array_get(json_object_get(st, "userMessages"), 0), "id")),
                     "d1");
    json_decref(st);
    /* Listed with a title from the first message. */
    snprintf(url, sizeof(url), "%s/api/reflexor/sessions", srv.base);
    ck_assert_int_eq(itest_request("GET", url, NULL, NULL, &r), 0);
    ck_assert_ptr_nonnull(strstr(r.body, "\"title\":\"only in a\""));
    itest_resp_release(&r);
    /* Delete, then it is gone. */
    session_url(url, sizeof(url), b, "");
    ck_assert_int_eq(itest_request("DELETE", url, NULL, NULL, &r), 0);
    ck_assert_int_eq(r.status, 204);
    itest_resp_release(&r);
    ck_assert_int_eq(itest_request("GET", url, NULL, NULL, &r), 0);
    ck_assert_int_eq(r.status, 404);
    itest_resp_release(&r);
    free(a);
    free(b);
}
END_TEST

START_TEST(test_sse_first_state_and_resync)
{
    char *sid = new_session(), url[256], last[32];
    struct itest_sse ev;
    json_t *first, *st;
    int i;

    session_url(url, sizeof(url), sid, "/moorex");
    ck_assert_int_eq(itest_sse_open(&ev, url, NULL), 0);
    ck_assert_int_eq(itest_sse_wait(&ev, 0, "state-updated", NULL, NULL, WAIT_MS), 0);
    ck_assert_ptr_nonnull(strstr(ev.raw, "retry: 1000\n\n"));
    first = json_object_get(itest_sse_event(&ev, 0), "state");
    ck_assert_int_eq(json_array_size(json_object_get(first, "userMessages")), 0);
    ck_assert_int_eq(
        post(sid, "{\"type\":\"user-send-message\",\"content\":\"hello\"}", NULL), 200);
    i = itest_sse_wait(&ev, 1, "state-updated", NULL, NULL, WAIT_MS);
    ck_assert_int_gt(i, 0);
    /* Every event carries an id. */
    ck_assert_ptr_nonnull(strstr(ev.raw, "id: 1\ndata: {\"type\":\"input-received\""));
    snprintf(last, sizeof(last), "1");
    itest_sse_close(&ev);
    ck_assert_str_eq(ev.content_type, "text/event-stream; charset=utf-8");
    /* Reconnect: the current state first, never an older one. */
    ck_assert_int_eq(itest_sse_open(&ev, url, last), 0);
    ck_assert_int_eq(itest_sse_wait(&ev, 0, "state-updated", NULL, NULL, WAIT_MS), 0);
    st = json_object_get(itest_sse_event(&ev, 0), "state");
    ck_assert_int_eq(json_array_size(json_object_get(st, "userMessages")), 1);
    /* Pings keep idle streams alive (ping_ms is 500 here). */
    st = state_when(sid, has_complete_answer, NULL);
    json_decref(st);
    usleep(1200 * 1000);
    pthread_mutex_lock(&ev.lock);
    ck_assert_ptr_nonnull(strstr(ev.raw, ": ping\n\n"));
    pthread_mutex_unlock(&ev.lock);
    itest_sse_close(&ev);
    free(sid);
}
END_TEST

/* Apply one RFC 6902 op of the kinds the server sends ("/k" or "/list/<i|->"). */
static void apply_patch_op(json_t *doc, json_t *op)
{
    const char *path = json_string_value(json_object_get(op, "path"));
    const char *slash = strchr(path + 1, '/');
    json_t *value = json_object_get(op, "value"), *list;
    char key[64];

    if (!slash) {
        json_object_set(doc, path + 1, value);
        return;
    }
    snprintf(key, sizeof(key), "%.*s", (int)(slash - path - 1), path + 1);
    list = json_object_get(doc, key);
    if (!strcmp(slash + 1, "-"))
        json_array_append(list, value);
    else
        json_array_set(list, strtoul(slash + 1, NULL, 10), value);
}

START_TEST(test_patch_mode_rebuilds_state)
{
    char *sid = new_session(), url[256];
    struct itest_sse ev;
    json_t *doc, *st;
    size_t n;

    session_url(url, sizeof(url), sid, "/moorex?mode=patch");
    ck_assert_int_eq(itest_sse_open(&ev, url, NULL), 0);
    ck_assert_int_eq(itest_sse_wait(&ev, 0, "state-updated", NULL, NULL, WAIT_MS), 0);
    ck_assert_int_eq(post(sid,
                          "{\"type\":\"user-send-message\",\"content\":\"what is "
                          "6*7?\"}",
                          NULL),
                     200);
    st = state_when(sid, tool_answered, NULL);
    /* Every change after the first state came as a patch, never a whole state. */
    ck_assert_int_ge(itest_sse_wait(&ev, 1, "state-patch", NULL, NULL, WAIT_MS), 1);
    usleep(200 * 1000);
    ck_assert_int_lt(itest_sse_wait(&ev, 1, "state-updated", NULL, NULL, 10), 0);
    doc = json_deep_copy(json_object_get(itest_sse_event(&ev, 0), "state"));
    n = itest_sse_count(&ev);
    for (size_t i = 1; i < n; i++) {
        json_t *e = itest_sse_event(&ev, i), *op;
        const char *t = json_string_value(json_object_get(e, "type"));
        size_t k;

        if (t && !strcmp(t, "state-patch"))
            json_array_foreach(json_object_get(e, "patch"), k, op)
                apply_patch_op(doc, op);
    }
    ck_assert_msg(json_equal(doc, st), "patched state differs from GET state");
    json_decref(doc);
    json_decref(st);
    itest_sse_close(&ev);
    free(sid);
}
END_TEST

START_TEST(test_retry_is_stored_once)
{
    char *sid = new_session();
    const char *msg = "{\"type\":\"user-send-message\",\"messageId\":\"same\","
                      "\"content\":\"only once\"}";
    json_t *a1, *a2, *st;
    int one = 1;

    ck_assert_int_eq(post(sid, msg, &a1), 200);
    ck_assert_int_eq(post(sid, msg, &a2), 200);
    ck_assert(json_is_true(json_object_get(a2, "unchanged")));
    ck_assert_str_eq(json_string_value(json_object_get(a2, "messageId")), "same");
    st = state_when(sid, user_count_is, &one);
    json_decref(st);
    json_decref(a1);
    json_decref(a2);
    free(sid);
}
END_TEST

/* ---- errors ------------------------------------------------------------------ */

static void expect_error(const char *sid, const char *body, const char *const *headers,
                         long status, const char *code, const char *field)
{
    char url[256];
    struct itest_resp r;
    json_t *j;

    session_url(url, sizeof(url), sid, "/moorex");
    ck_assert_int_eq(itest_request("POST", url, body, headers, &r), 0);
    ck_assert_msg(r.status == status, "%s -> %ld, want %ld (%s)", body, r.status, status,
                  r.body);
    ck_assert_str_eq(r.content_type, "application/json");
    j = itest_resp_json(&r);
    ck_assert_ptr_nonnull(j);
    ck_assert_str_eq(json_string_value(json_object_get(j, "error")), code);
    ck_assert_ptr_nonnull(json_string_value(json_object_get(j, "message")));
    if (field)
        ck_assert_str_eq(json_string_value(json_object_get(j, "field")), field);
    json_decref(j);
    itest_resp_release(&r);
}

START_TEST(test_every_error)
{
    char *sid = new_session(), big[6000], url[256];
    static const char *const html[] = {"Content-Type: text/html", NULL};
    struct itest_resp r;
    json_t *rej;
    int one = 1;
    json_t *st;

    expect_error(sid, "{not json", NULL, 400, "invalid-json", NULL);
    expect_error(sid, "{\"type\":\"user-send-message\",\"content\":5}", NULL, 400,
                 "invalid-input", "content");
    expect_error(sid, "{\"type\":\"user-send-message\",\"content\":\"  \"}", NULL, 400,
                 "invalid-input", "content");
    expect_error(sid, "{\"type\":\"user-dance\"}", NULL, 400, "invalid-input", "type");
    expect_error(sid, "[1,2]", NULL, 400, "invalid-input", "input");
    expect_error(sid,
                 "{\"type\":\"brain-send-message-start\",\"calledBrainAt\":1,"
                 "\"messageId\":\"x\"}",
                 NULL, 403, "forbidden", "type");
    expect_error(sid,
                 "{\"type\":\"toolkit-respond\",\"toolCallId\":\"c\",\"result\":\"r\"}",
                 NULL, 403, "forbidden", "type");
    expect_error(sid, "{\"type\":\"user-send-message\",\"content\":\"hi\"}", html, 415,
                 "unsupported-media-type", NULL);
    memset(big, 'a', sizeof(big));
    memcpy(big, "{\"type\":\"user-send-message\",\"content\":\"", 39);
    memcpy(big + sizeof(big) - 3, "\"}", 3);
    expect_error(sid, big, NULL, 413, "too-large", NULL);
    expect_error("nope", "{\"type\":\"user-cancel\"}", NULL, 404, "not-found", NULL);
    /* 409: the same id with other content. */
    ck_assert_int_eq(post(sid,
                          "{\"type\":\"user-send-message\",\"messageId\":\"k\","
                          "\"content\":\"first\"}",
                          NULL),
                     200);
    ck_assert_int_eq(post(sid,
                          "{\"type\":\"user-send-message\",\"messageId\":\"k\","
                          "\"content\":\"second\"}",
                          &rej),
                     409);
    ck_assert_str_eq(json_string_value(json_object_get(rej, "error")), "rejected");
    ck_assert_str_eq(json_string_value(json_object_get(rej, "reason")), "duplicate-id");
    json_decref(rej);
    /* Nothing bad changed anything. */
    st = state_when(sid, user_count_is, &one);
    json_decref(st);
    /* text/plain is accepted, as the original did. */
    {
        static const char *const plain[] = {"Content-Type: text/plain;charset=UTF-8",
                                            NULL};

        session_url(url, sizeof(url), sid, "/moorex");
        ck_assert_int_eq(
            itest_request("POST", url, "{\"type\":\"user-cancel\"}", plain, &r), 0);
        ck_assert_int_eq(r.status, 200);
        itest_resp_release(&r);
    }
    /* An id of control characters escapes to six times its size: still a 200. */
    {
        char body[1024];
        int n = snprintf(body, sizeof(body),
                         "{\"type\":\"user-send-message\",\"messageId\":\"");

        for (int i = 0; i < 128; i++)
            n += snprintf(body + n, sizeof(body) - (size_t)n, "\\u0001");
        snprintf(body + n, sizeof(body) - (size_t)n, "\",\"content\":\"hi\"}");
        ck_assert_int_eq(post(sid, body, NULL), 200);
    }
    /* A path that is not UTF-8 still gets a JSON error, not a closed socket. */
    snprintf(url, sizeof(url), "%s/api/reflexor/sessions/%%FF%%FE", srv.base);
    ck_assert_int_eq(itest_request("GET", url, NULL, NULL, &r), 0);
    ck_assert_int_eq(r.status, 404);
    ck_assert_str_eq(r.content_type, "application/json");
    itest_resp_release(&r);
    /* Without a database there is no log to read. */
    session_url(url, sizeof(url), sid, "/history");
    ck_assert_int_eq(itest_request("GET", url, NULL, NULL, &r), 0);
    ck_assert_int_eq(r.status, 501);
    itest_resp_release(&r);
    /* Unknown routes and methods. */
    session_url(url, sizeof(url), sid, "/moorex");
    ck_assert_int_eq(itest_request("PUT", url, "{}", NULL, &r), 0);
    ck_assert_int_eq(r.status, 405);
    itest_resp_release(&r);
    session_url(url, sizeof(url), sid, "/messages/unknown");
    ck_assert_int_eq(itest_request("GET", url, NULL, NULL, &r), 0);
    ck_assert_int_eq(r.status, 404);
    ck_assert_str_eq(r.content_type, "application/json");
    itest_resp_release(&r);
    free(sid);
}
END_TEST

START_TEST(test_auth_token)
{
    char url[256];
    struct itest_resp r;
    static const char *const good[] = {"Authorization: Bearer s3cret", NULL};
    static const char *const bad[] = {"Authorization: Bearer nope", NULL};

    snprintf(url, sizeof(url), "%s/api/reflexor/sessions", srv.base);
    ck_assert_int_eq(itest_request("GET", url, NULL, NULL, &r), 0);
    ck_assert_int_eq(r.status, 401);
    itest_resp_release(&r);
    ck_assert_int_eq(itest_request("GET", url, NULL, bad, &r), 0);
    ck_assert_int_eq(r.status, 401);
    itest_resp_release(&r);
    ck_assert_int_eq(itest_request("GET", url, NULL, good, &r), 0);
    ck_assert_int_eq(r.status, 200);
    itest_resp_release(&r);
    strcat(url, "?token=s3cret");
    ck_assert_int_eq(itest_request("GET", url, NULL, NULL, &r), 0);
    ck_assert_int_eq(r.status, 200);
    itest_resp_release(&r);
    /* Health stays open for probes. */
    snprintf(url, sizeof(url), "%s/healthz", srv.base);
    ck_assert_int_eq(itest_request("GET", url, NULL, NULL, &r), 0);
    ck_assert_int_eq(r.status, 200);
    itest_resp_release(&r);
}
END_TEST

/* ---- stop, slow clients, tools -------------------------------------------- */

static bool stopped_with_text(json_t *state, void *arg)
{
    json_t *m = last_assistant(state);
    const char *st = json_string_value(json_object_get(m, "status"));

    (void)arg;
    return st && !strcmp(st, "stopped");
}

START_TEST(test_cancel_keeps_partial_text)
{
    char *sid = new_session(), url[512];
    struct itest_sse msg;
    json_t *st;
    const char *mid, *content;
    int stopped;

    ck_assert_int_eq(post(sid,
                          "{\"type\":\"user-send-message\",\"content\":\"a long "
                          "answer please, slowly, with many words in it\"}",
                          NULL),
                     200);
    st = state_when(sid, has_streaming, NULL);
    mid = json_string_value(json_object_get(last_assistant(st), "id"));
    session_url(url, sizeof(url), sid, "/messages/");
    strcat(url, mid);
    ck_assert_int_eq(itest_sse_open(&msg, url, NULL), 0);
    /* Some text has streamed: then stop. */
    ck_assert_int_gt(itest_sse_wait(&msg, 1, "chunk", NULL, NULL, WAIT_MS), 0);
    ck_assert_int_eq(post(sid, "{\"type\":\"user-cancel\"}", NULL), 200);
    stopped = itest_sse_wait(&msg, 0, "stopped", NULL, NULL, WAIT_MS);
    ck_assert_int_gt(stopped, 0);
    json_decref(st);
    st = state_when(sid, stopped_with_text, NULL);
    content = json_string_value(json_object_get(last_assistant(st), "content"));
    ck_assert_msg(*content, "the partial text was lost");
    ck_assert_str_eq(content, json_string_value(json_object_get(
                                  itest_sse_event(&msg, (size_t)stopped), "content")));
    /* Nothing is wanted after a stop: no new ask starts. */
    ck_assert_int_eq(json_integer_value(json_object_get(st, "calledBrainAt")),
                     json_integer_value(json_object_get(st, "updatedAt")));
    itest_sse_close(&msg);
    json_decref(st);
    free(sid);
}
END_TEST

/* A client that subscribes and never reads a byte. */
static int stuck_client(const char *path)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)srv.port)};
    char req[512];
    int fd = socket(AF_INET, SOCK_STREAM, 0), small = 4096;

    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    snprintf(req, sizeof(req),
             "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n",
             path);
    ck_assert_int_eq(write(fd, req, strlen(req)), (ssize_t)strlen(req));
    return fd;
}

START_TEST(test_stuck_client_does_not_stall_others)
{
    char *sid = new_session(), url[256], path[256], body[4000];
    struct itest_sse ev;
    struct itest_resp r;
    int fd, n = 100, seen = 0;

    /* A question of pace, not of leaks: under valgrind the reader is too slow to
       tell a stall from a slow server. */
    if (getenv("RX_SERVER_WRAPPER")) {
        free(sid);
        return;
    }
    snprintf(path, sizeof(path), "/api/reflexor/sessions/%s/moorex", sid);
    fd = stuck_client(path);
    session_url(url, sizeof(url), sid, "/moorex");
    ck_assert_int_eq(itest_sse_open(&ev, url, NULL), 0);
    ck_assert_int_eq(itest_sse_wait(&ev, 0, "state-updated", NULL, NULL, WAIT_MS), 0);
    /* Grow the state so each event is big and the stuck socket fills up. After
       each input the reading client must see it: a stall would time out here. */
    for (int i = 0, at = 0; i < n; i++) {
        int len = snprintf(body, sizeof(body),
                           "{\"type\":\"user-send-message\",\"messageId\":\"m%d\","
                           "\"content\":\"",
                           i);

        memset(body + len, 'x', 1500);
        strcpy(body + len + 1500, "\"}");
        ck_assert_int_eq(post(sid, body, NULL), 200);
        at = itest_sse_wait(&ev, (size_t)at, "input-received", NULL, NULL, WAIT_MS);
        ck_assert_int_ge(at, 0);
        at++;
        seen++;
    }
    ck_assert_int_ge(seen, n);
    /* And the stuck one was dropped rather than buffered without end. */
    snprintf(url, sizeof(url), "%s/metrics", srv.base);
    ck_assert_int_eq(itest_request("GET", url, NULL, NULL, &r), 0);
    ck_assert_msg(!strstr(r.body, "reflexor_sse_dropped_total 0\n"), "%s", r.body);
    itest_resp_release(&r);
    close(fd);
    itest_sse_close(&ev);
    free(sid);
}
END_TEST

static bool tool_failed(json_t *state, void *arg)
{
    json_t *res = json_object_get(
        json_array_get(json_object_get(state, "toolCallRecords"), 0), "result");

    (void)arg;
    return json_is_object(res);
}

START_TEST(test_hanging_command_tool_is_killed)
{
    char *sid = new_session();
    json_t *st, *res;

    /* An external brain (allowed here) calls the hanging tool. */
    ck_assert_int_eq(post(sid,
                          "{\"type\":\"brain-call-tools\",\"calledBrainAt\":0,"
                          "\"toolCalls\":{\"t1\":{\"name\":\"sleeper\","
                          "\"parameters\":\"{}\"}}}",
                          NULL),
                     200);
    st = state_when(sid, tool_failed, NULL);
    res = json_object_get(json_array_get(json_object_get(st, "toolCallRecords"), 0),
                          "result");
    ck_assert(json_is_false(json_object_get(res, "isSuccess")));
    ck_assert_msg(strstr(json_string_value(json_object_get(res, "error")), "time"),
                  "error: %s", json_string_value(json_object_get(res, "error")));
    json_decref(st);
    free(sid);
}
END_TEST

START_TEST(test_message_json_for_plain_clients)
{
    char *sid = new_session(), url[512];
    struct itest_resp r;
    json_t *st, *j;

    ck_assert_int_eq(
        post(sid, "{\"type\":\"user-send-message\",\"content\":\"json please\"}", NULL),
        200);
    st = state_when(sid, has_complete_answer, NULL);
    session_url(url, sizeof(url), sid, "/messages/");
    strcat(url, json_string_value(json_object_get(last_assistant(st), "id")));
    ck_assert_int_eq(itest_request("GET", url, NULL, NULL, &r), 0);
    ck_assert_int_eq(r.status, 200);
    j = itest_resp_json(&r);
    ck_assert(json_is_true(json_object_get(j, "isComplete")));
    ck_assert_str_eq(json_string_value(json_object_get(j, "status")), "complete");
    ck_assert_str_eq(json_string_value(json_object_get(j, "content")),
                     json_string_value(json_object_get(last_assistant(st), "content")));
    json_decref(j);
    json_decref(st);
    itest_resp_release(&r);
    free(sid);
}
END_TEST

START_TEST(test_static_files_and_probes)
{
    char url[256];
    struct itest_resp r;
    CURL *c;
    long code = 0;

    snprintf(url, sizeof(url), "%s/", srv.base);
    ck_assert_int_eq(itest_request("GET", url, NULL, NULL, &r), 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.content_type, "text/html; charset=utf-8");
    itest_resp_release(&r);
    snprintf(url, sizeof(url), "%s/%%2e%%2e/%%2e%%2e/etc/passwd", srv.base);
    ck_assert_int_eq(itest_request("GET", url, NULL, NULL, &r), 0);
    ck_assert_msg(r.status == 403 || r.status == 404, "status %ld", r.status);
    ck_assert_ptr_null(strstr(r.body, "root:"));
    itest_resp_release(&r);
    /* A raw "..": curl would normalise it away unless told not to. */
    c = curl_easy_init();
    snprintf(url, sizeof(url), "%s/../../etc/passwd", srv.base);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(c);
    ck_assert_msg(code == 403 || code == 404, "status %ld", code);
    snprintf(url, sizeof(url), "%s/healthz", srv.base);
    ck_assert_int_eq(itest_request("GET", url, NULL, NULL, &r), 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(strstr(r.body, "\"status\":\"ok\""));
    itest_resp_release(&r);
    snprintf(url, sizeof(url), "%s/metrics", srv.base);
    ck_assert_int_eq(itest_request("GET", url, NULL, NULL, &r), 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(strstr(r.body, "reflexor_inputs_total{verdict=\"accepted\"}"));
    ck_assert_ptr_nonnull(strstr(r.body, "reflexor_sessions "));
    itest_resp_release(&r);
}
END_TEST

START_TEST(test_sigterm_with_open_streams)
{
    struct itest_server own;
    struct itest_sse a, b;
    char url[256];

    ck_assert_int_eq(itest_server_start(&own, slow_config, NULL), 0);
    snprintf(url, sizeof(url), "%s/api/reflexor/moorex", own.base);
    ck_assert_int_eq(itest_sse_open(&a, url, NULL), 0);
    ck_assert_int_eq(itest_sse_open(&b, url, NULL), 0);
    ck_assert_int_eq(itest_sse_wait(&a, 0, "state-updated", NULL, NULL, WAIT_MS), 0);
    ck_assert_int_eq(itest_sse_wait(&b, 0, "state-updated", NULL, NULL, WAIT_MS), 0);
    ck_assert_int_eq(
        itest_post_input(&own, "default",
                         "{\"type\":\"user-send-message\",\"content\":\"keep "
                         "talking while I stop you\"}",
                         NULL),
        200);
    ck_assert_int_ge(itest_sse_wait(&a, 0, "effect-started", NULL, NULL, WAIT_MS), 0);
    /* Effects run, two streams are open: the stop is still clean. */
    ck_assert_int_eq(itest_server_stop(&own), 0);
    ck_assert(itest_sse_wait_done(&a, WAIT_MS));
    ck_assert(itest_sse_wait_done(&b, WAIT_MS));
    itest_sse_close(&a);
    itest_sse_close(&b);
}
END_TEST

/* ---- the log over HTTP: history, time travel, fork ---------------------------- */

static bool answered_twice(json_t *state, void *arg)
{
    int two = 2;

    (void)arg;
    return has_complete_answer(state, &two);
}

static char db_path[64];

static void start_logged(void)
{
    const char *args[] = {"--db", db_path, NULL};
    int fd;

    snprintf(db_path, sizeof(db_path), "/tmp/rx-itest-db-XXXXXX");
    fd = mkstemp(db_path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    unlink(db_path); /* a fresh file, made by the server */
    ck_assert_msg(itest_server_start(&srv, base_config, args) == 0,
                  "server did not start");
}

static void remove_db(void)
{
    char p[96];

    unlink(db_path);
    snprintf(p, sizeof(p), "%s-wal", db_path);
    unlink(p);
    snprintf(p, sizeof(p), "%s-shm", db_path);
    unlink(p);
}

static void stop_logged(void)
{
    stop();
    remove_db();
}

/* Restart on the same file: every session and every message comes back. */
START_TEST(test_restart_keeps_sessions)
{
    const char *args[] = {"--db", db_path, NULL};
    char *sid = new_session();
    json_t *before, *after;
    int one = 1;

    ck_assert_int_eq(post(sid,
                          "{\"type\":\"user-send-message\",\"content\":\"remember "
                          "me\"}",
                          NULL),
                     200);
    before = state_when(sid, has_complete_answer, &one);
    ck_assert_int_eq(itest_server_stop(&srv), 0);
    ck_assert_int_eq(itest_server_start(&srv, base_config, args), 0);
    after = state_when(sid, has_complete_answer, &one);
    ck_assert(json_equal(before, after));
    json_decref(before);
    json_decref(after);
    free(sid);
}
END_TEST

START_TEST(test_history_at_and_fork)
{
    char *sid = new_session(), url[512];
    struct itest_resp r;
    json_t *st, *hist, *at, *forked;
    const char *fid;
    size_t n;

    ck_assert_int_eq(post(sid,
                          "{\"type\":\"user-send-message\",\"messageId\":\"h1\","
                          "\"content\":\"first\"}",
                          NULL),
                     200);
    st = state_when(sid, has_complete_answer, NULL);
    json_decref(st);
    ck_assert_int_eq(post(sid,
                          "{\"type\":\"user-send-message\",\"messageId\":\"h2\","
                          "\"content\":\"second\"}",
                          NULL),
                     200);
    st = state_when(sid, answered_twice, NULL);
    /* history: every accepted input, numbered from 1. */
    session_url(url, sizeof(url), sid, "/history");
    ck_assert_int_eq(itest_request("GET", url, NULL, NULL, &r), 0);
    ck_assert_int_eq(r.status, 200);
    hist = itest_resp_json(&r);
    itest_resp_release(&r);
    n = json_array_size(hist);
    ck_assert_uint_ge(n, 6); /* 2 x (user, start, complete) */
    for (size_t i = 0; i < n; i++)
        ck_assert_int_eq(
            json_integer_value(json_object_get(json_array_get(hist, i), "seq")),
            (json_int_t)i + 1);
    /* ?at=<last> is the current state; ?at=1 holds only the first message. */
    snprintf(url, sizeof(url), "%s/api/reflexor/sessions/%s?at=%zu", srv.base, sid, n);
    ck_assert_int_eq(itest_request("GET", url, NULL, NULL, &r), 0);
    at = itest_resp_json(&r);
    itest_resp_release(&r);
    ck_assert(json_equal(at, st));
    json_decref(at);
    snprintf(url, sizeof(url), "%s/api/reflexor/sessions/%s?at=1", srv.base, sid);
    ck_assert_int_eq(itest_request("GET", url, NULL, NULL, &r), 0);
    at = itest_resp_json(&r);
    itest_resp_release(&r);
    ck_assert_int_eq(json_array_size(json_object_get(at, "userMessages")), 1);
    ck_assert_int_eq(json_array_size(json_object_get(at, "assistantMessages")), 0);
    json_decref(at);
    snprintf(url, sizeof(url), "%s/api/reflexor/sessions/%s?at=99999", srv.base, sid);
    ck_assert_int_eq(itest_request("GET", url, NULL, NULL, &r), 0);
    ck_assert_int_eq(r.status, 400);
    itest_resp_release(&r);
    /* fork at 1: a new session with the first message, answered on its own. */
    session_url(url, sizeof(url), sid, "/fork");
    ck_assert_int_eq(itest_request("POST", url, "{\"at\":1}", NULL, &r), 0);
    ck_assert_int_eq(r.status, 201);
    forked = itest_resp_json(&r);
    itest_resp_release(&r);
    fid = json_string_value(json_object_get(forked, "id"));
    ck_assert_ptr_nonnull(fid);
    json_decref(st);
    st = state_when(fid, has_complete_answer, NULL);
    ck_assert_int_eq(json_array_size(json_object_get(st, "userMessages")), 1);
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_array_get(json_object_get(st, "userMessages"), 0), "id")),
                     "h1");
    ck_assert_int_eq(itest_request("POST", url, "{\"at\":\"x\"}", NULL, &r), 0);
    ck_assert_int_eq(r.status, 400);
    itest_resp_release(&r);
    json_decref(st);
    json_decref(forked);
    json_decref(hist);
    free(sid);
}
END_TEST

/* A bad config or flag stops the server before it listens: no port line. */
START_TEST(test_bad_config_is_refused)
{
    static const char *const bad[] = {
        "{\"limits\":{\"body_max\":\"big\"}}",
        "{\"brain\":{\"provider\":\"oracle\"}}",
        "{\"api_prefix\":\"no-slash\"}",
        "{\"listen\":42}",
        "{\"brain\":{\"builtin\":{\"chunk_chars\":-1}}}",
        "{\"tools\":[{\"name\":\"x\"}]}",
        "[1, 2",
    };
    const char *flag[] = {"--brain", "nope", NULL};
    struct itest_server s;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(itest_server_start(&s, bad[i], NULL) != 0, "started with %s",
                      bad[i]);
    ck_assert_int_ne(itest_server_start(&s, "{}", flag), 0);
}
END_TEST

START_TEST(test_bad_database_is_refused)
{
    static const char garbage[] = "this is not a database, not at all, no\n";
    char path[] = "/tmp/rx-baddb-XXXXXX", arg[64];
    const char *args[] = {"--db", arg, NULL};
    struct itest_server bad;
    int fd = mkstemp(path);

    ck_assert_int_ge(fd, 0);
    for (int i = 0; i < 200; i++)
        ck_assert_int_eq(write(fd, garbage, sizeof(garbage) - 1),
                         (ssize_t)sizeof(garbage) - 1);
    close(fd);
    snprintf(arg, sizeof(arg), "%s", path);
    /* It must refuse to start (no port line), not crash or reset the file. */
    ck_assert_int_ne(itest_server_start(&bad, "{}", args), 0);
    unlink(path);
}
END_TEST

/* ---- the openai brain through the server, against the fake provider ---------- */

static pid_t fake_pid;
static int fake_port;

static void start_fake_and_server(void)
{
    int out[2], in[2];
    char buf[64] = "", cfg[512];
    ssize_t n;

    ck_assert_int_eq(pipe(out), 0);
    ck_assert_int_eq(pipe(in), 0);
    fake_pid = fork();
    if (fake_pid == 0) {
        dup2(out[1], 1);
        dup2(in[0], 0);
        close(out[0]);
        close(in[1]);
        execl(getenv("FAKE_OPENAI") ? getenv("FAKE_OPENAI") : "build/tests/fake_openai",
              "fake_openai", "--exit-on-eof", (char *)NULL);
        _exit(127);
    }
    close(out[1]);
    close(in[0]);
    n = read(out[0], buf, sizeof(buf) - 1);
    ck_assert_int_gt(n, 0);
    close(out[0]);
    ck_assert_int_eq(sscanf(buf, "port %d", &fake_port), 1);
    snprintf(cfg, sizeof(cfg),
             "{\"system_prompt\":\"You are terse.\",\"brain\":{\"provider\":\"openai\","
             "\"openai\":{\"base_url\":\"http://127.0.0.1:%d/v1\",\"model\":"
             "\"tool-then-text\",\"api_key\":\"\",\"retries\":0}}}",
             fake_port);
    start_with(cfg);
}

static void stop_fake_and_server(void)
{
    stop();
    kill(fake_pid, SIGTERM);
    waitpid(fake_pid, NULL, 0);
}

START_TEST(test_openai_round_trip_through_server)
{
    char *sid = new_session(), url[128];
    struct itest_resp r;
    json_t *st, *reqs, *second, *msgs;
    const char *answer;

    ck_assert_int_eq(post(sid,
                          "{\"type\":\"user-send-message\",\"content\":\"what is "
                          "2+3?\"}",
                          NULL),
                     200);
    st = state_when(sid, tool_answered, NULL);
    answer = json_string_value(json_object_get(last_assistant(st), "content"));
    ck_assert_str_eq(answer, "2+3 = 5");
    ck_assert_str_eq(
        json_string_value(json_object_get(
            json_array_get(json_object_get(st, "toolCallRecords"), 0), "name")),
        "calculator");
    /* What the provider was sent: the call, then the result, in order. */
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/__requests", fake_port);
    ck_assert_int_eq(itest_request("GET", url, NULL, NULL, &r), 0);
    reqs = itest_resp_json(&r);
    itest_resp_release(&r);
    ck_assert_uint_eq(json_array_size(reqs), 2);
    second = json_object_get(json_array_get(reqs, 1), "body");
    msgs = json_object_get(second, "messages");
    ck_assert_uint_eq(json_array_size(msgs), 4);
    ck_assert_str_eq(
        json_string_value(json_object_get(json_array_get(msgs, 0), "content")),
        "You are terse.");
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(msgs, 2), "role")),
                     "assistant");
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(msgs, 3), "role")),
                     "tool");
    ck_assert_str_eq(
        json_string_value(json_object_get(json_array_get(msgs, 3), "content")), "5");
    ck_assert(json_is_true(json_object_get(second, "stream")));
    ck_assert_ptr_nonnull(json_object_get(second, "tools"));
    json_decref(reqs);
    json_decref(st);
    free(sid);
}
END_TEST

Suite *integration_suite(void);
Suite *integration_suite(void)
{
    Suite *s = suite_create("integration");
    TCase *tc = tcase_create("server");
    TCase *agent = tcase_create("agent-inputs");
    TCase *slow = tcase_create("slow-brain");
    TCase *auth = tcase_create("auth");
    TCase *life = tcase_create("lifecycle");
    TCase *oa = tcase_create("openai");
    TCase *logged = tcase_create("log");
    int t = getenv("RX_SERVER_WRAPPER") ? 300 : 60;

    tcase_add_unchecked_fixture(tc, start_base, stop);
    tcase_set_timeout(tc, t);
    tcase_add_test(tc, test_streamed_answer_matches_final);
    tcase_add_test(tc, test_arithmetic_calls_calculator);
    tcase_add_test(tc, test_sessions_isolated_and_default_routes);
    tcase_add_test(tc, test_sse_first_state_and_resync);
    tcase_add_test(tc, test_retry_is_stored_once);
    tcase_add_test(tc, test_patch_mode_rebuilds_state);
    tcase_add_test(tc, test_every_error);
    tcase_add_test(tc, test_stuck_client_does_not_stall_others);
    tcase_add_test(tc, test_message_json_for_plain_clients);
    tcase_add_test(tc, test_static_files_and_probes);
    suite_add_tcase(s, tc);

    tcase_add_unchecked_fixture(logged, start_logged, stop_logged);
    tcase_set_timeout(logged, t);
    tcase_add_test(logged, test_history_at_and_fork);
    tcase_add_test(logged, test_restart_keeps_sessions);
    suite_add_tcase(s, logged);

    tcase_add_unchecked_fixture(agent, start_agent, stop);
    tcase_set_timeout(agent, t);
    tcase_add_test(agent, test_hanging_command_tool_is_killed);
    suite_add_tcase(s, agent);

    tcase_add_unchecked_fixture(slow, start_slow, stop);
    tcase_set_timeout(slow, t);
    tcase_add_test(slow, test_cancel_keeps_partial_text);
    suite_add_tcase(s, slow);

    tcase_add_unchecked_fixture(auth, start_auth, stop);
    tcase_set_timeout(auth, t);
    tcase_add_test(auth, test_auth_token);
    suite_add_tcase(s, auth);

    tcase_set_timeout(life, t);
    tcase_add_test(life, test_sigterm_with_open_streams);
    tcase_add_test(life, test_bad_database_is_refused);
    tcase_add_test(life, test_bad_config_is_refused);
    suite_add_tcase(s, life);

    tcase_add_unchecked_fixture(oa, start_fake_and_server, stop_fake_and_server);
    tcase_set_timeout(oa, t);
    tcase_add_test(oa, test_openai_round_trip_through_server);
    suite_add_tcase(s, oa);
    return s;
}
