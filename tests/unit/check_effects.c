/*
 * check_effects - effects_at (SPEC 3.3) on hand-made states and on states the
 * machine produced: which keys are wanted, in the documented order; calls
 * awaiting approval run nothing and hold back the ask (SPEC 3.6).
 */
#include "tests/unit/helper_sm.h"

struct row {
    const char *name;
    const char *state;
    const char *keys; /* space separated, in rx_effects_at's order */
};

static const struct row rows[] = {
    {"initial state wants nothing", S0, ""},
    {"a fresh user message wants one ask", ST(1, UM("m1", "hi", 1), "", "", 0, "", 0),
     "ask-brain-1"},
    {"the newest user message keys the ask",
     ST(3, UM("m1", "hi", 1) "," UM("m2", "yo", 3), "", "", 0, "", 0), "ask-brain-3"},
    {"signals already handed to the brain want nothing",
     ST(2, UM("m1", "hi", 1), "", "", 1, "", 0), ""},
    {"a streaming message keeps its ask",
     ST(2, UM("m1", "hi", 1), AM("a1", "", 2, 2, "streaming", 1), "", 1, "", 0),
     "ask-brain-1"},
    {"a complete message wants nothing",
     ST(3, UM("m1", "hi", 1), AM("a1", "Hi", 2, 3, "complete", 1), "", 1, "", 0), ""},
    {"a stopped message wants nothing",
     ST(3, UM("m1", "hi", 1), AM("a1", "H", 2, 3, "stopped", 1), "", 3, "", 0), ""},
    {"a new user message during streaming wants a second ask",
     ST(3, UM("m1", "hi", 1) "," UM("m2", "yo", 3), AM("a1", "", 2, 2, "streaming", 1),
        "", 1, "", 0),
     "ask-brain-1 ask-brain-3"},
    {"a new user message before anything streamed replaces the ask",
     ST(2, UM("m1", "hi", 1) "," UM("m2", "yo", 2), "", "", 0, "", 0), "ask-brain-2"},
    {"a streaming ask and new signals with the same time are one key",
     ST(2, UM("m1", "hi", 1), AM("a1", "", 2, 2, "streaming", 1), "", 0, "", 0),
     "ask-brain-1"},
    {"pending tools want one request each and no ask",
     ST(4, UM("m1", "hi", 1), "",
        TC("c1", "calculator", "{}", 4, "null", false) "," TC("c2", "clock", "{}", 4,
                                                              "null", false),
        1, "", 0),
     "request-toolkit-c1 request-toolkit-c2"},
    {"a user message while tools are pending still waits for them",
     ST(5, UM("m1", "hi", 1) "," UM("m2", "yo", 5), "",
        TC("c1", "calculator", "{}", 4, "null", false), 1, "", 0),
     "request-toolkit-c1"},
    {"one answered, one pending",
     ST(5, UM("m1", "hi", 1), "",
        TC("c1", "calculator", "{}", 4, OKR("5", 5), false) "," TC("c2", "clock", "{}", 4,
                                                                   "null", false),
        1, "", 0),
     "request-toolkit-c2"},
    {"all answered: one ask keyed by the latest result",
     ST(6, UM("m1", "hi", 1), "",
        TC("c1", "calculator", "{}", 4, ERRR("x", 6),
           false) "," TC("c2", "clock", "{}", 4, OKR("t", 5), false),
        1, "", 0),
     "ask-brain-6"},
    {"results already seen by the brain want nothing",
     ST(7, UM("m1", "hi", 1), "", TC("c1", "calculator", "{}", 4, OKR("5", 5), false), 6,
        "", 0),
     ""},
    {"a user message newer than the results keys the ask",
     ST(9, UM("m1", "hi", 1) "," UM("m2", "yo", 9), "",
        TC("c1", "calculator", "{}", 4, OKR("5", 5), false), 6, "", 0),
     "ask-brain-9"},
    {"asks sort by time before tool requests",
     ST(9, UM("m1", "hi", 1) "," UM("m2", "yo", 5),
        AM("a2", "", 6, 6, "streaming", 5) "," AM("a1", "", 2, 2, "streaming", 1), "", 5,
        "", 0),
     "ask-brain-1 ask-brain-5"},
    /*
     * SPEC 3.3: "each streaming assistant message keeps ask-brain-<its
     * calledBrainAt> wanted until it completes or stops". Here a second,
     * concurrent ask (for m2) called a tool while the first answer still streams.
     */
    {"a streaming answer keeps its ask while another ask's tool is pending",
     ST(5, UM("m1", "hi", 1) "," UM("m2", "yo", 3), AM("a1", "", 2, 2, "streaming", 1),
        TC("c1", "clock", "{}", 4, "null", false), 3, "", 0),
     "ask-brain-1 request-toolkit-c1"},
    /* Same, for an ask whose signals cut is 0 (a tool request's signals_cut_at
       field is 0 too, and must not be taken for that ask). */
    {"an answer asked at time 0 keeps its ask while a tool is pending",
     ST(5, UM("m1", "hi", 1), AM("a1", "", 2, 2, "streaming", 0),
        TC("c1", "clock", "{}", 4, "null", false), 0, "", 0),
     "ask-brain-0 request-toolkit-c1"},
};

START_TEST(test_effects_table)
{
    struct rx_state s;
    char *got;

    state_from(&s, rows[_i].state);
    got = effect_keys(&s);
    ck_assert_msg(!strcmp(got, rows[_i].keys), "%s: got '%s', want '%s'", rows[_i].name,
                  got, rows[_i].keys);
    free(got);
    rx_state_release(&s);
}
END_TEST

/* The fields behind the keys, and find by key. */
START_TEST(test_effect_fields)
{
    struct rx_state s;
    struct rx_effect_set set;
    const struct rx_effect *e;

    state_from(&s, ST(5, UM("m1", "hi", 1), "",
                      TC("c1", "calculator", "{}", 4, "null",
                         false) "," TC("c2", "clock", "{}", 4, OKR("t", 5), false),
                      1, "", 0));
    rx_effect_set_init(&set);
    ck_assert_int_eq(rx_effects_at(&s, &set), 0);
    ck_assert_uint_eq(set.len, 1);
    e = rx_effect_set_find(&set, "request-toolkit-c1");
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(e->kind, RX_EFFECT_REQUEST_TOOLKIT);
    ck_assert_str_eq(e->tool_call_id, "c1");
    ck_assert_ptr_null(rx_effect_set_find(&set, "request-toolkit-c2"));
    rx_state_release(&s);

    /* rx_effects_at replaces what the set held. */
    state_from(&s, ST(3, UM("m1", "hi", 1) "," UM("m2", "yo", 3),
                      AM("a1", "", 2, 2, "streaming", 1), "", 1, "", 0));
    ck_assert_int_eq(rx_effects_at(&s, &set), 0);
    ck_assert_uint_eq(set.len, 2);
    ck_assert_ptr_null(rx_effect_set_find(&set, "request-toolkit-c1"));
    e = rx_effect_set_find(&set, "ask-brain-3");
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(e->kind, RX_EFFECT_ASK_BRAIN);
    ck_assert_int_eq(e->signals_cut_at, 3);
    ck_assert_ptr_null(e->tool_call_id);
    ck_assert_int_eq(set.items[0].signals_cut_at, 1);
    rx_effect_set_release(&set);
    rx_state_release(&s);
}
END_TEST

/* The life of one exchange through the machine, effects checked at each step. */
struct step {
    const char *input;
    enum rx_verdict verdict;
    const char *keys;
};

static const struct step life[] = {
    {"{'type':'user-send-message','timestamp':1,'messageId':'m1','content':'2+3?'}",
     RX_ACCEPTED, "ask-brain-1"},
    {"{'type':'brain-send-message-start','timestamp':2,'calledBrainAt':1,'messageId':"
     "'a1'}",
     RX_ACCEPTED, "ask-brain-1"},
    {"{'type':'brain-send-message-complete','timestamp':3,'calledBrainAt':1,'messageId':"
     "'a1','content':'Let me compute.'}",
     RX_ACCEPTED, ""},
    {"{'type':'brain-call-tools','timestamp':4,'calledBrainAt':1,'toolCalls':{'c1':{"
     "'name':'calculator','parameters':'{}'},'c2':{'name':'clock','parameters':'{}'}}}",
     RX_ACCEPTED, "request-toolkit-c1 request-toolkit-c2"},
    {"{'type':'toolkit-respond','timestamp':5,'toolCallId':'c2','result':'noon'}",
     RX_ACCEPTED, "request-toolkit-c1"},
    {"{'type':'user-send-message','timestamp':6,'messageId':'m2','content':'and?'}",
     RX_ACCEPTED, "request-toolkit-c1"},
    {"{'type':'toolkit-error','timestamp':7,'toolCallId':'c1','error':'bad'}",
     RX_ACCEPTED, "ask-brain-7"},
    {"{'type':'brain-send-message-start','timestamp':8,'calledBrainAt':7,'messageId':"
     "'a2'}",
     RX_ACCEPTED, "ask-brain-7"},
    {"{'type':'user-send-message','timestamp':9,'messageId':'m3','content':'more'}",
     RX_ACCEPTED, "ask-brain-7 ask-brain-9"},
    {"{'type':'brain-call-tools','timestamp':10,'calledBrainAt':9,'toolCalls':{'c3':{"
     "'name':'clock','parameters':'{}'}}}",
     RX_ACCEPTED, "ask-brain-7 request-toolkit-c3"},
    {"{'type':'user-cancel','timestamp':11,'partialContents':{'a2':'part'}}", RX_ACCEPTED,
     ""},
    {"{'type':'toolkit-respond','timestamp':12,'toolCallId':'c3','result':'late'}",
     RX_REJECTED, ""},
    {"{'type':'user-send-message','timestamp':13,'messageId':'m4','content':'again'}",
     RX_ACCEPTED, "ask-brain-13"},
};

START_TEST(test_effects_life)
{
    struct rx_state s;

    ck_assert_int_eq(rx_state_init(&s), 0);
    for (size_t i = 0; i < sizeof(life) / sizeof(life[0]); i++) {
        char *got;

        apply_text(&s, life[i].input, life[i].verdict);
        if (!life[i].keys)
            continue;
        got = effect_keys(&s);
        ck_assert_msg(!strcmp(got, life[i].keys), "step %zu: got '%s', want '%s'", i, got,
                      life[i].keys);
        free(got);
    }
    rx_state_release(&s);
}
END_TEST

/* user-cancel with an answer streaming and tools pending leaves nothing wanted. */
START_TEST(test_cancel_wants_nothing)
{
    struct rx_state s;
    char *got;

    state_from(
        &s, ST(5, UM("m1", "hi", 1) "," UM("m2", "yo", 3),
               AM("a1", "", 2, 2, "streaming", 1) "," AM("a2", "", 4, 4, "streaming", 3),
               TC("c1", "clock", "{}", 5, "null", false), 3, "", 0));
    apply_text(&s, "{'type':'user-cancel','timestamp':6}", RX_ACCEPTED);
    got = effect_keys(&s);
    ck_assert_str_eq(got, "");
    free(got);
    rx_state_release(&s);
}
END_TEST

/*
 * Keys must stay unique for every state decode accepts, even with ids longer
 * than RX_ID_MAX (a hand-edited or imported state): two ids that differ only
 * after the key's length would otherwise share one effect.
 */
START_TEST(test_long_ids_unique_keys)
{
    char id1[201], id2[201], *text;
    json_t *j;
    struct rx_state s;
    struct rx_effect_set set;
    struct rx_error err;

    memset(id1, 'x', 200);
    memset(id2, 'x', 200);
    id1[200] = id2[200] = '\0';
    id2[199] = 'y';
    ck_assert_int_gt(
        asprintf(&text,
                 "{\"updatedAt\":5,\"userMessages\":[],\"assistantMessages\":"
                 "[],\"toolCallRecords\":[{\"id\":\"%s\",\"name\":\"clock\","
                 "\"parameters\":\"{}\",\"calledAt\":4,\"result\":null,"
                 "\"isLoaded\":false},{\"id\":\"%s\",\"name\":\"clock\","
                 "\"parameters\":\"{}\",\"calledAt\":4,\"result\":null,"
                 "\"isLoaded\":false}],\"calledBrainAt\":1,"
                 "\"contextSummary\":\"\",\"summaryCutAt\":0}",
                 id1, id2),
        0);
    j = json_loads(text, 0, NULL);
    ck_assert_ptr_nonnull(j);
    if (rx_state_decode(j, &s, &err) == 0) {
        rx_effect_set_init(&set);
        ck_assert_int_eq(rx_effects_at(&s, &set), 0);
        ck_assert_uint_eq(set.len, 2);
        ck_assert_msg(strcmp(set.items[0].key, set.items[1].key),
                      "two tool calls share the key '%s'", set.items[0].key);
        rx_effect_set_release(&set);
        rx_state_release(&s);
    }
    json_decref(j);
    free(text);
}
END_TEST

/* ---- tool approval (SPEC 3.3, 3.6): a call awaiting a person ------------------ */

static const struct {
    const char *name;
    const char *state;
    const char *keys;
} approval_rows[] = {
    {"a waiting call runs nothing and blocks the ask",
     ST(5, UM("m1", "hi", 1), "", TCA("c1", "shell", "{}", 4, "null", false, "pending"),
        1, "", 0),
     ""},
    {"a waiting call beside a running one",
     ST(5, UM("m1", "hi", 1), "",
        TCA("c1", "shell", "{}", 4, "null", false, "pending") "," TC("c2", "clock", "{}",
                                                                     4, "null", false),
        1, "", 0),
     "request-toolkit-c2"},
    {"an approved call runs",
     ST(5, UM("m1", "hi", 1), "", TCA("c1", "shell", "{}", 4, "null", false, "approved"),
        1, "", 0),
     "request-toolkit-c1"},
    {"a new user message still waits for a person",
     ST(6, UM("m1", "hi", 1) "," UM("m2", "yo", 6), "",
        TCA("c1", "shell", "{}", 4, "null", false, "pending"), 1, "", 0),
     ""},
    {"a streaming answer keeps its ask while a call waits",
     ST(5, UM("m1", "hi", 1), AM("a1", "", 2, 2, "streaming", 1),
        TCA("c1", "shell", "{}", 4, "null", false, "pending"), 1, "", 0),
     "ask-brain-1"},
    {"a rejection is a result: the brain is asked",
     ST(7, UM("m1", "hi", 1), "",
        TCA("c1", "shell", "{}", 4, ERRR("rejected by the user", 7), false, "rejected"),
        1, "", 0),
     "ask-brain-7"},
    {"a denial is a result: the brain is asked",
     ST(4, UM("m1", "hi", 1), "",
        TC("c1", "rm", "{}", 4, ERRR("denied by policy", 4), false), 1, "", 0),
     "ask-brain-4"},
};

START_TEST(test_approval_table)
{
    struct rx_state s;
    char *got;

    state_from(&s, approval_rows[_i].state);
    got = effect_keys(&s);
    ck_assert_msg(!strcmp(got, approval_rows[_i].keys), "%s: got '%s', want '%s'",
                  approval_rows[_i].name, got, approval_rows[_i].keys);
    free(got);
    rx_state_release(&s);
}
END_TEST

/* Calls that wait, are approved, rejected and superseded, effects at each step. */
static const struct {
    const char *input;
    enum rx_verdict verdict;
    const char *keys;
} approval_life[] = {
    {"{'type':'user-send-message','timestamp':1,'messageId':'m1','content':'clean up'}",
     RX_ACCEPTED, "ask-brain-1"},
    {"{'type':'brain-call-tools','timestamp':2,'calledBrainAt':1,'toolCalls':{'c1':{"
     "'name':'shell','parameters':'{}','policy':'ask'},'c2':{'name':'clock',"
     "'parameters':'{}'},'c3':{'name':'rm','parameters':'{}','policy':'deny'}}}",
     RX_ACCEPTED, "request-toolkit-c2"},
    {"{'type':'toolkit-respond','timestamp':3,'toolCallId':'c2','result':'noon'}",
     RX_ACCEPTED, ""},
    {"{'type':'user-review-tool-call','timestamp':4,'toolCallId':'c1','decision':"
     "'approve','parameters':'{\\'dry\\':true}'}",
     RX_ACCEPTED, "request-toolkit-c1"},
    {"{'type':'user-review-tool-call','timestamp':5,'toolCallId':'c1','decision':"
     "'approve'}",
     RX_REJECTED, "request-toolkit-c1"},
    {"{'type':'toolkit-respond','timestamp':6,'toolCallId':'c1','result':'done'}",
     RX_ACCEPTED, "ask-brain-6"},
    {"{'type':'brain-call-tools','timestamp':7,'calledBrainAt':6,'toolCalls':{'c4':{"
     "'name':'shell','parameters':'{}','policy':'ask'}}}",
     RX_ACCEPTED, ""},
    {"{'type':'user-review-tool-call','timestamp':8,'toolCallId':'c4','decision':"
     "'reject','reason':'enough'}",
     RX_ACCEPTED, "ask-brain-8"},
    {"{'type':'brain-call-tools','timestamp':9,'calledBrainAt':8,'toolCalls':{'c5':{"
     "'name':'shell','parameters':'{}','policy':'ask'}}}",
     RX_ACCEPTED, ""},
    {"{'type':'user-send-message','timestamp':10,'messageId':'m2','content':'stop'}",
     RX_ACCEPTED, "ask-brain-10"},
};

START_TEST(test_approval_life)
{
    struct rx_state s;
    json_t *ctx;
    char *got;

    ck_assert_int_eq(rx_state_init(&s), 0);
    for (size_t i = 0; i < sizeof(approval_life) / sizeof(approval_life[0]); i++) {
        apply_text(&s, approval_life[i].input, approval_life[i].verdict);
        got = effect_keys(&s);
        ck_assert_msg(!strcmp(got, approval_life[i].keys),
                      "step %zu: got '%s', want '%s'", i, got, approval_life[i].keys);
        free(got);
    }
    ck_assert_str_eq(rx_state_find_tool(&s, "c1")->parameters, "{\"dry\":true}");
    /* The brain reads every refusal as a tool error (SPEC 3.5). */
    ck_assert_int_eq(rx_context_build(&s, NULL, INT64_MAX, &ctx), 0);
    {
        char *text = json_dumps(ctx, JSON_COMPACT);

        ck_assert_ptr_nonnull(strstr(text, "\"content\":\"Error: denied by policy\""));
        ck_assert_ptr_nonnull(
            strstr(text, "\"content\":\"Error: rejected by the user: enough\""));
        ck_assert_ptr_nonnull(strstr(
            text, "\"content\":\"Error: not approved: the user sent a new message\""));
        free(text);
    }
    json_decref(ctx);
    rx_state_release(&s);
}
END_TEST

Suite *effects_suite(void);

Suite *effects_suite(void)
{
    Suite *s = suite_create("effects");
    TCase *tc = tcase_create("effects_at");

    tcase_add_loop_test(tc, test_effects_table, 0, sizeof(rows) / sizeof(rows[0]));
    tcase_add_test(tc, test_effect_fields);
    tcase_add_test(tc, test_effects_life);
    tcase_add_test(tc, test_cancel_wants_nothing);
    tcase_add_test(tc, test_long_ids_unique_keys);
    suite_add_tcase(s, tc);

    tc = tcase_create("approval");
    tcase_add_loop_test(tc, test_approval_table, 0,
                        sizeof(approval_rows) / sizeof(approval_rows[0]));
    tcase_add_test(tc, test_approval_life);
    suite_add_tcase(s, tc);
    return s;
}
