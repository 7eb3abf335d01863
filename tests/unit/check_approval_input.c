/*
 * check_approval_input - the shapes of the tool approval inputs (SPEC 3.2,
 * 3.6, 3.7): user-review-tool-call (approve, reject, and retry / resolve for
 * a call in doubt), user-set-tool-policy, the policy stamp on brain-call-tools
 * entries, toolkit-start-call and toolkit-call-in-doubt. Every invalid field
 * is named; what the parser keeps; encode -> parse -> encode gives the same
 * bytes, with the meaning kept, so the log replays exactly.
 */
#include "tests/unit/helper_sm.h"

/* ---- parse: shapes, with the offending field named ---------------------------- */

static const struct {
    const char *input;
    const char *field; /* NULL: parses */
} parse_rows[] = {
    {REVIEW("c1", "approve", ""), NULL},
    {REVIEW("c1", "reject", ",'reason':'x','always':true"), NULL},
    {REVIEW("c1", "approve", ",'parameters':' {\\'a\\':[1,{}],\\'b\\':null} '"), NULL},
    {REVIEW("c1", "approve", ",'parameters':null,'reason':null,'always':null"), NULL},
    {"{'type':'user-review-tool-call','timestamp':7,'decision':'approve'}", "toolCallId"},
    {REVIEW("", "approve", ""), "toolCallId"},
    {"{'type':'user-review-tool-call','timestamp':7,'toolCallId':5,'decision':'reject'}",
     "toolCallId"},
    {"{'type':'user-review-tool-call','timestamp':7,'toolCallId':'c1'}", "decision"},
    {REVIEW("c1", "approved", ""), "decision"},
    {REVIEW("c1", "Approve", ""), "decision"},
    {"{'type':'user-review-tool-call','timestamp':7,'toolCallId':'c1','decision':true}",
     "decision"},
    {REVIEW("c1", "approve", ",'always':'yes'"), "always"},
    {REVIEW("c1", "approve", ",'always':1"), "always"},
    {REVIEW("c1", "reject", ",'reason':5"), "reason"},
    {REVIEW("c1", "approve", ",'parameters':{'a':1}"), "parameters"},
    {REVIEW("c1", "approve", ",'parameters':'[1]'"), "parameters"},
    {REVIEW("c1", "approve", ",'parameters':'1'"), "parameters"},
    {REVIEW("c1", "approve", ",'parameters':''"), "parameters"},
    {REVIEW("c1", "approve", ",'parameters':'{\\'a\\':}'"), "parameters"},
    {REVIEW("c1", "approve", ",'parameters':'{} {}'"), "parameters"},
    {REVIEW("c1", "approve", ",'parameters':'{\\'a\\':\\'\\\\u0000\\'}'"), "parameters"},
    {REVIEW("c1", "approve", ",'parameters':'{\\u0000}'"), "parameters"},
    /* Checked whatever the decision, then dropped. */
    {REVIEW("c1", "reject", ",'parameters':'[1]'"), "parameters"},
    {REVIEW("c1", "approve", ",'reason':[]"), "reason"},
    /* The decisions on a call in doubt (SPEC 3.7). */
    {REVIEW("c1", "retry", ""), NULL},
    {REVIEW("c1", "resolve", ",'result':'done'"), NULL},
    {REVIEW("c1", "resolve", ",'result':''"), NULL},
    {REVIEW("c1", "reject", ",'result':null"), NULL},
    {REVIEW("c1", "resolve", ""), "result"},
    {REVIEW("c1", "resolve", ",'result':null"), "result"},
    {REVIEW("c1", "resolve", ",'result':5"), "result"},
    {REVIEW("c1", "resolve", ",'result':{'a':1}"), "result"},
    {REVIEW("c1", "resolve", ",'result':'a\\u0000b'"), "result"},
    {REVIEW("c1", "retry", ",'result':7"), "result"},
    {REVIEW("c1", "retry", ",'always':'yes'"), "always"},
    {REVIEW("c1", "retry", ",'parameters':'[1]'"), "parameters"},
    {REVIEW("c1", "Retry", ""), "decision"},
    {REVIEW("c1", "resolved", ",'result':'x'"), "decision"},
    {"{'type':'toolkit-start-call','timestamp':7,'toolCallId':'c1'}", NULL},
    {"{'type':'toolkit-start-call','toolCallId':'c1'}", NULL},
    {"{'type':'toolkit-start-call','timestamp':7}", "toolCallId"},
    {"{'type':'toolkit-start-call','timestamp':7,'toolCallId':''}", "toolCallId"},
    {"{'type':'toolkit-start-call','timestamp':7,'toolCallId':3}", "toolCallId"},
    {"{'type':'toolkit-start-call','timestamp':-1,'toolCallId':'c1'}", "timestamp"},
    {"{'type':'toolkit-call-in-doubt','timestamp':7,'toolCallId':'c1'}", NULL},
    {"{'type':'toolkit-call-in-doubt','timestamp':7,'toolCallId':null}", "toolCallId"},
    {"{'type':'toolkit-call-in-doubt','timestamp':7}", "toolCallId"},
    {SET_POLICY("shell", "'auto'"), NULL},
    {SET_POLICY("shell", "'deny'"), NULL},
    {SET_POLICY("shell", "null"), NULL},
    {"{'type':'user-set-tool-policy','timestamp':7,'policy':'ask'}", "tool"},
    {SET_POLICY("", "'ask'"), "tool"},
    {"{'type':'user-set-tool-policy','timestamp':7,'tool':7,'policy':'ask'}", "tool"},
    {"{'type':'user-set-tool-policy','timestamp':7,'tool':'shell'}", "policy"},
    {SET_POLICY("shell", "'never'"), "policy"},
    {SET_POLICY("shell", "'unset'"), "policy"},
    {SET_POLICY("shell", "''"), "policy"},
    {SET_POLICY("shell", "false"), "policy"},
    {SET_POLICY("shell", "{}"), "policy"},
    {CALLS("'c1':{'name':'n','parameters':'{}','policy':'ask'}"), NULL},
    {CALLS("'c1':{'name':'n','parameters':'{}','policy':null}"), NULL},
    {CALLS("'c1':{'name':'n','parameters':'{}','policy':'maybe'}"), "toolCalls.policy"},
    {CALLS("'c1':{'name':'n','parameters':'{}','policy':1}"), "toolCalls.policy"},
};

START_TEST(test_parse)
{
    char *text = q(parse_rows[_i].input);
    /* As a server that lets a NUL through to the parser would. */
    json_t *j = json_loads(text, JSON_ALLOW_NUL, NULL);
    struct rx_input in;
    const char *field = "unset", *want = parse_rows[_i].field;
    struct rx_error err = {""};
    int rc;

    ck_assert_ptr_nonnull(j);
    rc = rx_input_parse(j, &in, &field, &err);

    if (!want) {
        ck_assert_msg(rc == 0, "%s: %d field %s (%s)", parse_rows[_i].input, rc,
                      field ? field : "-", err.text);
        rx_input_release(&in);
    } else {
        ck_assert_msg(rc == -EINVAL, "%s: rc %d", parse_rows[_i].input, rc);
        ck_assert_ptr_nonnull(field);
        ck_assert_msg(!strcmp(field, want), "%s: field '%s', want '%s'",
                      parse_rows[_i].input, field, want);
        ck_assert_msg(strstr(err.text, want) != NULL, "'%s' does not name '%s'", err.text,
                      want);
    }
    json_decref(j);
    free(text);
}
END_TEST

/* What the parser keeps: each field where it means something. */
START_TEST(test_parse_fields)
{
    struct rx_input in;

    input_from(&in,
               REVIEW("c1", "approve", ",'parameters':'{}','reason':'r','always':true"));
    ck_assert_int_eq(in.type, RX_IN_USER_REVIEW_TOOL_CALL);
    ck_assert_int_eq(rx_input_type_origin(in.type), RX_ORIGIN_USER);
    ck_assert_int_eq(in.decision, RX_DECISION_APPROVE);
    ck_assert(in.always);
    ck_assert_str_eq(in.tool_call_id, "c1");
    ck_assert_str_eq(in.parameters, "{}");
    ck_assert_ptr_null(in.text); /* a reason goes with a rejection */
    rx_input_release(&in);

    input_from(&in, REVIEW("c1", "reject", ",'parameters':'{}','reason':'r'"));
    ck_assert_int_eq(in.decision, RX_DECISION_REJECT);
    ck_assert(!in.always);
    ck_assert_ptr_null(in.parameters); /* edits go with an approval */
    ck_assert_str_eq(in.text, "r");
    rx_input_release(&in);

    /* A call in doubt: retry keeps nothing but the id; resolve its result. */
    input_from(&in, REVIEW("c1", "retry",
                           ",'parameters':'{}','reason':'r','result':'x','always':true"));
    ck_assert_int_eq(in.decision, RX_DECISION_RETRY);
    ck_assert(!in.always);
    ck_assert_ptr_null(in.parameters);
    ck_assert_ptr_null(in.text);
    rx_input_release(&in);
    input_from(&in, REVIEW("c1", "resolve",
                           ",'parameters':'{}','reason':'r','result':'x','always':true"));
    ck_assert_int_eq(in.decision, RX_DECISION_RESOLVE);
    ck_assert(!in.always);
    ck_assert_ptr_null(in.parameters);
    ck_assert_str_eq(in.text, "x");
    rx_input_release(&in);
    input_from(&in, REVIEW("c1", "reject", ",'reason':'r','result':'x'"));
    ck_assert_str_eq(in.text, "r"); /* the reason, not the result */
    rx_input_release(&in);
    ck_assert_str_eq(rx_decision_name(RX_DECISION_APPROVE), "approve");
    ck_assert_str_eq(rx_decision_name(RX_DECISION_REJECT), "reject");
    ck_assert_str_eq(rx_decision_name(RX_DECISION_RETRY), "retry");
    ck_assert_str_eq(rx_decision_name(RX_DECISION_RESOLVE), "resolve");
    ck_assert_ptr_null(rx_decision_name(RX_DECISION_NONE));
    ck_assert_ptr_null(rx_decision_name((enum rx_decision)9));
    {
        enum rx_decision d = RX_DECISION_NONE;

        ck_assert_int_eq(rx_decision_parse("resolve", &d), 0);
        ck_assert_int_eq(d, RX_DECISION_RESOLVE);
        ck_assert_int_eq(rx_decision_parse("none", &d), -EINVAL);
        ck_assert_int_eq(rx_decision_parse(NULL, &d), -EINVAL);
        ck_assert_int_eq(d, RX_DECISION_RESOLVE);
    }

    /* The runtime's inputs: toolkit origin, the id only. */
    input_from(&in, "{'type':'toolkit-start-call','timestamp':7,'toolCallId':'c1',"
                    "'result':'x'}");
    ck_assert_int_eq(in.type, RX_IN_TOOLKIT_START_CALL);
    ck_assert_int_eq(rx_input_type_origin(in.type), RX_ORIGIN_TOOLKIT);
    ck_assert_str_eq(rx_input_type_name(in.type), "toolkit-start-call");
    ck_assert_str_eq(in.tool_call_id, "c1");
    ck_assert_ptr_null(in.text);
    rx_input_release(&in);
    input_from(&in, "{'type':'toolkit-call-in-doubt','timestamp':7,'toolCallId':'c1'}");
    ck_assert_int_eq(in.type, RX_IN_TOOLKIT_CALL_IN_DOUBT);
    ck_assert_int_eq(rx_input_type_origin(in.type), RX_ORIGIN_TOOLKIT);
    ck_assert_str_eq(rx_input_type_name(in.type), "toolkit-call-in-doubt");
    rx_input_release(&in);

    input_from(&in, SET_POLICY("shell", "null"));
    ck_assert_int_eq(in.type, RX_IN_USER_SET_TOOL_POLICY);
    ck_assert_int_eq(rx_input_type_origin(in.type), RX_ORIGIN_USER);
    ck_assert_str_eq(in.tool, "shell");
    ck_assert_int_eq(in.policy, RX_POLICY_UNSET);
    rx_input_release(&in);
    input_from(&in, SET_POLICY("shell", "'deny'"));
    ck_assert_int_eq(in.policy, RX_POLICY_DENY);
    rx_input_release(&in);

    input_from(&in, CALLS("'c1':{'name':'n','parameters':'{}','policy':'ask'},"
                          "'c2':{'name':'n','parameters':'{}'}"));
    ck_assert_int_eq(in.calls[0].policy, RX_POLICY_ASK);
    ck_assert_int_eq(in.calls[1].policy, RX_POLICY_UNSET);
    rx_input_release(&in);
}
END_TEST

/* encode -> parse -> encode gives the same bytes, and the meaning is kept. */
static const struct {
    const char *input;
    const char *encoded; /* NULL: the input itself */
} encode_rows[] = {
    {REVIEW("c1", "approve", ""), NULL},
    {REVIEW("c1", "approve", ",'parameters':'{\\'a\\':1}','always':true"), NULL},
    {REVIEW("c1", "reject", ",'reason':'not now'"), NULL},
    {REVIEW("c1", "reject", ",'reason':'no','always':true"), NULL},
    /* What a decision does not use is not kept; always:false is the default. */
    {REVIEW("c1", "reject", ",'parameters':'{}','always':false"),
     REVIEW("c1", "reject", "")},
    {REVIEW("c1", "approve", ",'reason':'fine','always':null"),
     REVIEW("c1", "approve", "")},
    {REVIEW("c1", "retry", ""), NULL},
    {REVIEW("c1", "resolve", ",'result':'paid \\u00e9 \\\"once\\\"'"), NULL},
    {REVIEW("c1", "resolve", ",'result':''"), NULL},
    {REVIEW("c1", "retry", ",'parameters':'{}','reason':'r','result':'x','always':true"),
     REVIEW("c1", "retry", "")},
    {REVIEW("c1", "resolve", ",'reason':'r','result':'x','always':true"),
     REVIEW("c1", "resolve", ",'result':'x'")},
    {REVIEW("c1", "reject", ",'reason':'r','result':'x'"),
     REVIEW("c1", "reject", ",'reason':'r'")},
    {START_CALL("c1"), NULL},
    {IN_DOUBT("c\\u00e9"), NULL},
    {"{'type':'toolkit-call-in-doubt','timestamp':7,'toolCallId':'c1','result':'x'}",
     IN_DOUBT("c1")},
    {SET_POLICY("shell", "'ask'"), NULL},
    {SET_POLICY("sh\\'ell", "null"), NULL},
    {"{'type':'brain-call-tools','timestamp':5,'calledBrainAt':1,'toolCalls':{'c2':{"
     "'name':'clock','parameters':'{}','policy':'deny'},'c1':{'name':'shell',"
     "'parameters':'{}','policy':'ask'},'c3':{'name':'calc','parameters':'1','policy':"
     "'auto'},'c4':{'name':'calc','parameters':'2'}}}",
     NULL},
    {"{'type':'brain-call-tools','timestamp':5,'calledBrainAt':1,'toolCalls':{'c4':{"
     "'name':'calc','parameters':'2','policy':null}}}",
     "{'type':'brain-call-tools','timestamp':5,'calledBrainAt':1,'toolCalls':{'c4':{"
     "'name':'calc','parameters':'2'}}}"},
};

START_TEST(test_encode)
{
    struct rx_input in, back, copy;
    struct rx_buf b1, b2, b3;
    json_t *j, *want = qjson(encode_rows[_i].encoded ? encode_rows[_i].encoded
                                                     : encode_rows[_i].input);

    input_from(&in, encode_rows[_i].input);
    rx_buf_init(&b1, RX_BUF_SMALL_MAX);
    rx_buf_init(&b2, RX_BUF_SMALL_MAX);
    rx_buf_init(&b3, RX_BUF_SMALL_MAX);
    ck_assert_int_eq(rx_input_encode(&in, &b1), 0);
    j = json_loads(b1.data, 0, NULL);
    ck_assert_msg(j != NULL, "not JSON: %s", b1.data);
    ck_assert_msg(json_equal(j, want), "%s\nencoded as %s", encode_rows[_i].input,
                  b1.data);
    ck_assert_int_eq(rx_input_parse(j, &back, NULL, NULL), 0);
    ck_assert_int_eq(rx_input_encode(&back, &b2), 0);
    ck_assert_str_eq(b1.data, b2.data);
    ck_assert_int_eq(rx_input_copy(&in, &copy), 0);
    ck_assert_int_eq(rx_input_encode(&copy, &b3), 0);
    ck_assert_str_eq(b1.data, b3.data);
    rx_input_release(&copy);
    rx_input_release(&back);
    rx_input_release(&in);
    json_decref(j);
    json_decref(want);
    rx_buf_release(&b1);
    rx_buf_release(&b2);
    rx_buf_release(&b3);
}
END_TEST

Suite *approval_input_suite(void);

Suite *approval_input_suite(void)
{
    Suite *s = suite_create("approval_input");
    TCase *tc = tcase_create("parse");

    tcase_add_loop_test(tc, test_parse, 0, sizeof(parse_rows) / sizeof(parse_rows[0]));
    tcase_add_test(tc, test_parse_fields);
    tcase_add_loop_test(tc, test_encode, 0, sizeof(encode_rows) / sizeof(encode_rows[0]));
    suite_add_tcase(s, tc);
    return s;
}
