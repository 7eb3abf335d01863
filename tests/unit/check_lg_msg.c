/*
 * check_lg_msg - the LangGraph protocol's view of a session (server/protocols/lg_msg):
 * a state as LangChain messages (order, each kind's exact shape, streaming
 * answers left out, a stopped one marked), the interrupt in agent-chat-ui's
 * shape, token chunks (escaping, reasoning), a run's input (every accepted
 * message form, every refusal) and command.resume (every decision shape,
 * every refusal) as machine inputs. States are written as in the machine's
 * tests (helper_sm.h); expected JSON is compared as values (json_equal).
 */
#include "tests/unit/helper_sm.h"

#include "server/protocols/lg_msg.h"

Suite *lg_msg_suite(void);

/* `got` (stolen) must equal the single-quoted JSON `want`. */
static void ck_json(json_t *got, const char *want)
{
    json_t *w = qjson(want);
    char *g = got ? json_dumps(got, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    char *ws = json_dumps(w, JSON_COMPACT | JSON_SORT_KEYS);

    ck_assert_msg(got && json_equal(got, w), "got  %s\nwant %s", g ? g : "NULL", ws);
    free(g);
    free(ws);
    json_decref(w);
    json_decref(got);
}

#define BASE "'additional_kwargs':{},'name':null,'example':false"
#define HUMAN(id, text)                                                                  \
    "{'type':'human','content':'" text "','id':'" id "','response_metadata':{}," BASE "}"
#define AI_FIELDS "'invalid_tool_calls':[],'usage_metadata':null"
#define AI(id, text, status, finish)                                                     \
    "{'type':'ai','content':'" text "','id':'" id                                        \
    "','response_metadata':{'status':'" status "'" finish "},'tool_calls':[]," AI_FIELDS \
    "," BASE "}"
#define TOOL(id, name, text, status)                                                     \
    "{'type':'tool','content':'" text "','id':'tool-result-" id "','tool_call_id':'" id  \
    "','name':'" name "','status':'" status "','artifact':null,'response_metadata':{},"  \
    "'additional_kwargs':{}}"

/* A conversation with every kind of record. */
#define CONVERSATION                                                                     \
    ST(9, UM("u1", "hi", 1) "," UM("u2", "more", 6),                                     \
       AM("a1", "hello", 2, 2, "complete",                                               \
          1) "," AM("a2", "done", 5, 5, "complete",                                      \
                    4) "," AM("a3", "par", 7, 8, "stopped", 6) "," AM("a4", "", 9, 9,    \
                                                                      "streaming", 6),   \
       TC("c1", "calculator", "{\\'expression\\':\\'6*7\\'}", 3, OKR("42", 4),           \
          true) "," TC("c2", "clock", "[1]", 3, ERRR("boom", 4), true),                  \
       6, "", 0)

START_TEST(messages_in_order)
{
    struct rx_state st;

    state_from(&st, CONVERSATION);
    ck_json(
        lg_msg_messages(&st),
        "[" HUMAN("u1", "hi") "," AI(
            "a1", "hello", "complete",
            ",'finish_reason':'stop'") ",{'type':'ai','content':'','id':'ai-tools-c1','"
                                       "response_metadata':"
                                       "{'finish_reason':'tool_calls'},'tool_calls':[{'"
                                       "name':'calculator','args':"
                                       "{'expression':'6*7'},'id':'c1','type':'tool_call'"
                                       "}],'invalid_tool_calls':"
                                       "[{'name':'clock','args':'[1]','id':'c2','error':'"
                                       "the arguments are not a JSON "
                                       "object','type':'invalid_tool_call'}],'usage_"
                                       "metadata':null," BASE
                                       "}," TOOL("c1", "calculator", "42", "success") "," TOOL(
                                           "c2", "clock", "Error: boom",
                                           "error") "," AI("a2", "done", "complete",
                                                           ",'finish_"
                                                           "reason':'"
                                                           "stop'") "," HUMAN("u2",
                                                                              "more") "," AI("a3",
                                                                                             "par",
                                                                                             "stopped",
                                                                                             "") "]");
    ck_json(lg_msg_interrupts(&st), "[]");
    rx_state_release(&st);
}
END_TEST

START_TEST(usage_and_reasoning)
{
    struct rx_state st;
    json_t *m;

    state_from(&st, ST(3, UM("u1", "hi", 1),
                       AMX("a1", "ok", 2, 3, "complete", 1,
                           ",'usage':{'promptTokens':5,'completionTokens':2},"
                           "'reasoning':'hmm'"),
                       "", 1, "", 0));
    m = lg_msg_messages(&st);
    ck_json(json_incref(json_object_get(json_array_get(m, 1), "usage_metadata")),
            "{'input_tokens':5,'output_tokens':2,'total_tokens':7}");
    ck_json(json_incref(json_object_get(json_array_get(m, 1), "additional_kwargs")),
            "{'reasoning_content':'hmm'}");
    json_decref(m);
    rx_state_release(&st);
}
END_TEST

/* c1 and c2 (one batch) await a person, c3 runs; c4 was approved earlier. */
#define AWAITING                                                                         \
    ST(5, UM("u1", "go", 1), "",                                                         \
       TCA("c4", "shell", "{}", 2, OKR("ok", 3), true, "approved") "," TCA(              \
           "c1", "calculator", "{\\'expression\\':\\'1+1\\'}", 4, "null", true,          \
           "pending") "," TCA("c2", "calculator", "broken", 4, "null", true,             \
                              "pending") "," TC("c3", "clock", "{}", 4, "null", true),   \
       1, "", 0)

#define INTERRUPT                                                                        \
    "{'value':{'action_requests':[{'name':'calculator','args':{'expression':'1+1'},"     \
    "'description':'Tool execution requires approval\\n\\nTool: calculator\\nArgs: "     \
    "{\\'expression\\':\\'1+1\\'}'},{'name':'calculator','args':{},'description':'Tool " \
    "execution requires approval\\n\\nTool: calculator\\nArgs: broken'}],"               \
    "'review_configs':[{'action_name':'calculator','allowed_decisions':['approve',"      \
    "'edit','reject']}]},'id':'interrupt-c1'}"

START_TEST(interrupt_shape)
{
    struct rx_state st;
    char *task = NULL;
    json_t *v;

    state_from(&st, AWAITING);
    ck_json(lg_msg_interrupts(&st), "[" INTERRUPT "]");
    ck_assert_int_eq(lg_msg_task_id(&st, &task), 0);
    ck_assert_str_eq(task, "task-c1");
    free(task);
    v = lg_msg_values(&st, true);
    ck_json(json_incref(json_object_get(v, "__interrupt__")), "[" INTERRUPT "]");
    json_decref(v);
    v = lg_msg_values(&st, false);
    ck_assert_ptr_null(json_object_get(v, "__interrupt__"));
    /* Pending calls show in the batch, with no tool message yet. */
    ck_assert_int_eq(json_array_size(json_object_get(v, "messages")), 4);
    json_decref(v);
    rx_state_release(&st);

    state_from(&st, CONVERSATION);
    ck_assert_int_eq(lg_msg_task_id(&st, &task), 0);
    ck_assert_ptr_null(task);
    v = lg_msg_values(&st, true);
    ck_assert_ptr_null(json_object_get(v, "__interrupt__"));
    json_decref(v);
    rx_state_release(&st);
}
END_TEST

static void chunk_is(const char *mid, const char *delta, bool reasoning, const char *want)
{
    struct rx_buf b;
    json_t *j;

    rx_buf_init(&b, RX_BUF_SMALL_MAX);
    ck_assert_int_eq(rx_buf_puts(&b, "x"), 0);
    ck_assert_int_eq(lg_msg_chunk_encode(&b, mid, delta, reasoning), 0);
    ck_assert_int_eq(b.data[0], 'x');
    j = json_loads(b.data + 1, 0, NULL);
    ck_json(j, want);
    rx_buf_release(&b);
}

START_TEST(chunks)
{
    struct rx_buf b;

    chunk_is(
        "m1", "He said \"hi\"\n", false,
        "{'content':'He said \\'hi\\'\\n','additional_kwargs':{},'response_metadata':{},"
        "'type':'AIMessageChunk','name':null,'id':'m1','example':false,'tool_calls':[],"
        "'invalid_tool_calls':[],'usage_metadata':null,'tool_call_chunks':[]}");
    chunk_is("m1", "thinking", true,
             "{'content':'','additional_kwargs':{'reasoning_content':'thinking'},"
             "'response_metadata':{},'type':'AIMessageChunk','name':null,'id':'m1',"
             "'example':false,'tool_calls':[],'invalid_tool_calls':[],"
             "'usage_metadata':null,'tool_call_chunks':[]}");
    /* Past the bound: nothing is appended. */
    rx_buf_init(&b, 40);
    ck_assert_int_eq(rx_buf_puts(&b, "kept"), 0);
    ck_assert_int_eq(
        lg_msg_chunk_encode(&b, "m1", "a long delta that will not fit", false), -E2BIG);
    ck_assert_str_eq(b.data, "kept");
    rx_buf_release(&b);
}
END_TEST

START_TEST(iso_times)
{
    char s[LG_ISO_LEN];

    lg_msg_iso(0, s);
    ck_assert_str_eq(s, "1970-01-01T00:00:00.000Z");
    lg_msg_iso(1700000000123, s);
    ck_assert_str_eq(s, "2023-11-14T22:13:20.123Z");
    lg_msg_iso(-5, s);
    ck_assert_str_eq(s, "1970-01-01T00:00:00.000Z");
}
END_TEST

/* ---- inputs -------------------------------------------------------------------- */

static const struct input_case {
    const char *input; /* single-quoted JSON */
    int rc;
    const char *text, *id;
} input_cases[] = {
    {"{'messages':[{'type':'human','content':'hi'}]}", 0, "hi", NULL},
    {"{'messages':[{'role':'user','content':'hi','id':'m-1'}]}", 0, "hi", "m-1"},
    {"{'messages':['plain text']}", 0, "plain text", NULL},
    {"{'messages':[['human','a pair']]}", 0, "a pair", NULL},
    {"{'messages':[{'type':'human','content':[{'type':'text','text':'a'},'b',"
     "{'type':'text','text':'c'}]}]}",
     0, "abc", NULL},
    /* Earlier messages are the client's copy; only the last is posted. */
    {"{'messages':[{'type':'ai','content':'x'},{'type':'system','content':'s'},"
     "{'type':'human','content':'last'}]}",
     0, "last", NULL},
    /* An id the machine could not take is dropped (the server makes one). */
    {"{'messages':[{'type':'human','content':'hi','id':'has space'}]}", 0, "hi", NULL},
    {"{'messages':[{'type':'human','content':'hi','id':7}]}", 0, "hi", NULL},
    {"['hi']", -EINVAL, NULL, NULL},
    {"{}", -EINVAL, NULL, NULL},
    {"{'messages':'hi'}", -EINVAL, NULL, NULL},
    {"{'messages':[]}", -EINVAL, NULL, NULL},
    {"{'messages':[{'type':'ai','content':'not mine'}]}", -EINVAL, NULL, NULL},
    {"{'messages':[{'role':'wizard','content':'x'}]}", -EINVAL, NULL, NULL},
    {"{'messages':[{'content':'no role'}]}", -EINVAL, NULL, NULL},
    {"{'messages':[{'type':'human','content':'x'},{'type':42}]}", -EINVAL, NULL, NULL},
    {"{'messages':[{'type':'human','content':'  \\n '}]}", -EINVAL, NULL, NULL},
    {"{'messages':[{'type':'human','content':7}]}", -EINVAL, NULL, NULL},
    {"{'messages':[{'type':'human'}]}", -EINVAL, NULL, NULL},
    {"{'messages':[{'type':'human','content':[{'type':'image_url','image_url':'u'}]}]}",
     -EINVAL, NULL, NULL},
    {"{'messages':[42]}", -EINVAL, NULL, NULL},
};

START_TEST(parse_input)
{
    const struct input_case *c = &input_cases[_i];
    json_t *j = qjson(c->input);
    struct rx_error err = {""};
    char *text = (char *)"untouched", *id = (char *)"untouched";
    struct rx_input in;
    int rc = lg_msg_parse_input(j, &text, &id, &err);

    ck_assert_msg(rc == c->rc, "%s: %d (%s)", c->input, rc, err.text);
    json_decref(j);
    if (rc) {
        ck_assert_str_eq(text, "untouched");
        ck_assert_str_eq(id, "untouched");
        ck_assert(*err.text);
        return;
    }
    ck_assert_str_eq(text, c->text);
    if (c->id)
        ck_assert_str_eq(id, c->id);
    else
        ck_assert_ptr_null(id);
    ck_assert_int_eq(lg_msg_user_input(text, id, &in), 0);
    ck_assert_int_eq(in.type, RX_IN_USER_SEND_MESSAGE);
    ck_assert_str_eq(in.content, c->text);
    rx_input_release(&in);
    free(text);
    free(id);
}
END_TEST

/* ---- command.resume ----------------------------------------------------------- */

/* What each of the inputs for c1, c2 must be: decision, parameters, reason. */
struct want_review {
    bool approve;
    const char *parameters, *reason;
};

static const struct resume_case {
    const char *command;
    int rc;
    struct want_review w[2];
} resume_cases[] = {
    {"{'resume':{'decisions':[{'type':'approve'},{'type':'reject','message':'no'}]}}",
     0,
     {{true, NULL, NULL}, {false, NULL, "no"}}},
    {"{'resume':{'decisions':[{'type':'edit','edited_action':{'name':'calculator',"
     "'args':{'expression':'2*3'}}},{'type':'reject'}]}}",
     0,
     {{true, "{\"expression\":\"2*3\"}", NULL}, {false, NULL, NULL}}},
    /* A resume map keyed by the interrupt's id, and the bare list. */
    {"{'resume':{'interrupt-c1':{'decisions':[{'type':'approve'},{'type':'approve'}]}}}",
     0,
     {{true, NULL, NULL}, {true, NULL, NULL}}},
    {"{'resume':[{'type':'approve'},{'type':'reject','message':null}]}",
     0,
     {{true, NULL, NULL}, {false, NULL, NULL}}},
    /* agent-inbox's HumanResponse. */
    {"{'resume':[{'type':'accept','args':null},{'type':'response','args':'why'}]}",
     0,
     {{true, NULL, NULL}, {false, NULL, "why"}}},
    {"{'resume':[{'type':'edit','args':{'action':'calculator','args':{'expression':'1'}}}"
     ","
     "{'type':'ignore','args':null}]}",
     0,
     {{true, "{\"expression\":\"1\"}", NULL}, {false, NULL, NULL}}},
    {"{'resume':{'decisions':[{'type':'approve'}]}}", -EINVAL, {{0}}},
    {"{'resume':{'decisions':[]}}", -EINVAL, {{0}}},
    {"{'resume':{'decisions':[{'type':'approve'},{'type':'maybe'}]}}", -EINVAL, {{0}}},
    {"{'resume':{'decisions':[{'type':'approve'},{}]}}", -EINVAL, {{0}}},
    {"{'resume':{'decisions':[{'type':'edit','edited_action':{'args':'x'}},"
     "{'type':'approve'}]}}",
     -EINVAL,
     {{0}}},
    {"{'resume':{'decisions':[{'type':'reject','message':5},{'type':'approve'}]}}",
     -EINVAL,
     {{0}}},
    /* An edit changes the arguments, never the tool. */
    {"{'resume':{'decisions':[{'type':'edit','edited_action':{'name':'shell',"
     "'args':{'cmd':'rm'}}},{'type':'approve'}]}}",
     -EINVAL,
     {{0}}},
    {"{'resume':'yes'}", -EINVAL, {{0}}},
    {"{'resume':null}", -EINVAL, {{0}}},
    {"{'goto':'tools'}", -EINVAL, {{0}}},
    {"{'resume':{'decisions':[{'type':'approve'},{'type':'approve'}]},'goto':'x'}",
     -EINVAL,
     {{0}}},
    {"[1]", -EINVAL, {{0}}},
};

START_TEST(parse_resume)
{
    const struct resume_case *c = &resume_cases[_i];
    json_t *j = qjson(c->command);
    struct rx_error err = {""};
    struct rx_input *in = NULL;
    struct rx_state st;
    size_t n = 99;
    int rc;

    state_from(&st, AWAITING);
    rc = lg_msg_parse_resume(j, &st, &in, &n, &err);
    ck_assert_msg(rc == c->rc, "%s: %d (%s)", c->command, rc, err.text);
    if (rc) {
        ck_assert_ptr_null(in);
        ck_assert_uint_eq(n, 99);
        ck_assert(*err.text);
    } else {
        const char *ids[] = {"c1", "c2"};

        ck_assert_uint_eq(n, 2);
        for (size_t i = 0; i < n; i++) {
            struct rx_outcome out;

            ck_assert_int_eq(in[i].type, RX_IN_USER_REVIEW_TOOL_CALL);
            ck_assert_str_eq(in[i].tool_call_id, ids[i]);
            ck_assert_int_eq(in[i].decision,
                             c->w[i].approve ? RX_DECISION_APPROVE : RX_DECISION_REJECT);
            if (c->w[i].parameters)
                ck_assert_str_eq(in[i].parameters, c->w[i].parameters);
            else
                ck_assert_ptr_null(in[i].parameters);
            if (c->w[i].reason)
                ck_assert_str_eq(in[i].text, c->w[i].reason);
            else
                ck_assert_ptr_null(in[i].text);
            /* The machine takes them, in order. */
            in[i].timestamp = 10 + (int64_t)i;
            in[i].has_timestamp = true;
            ck_assert_int_eq(rx_machine_apply(&st, &in[i], &out), 0);
            ck_assert_int_eq(out.verdict, RX_ACCEPTED);
            rx_input_release(&in[i]);
        }
        ck_assert_uint_eq(rx_state_awaiting_approval(&st), 0);
        free(in);
    }
    json_decref(j);
    rx_state_release(&st);
}
END_TEST

START_TEST(resume_with_nothing_pending)
{
    json_t *j = qjson("{'resume':{'decisions':[{'type':'approve'}]}}");
    struct rx_error err = {""};
    struct rx_input *in = NULL;
    struct rx_state st;
    size_t n = 0;

    state_from(&st, CONVERSATION);
    ck_assert_int_eq(lg_msg_parse_resume(j, &st, &in, &n, &err), -ENOENT);
    ck_assert_ptr_null(in);
    ck_assert(*err.text);
    json_decref(j);
    rx_state_release(&st);
}
END_TEST

Suite *lg_msg_suite(void)
{
    Suite *s = suite_create("lg_msg");
    TCase *tc = tcase_create("core");

    tcase_add_test(tc, messages_in_order);
    tcase_add_test(tc, usage_and_reasoning);
    tcase_add_test(tc, interrupt_shape);
    tcase_add_test(tc, chunks);
    tcase_add_test(tc, iso_times);
    tcase_add_loop_test(tc, parse_input, 0, sizeof(input_cases) / sizeof(*input_cases));
    tcase_add_loop_test(tc, parse_resume, 0,
                        sizeof(resume_cases) / sizeof(*resume_cases));
    tcase_add_test(tc, resume_with_nothing_pending);
    suite_add_tcase(s, tc);
    return s;
}
