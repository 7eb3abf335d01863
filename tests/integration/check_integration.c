/*
 * check_integration - the real reflexor binary on 127.0.0.1, driven over HTTP
 * and SSE with libcurl (SPEC 4). Each TCase starts its own server (unchecked
 * fixture, in the runner's process) and every test talks to it.
 * No timings are asserted: waits have generous limits and only bound hangs.
 */
#include <check.h>
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/integration/itest.h"

/* Limits on waits, which only bound a hang: under valgrind (RX_SERVER_WRAPPER)
   the server is some twenty times slower, so they are longer there. */
static int wait_ms(void)
{
    return getenv("RX_SERVER_WRAPPER") ? 120000 : 20000;
}
#define WAIT_MS wait_ms()

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
    char *id = itest_new_session(&srv);

    ck_assert_ptr_nonnull(id);
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

static bool has_complete_answer(json_t *state, void *arg)
{
    json_t *m = itest_last_assistant(state);
    const char *st = json_string_value(json_object_get(m, "status"));

    (void)arg;
    return st && !strcmp(st, "complete") &&
           json_array_size(json_object_get(state, "assistantMessages")) >=
               (size_t)(arg ? *(int *)arg : 1);
}

static bool has_streaming(json_t *state, void *arg)
{
    const char *st =
        json_string_value(json_object_get(itest_last_assistant(state), "status"));

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
    mid = json_string_value(json_object_get(itest_last_assistant(st), "id"));
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
    ck_assert_str_eq(
        json_string_value(json_object_get(itest_last_assistant(st), "content")), text);
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

/* An effect event (`arg` is its type) of a tool request. */
static bool is_tool_effect(json_t *data, void *arg)
{
    const char *t = json_string_value(json_object_get(data, "type"));
    const char *key = json_string_value(json_object_get(data, "key"));

    return t && !strcmp(t, arg) && key && !strncmp(key, "request-toolkit-", 16);
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
    answer = json_string_value(json_object_get(itest_last_assistant(st), "content"));
    ck_assert_msg(strstr(answer, "84"), "answer lacks the value: %s", answer);
    /* The stream told the story: the brain's call, the toolkit's answer, effects. */
    {
        int done = itest_sse_wait_for(&ev, 0, is_tool_effect, (void *)"effect-completed",
                                      WAIT_MS);
        int started =
            itest_sse_wait_for(&ev, 0, is_tool_effect, (void *)"effect-started", WAIT_MS);
        const char *key;

        ck_assert_msg(done >= 0, "no effect-completed for the tool");
        ck_assert_int_ge(started, 0);
        ck_assert_int_lt(started, done);
        key =
            json_string_value(json_object_get(itest_sse_event(&ev, (size_t)done), "key"));
        ck_assert_str_eq(json_string_value(json_object_get(
                             itest_sse_event(&ev, (size_t)started), "key")),
                         key);
    }
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
    /* Pings keep idle streams alive (ping_ms is 500 here): one comes, however
       long the machine takes to send it. */
    st = state_when(sid, has_complete_answer, NULL);
    json_decref(st);
    ck_assert(itest_sse_wait_raw(&ev, ": ping\n\n", WAIT_MS));
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

/* The first state of the stream with every patch among its first n events applied. */
static json_t *rebuild_from_patches(struct itest_sse *ev, size_t n)
{
    json_t *doc = json_deep_copy(json_object_get(itest_sse_event(ev, 0), "state"));

    ck_assert_ptr_nonnull(doc);
    for (size_t i = 1; i < n; i++) {
        json_t *e = itest_sse_event(ev, i), *op;
        const char *t = json_string_value(json_object_get(e, "type"));
        size_t k;

        if (t && !strcmp(t, "state-patch"))
            json_array_foreach(json_object_get(e, "patch"), k, op)
                apply_patch_op(doc, op);
    }
    return doc;
}

static bool any_event(json_t *data, void *arg)
{
    (void)data;
    (void)arg;
    return true;
}

START_TEST(test_patch_mode_rebuilds_state)
{
    char *sid = new_session(), url[256];
    struct itest_sse ev;
    json_t *doc, *st;
    size_t n;
    int patches = 0;

    session_url(url, sizeof(url), sid, "/moorex?mode=patch");
    ck_assert_int_eq(itest_sse_open(&ev, url, NULL), 0);
    ck_assert_int_eq(itest_sse_wait(&ev, 0, "state-updated", NULL, NULL, WAIT_MS), 0);
    ck_assert_int_eq(post(sid,
                          "{\"type\":\"user-send-message\",\"content\":\"what is "
                          "6*7?\"}",
                          NULL),
                     200);
    st = state_when(sid, tool_answered, NULL);
    /* The patches rebuild the state GET gives; the last ones may still be on their
       way, so wait for events until they do. */
    for (;;) {
        n = itest_sse_count(&ev);
        doc = rebuild_from_patches(&ev, n);
        if (json_equal(doc, st))
            break;
        json_decref(doc);
        ck_assert_msg(itest_sse_wait_for(&ev, n, any_event, NULL, WAIT_MS) >= 0,
                      "patched state differs from GET state");
    }
    json_decref(doc);
    /* Every change up to it came as a patch, never a whole state. */
    for (size_t i = 1; i < n; i++) {
        const char *t =
            json_string_value(json_object_get(itest_sse_event(&ev, i), "type"));

        ck_assert_msg(t && strcmp(t, "state-updated"), "event %zu is a whole state", i);
        patches += !strcmp(t, "state-patch");
    }
    ck_assert_int_ge(patches, 1);
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
    /* Without a database there is no log to read (on PostgreSQL there is one). */
    if (!itest_on_postgres()) {
        session_url(url, sizeof(url), sid, "/history");
        ck_assert_int_eq(itest_request("GET", url, NULL, NULL, &r), 0);
        ck_assert_int_eq(r.status, 501);
        itest_resp_release(&r);
    }
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
    json_t *m = itest_last_assistant(state);
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
    mid = json_string_value(json_object_get(itest_last_assistant(st), "id"));
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
    content = json_string_value(json_object_get(itest_last_assistant(st), "content"));
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

/*
 * A stuck client: it subscribes and reads nothing until the end. Its own server
 * has small SSE queues and a brain that answers at once, so each input's whole
 * round (the input, the ask, its answer) ends within the round, and a round
 * never leaves more than a few frames in a queue that keeps up: only the stuck
 * client can overflow. Nothing here depends on pace, so it runs under valgrind
 * too (with longer limits).
 */
static const char stuck_config[] =
    "{\"brain\":{\"builtin\":{\"chunk_chars\":1000,\"chunk_delay_ms\":0}},"
    " \"limits\":{\"sse_queue_max\":32}}";

#define STUCK_PAD        4000 /* characters per message: every event is big */
#define STUCK_MAX_ROUNDS 200  /* far past the few it takes to fill a socket */

static void start_stuck(void)
{
    start_with(stuck_config);
}

/* Looking for the input-received of one user message; any other user message on
   the way means the inputs came out of order. */
struct user_input {
    const char *message_id;
    bool other;
};

static bool is_user_input(json_t *data, void *arg)
{
    struct user_input *u = arg;
    json_t *in = json_object_get(data, "input");
    const char *t = json_string_value(json_object_get(data, "type"));
    const char *it = json_string_value(json_object_get(in, "type"));
    const char *id = json_string_value(json_object_get(in, "messageId"));

    if (!t || strcmp(t, "input-received") || !it || strcmp(it, "user-send-message"))
        return false;
    if (id && !strcmp(id, u->message_id))
        return true;
    u->other = true;
    return false;
}

static bool is_ask_end(json_t *data, void *arg)
{
    const char *t = json_string_value(json_object_get(data, "type"));
    const char *key = json_string_value(json_object_get(data, "key"));

    (void)arg;
    return t && !strcmp(t, "effect-completed") && key && !strncmp(key, "ask-brain-", 10);
}

/* Send message `id` and follow its round on `ev` from event `from`: its input,
   then the end of the ask that answers it. The index after the round. */
static size_t round_trip(const char *sid, struct itest_sse *ev, size_t from,
                         const char *id)
{
    static char body[STUCK_PAD + 128];
    struct user_input u = {id, false};
    int len, at, end;

    len = snprintf(body, sizeof(body),
                   "{\"type\":\"user-send-message\",\"messageId\":\"%s\",\"content\":\"",
                   id);
    memset(body + len, 'x', STUCK_PAD);
    strcpy(body + len + STUCK_PAD, "\"}");
    ck_assert_int_eq(post(sid, body, NULL), 200);
    at = itest_sse_wait_for(ev, from, is_user_input, &u, WAIT_MS);
    ck_assert_msg(at >= 0, "the reading client never got '%s'", id);
    ck_assert_msg(!u.other, "inputs out of order before '%s'", id);
    end = itest_sse_wait_for(ev, (size_t)at + 1, is_ask_end, NULL, WAIT_MS);
    ck_assert_msg(end > at, "the answer to '%s' never ended", id);
    return (size_t)end + 1;
}

/* The open SSE streams, once they are `n` (or WAIT_MS later). */
static long streams_when(long n)
{
    time_t deadline = time(NULL) + WAIT_MS / 1000;
    long got;

    while ((got = itest_metric(&srv, "reflexor_sse_streams")) != n &&
           time(NULL) < deadline)
        usleep(20000);
    return got;
}

START_TEST(test_stuck_client_does_not_stall_others)
{
    char *sid = new_session(), url[256], path[256], id[32], *stuck = NULL;
    long dropped0 = itest_metric(&srv, "reflexor_sse_dropped_total");
    long streams0 = itest_metric(&srv, "reflexor_sse_streams"), got, reader_bytes,
         backwards = -1;
    struct itest_sse ev;
    size_t at, n;
    int fd, rounds = 0;
    long long prev = 0;

    ck_assert_int_ge(dropped0, 0);
    ck_assert_int_ge(streams0, 0);
    snprintf(path, sizeof(path), "/api/reflexor/sessions/%s/moorex", sid);
    fd = itest_raw_get(srv.port, path, 4096);
    ck_assert_int_ge(fd, 0);
    session_url(url, sizeof(url), sid, "/moorex");
    ck_assert_int_eq(itest_sse_open(&ev, url, NULL), 0);
    ck_assert_int_eq(itest_sse_wait(&ev, 0, "state-updated", NULL, NULL, WAIT_MS), 0);
    /* Both streams are open before the first input. */
    ck_assert_int_eq(streams_when(streams0 + 2), streams0 + 2);
    /* Rounds until the stuck stream overflows. Each one checks the reading client
       got the input, in order, and the answer: a stall or a drop of the reader
       fails right there. */
    at = 1;
    while (itest_metric(&srv, "reflexor_sse_dropped_total") == dropped0 &&
           rounds < STUCK_MAX_ROUNDS) {
        snprintf(id, sizeof(id), "m%d", rounds++);
        at = round_trip(sid, &ev, at, id);
    }
    /* Exactly one client was dropped, and not the reader: it goes on. */
    ck_assert_msg(itest_metric(&srv, "reflexor_sse_dropped_total") == dropped0 + 1,
                  "%ld clients dropped after %d rounds",
                  itest_metric(&srv, "reflexor_sse_dropped_total") - dropped0, rounds);
    at = round_trip(sid, &ev, at, "after-drop");
    ck_assert(!itest_sse_wait_done(&ev, 0));
    /* It got every event in order: ids never go backwards. */
    pthread_mutex_lock(&ev.lock);
    n = json_array_size(ev.events);
    for (size_t i = 0; i < n && backwards < 0; i++) {
        long long cur =
            atoll(json_string_value(json_object_get(json_array_get(ev.events, i), "id")));

        if (cur < prev)
            backwards = (long)i;
        prev = cur;
    }
    reader_bytes = (long)ev.raw_len;
    pthread_mutex_unlock(&ev.lock);
    ck_assert_msg(backwards < 0, "event %ld: the id went backwards", backwards);
    /* The stuck one was ended, not buffered without end: read at last, its stream
       closes, having had its first frames and nothing from after the drop. */
    got = itest_raw_drain(fd, WAIT_MS, &stuck);
    ck_assert_msg(got >= 0, "the stuck stream was never closed");
    ck_assert_msg(!strncmp(stuck, "HTTP/1.1 200", 12), "%.80s", stuck);
    ck_assert_ptr_nonnull(strstr(stuck, "retry: "));
    ck_assert_ptr_null(strstr(stuck, "after-drop"));
    ck_assert_int_lt(got, reader_bytes); /* headers and chunking included, still less */
    /* Until then its connection stayed open (the server learns that it may close it
       only when it can write again); now only the reader's stream is left. */
    ck_assert_int_eq(streams_when(streams0 + 1), streams0 + 1);
    free(stuck);
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
    strcat(url, json_string_value(json_object_get(itest_last_assistant(st), "id")));
    ck_assert_int_eq(itest_request("GET", url, NULL, NULL, &r), 0);
    ck_assert_int_eq(r.status, 200);
    j = itest_resp_json(&r);
    ck_assert(json_is_true(json_object_get(j, "isComplete")));
    ck_assert_str_eq(json_string_value(json_object_get(j, "status")), "complete");
    ck_assert_str_eq(
        json_string_value(json_object_get(j, "content")),
        json_string_value(json_object_get(itest_last_assistant(st), "content")));
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

static void stop_logged(void)
{
    stop();
    itest_remove_db(db_path);
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

static struct itest_fake fake;

static void start_fake_and_server(void)
{
    char cfg[512];

    ck_assert_int_eq(itest_fake_start(&fake), 0);
    snprintf(cfg, sizeof(cfg),
             "{\"system_prompt\":\"You are terse.\",\"brain\":{\"provider\":\"openai\","
             "\"openai\":{\"base_url\":\"http://127.0.0.1:%d/v1\",\"model\":"
             "\"tool-then-text\",\"api_key\":\"\",\"retries\":0}}}",
             fake.port);
    start_with(cfg);
}

static void stop_fake_and_server(void)
{
    stop();
    itest_fake_stop(&fake);
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
    answer = json_string_value(json_object_get(itest_last_assistant(st), "content"));
    ck_assert_str_eq(answer, "2+3 = 5");
    ck_assert_str_eq(
        json_string_value(json_object_get(
            json_array_get(json_object_get(st, "toolCallRecords"), 0), "name")),
        "calculator");
    /* What the provider was sent: the call, then the result, in order. */
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/__requests", fake.port);
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
    TCase *stuck = tcase_create("stuck-client");
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
    tcase_add_test(tc, test_message_json_for_plain_clients);
    tcase_add_test(tc, test_static_files_and_probes);
    suite_add_tcase(s, tc);

    tcase_add_unchecked_fixture(logged, start_logged, stop_logged);
    tcase_set_timeout(logged, t);
    tcase_add_test(logged, test_history_at_and_fork);
    tcase_add_test(logged, test_restart_keeps_sessions);
    suite_add_tcase(s, logged);

    tcase_add_unchecked_fixture(stuck, start_stuck, stop);
    tcase_set_timeout(stuck, t);
    tcase_add_test(stuck, test_stuck_client_does_not_stall_others);
    suite_add_tcase(s, stuck);

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
    if (itest_on_postgres())
        itest_skip("integration/test_bad_database_is_refused", "a garbage SQLite file");
    else
        tcase_add_test(life, test_bad_database_is_refused);
    tcase_add_test(life, test_bad_config_is_refused);
    suite_add_tcase(s, life);

    tcase_add_unchecked_fixture(oa, start_fake_and_server, stop_fake_and_server);
    tcase_set_timeout(oa, t);
    tcase_add_test(oa, test_openai_round_trip_through_server);
    suite_add_tcase(s, oa);
    return s;
}
