/*
 * check_openai_stream - the incremental Chat Completions stream parser.
 *
 * Every case is a recorded body and the exact result it must give (a one-line
 * summary of content, deltas, calls, finish reason, usage and error, and the
 * reasoning with its deltas when there is some). Each
 * body is fed whole, split in two at every byte position, one byte at a time,
 * and in three pieces at every pair of positions, as http-parser's test_scan
 * does: the summary must be identical every time.
 * RX_TEST_QUICK=1 (valgrind) runs the three-piece scan on short bodies only.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "effects/openai_stream.h"
#include "state_machine/rx_buf.h"

Suite *openai_stream_suite(void);

/* Test texts use ' for " and ` for ' (q() swaps them), so they stay legible. */
#define CHUNK(x)    "data: {'id':'chatcmpl-1','object':'chat.completion.chunk'," x "}"
#define CH0(d, fin) CHUNK("'choices':[{'index':0,'delta':" d ",'finish_reason':" fin "}]")

/*
 * A realistic OpenAI reply: text, then two parallel calls whose arguments
 * interleave in fragments, CRLF and LF mixed, keep-alive comments, a usage
 * chunk, [DONE], and bytes after it that must be ignored.
 */
/* clang-format off */
static const char golden[] =
    ": OPENROUTER PROCESSING\n\n"
    CH0("{'role':'assistant','content':''}", "null") "\r\n\r\n"
    CH0("{'content':'Let me '}", "null") "\n\n"
    CH0("{'content':'comp\\u00fcte.'}", "null") "\n\n"
    CH0("{'tool_calls':[{'index':0,'id':'call_a','type':'function',"
        "'function':{'name':'calculator','arguments':''}}]}", "null") "\n\n"
    CH0("{'tool_calls':[{'index':1,'id':'call_b','type':'function',"
        "'function':{'name':'clock','arguments':'{\\'time'}}]}", "null") "\n\n"
    CH0("{'tool_calls':[{'index':0,'function':{'arguments':'{\\'expression\\':'}}]}",
        "null") "\n\n"
    ": ping\n\n"
    CH0("{'tool_calls':[{'index':1,'function':{'arguments':'zone\\':\\'UTC\\'}'}}]}",
        "null") "\r\n\r\n"
    CH0("{'tool_calls':[{'index':0,'function':{'arguments':'\\'2+3\\'}'}}]}",
        "null") "\n\n"
    CH0("{}", "'tool_calls'") "\n\n"
    CHUNK("'choices':[],'usage':{'prompt_tokens':9,'completion_tokens':12,"
          "'total_tokens':21}") "\n\n"
    "data: [DONE]\n\n"
    "data: {after done, ignored\n\n";
/* clang-format on */

static const struct scase {
    const char *name;
    const char *body; /* ' stands for " */
    const char *want; /* summary, ' stands for " */
} cases[] = {
    {"golden", golden,
     "rc=0 content=[Let me compüte.] deltas=[Let me |compüte.] "
     "calls=[0:call_a:calculator:{'expression':'2+3'};1:call_b:clock:{'timezone':'UTC'};]"
     " "
     "finish=tool_calls "
     "usage={'prompt_tokens':9,'completion_tokens':12,'total_tokens':21} "
     "err=[]"},
    {"plain text, CR only",
     CH0("{'content':'Hel'}", "null") "\r\r" CH0("{'content':'lo'}",
                                                 "'stop'") "\r\r"
                                                           "data: [DONE]\r\r",
     "rc=0 content=[Hello] deltas=[Hel|lo] calls=[] finish=stop usage=null err=[]"},
    {"multi-line event, other fields, no space after colon",
     "event: message\nid: 7\nretry: 100\n"
     "data:{'choices':[{'index':0,\n"
     "data: 'delta':{'content':'a\\nb'}}]}\n\n"
     "data: [DONE]",
     "rc=0 content=[a\nb] deltas=[a\nb] calls=[] finish= usage=null err=[]"},
    {"no final blank line", CH0("{'content':'x'}", "'stop'") "\n\ndata: [DONE]\n",
     "rc=0 content=[x] deltas=[x] calls=[] finish=stop usage=null err=[]"},
    {"calls without index (whole calls, some servers)",
     CH0("{'tool_calls':[{'id':'c1','function':{'name':'clock','arguments':'{}'}},"
         "{'id':'c2','function':{'name':'calculator','arguments':{'expression':'1'}}}]}",
         "'tool_calls'") "\n\ndata: [DONE]\n\n",
     "rc=0 content=[] deltas=[] "
     "calls=[0:c1:clock:{};1:c2:calculator:{'expression':'1'};] "
     "finish=tool_calls usage=null err=[]"},
    {"call without id, name repeated in fragments",
     CH0("{'tool_calls':[{'index':0,'function':{'name':'clock','arguments':'{'}}]}",
         "null") "\n\n" CH0("{'tool_calls':[{'index':0,'function':{'name':'clock','"
                            "arguments':'}'}}]}",
                            "'tool_calls'") "\n\ndata: [DONE]\n\n",
     "rc=0 content=[] deltas=[] calls=[0:-:clock:{};] finish=tool_calls usage=null "
     "err=[]"},
    {"whole JSON body (stream ignored)",
     "\n{'id':'x','object':'chat.completion','choices':[{'index':0,'message':"
     "{'role':'assistant','content':'Hi there'},'finish_reason':'stop'}],"
     "'usage':{'total_tokens':3}}\n",
     "rc=0 content=[Hi there] deltas=[Hi there] calls=[] finish=stop "
     "usage={'total_tokens':3} err=[]"},
    {"error object in the stream",
     CH0("{'content':'par'}", "null") "\n\n"
                                      "data: {'error':{'message':'The server had an "
                                      "error while processing your "
                                      "request.','type':'server_error'}}\n\n",
     "rc=-71 content=[par] deltas=[par] calls=[] finish= usage=null "
     "err=[The server had an error while processing your request.]"},
    {"whole JSON error body",
     "{'error':{'message':'Incorrect API key provided','type':'invalid_request_error',"
     "'code':'invalid_api_key'}}",
     "rc=-71 content=[] deltas=[] calls=[] finish= usage=null "
     "err=[Incorrect API key provided]"},
    {"malformed JSON",
     CH0("{'content':'ok'}", "null") "\n\ndata: {'choices':[{garbage\n\n"
                                     "data: [DONE]\n\n",
     "rc=-71 content=[ok] deltas=[ok] calls=[] finish= usage=null "
     "err=[malformed JSON in the reply: line 1, column 14: string or `}` expected]"},
    {"event that is not an object", "data: 42\n\ndata: [DONE]\n\n",
     "rc=-71 content=[] deltas=[] calls=[] finish= usage=null "
     "err=[malformed reply stream: an event is not an object]"},
    {"cut before [DONE]",
     CH0("{'content':'Hel'}", "null") "\n\n" CH0("{'content':'lo'}", "'stop'") "\n\n",
     "rc=-71 content=[Hello] deltas=[Hel|lo] calls=[] finish=stop usage=null "
     "err=[the reply stream ended before [DONE]]"},
    {"cut inside an event",
     CH0("{'content':'Hel'}", "null") "\n\ndata: {'choices':[{'ind",
     "rc=-71 content=[Hel] deltas=[Hel] calls=[] finish= usage=null "
     "err=[malformed JSON in the reply: line 1, column 18: unterminated string]"},
    {"empty body", "\r\n",
     "rc=-71 content=[] deltas=[] calls=[] finish= usage=null err=[the reply was empty]"},
    {"bad tool call index",
     CH0("{'tool_calls':[{'index':-1,'id':'c','function':{'name':'x'}}]}",
         "null") "\n\ndata: [DONE]\n\n",
     "rc=-71 content=[] deltas=[] calls=[] finish= usage=null "
     "err=[tool call index -1 is out of range]"},
    /* Reasoning models (llama.cpp, DeepSeek, vLLM: reasoning_content). */
    {"reasoning_content, then the answer, then usage",
     CH0("{'role':'assistant','content':null,'reasoning_content':'Let me '}",
         "null") "\n\n" CH0("{'reasoning_content':'think.'}",
                            "null") "\n\n" CH0("{'content':'Answer.'}",
                                               "'stop'") "\n\n" CHUNK("'choices':[],'"
                                                                      "usage':{'prompt_"
                                                                      "tokens':12,'"
                                                                      "completion_tokens'"
                                                                      ":3}") "\n\ndata: "
                                                                             "[DONE]\n\n",
     "rc=0 content=[Answer.] deltas=[Answer.] calls=[] finish=stop "
     "usage={'prompt_tokens':12,'completion_tokens':3} err=[] "
     "reasoning=[Let me think.] rdeltas=[Let me |think.]"},
    /* OpenRouter and some vLLM versions: delta.reasoning. */
    {"delta.reasoning",
     CH0("{'reasoning':'Hm.'}", "null") "\n\n" CH0("{'reasoning':null,'content':'Ok'}",
                                                   "'stop'") "\n\ndata: [DONE]\n\n",
     "rc=0 content=[Ok] deltas=[Ok] calls=[] finish=stop usage=null err=[] "
     "reasoning=[Hm.] rdeltas=[Hm.]"},
    {"both names in one delta: the text once",
     CH0("{'reasoning_content':'Why','reasoning':'Why'}",
         "null") "\n\n" CH0("{'reasoning_content':'','reasoning':'?','content':'!'}",
                            "'stop'") "\n\ndata: [DONE]\n\n",
     "rc=0 content=[!] deltas=[!] calls=[] finish=stop usage=null err=[] "
     "reasoning=[Why?] rdeltas=[Why|?]"},
    {"reasoning before tool calls",
     CH0("{'reasoning_content':'Need the clock.'}", "null") "\n\n" CH0(
         "{'tool_calls':[{'index':0,'id':'c1','function':{'name':'clock',"
         "'arguments':'{}'}}]}",
         "'tool_calls'") "\n\ndata: [DONE]\n\n",
     "rc=0 content=[] deltas=[] calls=[0:c1:clock:{};] finish=tool_calls usage=null "
     "err=[] reasoning=[Need the clock.] rdeltas=[Need the clock.]"},
    {"whole JSON body with reasoning",
     "{'choices':[{'index':0,'message':{'role':'assistant','content':'Hi',"
     "'reasoning_content':'Greet.'},'finish_reason':'stop'}]}",
     "rc=0 content=[Hi] deltas=[Hi] calls=[] finish=stop usage=null err=[] "
     "reasoning=[Greet.] rdeltas=[Greet.]"},
};

static char *q(const char *s)
{
    char *d = strdup(s);

    ck_assert_ptr_nonnull(d);
    for (char *p = d; *p; p++)
        if (*p == '\'')
            *p = '"';
        else if (*p == '`')
            *p = '\'';
    return d;
}

/* Content callback: record deltas separated by '|'; stop when asked to. */
struct rec {
    struct rx_buf deltas;
    int stop_after; /* return -ECANCELED at this delta (1-based), 0 never */
    int n;
    struct rx_buf rdeltas; /* reasoning deltas, '|' between */
    int rn;
};

static int on_content(void *ctx, const char *delta, size_t len)
{
    struct rec *r = ctx;

    ck_assert_uint_eq(strlen(delta), len);
    ck_assert_uint_gt(len, 0);
    if (r->n++ && rx_buf_putc(&r->deltas, '|'))
        return -ENOMEM;
    if (rx_buf_append(&r->deltas, delta, len))
        return -ENOMEM;
    return r->stop_after && r->n == r->stop_after ? -ECANCELED : 0;
}

/* Reasoning callback: the same, into rdeltas. */
static int on_reasoning(void *ctx, const char *delta, size_t len)
{
    struct rec *r = ctx;

    ck_assert_uint_eq(strlen(delta), len);
    ck_assert_uint_gt(len, 0);
    if (r->rn++ && rx_buf_putc(&r->rdeltas, '|'))
        return -ENOMEM;
    return rx_buf_append(&r->rdeltas, delta, len) ? -ENOMEM : 0;
}

/* Feed `body` in pieces cut at a < b (clamped), then finish; the summary. */
static char *run(const char *body, size_t len, size_t a, size_t b, bool bytewise)
{
    struct openai_stream st;
    struct rec r = {.n = 0};
    struct rx_buf out;
    char *usage;
    int rc = 0;

    rx_buf_init(&r.deltas, 1 << 20);
    rx_buf_init(&r.rdeltas, 1 << 20);
    rx_buf_init(&out, 1 << 20);
    openai_stream_init(&st, on_content, &r);
    openai_stream_on_reasoning(&st, on_reasoning);
    if (bytewise) {
        for (size_t i = 0; i < len && !rc; i++)
            rc = openai_stream_feed(&st, body + i, 1);
    } else {
        rc = openai_stream_feed(&st, body, a);
        rc = rc ? rc : openai_stream_feed(&st, body + a, b - a);
        rc = rc ? rc : openai_stream_feed(&st, body + b, len - b);
    }
    rc = rc ? rc : openai_stream_finish(&st);
    /* Errors are sticky. */
    if (rc)
        ck_assert_int_eq(openai_stream_feed(&st, "data: [DONE]\n\n", 14), rc);
    usage = st.usage ? json_dumps(st.usage, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    ck_assert(!rx_buf_printf(&out, "rc=%d content=[%s] deltas=[%s] calls=[", rc,
                             st.content.data ? st.content.data : "",
                             r.deltas.data ? r.deltas.data : ""));
    for (size_t i = 0; i < st.n_calls; i++)
        ck_assert(!rx_buf_printf(&out, "%d:%s:%s:%s;", st.calls[i].index,
                                 st.calls[i].id ? st.calls[i].id : "-",
                                 st.calls[i].name ? st.calls[i].name : "-",
                                 st.calls[i].args.data ? st.calls[i].args.data : ""));
    ck_assert(!rx_buf_printf(&out, "] finish=%s usage=%s err=[%s]", st.finish_reason,
                             usage ? usage : "null", st.error.text));
    if (st.reasoning.len)
        ck_assert(!rx_buf_printf(&out, " reasoning=[%s] rdeltas=[%s]", st.reasoning.data,
                                 r.rdeltas.data ? r.rdeltas.data : ""));
    ck_assert_int_eq(openai_stream_has_calls(&st), st.n_calls > 0);
    free(usage);
    openai_stream_release(&st);
    rx_buf_release(&r.deltas);
    rx_buf_release(&r.rdeltas);
    return rx_buf_take(&out, NULL);
}

static void expect(const char *got, const char *want, const char *name, size_t a,
                   size_t b)
{
    ck_assert_msg(!strcmp(got, want), "%s split at %zu,%zu:\n got: %s\nwant: %s", name, a,
                  b, got, want);
}

START_TEST(test_whole)
{
    char *body = q(cases[_i].body), *want = q(cases[_i].want);
    size_t len = strlen(body);
    char *got = run(body, len, len, len, false);

    expect(got, want, cases[_i].name, len, len);
    free(got);
    got = run(body, len, 0, 0, true);
    expect(got, want, cases[_i].name, 1, 1);
    free(got);
    free(body);
    free(want);
}
END_TEST

START_TEST(test_split_every_position)
{
    char *body = q(cases[_i].body), *want = q(cases[_i].want);
    size_t len = strlen(body);

    for (size_t a = 0; a <= len; a++) {
        char *got = run(body, len, a, a, false);

        expect(got, want, cases[_i].name, a, a);
        free(got);
    }
    free(body);
    free(want);
}
END_TEST

START_TEST(test_split_every_pair)
{
    const char *quick = getenv("RX_TEST_QUICK");
    size_t len = strlen(cases[_i].body), step = len > 200 ? 11 : 1;
    char *body, *want;

    /* The golden body has ~1600 bytes: every pair is over a million runs. Past
     * 200 bytes a stride keeps it to seconds; every pair of nearby positions is
     * still tried, so two cuts inside one line or one CRLF are covered. Under
     * valgrind (RX_TEST_QUICK) only the short bodies are scanned. */
    if (quick && *quick && strcmp(quick, "0") && len > 120)
        return;
    body = q(cases[_i].body);
    want = q(cases[_i].want);
    for (size_t a = 0; a <= len; a += step) {
        for (size_t b = a; b <= len; b += (b < a + 16 ? 1 : step)) {
            char *got = run(body, len, a, b, false);

            expect(got, want, cases[_i].name, a, b);
            free(got);
        }
    }
    free(body);
    free(want);
}
END_TEST

/* A callback that says stop halts the parser at once, and the error sticks. */
START_TEST(test_callback_stops)
{
    char *body = q(golden);
    struct openai_stream st;
    struct rec r = {.stop_after = 1};

    rx_buf_init(&r.deltas, 1 << 20);
    openai_stream_init(&st, on_content, &r);
    ck_assert_int_eq(openai_stream_feed(&st, body, strlen(body)), -ECANCELED);
    ck_assert_int_eq(r.n, 1);
    ck_assert_int_eq(openai_stream_finish(&st), -ECANCELED);
    ck_assert_uint_eq(st.n_calls, 0);
    openai_stream_release(&st);
    rx_buf_release(&r.deltas);
    free(body);
}
END_TEST

/* A reply nested deeper than RX_JSON_DEPTH_MAX is refused before jansson
   recurses into it on the effect's small stack (issue 12). */
START_TEST(test_deep_reply_is_refused)
{
    enum { DEPTH = 20000 };
    char *body = malloc(2 * DEPTH + 32);
    struct openai_stream st;
    struct rec r = {0};
    size_t n;

    ck_assert_ptr_nonnull(body);
    n = (size_t)sprintf(body, "data: ");
    memset(body + n, '[', DEPTH);
    memset(body + n + DEPTH, ']', DEPTH);
    n += 2 * DEPTH;
    memcpy(body + n, "\n\n", 3);
    n += 2;
    rx_buf_init(&r.deltas, 1 << 20);
    openai_stream_init(&st, on_content, &r);
    ck_assert_int_eq(openai_stream_feed(&st, body, n), -EPROTO);
    ck_assert_msg(strstr(st.error.text, "deeper than 64"), "%s", st.error.text);
    openai_stream_release(&st);
    rx_buf_release(&r.deltas);
    free(body);
}
END_TEST

/* A line past the bound is refused, not buffered without end. */
START_TEST(test_line_bound)
{
    size_t n = OPENAI_STREAM_EVENT_MAX + 16;
    char *big = malloc(n);
    struct openai_stream st;

    ck_assert_ptr_nonnull(big);
    memcpy(big, "data: ", 6);
    memset(big + 6, 'x', n - 6);
    openai_stream_init(&st, NULL, NULL);
    ck_assert_int_eq(openai_stream_feed(&st, big, n / 2), 0);
    ck_assert_int_eq(openai_stream_feed(&st, big + n / 2, n - n / 2), -E2BIG);
    ck_assert_str_eq(st.error.text, "a line of the reply stream is too long");
    openai_stream_release(&st);
    free(big);
}
END_TEST

Suite *openai_stream_suite(void)
{
    Suite *s = suite_create("openai_stream");
    TCase *tc = tcase_create("cases");
    int n = (int)(sizeof(cases) / sizeof(cases[0]));

    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_whole, 0, n);
    tcase_add_loop_test(tc, test_split_every_position, 0, n);
    tcase_add_loop_test(tc, test_split_every_pair, 0, n);
    tcase_add_test(tc, test_callback_stops);
    tcase_add_test(tc, test_line_bound);
    tcase_add_test(tc, test_deep_reply_is_refused);
    suite_add_tcase(s, tc);
    return s;
}
