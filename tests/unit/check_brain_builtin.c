/*
 * check_brain_builtin - the builtin brain: its decision table (pure), and its
 * ask() driven by a fake runtime that applies every dispatched input to a
 * real rx_state through rx_machine, so each input is checked by the machine
 * itself, and that records the streamed chunks.
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "effects/brain_builtin.h"
#include "effects/builtin_reply.h"
#include "effects/toolkit.h"
#include "state_machine/rx_context.h"
#include "state_machine/rx_machine.h"

Suite *brain_builtin_suite(void);

/* ---------------------------------------------------------- decision table */

static const struct {
    const char *messages; /* JSON */
    const char *tool;     /* expected tool, or NULL for a text reply */
    const char *want;     /* the arguments, or the exact content */
} decisions[] = {
    {"[{\"role\":\"user\",\"content\":\"what is 2+3?\"}]", "calculator",
     "{\"expression\":\"2+3\"}"},
    {"[{\"role\":\"user\",\"content\":\"12*(3+4)\"}]", "calculator",
     "{\"expression\":\"12*(3+4)\"}"},
    {"[{\"role\":\"user\",\"content\":\"calculate 7/0\"}]", "calculator",
     "{\"expression\":\"7/0\"}"},
    {"[{\"role\":\"user\",\"content\":\"Please compute: 2 ** 10\"}]", "calculator",
     "{\"expression\":\"2 ^ 10\"}"},
    {"[{\"role\":\"user\",\"content\":\"What's 3 x 4?\"}]", "calculator",
     "{\"expression\":\"3 * 4\"}"},
    {"[{\"role\":\"user\",\"content\":\"6 \xc3\x97 7 =\"}]", "calculator",
     "{\"expression\":\"6 * 7\"}"},
    {"[{\"role\":\"system\",\"content\":\"be nice\"},"
     "{\"role\":\"user\",\"content\":\"how much is 1.5e3 - 1\"}]",
     "calculator", "{\"expression\":\"1.5e3 - 1\"}"},
    {"[{\"role\":\"user\",\"content\":\"what time is it\"}]", "clock", "{}"},
    {"[{\"role\":\"user\",\"content\":\"What's the date today?\"}]", "clock", "{}"},
    {"[{\"role\":\"user\",\"content\":\"date\"}]", "clock", "{}"},
    {"[{\"role\":\"user\",\"content\":\"clock\"}]", "clock", "{}"},
    {"[{\"role\":\"user\",\"content\":\"Do you know the time?\"}]", "clock", "{}"},
    {"[{\"role\":\"user\",\"content\":\"hello\"}]", NULL, "Echo: hello"},
    {"[{\"role\":\"user\",\"content\":\"time flies like an arrow\"}]", NULL,
     "Echo: time flies like an arrow"},
    {"[{\"role\":\"user\",\"content\":\"2024\"}]", NULL, "Echo: 2024"},
    {"[{\"role\":\"user\",\"content\":\"what is love?\"}]", NULL, "Echo: what is love?"},
    {"[{\"role\":\"user\",\"content\":\"calculate the tip\"}]", NULL,
     "Echo: calculate the tip"},
    {"[{\"role\":\"user\",\"content\":\"\xe4\xbd\xa0\xe5\xa5\xbd\"}]", NULL,
     "Echo: \xe4\xbd\xa0\xe5\xa5\xbd"},
    /* Tool results after the last user message: answer from them. */
    {"[{\"role\":\"user\",\"content\":\"what is 2+3?\"},"
     "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\","
     "\"type\":\"function\",\"function\":{\"name\":\"calculator\","
     "\"arguments\":\"{\\\"expression\\\":\\\"2+3\\\"}\"}}]},"
     "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"5\"}]",
     NULL, "2+3 = 5"},
    {"[{\"role\":\"user\",\"content\":\"calculate 7/0\"},"
     "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\","
     "\"type\":\"function\",\"function\":{\"name\":\"calculator\","
     "\"arguments\":\"{\\\"expression\\\":\\\"7/0\\\"}\"}}]},"
     "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"Error: division by "
     "zero\"}]",
     NULL, "The calculator said: Error: division by zero"},
    {"[{\"role\":\"user\",\"content\":\"time?\"},"
     "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"k\","
     "\"type\":\"function\",\"function\":{\"name\":\"clock\",\"arguments\":\"{}\"}}]},"
     "{\"role\":\"tool\",\"tool_call_id\":\"k\",\"content\":"
     "\"{\\\"iso\\\":\\\"2025-01-02T03:04:05.678Z\\\",\\\"epoch_ms\\\":1}\"}]",
     NULL, "The time is 2025-01-02T03:04:05.678Z."},
    {"[{\"role\":\"user\",\"content\":\"run it\"},"
     "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":["
     "{\"id\":\"a\",\"type\":\"function\",\"function\":{\"name\":\"weather\","
     "\"arguments\":\"{}\"}},"
     "{\"id\":\"b\",\"type\":\"function\",\"function\":{\"name\":\"clock\","
     "\"arguments\":\"{}\"}}]},"
     "{\"role\":\"tool\",\"tool_call_id\":\"a\",\"content\":\"sunny\"},"
     "{\"role\":\"tool\",\"tool_call_id\":\"b\",\"content\":\"Error: broken\"}]",
     NULL, "Tool 'weather' returned: sunny\nThe clock said: Error: broken"},
    /* A new user message after an answer: tools before it do not count. */
    {"[{\"role\":\"user\",\"content\":\"2+3\"},"
     "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\","
     "\"type\":\"function\",\"function\":{\"name\":\"calculator\","
     "\"arguments\":\"{\\\"expression\\\":\\\"2+3\\\"}\"}}]},"
     "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"5\"},"
     "{\"role\":\"assistant\",\"content\":\"2+3 = 5\"},"
     "{\"role\":\"user\",\"content\":\"thanks\"}]",
     NULL, "Echo: thanks"},
    /* "/call <tool> <JSON arguments>": any tool, the arguments as written. */
    {"[{\"role\":\"user\",\"content\":\"/call clock\"}]", "clock", "{}"},
    {"[{\"role\":\"user\",\"content\":\"/call calculator "
     "{\\\"expression\\\":\\\"1+1\\\"}\"}]",
     "calculator", "{\"expression\":\"1+1\"}"},
    {"[{\"role\":\"user\",\"content\":\"  /call weather   {\\\"city\\\": \\\"Paris\\\"}  "
     "\"}]",
     "weather", "{\"city\": \"Paris\"}"},
    {"[{\"role\":\"user\",\"content\":\"/call mcp__echo not json\"}]", "mcp__echo",
     "not json"},
    {"[{\"role\":\"user\",\"content\":\"/call\"}]", NULL, BUILTIN_REPLY_CALL_USAGE},
    {"[{\"role\":\"user\",\"content\":\"/call bad!name {}\"}]", NULL,
     BUILTIN_REPLY_CALL_USAGE},
    {"[{\"role\":\"user\",\"content\":\"/calling\"}]", NULL, "Echo: /calling"},
    {"[{\"role\":\"user\",\"content\":\"/call weather\"},"
     "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"w\","
     "\"type\":\"function\",\"function\":{\"name\":\"weather\",\"arguments\":\"{}\"}}]},"
     "{\"role\":\"tool\",\"tool_call_id\":\"w\",\"content\":\"Error: unknown tool\"}]",
     NULL, "Tool 'weather' said: Error: unknown tool"},
    /* The summary is not something the user said. */
    {"[{\"role\":\"user\",\"content\":\"[Previous conversation summary]\\nstuff\"}]",
     NULL,
     "Hello! I am the builtin brain. Ask me to calculate something (\"what is 2+3?\") "
     "or what time it is."},
};

START_TEST(test_decision)
{
    json_t *msgs = json_loads(decisions[_i].messages, 0, NULL), *reply = NULL, *call;

    ck_assert_ptr_nonnull(msgs);
    ck_assert_int_eq(builtin_reply_decide(msgs, NULL, &reply), 0);
    ck_assert_ptr_nonnull(reply);
    if (decisions[_i].tool) {
        ck_assert_ptr_null(json_object_get(reply, "content"));
        ck_assert_int_eq(json_array_size(json_object_get(reply, "tool_calls")), 1);
        call = json_array_get(json_object_get(reply, "tool_calls"), 0);
        ck_assert_str_eq(json_string_value(json_object_get(call, "name")),
                         decisions[_i].tool);
        ck_assert_str_eq(json_string_value(json_object_get(call, "arguments")),
                         decisions[_i].want);
        ck_assert(!strncmp(json_string_value(json_object_get(call, "id")), "call-", 5));
    } else {
        ck_assert_ptr_null(json_object_get(reply, "tool_calls"));
        ck_assert_str_eq(json_string_value(json_object_get(reply, "content")),
                         decisions[_i].want);
    }
    json_decref(reply);
    json_decref(msgs);
}
END_TEST

static char *call_id(const char *messages)
{
    json_t *msgs = json_loads(messages, 0, NULL), *reply = NULL;
    char *id;

    ck_assert_int_eq(builtin_reply_decide(msgs, NULL, &reply), 0);
    id = strdup(json_string_value(
        json_object_get(json_array_get(json_object_get(reply, "tool_calls"), 0), "id")));
    json_decref(reply);
    json_decref(msgs);
    return id;
}

START_TEST(test_call_ids)
{
    char *a = call_id("[{\"role\":\"user\",\"content\":\"2+3\"}]");
    char *b = call_id("[{\"role\":\"user\",\"content\":\"2+3\"}]");
    char *c = call_id("[{\"role\":\"user\",\"content\":\"2+4\"}]");
    char *d =
        call_id("[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\","
                "\"content\":\"Echo: hi\"},{\"role\":\"user\",\"content\":\"2+3\"}]");
    json_t *reply = (json_t *)1, *obj = json_object();

    ck_assert_str_eq(a, b); /* deterministic */
    ck_assert_str_ne(a, c); /* and unique per conversation */
    ck_assert_str_ne(a, d);
    ck_assert(!strncmp(a, "call-1-", 7));
    ck_assert(!strncmp(d, "call-3-", 7));
    free(a), free(b), free(c), free(d);
    ck_assert_int_eq(builtin_reply_decide(obj, NULL, &reply), -EINVAL);
    ck_assert_ptr_eq(reply, (json_t *)1);
    json_decref(obj);
}
END_TEST

/* ------------------------------------------------------------ fake runtime */

#define MAX_INPUTS 64

struct fake {
    struct brain_ask ask; /* first: the callbacks get it back */
    struct rx_state live; /* what the session would hold */
    struct rx_state snap; /* the ask's view */
    int64_t now;
    struct rx_input inputs[MAX_INPUTS];
    enum rx_verdict verdicts[MAX_INPUTS];
    size_t n_inputs;
    struct rx_buf streamed;
    char chunk_mid[RX_ID_MAX];
    size_t n_chunks, cancel_after, max_chars;
    int sleeps, last_sleep_ms;
    bool cancelled, bad_chunk;
};

static struct fake fk;
static struct brain *brain;

static int fake_dispatch(struct brain_ask *ask, struct rx_input *in)
{
    struct fake *f = (struct fake *)ask;
    struct rx_input *copy;
    struct rx_outcome out;

    if (f->cancelled)
        return -ECANCELED;
    ck_assert_uint_lt(f->n_inputs, MAX_INPUTS);
    copy = &f->inputs[f->n_inputs];
    ck_assert_int_eq(rx_input_copy(in, copy), 0);
    /* The session stamps inputs: strictly increasing. */
    copy->timestamp = ++f->now;
    copy->has_timestamp = true;
    ck_assert_int_eq(rx_machine_apply(&f->live, copy, &out), 0);
    f->verdicts[f->n_inputs++] = out.verdict;
    ck_assert(rx_state_check_invariants(&f->live));
    return out.verdict == RX_REJECTED ? -EPROTO : 0;
}

static int fake_chunk(struct brain_ask *ask, const char *mid, const char *delta)
{
    struct fake *f = (struct fake *)ask;
    size_t n = strlen(delta), chars = 0;

    if (f->cancelled)
        return -ECANCELED;
    if (!f->n_chunks)
        snprintf(f->chunk_mid, sizeof(f->chunk_mid), "%s", mid);
    else if (strcmp(mid, f->chunk_mid))
        f->bad_chunk = true;
    /* Never a split character: count lead bytes only. */
    for (size_t i = 0; i < n; i++)
        chars += ((unsigned char)delta[i] & 0xc0) != 0x80;
    if (!n || ((unsigned char)delta[0] & 0xc0) == 0x80 || chars > f->max_chars)
        f->bad_chunk = true;
    ck_assert_int_eq(rx_buf_puts(&f->streamed, delta), 0);
    if (++f->n_chunks == f->cancel_after)
        f->cancelled = true;
    return 0;
}

static bool fake_is_cancelled(struct brain_ask *ask)
{
    return ((struct fake *)ask)->cancelled;
}

static int fake_sleep(struct brain_ask *ask, int ms)
{
    struct fake *f = (struct fake *)ask;

    f->sleeps++;
    f->last_sleep_ms = ms;
    return f->cancelled ? -ECANCELED : 0;
}

static void apply(struct rx_input *in)
{
    struct rx_outcome out;

    in->timestamp = ++fk.now;
    in->has_timestamp = true;
    ck_assert_int_eq(rx_machine_apply(&fk.live, in, &out), 0);
    ck_assert_int_eq(out.verdict, RX_ACCEPTED);
    rx_input_release(in);
}

/* A user message; the next ask sees signals up to it. */
static void user_says(const char *text)
{
    struct rx_input in = {.type = RX_IN_USER_SEND_MESSAGE};
    char id[32];

    snprintf(id, sizeof(id), "u%lld", (long long)fk.now + 1);
    ck_assert_int_eq(rx_input_set_str(&in.message_id, id), 0);
    ck_assert_int_eq(rx_input_set_str(&in.content, text), 0);
    apply(&in);
    fk.ask.signals_cut_at = fk.now;
}

static void clear_record(void)
{
    for (size_t i = 0; i < fk.n_inputs; i++)
        rx_input_release(&fk.inputs[i]);
    fk.n_inputs = 0;
    rx_buf_release(&fk.streamed);
    fk.n_chunks = 0;
    fk.sleeps = 0;
    fk.bad_chunk = false;
    fk.chunk_mid[0] = '\0';
}

/* Run one ask on the view of the live state, as the runtime hands it over. */
static int run_ask(void)
{
    int rc;

    clear_record();
    rx_state_release(&fk.snap);
    ck_assert_int_eq(rx_context_view(&fk.live, brain->view_messages, &fk.snap), 0);
    fk.ask.view = &fk.snap;
    rc = brain->ask(brain, &fk.ask);
    ck_assert(!fk.bad_chunk);
    return rc;
}

static struct brain *make_brain(int chunk_chars, int compress_after, int keep)
{
    struct brain_builtin_config cfg;

    brain_builtin_config_init(&cfg);
    cfg.chunk_chars = chunk_chars;
    cfg.compress_after = compress_after;
    cfg.compress_keep = keep;
    return brain_builtin_create(&cfg);
}

static void setup(void)
{
    memset(&fk, 0, sizeof(fk));
    ck_assert_int_eq(rx_state_init(&fk.live), 0);
    ck_assert_int_eq(rx_state_init(&fk.snap), 0);
    rx_buf_init(&fk.streamed, RX_BUF_SMALL_MAX);
    fk.now = 1000;
    fk.max_chars = 4;
    fk.ask.system_prompt = "You are a test.";
    fk.ask.dispatch = fake_dispatch;
    fk.ask.chunk = fake_chunk;
    fk.ask.is_cancelled = fake_is_cancelled;
    fk.ask.sleep_ms = fake_sleep;
    fk.ask.cancel_fd = -1;
    brain = make_brain(4, 0, 1);
    ck_assert_ptr_nonnull(brain);
}

static void teardown(void)
{
    clear_record();
    rx_state_release(&fk.live);
    rx_state_release(&fk.snap);
    brain->destroy(brain);
    brain = NULL;
}

/*
 * The text reply of the last ask: start (unless resumed), chunks, complete.
 * `want` is the whole text, or with `prefix` how it starts (an answer that
 * holds the time); the chunks and the state must then say exactly what the
 * complete input says. `want` never points into fk: it is what the test
 * expects, not what the brain produced.
 */
static void assert_streamed_as(const char *want, bool started, bool prefix)
{
    const struct rx_input *last = &fk.inputs[fk.n_inputs - 1];
    size_t len;

    ck_assert_int_eq(fk.n_inputs, started ? 2 : 1);
    if (started) {
        ck_assert_int_eq(fk.inputs[0].type, RX_IN_BRAIN_SEND_MESSAGE_START);
        ck_assert_int_eq(fk.inputs[0].called_brain_at, fk.ask.signals_cut_at);
        ck_assert_str_eq(fk.inputs[0].message_id, last->message_id);
        ck_assert_int_eq(fk.verdicts[0], RX_ACCEPTED);
    }
    ck_assert_int_eq(last->type, RX_IN_BRAIN_SEND_MESSAGE_COMPLETE);
    ck_assert_int_eq(last->called_brain_at, fk.ask.signals_cut_at);
    ck_assert_ptr_nonnull(last->content);
    if (prefix)
        ck_assert_msg(!strncmp(last->content, want, strlen(want)),
                      "'%s' does not start with '%s'", last->content, want);
    else
        ck_assert_str_eq(last->content, want);
    len = strlen(last->content);
    ck_assert_int_eq(fk.verdicts[fk.n_inputs - 1], RX_ACCEPTED);
    /* The chunks, joined, are the message. */
    ck_assert_str_eq(fk.streamed.data, last->content);
    ck_assert_str_eq(fk.chunk_mid, last->message_id);
    ck_assert_uint_ge(fk.n_chunks, len ? 1 : 0);
    ck_assert_int_eq(fk.sleeps, (int)fk.n_chunks - 1);
    ck_assert_str_eq(rx_state_find_assistant(&fk.live, last->message_id)->content,
                     last->content);
}

static void assert_streamed(const char *want, bool started)
{
    assert_streamed_as(want, started, false);
}

START_TEST(test_ask_echo)
{
    user_says("hello there");
    ck_assert_int_eq(run_ask(), 0);
    assert_streamed("Echo: hello there", true);
    ck_assert_int_eq(fk.n_chunks, 5); /* 17 characters, 4 a chunk */
    ck_assert_int_eq(fk.last_sleep_ms, 30);
}
END_TEST

START_TEST(test_ask_utf8_chunks)
{
    /* Chunks of 4 characters, never of 4 bytes (checked by fake_chunk). */
    user_says("h\xc3\xa9llo w\xc3\xb6rld \xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x98\x80!");
    ck_assert_int_eq(run_ask(), 0);
    assert_streamed(
        "Echo: h\xc3\xa9llo w\xc3\xb6rld \xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x98\x80!",
        true);
    ck_assert_int_eq(fk.n_chunks, 6); /* 23 characters */
}
END_TEST

/* The toolkit's part, done for real: answer every pending call. */
static void run_pending_tools(struct toolkit *tk)
{
    for (size_t i = 0; i < fk.live.tools.len; i++) {
        struct rx_tool_call *c = &fk.live.tools.items[i];
        struct rx_input in = {0};
        char *result = NULL;
        bool is_error = false;

        if (c->result.present)
            continue;
        ck_assert_int_eq(
            toolkit_call(tk, c->name, c->parameters, NULL, -1, &result, &is_error), 0);
        in.type = is_error ? RX_IN_TOOLKIT_ERROR : RX_IN_TOOLKIT_RESPOND;
        ck_assert_int_eq(rx_input_set_str(&in.tool_call_id, c->id), 0);
        ck_assert_int_eq(rx_input_set_str(&in.text, result), 0);
        free(result);
        apply(&in);
        fk.ask.signals_cut_at = fk.now;
    }
}

/* user -> ask (tool call) -> toolkit -> ask (answer), all through the machine. */
static void round_trip(const char *question, const char *tool, const char *answer_prefix)
{
    struct toolkit *tk = toolkit_create();
    size_t answers = fk.live.assistant.len;

    ck_assert_ptr_nonnull(tk);
    ck_assert_int_eq(toolkit_add_builtins(tk), 0);
    user_says(question);
    ck_assert_int_eq(run_ask(), 0);
    ck_assert_int_eq(fk.n_inputs, 1);
    ck_assert_int_eq(fk.inputs[0].type, RX_IN_BRAIN_CALL_TOOLS);
    ck_assert_int_eq(fk.verdicts[0], RX_ACCEPTED);
    ck_assert_int_eq(fk.inputs[0].called_brain_at, fk.ask.signals_cut_at);
    ck_assert_int_eq(fk.inputs[0].n_calls, 1);
    ck_assert_str_eq(fk.inputs[0].calls[0].name, tool);
    ck_assert_int_eq(fk.n_chunks, 0); /* a tool-only reply creates no message */
    ck_assert_int_eq(fk.live.assistant.len, answers);
    ck_assert_int_eq(rx_state_pending_tools(&fk.live), 1);
    run_pending_tools(tk);
    ck_assert_int_eq(run_ask(), 0);
    ck_assert_int_eq(fk.n_inputs, 2);
    assert_streamed_as(answer_prefix, true, true);
    toolkit_destroy(tk);
}

START_TEST(test_ask_calculator)
{
    round_trip("what is 2+3?", "calculator", "2+3 = 5");
    ck_assert_str_eq(fk.live.tools.items[0].parameters, "{\"expression\":\"2+3\"}");
    /* The same question again: a new, distinct call id. */
    round_trip("what is 2+3?", "calculator", "2+3 = 5");
    ck_assert_str_ne(fk.live.tools.items[0].id, fk.live.tools.items[1].id);
}
END_TEST

START_TEST(test_ask_calculator_error)
{
    round_trip("calculate 7/0", "calculator",
               "The calculator said: Error: division by zero");
}
END_TEST

START_TEST(test_ask_clock)
{
    round_trip("what time is it?", "clock", "The time is 2");
    ck_assert(fk.inputs[1].content[strlen(fk.inputs[1].content) - 2] == 'Z');
}
END_TEST

START_TEST(test_ask_cancel_mid_stream)
{
    user_says("a fairly long message to be cut short");
    fk.cancel_after = 2;
    ck_assert_int_eq(run_ask(), -ECANCELED);
    /* Started, two chunks, then nothing: no complete after a cancel. */
    ck_assert_int_eq(fk.n_inputs, 1);
    ck_assert_int_eq(fk.inputs[0].type, RX_IN_BRAIN_SEND_MESSAGE_START);
    ck_assert_int_eq(fk.n_chunks, 2);
    ck_assert_str_eq(fk.streamed.data, "Echo: a ");
}
END_TEST

START_TEST(test_ask_cancelled_before_start)
{
    user_says("hello");
    fk.cancelled = true;
    ck_assert_int_eq(run_ask(), -ECANCELED);
    ck_assert_int_eq(fk.n_inputs, 0);
    ck_assert_int_eq(fk.n_chunks, 0);
}
END_TEST

START_TEST(test_ask_resume)
{
    struct rx_input in = {.type = RX_IN_BRAIN_SEND_MESSAGE_START};

    user_says("again");
    /* An earlier run of this ask started the message, then the server died. */
    in.called_brain_at = fk.ask.signals_cut_at;
    ck_assert_int_eq(rx_input_set_str(&in.message_id, "m-resume"), 0);
    apply(&in);
    fk.ask.resume_message_id = "m-resume";
    ck_assert_int_eq(run_ask(), 0);
    assert_streamed("Echo: again", false);
    ck_assert_str_eq(fk.inputs[0].message_id, "m-resume");
    ck_assert_int_eq(fk.live.assistant.len, 1);
    ck_assert_int_eq(fk.live.assistant.items[0].status, RX_STATUS_COMPLETE);
}
END_TEST

/*
 * A resumed ask with the text already shown (SPEC 3.7): the builtin brain
 * streams only what follows it, and the complete answer is byte for byte
 * the uninterrupted one; text shown that is not its beginning is kept and
 * followed by a visible mark and the answer.
 */
START_TEST(test_ask_resume_continues_text_shown)
{
    static const struct {
        const char *shown, *streamed, *complete;
    } cases[] = {
        {"Echo: ag", "ain", "Echo: again"},
        {"E", "cho: again", "Echo: again"},
        {"Echo: again", "", "Echo: again"},
        {"Something else", "\n\n--- restarted after an interruption ---\n\nEcho: again",
         "Something else\n\n--- restarted after an interruption ---\n\nEcho: again"},
    };

    user_says("again");
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct rx_input in = {.type = RX_IN_BRAIN_SEND_MESSAGE_START};
        char id[32];
        const struct rx_input *last;

        snprintf(id, sizeof(id), "m-resume-%zu", i);
        in.called_brain_at = fk.ask.signals_cut_at;
        ck_assert_int_eq(rx_input_set_str(&in.message_id, id), 0);
        apply(&in);
        fk.ask.resume_message_id = id;
        fk.ask.resume_text = cases[i].shown;
        fk.ask.resume_len = strlen(cases[i].shown);
        ck_assert_int_eq(run_ask(), 0);
        last = &fk.inputs[fk.n_inputs - 1];
        ck_assert_int_eq(last->type, RX_IN_BRAIN_SEND_MESSAGE_COMPLETE);
        ck_assert_str_eq(last->message_id, id);
        ck_assert_msg(!strcmp(last->content, cases[i].complete), "case %zu: %s", i,
                      last->content);
        ck_assert_msg(
            !strcmp(fk.streamed.data ? fk.streamed.data : "", cases[i].streamed),
            "case %zu streamed: %s", i, fk.streamed.data);
    }
    fk.ask.resume_text = NULL;
    fk.ask.resume_len = 0;
}
END_TEST

START_TEST(test_ask_compresses_history)
{
    int64_t prev_cut = 0;
    int compressions = 0;

    brain->destroy(brain);
    brain = make_brain(8, 4, 2);
    fk.max_chars = 8;
    ck_assert_ptr_nonnull(brain);
    for (int i = 0; i < 8; i++) {
        char text[32];
        const struct rx_input *c;

        snprintf(text, sizeof(text), "message %d", i);
        user_says(text);
        ck_assert_int_eq(run_ask(), 0);
        c = &fk.inputs[0];
        if (c->type == RX_IN_BRAIN_COMPRESS_HISTORY) {
            compressions++;
            ck_assert_int_eq(fk.verdicts[0], RX_ACCEPTED);
            ck_assert_int_eq(c->called_brain_at, fk.ask.signals_cut_at);
            ck_assert_int_le(c->cut_at, fk.ask.signals_cut_at);
            ck_assert_int_gt(c->cut_at, prev_cut);
            ck_assert_ptr_nonnull(strstr(c->text, "Up to "));
            ck_assert_str_eq(fk.live.context_summary, c->text);
            prev_cut = c->cut_at;
            /* Then the answer, to the message just sent (it was kept). */
            ck_assert_int_eq(fk.n_inputs, 3);
            ck_assert_int_eq(fk.inputs[1].type, RX_IN_BRAIN_SEND_MESSAGE_START);
            ck_assert_str_eq(fk.inputs[2].content + strlen("Echo: "), text);
        } else {
            char want[64];

            snprintf(want, sizeof(want), "Echo: %s", text);
            assert_streamed(want, true);
        }
        ck_assert_int_eq(fk.live.summary_cut_at, prev_cut);
    }
    /* 8 messages, 8 answers, more than 4 kept each time: it compressed. */
    ck_assert_int_ge(compressions, 2);
    ck_assert_ptr_nonnull(strstr(fk.live.context_summary, "message"));
    ck_assert_uint_le(strlen(fk.live.context_summary), BUILTIN_REPLY_SUMMARY_MAX);
}
END_TEST

START_TEST(test_ask_slow_message)
{
    user_says("/slow stop me");
    fk.cancel_after = 1;
    ck_assert_int_eq(run_ask(), -ECANCELED);
    ck_assert_int_eq(fk.last_sleep_ms, 30 * BRAIN_BUILTIN_SLOW_FACTOR);
}
END_TEST

START_TEST(test_create)
{
    struct brain_builtin_config cfg;
    struct brain *b = brain_builtin_create(NULL);

    ck_assert_ptr_nonnull(b);
    ck_assert_str_eq(b->name, "builtin");
    b->destroy(b);
    brain_builtin_config_init(&cfg);
    cfg.call_id_prefix = "a-prefix-that-is-much-too-long-to-fit-an-id";
    ck_assert_ptr_null(brain_builtin_create(&cfg));
}
END_TEST

START_TEST(test_call_id_prefix)
{
    struct brain_builtin_config cfg;

    brain->destroy(brain);
    brain_builtin_config_init(&cfg);
    cfg.call_id_prefix = "s7";
    brain = brain_builtin_create(&cfg);
    ck_assert_ptr_nonnull(brain);
    user_says("1+1");
    ck_assert_int_eq(run_ask(), 0);
    ck_assert(!strncmp(fk.inputs[0].calls[0].id, "s7-", 3));
}
END_TEST

Suite *brain_builtin_suite(void)
{
    Suite *s = suite_create("brain_builtin");
    TCase *tc = tcase_create("decide");

    tcase_add_loop_test(tc, test_decision, 0, sizeof(decisions) / sizeof(decisions[0]));
    tcase_add_test(tc, test_call_ids);
    tcase_add_test(tc, test_create);
    suite_add_tcase(s, tc);

    tc = tcase_create("ask");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_ask_echo);
    tcase_add_test(tc, test_ask_utf8_chunks);
    tcase_add_test(tc, test_ask_calculator);
    tcase_add_test(tc, test_ask_calculator_error);
    tcase_add_test(tc, test_ask_clock);
    tcase_add_test(tc, test_ask_cancel_mid_stream);
    tcase_add_test(tc, test_ask_cancelled_before_start);
    tcase_add_test(tc, test_ask_resume);
    tcase_add_test(tc, test_ask_resume_continues_text_shown);
    tcase_add_test(tc, test_ask_compresses_history);
    tcase_add_test(tc, test_ask_slow_message);
    tcase_add_test(tc, test_call_id_prefix);
    suite_add_tcase(s, tc);
    return s;
}
