/*
 * check_oom - out of memory everywhere in the pure layer (jansson test_chaos.c
 * style). Every state_machine allocation goes through jansson's allocator
 * (state_machine/rx_alloc.h), so failing allocators installed with
 * json_set_alloc_funcs reach our records and jansson's values alike. Each call
 * is repeated failing its 1st, 2nd, ... allocation until it succeeds; every
 * failure must return -ENOMEM and leave its outputs (the encoded state, the
 * buffer) as they were; leaks show under ASan and valgrind.
 */
#include "tests/unit/helper_sm.h"
#include "state_machine/rx_json.h"

static long chaos_fail_at; /* 0: never fail */
static long chaos_calls;
static bool chaos_sticky; /* fail every allocation from the n-th on */

static void *chaos_malloc(size_t n)
{
    chaos_calls++;
    if (chaos_fail_at &&
        (chaos_calls == chaos_fail_at || (chaos_sticky && chaos_calls > chaos_fail_at)))
        return NULL;
    return malloc(n);
}

static void chaos_free(void *p)
{
    free(p);
}

static void chaos_on(long n)
{
    chaos_calls = 0;
    chaos_fail_at = n;
    json_set_alloc_funcs(chaos_malloc, chaos_free);
}

static void chaos_off(void)
{
    json_set_alloc_funcs(malloc, free);
    chaos_fail_at = 0;
}

static void setup(void)
{
    chaos_sticky = false;
    chaos_off();
}

static void teardown(void)
{
    chaos_off();
}

#define CHAOS_MAX 100000 /* no call here needs that many allocations */

/* ---- the transition --------------------------------------------------------- */

#define B_RICH                                                                           \
    STS(5, UM("m1", "hi", 1) "," UM("m2", "yo", 3),                                      \
        AMX("a0", "done", 1, 2, "complete", 1,                                           \
            ",'usage':{'promptTokens':9,'completionTokens':2},'firstTokenAt':1,"         \
            "'reasoning':'r'") "," AM("a1", "", 2, 2, "streaming", 1),                   \
        TC("c1", "calculator", "{}", 4, "null",                                          \
           true) "," TC("c2", "clock", "{}", 4, OKR("t", 5), true) "," B_WAITING,        \
        3, "", 0, "'clock':'deny','shell':'ask'",                                        \
        "'systemPrompt':'P','temperature':0.5")
/* Calls awaiting a person (SPEC 3.6). */
#define B_WAITING                                                                        \
    TCA("w1", "shell", "{}", 4, "null", false, "pending")                                \
    "," TCA("w2", "shell", "{\\'x\\':1}", 4, "null", false, "pending")

struct oom_row {
    const char *before;
    const char *input;
    enum rx_verdict verdict;
};

static const struct oom_row oom_rows[] = {
    {S0, "{'type':'user-send-message','timestamp':1,'messageId':'m1','content':'hi'}",
     RX_ACCEPTED},
    {B_RICH, "{'type':'user-send-message','timestamp':6,'messageId':'m3','content':'x'}",
     RX_ACCEPTED},
    {B_RICH, "{'type':'user-send-message','timestamp':6,'messageId':'m1','content':'hi'}",
     RX_UNCHANGED},
    {B_RICH, "{'type':'user-cancel','timestamp':6,'partialContents':{'a1':'He'}}",
     RX_ACCEPTED},
    {B_RICH,
     "{'type':'brain-send-message-start','timestamp':6,'calledBrainAt':3,'messageId':"
     "'a2'}",
     RX_ACCEPTED},
    {B_RICH,
     "{'type':'brain-send-message-complete','timestamp':6,'calledBrainAt':1,'messageId':"
     "'a1','content':'Hello'}",
     RX_ACCEPTED},
    {B_RICH,
     "{'type':'brain-send-message-complete','timestamp':6,'calledBrainAt':3,'messageId':"
     "'a9','content':'Hi'}",
     RX_ACCEPTED},
    {B_RICH,
     "{'type':'brain-call-tools','timestamp':6,'calledBrainAt':3,'toolCalls':{'c3':{"
     "'name':'clock','parameters':'{}'},'c4':{'name':'calculator','parameters':'1'}}}",
     RX_ACCEPTED},
    {B_RICH,
     "{'type':'brain-compress-history','timestamp':6,'calledBrainAt':3,'summary':'S',"
     "'cutAt':4}",
     RX_ACCEPTED},
    {ST(5, "", "", TC("c1", "clock", "{}", 4, OKR("t", 5), false), 0, "", 0),
     "{'type':'brain-load-tool-call','timestamp':6,'calledBrainAt':3,'toolCallId':'c1'}",
     RX_ACCEPTED},
    {B_RICH, "{'type':'toolkit-respond','timestamp':6,'toolCallId':'c1','result':'5'}",
     RX_ACCEPTED},
    {B_RICH, "{'type':'toolkit-error','timestamp':6,'toolCallId':'c1','error':'no'}",
     RX_ACCEPTED},
    {B_RICH, "{'type':'toolkit-error','timestamp':6,'toolCallId':'c2','error':'no'}",
     RX_REJECTED},
    /* Tool approval. */
    {B_RICH,
     "{'type':'brain-call-tools','timestamp':6,'calledBrainAt':3,'toolCalls':{'c3':{"
     "'name':'rm','parameters':'{}','policy':'deny'},'c4':{'name':'shell','parameters':"
     "'1','policy':'ask'},'c5':{'name':'clock','parameters':'{}','policy':'auto'}}}",
     RX_ACCEPTED},
    {B_RICH,
     "{'type':'user-review-tool-call','timestamp':6,'toolCallId':'w2','decision':'"
     "approve',"
     "'parameters':'{\\'x\\':2}'}",
     RX_ACCEPTED},
    {B_RICH,
     "{'type':'user-review-tool-call','timestamp':6,'toolCallId':'w1','decision':'reject'"
     ","
     "'reason':'no','always':true}",
     RX_ACCEPTED},
    {B_RICH,
     "{'type':'user-review-tool-call','timestamp':6,'toolCallId':'w1','decision':"
     "'approve','always':true,'parameters':'{}'}",
     RX_ACCEPTED},
    {B_RICH,
     "{'type':'user-review-tool-call','timestamp':6,'toolCallId':'c1','decision':'reject'"
     "}",
     RX_REJECTED},
    {B_RICH,
     "{'type':'user-set-tool-policy','timestamp':6,'tool':'calculator','policy':"
     "'ask'}",
     RX_ACCEPTED},
    {B_RICH, "{'type':'user-set-tool-policy','timestamp':6,'tool':'clock','policy':null}",
     RX_ACCEPTED},
    {B_RICH,
     "{'type':'user-set-tool-policy','timestamp':6,'tool':'shell','policy':'ask'}",
     RX_UNCHANGED},
    {ST(5, UM("m1", "hi", 1), "", B_WAITING, 1, "", 0),
     "{'type':'user-review-tool-call','timestamp':6,'toolCallId':'w1','decision':"
     "'approve','always':true}",
     RX_ACCEPTED},
    /* Effects that survive a crash (SPEC 3.7). */
    {B_RICH, "{'type':'toolkit-start-call','timestamp':6,'toolCallId':'c1'}",
     RX_ACCEPTED},
    {ST(5, UM("m1", "hi", 1), "", TCS("d1", "pay", "{}", 4, 5, "null", false), 1, "", 0),
     "{'type':'toolkit-call-in-doubt','timestamp':6,'toolCallId':'d1'}", RX_ACCEPTED},
    {ST(5, UM("m1", "hi", 1), "",
        TCSA("d1", "pay", "{}", 4, 5, "null", false, "in-doubt"), 1, "", 0),
     "{'type':'user-review-tool-call','timestamp':6,'toolCallId':'d1','decision':"
     "'resolve','result':'paid'}",
     RX_ACCEPTED},
    {ST(5, UM("m1", "hi", 1), "",
        TCSA("d1", "pay", "{}", 4, 5, "null", false, "in-doubt"), 1, "", 0),
     "{'type':'user-review-tool-call','timestamp':6,'toolCallId':'d1','decision':"
     "'reject'}",
     RX_ACCEPTED},
    {ST(5, UM("m1", "hi", 1), "",
        TCSA("d1", "pay", "{}", 4, 5, "null", false, "in-doubt"), 1, "", 0),
     "{'type':'user-send-message','timestamp':6,'messageId':'m2','content':'go'}",
     RX_ACCEPTED},
    /* Per-session settings, and what a brain says about its answer. */
    {B_RICH, "{'type':'user-configure','timestamp':6,'model':'m','temperature':1}",
     RX_ACCEPTED},
    {B_RICH, "{'type':'user-configure','timestamp':6,'systemPrompt':null,'model':'m'}",
     RX_ACCEPTED},
    {B_RICH, "{'type':'user-configure','timestamp':6,'systemPrompt':'P'}", RX_UNCHANGED},
    {B_RICH,
     "{'type':'brain-send-message-complete','timestamp':6,'calledBrainAt':1,'messageId':"
     "'a1','content':'Hello','usage':{'promptTokens':12,'completionTokens':3},"
     "'firstTokenAt':2,'reasoning':'Let me think.'}",
     RX_ACCEPTED},
};

START_TEST(test_apply_oom)
{
    const struct oom_row *r = &oom_rows[_i];
    struct rx_state s, ref;
    struct rx_input in;
    struct rx_outcome out;
    char *before, *want, *got;
    long n, failures = 0;

    /* The reference result, with memory to spare. */
    state_from(&ref, r->before);
    input_from(&in, r->input);
    ck_assert_int_eq(rx_machine_apply(&ref, &in, &out), 0);
    ck_assert_int_eq(out.verdict, r->verdict);
    want = state_bytes(&ref);
    rx_state_release(&ref);

    state_from(&s, r->before);
    before = state_bytes(&s);
    for (n = 1; n < CHAOS_MAX; n++) {
        int rc;

        chaos_on(n);
        rc = rx_machine_apply(&s, &in, &out);
        chaos_off();
        if (rc == 0)
            break;
        ck_assert_int_eq(rc, -ENOMEM);
        failures++;
        /* Atomic: the same state, still sane, usable for the next try. */
        ck_assert(rx_state_check_invariants(&s));
        got = state_bytes(&s);
        ck_assert_msg(!strcmp(got, before), "allocation %ld: state changed\n%s", n, got);
        free(got);
    }
    ck_assert_int_lt(n, CHAOS_MAX);
    ck_assert_int_eq(out.verdict, r->verdict);
    got = state_bytes(&s);
    ck_assert_str_eq(got, want);
    if (r->verdict == RX_ACCEPTED)
        ck_assert_int_gt(failures, 0);

    /* Sticky failure: every allocation from the n-th on fails. */
    rx_state_release(&s);
    state_from(&s, r->before);
    chaos_sticky = true;
    for (n = 1; n < CHAOS_MAX; n++) {
        int rc;

        chaos_on(n);
        rc = rx_machine_apply(&s, &in, &out);
        chaos_off();
        if (rc == 0)
            break;
        ck_assert_int_eq(rc, -ENOMEM);
        free(got);
        got = state_bytes(&s);
        ck_assert_str_eq(got, before);
    }
    free(got);
    got = state_bytes(&s);
    ck_assert_str_eq(got, want);

    free(got);
    free(want);
    free(before);
    rx_input_release(&in);
    rx_state_release(&s);
}
END_TEST

/* ---- parse, decode, encode, copy ------------------------------------------- */

static const char *const parse_inputs[] = {
    "{'type':'user-send-message','timestamp':1,'messageId':'m1','content':'hi'}",
    "{'type':'user-cancel','timestamp':1,'partialContents':{'a1':'x','a2':'y'}}",
    "{'type':'brain-send-message-complete','timestamp':1,'calledBrainAt':1,'messageId':"
    "'a','content':'c'}",
    "{'type':'brain-call-tools','timestamp':1,'calledBrainAt':1,'toolCalls':{'c1':{"
    "'name':'clock','parameters':'{}'},'c2':{'name':'calculator','parameters':{'e':[1,"
    "2]}}}}",
    "{'type':'brain-compress-history','timestamp':1,'calledBrainAt':1,'summary':'s',"
    "'cutAt':1}",
    "{'type':'toolkit-error','timestamp':1,'toolCallId':'c1','error':'e'}",
    "{'type':'brain-call-tools','timestamp':1,'calledBrainAt':1,'toolCalls':{'c1':{"
    "'name':'shell','parameters':'{}','policy':'ask'},'c2':{'name':'rm','parameters':"
    "'{}','policy':'deny'}}}",
    "{'type':'user-review-tool-call','timestamp':1,'toolCallId':'c1','decision':'approve'"
    ","
    "'parameters':'{\\'a\\':[1]}','always':true}",
    "{'type':'user-review-tool-call','timestamp':1,'toolCallId':'c1','decision':'reject',"
    "'reason':'no'}",
    "{'type':'user-set-tool-policy','timestamp':1,'tool':'shell','policy':'deny'}",
    "{'type':'user-set-tool-policy','timestamp':1,'tool':'shell','policy':null}",
    "{'type':'user-configure','timestamp':1,'systemPrompt':'S','model':'m',"
    "'temperature':0.25}",
    "{'type':'user-configure','timestamp':1,'systemPrompt':'','model':null}",
    "{'type':'brain-send-message-complete','timestamp':1,'calledBrainAt':1,'messageId':"
    "'a','content':'c','usage':{'promptTokens':1,'completionTokens':2},'firstTokenAt':1,"
    "'reasoning':'r'}",
};

START_TEST(test_parse_oom)
{
    json_t *j = qjson(parse_inputs[_i]);
    struct rx_input in, ref, copy;
    struct rx_buf want, got;
    long n;
    int rc;

    input_from(&ref, parse_inputs[_i]);
    rx_buf_init(&want, RX_BUF_SMALL_MAX);
    rx_buf_init(&got, RX_BUF_SMALL_MAX);
    ck_assert_int_eq(rx_input_encode(&ref, &want), 0);

    for (n = 1; n < CHAOS_MAX; n++) {
        const char *field = "unset";

        chaos_on(n);
        rc = rx_input_parse(j, &in, &field, NULL);
        chaos_off();
        if (rc == 0)
            break;
        ck_assert_int_eq(rc, -ENOMEM);
    }
    ck_assert_int_eq(rc, 0);
    ck_assert_int_gt(n, 1);
    ck_assert_int_eq(rx_input_encode(&in, &got), 0);
    ck_assert_str_eq(got.data, want.data);
    rx_input_release(&in);

    /* Encoding: a failure leaves the buffer as it was. */
    for (n = 1; n < CHAOS_MAX; n++) {
        rx_buf_reset(&got);
        rx_buf_release(&got);
        ck_assert_int_eq(rx_buf_puts(&got, "keep"), 0);
        chaos_on(n);
        rc = rx_input_encode(&ref, &got);
        chaos_off();
        if (rc == 0)
            break;
        ck_assert_int_eq(rc, -ENOMEM);
        ck_assert_uint_eq(got.len, 4);
        ck_assert_str_eq(got.data, "keep");
    }
    ck_assert_int_eq(rc, 0);
    ck_assert_str_eq(got.data + 4, want.data);

    /* Copy. */
    for (n = 1; n < CHAOS_MAX; n++) {
        chaos_on(n);
        rc = rx_input_copy(&ref, &copy);
        chaos_off();
        if (rc == 0)
            break;
        ck_assert_int_eq(rc, -ENOMEM);
    }
    ck_assert_int_eq(rc, 0);
    rx_buf_reset(&got);
    ck_assert_int_eq(rx_input_encode(&copy, &got), 0);
    ck_assert_str_eq(got.data, want.data);
    rx_input_release(&copy);

    rx_input_release(&ref);
    rx_buf_release(&want);
    rx_buf_release(&got);
    json_decref(j);
}
END_TEST

START_TEST(test_add_partial_oom)
{
    struct rx_input in;
    long n;
    int rc;

    input_from(&in, "{'type':'user-cancel','timestamp':3,'partialContents':{'a0':'x'}}");
    for (n = 1; n < CHAOS_MAX; n++) {
        chaos_on(n);
        rc = rx_input_add_partial(&in, "a1", "Hel");
        chaos_off();
        if (rc == 0)
            break;
        ck_assert_int_eq(rc, -ENOMEM);
        ck_assert_uint_eq(in.n_calls, 1);
        ck_assert_str_eq(in.calls[0].id, "a0");
    }
    ck_assert_int_eq(rc, 0);
    ck_assert_uint_eq(in.n_calls, 2);
    ck_assert_str_eq(in.calls[1].id, "a1");
    ck_assert_str_eq(in.calls[1].parameters, "Hel");
    rx_input_release(&in);
}
END_TEST

START_TEST(test_state_oom)
{
    json_t *j = qjson(B_RICH);
    struct rx_state s, ref, copy;
    struct rx_buf b;
    char *want, *got;
    long n;
    int rc;

    state_from(&ref, B_RICH);
    want = state_bytes(&ref);

    /* init */
    for (n = 1; n < CHAOS_MAX; n++) {
        chaos_on(n);
        rc = rx_state_init(&s);
        chaos_off();
        if (rc == 0)
            break;
        ck_assert_int_eq(rc, -ENOMEM);
    }
    ck_assert_int_eq(rc, 0);
    rx_state_release(&s);

    /* decode */
    for (n = 1; n < CHAOS_MAX; n++) {
        chaos_on(n);
        rc = rx_state_decode(j, &s, NULL);
        chaos_off();
        if (rc == 0)
            break;
        ck_assert_int_eq(rc, -ENOMEM);
    }
    ck_assert_int_eq(rc, 0);
    ck_assert_int_gt(n, 5);
    got = state_bytes(&s);
    ck_assert_str_eq(got, want);
    free(got);
    rx_state_release(&s);

    /* copy */
    for (n = 1; n < CHAOS_MAX; n++) {
        chaos_on(n);
        rc = rx_state_copy(&ref, &copy);
        chaos_off();
        if (rc == 0)
            break;
        ck_assert_int_eq(rc, -ENOMEM);
    }
    ck_assert_int_eq(rc, 0);
    got = state_bytes(&copy);
    ck_assert_str_eq(got, want);
    free(got);
    rx_state_release(&copy);

    /* encode: a failure leaves the buffer as it was */
    rx_buf_init(&b, RX_BUF_STATE_MAX);
    for (n = 1; n < CHAOS_MAX; n++) {
        rx_buf_release(&b);
        ck_assert_int_eq(rx_buf_puts(&b, "keep"), 0);
        chaos_on(n);
        rc = rx_state_encode(&ref, &b);
        chaos_off();
        if (rc == 0)
            break;
        ck_assert_int_eq(rc, -ENOMEM);
        ck_assert_str_eq(b.data, "keep");
    }
    ck_assert_int_eq(rc, 0);
    ck_assert_str_eq(b.data + 4, want);
    rx_buf_release(&b);

    free(want);
    rx_state_release(&ref);
    json_decref(j);
}
END_TEST

START_TEST(test_effects_oom)
{
    struct rx_state s;
    struct rx_effect_set set;
    long n;
    int rc;

    state_from(
        &s, ST(5, UM("m1", "hi", 1) "," UM("m2", "yo", 3),
               AM("a1", "", 2, 2, "streaming", 1) "," AM("a2", "", 4, 4, "streaming", 3),
               TC("c1", "a", "{}", 4, OKR("x", 5), false), 3, "", 0));
    rx_effect_set_init(&set);
    for (n = 1; n < CHAOS_MAX; n++) {
        chaos_on(n);
        rc = rx_effects_at(&s, &set);
        chaos_off();
        if (rc == 0)
            break;
        ck_assert_int_eq(rc, -ENOMEM);
        ck_assert_uint_eq(set.len, 0);
    }
    ck_assert_int_eq(rc, 0);
    ck_assert_uint_eq(set.len, 3); /* ask-brain-1, -3, -5 */
    rx_effect_set_release(&set);
    rx_state_release(&s);

    state_from(&s, ST(5, UM("m1", "hi", 1), "",
                      TC("c1", "a", "{}", 4, "null", false) "," TC(
                          "c2", "a", "{}", 4, "null",
                          false) "," TC("c3", "a", "{}", 4, "null",
                                        false) "," TC("c4", "a", "{}", 4, "null",
                                                      false) "," TC("c5", "a", "{}", 4,
                                                                    "null", false),
                      1, "", 0));
    for (n = 1; n < CHAOS_MAX; n++) {
        chaos_on(n);
        rc = rx_effects_at(&s, &set);
        chaos_off();
        if (rc == 0)
            break;
        ck_assert_int_eq(rc, -ENOMEM);
        ck_assert_uint_eq(set.len, 0);
    }
    ck_assert_int_eq(rc, 0);
    ck_assert_uint_eq(set.len, 5);
    rx_effect_set_release(&set);
    rx_state_release(&s);
}
END_TEST

START_TEST(test_context_oom)
{
    struct rx_state s;
    json_t *ctx, *want;
    long n;
    int rc;

    state_from(&s, ST(9, UM("m1", "old", 1) "," UM("m2", "new", 7),
                      AM("a1", "answer", 7, 8, "complete", 7),
                      TC("c1", "calculator", "{}", 2, OKR("5", 3),
                         false) "," TC("c2", "clock", "{}", 4, ERRR("t", 4),
                                       true) "," TC("c3", "weather", "{}", 8, OKR("w", 8),
                                                    false) "," TC("c4", "clock", "{}", 8,
                                                                  ERRR("u", 9), false),
                      8, "S", 5));
    ck_assert_int_eq(rx_context_build(&s, "P", INT64_MAX, &want), 0);
    for (n = 1; n < CHAOS_MAX; n++) {
        ctx = NULL;
        chaos_on(n);
        rc = rx_context_build(&s, "P", INT64_MAX, &ctx);
        chaos_off();
        if (rc == 0)
            break;
        ck_assert_int_eq(rc, -ENOMEM);
        ck_assert_ptr_null(ctx);
    }
    ck_assert_int_eq(rc, 0);
    ck_assert_int_gt(n, 10);
    ck_assert(json_equal(ctx, want));
    json_decref(ctx);
    json_decref(want);
    rx_state_release(&s);
}
END_TEST

/* The parser: every failure is -ENOMEM with no tree (and nothing leaked),
   never "not JSON"; escaped keys, equal keys, a long real and nesting. */
START_TEST(test_json_parse_oom)
{
    static const char text[] =
        "{\"k\\u00e9\":[1,{\"a\":\"x\\ny\",\"a\":[true,null]}],"
        "\"r\":1.00000000000000000000000000000000000000000000000000000000000000000001,"
        "\"s\":\"caf\xc3\xa9\"}";
    json_t *want, *j = NULL;
    struct rx_error why;
    long n;
    int rc = -ENOMEM;

    ck_assert_int_eq(rx_json_parse(text, sizeof(text) - 1, 0, &want, NULL), 0);
    for (n = 1; n < CHAOS_MAX && rc == -ENOMEM; n++) {
        chaos_on(n);
        rc = rx_json_parse(text, sizeof(text) - 1, 0, &j, &why);
        chaos_off();
        if (rc == -ENOMEM) {
            ck_assert_ptr_null(j);
            ck_assert_str_eq(why.text, "out of memory");
        }
    }
    ck_assert_int_eq(rc, 0);
    ck_assert_int_gt(n, 10);
    ck_assert(json_equal(j, want));
    json_decref(j);
    json_decref(want);
}
END_TEST

Suite *oom_suite(void);

Suite *oom_suite(void)
{
    Suite *s = suite_create("oom");
    TCase *tc = tcase_create("chaos");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_apply_oom, 0, sizeof(oom_rows) / sizeof(oom_rows[0]));
    tcase_add_loop_test(tc, test_parse_oom, 0,
                        sizeof(parse_inputs) / sizeof(parse_inputs[0]));
    tcase_add_test(tc, test_add_partial_oom);
    tcase_add_test(tc, test_state_oom);
    tcase_add_test(tc, test_effects_oom);
    tcase_add_test(tc, test_context_oom);
    tcase_add_test(tc, test_json_parse_oom);
    suite_add_tcase(s, tc);
    return s;
}
