/*
 * check_machine - the Reflexor transition (SPEC 3.2), one table row per rule and
 * per rejection reason: the state before (decoded from JSON), the input, the
 * verdict, and the exact encoded state after. A rejected or unchanged input
 * must leave the encoded state byte-identical.
 */
#include "tests/unit/helper_sm.h"

#include "state_machine/rx_alloc.h"

/* Inputs the parser (rightly) refuses, built by changing a parsed one. */
static void tweak_blank_content(struct rx_input *in)
{
    ck_assert_int_eq(rx_input_set_str(&in->content, " \n\t "), 0);
}

static void tweak_empty_content(struct rx_input *in)
{
    ck_assert_int_eq(rx_input_set_str(&in->content, ""), 0);
}

static void tweak_no_message_id(struct rx_input *in)
{
    rx_free(in->message_id);
    in->message_id = NULL;
}

static void tweak_no_timestamp(struct rx_input *in)
{
    in->has_timestamp = false;
    in->timestamp = 0;
}

/* Second call gets the first one's id: a duplicate inside one input. */
static void tweak_dup_call(struct rx_input *in)
{
    ck_assert_uint_eq(in->n_calls, 2);
    ck_assert_int_eq(rx_input_set_str(&in->calls[1].id, in->calls[0].id), 0);
}

/* Base states. */
#define B_USER ST(10, UM("m1", "hi", 10), "", "", 0, "", 0)
#define B_STREAM                                                                         \
    ST(2, UM("m1", "hi", 1), AM("a1", "", 2, 2, "streaming", 1), "", 1, "", 0)
#define B_TOOLS                                                                          \
    ST(4, UM("m1", "hi", 1), AM("a1", "ok", 2, 3, "complete", 1),                        \
       TC("c1", "calculator", "{\\'e\\':\\'2+3\\'}", 4, "null",                          \
          false) "," TC("c2", "clock", "{}", 4, "null", false),                          \
       1, "", 0)
#define B_ANSWERED                                                                       \
    ST(5, UM("m1", "hi", 1), "",                                                         \
       TC("c1", "calculator", "{}", 4, OKR("5", 5), false) "," TC("c2", "clock", "{}",   \
                                                                  4, "null", false),     \
       1, "", 0)
#define B_LOADED                                                                         \
    ST(7, UM("m1", "hi", 1), "",                                                         \
       TC("c1", "calculator", "{}", 4, OKR("5", 4),                                      \
          true) "," TC("c2", "clock", "{}", 5, OKR("t", 5),                              \
                       true) "," TC("c3", "clock", "{}", 6, OKR("u", 6), true),          \
       3, "old", 3)

static const struct sm_row rows[] = {
    /* ---- time irreversibility -------------------------------------------------- */
    {"stale user input", B_USER,
     "{'type':'user-send-message','timestamp':9,'messageId':'m2','content':'yo'}", NULL,
     REJ(STALE_TIMESTAMP), NULL, NULL},
    {"stale brain input", B_USER,
     "{'type':'brain-send-message-start','timestamp':3,'calledBrainAt':1,'messageId':"
     "'a1'}",
     NULL, REJ(STALE_TIMESTAMP), NULL, NULL},
    {"stale toolkit input", B_ANSWERED,
     "{'type':'toolkit-respond','timestamp':4,'toolCallId':'c2','result':'x'}", NULL,
     REJ(STALE_TIMESTAMP), NULL, NULL},
    {"stale cancel", B_STREAM, "{'type':'user-cancel','timestamp':1}", NULL,
     REJ(STALE_TIMESTAMP), NULL, NULL},
    {"equal timestamp is allowed", B_USER,
     "{'type':'user-send-message','timestamp':10,'messageId':'m2','content':'yo'}", NULL,
     ACC, NULL, ST(10, UM("m1", "hi", 10) "," UM("m2", "yo", 10), "", "", 0, "", 0)},
    {"missing timestamp", B_USER,
     "{'type':'user-send-message','timestamp':11,'messageId':'m2','content':'yo'}",
     tweak_no_timestamp, REJ(INVALID), "timestamp", NULL},

    /* ---- user-send-message ------------------------------------------------------- */
    {"user message on the initial state", S0,
     "{'type':'user-send-message','timestamp':5,'messageId':'m1','content':'hi'}", NULL,
     ACC, NULL, ST(5, UM("m1", "hi", 5), "", "", 0, "", 0)},
    {"user message appends, receivedAt = timestamp", B_USER,
     "{'type':'user-send-message','timestamp':12,'messageId':'m2','content':'yo',"
     "'extra':[1,2]}",
     NULL, ACC, NULL,
     ST(12, UM("m1", "hi", 10) "," UM("m2", "yo", 12), "", "", 0, "", 0)},
    {"user message text is escaped", S0,
     "{'type':'user-send-message','timestamp':5,'messageId':'m1','content':'say "
     "\\'x\\'\\n\\\\ \\u00e9'}",
     NULL, ACC, NULL,
     ST(5, UM("m1", "say \\'x\\'\\n\\\\ \xc3\xa9", 5), "", "", 0, "", 0)},
    {"idempotent retry: same id, same content", B_USER,
     "{'type':'user-send-message','timestamp':11,'messageId':'m1','content':'hi'}", NULL,
     UNCH, NULL, NULL},
    {"same id, other content", B_USER,
     "{'type':'user-send-message','timestamp':11,'messageId':'m1','content':'other'}",
     NULL, REJ(DUPLICATE_ID), NULL, NULL},
    {"blank content", B_USER,
     "{'type':'user-send-message','timestamp':11,'messageId':'m2','content':'x'}",
     tweak_blank_content, REJ(INVALID), "content", NULL},
    {"empty content", B_USER,
     "{'type':'user-send-message','timestamp':11,'messageId':'m2','content':'x'}",
     tweak_empty_content, REJ(INVALID), "content", NULL},
    {"missing messageId", B_USER,
     "{'type':'user-send-message','timestamp':11,'content':'yo'}", NULL, REJ(INVALID),
     "messageId", NULL},

    /* ---- user-cancel ------------------------------------------------------------- */
    {"cancel stops a streaming message with the partial text", B_STREAM,
     "{'type':'user-cancel','timestamp':3,'partialContents':{'a1':'Hel','zz':'no'}}",
     NULL, ACC, NULL,
     ST(3, UM("m1", "hi", 1), AM("a1", "Hel", 2, 3, "stopped", 1), "", 3, "", 0)},
    {"cancel without partial keeps the text", B_STREAM,
     "{'type':'user-cancel','timestamp':3}", NULL, ACC, NULL,
     ST(3, UM("m1", "hi", 1), AM("a1", "", 2, 3, "stopped", 1), "", 3, "", 0)},
    {"cancel answers pending tools with 'cancelled'", B_ANSWERED,
     "{'type':'user-cancel','timestamp':6}", NULL, ACC, NULL,
     ST(6, UM("m1", "hi", 1), "",
        TC("c1", "calculator", "{}", 4, OKR("5", 5),
           false) "," TC("c2", "clock", "{}", 4, ERRR("cancelled", 6), false),
        6, "", 0)},
    {"cancel with nothing running", B_USER, "{'type':'user-cancel','timestamp':10}", NULL,
     ACC, NULL, ST(10, UM("m1", "hi", 10), "", "", 10, "", 0)},
    {"cancel leaves complete messages alone", B_TOOLS,
     "{'type':'user-cancel','timestamp':9,'partialContents':{'a1':'x'}}", NULL, ACC, NULL,
     ST(9, UM("m1", "hi", 1), AM("a1", "ok", 2, 3, "complete", 1),
        TC("c1", "calculator", "{\\'e\\':\\'2+3\\'}", 4, ERRR("cancelled", 9),
           false) "," TC("c2", "clock", "{}", 4, ERRR("cancelled", 9), false),
        9, "", 0)},

    /* ---- brain-send-message-start ------------------------------------------------ */
    {"start appends a streaming message", B_USER,
     "{'type':'brain-send-message-start','timestamp':11,'calledBrainAt':10,'messageId':"
     "'a1'}",
     NULL, ACC, NULL,
     ST(11, UM("m1", "hi", 10), AM("a1", "", 11, 11, "streaming", 10), "", 10, "", 0)},
    {"start never moves calledBrainAt backwards",
     ST(20, UM("m1", "hi", 10), "", "", 15, "", 0),
     "{'type':'brain-send-message-start','timestamp':21,'calledBrainAt':10,'messageId':"
     "'a1'}",
     NULL, ACC, NULL,
     ST(21, UM("m1", "hi", 10), AM("a1", "", 21, 21, "streaming", 10), "", 15, "", 0)},
    {"start with a duplicate id", B_STREAM,
     "{'type':'brain-send-message-start','timestamp':3,'calledBrainAt':1,'messageId':"
     "'a1'}",
     NULL, REJ(DUPLICATE_ID), NULL, NULL},
    {"start without messageId", B_USER,
     "{'type':'brain-send-message-start','timestamp':11,'calledBrainAt':10,'messageId':"
     "'a1'}",
     tweak_no_message_id, REJ(INVALID), "messageId", NULL},

    /* ---- brain-send-message-complete --------------------------------------------- */
    {"complete a streaming message", B_STREAM,
     "{'type':'brain-send-message-complete','timestamp':3,'calledBrainAt':1,"
     "'messageId':'a1','content':'Hello'}",
     NULL, ACC, NULL,
     ST(3, UM("m1", "hi", 1), AM("a1", "Hello", 2, 3, "complete", 1), "", 1, "", 0)},
    {"complete an unknown id appends", B_USER,
     "{'type':'brain-send-message-complete','timestamp':11,'calledBrainAt':10,"
     "'messageId':'a9','content':'Hi'}",
     NULL, ACC, NULL,
     ST(11, UM("m1", "hi", 10), AM("a9", "Hi", 11, 11, "complete", 10), "", 10, "", 0)},
    {"complete a complete message", B_TOOLS,
     "{'type':'brain-send-message-complete','timestamp':5,'calledBrainAt':1,"
     "'messageId':'a1','content':'again'}",
     NULL, REJ(NOT_STREAMING), NULL, NULL},
    {"complete a stopped message",
     ST(3, UM("m1", "hi", 1), AM("a1", "Hel", 2, 3, "stopped", 1), "", 3, "", 0),
     "{'type':'brain-send-message-complete','timestamp':4,'calledBrainAt':1,"
     "'messageId':'a1','content':'Hello'}",
     NULL, REJ(NOT_STREAMING), NULL, NULL},

    /* ---- brain-call-tools -------------------------------------------------------- */
    {"call tools appends pending records in document order", B_USER,
     "{'type':'brain-call-tools','timestamp':12,'calledBrainAt':10,'toolCalls':{"
     "'c2':{'name':'clock','parameters':'{}'},"
     "'c1':{'name':'calculator','parameters':'{\\'e\\':\\'2+3\\'}'}}}",
     NULL, ACC, NULL,
     ST(12, UM("m1", "hi", 10), "",
        TC("c2", "clock", "{}", 12, "null",
           false) "," TC("c1", "calculator", "{\\'e\\':\\'2+3\\'}", 12, "null", false),
        10, "", 0)},
    {"call tools with an existing id rejects the whole input", B_TOOLS,
     "{'type':'brain-call-tools','timestamp':5,'calledBrainAt':4,'toolCalls':{"
     "'c3':{'name':'clock','parameters':'{}'},'c1':{'name':'clock','parameters':'{}'}}}",
     NULL, REJ(DUPLICATE_ID), NULL, NULL},
    {"call tools with a duplicate inside the input", B_USER,
     "{'type':'brain-call-tools','timestamp':12,'calledBrainAt':10,'toolCalls':{"
     "'c1':{'name':'clock','parameters':'{}'},'c2':{'name':'clock','parameters':'{}'}}}",
     tweak_dup_call, REJ(DUPLICATE_ID), NULL, NULL},

    /* ---- brain-compress-history -------------------------------------------------- */
    {"compress unloads records at or before cutAt", B_LOADED,
     "{'type':'brain-compress-history','timestamp':8,'calledBrainAt':7,'summary':'S',"
     "'cutAt':5}",
     NULL, ACC, NULL,
     ST(8, UM("m1", "hi", 1), "",
        TC("c1", "calculator", "{}", 4, OKR("5", 4),
           false) "," TC("c2", "clock", "{}", 5, OKR("t", 5),
                         false) "," TC("c3", "clock", "{}", 6, OKR("u", 6), true),
        7, "S", 5)},
    {"compress with the same cutAt is allowed", B_LOADED,
     "{'type':'brain-compress-history','timestamp':8,'calledBrainAt':2,'summary':'S2',"
     "'cutAt':3}",
     NULL, ACC, NULL,
     ST(8, UM("m1", "hi", 1), "",
        TC("c1", "calculator", "{}", 4, OKR("5", 4),
           true) "," TC("c2", "clock", "{}", 5, OKR("t", 5),
                        true) "," TC("c3", "clock", "{}", 6, OKR("u", 6), true),
        3, "S2", 3)},
    {"compress up to the input's own time", B_LOADED,
     "{'type':'brain-compress-history','timestamp':9,'calledBrainAt':7,'summary':'all',"
     "'cutAt':9}",
     NULL, ACC, NULL,
     ST(9, UM("m1", "hi", 1), "",
        TC("c1", "calculator", "{}", 4, OKR("5", 4),
           false) "," TC("c2", "clock", "{}", 5, OKR("t", 5),
                         false) "," TC("c3", "clock", "{}", 6, OKR("u", 6), false),
        7, "all", 9)},
    {"compress cutAt backwards", B_LOADED,
     "{'type':'brain-compress-history','timestamp':8,'calledBrainAt':7,'summary':'S',"
     "'cutAt':2}",
     NULL, REJ(CUT_BACKWARDS), NULL, NULL},
    {"compress cutAt in the future", B_LOADED,
     "{'type':'brain-compress-history','timestamp':8,'calledBrainAt':7,'summary':'S',"
     "'cutAt':9}",
     NULL, REJ(CUT_IN_FUTURE), NULL, NULL},

    /* ---- brain-load-tool-call ---------------------------------------------------- */
    {"load a tool call",
     ST(8, UM("m1", "hi", 1), "", TC("c1", "calculator", "{}", 4, OKR("5", 4), false), 3,
        "S", 5),
     "{'type':'brain-load-tool-call','timestamp':9,'calledBrainAt':8,'toolCallId':'c1'}",
     NULL, ACC, NULL,
     ST(9, UM("m1", "hi", 1), "", TC("c1", "calculator", "{}", 4, OKR("5", 4), true), 8,
        "S", 5)},
    {"load an unknown id", B_LOADED,
     "{'type':'brain-load-tool-call','timestamp':9,'calledBrainAt':8,'toolCallId':'c9'}",
     NULL, REJ(UNKNOWN_ID), NULL, NULL},
    {"load a loaded call changes nothing", B_LOADED,
     "{'type':'brain-load-tool-call','timestamp':9,'calledBrainAt':8,'toolCallId':'c1'}",
     NULL, UNCH, NULL, NULL},

    /* ---- toolkit-respond / toolkit-error ----------------------------------------- */
    {"respond answers a pending call", B_TOOLS,
     "{'type':'toolkit-respond','timestamp':5,'toolCallId':'c1','result':'5'}", NULL, ACC,
     NULL,
     ST(5, UM("m1", "hi", 1), AM("a1", "ok", 2, 3, "complete", 1),
        TC("c1", "calculator", "{\\'e\\':\\'2+3\\'}", 4, OKR("5", 5),
           false) "," TC("c2", "clock", "{}", 4, "null", false),
        1, "", 0)},
    {"error answers a pending call", B_TOOLS,
     "{'type':'toolkit-error','timestamp':6,'toolCallId':'c2','error':'boom'}", NULL, ACC,
     NULL,
     ST(6, UM("m1", "hi", 1), AM("a1", "ok", 2, 3, "complete", 1),
        TC("c1", "calculator", "{\\'e\\':\\'2+3\\'}", 4, "null",
           false) "," TC("c2", "clock", "{}", 4, ERRR("boom", 6), false),
        1, "", 0)},
    {"respond to an unknown id", B_TOOLS,
     "{'type':'toolkit-respond','timestamp':5,'toolCallId':'c9','result':'5'}", NULL,
     REJ(UNKNOWN_ID), NULL, NULL},
    {"error for an unknown id", B_TOOLS,
     "{'type':'toolkit-error','timestamp':5,'toolCallId':'c9','error':'x'}", NULL,
     REJ(UNKNOWN_ID), NULL, NULL},
    {"second respond: the first answer wins", B_ANSWERED,
     "{'type':'toolkit-respond','timestamp':6,'toolCallId':'c1','result':'6'}", NULL,
     REJ(ALREADY_ANSWERED), NULL, NULL},
    {"error after respond", B_ANSWERED,
     "{'type':'toolkit-error','timestamp':6,'toolCallId':'c1','error':'late'}", NULL,
     REJ(ALREADY_ANSWERED), NULL, NULL},
    {"respond after cancel",
     ST(6, UM("m1", "hi", 1), "", TC("c1", "clock", "{}", 4, ERRR("cancelled", 6), false),
        6, "", 0),
     "{'type':'toolkit-respond','timestamp':7,'toolCallId':'c1','result':'late'}", NULL,
     REJ(ALREADY_ANSWERED), NULL, NULL},
};

START_TEST(test_transition)
{
    sm_row_check(&rows[_i]);
}
END_TEST

/* The outcome says what changed, so the server can publish without diffing. */
START_TEST(test_outcome_changed)
{
    struct rx_state s;
    struct rx_input in;
    struct rx_outcome out;

    state_from(&s, B_USER);
    input_from(&in, "{'type':'user-send-message','timestamp':11,'messageId':'m2',"
                    "'content':'yo'}");
    ck_assert_int_eq(rx_machine_apply(&s, &in, &out), 0);
    ck_assert_int_eq(out.verdict, RX_ACCEPTED);
    ck_assert(out.changed & RX_CHANGED_USER);
    ck_assert_uint_eq(out.index, 1);
    rx_input_release(&in);

    input_from(&in, "{'type':'brain-send-message-start','timestamp':12,"
                    "'calledBrainAt':11,'messageId':'a1'}");
    ck_assert_int_eq(rx_machine_apply(&s, &in, &out), 0);
    ck_assert(out.changed & RX_CHANGED_ASSISTANT);
    ck_assert(out.changed & RX_CHANGED_CALLED_BRAIN);
    ck_assert_uint_eq(out.index, 0);
    rx_input_release(&in);

    input_from(&in, "{'type':'user-send-message','timestamp':13,'messageId':'m2',"
                    "'content':'yo'}");
    ck_assert_int_eq(rx_machine_apply(&s, &in, &out), 0);
    ck_assert_int_eq(out.verdict, RX_UNCHANGED);
    ck_assert_uint_eq(out.changed, 0);
    rx_input_release(&in);
    rx_state_release(&s);
}
END_TEST

/* ---- rx_input_parse: shapes, with the offending field named ------------------- */

struct parse_row {
    const char *input;
    const char *field; /* NULL: parses */
};

static const struct parse_row parse_rows[] = {
    {"{'type':'user-send-message','timestamp':1,'messageId':'m','content':5}", "content"},
    {"{'type':'user-send-message','timestamp':1,'messageId':'m'}", "content"},
    {"{'type':'user-send-message','timestamp':1,'messageId':'m','content':' \\n'}",
     "content"},
    {"{'type':'user-send-message','timestamp':1,'messageId':5,'content':'x'}",
     "messageId"},
    {"{'type':'user-send-message','timestamp':1,'messageId':'','content':'x'}",
     "messageId"},
    {"{'type':'user-send-message','timestamp':1,'content':'x'}", NULL},
    {"{'type':'user-send-message','content':'x','messageId':'m'}", NULL},
    {"{'type':'user-send-message','timestamp':1,'messageId':'m','content':'x','who':"
     "{'a':[1]},'n':null}",
     NULL},
    {"{'type':'user-send-message','timestamp':'1','messageId':'m','content':'x'}",
     "timestamp"},
    {"{'type':'user-send-message','timestamp':-1,'messageId':'m','content':'x'}",
     "timestamp"},
    {"{'type':'user-send-message','timestamp':1.5,'messageId':'m','content':'x'}",
     "timestamp"},
    {"{'type':'nope','timestamp':1}", "type"},
    {"{'timestamp':1}", "type"},
    {"{'type':5,'timestamp':1}", "type"},
    {"{'type':'user-cancel','timestamp':1}", NULL},
    {"{'type':'user-cancel','timestamp':1,'partialContents':{'a1':'x'}}", NULL},
    {"{'type':'user-cancel','timestamp':1,'partialContents':5}", "partialContents"},
    {"{'type':'user-cancel','timestamp':1,'partialContents':{'a1':5}}",
     "partialContents"},
    {"{'type':'brain-send-message-start','timestamp':1,'calledBrainAt':1,'messageId':'a'"
     "}",
     NULL},
    {"{'type':'brain-send-message-start','timestamp':1,'messageId':'a'}",
     "calledBrainAt"},
    {"{'type':'brain-send-message-start','timestamp':1,'calledBrainAt':'x','messageId':"
     "'a'}",
     "calledBrainAt"},
    {"{'type':'brain-send-message-start','timestamp':1,'calledBrainAt':1}", "messageId"},
    {"{'type':'brain-send-message-complete','timestamp':1,'calledBrainAt':1,'messageId':"
     "'a','content':''}",
     NULL},
    {"{'type':'brain-send-message-complete','timestamp':1,'calledBrainAt':1,'messageId':"
     "'a','content':[]}",
     "content"},
    {"{'type':'brain-call-tools','timestamp':1,'calledBrainAt':1,'toolCalls':[]}",
     "toolCalls"},
    {"{'type':'brain-call-tools','timestamp':1,'calledBrainAt':1,'toolCalls':{}}",
     "toolCalls"},
    {"{'type':'brain-call-tools','timestamp':1,'calledBrainAt':1,'toolCalls':{'c':5}}",
     "toolCalls"},
    {"{'type':'brain-call-tools','timestamp':1,'calledBrainAt':1,'toolCalls':{'c':{"
     "'name':5,'parameters':'{}'}}}",
     "toolCalls"},
    {"{'type':'brain-call-tools','timestamp':1,'calledBrainAt':1,'toolCalls':{'c':{"
     "'name':'n','parameters':5}}}",
     "toolCalls"},
    {"{'type':'brain-compress-history','timestamp':1,'calledBrainAt':1,'summary':5,"
     "'cutAt':1}",
     "summary"},
    {"{'type':'brain-compress-history','timestamp':1,'calledBrainAt':1,'summary':'s'}",
     "cutAt"},
    {"{'type':'brain-load-tool-call','timestamp':1,'calledBrainAt':1}", "toolCallId"},
    {"{'type':'toolkit-respond','timestamp':1,'toolCallId':'c','result':5}", "result"},
    {"{'type':'toolkit-respond','timestamp':1,'result':'5'}", "toolCallId"},
    {"{'type':'toolkit-error','timestamp':1,'toolCallId':'c'}", "error"},
    {"{'type':'toolkit-error','timestamp':1,'toolCallId':'c','error':'e'}", NULL},
};

START_TEST(test_parse)
{
    const struct parse_row *r = &parse_rows[_i];
    json_t *j = qjson(r->input);
    struct rx_input in;
    const char *field = "unset";
    struct rx_error err = {""};
    int rc = rx_input_parse(j, &in, &field, &err);

    if (!r->field) {
        ck_assert_msg(rc == 0, "%s: %d field %s (%s)", r->input, rc, field ? field : "-",
                      err.text);
        rx_input_release(&in);
    } else {
        ck_assert_msg(rc == -EINVAL, "%s: rc %d", r->input, rc);
        ck_assert_ptr_nonnull(field);
        ck_assert_msg(!strncmp(field, r->field, strlen(r->field)),
                      "%s: field '%s', want '%s'", r->input, field, r->field);
        ck_assert_msg(strstr(err.text, r->field) != NULL,
                      "%s: message '%s' does not name '%s'", r->input, err.text,
                      r->field);
    }
    json_decref(j);
}
END_TEST

START_TEST(test_parse_fields)
{
    struct rx_input in;

    input_from(&in, "{'type':'user-send-message','messageId':'m','content':'x'}");
    ck_assert(!in.has_timestamp);
    ck_assert_int_eq(in.type, RX_IN_USER_SEND_MESSAGE);
    rx_input_release(&in);

    input_from(&in, "{'type':'brain-call-tools','timestamp':7,'calledBrainAt':3,"
                    "'toolCalls':{'z':{'name':'b','parameters':'1'},"
                    "'a':{'name':'c','parameters':'2'}}}");
    ck_assert(in.has_timestamp);
    ck_assert_int_eq(in.timestamp, 7);
    ck_assert_int_eq(in.called_brain_at, 3);
    ck_assert_uint_eq(in.n_calls, 2);
    ck_assert_str_eq(in.calls[0].id, "z"); /* document order */
    ck_assert_str_eq(in.calls[1].id, "a");
    ck_assert_str_eq(in.calls[1].parameters, "2");
    rx_input_release(&in);

    ck_assert_int_eq(rx_input_parse(json_null(), &in, NULL, NULL), -EINVAL);
}
END_TEST

/* encode -> parse -> encode gives the same bytes, for every input type. */
static const char *const encode_rows[] = {
    "{'type':'user-send-message','timestamp':1,'messageId':'m','content':'a\\'"
    "b\\n\\u00e9'}",
    "{'type':'user-cancel','timestamp':2}",
    "{'type':'user-cancel','timestamp':2,'partialContents':{'a1':'x','a2':''}}",
    "{'type':'brain-send-message-start','timestamp':3,'calledBrainAt':1,'messageId':'a'}",
    "{'type':'brain-send-message-complete','timestamp':4,'calledBrainAt':1,'messageId':"
    "'a','content':'done'}",
    "{'type':'brain-call-tools','timestamp':5,'calledBrainAt':1,'toolCalls':{'c2':{'name'"
    ":"
    "'clock','parameters':'{}'},'c1':{'name':'calculator','parameters':'{\\'e\\':1}'}}}",
    "{'type':'brain-compress-history','timestamp':6,'calledBrainAt':1,'summary':'s',"
    "'cutAt':5}",
    "{'type':'brain-load-tool-call','timestamp':7,'calledBrainAt':1,'toolCallId':'c1'}",
    "{'type':'toolkit-respond','timestamp':8,'toolCallId':'c1','result':'5'}",
    "{'type':'toolkit-error','timestamp':9,'toolCallId':'c2','error':'no'}",
};

START_TEST(test_input_encode)
{
    struct rx_input in, back, copy;
    struct rx_buf b1, b2, b3;
    json_t *j, *orig = qjson(encode_rows[_i]);

    input_from(&in, encode_rows[_i]);
    rx_buf_init(&b1, RX_BUF_SMALL_MAX);
    rx_buf_init(&b2, RX_BUF_SMALL_MAX);
    rx_buf_init(&b3, RX_BUF_SMALL_MAX);
    ck_assert_int_eq(rx_input_encode(&in, &b1), 0);
    j = json_loads(b1.data, 0, NULL);
    ck_assert_msg(j != NULL, "not JSON: %s", b1.data);
    /* The encoding says what the input said. */
    ck_assert_msg(json_equal(j, orig), "%s\nencoded as %s", encode_rows[_i], b1.data);
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
    json_decref(orig);
    rx_buf_release(&b1);
    rx_buf_release(&b2);
    rx_buf_release(&b3);
}
END_TEST

/* The server copies the streamed text into a user-cancel before applying it. */
START_TEST(test_add_partial)
{
    struct rx_input in;
    struct rx_state s;
    struct rx_outcome out;

    state_from(&s, B_STREAM);
    input_from(&in, "{'type':'user-cancel','timestamp':3}");
    ck_assert_int_eq(rx_input_add_partial(&in, "zz", "other"), 0);
    ck_assert_int_eq(rx_input_add_partial(&in, "a1", "Hel"), 0);
    ck_assert_uint_eq(in.n_calls, 2);
    ck_assert_int_eq(rx_machine_apply(&s, &in, &out), 0);
    ck_assert_int_eq(out.verdict, RX_ACCEPTED);
    ck_assert_state(
        &s, ST(3, UM("m1", "hi", 1), AM("a1", "Hel", 2, 3, "stopped", 1), "", 3, "", 0));
    rx_input_release(&in);
    rx_state_release(&s);
}
END_TEST

/* A whole conversation through the machine, checked against golden files. */
static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    long n;

    ck_assert_msg(f != NULL, "cannot open '%s' (run from the repository root)", path);
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    n = ftell(f);
    ck_assert_int_ge(n, 0);
    rewind(f);
    buf = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static const char *const golden_cases[] = {"conversation", "cancel", "compress",
                                           "approval", "settings"};

START_TEST(test_golden)
{
    char path[256], *inputs, *line, *save = NULL, *want_state, *got;
    struct rx_state s;
    json_t *want_ctx, *ctx;
    char *want_fx, *got_fx;
    int n = 0;

    snprintf(path, sizeof(path), "tests/data/machine/%s/inputs.jsonl", golden_cases[_i]);
    inputs = read_file(path);
    ck_assert_int_eq(rx_state_init(&s), 0);
    for (line = strtok_r(inputs, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        json_error_t e;
        json_t *j = json_loads(line, 0, &e);
        struct rx_input in;
        struct rx_outcome out;
        const char *field;
        const char *expect;

        ck_assert_msg(j != NULL, "%s line %d: %s", path, n + 1, e.text);
        /* "expect" (a test-only field, ignored by the parser) names the verdict. */
        expect = json_string_value(json_object_get(j, "expect"));
        ck_assert_int_eq(rx_input_parse(j, &in, &field, NULL), 0);
        ck_assert_int_eq(rx_machine_apply(&s, &in, &out), 0);
        ck_assert_msg(!strcmp(rx_verdict_name(out.verdict), expect ? expect : "accepted"),
                      "%s line %d: %s (%s)", path, n + 1, rx_verdict_name(out.verdict),
                      rx_reason_name(out.reason));
        ck_assert(rx_state_check_invariants(&s));
        rx_input_release(&in);
        json_decref(j);
        n++;
    }
    ck_assert_int_gt(n, 0);

    snprintf(path, sizeof(path), "tests/data/machine/%s/state.json", golden_cases[_i]);
    want_state = read_file(path);
    want_state[strcspn(want_state, "\n")] = '\0';
    got = state_bytes(&s);
    ck_assert_str_eq(got, want_state);

    snprintf(path, sizeof(path), "tests/data/machine/%s/effects.txt", golden_cases[_i]);
    want_fx = read_file(path);
    want_fx[strcspn(want_fx, "\n")] = '\0';
    got_fx = effect_keys(&s);
    ck_assert_str_eq(got_fx, want_fx);

    snprintf(path, sizeof(path), "tests/data/machine/%s/context.json", golden_cases[_i]);
    want_ctx = json_load_file(path, 0, NULL);
    ck_assert_ptr_nonnull(want_ctx);
    ck_assert_int_eq(rx_context_build(&s, "You are Reflexor.", INT64_MAX, &ctx), 0);
    if (!json_equal(ctx, want_ctx)) {
        char *g = json_dumps(ctx, JSON_INDENT(1) | JSON_PRESERVE_ORDER);

        ck_abort_msg("%s: context differs, got\n%s", path, g);
    }
    json_decref(ctx);
    json_decref(want_ctx);
    free(want_fx);
    free(got_fx);
    free(got);
    free(want_state);
    free(inputs);
    rx_state_release(&s);
}
END_TEST

Suite *machine_suite(void);

Suite *machine_suite(void)
{
    Suite *s = suite_create("machine");
    TCase *tc = tcase_create("rules");

    tcase_add_loop_test(tc, test_transition, 0, sizeof(rows) / sizeof(rows[0]));
    tcase_add_test(tc, test_outcome_changed);
    suite_add_tcase(s, tc);

    tc = tcase_create("parse");
    tcase_add_loop_test(tc, test_parse, 0, sizeof(parse_rows) / sizeof(parse_rows[0]));
    tcase_add_test(tc, test_parse_fields);
    tcase_add_loop_test(tc, test_input_encode, 0,
                        sizeof(encode_rows) / sizeof(encode_rows[0]));
    tcase_add_test(tc, test_add_partial);
    suite_add_tcase(s, tc);

    tc = tcase_create("golden");
    tcase_add_loop_test(tc, test_golden, 0,
                        sizeof(golden_cases) / sizeof(golden_cases[0]));
    suite_add_tcase(s, tc);
    return s;
}
