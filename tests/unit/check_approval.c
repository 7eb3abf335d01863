/*
 * check_approval - tool approval in the pure machine (SPEC 3.6), one table row
 * per rule and per rejection: the policy stamped on brain-call-tools (auto,
 * ask, deny), user-review-tool-call (approve, edited parameters, reject with
 * or without a reason, `always`), user-set-tool-policy (set, change, clear,
 * the same again), what a new user message, user-cancel and a toolkit answer
 * do to a call awaiting a person, time irreversibility, and every invalid
 * field. Each row checks the exact state after and, when accepted, that its
 * JSON Patch turns the state before into it (sm_row_check); then the bound on
 * overrides. The inputs' shapes are in check_approval_input.c, effects_at in
 * check_effects.c.
 */
#include "tests/unit/helper_sm.h"

#include "state_machine/rx_alloc.h"

/* ---- base states ------------------------------------------------------------- */

/*
 * c1, c2 (shell) and c3 (clock) await a person; c4 runs (auto); c5 was
 * approved and runs; c6 was rejected; c7 was answered; c8 was denied.
 */
#define A_C1 TCA("c1", "shell", "{}", 4, "null", false, "pending")
#define A_C2 TCA("c2", "shell", "{\\'n\\':2}", 4, "null", false, "pending")
#define A_C3 TCA("c3", "clock", "{}", 4, "null", false, "pending")
#define A_C4 TC("c4", "calculator", "{}", 4, "null", false)
#define A_C5 TCA("c5", "shell", "{}", 5, "null", false, "approved")
#define A_C6                                                                             \
    TCA("c6", "shell", "{}", 5, ERRR("rejected by the user", 6), false, "rejected")
#define A_C7   TC("c7", "calculator", "{}", 5, OKR("1", 6), false)
#define A_C8   TC("c8", "rm", "{}", 6, ERRR("denied by policy", 6), false)
#define A_REST A_C4 "," A_C5 "," A_C6 "," A_C7 "," A_C8

#define B_ASK_P(pol)                                                                     \
    STP(6, UM("m1", "hi", 1), "", A_C1 "," A_C2 "," A_C3 "," A_REST, 1, "", 0, pol)
#define B_ASK B_ASK_P("")
/* The same after an accepted input at 7 that changed c1..c3 only. */
#define A_AFTER_P(c1, c2, c3, pol)                                                       \
    STP(7, UM("m1", "hi", 1), "", c1 "," c2 "," c3 "," A_REST, 1, "", 0, pol)
#define A_AFTER(c1, c2, c3) A_AFTER_P(c1, c2, c3, "")

/* Records c1..c3 after a decision at time 7. */
#define OK1      TCA("c1", "shell", "{}", 4, "null", false, "approved")
#define OK2      TCA("c2", "shell", "{\\'n\\':2}", 4, "null", false, "approved")
#define NO1(e)   TCA("c1", "shell", "{}", 4, ERRR(e, 7), false, "rejected")
#define NO2(e)   TCA("c2", "shell", "{\\'n\\':2}", 4, ERRR(e, 7), false, "rejected")
#define NO3(e)   TCA("c3", "clock", "{}", 4, ERRR(e, 7), false, "rejected")
#define REJECTED "rejected by the user"
#define NEW_MSG  "not approved: the user sent a new message"

#define B_USER ST(10, UM("m1", "hi", 10), "", "", 0, "", 0)
/* ---- inputs the parser (rightly) refuses --------------------------------------- */

static void tweak_no_tool_call_id(struct rx_input *in)
{
    rx_free(in->tool_call_id);
    in->tool_call_id = NULL;
}

static void tweak_array_parameters(struct rx_input *in)
{
    ck_assert_int_eq(rx_input_set_str(&in->parameters, "[1,2]"), 0);
}

static void tweak_broken_parameters(struct rx_input *in)
{
    ck_assert_int_eq(rx_input_set_str(&in->parameters, "{'a':"), 0);
}

static void tweak_empty_tool(struct rx_input *in)
{
    ck_assert_int_eq(rx_input_set_str(&in->tool, ""), 0);
}

static void tweak_no_tool(struct rx_input *in)
{
    rx_free(in->tool);
    in->tool = NULL;
}

static void tweak_bad_policy(struct rx_input *in)
{
    in->policy = (enum rx_policy)9;
}

static void tweak_bad_call_policy(struct rx_input *in)
{
    in->calls[0].policy = (enum rx_policy)7;
}

static const struct sm_row rows[] = {
    /* ---- brain-call-tools: the server's stamp decides how a record starts ---- */
    {"ask: the record awaits approval", B_USER,
     CALLS("'c1':{'name':'shell','parameters':'{}','policy':'ask'}"), NULL, ACC, NULL,
     ST(11, UM("m1", "hi", 10), "",
        TCA("c1", "shell", "{}", 11, "null", false, "pending"), 10, "", 0)},
    {"deny: answered at once, no approval", B_USER,
     CALLS("'c1':{'name':'rm','parameters':'{}','policy':'deny'}"), NULL, ACC, NULL,
     ST(11, UM("m1", "hi", 10), "",
        TC("c1", "rm", "{}", 11, ERRR("denied by policy", 11), false), 10, "", 0)},
    {"auto: a plain pending record", B_USER,
     CALLS("'c1':{'name':'clock','parameters':'{}','policy':'auto'}"), NULL, ACC, NULL,
     ST(11, UM("m1", "hi", 10), "", TC("c1", "clock", "{}", 11, "null", false), 10, "",
        0)},
    {"one batch of every policy, unstamped as auto", B_USER,
     CALLS("'c1':{'name':'rm','parameters':'{}','policy':'deny'},"
           "'c2':{'name':'shell','parameters':'{}','policy':'ask'},"
           "'c3':{'name':'clock','parameters':'{}'},"
           "'c4':{'name':'calc','parameters':'1','policy':null}"),
     NULL, ACC, NULL,
     ST(11, UM("m1", "hi", 10), "",
        TC("c1", "rm", "{}", 11, ERRR("denied by policy", 11), false) "," TCA(
            "c2", "shell", "{}", 11, "null", false,
            "pending") "," TC("c3", "clock", "{}", 11, "null",
                              false) "," TC("c4", "calc", "1", 11, "null", false),
        10, "", 0)},
    {"a policy out of range", B_USER,
     CALLS("'c1':{'name':'rm','parameters':'{}','policy':'deny'}"), tweak_bad_call_policy,
     REJ(INVALID), "toolCalls", NULL},

    /* ---- user-review-tool-call: approve ------------------------------------------ */
    {"approve: the tool may run", B_ASK, REVIEW("c1", "approve", ""), NULL, ACC, NULL,
     A_AFTER(OK1, A_C2, A_C3)},
    {"approve with edited parameters", B_ASK,
     REVIEW("c2", "approve", ",'parameters':'{\\'n\\': 3}'"), NULL, ACC, NULL,
     A_AFTER(A_C1, TCA("c2", "shell", "{\\'n\\': 3}", 4, "null", false, "approved"),
             A_C3)},
    {"approve ignores a reason", B_ASK, REVIEW("c1", "approve", ",'reason':'why not'"),
     NULL, ACC, NULL, A_AFTER(OK1, A_C2, A_C3)},
    {"approve keeps the overrides", B_ASK_P("'rm':'deny'"), REVIEW("c1", "approve", ""),
     NULL, ACC, NULL, A_AFTER_P(OK1, A_C2, A_C3, "'rm':'deny'")},

    /* ---- reject ------------------------------------------------------------------- */
    {"reject: answered 'rejected by the user'", B_ASK, REVIEW("c1", "reject", ""), NULL,
     ACC, NULL, A_AFTER(NO1(REJECTED), A_C2, A_C3)},
    {"reject with a reason", B_ASK, REVIEW("c1", "reject", ",'reason':'too risky'"), NULL,
     ACC, NULL, A_AFTER(NO1(REJECTED ": too risky"), A_C2, A_C3)},
    {"reject with a blank reason", B_ASK, REVIEW("c1", "reject", ",'reason':' \\n'"),
     NULL, ACC, NULL, A_AFTER(NO1(REJECTED), A_C2, A_C3)},
    {"reject ignores parameters", B_ASK,
     REVIEW("c2", "reject", ",'parameters':'{\\'n\\':9}'"), NULL, ACC, NULL,
     A_AFTER(A_C1, NO2(REJECTED), A_C3)},

    /* ---- always ------------------------------------------------------------------- */
    {"always approve: every waiting call of the tool, and the policy", B_ASK,
     REVIEW("c1", "approve", ",'always':true"), NULL, ACC, NULL,
     A_AFTER_P(OK1, OK2, A_C3, "'shell':'auto'")},
    {"always approve with edits: the others keep their own parameters", B_ASK,
     REVIEW("c2", "approve", ",'always':true,'parameters':'{}'"), NULL, ACC, NULL,
     A_AFTER_P(OK1, TCA("c2", "shell", "{}", 4, "null", false, "approved"), A_C3,
               "'shell':'auto'")},
    {"always reject: the same answer for each", B_ASK,
     REVIEW("c2", "reject", ",'always':true,'reason':'no'"), NULL, ACC, NULL,
     A_AFTER_P(NO1(REJECTED ": no"), NO2(REJECTED ": no"), A_C3, "'shell':'deny'")},
    {"always replaces an override", B_ASK_P("'a':'auto','shell':'ask','z':'ask'"),
     REVIEW("c1", "reject", ",'always':true"), NULL, ACC, NULL,
     A_AFTER_P(NO1(REJECTED), NO2(REJECTED), A_C3,
               "'a':'auto','shell':'deny','z':'ask'")},
    {"always with the override already set", B_ASK_P("'shell':'auto'"),
     REVIEW("c1", "approve", ",'always':true"), NULL, ACC, NULL,
     A_AFTER_P(OK1, OK2, A_C3, "'shell':'auto'")},
    {"always false is once", B_ASK, REVIEW("c1", "approve", ",'always':false"), NULL, ACC,
     NULL, A_AFTER(OK1, A_C2, A_C3)},
    {"always on the only waiting call of its tool", B_ASK,
     REVIEW("c3", "approve", ",'always':true"), NULL, ACC, NULL,
     A_AFTER_P(A_C1, A_C2, TCA("c3", "clock", "{}", 4, "null", false, "approved"),
               "'clock':'auto'")},

    /* ---- reviews that do not apply --------------------------------------------- */
    {"review of an unknown id", B_ASK, REVIEW("c9", "approve", ""), NULL, REJ(UNKNOWN_ID),
     NULL, NULL},
    {"review of an auto call", B_ASK, REVIEW("c4", "approve", ""), NULL, REJ(NOT_PENDING),
     NULL, NULL},
    {"review of an approved call", B_ASK, REVIEW("c5", "reject", ""), NULL,
     REJ(NOT_PENDING), NULL, NULL},
    {"review of a rejected call", B_ASK, REVIEW("c6", "approve", ""), NULL,
     REJ(NOT_PENDING), NULL, NULL},
    {"review of an answered call", B_ASK, REVIEW("c7", "reject", ",'always':true"), NULL,
     REJ(NOT_PENDING), NULL, NULL},
    {"review of a denied call", B_ASK, REVIEW("c8", "approve", ""), NULL,
     REJ(NOT_PENDING), NULL, NULL},
    {"stale review", B_ASK,
     "{'type':'user-review-tool-call','timestamp':5,'toolCallId':'c1','decision':"
     "'approve'}",
     NULL, REJ(STALE_TIMESTAMP), NULL, NULL},
    {"review without toolCallId", B_ASK, REVIEW("c1", "approve", ""),
     tweak_no_tool_call_id, REJ(INVALID), "toolCallId", NULL},
    {"edited parameters that are an array", B_ASK, REVIEW("c1", "approve", ""),
     tweak_array_parameters, REJ(INVALID), "parameters", NULL},
    {"edited parameters that are not JSON", B_ASK, REVIEW("c1", "approve", ""),
     tweak_broken_parameters, REJ(INVALID), "parameters", NULL},

    /* ---- user-set-tool-policy ---------------------------------------------------- */
    {"set a policy", B_ASK, SET_POLICY("shell", "'ask'"), NULL, ACC, NULL,
     A_AFTER_P(A_C1, A_C2, A_C3, "'shell':'ask'")},
    {"set keeps names in order", B_ASK_P("'a':'auto','z':'deny'"),
     SET_POLICY("m", "'deny'"), NULL, ACC, NULL,
     A_AFTER_P(A_C1, A_C2, A_C3, "'a':'auto','m':'deny','z':'deny'")},
    {"change a policy", B_ASK_P("'shell':'ask'"), SET_POLICY("shell", "'deny'"), NULL,
     ACC, NULL, A_AFTER_P(A_C1, A_C2, A_C3, "'shell':'deny'")},
    {"clear a policy", B_ASK_P("'a':'auto','shell':'ask'"), SET_POLICY("shell", "null"),
     NULL, ACC, NULL, A_AFTER_P(A_C1, A_C2, A_C3, "'a':'auto'")},
    {"the same policy again", B_ASK_P("'shell':'ask'"), SET_POLICY("shell", "'ask'"),
     NULL, UNCH, NULL, NULL},
    {"clear what is not set", B_ASK_P("'a':'auto'"), SET_POLICY("shell", "null"), NULL,
     UNCH, NULL, NULL},
    {"a policy leaves waiting calls waiting", B_ASK, SET_POLICY("shell", "'auto'"), NULL,
     ACC, NULL, A_AFTER_P(A_C1, A_C2, A_C3, "'shell':'auto'")},
    {"a tool name that needs escaping", B_ASK, SET_POLICY("a\\'/~b", "'deny'"), NULL, ACC,
     NULL, A_AFTER_P(A_C1, A_C2, A_C3, "'a\\'/~b':'deny'")},
    {"stale policy", B_ASK,
     "{'type':'user-set-tool-policy','timestamp':3,'tool':'shell','policy':'ask'}", NULL,
     REJ(STALE_TIMESTAMP), NULL, NULL},
    {"stale clear", B_ASK_P("'shell':'ask'"),
     "{'type':'user-set-tool-policy','timestamp':3,'tool':'shell','policy':null}", NULL,
     REJ(STALE_TIMESTAMP), NULL, NULL},
    {"policy for an empty tool name", B_ASK, SET_POLICY("shell", "'ask'"),
     tweak_empty_tool, REJ(INVALID), "tool", NULL},
    {"policy without a tool", B_ASK, SET_POLICY("shell", "'ask'"), tweak_no_tool,
     REJ(INVALID), "tool", NULL},
    {"policy out of range", B_ASK, SET_POLICY("shell", "'ask'"), tweak_bad_policy,
     REJ(INVALID), "policy", NULL},

    /* ---- what else ends the wait --------------------------------------------------- */
    {"a new message rejects every waiting call", B_ASK,
     "{'type':'user-send-message','timestamp':7,'messageId':'m2','content':'stop'}", NULL,
     ACC, NULL,
     ST(7, UM("m1", "hi", 1) "," UM("m2", "stop", 7), "",
        NO1(NEW_MSG) "," NO2(NEW_MSG) "," NO3(NEW_MSG) "," A_REST, 1, "", 0)},
    {"a retried message changes nothing", B_ASK,
     "{'type':'user-send-message','timestamp':7,'messageId':'m1','content':'hi'}", NULL,
     UNCH, NULL, NULL},
    {"a message with a taken id changes nothing", B_ASK,
     "{'type':'user-send-message','timestamp':7,'messageId':'m1','content':'other'}",
     NULL, REJ(DUPLICATE_ID), NULL, NULL},
    {"cancel answers waiting calls 'cancelled', rejected", B_ASK,
     "{'type':'user-cancel','timestamp':7}", NULL, ACC, NULL,
     ST(7, UM("m1", "hi", 1), "",
        NO1("cancelled") "," NO2("cancelled") "," NO3("cancelled") "," TC(
            "c4", "calculator", "{}", 4, ERRR("cancelled", 7),
            false) "," TCA("c5", "shell", "{}", 5, ERRR("cancelled", 7), false,
                           "approved") "," A_C6 "," A_C7 "," A_C8,
        7, "", 0)},
    {"no tool answers a call before it is approved", B_ASK,
     "{'type':'toolkit-respond','timestamp':7,'toolCallId':'c1','result':'ran'}", NULL,
     REJ(AWAITING_APPROVAL), NULL, NULL},
    {"nor fails it", B_ASK,
     "{'type':'toolkit-error','timestamp':7,'toolCallId':'c3','error':'x'}", NULL,
     REJ(AWAITING_APPROVAL), NULL, NULL},
    {"an approved call is answered as any", B_ASK,
     "{'type':'toolkit-respond','timestamp':7,'toolCallId':'c5','result':'ran'}", NULL,
     ACC, NULL,
     ST(7, UM("m1", "hi", 1), "",
        A_C1 "," A_C2 "," A_C3 "," A_C4 "," TCA("c5", "shell", "{}", 5, OKR("ran", 7),
                                                false, "approved") "," A_C6 "," A_C7
                                                                   "," A_C8,
        1, "", 0)},
    {"a waiting call can be loaded", B_ASK,
     "{'type':'brain-load-tool-call','timestamp':7,'calledBrainAt':1,'toolCallId':'c1'}",
     NULL, ACC, NULL,
     ST(7, UM("m1", "hi", 1), "",
        TCA("c1", "shell", "{}", 4, "null", true, "pending") "," A_C2 "," A_C3 "," A_REST,
        1, "", 0)},
};

START_TEST(test_approval_rows)
{
    sm_row_check(&rows[_i]);
}
END_TEST

/* The outcome names what changed: toolPolicies has its own bit. */
START_TEST(test_outcome_bits)
{
    struct rx_state s;
    struct rx_input in;
    struct rx_outcome out;

    state_from(&s, B_ASK);
    input_from(&in, REVIEW("c1", "approve", ",'always':true"));
    ck_assert_int_eq(rx_machine_apply(&s, &in, &out), 0);
    ck_assert_int_eq(out.verdict, RX_ACCEPTED);
    ck_assert_uint_eq(out.changed & (RX_CHANGED_TOOLS | RX_CHANGED_POLICIES),
                      RX_CHANGED_TOOLS | RX_CHANGED_POLICIES);
    ck_assert_uint_eq(out.n_tools_at, 2);
    ck_assert_uint_eq(out.tools_at[0], 0);
    ck_assert_uint_eq(out.tools_at[1], 1);
    rx_input_release(&in);

    input_from(&in, "{'type':'user-set-tool-policy','timestamp':8,'tool':'x','policy':"
                    "'ask'}");
    ck_assert_int_eq(rx_machine_apply(&s, &in, &out), 0);
    ck_assert_uint_eq(out.changed, RX_CHANGED_POLICIES);
    rx_input_release(&in);

    input_from(&in,
               "{'type':'user-send-message','timestamp':9,'messageId':'m2','content':"
               "'go'}");
    ck_assert_int_eq(rx_machine_apply(&s, &in, &out), 0);
    ck_assert_uint_eq(out.changed & (RX_CHANGED_USER | RX_CHANGED_TOOLS),
                      RX_CHANGED_USER | RX_CHANGED_TOOLS);
    ck_assert_uint_eq(out.index, 1); /* the user message, the first list changed */
    ck_assert_uint_eq(out.n_tools_at, 1);
    ck_assert_uint_eq(out.tools_at[0], 2); /* c3, the clock, still waited */
    rx_input_release(&in);
    rx_state_release(&s);
}
END_TEST

/* Many waiting calls of one tool: past RX_OUTCOME_PLACES the patch replaces
   the whole list, and is still right. */
START_TEST(test_always_many)
{
    struct rx_state s;
    struct rx_input in;
    struct rx_outcome out;
    char text[4096], *before;
    size_t n = 0;

    n += (size_t)snprintf(text + n, sizeof(text) - n,
                          "{'type':'brain-call-tools','timestamp':2,'calledBrainAt':1,"
                          "'toolCalls':{");
    for (int i = 0; i < 12; i++)
        n += (size_t)snprintf(text + n, sizeof(text) - n,
                              "%s'k%d':{'name':'%s','parameters':'{}','policy':'ask'}",
                              i ? "," : "", i, i % 4 == 3 ? "other" : "shell");
    snprintf(text + n, sizeof(text) - n, "}}");
    state_from(&s, ST(1, UM("m1", "hi", 1), "", "", 0, "", 0));
    apply_text(&s, text, RX_ACCEPTED);
    ck_assert_uint_eq(rx_state_awaiting_approval(&s), 12);
    before = state_bytes(&s);
    input_from(&in, "{'type':'user-review-tool-call','timestamp':3,'toolCallId':'k4',"
                    "'decision':'reject','always':true,'reason':'never'}");
    ck_assert_int_eq(rx_machine_apply(&s, &in, &out), 0);
    ck_assert_int_eq(out.verdict, RX_ACCEPTED);
    ck_assert(rx_state_check_invariants(&s));
    ck_assert_uint_gt(out.n_tools_at, RX_OUTCOME_PLACES);
    sm_patch_check("always many", before, &s, &out);
    ck_assert_uint_eq(rx_state_awaiting_approval(&s), 3); /* the 'other' tool's */
    for (size_t i = 0; i < s.tools.len; i++) {
        const struct rx_tool_call *c = &s.tools.items[i];

        if (!strcmp(c->name, "shell")) {
            ck_assert_int_eq(c->approval, RX_APPROVAL_REJECTED);
            ck_assert_str_eq(c->result.text, "rejected by the user: never");
        } else {
            ck_assert_int_eq(c->approval, RX_APPROVAL_PENDING);
        }
    }
    ck_assert_int_eq(rx_state_tool_policy(&s, "shell"), RX_POLICY_DENY);
    free(before);
    rx_input_release(&in);
    rx_state_release(&s);
}
END_TEST

/* At most RX_POLICIES_MAX overrides: a new one past it is refused (set or
   always), a change or a clear of one that exists is not. */
START_TEST(test_policy_bound)
{
    struct rx_state s;
    char text[256];

    state_from(&s, B_ASK);
    for (int i = 0; i < RX_POLICIES_MAX; i++) {
        snprintf(text, sizeof(text),
                 "{'type':'user-set-tool-policy','timestamp':%d,'tool':'t%03d','policy':"
                 "'ask'}",
                 7 + i, i);
        apply_text(&s, text, RX_ACCEPTED);
    }
    ck_assert_uint_eq(s.policies.len, RX_POLICIES_MAX);
    {
        struct rx_input in;
        struct rx_outcome out;
        char *before = state_bytes(&s);

        input_from(&in, "{'type':'user-set-tool-policy','timestamp':900,'tool':'new',"
                        "'policy':'deny'}");
        ck_assert_int_eq(rx_machine_apply(&s, &in, &out), 0);
        ck_assert_int_eq(out.reason, RX_REASON_TOO_MANY_POLICIES);
        rx_input_release(&in);
        input_from(&in, "{'type':'user-review-tool-call','timestamp':900,'toolCallId':"
                        "'c1','decision':'approve','always':true}");
        ck_assert_int_eq(rx_machine_apply(&s, &in, &out), 0);
        ck_assert_int_eq(out.reason, RX_REASON_TOO_MANY_POLICIES);
        rx_input_release(&in);
        ck_assert_state(&s, before);
        free(before);
    }
    apply_text(&s,
               "{'type':'user-set-tool-policy','timestamp':901,'tool':'t007','policy':"
               "'deny'}",
               RX_ACCEPTED);
    apply_text(&s,
               "{'type':'user-set-tool-policy','timestamp':902,'tool':'t008','policy':"
               "null}",
               RX_ACCEPTED);
    /* Room again: the review with always goes through. */
    apply_text(&s,
               "{'type':'user-review-tool-call','timestamp':903,'toolCallId':'c1',"
               "'decision':'approve','always':true}",
               RX_ACCEPTED);
    ck_assert_int_eq(rx_state_tool_policy(&s, "shell"), RX_POLICY_AUTO);
    ck_assert_uint_eq(s.policies.len, RX_POLICIES_MAX);
    rx_state_release(&s);
}
END_TEST

Suite *approval_suite(void);

Suite *approval_suite(void)
{
    Suite *s = suite_create("approval");
    TCase *tc = tcase_create("rules");

    tcase_add_loop_test(tc, test_approval_rows, 0, sizeof(rows) / sizeof(rows[0]));
    tcase_add_test(tc, test_outcome_bits);
    tcase_add_test(tc, test_always_many);
    tcase_add_test(tc, test_policy_bound);
    suite_add_tcase(s, tc);
    return s;
}
