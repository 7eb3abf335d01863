/*
 * check_doubt - effects that survive a crash (SPEC 3.7) in the pure machine,
 * one table row per rule and per rejection: toolkit-start-call (startedAt,
 * a re-run), toolkit-call-in-doubt (a started call waits for a person),
 * user-review-tool-call's retry / reject / resolve of a call in doubt and the
 * decisions that do not apply, what a toolkit answer, a new user message and
 * user-cancel do to a call in doubt. Each row checks the exact state after
 * and, when accepted, its JSON Patch (sm_row_check). Then effects_at and
 * rx_effects_any on calls in doubt, and a life through two crashes whose
 * encoded log replays to the same bytes. Shapes are in check_approval_input.c,
 * snapshots in check_state.c.
 */
#include "tests/unit/helper_sm.h"

#include "state_machine/rx_alloc.h"

#define INTERRUPTED "not run again after an interruption"
#define NEW_MSG     "not approved: the user sent a new message"

/* ---- base state ---------------------------------------------------------------- */

/*
 * d1 is in doubt; d2 started and runs; d3 was never started; d4 awaits
 * approval; d5 started and was answered; d6 was approved and runs.
 */
#define D1 TCSA("d1", "shell", "{}", 4, 5, "null", false, "in-doubt")
#define D2 TCS("d2", "shell", "{}", 4, 5, "null", false)
#define D3 TC("d3", "clock", "{}", 4, "null", false)
#define D4 TCA("d4", "shell", "{}", 4, "null", false, "pending")
#define D5 TCS("d5", "calc", "{}", 4, 5, OKR("1", 6), false)
#define D6 TCSA("d6", "shell", "{}", 4, 5, "null", false, "approved")

#define D_ALL(d1, d2, d3, d4, d5, d6) d1 "," d2 "," d3 "," d4 "," d5 "," d6
#define B_DOUBT                       ST(6, UM("m1", "hi", 1), "", D_ALL(D1, D2, D3, D4, D5, D6), 1, "", 0)
/* The same after an accepted input at 7 that changed records only. */
#define D_AFTER_P(d1, d2, d3, d4, d5, d6, pol)                                           \
    STP(7, UM("m1", "hi", 1), "", D_ALL(d1, d2, d3, d4, d5, d6), 1, "", 0, pol)
#define D_AFTER(d1, d2, d3, d4, d5, d6) D_AFTER_P(d1, d2, d3, d4, d5, d6, "")

/* d1 after a decision at 7. */
#define D1_RETRIED TCA("d1", "shell", "{}", 4, "null", false, "approved")
#define D1_REJECTED                                                                      \
    TCSA("d1", "shell", "{}", 4, 5, ERRR(INTERRUPTED, 7), false, "rejected")
#define D1_RESOLVED(r) TCSA("d1", "shell", "{}", 4, 5, OKR(r, 7), false, "resolved")

static void tweak_no_tool_call_id(struct rx_input *in)
{
    rx_free(in->tool_call_id);
    in->tool_call_id = NULL;
}

static void tweak_no_text(struct rx_input *in)
{
    rx_free(in->text);
    in->text = NULL;
}

static void tweak_no_decision(struct rx_input *in)
{
    in->decision = RX_DECISION_NONE;
}

static void tweak_bad_decision(struct rx_input *in)
{
    in->decision = (enum rx_decision)9;
}

static const struct sm_row rows[] = {
    /* ---- toolkit-start-call ---------------------------------------------------- */
    {"start: startedAt is the input's time", B_DOUBT, START_CALL("d3"), NULL, ACC, NULL,
     D_AFTER(D1, D2, TCS("d3", "clock", "{}", 4, 7, "null", false), D4, D5, D6)},
    {"start again: a re-run moves startedAt on", B_DOUBT, START_CALL("d2"), NULL, ACC,
     NULL, D_AFTER(D1, TCS("d2", "shell", "{}", 4, 7, "null", false), D3, D4, D5, D6)},
    {"start of an approved call", B_DOUBT, START_CALL("d6"), NULL, ACC, NULL,
     D_AFTER(D1, D2, D3, D4, D5,
             TCSA("d6", "shell", "{}", 4, 7, "null", false, "approved"))},
    {"start of a call in doubt", B_DOUBT, START_CALL("d1"), NULL, REJ(AWAITING_APPROVAL),
     NULL, NULL},
    {"start of a call awaiting approval", B_DOUBT, START_CALL("d4"), NULL,
     REJ(AWAITING_APPROVAL), NULL, NULL},
    {"start of an answered call", B_DOUBT, START_CALL("d5"), NULL, REJ(ALREADY_ANSWERED),
     NULL, NULL},
    {"start of an unknown call", B_DOUBT, START_CALL("d9"), NULL, REJ(UNKNOWN_ID), NULL,
     NULL},
    {"stale start", B_DOUBT,
     "{'type':'toolkit-start-call','timestamp':5,'toolCallId':'d3'}", NULL,
     REJ(STALE_TIMESTAMP), NULL, NULL},
    {"start without toolCallId", B_DOUBT, START_CALL("d3"), tweak_no_tool_call_id,
     REJ(INVALID), "toolCallId", NULL},

    /* ---- toolkit-call-in-doubt ------------------------------------------------- */
    {"in doubt: a started call waits for a person", B_DOUBT, IN_DOUBT("d2"), NULL, ACC,
     NULL,
     D_AFTER(D1, TCSA("d2", "shell", "{}", 4, 5, "null", false, "in-doubt"), D3, D4, D5,
             D6)},
    {"in doubt after an approval", B_DOUBT, IN_DOUBT("d6"), NULL, ACC, NULL,
     D_AFTER(D1, D2, D3, D4, D5,
             TCSA("d6", "shell", "{}", 4, 5, "null", false, "in-doubt"))},
    {"in doubt, never started", B_DOUBT, IN_DOUBT("d3"), NULL, REJ(NOT_STARTED), NULL,
     NULL},
    {"in doubt again", B_DOUBT, IN_DOUBT("d1"), NULL, REJ(AWAITING_APPROVAL), NULL, NULL},
    {"in doubt while awaiting approval", B_DOUBT, IN_DOUBT("d4"), NULL,
     REJ(AWAITING_APPROVAL), NULL, NULL},
    {"in doubt after its result", B_DOUBT, IN_DOUBT("d5"), NULL, REJ(ALREADY_ANSWERED),
     NULL, NULL},
    {"in doubt, unknown call", B_DOUBT, IN_DOUBT("d9"), NULL, REJ(UNKNOWN_ID), NULL,
     NULL},
    {"stale in doubt", B_DOUBT,
     "{'type':'toolkit-call-in-doubt','timestamp':3,'toolCallId':'d2'}", NULL,
     REJ(STALE_TIMESTAMP), NULL, NULL},
    {"in doubt without toolCallId", B_DOUBT, IN_DOUBT("d2"), tweak_no_tool_call_id,
     REJ(INVALID), "toolCallId", NULL},

    /* ---- the person's decision on a call in doubt ------------------------------ */
    {"retry: approved, not started, the tool runs again", B_DOUBT,
     REVIEW("d1", "retry", ""), NULL, ACC, NULL, D_AFTER(D1_RETRIED, D2, D3, D4, D5, D6)},
    {"retry drops parameters, reason and result", B_DOUBT,
     REVIEW("d1", "retry", ",'parameters':'{\\'a\\':1}','reason':'r','result':'x'"), NULL,
     ACC, NULL, D_AFTER(D1_RETRIED, D2, D3, D4, D5, D6)},
    {"reject: answered 'not run again after an interruption'", B_DOUBT,
     REVIEW("d1", "reject", ""), NULL, ACC, NULL,
     D_AFTER(D1_REJECTED, D2, D3, D4, D5, D6)},
    {"reject: a reason is not added", B_DOUBT,
     REVIEW("d1", "reject", ",'reason':'too risky'"), NULL, ACC, NULL,
     D_AFTER(D1_REJECTED, D2, D3, D4, D5, D6)},
    {"resolve: the person's result, a success", B_DOUBT,
     REVIEW("d1", "resolve", ",'result':'sent once'"), NULL, ACC, NULL,
     D_AFTER(D1_RESOLVED("sent once"), D2, D3, D4, D5, D6)},
    {"resolve with an empty result", B_DOUBT, REVIEW("d1", "resolve", ",'result':''"),
     NULL, ACC, NULL, D_AFTER(D1_RESOLVED(""), D2, D3, D4, D5, D6)},
    {"approve of a call in doubt", B_DOUBT, REVIEW("d1", "approve", ""), NULL,
     REJ(IN_DOUBT), NULL, NULL},
    {"approve with edits of a call in doubt", B_DOUBT,
     REVIEW("d1", "approve", ",'parameters':'{}'"), NULL, REJ(IN_DOUBT), NULL, NULL},
    {"always on a call in doubt", B_DOUBT, REVIEW("d1", "reject", ",'always':true"), NULL,
     REJ(INVALID), "always", NULL},
    {"resolve without a result", B_DOUBT, REVIEW("d1", "resolve", ",'result':'x'"),
     tweak_no_text, REJ(INVALID), "result", NULL},
    {"no decision", B_DOUBT, REVIEW("d1", "retry", ""), tweak_no_decision, REJ(INVALID),
     "decision", NULL},
    {"a decision out of range", B_DOUBT, REVIEW("d1", "retry", ""), tweak_bad_decision,
     REJ(INVALID), "decision", NULL},
    {"stale retry", B_DOUBT,
     "{'type':'user-review-tool-call','timestamp':2,'toolCallId':'d1','decision':"
     "'retry'}",
     NULL, REJ(STALE_TIMESTAMP), NULL, NULL},

    /* ---- decisions that do not apply ------------------------------------------- */
    {"retry of a call awaiting approval", B_DOUBT, REVIEW("d4", "retry", ""), NULL,
     REJ(NOT_IN_DOUBT), NULL, NULL},
    {"resolve of a call awaiting approval", B_DOUBT,
     REVIEW("d4", "resolve", ",'result':'x'"), NULL, REJ(NOT_IN_DOUBT), NULL, NULL},
    {"retry of a running call", B_DOUBT, REVIEW("d2", "retry", ""), NULL,
     REJ(NOT_PENDING), NULL, NULL},
    {"resolve of an answered call", B_DOUBT, REVIEW("d5", "resolve", ",'result':'x'"),
     NULL, REJ(NOT_PENDING), NULL, NULL},
    {"retry of an unknown call", B_DOUBT, REVIEW("d9", "retry", ""), NULL,
     REJ(UNKNOWN_ID), NULL, NULL},
    {"always approve leaves calls in doubt waiting", B_DOUBT,
     REVIEW("d4", "approve", ",'always':true"), NULL, ACC, NULL,
     D_AFTER_P(D1, D2, D3, TCA("d4", "shell", "{}", 4, "null", false, "approved"), D5, D6,
               "'shell':'auto'")},
    {"always reject leaves calls in doubt waiting", B_DOUBT,
     REVIEW("d4", "reject", ",'always':true"), NULL, ACC, NULL,
     D_AFTER_P(
         D1, D2, D3,
         TCA("d4", "shell", "{}", 4, ERRR("rejected by the user", 7), false, "rejected"),
         D5, D6, "'shell':'deny'")},

    /* ---- what else ends the wait ------------------------------------------------ */
    {"no tool answers a call in doubt", B_DOUBT,
     "{'type':'toolkit-respond','timestamp':7,'toolCallId':'d1','result':'ran'}", NULL,
     REJ(AWAITING_APPROVAL), NULL, NULL},
    {"nor fails it", B_DOUBT,
     "{'type':'toolkit-error','timestamp':7,'toolCallId':'d1','error':'x'}", NULL,
     REJ(AWAITING_APPROVAL), NULL, NULL},
    {"a started call is answered as any, startedAt kept", B_DOUBT,
     "{'type':'toolkit-respond','timestamp':7,'toolCallId':'d2','result':'ran'}", NULL,
     ACC, NULL,
     D_AFTER(D1, TCS("d2", "shell", "{}", 4, 5, OKR("ran", 7), false), D3, D4, D5, D6)},
    {"a new message answers a call in doubt", B_DOUBT,
     "{'type':'user-send-message','timestamp':7,'messageId':'m2','content':'go on'}",
     NULL, ACC, NULL,
     ST(7, UM("m1", "hi", 1) "," UM("m2", "go on", 7), "",
        D_ALL(D1_REJECTED, D2, D3,
              TCA("d4", "shell", "{}", 4, ERRR(NEW_MSG, 7), false, "rejected"), D5, D6),
        1, "", 0)},
    {"cancel answers a call in doubt 'cancelled'", B_DOUBT,
     "{'type':'user-cancel','timestamp':7}", NULL, ACC, NULL,
     ST(7, UM("m1", "hi", 1), "",
        D_ALL(TCSA("d1", "shell", "{}", 4, 5, ERRR("cancelled", 7), false, "rejected"),
              TCS("d2", "shell", "{}", 4, 5, ERRR("cancelled", 7), false),
              TC("d3", "clock", "{}", 4, ERRR("cancelled", 7), false),
              TCA("d4", "shell", "{}", 4, ERRR("cancelled", 7), false, "rejected"), D5,
              TCSA("d6", "shell", "{}", 4, 5, ERRR("cancelled", 7), false, "approved")),
        7, "", 0)},
    {"a call in doubt can be loaded", B_DOUBT,
     "{'type':'brain-load-tool-call','timestamp':7,'calledBrainAt':1,'toolCallId':'d1'}",
     NULL, ACC, NULL,
     D_AFTER(TCSA("d1", "shell", "{}", 4, 5, "null", true, "in-doubt"), D2, D3, D4, D5,
             D6)},
};

START_TEST(test_doubt_rows)
{
    sm_row_check(&rows[_i]);
}
END_TEST

/* The helpers the server reads: who waits for a person, who ran when it crashed. */
START_TEST(test_doubt_accessors)
{
    struct rx_state s;
    static const struct {
        const char *id;
        bool awaiting, running;
    } want[] = {
        {"d1", true, false}, {"d2", false, true},  {"d3", false, false},
        {"d4", true, false}, {"d5", false, false}, {"d6", false, true},
    };

    state_from(&s, B_DOUBT);
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        const struct rx_tool_call *c = rx_state_find_tool(&s, want[i].id);

        ck_assert_ptr_nonnull(c);
        ck_assert_msg(rx_tool_call_is_awaiting(c) == want[i].awaiting, "%s awaiting",
                      want[i].id);
        ck_assert_msg(rx_tool_call_is_running(c) == want[i].running, "%s running",
                      want[i].id);
    }
    ck_assert_uint_eq(rx_state_awaiting_approval(&s), 2);
    ck_assert_uint_eq(rx_state_pending_tools(&s), 5);
    ck_assert(rx_approval_is_awaiting(RX_APPROVAL_PENDING));
    ck_assert(rx_approval_is_awaiting(RX_APPROVAL_IN_DOUBT));
    ck_assert(!rx_approval_is_awaiting(RX_APPROVAL_NONE));
    ck_assert(!rx_approval_is_awaiting(RX_APPROVAL_APPROVED));
    ck_assert(!rx_approval_is_awaiting(RX_APPROVAL_REJECTED));
    ck_assert(!rx_approval_is_awaiting(RX_APPROVAL_RESOLVED));
    rx_state_release(&s);
}
END_TEST

/* ---- effects_at (SPEC 3.3, 3.7): a call in doubt is a call awaiting a person -- */

static const struct {
    const char *name;
    const char *state;
    const char *keys;
} effect_rows[] = {
    {"a call in doubt runs nothing and blocks the ask",
     ST(6, UM("m1", "hi", 1), "", D1, 1, "", 0), ""},
    {"a call in doubt beside a running one",
     ST(6, UM("m1", "hi", 1), "", D1 "," D2, 1, "", 0), "request-toolkit-d2"},
    {"a started call keeps its request", ST(6, UM("m1", "hi", 1), "", D2, 1, "", 0),
     "request-toolkit-d2"},
    {"a retried call runs again", ST(7, UM("m1", "hi", 1), "", D1_RETRIED, 1, "", 0),
     "request-toolkit-d1"},
    {"a resolved call is a result: the brain is asked",
     ST(7, UM("m1", "hi", 1), "", D1_RESOLVED("ok"), 1, "", 0), "ask-brain-7"},
    {"a call not run again is a result: the brain is asked",
     ST(7, UM("m1", "hi", 1), "", D1_REJECTED, 1, "", 0), "ask-brain-7"},
    {"a new user message still waits for the person",
     ST(6, UM("m1", "hi", 1) "," UM("m2", "yo", 6), "", D1, 1, "", 0), ""},
    {"a streaming answer keeps its ask while a call is in doubt",
     ST(6, UM("m1", "hi", 1), AM("a1", "", 2, 2, "streaming", 1), D1, 1, "", 0),
     "ask-brain-1"},
    {"in doubt and awaiting approval: nothing",
     ST(6, UM("m1", "hi", 1), "", D1 "," D4, 1, "", 0), ""},
};

START_TEST(test_doubt_effects)
{
    struct rx_state s;
    char *got;

    state_from(&s, effect_rows[_i].state);
    got = effect_keys(&s);
    ck_assert_msg(!strcmp(got, effect_rows[_i].keys), "%s: got '%s', want '%s'",
                  effect_rows[_i].name, got, effect_rows[_i].keys);
    /* busy exactly when something is wanted */
    ck_assert_msg(rx_effects_any(&s) == (*effect_rows[_i].keys != '\0'),
                  "%s: rx_effects_any", effect_rows[_i].name);
    free(got);
    rx_state_release(&s);
}
END_TEST

/* ---- a life through two crashes, replayed from its encoded log ---------------- */

static const struct {
    const char *input;
    enum rx_verdict verdict;
    const char *keys;
} life[] = {
    {"{'type':'user-send-message','timestamp':1,'messageId':'m1','content':'pay'}",
     RX_ACCEPTED, "ask-brain-1"},
    {"{'type':'brain-call-tools','timestamp':2,'calledBrainAt':1,'toolCalls':{'c1':{"
     "'name':'pay','parameters':'{}','policy':'auto'},'c2':{'name':'clock',"
     "'parameters':'{}'}}}",
     RX_ACCEPTED, "request-toolkit-c1 request-toolkit-c2"},
    {"{'type':'toolkit-start-call','timestamp':3,'toolCallId':'c1'}", RX_ACCEPTED,
     "request-toolkit-c1 request-toolkit-c2"},
    {"{'type':'toolkit-start-call','timestamp':4,'toolCallId':'c2'}", RX_ACCEPTED,
     "request-toolkit-c1 request-toolkit-c2"},
    {"{'type':'toolkit-respond','timestamp':5,'toolCallId':'c2','result':'noon'}",
     RX_ACCEPTED, "request-toolkit-c1"},
    /* A crash: c1 started, has no result, and paying is not safe to repeat. */
    {"{'type':'toolkit-call-in-doubt','timestamp':6,'toolCallId':'c1'}", RX_ACCEPTED, ""},
    {"{'type':'toolkit-start-call','timestamp':7,'toolCallId':'c1'}", RX_REJECTED, ""},
    {"{'type':'user-review-tool-call','timestamp':8,'toolCallId':'c1','decision':"
     "'retry'}",
     RX_ACCEPTED, "request-toolkit-c1"},
    {"{'type':'toolkit-start-call','timestamp':9,'toolCallId':'c1'}", RX_ACCEPTED,
     "request-toolkit-c1"},
    /* A second crash, during the retry. */
    {"{'type':'toolkit-call-in-doubt','timestamp':10,'toolCallId':'c1'}", RX_ACCEPTED,
     ""},
    {"{'type':'user-review-tool-call','timestamp':11,'toolCallId':'c1','decision':"
     "'resolve','result':'paid once'}",
     RX_ACCEPTED, "ask-brain-11"},
    {"{'type':'brain-call-tools','timestamp':12,'calledBrainAt':11,'toolCalls':{'c3':{"
     "'name':'pay','parameters':'{}'}}}",
     RX_ACCEPTED, "request-toolkit-c3"},
    {"{'type':'toolkit-start-call','timestamp':13,'toolCallId':'c3'}", RX_ACCEPTED,
     "request-toolkit-c3"},
    {"{'type':'toolkit-call-in-doubt','timestamp':14,'toolCallId':'c3'}", RX_ACCEPTED,
     ""},
    {"{'type':'user-review-tool-call','timestamp':15,'toolCallId':'c3','decision':"
     "'approve'}",
     RX_REJECTED, ""},
    {"{'type':'user-review-tool-call','timestamp':15,'toolCallId':'c3','decision':"
     "'reject','reason':'ignored'}",
     RX_ACCEPTED, "ask-brain-15"},
    {"{'type':'brain-call-tools','timestamp':16,'calledBrainAt':15,'toolCalls':{'c4':{"
     "'name':'pay','parameters':'{}'}}}",
     RX_ACCEPTED, "request-toolkit-c4"},
    {"{'type':'toolkit-start-call','timestamp':17,'toolCallId':'c4'}", RX_ACCEPTED,
     "request-toolkit-c4"},
    {"{'type':'toolkit-call-in-doubt','timestamp':18,'toolCallId':'c4'}", RX_ACCEPTED,
     ""},
    {"{'type':'user-send-message','timestamp':19,'messageId':'m2','content':'well?'}",
     RX_ACCEPTED, "ask-brain-19"},
};

START_TEST(test_doubt_life)
{
    struct rx_state s, replay;
    struct rx_buf log;
    char *line, *save = NULL, *a, *b, *text;
    json_t *ctx;

    ck_assert_int_eq(rx_state_init(&s), 0);
    ck_assert_int_eq(rx_state_init(&replay), 0);
    rx_buf_init(&log, RX_BUF_STATE_MAX);
    ck_assert_int_eq(rx_buf_puts(&log, ""), 0);
    for (size_t i = 0; i < sizeof(life) / sizeof(life[0]); i++) {
        struct rx_input in;
        struct rx_outcome out;
        char *got;

        input_from(&in, life[i].input);
        ck_assert_int_eq(rx_machine_apply(&s, &in, &out), 0);
        ck_assert_msg(out.verdict == life[i].verdict, "step %zu: %s (%s)", i,
                      rx_verdict_name(out.verdict), rx_reason_name(out.reason));
        ck_assert(rx_state_check_invariants(&s));
        if (out.verdict == RX_ACCEPTED) {
            ck_assert_int_eq(rx_input_encode(&in, &log), 0);
            ck_assert_int_eq(rx_buf_putc(&log, '\n'), 0);
        }
        rx_input_release(&in);
        got = effect_keys(&s);
        ck_assert_msg(!strcmp(got, life[i].keys), "step %zu: got '%s', want '%s'", i, got,
                      life[i].keys);
        free(got);
    }
    ck_assert_int_eq(rx_state_find_tool(&s, "c1")->approval, RX_APPROVAL_RESOLVED);
    ck_assert_int_eq(rx_state_find_tool(&s, "c1")->started_at, 9);
    ck_assert_int_eq(rx_state_find_tool(&s, "c3")->approval, RX_APPROVAL_REJECTED);
    ck_assert_int_eq(rx_state_find_tool(&s, "c4")->approval, RX_APPROVAL_REJECTED);

    /* The brain reads the person's result and the refusals as tool results. */
    ck_assert_int_eq(rx_context_build(&s, NULL, INT64_MAX, &ctx), 0);
    text = json_dumps(ctx, JSON_COMPACT);
    ck_assert_ptr_nonnull(strstr(text, "\"content\":\"paid once\""));
    ck_assert_ptr_nonnull(strstr(text, "\"content\":\"Error: " INTERRUPTED "\""));
    free(text);
    json_decref(ctx);

    /* The log replays to the same bytes. */
    for (line = strtok_r(log.data, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        json_t *j = json_loads(line, 0, NULL);
        struct rx_input in;
        struct rx_outcome out;

        ck_assert_msg(j != NULL, "log line is not JSON: %s", line);
        ck_assert_int_eq(rx_input_parse(j, &in, NULL, NULL), 0);
        ck_assert_int_eq(rx_machine_apply(&replay, &in, &out), 0);
        ck_assert_msg(out.verdict == RX_ACCEPTED, "replay of %s: %s", line,
                      rx_reason_name(out.reason));
        rx_input_release(&in);
        json_decref(j);
    }
    a = state_bytes(&s);
    b = state_bytes(&replay);
    ck_assert_str_eq(a, b);
    free(a);
    free(b);
    rx_buf_release(&log);
    rx_state_release(&replay);
    rx_state_release(&s);
}
END_TEST

/* ---- an answer started again: "restarted" ------------------------------------ */

/* Parse `text` and apply it to `s`; the verdict, or -1 when it does not parse. */
static int apply_json_text(struct rx_state *s, const char *text, struct rx_buf *enc)
{
    json_t *j = json_loads(text, 0, NULL);
    struct rx_input in = {0};
    struct rx_outcome out;
    struct rx_error err;
    const char *field;
    int v = -1;

    ck_assert_ptr_nonnull(j);
    if (!rx_input_parse(j, &in, &field, &err)) {
        if (enc)
            ck_assert_int_eq(rx_input_encode(&in, enc), 0);
        ck_assert_int_eq(rx_machine_apply(s, &in, &out), 0);
        v = (int)out.verdict;
    }
    rx_input_release(&in);
    json_decref(j);
    return v;
}

START_TEST(test_restarted_answer)
{
    struct rx_state s, back;
    struct rx_buf b, enc;
    struct rx_error err;
    json_t *j;

    ck_assert_int_eq(rx_state_init(&s), 0);
    rx_buf_init(&b, RX_BUF_STATE_MAX);
    rx_buf_init(&enc, RX_BUF_SMALL_MAX);
    ck_assert_int_eq(apply_json_text(&s,
                                     "{\"type\":\"user-send-message\",\"timestamp\":1,"
                                     "\"messageId\":\"u1\",\"content\":\"hi\"}",
                                     NULL),
                     RX_ACCEPTED);
    ck_assert_int_eq(
        apply_json_text(&s,
                        "{\"type\":\"brain-send-message-start\",\"timestamp\":2,"
                        "\"calledBrainAt\":1,\"messageId\":\"a1\"}",
                        NULL),
        RX_ACCEPTED);
    /* Not a boolean: refused by its shape. */
    ck_assert_int_eq(
        apply_json_text(&s,
                        "{\"type\":\"brain-send-message-complete\",\"timestamp\":3,"
                        "\"calledBrainAt\":1,\"messageId\":\"a1\",\"content\":\"x\","
                        "\"restarted\":\"yes\"}",
                        NULL),
        -1);
    ck_assert_int_eq(
        apply_json_text(&s,
                        "{\"type\":\"brain-send-message-complete\",\"timestamp\":3,"
                        "\"calledBrainAt\":1,\"messageId\":\"a1\","
                        "\"content\":\"kept\\n\\nnew\",\"restarted\":true}",
                        &enc),
        RX_ACCEPTED);
    ck_assert_ptr_nonnull(strstr(enc.data, "\"restarted\":true")); /* the log keeps it */
    ck_assert(rx_state_find_assistant(&s, "a1")->restarted);
    ck_assert_int_eq(rx_state_encode(&s, &b), 0);
    ck_assert_ptr_nonnull(strstr(b.data, "\"restarted\":true"));
    /* A snapshot brings it back. */
    j = json_loadb(b.data, b.len, 0, NULL);
    ck_assert_int_eq(rx_state_decode(j, &back, &err), 0);
    ck_assert(rx_state_find_assistant(&back, "a1")->restarted);
    json_decref(j);
    rx_state_release(&back);
    rx_state_release(&s);
    rx_buf_release(&enc);
    rx_buf_release(&b);
}
END_TEST

Suite *doubt_suite(void);

Suite *doubt_suite(void)
{
    Suite *s = suite_create("doubt");
    TCase *tc = tcase_create("rules");

    tcase_add_loop_test(tc, test_doubt_rows, 0, sizeof(rows) / sizeof(rows[0]));
    tcase_add_test(tc, test_doubt_accessors);
    suite_add_tcase(s, tc);

    tc = tcase_create("effects");
    tcase_add_loop_test(tc, test_doubt_effects, 0,
                        sizeof(effect_rows) / sizeof(effect_rows[0]));
    tcase_add_test(tc, test_doubt_life);
    tcase_add_test(tc, test_restarted_answer);
    suite_add_tcase(s, tc);
    return s;
}
