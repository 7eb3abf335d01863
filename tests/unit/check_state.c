/*
 * check_state - the state's JSON wire shape (SPEC 3.1): exact bytes and key
 * order, encode -> decode -> encode round trips, copies, and decode errors that
 * name the offending field; the time-order aid (`time_sorted`) and the tail
 * copies brains get (rx_state_copy_tail); tool approval (SPEC 3.6): records'
 * "approval" and the session's toolPolicies, and snapshots older than both;
 * effects that survive a crash (SPEC 3.7): "startedAt", "in-doubt" and
 * "resolved" round-trip, and what cannot be decodes to an error.
 */
#include "tests/unit/helper_sm.h"

#include <inttypes.h>

static const char *const round_trip[] = {
    S0,
    ST(1, UM("m1", "hi", 1), "", "", 0, "", 0),
    ST(1700000000123,
       UM("m1", "\\u00e9\\u4e2d \\ud83d\\ude00 \\'q\\' \\\\ / \\t\\r\\n\\b\\f \\u0001",
          1700000000000),
       AM("a1", "", 1700000000001, 1700000000001, "streaming", 1700000000000), "",
       1700000000000, "", 0),
    ST(9, UM("m1", "a", 1) "," UM("m2", "b", 5),
       AM("a1", "x", 2, 3, "complete", 1) "," AM("a2", "y", 6, 7, "stopped", 5),
       TC("c1", "calculator", "{\\'expression\\':\\'2+3\\'}", 3, OKR("5", 4),
          true) "," TC("c2", "clock", "{}", 3, ERRR("cancelled", 7),
                       false) "," TC("c3", "x", "", 8, "null", false),
       8, "sum\\nmary", 4),
    /* Tool approval: every approval, and overrides (encoded in name order). */
    STP(9, UM("m1", "a", 1), "",
        TCA("c1", "shell", "{}", 3, "null", false, "pending") "," TCA(
            "c2", "shell", "{\\'x\\':1}", 3, "null", false,
            "approved") "," TCA("c3", "shell", "{}", 3, ERRR("rejected by the user", 4),
                                false, "rejected") "," TC("c4", "rm", "{}", 5,
                                                          ERRR("denied by policy", 5),
                                                          false),
        1, "", 0, "'a b':'ask','rm':'deny','shell':'auto','\\u00e9':'ask'"),
    /* Effects that survive a crash (SPEC 3.7): startedAt, in doubt, resolved. */
    ST(9, UM("m1", "a", 1), "",
       TCS("c1", "pay", "{}", 3, 4, "null", false) "," TCSA(
           "c2", "pay", "{}", 3, 5, "null", false,
           "in-doubt") "," TCSA("c3", "pay", "{}", 3, 5, OKR("paid", 8), true,
                                "resolved") "," TCSA("c4", "pay", "{}", 3, 6,
                                                     ERRR("not run again after an "
                                                          "interruption",
                                                          9),
                                                     false,
                                                     "rejected") "," TCSA("c5", "pay",
                                                                          "{}", 3, 9,
                                                                          "null", false,
                                                                          "approved"),
       1, "", 0),
};

/* The exact bytes of SPEC 3.1's example, key order included. */
START_TEST(test_spec_example_bytes)
{
    static const char spec[] =
        "{\"updatedAt\":4,\"userMessages\":[{\"kind\":\"user\",\"id\":\"m1\",\"content\":"
        "\"hi\",\"receivedAt\":1}],\"assistantMessages\":[{\"kind\":\"assistant\",\"id\":"
        "\"a1\",\"content\":\"\",\"receivedAt\":2,\"updatedAt\":2,\"status\":"
        "\"streaming\",\"calledBrainAt\":1}],\"toolCallRecords\":[{\"id\":\"c1\","
        "\"name\":\"calculator\",\"parameters\":\"{\\\"expression\\\":\\\"2+3\\\"}\","
        "\"calledAt\":3,\"result\":{\"isSuccess\":true,\"content\":\"5\",\"receivedAt\":"
        "4},\"isLoaded\":false}],\"calledBrainAt\":1,\"contextSummary\":\"\","
        "\"summaryCutAt\":0,\"toolPolicies\":{},\"settings\":{}}";
    json_t *j = json_loads(spec, 0, NULL);
    struct rx_state s;
    char *got;

    ck_assert_ptr_nonnull(j);
    ck_assert_int_eq(rx_state_decode(j, &s, NULL), 0);
    got = state_bytes(&s);
    ck_assert_str_eq(got, spec);
    free(got);
    json_decref(j);
    rx_state_release(&s);
}
END_TEST

START_TEST(test_initial_state)
{
    struct rx_state s;

    ck_assert_int_eq(rx_state_init(&s), 0);
    ck_assert(rx_state_check_invariants(&s));
    ck_assert_state(&s, S0);
    ck_assert_uint_eq(rx_state_pending_tools(&s), 0);
    ck_assert_uint_eq(rx_state_awaiting_approval(&s), 0);
    ck_assert_int_eq(rx_state_tool_policy(&s, "calculator"), RX_POLICY_UNSET);
    rx_state_release(&s);
}
END_TEST

START_TEST(test_round_trip)
{
    struct rx_state s, back, copy;
    char *b1, *b2, *b3;
    json_t *j;

    state_from(&s, round_trip[_i]);
    b1 = state_bytes(&s);
    j = json_loads(b1, 0, NULL);
    ck_assert_msg(j != NULL, "encoding is not JSON: %s", b1);
    ck_assert_int_eq(rx_state_decode(j, &back, NULL), 0);
    b2 = state_bytes(&back);
    ck_assert_str_eq(b1, b2);
    ck_assert_int_eq(rx_state_copy(&s, &copy), 0);
    ck_assert(rx_state_check_invariants(&copy));
    b3 = state_bytes(&copy);
    ck_assert_str_eq(b1, b3);
    /* The encoding means what the text meant. */
    {
        json_t *orig = qjson(round_trip[_i]);

        ck_assert(json_equal(orig, j));
        json_decref(orig);
    }
    free(b1);
    free(b2);
    free(b3);
    json_decref(j);
    rx_state_release(&s);
    rx_state_release(&back);
    rx_state_release(&copy);
}
END_TEST

/* The record encoders give the same shape as inside the state. */
START_TEST(test_record_encoders)
{
    struct rx_state s;
    struct rx_buf b;

    state_from(&s, round_trip[3]);
    rx_buf_init(&b, RX_BUF_SMALL_MAX);
    ck_assert_int_eq(rx_message_encode(&s.assistant.items[1], true, &b), 0);
    ck_assert_str_eq(b.data, "{\"kind\":\"assistant\",\"id\":\"a2\",\"content\":\"y\","
                             "\"receivedAt\":6,\"updatedAt\":7,\"status\":\"stopped\","
                             "\"calledBrainAt\":5}");
    rx_buf_reset(&b);
    ck_assert_int_eq(rx_message_encode(&s.user.items[0], false, &b), 0);
    ck_assert_str_eq(
        b.data, "{\"kind\":\"user\",\"id\":\"m1\",\"content\":\"a\",\"receivedAt\":1}");
    rx_buf_reset(&b);
    ck_assert_int_eq(rx_tool_call_encode(&s.tools.items[1], &b), 0);
    ck_assert_str_eq(b.data, "{\"id\":\"c2\",\"name\":\"clock\",\"parameters\":\"{}\","
                             "\"calledAt\":3,\"result\":{\"isSuccess\":false,\"error\":"
                             "\"cancelled\",\"receivedAt\":7},\"isLoaded\":false}");
    ck_assert_uint_eq(rx_state_pending_tools(&s), 1);
    ck_assert_ptr_eq(rx_state_find_tool(&s, "c3"), &s.tools.items[2]);
    ck_assert_ptr_null(rx_state_find_tool(&s, "c4"));
    ck_assert_ptr_eq(rx_state_find_user(&s, "m2"), &s.user.items[1]);
    ck_assert_ptr_eq(rx_state_find_assistant(&s, "a1"), &s.assistant.items[0]);
    ck_assert_ptr_null(rx_state_find_assistant(&s, "m1"));
    rx_buf_release(&b);
    rx_state_release(&s);
}
END_TEST

/* rx_buf_put_i64 writes every seq and timestamp: it must agree with printf. */
static const int64_t i64_rows[] = {
    0, 1, -1, 9, 10, -10, 99, 1700000000123, -1700000000123, INT64_MAX, INT64_MIN};

START_TEST(test_put_i64)
{
    char want[32];
    struct rx_buf b;

    rx_buf_init(&b, 64);
    ck_assert_int_eq(rx_buf_reserve(&b, 40), 0); /* reserved, still a C string */
    ck_assert_str_eq(b.data, "");
    ck_assert_int_eq(rx_buf_puts(&b, "x"), 0);
    ck_assert_int_eq(rx_buf_put_i64(&b, i64_rows[_i]), 0);
    snprintf(want, sizeof(want), "x%" PRId64, i64_rows[_i]);
    ck_assert_str_eq(b.data, want);
    ck_assert_uint_eq(b.len, strlen(want));
    rx_buf_release(&b);
    /* Past the bound nothing is appended. */
    rx_buf_init(&b, 1);
    ck_assert_int_eq(rx_buf_put_i64(&b, 10), -E2BIG);
    ck_assert_uint_eq(b.len, 0);
    rx_buf_release(&b);
}
END_TEST

/* An encode that runs into the buffer's bound leaves the buffer as it was. */
START_TEST(test_encode_bound)
{
    struct rx_state s;
    struct rx_buf b;

    state_from(&s, round_trip[3]);
    rx_buf_init(&b, 40);
    ck_assert_int_eq(rx_buf_puts(&b, "prefix"), 0);
    ck_assert_int_eq(rx_state_encode(&s, &b), -E2BIG);
    ck_assert_uint_eq(b.len, 6);
    ck_assert_str_eq(b.data, "prefix");
    rx_buf_release(&b);
    rx_state_release(&s);
}
END_TEST

struct bad_row {
    const char *state;
    const char *field; /* the error text names it; NULL: only -EINVAL */
};

#define GOOD_TC TC("c1", "clock", "{}", 1, "null", false)

static const struct bad_row bad_rows[] = {
    {"[1]", NULL},
    {"{'updatedAt':'x','userMessages':[],'assistantMessages':[],'toolCallRecords':[],"
     "'calledBrainAt':0,'contextSummary':'','summaryCutAt':0}",
     "updatedAt"},
    {"{'updatedAt':0,'assistantMessages':[],'toolCallRecords':[],'calledBrainAt':0,"
     "'contextSummary':'','summaryCutAt':0}",
     "userMessages"},
    {ST(1, "5", "", "", 0, "", 0), "userMessages"},
    {ST(1, "{'kind':'user','id':'m1','content':5,'receivedAt':1}", "", "", 0, "", 0),
     "content"},
    {ST(1, "{'kind':'user','id':7,'content':'x','receivedAt':1}", "", "", 0, "", 0),
     "id"},
    {ST(1, "{'kind':'user','id':'m1','content':'x'}", "", "", 0, "", 0), "receivedAt"},
    {ST(1, "{'kind':'assistant','id':'m1','content':'x','receivedAt':1}", "", "", 0, "",
        0),
     "kind"},
    {ST(2, "", AM("a1", "x", 1, 2, "done", 1), "", 0, "", 0), "status"},
    {ST(2, "",
        "{'kind':'assistant','id':'a1','content':'x','receivedAt':1,'updatedAt':2,"
        "'status':'complete'}",
        "", 0, "", 0),
     "calledBrainAt"},
    {"{'updatedAt':1,'userMessages':[],'assistantMessages':[],'toolCallRecords':{},"
     "'calledBrainAt':0,'contextSummary':'','summaryCutAt':0}",
     "toolCallRecords"},
    {ST(1, "", "",
        "{'id':'c1','name':'n','parameters':{},'calledAt':1,'result':null,'isLoaded':"
        "false}",
        0, "", 0),
     "parameters"},
    {ST(1, "", "",
        "{'id':'c1','name':'n','parameters':'{}','calledAt':1,'result':null,'isLoaded':"
        "'no'}",
        0, "", 0),
     "isLoaded"},
    {ST(1, "", "", TC("c1", "n", "{}", 1, "5", false), 0, "", 0), "result"},
    {ST(1, "", "", TC("c1", "n", "{}", 1, "{'isSuccess':true,'content':'x'}", false), 0,
        "", 0),
     "receivedAt"},
    {ST(1, "", "", TC("c1", "n", "{}", 1, "{'isSuccess':true,'receivedAt':1}", false), 0,
        "", 0),
     "content"},
    {ST(1, "", "", TC("c1", "n", "{}", 1, "{'isSuccess':false,'receivedAt':1}", false), 0,
        "", 0),
     "error"},
    {"{'updatedAt':1,'userMessages':[],'assistantMessages':[],'toolCallRecords':[],"
     "'calledBrainAt':0,'contextSummary':null,'summaryCutAt':0}",
     "contextSummary"},
    {"{'updatedAt':1,'userMessages':[],'assistantMessages':[],'toolCallRecords':[],"
     "'calledBrainAt':0,'contextSummary':'','summaryCutAt':-1}",
     "summaryCutAt"},
    {"{'updatedAt':1,'userMessages':[],'assistantMessages':[],'toolCallRecords':[],"
     "'contextSummary':'','summaryCutAt':0}",
     "calledBrainAt"},
    /* Tool approval. */
    {ST(1, "", "", TCA("c1", "n", "{}", 1, "null", false, "maybe"), 0, "", 0),
     "approval"},
    {ST(1, "", "",
        "{'id':'c1','name':'n','parameters':'{}','calledAt':1,'result':null,'isLoaded':"
        "false,'approval':1}",
        0, "", 0),
     "approval"},
    {STP(1, "", "", "", 0, "", 0, "'calc':'sometimes'"), "toolPolicies"},
    {STP(1, "", "", "", 0, "", 0, "'calc':null"), "toolPolicies"},
    {STP(1, "", "", "", 0, "", 0, "'':'ask'"), "toolPolicies"},
    {"{'updatedAt':1,'userMessages':[],'assistantMessages':[],'toolCallRecords':[],"
     "'calledBrainAt':0,'contextSummary':'','summaryCutAt':0,'toolPolicies':['ask']}",
     "toolPolicies"},
    /* startedAt (SPEC 3.7): a time, within calledAt..updatedAt. */
    {ST(5, "", "", TCS("c1", "n", "{}", 1, -1, "null", false), 0, "", 0), "startedAt"},
    {ST(5, "", "", TCS("c1", "n", "{}", 1, '2', "null", false), 0, "", 0), "startedAt"},
    {ST(5, "", "", TCS("c1", "n", "{}", 1, 1.5, "null", false), 0, "", 0), "startedAt"},
    {ST(5, "", "", TCS("c1", "n", "{}", 1, 6, "null", false), 0, "", 0), NULL},
    {ST(5, "", "", TCS("c1", "n", "{}", 3, 2, "null", false), 0, "", 0), NULL},
    /* In doubt: started and unanswered; resolved: a success result. */
    {ST(5, "", "", TCA("c1", "n", "{}", 1, "null", false, "in-doubt"), 0, "", 0), NULL},
    {ST(5, "", "", TCSA("c1", "n", "{}", 1, 2, OKR("x", 3), false, "in-doubt"), 0, "", 0),
     NULL},
    {ST(5, "", "", TCSA("c1", "n", "{}", 1, 2, "null", false, "resolved"), 0, "", 0),
     NULL},
    {ST(5, "", "", TCSA("c1", "n", "{}", 1, 2, ERRR("x", 3), false, "resolved"), 0, "",
        0),
     NULL},
    {ST(5, "", "", TCSA("c1", "n", "{}", 1, 2, "null", false, "in_doubt"), 0, "", 0),
     "approval"},
    /* Awaiting a person, yet answered: the machine never makes it. */
    {ST(1, "", "", TCA("c1", "n", "{}", 1, OKR("x", 1), false, "pending"), 0, "", 0),
     NULL},
    /* Invariants: duplicate ids, times after updatedAt. */
    {ST(1, UM("m1", "a", 1) "," UM("m1", "b", 1), "", "", 0, "", 0), NULL},
    {ST(1, "", "", GOOD_TC "," GOOD_TC, 0, "", 0), NULL},
    {ST(1, UM("m1", "a", 2), "", "", 0, "", 0), NULL},
    {ST(1, "", "", TC("c1", "n", "{}", 1, OKR("x", 2), false), 0, "", 0), NULL},
};

START_TEST(test_decode_errors)
{
    const struct bad_row *r = &bad_rows[_i];
    json_t *j = qjson(r->state);
    struct rx_state s;
    struct rx_error err = {""};

    ck_assert_msg(rx_state_decode(j, &s, &err) == -EINVAL, "decoded: %s", r->state);
    if (r->field)
        ck_assert_msg(strstr(err.text, r->field) != NULL, "'%s' does not name '%s'",
                      err.text, r->field);
    else
        ck_assert_str_ne(err.text, "");
    /* err may be NULL too. */
    ck_assert_int_eq(rx_state_decode(j, &s, NULL), -EINVAL);
    json_decref(j);
}
END_TEST

/* Snapshots written before tool approval have neither field: they load as
   no overrides and no approvals, and encode with "toolPolicies":{}. */
START_TEST(test_old_snapshot_decodes)
{
    struct rx_state s;

    state_from(&s, "{'updatedAt':5,'userMessages':[],'assistantMessages':[],"
                   "'toolCallRecords':[{'id':'c1','name':'clock','parameters':'{}',"
                   "'calledAt':4,'result':null,'isLoaded':false}],'calledBrainAt':1,"
                   "'contextSummary':'','summaryCutAt':0}");
    ck_assert_int_eq(s.tools.items[0].approval, RX_APPROVAL_NONE);
    ck_assert_uint_eq(s.policies.len, 0);
    ck_assert_state(&s,
                    ST(5, "", "", TC("c1", "clock", "{}", 4, "null", false), 1, "", 0));
    rx_state_release(&s);
    /* null reads as absent too. */
    state_from(&s, "{'updatedAt':5,'userMessages':[],'assistantMessages':[],"
                   "'toolCallRecords':[{'id':'c1','name':'clock','parameters':'{}',"
                   "'calledAt':4,'result':null,'isLoaded':false,'approval':null}],"
                   "'calledBrainAt':1,'contextSummary':'','summaryCutAt':0,"
                   "'toolPolicies':null}");
    ck_assert_state(&s,
                    ST(5, "", "", TC("c1", "clock", "{}", 4, "null", false), 1, "", 0));
    rx_state_release(&s);
    /* A call never started: startedAt absent, null or 0, encoded absent. */
    state_from(&s, ST(5, "", "",
                      TCS("c1", "clock", "{}", 4, null, "null",
                          false) "," TCS("c2", "clock", "{}", 4, 0, "null", false),
                      1, "", 0));
    ck_assert_int_eq(s.tools.items[0].started_at, 0);
    ck_assert_int_eq(s.tools.items[1].started_at, 0);
    ck_assert_state(&s, ST(5, "", "",
                           TC("c1", "clock", "{}", 4, "null",
                              false) "," TC("c2", "clock", "{}", 4, "null", false),
                           1, "", 0));
    rx_state_release(&s);
}
END_TEST

/* The accessors the server reads: overrides by name, calls awaiting a person. */
START_TEST(test_approval_accessors)
{
    struct rx_state s, c;

    state_from(&s, round_trip[4]);
    ck_assert_int_eq(rx_state_tool_policy(&s, "shell"), RX_POLICY_AUTO);
    ck_assert_int_eq(rx_state_tool_policy(&s, "rm"), RX_POLICY_DENY);
    ck_assert_int_eq(rx_state_tool_policy(&s, "a b"), RX_POLICY_ASK);
    ck_assert_int_eq(rx_state_tool_policy(&s, "\xc3\xa9"), RX_POLICY_ASK);
    ck_assert_int_eq(rx_state_tool_policy(&s, "shel"), RX_POLICY_UNSET);
    ck_assert_int_eq(rx_state_tool_policy(&s, "zz"), RX_POLICY_UNSET);
    ck_assert_int_eq(rx_state_tool_policy(&s, ""), RX_POLICY_UNSET);
    ck_assert_uint_eq(rx_state_pending_tools(&s), 2); /* c1 awaits, c2 runs */
    ck_assert_uint_eq(rx_state_awaiting_approval(&s), 1);
    ck_assert_int_eq(rx_state_find_tool(&s, "c2")->approval, RX_APPROVAL_APPROVED);
    /* Copies and tails (a brain's view) keep both. */
    ck_assert_int_eq(rx_state_copy_tail(&s, 1, 0, 2, &c), 0);
    ck_assert(rx_state_check_invariants(&c));
    ck_assert_int_eq(rx_state_tool_policy(&c, "rm"), RX_POLICY_DENY);
    ck_assert_uint_eq(c.policies.len, 4);
    ck_assert_int_eq(rx_state_find_tool(&c, "c3")->approval, RX_APPROVAL_REJECTED);
    ck_assert_uint_eq(rx_state_awaiting_approval(&c), 0);
    rx_state_release(&c);
    rx_state_release(&s);
}
END_TEST

/* The names on the wire, and the map's bound when a snapshot is read. */
START_TEST(test_policy_names)
{
    enum rx_policy p = RX_POLICY_UNSET;
    enum rx_approval a = RX_APPROVAL_NONE;
    struct rx_state s;
    struct rx_error err = {""};
    json_t *j, *pol;
    char name[16];

    ck_assert_str_eq(rx_policy_name(RX_POLICY_AUTO), "auto");
    ck_assert_str_eq(rx_policy_name(RX_POLICY_ASK), "ask");
    ck_assert_str_eq(rx_policy_name(RX_POLICY_DENY), "deny");
    ck_assert_ptr_null(rx_policy_name(RX_POLICY_UNSET));
    ck_assert_int_eq(rx_policy_parse("deny", &p), 0);
    ck_assert_int_eq(p, RX_POLICY_DENY);
    ck_assert_int_eq(rx_policy_parse("Deny", &p), -EINVAL);
    ck_assert_int_eq(rx_policy_parse("", &p), -EINVAL);
    ck_assert_int_eq(rx_policy_parse(NULL, &p), -EINVAL);
    ck_assert_int_eq(p, RX_POLICY_DENY); /* unchanged on failure */
    ck_assert_str_eq(rx_approval_name(RX_APPROVAL_PENDING), "pending");
    ck_assert_str_eq(rx_approval_name(RX_APPROVAL_REJECTED), "rejected");
    ck_assert_ptr_null(rx_approval_name(RX_APPROVAL_NONE));
    ck_assert_int_eq(rx_approval_parse("approved", &a), 0);
    ck_assert_int_eq(a, RX_APPROVAL_APPROVED);
    ck_assert_int_eq(rx_approval_parse("none", &a), -EINVAL);
    ck_assert_str_eq(rx_approval_name(RX_APPROVAL_IN_DOUBT), "in-doubt");
    ck_assert_str_eq(rx_approval_name(RX_APPROVAL_RESOLVED), "resolved");
    ck_assert_ptr_null(rx_approval_name((enum rx_approval)(RX_APPROVAL_RESOLVED + 1)));
    ck_assert_int_eq(rx_approval_parse("in-doubt", &a), 0);
    ck_assert_int_eq(a, RX_APPROVAL_IN_DOUBT);
    ck_assert_int_eq(rx_approval_parse("resolved", &a), 0);
    ck_assert_int_eq(a, RX_APPROVAL_RESOLVED);

    j = qjson(S0);
    pol = json_object();
    json_object_set_new(j, "toolPolicies", pol);
    for (int i = 0; i < RX_POLICIES_MAX; i++) {
        snprintf(name, sizeof(name), "t%d", i);
        json_object_set_new(pol, name, json_string("ask"));
    }
    ck_assert_int_eq(rx_state_decode(j, &s, &err), 0);
    ck_assert_uint_eq(s.policies.len, RX_POLICIES_MAX);
    ck_assert(rx_state_check_invariants(&s));
    rx_state_release(&s);
    json_object_set_new(pol, "one-more", json_string("ask"));
    ck_assert_int_eq(rx_state_decode(j, &s, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.text, "toolPolicies"));
    json_decref(j);
}
END_TEST

START_TEST(test_status_names)
{
    enum rx_status st;

    ck_assert_str_eq(rx_status_name(RX_STATUS_STREAMING), "streaming");
    ck_assert_str_eq(rx_status_name(RX_STATUS_COMPLETE), "complete");
    ck_assert_str_eq(rx_status_name(RX_STATUS_STOPPED), "stopped");
    ck_assert_int_eq(rx_status_parse("stopped", &st), 0);
    ck_assert_int_eq(st, RX_STATUS_STOPPED);
    ck_assert_int_eq(rx_status_parse("Stopped", &st), -EINVAL);
}
END_TEST

/* ---- time order and tail copies ---------------------------------------------- */

static const struct {
    const char *state;
    bool user, assistant, tools; /* time_sorted after decode */
} order_rows[] = {
    {S0, true, true, true},
    {ST(9, UM("m1", "a", 1) "," UM("m2", "b", 5),
        AM("a1", "x", 2, 3, "complete", 1) "," AM("a2", "y", 6, 7, "stopped", 5),
        TC("c1", "c", "{}", 3, OKR("5", 4), false) "," TC("c2", "c", "{}", 3, "null",
                                                          false),
        3, "", 0),
     true, true, true},
    {ST(9, UM("m1", "a", 5) "," UM("m2", "b", 1), AM("a1", "x", 6, 7, "complete", 1),
        TC("c1", "c", "{}", 8, OKR("5", 9), false) "," TC("c2", "c", "{}", 3, "null",
                                                          false),
        3, "", 0),
     false, true, false},
    {ST(9, UM("m1", "a", 1),
        AM("a1", "x", 6, 7, "complete", 1) "," AM("a2", "y", 2, 7, "complete", 1), "", 1,
        "", 0),
     true, false, true},
};

/* The aid agrees with the records, survives a copy, and the machine keeps it. */
START_TEST(test_time_sorted)
{
    struct rx_state s, c;

    state_from(&s, order_rows[_i].state);
    ck_assert_int_eq(s.user.time_sorted, order_rows[_i].user);
    ck_assert_int_eq(s.assistant.time_sorted, order_rows[_i].assistant);
    ck_assert_int_eq(s.tools.time_sorted, order_rows[_i].tools);
    ck_assert_int_eq(rx_state_copy(&s, &c), 0);
    ck_assert_int_eq(c.user.time_sorted, s.user.time_sorted);
    ck_assert_int_eq(c.tools.time_sorted, s.tools.time_sorted);
    /* Appends come at or after updatedAt: a list in order stays in order. */
    apply_text(
        &c, "{'type':'user-send-message','timestamp':20,'messageId':'m9','content':'z'}",
        RX_ACCEPTED);
    ck_assert_int_eq(c.user.time_sorted, order_rows[_i].user);
    ck_assert(rx_state_check_invariants(&c));
    /* A wrong aid is a broken invariant. */
    if (c.user.len > 1 && c.user.time_sorted) {
        c.user.items[0].received_at = c.user.items[1].received_at + 1;
        ck_assert(!rx_state_check_invariants(&c));
        c.user.items[0].received_at = 1;
    }
    rx_state_release(&c);
    rx_state_release(&s);
}
END_TEST

/* A tail: the scalars, the summary and the records from each `from` on, with
   their own indexes; nothing before them. */
/* No summary is one shared empty string: made, set, copied or decoded. */
START_TEST(test_shared_empty_summary)
{
    struct rx_state a, b, c, d;
    char *sum = strdup("sum");

    ck_assert_int_eq(rx_state_init(&a), 0);
    ck_assert_int_eq(rx_state_init(&b), 0);
    ck_assert_str_eq(a.context_summary, "");
    ck_assert_ptr_eq(a.context_summary, b.context_summary);
    rx_state_set_summary(&a, sum);
    ck_assert_ptr_eq(a.context_summary, sum);
    rx_state_set_summary(&a, strdup("")); /* freed: the shared one again */
    ck_assert_ptr_eq(a.context_summary, b.context_summary);
    ck_assert_int_eq(rx_state_copy_tail(&a, 0, 0, 0, &c), 0);
    ck_assert_ptr_eq(c.context_summary, b.context_summary);
    state_from(&d, S0);
    ck_assert_ptr_eq(d.context_summary, b.context_summary);
    rx_state_release(&a);
    rx_state_release(&b);
    rx_state_release(&c);
    rx_state_release(&d);
}
END_TEST

START_TEST(test_copy_tail)
{
    struct rx_state s, t;

    state_from(
        &s, ST(9, UM("m1", "a", 1) "," UM("m2", "b", 5),
               AM("a1", "x", 2, 3, "complete", 1) "," AM("a2", "", 6, 7, "streaming", 5),
               TC("c1", "c", "{}", 3, OKR("5", 4), true) "," TC("c2", "d", "{\\'k\\':1}",
                                                                8, "null", false),
               5, "sum", 4));
    ck_assert_int_eq(rx_state_copy_tail(&s, 1, 1, 1, &t), 0);
    ck_assert(rx_state_check_invariants(&t));
    ck_assert_int_eq(t.updated_at, 9);
    ck_assert_int_eq(t.called_brain_at, 5);
    ck_assert_int_eq(t.summary_cut_at, 4);
    ck_assert_str_eq(t.context_summary, "sum");
    ck_assert_uint_eq(t.user.len, 1);
    ck_assert_uint_eq(t.assistant.len, 1);
    ck_assert_uint_eq(t.tools.len, 1);
    ck_assert_ptr_nonnull(rx_state_find_user(&t, "m2"));
    ck_assert_ptr_null(rx_state_find_user(&t, "m1"));
    ck_assert_ptr_null(rx_state_find_tool(&t, "c1"));
    ck_assert_str_eq(rx_state_find_tool(&t, "c2")->parameters, "{\"k\":1}");
    ck_assert_uint_eq(t.assistant.settled, 0); /* a2 still streams */
    ck_assert_int_eq(t.latest_result_at, 0);   /* c1's result is not in the tail */
    ck_assert_uint_eq(rx_state_pending_tools(&t), 1);
    rx_state_release(&t);
    /* From past the end: empty lists, same scalars. */
    ck_assert_int_eq(rx_state_copy_tail(&s, 7, 7, 7, &t), 0);
    ck_assert(rx_state_check_invariants(&t));
    ck_assert_uint_eq(t.user.len + t.assistant.len + t.tools.len, 0);
    ck_assert_str_eq(t.context_summary, "sum");
    rx_state_release(&t);
    rx_state_release(&s);
}
END_TEST

Suite *state_suite(void);

Suite *state_suite(void)
{
    Suite *s = suite_create("state");
    TCase *tc = tcase_create("json");

    tcase_add_test(tc, test_spec_example_bytes);
    tcase_add_test(tc, test_initial_state);
    tcase_add_loop_test(tc, test_round_trip, 0,
                        sizeof(round_trip) / sizeof(round_trip[0]));
    tcase_add_test(tc, test_record_encoders);
    tcase_add_loop_test(tc, test_put_i64, 0, sizeof(i64_rows) / sizeof(i64_rows[0]));
    tcase_add_test(tc, test_encode_bound);
    tcase_add_loop_test(tc, test_decode_errors, 0,
                        sizeof(bad_rows) / sizeof(bad_rows[0]));
    tcase_add_test(tc, test_status_names);
    tcase_add_test(tc, test_old_snapshot_decodes);
    tcase_add_test(tc, test_approval_accessors);
    tcase_add_test(tc, test_policy_names);
    tcase_add_loop_test(tc, test_time_sorted, 0,
                        sizeof(order_rows) / sizeof(order_rows[0]));
    tcase_add_test(tc, test_copy_tail);
    tcase_add_test(tc, test_shared_empty_summary);
    suite_add_tcase(s, tc);
    return s;
}
