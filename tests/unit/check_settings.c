/*
 * check_settings - per-session brain settings and what a brain reports about
 * its answer, in the pure machine (SPEC 3.1, 3.2): user-configure (set,
 * several at once, clear with null, keep what is not named, the same again,
 * every invalid field, time irreversibility) and brain-send-message-complete
 * with usage, firstTokenAt and reasoning kept on the message (absent when not
 * given). One table row per rule, each checking the exact state after and its
 * JSON Patch (sm_row_check); then the input shapes with the offending field
 * named, encode -> parse -> encode, the state's wire form with its round
 * trips and decode errors, and the view a brain gets.
 */
#include "tests/unit/helper_sm.h"

#include <math.h>

#include "state_machine/rx_alloc.h"

#define CONFIGURE(fields) "{'type':'user-configure','timestamp':11" fields "}"
#define COMPLETE(id, extra)                                                              \
    "{'type':'brain-send-message-complete','timestamp':5,'calledBrainAt':1,'messageId':" \
    "'" id "','content':'Hello'" extra "}"

/* A state at 10 with settings `set`. */
#define B_SET_S(set) STS(10, UM("m1", "hi", 10), "", "", 0, "", 0, "", set)
#define B_NONE       B_SET_S("")
#define ALL3         "'systemPrompt':'Be brief.','model':'gpt-x','temperature':0.5"
#define B_ALL        B_SET_S(ALL3)
/* The same state after an accepted configure at 11. */
#define A_SET(set) STS(11, UM("m1", "hi", 10), "", "", 0, "", 0, "", set)

#define B_STREAM                                                                         \
    ST(2, UM("m1", "hi", 1), AM("a1", "", 2, 2, "streaming", 1), "", 1, "", 0)
#define A_DONE(extra)                                                                    \
    ST(5, UM("m1", "hi", 1), AMX("a1", "Hello", 2, 5, "complete", 1, extra), "", 1, "", 0)
#define USAGE(p, c) ",'usage':{'promptTokens':" #p ",'completionTokens':" #c "}"
#define EXTRAS      USAGE(12, 3) ",'firstTokenAt':1,'reasoning':'Let me think.'"

/* ---- inputs the parser (rightly) refuses ------------------------------------- */

static void tweak_name_nothing(struct rx_input *in)
{
    in->settings_named = 0;
}

static void tweak_empty_model(struct rx_input *in)
{
    ck_assert_int_eq(rx_input_set_str(&in->settings.model, ""), 0);
}

static void tweak_long_model(struct rx_input *in)
{
    char name[RX_SETTINGS_MODEL_MAX + 2];

    memset(name, 'm', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    ck_assert_int_eq(rx_input_set_str(&in->settings.model, name), 0);
}

static void tweak_hot(struct rx_input *in)
{
    in->settings.temperature = 2.5;
}

static void tweak_cold(struct rx_input *in)
{
    in->settings.temperature = -0.5;
}

static void tweak_nan(struct rx_input *in)
{
    in->settings.temperature = NAN;
}

static void tweak_negative_tokens(struct rx_input *in)
{
    in->usage.completion_tokens = -3;
}

static void tweak_negative_first(struct rx_input *in)
{
    in->first_token_at = -1;
}

static const struct sm_row rows[] = {
    /* ---- user-configure: set ------------------------------------------------------- */
    {"set the model", B_NONE, CONFIGURE(",'model':'gpt-x'"), NULL, ACC, NULL,
     A_SET("'model':'gpt-x'")},
    {"set all three", B_NONE, CONFIGURE("," ALL3), NULL, ACC, NULL, A_SET(ALL3)},
    {"wire order whatever the input's", B_NONE,
     CONFIGURE(",'temperature':1,'systemPrompt':'S'"), NULL, ACC, NULL,
     A_SET("'systemPrompt':'S','temperature':1")},
    {"an empty system prompt is a choice, not an absence", B_NONE,
     CONFIGURE(",'systemPrompt':''"), NULL, ACC, NULL, A_SET("'systemPrompt':''")},
    {"temperature 0", B_NONE, CONFIGURE(",'temperature':0"), NULL, ACC, NULL,
     A_SET("'temperature':0")},
    {"temperature 2", B_NONE, CONFIGURE(",'temperature':2.0"), NULL, ACC, NULL,
     A_SET("'temperature':2")},
    {"temperature -0 is 0", B_NONE, CONFIGURE(",'temperature':-0.0"), NULL, ACC, NULL,
     A_SET("'temperature':0")},
    {"a temperature in its shortest form", B_NONE,
     CONFIGURE(",'temperature':0.70000000000000000"), NULL, ACC, NULL,
     A_SET("'temperature':0.7")},
    {"unknown fields are ignored", B_NONE, CONFIGURE(",'model':'m','colour':'red'"), NULL,
     ACC, NULL, A_SET("'model':'m'")},
    {"the other settings are kept", B_ALL, CONFIGURE(",'model':'other'"), NULL, ACC, NULL,
     A_SET("'systemPrompt':'Be brief.','model':'other','temperature':0.5")},
    {"a text that needs escaping", B_NONE,
     CONFIGURE(",'systemPrompt':'Say \\'hi\\'\\n\\u00e9'"), NULL, ACC, NULL,
     A_SET("'systemPrompt':'Say \\'hi\\'\\n\xc3\xa9'")},
    {"the same timestamp is allowed", B_NONE,
     "{'type':'user-configure','timestamp':10,'model':'m'}", NULL, ACC, NULL,
     STS(10, UM("m1", "hi", 10), "", "", 0, "", 0, "", "'model':'m'")},

    /* ---- clear ------------------------------------------------------------------- */
    {"null clears one", B_ALL, CONFIGURE(",'temperature':null"), NULL, ACC, NULL,
     A_SET("'systemPrompt':'Be brief.','model':'gpt-x'")},
    {"null clears each", B_ALL,
     CONFIGURE(",'systemPrompt':null,'model':null,'temperature':null"), NULL, ACC, NULL,
     A_SET("")},
    {"clear and set at once", B_ALL, CONFIGURE(",'systemPrompt':null,'temperature':1.25"),
     NULL, ACC, NULL, A_SET("'model':'gpt-x','temperature':1.25")},

    /* ---- nothing changes ------------------------------------------------------------
     */
    {"the same again", B_ALL, CONFIGURE(",'model':'gpt-x'"), NULL, UNCH, NULL, NULL},
    {"the same number written otherwise", B_ALL, CONFIGURE(",'temperature':0.50"), NULL,
     UNCH, NULL, NULL},
    {"all three the same", B_ALL, CONFIGURE("," ALL3), NULL, UNCH, NULL, NULL},
    {"clear what is absent", B_NONE, CONFIGURE(",'model':null,'temperature':null"), NULL,
     UNCH, NULL, NULL},
    {"absent is not empty", B_NONE, CONFIGURE(",'systemPrompt':''"), NULL, ACC, NULL,
     A_SET("'systemPrompt':''")},

    /* ---- refused ---------------------------------------------------------------------
     */
    {"stale configure", B_NONE, "{'type':'user-configure','timestamp':9,'model':'m'}",
     NULL, REJ(STALE_TIMESTAMP), NULL, NULL},
    {"stale clear", B_ALL, "{'type':'user-configure','timestamp':9,'model':null}", NULL,
     REJ(STALE_TIMESTAMP), NULL, NULL},
    {"naming nothing", B_NONE, CONFIGURE(",'model':'m'"), tweak_name_nothing,
     REJ(INVALID), "settings", NULL},
    {"an empty model", B_NONE, CONFIGURE(",'model':'m'"), tweak_empty_model, REJ(INVALID),
     "model", NULL},
    {"a model name too long", B_NONE, CONFIGURE(",'model':'m'"), tweak_long_model,
     REJ(INVALID), "model", NULL},
    {"too hot", B_NONE, CONFIGURE(",'temperature':1"), tweak_hot, REJ(INVALID),
     "temperature", NULL},
    {"below zero", B_ALL, CONFIGURE(",'temperature':1"), tweak_cold, REJ(INVALID),
     "temperature", NULL},
    {"not a number", B_NONE, CONFIGURE(",'temperature':1"), tweak_nan, REJ(INVALID),
     "temperature", NULL},
    /* A model that is not named is not checked: it is not applied. */
    {"a bad model not named is ignored", B_NONE, CONFIGURE(",'temperature':1"),
     tweak_empty_model, ACC, NULL, A_SET("'temperature':1")},

    /* ---- configure leaves the conversation alone ------------------------------------
     */
    {"while an answer streams", B_STREAM,
     "{'type':'user-configure','timestamp':3,'model':'m'}", NULL, ACC, NULL,
     STS(3, UM("m1", "hi", 1), AM("a1", "", 2, 2, "streaming", 1), "", 1, "", 0, "",
         "'model':'m'")},

    /* ---- brain-send-message-complete: what the brain says about its answer ----------
     */
    {"complete keeps usage, firstTokenAt and reasoning", B_STREAM, COMPLETE("a1", EXTRAS),
     NULL, ACC, NULL, A_DONE(EXTRAS)},
    {"without them, none", B_STREAM, COMPLETE("a1", ""), NULL, ACC, NULL, A_DONE("")},
    {"null is none", B_STREAM,
     COMPLETE("a1", ",'usage':null,'firstTokenAt':null,'reasoning':null"), NULL, ACC,
     NULL, A_DONE("")},
    {"usage only", B_STREAM, COMPLETE("a1", USAGE(0, 0)), NULL, ACC, NULL,
     A_DONE(USAGE(0, 0))},
    {"reasoning only", B_STREAM, COMPLETE("a1", ",'reasoning':'Hm \\'x\\''"), NULL, ACC,
     NULL, A_DONE(",'reasoning':'Hm \\'x\\''")},
    {"firstTokenAt only, after receivedAt", B_STREAM, COMPLETE("a1", ",'firstTokenAt':4"),
     NULL, ACC, NULL, A_DONE(",'firstTokenAt':4")},
    {"an unknown id is appended with them", B_STREAM, COMPLETE("a9", EXTRAS), NULL, ACC,
     NULL,
     ST(5, UM("m1", "hi", 1),
        AM("a1", "", 2, 2, "streaming", 1) "," AMX("a9", "Hello", 5, 5, "complete", 1,
                                                   EXTRAS),
        "", 1, "", 0)},
    {"negative token counts", B_STREAM, COMPLETE("a1", USAGE(1, 1)),
     tweak_negative_tokens, REJ(INVALID), "usage", NULL},
    {"a negative firstTokenAt", B_STREAM, COMPLETE("a1", ",'firstTokenAt':1"),
     tweak_negative_first, REJ(INVALID), "firstTokenAt", NULL},
    {"a complete message is not completed again", A_DONE(EXTRAS),
     "{'type':'brain-send-message-complete','timestamp':6,'calledBrainAt':1,'messageId':"
     "'a1','content':'x','reasoning':'again'}",
     NULL, REJ(NOT_STREAMING), NULL, NULL},
    {"cancel keeps what a streaming record carries",
     ST(2, UM("m1", "hi", 1), AMX("a1", "", 2, 2, "streaming", 1, ",'reasoning':'Hm'"),
        "", 1, "", 0),
     "{'type':'user-cancel','timestamp':3,'partialContents':{'a1':'He'}}", NULL, ACC,
     NULL,
     ST(3, UM("m1", "hi", 1), AMX("a1", "He", 2, 3, "stopped", 1, ",'reasoning':'Hm'"),
        "", 3, "", 0)},
    {"settings survive an answer", B_SET_S("'model':'m'"),
     "{'type':'brain-send-message-complete','timestamp':12,'calledBrainAt':10,"
     "'messageId':'a1','content':'ok'" USAGE(4, 2) "}",
     NULL, ACC, NULL,
     STS(12, UM("m1", "hi", 10), AMX("a1", "ok", 12, 12, "complete", 10, USAGE(4, 2)), "",
         10, "", 0, "", "'model':'m'")},
};

START_TEST(test_settings_rows)
{
    sm_row_check(&rows[_i]);
}
END_TEST

/* The outcome names what changed: settings have their own bit, alone. */
START_TEST(test_outcome_bits)
{
    struct rx_state s;
    struct rx_input in;
    struct rx_outcome out;

    state_from(&s, B_NONE);
    input_from(&in, CONFIGURE(",'model':'m'"));
    ck_assert_int_eq(rx_machine_apply(&s, &in, &out), 0);
    ck_assert_int_eq(out.verdict, RX_ACCEPTED);
    ck_assert_uint_eq(out.changed, RX_CHANGED_SETTINGS);
    ck_assert_str_eq(s.settings.model, "m");
    ck_assert_ptr_null(s.settings.system_prompt);
    ck_assert(!s.settings.has_temperature);
    rx_input_release(&in);
    rx_state_release(&s);
}
END_TEST

/* ---- parse: shapes, with the offending field named ------------------------------ */

static const struct {
    const char *input;
    const char *field; /* NULL: parses */
    unsigned named;    /* RX_SETTING_* when it parses (user-configure) */
} parse_rows[] = {
    {CONFIGURE(",'model':'m'"), NULL, RX_SETTING_MODEL},
    {CONFIGURE(",'systemPrompt':null,'model':null,'temperature':null"), NULL,
     RX_SETTINGS_ALL},
    {CONFIGURE(",'systemPrompt':'','temperature':0"), NULL,
     RX_SETTING_SYSTEM_PROMPT | RX_SETTING_TEMPERATURE},
    {CONFIGURE(""), "settings", 0},
    {CONFIGURE(",'settings':{'model':'m'}"), "settings", 0},
    {CONFIGURE(",'systemPrompt':5"), "systemPrompt", 0},
    {CONFIGURE(",'systemPrompt':['a']"), "systemPrompt", 0},
    {CONFIGURE(",'systemPrompt':'a\\u0000b'"), "systemPrompt", 0},
    {CONFIGURE(",'model':''"), "model", 0},
    {CONFIGURE(",'model':true"), "model", 0},
    {CONFIGURE(",'temperature':'1'"), "temperature", 0},
    {CONFIGURE(",'temperature':2.0001"), "temperature", 0},
    {CONFIGURE(",'temperature':3"), "temperature", 0},
    {CONFIGURE(",'temperature':-0.1"), "temperature", 0},
    {CONFIGURE(",'temperature':{}"), "temperature", 0},
    {CONFIGURE(",'model':'m','temperature':9"), "temperature", 0},
    {COMPLETE("a1", EXTRAS), NULL, 0},
    {COMPLETE("a1", ",'usage':null,'firstTokenAt':null,'reasoning':null"), NULL, 0},
    {COMPLETE("a1", ",'usage':{'promptTokens':1,'completionTokens':2,'totalTokens':3}"),
     NULL, 0},
    {COMPLETE("a1", ",'usage':5"), "usage", 0},
    {COMPLETE("a1", ",'usage':{'promptTokens':1}"), "usage", 0},
    {COMPLETE("a1", ",'usage':{'promptTokens':-1,'completionTokens':2}"), "usage", 0},
    {COMPLETE("a1", ",'usage':{'promptTokens':1.5,'completionTokens':2}"), "usage", 0},
    {COMPLETE("a1", ",'usage':{'prompt_tokens':1,'completion_tokens':2}"), "usage", 0},
    {COMPLETE("a1", ",'firstTokenAt':'now'"), "firstTokenAt", 0},
    {COMPLETE("a1", ",'firstTokenAt':-5"), "firstTokenAt", 0},
    {COMPLETE("a1", ",'reasoning':5"), "reasoning", 0},
    {COMPLETE("a1", ",'reasoning':'a\\u0000'"), "reasoning", 0},
};

START_TEST(test_parse)
{
    char *text = q(parse_rows[_i].input);
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
        ck_assert_uint_eq(in.settings_named, parse_rows[_i].named);
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

/* What the parser keeps. */
START_TEST(test_parse_fields)
{
    struct rx_input in;

    input_from(&in, CONFIGURE(",'systemPrompt':'S','model':null,'temperature':1.5"));
    ck_assert_int_eq(in.type, RX_IN_USER_CONFIGURE);
    ck_assert_int_eq(rx_input_type_origin(in.type), RX_ORIGIN_USER);
    ck_assert_str_eq(rx_input_type_name(in.type), "user-configure");
    ck_assert_str_eq(in.settings.system_prompt, "S");
    ck_assert_ptr_null(in.settings.model);
    ck_assert(in.settings.has_temperature);
    ck_assert(in.settings.temperature == 1.5);
    rx_input_release(&in);

    input_from(&in, COMPLETE("a1", EXTRAS));
    ck_assert(in.usage.present);
    ck_assert_int_eq(in.usage.prompt_tokens, 12);
    ck_assert_int_eq(in.usage.completion_tokens, 3);
    ck_assert(in.has_first_token_at);
    ck_assert_int_eq(in.first_token_at, 1);
    ck_assert_str_eq(in.reasoning, "Let me think.");
    rx_input_release(&in);

    /* Only a complete carries them. */
    input_from(&in, "{'type':'brain-send-message-start','timestamp':1,'calledBrainAt':1,"
                    "'messageId':'a1','reasoning':'r','usage':5}");
    ck_assert(!in.usage.present);
    ck_assert_ptr_null(in.reasoning);
    rx_input_release(&in);
}
END_TEST

/* encode -> parse -> encode gives the same bytes, and the meaning is kept. */
static const struct {
    const char *input;
    const char *encoded; /* NULL: the input itself */
} encode_rows[] = {
    {CONFIGURE(",'model':'m'"), NULL},
    {CONFIGURE("," ALL3), NULL},
    {CONFIGURE(",'systemPrompt':null,'model':null,'temperature':null"), NULL},
    {CONFIGURE(",'temperature':1,'systemPrompt':''"),
     CONFIGURE(",'systemPrompt':'','temperature':1")},
    {CONFIGURE(",'temperature':0.1"), NULL},
    {CONFIGURE(",'temperature':0.30000000000000004"), NULL},
    {CONFIGURE(",'temperature':1e-05"), NULL},
    {CONFIGURE(",'temperature':1.9999999999999998"), NULL},
    {CONFIGURE(",'model':'a\\'b','colour':'red'"), CONFIGURE(",'model':'a\\'b'")},
    {COMPLETE("a1", EXTRAS), NULL},
    {COMPLETE("a1", USAGE(0, 0)), NULL},
    {COMPLETE("a1", ",'reasoning':''"), NULL},
    {COMPLETE("a1", ",'usage':null,'firstTokenAt':null"), COMPLETE("a1", "")},
};

START_TEST(test_encode)
{
    struct rx_input in, back, copy;
    struct rx_buf b1, b2, b3;
    json_t *j, *want = qjson(encode_rows[_i].encoded ? encode_rows[_i].encoded
                                                     : encode_rows[_i].input);
    char *want_text = json_dumps(want, JSON_COMPACT | JSON_PRESERVE_ORDER);

    input_from(&in, encode_rows[_i].input);
    rx_buf_init(&b1, RX_BUF_SMALL_MAX);
    rx_buf_init(&b2, RX_BUF_SMALL_MAX);
    rx_buf_init(&b3, RX_BUF_SMALL_MAX);
    ck_assert_int_eq(rx_input_encode(&in, &b1), 0);
    j = json_loads(b1.data, 0, NULL);
    ck_assert_msg(j != NULL, "not JSON: %s", b1.data);
    ck_assert_msg(json_equal(j, want), "%s\nencoded as %s\nwant %s",
                  encode_rows[_i].input, b1.data, want_text);
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
    free(want_text);
    rx_buf_release(&b1);
    rx_buf_release(&b2);
    rx_buf_release(&b3);
}
END_TEST

/* ---- the state's wire form ---------------------------------------------------- */

/* Each decodes and encodes back to the same bytes. */
static const char *const round_trip[] = {
    B_ALL,
    B_SET_S("'systemPrompt':''"),
    B_SET_S("'temperature':0.30000000000000004"),
    B_SET_S("'temperature':1e-05"),
    B_SET_S("'model':'m','temperature':2"),
    A_DONE(EXTRAS),
    A_DONE(",'reasoning':''"),
    ST(9, UM("m1", "hi", 1), AMX("a1", "x", 2, 3, "stopped", 1, ",'firstTokenAt':0"), "",
       3, "", 0),
};

START_TEST(test_round_trip)
{
    struct rx_state s, c;
    char *bytes, *copied;

    state_from(&s, round_trip[_i]);
    ck_assert_state(&s, round_trip[_i]);
    ck_assert_int_eq(rx_state_copy(&s, &c), 0);
    bytes = state_bytes(&s);
    copied = state_bytes(&c);
    ck_assert_str_eq(bytes, copied);
    free(bytes);
    free(copied);
    rx_state_release(&c);
    rx_state_release(&s);
}
END_TEST

/* Snapshots older than settings load with none, and say so from then on. */
START_TEST(test_old_snapshot)
{
    struct rx_state s;

    state_from(&s, "{'updatedAt':5,'userMessages':[],'assistantMessages':[{'kind':"
                   "'assistant','id':'a1','content':'x','receivedAt':2,'updatedAt':3,"
                   "'status':'complete','calledBrainAt':1}],'toolCallRecords':[],"
                   "'calledBrainAt':1,'contextSummary':'','summaryCutAt':0,"
                   "'toolPolicies':{}}");
    ck_assert(rx_settings_is_empty(&s.settings));
    ck_assert(!s.assistant.items[0].usage.present);
    ck_assert_ptr_null(s.assistant.items[0].reasoning);
    ck_assert_state(&s, ST(5, "", AM("a1", "x", 2, 3, "complete", 1), "", 1, "", 0));
    rx_state_release(&s);
    state_from(&s, "{'updatedAt':5,'userMessages':[],'assistantMessages':[],"
                   "'toolCallRecords':[],'calledBrainAt':1,'contextSummary':'',"
                   "'summaryCutAt':0,'settings':null}");
    ck_assert_state(&s, ST(5, "", "", "", 1, "", 0));
    rx_state_release(&s);
}
END_TEST

static const struct {
    const char *state;
    const char *field;
} bad_rows[] = {
    {"{'updatedAt':1,'userMessages':[],'assistantMessages':[],'toolCallRecords':[],"
     "'calledBrainAt':0,'contextSummary':'','summaryCutAt':0,'settings':5}",
     "settings"},
    {B_SET_S("'model':5"), "model"},
    {B_SET_S("'model':''"), "model"},
    {B_SET_S("'systemPrompt':[]"), "systemPrompt"},
    {B_SET_S("'temperature':3"), "temperature"},
    {B_SET_S("'temperature':'hot'"), "temperature"},
    {A_DONE(",'usage':5"), "usage"},
    {A_DONE(",'usage':{'promptTokens':-1,'completionTokens':0}"), "promptTokens"},
    {A_DONE(",'usage':{'promptTokens':1}"), "completionTokens"},
    {A_DONE(",'firstTokenAt':-1"), "firstTokenAt"},
    {A_DONE(",'firstTokenAt':'x'"), "firstTokenAt"},
    {A_DONE(",'reasoning':5"), "reasoning"},
};

START_TEST(test_decode_errors)
{
    json_t *j = qjson(bad_rows[_i].state);
    struct rx_state s;
    struct rx_error err = {""};

    ck_assert_msg(rx_state_decode(j, &s, &err) == -EINVAL, "decoded: %s",
                  bad_rows[_i].state);
    ck_assert_msg(strstr(err.text, bad_rows[_i].field) != NULL, "'%s' does not name '%s'",
                  err.text, bad_rows[_i].field);
    json_decref(j);
}
END_TEST

/* What a brain reads: the view (and any copy) carries the settings. */
START_TEST(test_view_carries_settings)
{
    struct rx_state s, v;

    state_from(&s,
               STS(9, UM("m1", "a", 1) "," UM("m2", "b", 8),
                   AMX("a1", "x", 2, 3, "complete", 1, EXTRAS), "", 1, "S", 5, "", ALL3));
    ck_assert_int_eq(rx_context_view(&s, 1, &v), 0);
    ck_assert(rx_settings_equal(&s.settings, &v.settings));
    ck_assert_str_eq(v.settings.system_prompt, "Be brief.");
    ck_assert_str_eq(v.settings.model, "gpt-x");
    ck_assert(v.settings.temperature == 0.5);
    ck_assert(rx_state_check_invariants(&v));
    rx_state_release(&v);
    rx_state_release(&s);
}
END_TEST

/* The invariants refuse what no input can make. */
START_TEST(test_invariants)
{
    struct rx_state s;

    state_from(&s, B_ALL);
    s.settings.temperature = 2.5;
    ck_assert(!rx_state_check_invariants(&s));
    s.settings.temperature = -0.0;
    ck_assert(!rx_state_check_invariants(&s));
    s.settings.temperature = 0;
    ck_assert(rx_state_check_invariants(&s));
    s.settings.has_temperature = false;
    ck_assert(rx_state_check_invariants(&s));
    s.settings.temperature = 1;
    ck_assert(!rx_state_check_invariants(&s));
    s.settings.temperature = 0;
    s.user.items[0].usage.present = true; /* a user message has no usage */
    ck_assert(!rx_state_check_invariants(&s));
    s.user.items[0].usage.present = false;
    rx_state_release(&s);
}
END_TEST

Suite *settings_suite(void);

Suite *settings_suite(void)
{
    Suite *s = suite_create("settings");
    TCase *tc = tcase_create("rules");

    tcase_add_loop_test(tc, test_settings_rows, 0, sizeof(rows) / sizeof(rows[0]));
    tcase_add_test(tc, test_outcome_bits);
    suite_add_tcase(s, tc);

    tc = tcase_create("wire");
    tcase_add_loop_test(tc, test_parse, 0, sizeof(parse_rows) / sizeof(parse_rows[0]));
    tcase_add_test(tc, test_parse_fields);
    tcase_add_loop_test(tc, test_encode, 0, sizeof(encode_rows) / sizeof(encode_rows[0]));
    tcase_add_loop_test(tc, test_round_trip, 0,
                        sizeof(round_trip) / sizeof(round_trip[0]));
    tcase_add_test(tc, test_old_snapshot);
    tcase_add_loop_test(tc, test_decode_errors, 0,
                        sizeof(bad_rows) / sizeof(bad_rows[0]));
    tcase_add_test(tc, test_view_carries_settings);
    tcase_add_test(tc, test_invariants);
    suite_add_tcase(s, tc);
    return s;
}
