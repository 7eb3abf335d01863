/*
 * check_settings - per-chat settings, usage and reasoning through the real
 * server, with the openai brain against the fake provider (SPEC 3.1, 3.2
 * user-configure, 4 "GET .../messages/:mid", 5): a bad user-configure is a
 * 400 naming its field; a good one shows in state.settings; the next ask's
 * request carries the chosen model, temperature and system prompt (the fake
 * records it, GET /__requests), and cleared settings fall back to the
 * server's; the answer keeps usage, firstTokenAt and reasoning; its message
 * stream sends `reasoning` frames before `chunk` frames, and a late
 * subscriber's snapshot (and the plain JSON answer) carries the reasoning.
 * The fake's `reasoning` scenario pauses 800 ms inside its reasoning and
 * 400 ms before the answer; waits only bound hangs.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/integration/itest.h"

static int wait_ms(void)
{
    return getenv("RX_SERVER_WRAPPER") ? 120000 : 20000;
}
#define WAIT_MS wait_ms()

static struct itest_server srv;
static struct itest_fake fake;

static void start(void)
{
    char cfg[512];

    ck_assert_int_eq(itest_fake_start(&fake), 0);
    snprintf(cfg, sizeof(cfg),
             "{\"system_prompt\":\"You are terse.\",\"brain\":{\"provider\":\"openai\","
             "\"openai\":{\"base_url\":\"http://127.0.0.1:%d/v1\",\"model\":\"text\","
             "\"api_key\":\"\",\"retries\":0}}}",
             fake.port);
    ck_assert_msg(itest_server_start(&srv, cfg, NULL) == 0, "server did not start");
}

static void stop(void)
{
    ck_assert_int_eq(itest_server_stop(&srv), 0);
    itest_fake_stop(&fake);
}

/* ---- helpers ------------------------------------------------------------------ */

static void session_url(char *buf, size_t n, const char *sid, const char *tail)
{
    snprintf(buf, n, "%s/api/reflexor/sessions/%s%s", srv.base, sid, tail);
}

static json_t *state_of(const char *sid)
{
    char url[256];
    struct itest_resp r;
    json_t *j;

    session_url(url, sizeof(url), sid, "");
    ck_assert_int_eq(itest_request("GET", url, NULL, NULL, &r), 0);
    ck_assert_int_eq(r.status, 200);
    j = itest_resp_json(&r);
    itest_resp_release(&r);
    ck_assert_ptr_nonnull(j);
    return j;
}

/* The state once its n-th assistant message (1-based) has `status`. */
struct want_msg {
    size_t n;
    const char *status;
};

static bool has_message(json_t *st, void *arg)
{
    const struct want_msg *w = arg;
    json_t *m = json_array_get(json_object_get(st, "assistantMessages"), w->n - 1);
    const char *status = json_string_value(json_object_get(m, "status"));

    return status && (!w->status || !strcmp(status, w->status));
}

static json_t *state_when(const char *sid, size_t n, const char *status)
{
    struct want_msg w = {n, status};
    char url[256];
    json_t *j;

    session_url(url, sizeof(url), sid, "");
    j = itest_poll_json(url, has_message, &w, WAIT_MS);
    ck_assert_msg(j && has_message(j, &w), "message %zu never became %s", n,
                  status ? status : "present");
    return j;
}

static json_t *message_at(json_t *st, size_t n)
{
    return json_array_get(json_object_get(st, "assistantMessages"), n - 1);
}

/* POST an input: the status, and the answer's "field" into `field` (if any). */
static long post(const char *sid, const char *json, char *field, size_t field_len)
{
    json_t *answer = NULL;
    long status = itest_post_input(&srv, sid, json, &answer);

    if (field)
        snprintf(field, field_len, "%s",
                 json_string_value(json_object_get(answer, "field"))
                     ? json_string_value(json_object_get(answer, "field"))
                     : "");
    json_decref(answer);
    return status;
}

static void fake_reset(void)
{
    char url[128];
    struct itest_resp r;

    snprintf(url, sizeof(url), "http://127.0.0.1:%d/__reset", fake.port);
    ck_assert_int_eq(itest_request("POST", url, "", NULL, &r), 0);
    itest_resp_release(&r);
}

/* The body of the last request the fake was sent (NEW reference). */
static json_t *last_request(void)
{
    char url[128];
    struct itest_resp r;
    json_t *reqs, *body;

    snprintf(url, sizeof(url), "http://127.0.0.1:%d/__requests", fake.port);
    ck_assert_int_eq(itest_request("GET", url, NULL, NULL, &r), 0);
    reqs = itest_resp_json(&r);
    itest_resp_release(&r);
    ck_assert_int_gt(json_array_size(reqs), 0);
    body = json_incref(
        json_object_get(json_array_get(reqs, json_array_size(reqs) - 1), "body"));
    json_decref(reqs);
    return body;
}

static const char *str(json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

/* ---- user-configure over HTTP ----------------------------------------------------- */

START_TEST(test_configure_over_http)
{
    static const struct {
        const char *input, *field;
    } bad[] = {
        {"{\"type\":\"user-configure\"}", "settings"},
        {"{\"type\":\"user-configure\",\"temperature\":3}", "temperature"},
        {"{\"type\":\"user-configure\",\"temperature\":\"hot\"}", "temperature"},
        {"{\"type\":\"user-configure\",\"model\":\"\"}", "model"},
        {"{\"type\":\"user-configure\",\"model\":7}", "model"},
        {"{\"type\":\"user-configure\",\"systemPrompt\":[]}", "systemPrompt"},
    };
    char *sid = itest_new_session(&srv), field[64];
    json_t *st, *answer = NULL;

    ck_assert_ptr_nonnull(sid);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_int_eq(post(sid, bad[i].input, field, sizeof(field)), 400);
        ck_assert_msg(!strcmp(field, bad[i].field), "%s: field '%s', want '%s'",
                      bad[i].input, field, bad[i].field);
    }
    st = state_of(sid);
    ck_assert(json_is_object(json_object_get(st, "settings")));
    ck_assert_uint_eq(json_object_size(json_object_get(st, "settings")), 0);
    ck_assert_int_eq(json_integer_value(json_object_get(st, "updatedAt")), 0);
    json_decref(st);

    ck_assert_int_eq(post(sid,
                          "{\"type\":\"user-configure\",\"systemPrompt\":\"Be brief.\","
                          "\"model\":\"gpt-x\",\"temperature\":0.25}",
                          NULL, 0),
                     200);
    st = state_of(sid);
    ck_assert_str_eq(str(json_object_get(st, "settings"), "systemPrompt"), "Be brief.");
    ck_assert_str_eq(str(json_object_get(st, "settings"), "model"), "gpt-x");
    ck_assert(json_real_value(json_object_get(json_object_get(st, "settings"),
                                              "temperature")) == 0.25);
    json_decref(st);

    /* The same again changes nothing, and says so. */
    ck_assert_int_eq(itest_post_input(&srv, sid,
                                      "{\"type\":\"user-configure\",\"model\":\"gpt-x\"}",
                                      &answer),
                     200);
    ck_assert(json_is_true(json_object_get(answer, "unchanged")));
    json_decref(answer);

    /* null clears one and keeps the others. */
    ck_assert_int_eq(post(sid, "{\"type\":\"user-configure\",\"model\":null}", NULL, 0),
                     200);
    st = state_of(sid);
    ck_assert_ptr_null(json_object_get(json_object_get(st, "settings"), "model"));
    ck_assert_uint_eq(json_object_size(json_object_get(st, "settings")), 2);
    json_decref(st);
    free(sid);
}
END_TEST

/* ---- the settings reach the provider; usage and reasoning come back --------------- */

/* A message stream's text and reasoning, from its frames. */
struct followed {
    char content[256], reasoning[256];
    int reasoning_frames, chunk_frames;
    bool reasoning_after_chunk;
};

/* Read frames 0..upto (a snapshot first) of a message stream into `f`. */
static void read_frames(struct itest_sse *e, int upto, struct followed *f)
{
    json_t *ev = itest_sse_event(e, 0);

    memset(f, 0, sizeof(*f));
    ck_assert_str_eq(str(ev, "type"), "snapshot");
    snprintf(f->content, sizeof(f->content), "%s", str(ev, "content"));
    snprintf(f->reasoning, sizeof(f->reasoning), "%s",
             str(ev, "reasoning") ? str(ev, "reasoning") : "");
    for (int i = 1; i <= upto; i++) {
        const char *type;

        ev = itest_sse_event(e, (size_t)i);
        type = str(ev, "type");
        if (!strcmp(type, "reasoning")) {
            f->reasoning_frames++;
            f->reasoning_after_chunk |= f->chunk_frames > 0;
            strncat(f->reasoning, str(ev, "delta"),
                    sizeof(f->reasoning) - strlen(f->reasoning) - 1);
        } else if (!strcmp(type, "chunk")) {
            f->chunk_frames++;
            strncat(f->content, str(ev, "delta"),
                    sizeof(f->content) - strlen(f->content) - 1);
        }
    }
}

/* A message stream's snapshot or reasoning frame that completes the reasoning. */
static bool reasoned(json_t *data, void *arg)
{
    const char *r = json_string_value(json_object_get(data, "reasoning"));
    const char *d = json_string_value(json_object_get(data, "delta"));
    const char *t = json_string_value(json_object_get(data, "type"));

    (void)arg;
    return (r && strstr(r, "think.")) ||
           (t && !strcmp(t, "reasoning") && d && strstr(d, "think."));
}

START_TEST(test_settings_reach_the_provider)
{
    char *sid = itest_new_session(&srv), url[256];
    struct itest_sse live, late, after;
    struct followed f;
    struct itest_resp r;
    json_t *st, *m, *body, *msgs, *usage, *j;
    const char *mid;
    int done, n;

    ck_assert_ptr_nonnull(sid);
    fake_reset();
    /* The fake plays the scenario its request names: the model is ours. */
    ck_assert_int_eq(post(sid,
                          "{\"type\":\"user-configure\",\"systemPrompt\":\"Be brief.\","
                          "\"model\":\"reasoning\",\"temperature\":0.25}",
                          NULL, 0),
                     200);
    ck_assert_int_eq(
        post(sid, "{\"type\":\"user-send-message\",\"content\":\"Why?\"}", NULL, 0), 200);
    st = state_when(sid, 1, NULL);
    mid = str(message_at(st, 1), "id");
    ck_assert_ptr_nonnull(mid);
    session_url(url, sizeof(url), sid, "/messages/");
    strncat(url, mid, sizeof(url) - strlen(url) - 1);
    json_decref(st);

    /* Live: the reasoning streams first, then the answer. */
    ck_assert_int_eq(itest_sse_open(&live, url, NULL), 0);
    ck_assert_int_ge(itest_sse_wait_for(&live, 0, reasoned, NULL, WAIT_MS), 0);
    /* Late: subscribed after the reasoning, its snapshot carries all of it. */
    ck_assert_int_eq(itest_sse_open(&late, url, NULL), 0);
    ck_assert_int_eq(itest_sse_wait(&late, 0, "snapshot", NULL, NULL, WAIT_MS), 0);
    ck_assert_str_eq(str(itest_sse_event(&late, 0), "reasoning"), "Let me think.");

    done = itest_sse_wait(&live, 0, "complete", NULL, NULL, WAIT_MS);
    ck_assert_int_gt(done, 0);
    read_frames(&live, done, &f);
    ck_assert_str_eq(f.reasoning, "Let me think.");
    ck_assert_str_eq(f.content, "Answer.");
    ck_assert_int_ge(f.reasoning_frames, 1); /* "think." came 800 ms after the start */
    ck_assert_int_eq(f.chunk_frames, 1);
    ck_assert(!f.reasoning_after_chunk);
    ck_assert_str_eq(str(itest_sse_event(&live, (size_t)done), "content"), "Answer.");
    ck_assert(itest_sse_wait_done(&live, WAIT_MS));
    n = itest_sse_wait(&late, 0, "complete", NULL, NULL, WAIT_MS);
    ck_assert_int_gt(n, 0);
    read_frames(&late, n, &f);
    ck_assert_str_eq(f.content, "Answer.");
    ck_assert_str_eq(f.reasoning, "Let me think.");
    itest_sse_close(&live);
    itest_sse_close(&late);

    /* Kept with the message: usage, when the first token came, the reasoning. */
    st = state_when(sid, 1, "complete");
    m = message_at(st, 1);
    ck_assert_str_eq(str(m, "content"), "Answer.");
    ck_assert_str_eq(str(m, "reasoning"), "Let me think.");
    usage = json_object_get(m, "usage");
    ck_assert_int_eq(json_integer_value(json_object_get(usage, "promptTokens")), 12);
    ck_assert_int_eq(json_integer_value(json_object_get(usage, "completionTokens")), 3);
    ck_assert(json_is_integer(json_object_get(m, "firstTokenAt")));
    ck_assert_int_le(json_integer_value(json_object_get(m, "firstTokenAt")),
                     json_integer_value(json_object_get(m, "updatedAt")));
    ck_assert_int_gt(json_integer_value(json_object_get(m, "firstTokenAt")),
                     json_integer_value(json_object_get(m, "updatedAt")) - 600000);
    json_decref(st);

    /* After the end: the whole sequence from the state, reasoning included. */
    ck_assert_int_eq(itest_sse_open(&after, url, NULL), 0);
    ck_assert_int_eq(itest_sse_wait(&after, 0, "complete", NULL, NULL, WAIT_MS), 1);
    ck_assert_str_eq(str(itest_sse_event(&after, 0), "reasoning"), "Let me think.");
    ck_assert_str_eq(str(itest_sse_event(&after, 0), "content"), "Answer.");
    itest_sse_close(&after);
    ck_assert_int_eq(itest_request("GET", url, NULL, NULL, &r), 0);
    ck_assert_int_eq(r.status, 200);
    j = itest_resp_json(&r);
    itest_resp_release(&r);
    ck_assert_str_eq(str(j, "content"), "Answer.");
    ck_assert_str_eq(str(j, "reasoning"), "Let me think.");
    ck_assert_str_eq(str(j, "status"), "complete");
    json_decref(j);

    /* What the provider was sent: our model, temperature and system prompt. */
    body = last_request();
    ck_assert_str_eq(str(body, "model"), "reasoning");
    ck_assert(json_real_value(json_object_get(body, "temperature")) == 0.25);
    ck_assert(json_is_true(
        json_object_get(json_object_get(body, "stream_options"), "include_usage")));
    msgs = json_object_get(body, "messages");
    ck_assert_str_eq(str(json_array_get(msgs, 0), "role"), "system");
    ck_assert_str_eq(str(json_array_get(msgs, 0), "content"), "Be brief.");
    ck_assert_str_eq(str(json_array_get(msgs, 1), "content"), "Why?");
    json_decref(body);
    free(sid);
}
END_TEST

/* Cleared settings fall back to the server's; "" means no system prompt at all. */
START_TEST(test_cleared_settings_fall_back)
{
    char *sid = itest_new_session(&srv);
    json_t *st, *body, *msgs;

    ck_assert_ptr_nonnull(sid);
    fake_reset();
    ck_assert_int_eq(post(sid,
                          "{\"type\":\"user-configure\",\"systemPrompt\":\"Be brief.\","
                          "\"model\":\"reasoning\",\"temperature\":1.5}",
                          NULL, 0),
                     200);
    ck_assert_int_eq(post(sid,
                          "{\"type\":\"user-configure\",\"systemPrompt\":null,"
                          "\"model\":null,\"temperature\":null}",
                          NULL, 0),
                     200);
    ck_assert_int_eq(
        post(sid, "{\"type\":\"user-send-message\",\"content\":\"hi\"}", NULL, 0), 200);
    st = state_when(sid, 1, "complete");
    ck_assert_str_eq(str(message_at(st, 1), "content"), "Hello world!");
    /* The text scenario's usage; no reasoning was sent, none is kept. */
    ck_assert_int_eq(json_integer_value(json_object_get(
                         json_object_get(message_at(st, 1), "usage"), "promptTokens")),
                     10);
    ck_assert_ptr_null(json_object_get(message_at(st, 1), "reasoning"));
    json_decref(st);
    body = last_request();
    ck_assert_str_eq(str(body, "model"), "text");
    ck_assert_ptr_null(json_object_get(body, "temperature"));
    msgs = json_object_get(body, "messages");
    ck_assert_str_eq(str(json_array_get(msgs, 0), "content"), "You are terse.");
    json_decref(body);

    ck_assert_int_eq(
        post(sid, "{\"type\":\"user-configure\",\"systemPrompt\":\"\"}", NULL, 0), 200);
    ck_assert_int_eq(
        post(sid, "{\"type\":\"user-send-message\",\"content\":\"again\"}", NULL, 0),
        200);
    json_decref(state_when(sid, 2, "complete"));
    body = last_request();
    msgs = json_object_get(body, "messages");
    ck_assert_str_eq(str(json_array_get(msgs, 0), "role"), "user");
    json_decref(body);
    free(sid);
}
END_TEST

Suite *settings_suite(void);
Suite *settings_suite(void)
{
    Suite *s = suite_create("settings");
    TCase *tc = tcase_create("openai");

    tcase_add_unchecked_fixture(tc, start, stop);
    tcase_set_timeout(tc, getenv("RX_SERVER_WRAPPER") ? 300 : 60);
    tcase_add_test(tc, test_configure_over_http);
    tcase_add_test(tc, test_settings_reach_the_provider);
    tcase_add_test(tc, test_cleared_settings_fall_back);
    suite_add_tcase(s, tc);
    return s;
}
