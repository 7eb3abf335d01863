/*
 * check_context - the messages handed to a brain (SPEC 3.5, rx_context.h) from
 * hand-made states, compared with the expected OpenAI-style array (json_equal).
 */
#include "tests/unit/helper_sm.h"

#define SYS_MSG(t)  "{'role':'system','content':'" t "'}"
#define USER_MSG(t) "{'role':'user','content':'" t "'}"
#define ASST_MSG(t) "{'role':'assistant','content':'" t "'}"
#define CALL(id, name, args)                                                             \
    "{'id':'" id "','type':'function','function':{'name':'" name "','arguments':'" args  \
    "'}}"
#define CALLS_MSG(calls) "{'role':'assistant','content':null,'tool_calls':[" calls "]}"
#define TOOL_MSG(id, t)  "{'role':'tool','tool_call_id':'" id "','content':'" t "'}"
#define SUMMARY_MSG(t)   USER_MSG("[Previous conversation summary]\\n" t)

struct row {
    const char *name;
    const char *state;
    const char *system_prompt;
    int64_t cut;
    const char *messages;
};

static const struct row rows[] = {
    {"system prompt first, then the conversation",
     ST(3, UM("m1", "hi", 1), AM("a1", "Hello", 2, 3, "complete", 1), "", 1, "", 0),
     "You are Reflexor.", INT64_MAX,
     "[" SYS_MSG("You are Reflexor.") "," USER_MSG("hi") "," ASST_MSG("Hello") "]"},
    {"no system prompt (NULL)",
     ST(3, UM("m1", "hi", 1), AM("a1", "Hello", 2, 3, "complete", 1), "", 1, "", 0), NULL,
     INT64_MAX, "[" USER_MSG("hi") "," ASST_MSG("Hello") "]"},
    {"no system prompt (empty)", ST(1, UM("m1", "hi", 1), "", "", 0, "", 0), "",
     INT64_MAX, "[" USER_MSG("hi") "]"},
    {"empty state", S0, "P", INT64_MAX, "[" SYS_MSG("P") "]"},
    {"summary replaces what it compressed",
     ST(6, UM("m1", "old", 1) "," UM("m2", "new", 4),
        AM("a1", "old answer", 2, 3, "complete", 1), "", 3, "we met", 3),
     "P", INT64_MAX, "[" SYS_MSG("P") "," SUMMARY_MSG("we met") "," USER_MSG("new") "]"},
    {"one assistant message per brain-call-tools, each call then its result",
     ST(7, UM("m1", "2+3 and time?", 1) "," UM("m2", "thanks", 7),
        AM("a1", "Let me see.", 2, 3, "complete", 1),
        TC("c1", "calculator", "{\\'e\\':\\'2+3\\'}", 4, OKR("5", 5),
           false) "," TC("c2", "clock", "{}", 4, ERRR("boom", 6), false),
        6, "", 0),
     "P", INT64_MAX,
     "[" SYS_MSG("P") "," USER_MSG("2+3 and time?") "," ASST_MSG("Let me see.") "," CALLS_MSG(
         CALL("c1", "calculator", "{\\'e\\':\\'2+3\\'}") "," CALL(
             "c2", "clock",
             "{}")) "," TOOL_MSG("c1",
                                 "5") "," TOOL_MSG("c2",
                                                   "Error: boom") "," USER_MSG("thanks") "]"},
    {"two brain-call-tools are two assistant messages",
     ST(9, UM("m1", "go", 1), "",
        TC("c1", "clock", "{}", 4, OKR("t1", 5),
           false) "," TC("c2", "clock", "{}", 6, ERRR("cancelled", 8), false),
        8, "", 0),
     NULL, INT64_MAX,
     "[" USER_MSG("go") "," CALLS_MSG(CALL("c1", "clock", "{}")) "," TOOL_MSG(
         "c1", "t1") "," CALLS_MSG(CALL("c2", "clock",
                                        "{}")) "," TOOL_MSG("c2",
                                                            "Error: cancelled") "]"},
    {"streaming and empty answers are left out, stopped text is kept",
     ST(9, UM("m1", "a", 1) "," UM("m2", "b", 5),
        AM("a1", "", 2, 3, "complete", 1) "," AM("a2", "part", 4, 5, "stopped", 1) "," AM(
            "a3", "", 6, 6, "stopped", 5) "," AM("a4", "x", 7, 7, "streaming", 5),
        "", 6, "", 0),
     NULL, INT64_MAX, "[" USER_MSG("a") "," ASST_MSG("part") "," USER_MSG("b") "]"},
    {"stable time order, ties: user, assistant, tools",
     ST(5, UM("m1", "first", 5) "," UM("m2", "second", 5),
        AM("a1", "reply", 5, 5, "complete", 1),
        TC("c1", "clock", "{}", 5, OKR("t", 5), false), 5, "", 0),
     NULL, INT64_MAX,
     "[" USER_MSG("first") "," USER_MSG("second") "," ASST_MSG("reply") "," CALLS_MSG(
         CALL("c1", "clock", "{}")) "," TOOL_MSG("c1", "t") "]"},
    {"a pending call has no result message",
     ST(4, UM("m1", "go", 1), "", TC("c1", "clock", "{}", 4, "null", false), 1, "", 0),
     NULL, INT64_MAX, "[" USER_MSG("go") "," CALLS_MSG(CALL("c1", "clock", "{}")) "]"},
    {"signals after the ask's cut are left out",
     ST(9, UM("m1", "a", 1) "," UM("m2", "b", 5), AM("a1", "A", 2, 3, "complete", 1),
        TC("c1", "clock", "{}", 4, OKR("t", 6), false), 3, "", 0),
     NULL, 4,
     "[" USER_MSG("a") "," ASST_MSG("A") "," CALLS_MSG(CALL("c1", "clock", "{}")) "]"},
};

static void assert_json_eq(json_t *got, json_t *want, const char *name)
{
    if (!json_equal(got, want)) {
        char *g = json_dumps(got, JSON_COMPACT | JSON_PRESERVE_ORDER);
        char *w = json_dumps(want, JSON_COMPACT | JSON_PRESERVE_ORDER);

        ck_abort_msg("%s:\n got  %s\n want %s", name, g, w);
    }
}

START_TEST(test_context_table)
{
    const struct row *r = &rows[_i];
    struct rx_state s;
    json_t *got = NULL, *want = qjson(r->messages);

    state_from(&s, r->state);
    ck_assert_int_eq(rx_context_build(&s, r->system_prompt, r->cut, &got), 0);
    ck_assert_ptr_nonnull(got);
    assert_json_eq(got, want, r->name);
    json_decref(got);
    json_decref(want);
    rx_state_release(&s);
}
END_TEST

/* Does `text` name `word` as a whole token (not as part of a longer id)? */
static bool names(const char *text, const char *word)
{
    size_t n = strlen(word);

    for (const char *p = strstr(text, word); p; p = strstr(p + 1, word)) {
        bool left = p == text || !(p[-1] == '_' || (p[-1] >= '0' && p[-1] <= '9') ||
                                   (p[-1] >= 'a' && p[-1] <= 'z'));
        bool right = !(p[n] == '_' || (p[n] >= '0' && p[n] <= '9') ||
                       (p[n] >= 'a' && p[n] <= 'z'));

        if (left && right)
            return true;
    }
    return false;
}

/*
 * Older unloaded calls are listed by id and name (the wording is the
 * implementation's); loaded ones come in full, with their results.
 */
START_TEST(test_unloaded_listed)
{
    struct rx_state s;
    json_t *got, *want, *list;
    const char *text;

    state_from(
        &s, ST(9, UM("m1", "old", 1) "," UM("m2", "new", 7), "",
               TC("c1", "calculator", "{}", 2, OKR("5", 3), false) "," TC(
                   "c2", "clock", "{}", 4, OKR("t", 4),
                   true) "," TC("c3", "weather", "{}", 4, OKR("w", 4),
                                false) "," TC("c4", "clock", "{}", 8, OKR("u", 9), false),
               8, "S", 5));
    ck_assert_int_eq(rx_context_build(&s, "P", INT64_MAX, &got), 0);
    ck_assert_uint_eq(json_array_size(got), 8);

    list = json_array_get(got, 2);
    ck_assert_str_eq(json_string_value(json_object_get(list, "role")), "system");
    text = json_string_value(json_object_get(list, "content"));
    ck_assert_ptr_nonnull(text);
    ck_assert_msg(names(text, "c1") && names(text, "calculator"), "c1 missing: %s", text);
    ck_assert_msg(names(text, "c3") && names(text, "weather"), "c3 missing: %s", text);
    ck_assert_msg(!names(text, "c2") && !names(text, "c4"), "loaded or new listed: %s",
                  text);
    /* Only ids and names: the results of unloaded calls stay out. */
    ck_assert_msg(!strstr(text, "\"5\""), "a result leaked into the list: %s", text);

    ck_assert_int_eq(json_array_remove(got, 2), 0);
    want = qjson(
        "[" SYS_MSG("P") "," SUMMARY_MSG("S") "," CALLS_MSG(CALL("c2", "clock", "{}")) "," TOOL_MSG(
            "c2",
            "t") "," USER_MSG("new") "," CALLS_MSG(CALL("c4", "clock",
                                                        "{}")) "," TOOL_MSG("c4",
                                                                            "u") "]");
    assert_json_eq(got, want, "unloaded");
    json_decref(want);
    json_decref(got);
    rx_state_release(&s);
}
END_TEST

/* No unloaded list when nothing is unloaded. */
START_TEST(test_no_list_without_unloaded)
{
    struct rx_state s;
    json_t *got;

    state_from(&s, ST(9, UM("m2", "new", 7), "",
                      TC("c2", "clock", "{}", 4, OKR("t", 4), true), 8, "S", 5));
    ck_assert_int_eq(rx_context_build(&s, "P", INT64_MAX, &got), 0);
    for (size_t i = 1; i < json_array_size(got); i++)
        ck_assert_str_ne(
            json_string_value(json_object_get(json_array_get(got, i), "role")), "system");
    json_decref(got);
    rx_state_release(&s);
}
END_TEST

/* Built through the machine: the context of the first ask after a tool round. */
START_TEST(test_context_after_machine)
{
    struct rx_state s;
    json_t *got, *want;

    ck_assert_int_eq(rx_state_init(&s), 0);
    apply_text(&s,
               "{'type':'user-send-message','timestamp':1,'messageId':'m1',"
               "'content':'2+3?'}",
               RX_ACCEPTED);
    apply_text(&s,
               "{'type':'brain-call-tools','timestamp':2,'calledBrainAt':1,"
               "'toolCalls':{'k':{'name':'calculator','parameters':'{\\'e\\':1}'}}}",
               RX_ACCEPTED);
    apply_text(&s,
               "{'type':'toolkit-respond','timestamp':3,'toolCallId':'k','result':'5'}",
               RX_ACCEPTED);
    ck_assert_int_eq(rx_context_build(&s, "P", 3, &got), 0);
    want = qjson("[" SYS_MSG("P") "," USER_MSG("2+3?") "," CALLS_MSG(
        CALL("k", "calculator", "{\\'e\\':1}")) "," TOOL_MSG("k", "5") "]");
    assert_json_eq(got, want, "after machine");
    json_decref(want);
    json_decref(got);
    rx_state_release(&s);
}
END_TEST

Suite *context_suite(void);

Suite *context_suite(void)
{
    Suite *s = suite_create("context");
    TCase *tc = tcase_create("build");

    tcase_add_loop_test(tc, test_context_table, 0, sizeof(rows) / sizeof(rows[0]));
    tcase_add_test(tc, test_unloaded_listed);
    tcase_add_test(tc, test_no_list_without_unloaded);
    tcase_add_test(tc, test_context_after_machine);
    suite_add_tcase(s, tc);
    return s;
}
