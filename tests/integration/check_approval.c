/*
 * check_approval - tool approval (SPEC 3.6) through the real server: the
 * policy the server stamps, reviews as ordinary POSTs, 409 with the reason of
 * a review that is not due, 400 naming the field of a malformed one, the
 * session's policies, and an approval that arrives after a restart.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/integration/itest.h"

Suite *approval_suite(void);

#define WAIT_MS (getenv("RX_SERVER_WRAPPER") ? 60000 : 15000)

/* calculator asks; clock is left at its default (auto). */
#define CONFIG                                                                           \
    "{\"brain\":{\"builtin\":{\"chunk_delay_ms\":0}},"                                   \
    "\"tools\":[{\"name\":\"calculator\",\"approval\":\"ask\"}]}"

static struct itest_server srv;
static char db_path[64];

static void start(void)
{
    const char *args[] = {"--db", db_path, NULL};

    ck_assert_int_eq(itest_server_start(&srv, CONFIG, args), 0);
}

static void setup(void)
{
    snprintf(db_path, sizeof(db_path), "/tmp/rx-approval-%d.db", (int)getpid());
    itest_remove_db(db_path);
    start();
}

static void teardown(void)
{
    itest_server_stop(&srv);
    itest_remove_db(db_path);
}

static json_t *state_of(const char *sid)
{
    char url[256];
    struct itest_resp r;
    json_t *j;

    snprintf(url, sizeof(url), "%s/api/reflexor/sessions/%s", srv.base, sid);
    ck_assert_int_eq(itest_request("GET", url, NULL, NULL, &r), 0);
    j = itest_resp_json(&r);
    itest_resp_release(&r);
    ck_assert_ptr_nonnull(j);
    return j;
}

struct want {
    size_t index;         /* of the record */
    const char *approval; /* NULL: any */
    bool answered;
};

static json_t *record(json_t *st, size_t i)
{
    return json_array_get(json_object_get(st, "toolCallRecords"), i);
}

static bool record_is(json_t *st, void *arg)
{
    const struct want *w = arg;
    json_t *rec = record(st, w->index);
    const char *ap = json_string_value(json_object_get(rec, "approval"));

    if (!rec || (w->approval && (!ap || strcmp(ap, w->approval))))
        return false;
    return json_is_object(json_object_get(rec, "result")) == w->answered;
}

/* The last assistant message is complete and comes after the last record's answer. */
static bool answered_after_tools(json_t *st, void *arg)
{
    json_t *a = json_object_get(st, "assistantMessages");
    json_t *last = json_array_get(a, json_array_size(a) - 1);
    const char *status = json_string_value(json_object_get(last, "status"));

    (void)arg;
    return status && !strcmp(status, "complete") &&
           json_array_size(json_object_get(st, "toolCallRecords")) > 0 &&
           json_is_object(json_object_get(
               record(st, json_array_size(json_object_get(st, "toolCallRecords")) - 1),
               "result"));
}

static json_t *wait_state(const char *sid, bool (*pred)(json_t *, void *), void *arg)
{
    char url[256];
    json_t *j;

    snprintf(url, sizeof(url), "%s/api/reflexor/sessions/%s", srv.base, sid);
    j = itest_poll_json(url, pred, arg, WAIT_MS);
    ck_assert_msg(j && pred(j, arg), "state never came: %s",
                  j ? json_dumps(j, JSON_COMPACT) : "(none)");
    return j;
}

static void post_ok(const char *sid, const char *json)
{
    json_t *ans = NULL;
    long st = itest_post_input(&srv, sid, json, &ans);

    ck_assert_msg(st == 200, "%s -> %ld %s", json, st, ans ? json_dumps(ans, 0) : "");
    json_decref(ans);
}

/* POST `json`: its status, and the answer's `field` or `reason` in out. */
static long post_err(const char *sid, const char *json, const char *key, char *out,
                     size_t n)
{
    json_t *ans = NULL;
    long st = itest_post_input(&srv, sid, json, &ans);
    const char *v = json_string_value(json_object_get(ans, key));

    snprintf(out, n, "%s", v ? v : "");
    json_decref(ans);
    return st;
}

/* A session whose first record (calculator 2+3) waits for approval: its id. */
static char *waiting_call(void)
{
    char *sid = itest_new_session(&srv);
    struct want w = {0, "pending", false};

    ck_assert_ptr_nonnull(sid);
    post_ok(sid, "{\"type\":\"user-send-message\",\"content\":"
                 "\"/call calculator {\\\"expression\\\":\\\"2+3\\\"}\"}");
    json_decref(wait_state(sid, record_is, &w));
    return sid;
}

static const char *result_text(json_t *rec)
{
    json_t *r = json_object_get(rec, "result");
    json_t *v = json_object_get(
        r, json_is_true(json_object_get(r, "isSuccess")) ? "content" : "error");

    return json_string_value(v) ? json_string_value(v) : "";
}

/* Review the session's first record: `decision` is the rest of the input's JSON. */
static void review_first(const char *sid, const char *decision)
{
    json_t *st = state_of(sid);
    char body[512];

    snprintf(body, sizeof(body),
             "{\"type\":\"user-review-tool-call\",\"toolCallId\":\"%s\",%s}",
             json_string_value(json_object_get(record(st, 0), "id")), decision);
    json_decref(st);
    post_ok(sid, body);
}

START_TEST(test_ask_waits_then_approve_runs)
{
    char *sid = waiting_call();
    struct want done = {0, "approved", true};
    json_t *st;

    /* Nothing runs while it waits, and no brain is asked. */
    usleep(300000);
    st = state_of(sid);
    ck_assert(json_is_null(json_object_get(record(st, 0), "result")));
    ck_assert_uint_eq(json_array_size(json_object_get(st, "assistantMessages")), 0);
    json_decref(st);
    review_first(sid, "\"decision\":\"approve\"");
    st = wait_state(sid, record_is, &done);
    ck_assert_str_eq(result_text(record(st, 0)), "5");
    json_decref(st);
    json_decref(wait_state(sid, answered_after_tools, NULL));
    free(sid);
}
END_TEST

START_TEST(test_edited_parameters_reach_the_tool)
{
    char *sid = waiting_call();
    struct want done = {0, "approved", true};
    json_t *st;

    review_first(sid, "\"decision\":\"approve\",\"parameters\":"
                      "\"{\\\"expression\\\":\\\"6*7\\\"}\"");
    st = wait_state(sid, record_is, &done);
    ck_assert_str_eq(result_text(record(st, 0)), "42");
    ck_assert_str_eq(json_string_value(json_object_get(record(st, 0), "parameters")),
                     "{\"expression\":\"6*7\"}");
    json_decref(st);
    free(sid);
}
END_TEST

START_TEST(test_reject_with_reason_then_the_brain_goes_on)
{
    char *sid = waiting_call();
    struct want done = {0, "rejected", true};
    json_t *st;

    review_first(sid, "\"decision\":\"reject\",\"reason\":\"not now\"");
    st = wait_state(sid, record_is, &done);
    ck_assert_str_eq(result_text(record(st, 0)), "rejected by the user: not now");
    json_decref(st);
    json_decref(wait_state(sid, answered_after_tools, NULL));
    free(sid);
}
END_TEST

START_TEST(test_review_not_due_is_409_with_its_reason)
{
    char *sid = waiting_call(), body[256], reason[64];
    json_t *st = state_of(sid);
    const char *id = json_string_value(json_object_get(record(st, 0), "id"));

    ck_assert_int_eq(post_err(sid,
                              "{\"type\":\"user-review-tool-call\",\"toolCallId\":"
                              "\"no-such-call\",\"decision\":\"approve\"}",
                              "reason", reason, sizeof(reason)),
                     409);
    ck_assert_str_eq(reason, "unknown-id");
    snprintf(body, sizeof(body),
             "{\"type\":\"user-review-tool-call\",\"toolCallId\":\"%s\","
             "\"decision\":\"approve\"}",
             id);
    post_ok(sid, body);
    ck_assert_int_eq(post_err(sid, body, "reason", reason, sizeof(reason)), 409);
    ck_assert_str_eq(reason, "not-pending");
    json_decref(st);
    free(sid);
}
END_TEST

/* Malformed reviews and policies: 400 naming the field, the state unchanged. */
static const struct {
    const char *body;
    const char *field;
} bad[] = {
    {"{\"type\":\"user-review-tool-call\",\"decision\":\"approve\"}", "toolCallId"},
    {"{\"type\":\"user-review-tool-call\",\"toolCallId\":7,\"decision\":\"approve\"}",
     "toolCallId"},
    {"{\"type\":\"user-review-tool-call\",\"toolCallId\":\"x\"}", "decision"},
    {"{\"type\":\"user-review-tool-call\",\"toolCallId\":\"x\",\"decision\":\"maybe\"}",
     "decision"},
    {"{\"type\":\"user-review-tool-call\",\"toolCallId\":\"x\",\"decision\":\"approve\","
     "\"parameters\":\"[1,2]\"}",
     "parameters"},
    {"{\"type\":\"user-review-tool-call\",\"toolCallId\":\"x\",\"decision\":\"approve\","
     "\"parameters\":\"{not json\"}",
     "parameters"},
    {"{\"type\":\"user-review-tool-call\",\"toolCallId\":\"x\",\"decision\":\"approve\","
     "\"parameters\":{\"a\":1}}",
     "parameters"},
    {"{\"type\":\"user-review-tool-call\",\"toolCallId\":\"x\",\"decision\":\"approve\","
     "\"always\":\"yes\"}",
     "always"},
    {"{\"type\":\"user-review-tool-call\",\"toolCallId\":\"x\",\"decision\":\"reject\","
     "\"reason\":5}",
     "reason"},
    {"{\"type\":\"user-set-tool-policy\",\"policy\":\"auto\"}", "tool"},
    {"{\"type\":\"user-set-tool-policy\",\"tool\":\"calculator\"}", "policy"},
    {"{\"type\":\"user-set-tool-policy\",\"tool\":\"calculator\",\"policy\":"
     "\"sometimes\"}",
     "policy"},
    {"{\"type\":\"user-set-tool-policy\",\"tool\":\"calculator\",\"policy\":1}",
     "policy"},
};

START_TEST(test_malformed_reviews_are_400_naming_the_field)
{
    char *sid = waiting_call(), field[64];
    json_t *before = state_of(sid), *after;

    ck_assert_int_eq(post_err(sid, bad[_i].body, "field", field, sizeof(field)), 400);
    ck_assert_msg(!strcmp(field, bad[_i].field), "%s: field '%s', want '%s'",
                  bad[_i].body, field, bad[_i].field);
    after = state_of(sid);
    ck_assert(json_equal(before, after));
    json_decref(before);
    json_decref(after);
    free(sid);
}
END_TEST

START_TEST(test_always_allow_then_deny_by_policy)
{
    char *sid = waiting_call();
    struct want first = {0, "approved", true}, second = {1, NULL, true};
    struct want third = {2, NULL, true};
    json_t *st;

    review_first(sid, "\"decision\":\"approve\",\"always\":true");
    json_decref(wait_state(sid, record_is, &first));
    json_decref(wait_state(sid, answered_after_tools, NULL));
    st = state_of(sid);
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_object_get(st, "toolPolicies"), "calculator")),
                     "auto");
    json_decref(st);

    /* Allowed always: the next call runs at once, no approval on it. */
    post_ok(sid, "{\"type\":\"user-send-message\",\"content\":"
                 "\"/call calculator {\\\"expression\\\":\\\"1+1\\\"}\"}");
    st = wait_state(sid, record_is, &second);
    ck_assert_ptr_null(json_object_get(record(st, 1), "approval"));
    ck_assert_str_eq(result_text(record(st, 1)), "2");
    json_decref(st);
    json_decref(wait_state(sid, answered_after_tools, NULL));

    /* Denied by the session's policy: answered at once, never run. */
    post_ok(sid, "{\"type\":\"user-set-tool-policy\",\"tool\":\"calculator\","
                 "\"policy\":\"deny\"}");
    post_ok(sid, "{\"type\":\"user-send-message\",\"content\":"
                 "\"/call calculator {\\\"expression\\\":\\\"3+3\\\"}\"}");
    st = wait_state(sid, record_is, &third);
    ck_assert_str_eq(result_text(record(st, 2)), "denied by policy");
    json_decref(st);

    /* Cleared: back to the configured policy (ask). */
    post_ok(sid, "{\"type\":\"user-set-tool-policy\",\"tool\":\"calculator\","
                 "\"policy\":null}");
    st = state_of(sid);
    ck_assert_ptr_null(
        json_object_get(json_object_get(st, "toolPolicies"), "calculator"));
    json_decref(st);
    free(sid);
}
END_TEST

START_TEST(test_new_message_rejects_what_waits)
{
    char *sid = waiting_call();
    struct want done = {0, "rejected", true};
    json_t *st;

    post_ok(sid, "{\"type\":\"user-send-message\",\"content\":\"never mind\"}");
    st = wait_state(sid, record_is, &done);
    ck_assert_str_eq(result_text(record(st, 0)),
                     "not approved: the user sent a new message");
    json_decref(st);
    json_decref(wait_state(sid, answered_after_tools, NULL));
    free(sid);
}
END_TEST

/* The waiting record comes back from the log: approving it after a restart works. */
START_TEST(test_approval_after_a_restart)
{
    char *sid = waiting_call();
    struct want waiting = {0, "pending", false}, done = {0, "approved", true};
    json_t *st;

    ck_assert_int_eq(itest_server_stop(&srv), 0);
    start();
    st = wait_state(sid, record_is, &waiting);
    json_decref(st);
    review_first(sid, "\"decision\":\"approve\"");
    st = wait_state(sid, record_is, &done);
    ck_assert_str_eq(result_text(record(st, 0)), "5");
    json_decref(st);
    free(sid);
}
END_TEST

Suite *approval_suite(void)
{
    Suite *s = suite_create("approval");
    TCase *tc = tcase_create("core");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, getenv("RX_SERVER_WRAPPER") ? 300 : 60);
    tcase_add_test(tc, test_ask_waits_then_approve_runs);
    tcase_add_test(tc, test_edited_parameters_reach_the_tool);
    tcase_add_test(tc, test_reject_with_reason_then_the_brain_goes_on);
    tcase_add_test(tc, test_review_not_due_is_409_with_its_reason);
    tcase_add_loop_test(tc, test_malformed_reviews_are_400_naming_the_field, 0,
                        (int)(sizeof(bad) / sizeof(bad[0])));
    tcase_add_test(tc, test_always_allow_then_deny_by_policy);
    tcase_add_test(tc, test_new_message_rejects_what_waits);
    tcase_add_test(tc, test_approval_after_a_restart);
    suite_add_tcase(s, tc);
    return s;
}
