/*
 * check_context - the messages handed to a brain (SPEC 3.5, rx_context.h) from
 * hand-made states, compared with the expected OpenAI-style array (json_equal);
 * and the compression policy: one table row per rule and edge case, each cut
 * it gives applied through the machine, which must accept it.
 * The view (rx_context_view): every row of those tables gives the same answer
 * on the view as on the state; and long histories built through the machine
 * show that what is read follows the cut: the view holds only that, the
 * largest allocation of a build or a cut does not grow with the history, and
 * the older tool calls listed are the newest RX_CONTEXT_OLDER_MAX.
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

/* How many times `needle` is in `text`. */
static size_t occurrences(const char *text, const char *needle)
{
    size_t n = 0;

    for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

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

/* ---- the compression policy (SPEC 3.5) ------------------------------------------ */

#define ITEMS  RX_CONTEXT_ITEMS
#define CHARS  RX_CONTEXT_CHARS
#define TOKENS RX_CONTEXT_TOKENS
#define NO_CUT RX_CONTEXT_NO_CUT

/* Five plain items: questions at 1, 3, 5 and answers at 2, 4. */
#define FIVE                                                                             \
    ST(5, UM("u1", "q1", 1) "," UM("u2", "q2", 3) "," UM("u3", "q3", 5),                 \
       AM("a1", "r1", 2, 2, "complete", 1) "," AM("a2", "r2", 4, 4, "complete", 3), "",  \
       5, "", 0)

struct cut_row {
    const char *name;
    const char *state;
    int64_t signals_cut_at;
    enum rx_context_unit unit;
    int64_t limit;
    size_t keep;
    int64_t want; /* the cut, or NO_CUT */
};

static const struct cut_row cut_rows[] = {
    /* When: longer than the budget, and never with no budget. */
    {"within the budget: no compression", FIVE, 5, ITEMS, 5, 1, NO_CUT},
    {"one item over the budget", FIVE, 5, ITEMS, 4, 1, 4},
    {"a limit of 0 never compresses", FIVE, 5, ITEMS, 0, 1, NO_CUT},
    {"a negative limit never compresses", FIVE, 5, ITEMS, -1, 1, NO_CUT},
    /* Where: the newest cut that keeps `keep` items. */
    {"keep 2: the cut leaves the newest two", FIVE, 5, ITEMS, 1, 2, 3},
    {"keep 4: only the oldest item goes", FIVE, 5, ITEMS, 1, 4, 1},
    {"keep everything: nothing to cut", FIVE, 5, ITEMS, 1, 5, NO_CUT},
    {"keep 0 still keeps the message being answered", FIVE, 5, ITEMS, 1, 0, 4},
    /* Never backwards: at or before summaryCutAt is not a cut. */
    {"after the old cut only",
     ST(6, UM("u1", "q1", 1) "," UM("u2", "q2", 4) "," UM("u3", "q3", 6),
        AM("a1", "r1", 2, 2, "complete", 1) "," AM("a2", "r2", 5, 5, "complete", 4), "",
        6, "S", 3),
     6, ITEMS, 1, 2, 4},
    {"nothing after the old cut but what is kept",
     ST(6, UM("u1", "q1", 1) "," UM("u2", "q2", 4) "," UM("u3", "q3", 6),
        AM("a1", "r1", 2, 2, "complete", 1) "," AM("a2", "r2", 5, 5, "complete", 4), "",
        6, "S", 3),
     6, ITEMS, 1, 3, NO_CUT},
    /* Never separates a call from its result. */
    {"a call answered later is cut before it",
     ST(6, UM("u1", "q1", 1) "," UM("u2", "q2", 3) "," UM("u3", "q3", 6),
        AM("a1", "r1", 5, 5, "complete", 3),
        TC("c1", "clock", "{}", 2, OKR("t", 4), false), 4, "", 0),
     6, ITEMS, 1, 3, 1},
    {"once answered, the call and its result go together",
     ST(6, UM("u1", "q1", 1) "," UM("u2", "q2", 3) "," UM("u3", "q3", 6),
        AM("a1", "r1", 5, 5, "complete", 3),
        TC("c1", "clock", "{}", 2, OKR("t", 4), false), 4, "", 0),
     6, ITEMS, 1, 1, 5},
    {"a pending call is never cut",
     ST(5, UM("u1", "q1", 1) "," UM("u2", "q2", 5), AM("a1", "r1", 2, 2, "complete", 1),
        TC("c1", "clock", "{}", 3, "null", false), 3, "", 0),
     5, ITEMS, 1, 1, 2},
    {"a result this ask has not seen keeps its call",
     ST(7, UM("u1", "q1", 1) "," UM("u2", "q2", 5), AM("a1", "r1", 2, 2, "complete", 1),
        TC("c1", "clock", "{}", 3, OKR("t", 7), false), 3, "", 0),
     5, ITEMS, 1, 1, 2},
    /* Never splits one brain-call-tools, nor items of one time. */
    {"a brain-call-tools is one item",
     ST(6, UM("u1", "q1", 1) "," UM("u2", "q2", 6), AM("a1", "r1", 5, 5, "complete", 1),
        TC("c1", "clock", "{}", 2, OKR("t", 3), false) "," TC("c2", "calculator", "{}", 2,
                                                              OKR("5", 4), false),
        4, "", 0),
     6, ITEMS, 4, 1, NO_CUT},
    {"the whole batch is answered before it is cut",
     ST(6, UM("u1", "q1", 1) "," UM("u2", "q2", 6), AM("a1", "r1", 5, 5, "complete", 1),
        TC("c1", "clock", "{}", 2, OKR("t", 3), false) "," TC("c2", "calculator", "{}", 2,
                                                              OKR("5", 4), false),
        4, "", 0),
     6, ITEMS, 3, 2, 1},
    {"items of one time stay on one side",
     ST(4, UM("u1", "q1", 1) "," UM("u2", "q2", 3) "," UM("u3", "q3", 4),
        AM("a1", "r1", 2, 2, "complete", 1) "," AM("a2", "r2", 3, 3, "complete", 3), "",
        4, "", 0),
     4, ITEMS, 1, 2, 2},
    /* Unfinished answers and the question being answered. */
    {"a streaming answer is never cut",
     ST(5, UM("u1", "q1", 1) "," UM("u2", "q2", 3) "," UM("u3", "q3", 5),
        AM("a1", "", 2, 2, "streaming", 1) "," AM("a2", "r2", 4, 4, "complete", 3), "", 5,
        "", 0),
     5, ITEMS, 1, 1, 1},
    {"the newest user message stays, even with answers after it",
     ST(5, UM("u1", "q1", 1) "," UM("u2", "q2", 3), AM("a1", "r1", 2, 2, "complete", 1),
        TC("c1", "clock", "{}", 4, OKR("t", 5), false), 5, "", 0),
     5, ITEMS, 1, 1, 2},
    {"only what the ask saw", FIVE, 3, ITEMS, 1, 1, 2},
    /* Units. */
    {"characters: within", FIVE, 5, CHARS, 10, 1, NO_CUT},
    {"characters: over", FIVE, 5, CHARS, 9, 1, 4},
    {"characters of UTF-8 text, not bytes",
     ST(2, UM("u1", "\xe4\xbd\xa0\xe5\xa5\xbd", 1) "," UM("u2", "ok", 2), "", "", 2, "",
        0),
     2, CHARS, 4, 1, NO_CUT},
    {"tokens: bytes / 4 rounded up, within", FIVE, 5, TOKENS, 3, 1, NO_CUT},
    {"tokens: over", FIVE, 5, TOKENS, 2, 1, 4},
    {"the summary counts too",
     ST(5, UM("u2", "q2", 3) "," UM("u3", "q3", 5), AM("a2", "r2", 4, 4, "complete", 3),
        "", 5, "0123456789", 2),
     5, CHARS, 15, 1, 4},
    {"empty state", S0, INT64_MAX, ITEMS, 1, 1, NO_CUT},
};

START_TEST(test_cut_table)
{
    const struct cut_row *r = &cut_rows[_i];
    struct rx_context_budget b = {r->unit, r->limit, r->keep};
    struct rx_state s;
    int64_t cut = -42;
    char input[256];

    state_from(&s, r->state);
    ck_assert_int_eq(rx_context_choose_cut(&s, r->signals_cut_at, &b, &cut), 0);
    ck_assert_msg(cut == r->want, "%s: cut %lld, want %lld", r->name, (long long)cut,
                  (long long)r->want);
    /* A cut the policy gives is one the machine takes. */
    if (cut != NO_CUT) {
        snprintf(input, sizeof(input),
                 "{'type':'brain-compress-history','timestamp':%lld,'calledBrainAt':%lld,"
                 "'summary':'sum','cutAt':%lld}",
                 (long long)s.updated_at + 1, (long long)s.called_brain_at,
                 (long long)cut);
        apply_text(&s, input, RX_ACCEPTED);
    }
    rx_state_release(&s);
}
END_TEST

struct length_row {
    const char *name;
    const char *state;
    int64_t signals_cut_at;
    enum rx_context_unit unit;
    int64_t want;
};

static const struct length_row length_rows[] = {
    {"items: messages and batches", FIVE, INT64_MAX, ITEMS, 5},
    {"characters", FIVE, INT64_MAX, CHARS, 10},
    {"tokens", FIVE, INT64_MAX, TOKENS, 3},
    {"up to the ask's signals", FIVE, 3, CHARS, 6},
    {"empty state", S0, INT64_MAX, CHARS, 0},
    {"a call: name, arguments and the result seen, failures as 'Error: '",
     ST(9, "", "",
        TC("c1", "ab", "{}", 1, ERRR("bad", 2), false) "," TC("c2", "cd", "xy", 3,
                                                              OKR("zz", 9), false),
        0, "", 0),
     4, CHARS, 2 + 2 + 7 + 3 + 2 + 2},
    {"a batch is one item, loaded records count, unloaded ones do not",
     ST(9, UM("u2", "new", 7), "",
        TC("c1", "clock", "{}", 2, OKR("x", 3), false) "," TC(
            "c2", "clock", "{}", 4, OKR("t", 4),
            true) "," TC("c3", "clock", "{}", 8, OKR("a", 9),
                         false) "," TC("c4", "clock", "{}", 8, OKR("b", 9), false),
        8, "S", 5),
     INT64_MAX, ITEMS, 3},
    {"streaming and empty answers are not shown",
     ST(4, UM("u1", "q", 1),
        AM("a1", "", 2, 2, "complete", 1) "," AM("a2", "xyz", 3, 3, "streaming", 1), "",
        1, "", 0),
     INT64_MAX, CHARS, 1},
};

START_TEST(test_length_table)
{
    const struct length_row *r = &length_rows[_i];
    struct rx_state s;
    int64_t n;

    state_from(&s, r->state);
    n = rx_context_length(&s, r->signals_cut_at, r->unit);
    ck_assert_msg(n == r->want, "%s: %lld, want %lld", r->name, (long long)n,
                  (long long)r->want);
    rx_state_release(&s);
}
END_TEST

static void *failing_malloc(size_t n)
{
    (void)n;
    return NULL;
}

/* Out of memory: -ENOMEM and the output untouched. */
START_TEST(test_cut_nomem)
{
    struct rx_context_budget b = {ITEMS, 1, 1};
    struct rx_state s;
    int64_t cut = -42;

    state_from(&s, FIVE);
    json_set_alloc_funcs(failing_malloc, free);
    ck_assert_int_eq(rx_context_choose_cut(&s, 5, &b, &cut), -ENOMEM);
    json_set_alloc_funcs(malloc, free);
    ck_assert_int_eq(cut, -42);
    rx_state_release(&s);
}
END_TEST

/*
 * Through the machine, many rounds: every cut the policy gives is accepted,
 * moves forward, and leaves no answered call without its result in view.
 */
START_TEST(test_cut_rounds)
{
    struct rx_context_budget b = {ITEMS, 4, 2};
    struct rx_state s;
    int64_t t = 0, prev = 0, cut;
    char text[320];
    int cuts = 0;

    ck_assert_int_eq(rx_state_init(&s), 0);
    for (int round = 0; round < 30; round++) {
        snprintf(text, sizeof(text),
                 "{'type':'user-send-message','timestamp':%lld,'messageId':'m%d',"
                 "'content':'q%d'}",
                 (long long)++t, round, round);
        apply_text(&s, text, RX_ACCEPTED);
        if (round % 3 == 1) {
            snprintf(text, sizeof(text),
                     "{'type':'brain-call-tools','timestamp':%lld,'calledBrainAt':%lld,"
                     "'toolCalls':{'c%da':{'name':'clock','parameters':'{}'},"
                     "'c%db':{'name':'clock','parameters':'{}'}}}",
                     (long long)t + 1, (long long)t, round, round);
            t++;
            apply_text(&s, text, RX_ACCEPTED);
            for (char k = 'a'; k <= 'b'; k++) {
                snprintf(
                    text, sizeof(text),
                    "{'type':'toolkit-respond','timestamp':%lld,'toolCallId':'c%d%c',"
                    "'result':'r'}",
                    (long long)++t, round, k);
                apply_text(&s, text, RX_ACCEPTED);
            }
        }
        ck_assert_int_eq(rx_context_choose_cut(&s, t, &b, &cut), 0);
        if (cut != NO_CUT) {
            ck_assert_int_gt(cut, prev);
            ck_assert_int_le(cut, t);
            snprintf(text, sizeof(text),
                     "{'type':'brain-compress-history','timestamp':%lld,"
                     "'calledBrainAt':%lld,'summary':'up to %lld','cutAt':%lld}",
                     (long long)t + 1, (long long)t, (long long)cut, (long long)cut);
            t++;
            apply_text(&s, text, RX_ACCEPTED);
            prev = cut;
            cuts++;
        }
        snprintf(text, sizeof(text),
                 "{'type':'brain-send-message-complete','timestamp':%lld,"
                 "'calledBrainAt':%lld,'messageId':'a%d','content':'r%d'}",
                 (long long)t + 1, (long long)t, round, round);
        t++;
        apply_text(&s, text, RX_ACCEPTED);
        /* What stays in view fits the budget plus one round. */
        ck_assert_int_le(rx_context_length(&s, t, ITEMS), 4 + 3);
    }
    ck_assert_int_ge(cuts, 5);
    rx_state_release(&s);
}
END_TEST

/* ---- the view: the same answers, from what follows the cut ---------------------- */

/* Each table row again, on the view of its state. */
START_TEST(test_view_context_table)
{
    const struct row *r = &rows[_i];
    struct rx_state s, v;
    json_t *got = NULL, *want = qjson(r->messages);

    state_from(&s, r->state);
    ck_assert_int_eq(rx_context_view(&s, 0, &v), 0);
    ck_assert(rx_state_check_invariants(&v));
    ck_assert_int_eq(rx_context_build(&v, r->system_prompt, r->cut, &got), 0);
    assert_json_eq(got, want, r->name);
    json_decref(got);
    json_decref(want);
    rx_state_release(&v);
    rx_state_release(&s);
}
END_TEST

START_TEST(test_view_cut_table)
{
    const struct cut_row *r = &cut_rows[_i];
    struct rx_context_budget b = {r->unit, r->limit, r->keep};
    struct rx_state s, v;
    int64_t cut = -42;

    state_from(&s, r->state);
    ck_assert_int_eq(rx_context_view(&s, 0, &v), 0);
    ck_assert_int_eq(rx_context_choose_cut(&v, r->signals_cut_at, &b, &cut), 0);
    ck_assert_msg(cut == r->want, "%s: cut %lld on the view, want %lld", r->name,
                  (long long)cut, (long long)r->want);
    /* Bounded as a brain's view is, the decision is the same too. */
    rx_state_release(&v);
    ck_assert_int_eq(rx_context_view(&s, rx_context_view_messages(&b), &v), 0);
    ck_assert_int_eq(rx_context_choose_cut(&v, r->signals_cut_at, &b, &cut), 0);
    ck_assert_msg(cut == r->want, "%s: cut %lld on the bounded view, want %lld", r->name,
                  (long long)cut, (long long)r->want);
    rx_state_release(&v);
    rx_state_release(&s);
}
END_TEST

START_TEST(test_view_length_table)
{
    const struct length_row *r = &length_rows[_i];
    struct rx_state s, v;

    state_from(&s, r->state);
    ck_assert_int_eq(rx_context_view(&s, 0, &v), 0);
    ck_assert_int_eq(rx_context_length(&v, r->signals_cut_at, r->unit), r->want);
    rx_state_release(&v);
    rx_state_release(&s);
}
END_TEST

/* The largest single allocation since reset (jansson's allocator, which the
   pure layer uses too). */
static size_t alloc_max;

static void *counting_malloc(size_t n)
{
    if (n > alloc_max)
        alloc_max = n;
    return malloc(n);
}

static void feed(struct rx_state *s, struct rx_input *in, int64_t *t)
{
    struct rx_outcome o;

    in->timestamp = ++*t;
    in->has_timestamp = true;
    ck_assert_int_eq(rx_machine_apply(s, in, &o), 0);
    ck_assert_int_eq(o.verdict, RX_ACCEPTED);
}

/* Rounds [from, from + n): a question, a tool call answered (with `tools`), an answer. */
static void grow(struct rx_state *s, int64_t *t, int from, int n, bool tools)
{
    char mid[32], aid[32], cid[32];

    for (int r = from; r < from + n; r++) {
        struct rx_input_call call = {
            .id = cid, .name = (char *)"clock", .parameters = (char *)"{}"};
        struct rx_input u = {.type = RX_IN_USER_SEND_MESSAGE,
                             .message_id = mid,
                             .content = (char *)"question"};
        struct rx_input c = {
            .type = RX_IN_BRAIN_CALL_TOOLS, .calls = &call, .n_calls = 1};
        struct rx_input res = {
            .type = RX_IN_TOOLKIT_RESPOND, .tool_call_id = cid, .text = (char *)"t"};
        struct rx_input a = {.type = RX_IN_BRAIN_SEND_MESSAGE_COMPLETE,
                             .message_id = aid,
                             .content = (char *)"answer"};

        snprintf(mid, sizeof(mid), "m%d", r);
        snprintf(aid, sizeof(aid), "a%d", r);
        snprintf(cid, sizeof(cid), "c%d", r);
        feed(s, &u, t);
        if (tools) {
            c.called_brain_at = *t;
            feed(s, &c, t);
            feed(s, &res, t);
        }
        a.called_brain_at = *t;
        feed(s, &a, t);
    }
}

static void compress_at(struct rx_state *s, int64_t *t, int64_t cut)
{
    struct rx_input in = {
        .type = RX_IN_BRAIN_COMPRESS_HISTORY, .text = (char *)"earlier", .cut_at = cut};

    in.called_brain_at = *t;
    feed(s, &in, t);
}

static void load(struct rx_state *s, int64_t *t, const char *id)
{
    struct rx_input in = {.type = RX_IN_BRAIN_LOAD_TOOL_CALL, .tool_call_id = (char *)id};

    in.called_brain_at = *t;
    feed(s, &in, t);
}

static const struct history_row {
    const char *name;
    int before, after;              /* rounds before the cut, and after it */
    bool tools;                     /* every round calls a tool */
    const char *load_in, *load_out; /* loaded after the cut: within reach, beyond it */
    size_t messages_max;            /* the view's bound (0: none) */
    size_t view_user, view_assistant, view_tools;
    size_t listed; /* older calls listed */
    const char *first_listed, *last_listed, *not_listed;
} history_rows[] = {
    {"10 000 rounds, 5 after the cut", 10000, 5, false, NULL, NULL, 0, 5, 5, 0, 0, NULL,
     NULL, NULL},
    {"nothing compressed yet: everything follows the cut", 0, 300, false, NULL, NULL, 0,
     300, 300, 0, 0, NULL, NULL, NULL},
    {"older calls: the newest 64 are listed, in order", 300, 3, true, NULL, NULL, 0, 3, 3,
     RX_CONTEXT_OLDER_MAX + 3, RX_CONTEXT_OLDER_MAX, "c236", "c299", "c235"},
    {"a loaded call within reach is shown, one beyond it is not", 300, 3, true, "c290",
     "c10", 0, 3, 3, RX_CONTEXT_OLDER_MAX + 3, RX_CONTEXT_OLDER_MAX - 1, "c236", "c299",
     "c10"},
    {"a bounded view holds the newest messages of each kind", 0, 2000, false, NULL, NULL,
     10, 10, 10, 0, 0, NULL, NULL, NULL},
};

/* The view of `s` and the state itself give the same context, cut and length. */
static void assert_same(const struct rx_state *s, const struct rx_state *v, int64_t at,
                        const char *name)
{
    struct rx_context_budget b = {ITEMS, 4, 2};
    json_t *a = NULL, *c = NULL;
    int64_t cs = -1, cv = -2;

    ck_assert_int_eq(rx_context_build(s, "P", at, &a), 0);
    ck_assert_int_eq(rx_context_build(v, "P", at, &c), 0);
    assert_json_eq(c, a, name);
    ck_assert_int_eq(rx_context_choose_cut(s, at, &b, &cs), 0);
    ck_assert_int_eq(rx_context_choose_cut(v, at, &b, &cv), 0);
    ck_assert_msg(cs == cv, "%s: cut %lld on the state, %lld on the view", name,
                  (long long)cs, (long long)cv);
    for (int u = ITEMS; u <= TOKENS; u++)
        ck_assert_int_eq(rx_context_length(v, at, u), rx_context_length(s, at, u));
    json_decref(a);
    json_decref(c);
}

START_TEST(test_history_table)
{
    const struct history_row *r = &history_rows[_i];
    struct rx_context_budget b = {ITEMS, 4, 2};
    struct rx_state s, v;
    json_t *msgs = NULL;
    const char *list = "";
    int64_t t = 0, cut = 0, got;

    ck_assert_int_eq(rx_state_init(&s), 0);
    grow(&s, &t, 0, r->before, r->tools);
    if (r->before) {
        cut = t;
        compress_at(&s, &t, cut);
    }
    grow(&s, &t, r->before, r->after, r->tools);
    if (r->load_in) {
        load(&s, &t, r->load_in);
        load(&s, &t, r->load_out);
    }
    ck_assert(s.user.time_sorted && s.assistant.time_sorted && s.tools.time_sorted);

    /* Reading follows the cut: no allocation scales with the history. */
    alloc_max = 0;
    json_set_alloc_funcs(counting_malloc, free);
    ck_assert_int_eq(rx_context_build(&s, "P", t, &msgs), 0);
    ck_assert_int_eq(rx_context_choose_cut(&s, t, &b, &got), 0);
    json_set_alloc_funcs(malloc, free);
    ck_assert_int_ne(got, NO_CUT); /* every history here is over the budget */
    if (!r->messages_max && r->after < 10)
        ck_assert_msg(alloc_max <= 8192, "%s: an allocation of %zu bytes", r->name,
                      alloc_max);

    ck_assert_int_eq(rx_context_view(&s, r->messages_max, &v), 0);
    ck_assert(rx_state_check_invariants(&v));
    ck_assert_uint_eq(v.user.len, r->view_user);
    ck_assert_uint_eq(v.assistant.len, r->view_assistant);
    ck_assert_uint_eq(v.tools.len, r->view_tools);
    if (r->messages_max) {
        /* The newest ones, and the policy still cuts as on the whole state. */
        ck_assert_str_eq(v.user.items[v.user.len - 1].id,
                         s.user.items[s.user.len - 1].id);
        ck_assert_int_eq(rx_context_choose_cut(&v, t, &b, &cut), 0);
        ck_assert_int_eq(cut, got);
    } else {
        assert_same(&s, &v, t, r->name);
    }

    /* The list of older calls: which ones. */
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        json_t *m = json_array_get(msgs, i);
        const char *c = json_string_value(json_object_get(m, "content"));

        if (c && !strcmp(json_string_value(json_object_get(m, "role")), "system") &&
            strstr(c, "load_tool_call"))
            list = c;
    }
    ck_assert_uint_eq((size_t)(r->listed ? occurrences(list, "(clock)") : 0), r->listed);
    ck_assert_int_eq(rx_context_has_unloaded(&s, t), r->listed > 0);
    if (r->first_listed) {
        ck_assert_msg(names(list, r->first_listed) && names(list, r->last_listed),
                      "%s: %s", r->name, list);
        ck_assert_msg(!names(list, r->not_listed), "%s: %s", r->name, list);
    }
    if (r->load_in) {
        /* Shown in full: c290's call and result; c10 nowhere. */
        char *text = json_dumps(msgs, JSON_COMPACT);

        ck_assert_ptr_nonnull(strstr(text, "\"tool_call_id\":\"c290\""));
        ck_assert(!names(text, "c10"));
        ck_assert(!names(list, r->load_in));
        free(text);
    }
    json_decref(msgs);
    rx_state_release(&v);
    rx_state_release(&s);
}
END_TEST

/* The messages a view needs for a budget: past its limit, plus what is kept. */
static const struct {
    struct rx_context_budget budget;
    size_t want;
} view_need_rows[] = {
    {{ITEMS, 40, 6}, 47},      {{CHARS, 100, 4}, 105}, {{TOKENS, 10, 2}, 43},
    {{ITEMS, 0, 6}, 0},        {{TOKENS, -1, 2}, 0},   {{CHARS, INT64_MAX, 1}, 0},
    {{ITEMS, 1, SIZE_MAX}, 0},
};

START_TEST(test_view_messages)
{
    ck_assert_uint_eq(rx_context_view_messages(&view_need_rows[_i].budget),
                      view_need_rows[_i].want);
}
END_TEST

/* A state out of time order (hand-made) is read whole, with the same answers. */
START_TEST(test_view_out_of_order)
{
    struct rx_state s, v;

    state_from(&s, ST(9, UM("m2", "b", 8) "," UM("m1", "a", 1) "," UM("m3", "c", 9),
                      AM("a1", "A", 7, 7, "complete", 1),
                      TC("c2", "clock", "{}", 6, OKR("t", 6),
                         false) "," TC("c1", "clock", "{}", 2, OKR("x", 3), false),
                      8, "S", 5));
    ck_assert(!s.user.time_sorted && !s.tools.time_sorted);
    ck_assert_int_eq(rx_context_view(&s, 1, &v), 0);
    ck_assert_uint_eq(v.user.len, 3); /* no bound on a list out of order */
    ck_assert_uint_eq(v.tools.len, 2);
    assert_same(&s, &v, 9, "out of order");
    rx_state_release(&v);
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

    tc = tcase_create("compress");
    tcase_add_loop_test(tc, test_cut_table, 0, sizeof(cut_rows) / sizeof(cut_rows[0]));
    tcase_add_loop_test(tc, test_length_table, 0,
                        sizeof(length_rows) / sizeof(length_rows[0]));
    tcase_add_test(tc, test_cut_nomem);
    tcase_add_test(tc, test_cut_rounds);
    suite_add_tcase(s, tc);

    tc = tcase_create("view");
    tcase_add_loop_test(tc, test_view_context_table, 0, sizeof(rows) / sizeof(rows[0]));
    tcase_add_loop_test(tc, test_view_cut_table, 0,
                        sizeof(cut_rows) / sizeof(cut_rows[0]));
    tcase_add_loop_test(tc, test_view_length_table, 0,
                        sizeof(length_rows) / sizeof(length_rows[0]));
    tcase_add_loop_test(tc, test_history_table, 0,
                        sizeof(history_rows) / sizeof(history_rows[0]));
    tcase_add_loop_test(tc, test_view_messages, 0,
                        sizeof(view_need_rows) / sizeof(view_need_rows[0]));
    tcase_add_test(tc, test_view_out_of_order);
    suite_add_tcase(s, tc);
    return s;
}
