/*
 * check_brain_openai - the openai brain against tests/fakes/fake_openai, a real
 * OpenAI-compatible server on 127.0.0.1 started as a child process (once per
 * TCase, in an unchecked fixture). Each test drives ask() with a fake
 * struct brain_ask that plays the session: it applies every dispatched input
 * to its own state through rx_machine (so a sequence the machine would reject
 * fails the test), records inputs and chunks, and cancels on request. The
 * fake server records every request body (GET /__requests), so the tests
 * assert exactly what was sent: messages in order, tools, summary requests.
 * No timing is asserted: stalls are 300 ms against the fake's 5 s, and a
 * cancel that is not prompt shows as a test timeout, not a flaky compare.
 * The fake is build/tests/fake_openai next to the runner, or $FAKE_OPENAI.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <curl/curl.h>
#include <jansson.h>
#include <netinet/in.h>

#include "effects/brain_openai.h"
#include "effects/toolkit.h"
#include "state_machine/rx_context.h"
#include "state_machine/rx_machine.h"

Suite *brain_openai_suite(void);

extern char **environ;

static pid_t fake_pid;
static int fake_port;
static int fake_stdin = -1; /* closing it (or dying) stops the fake */
static struct toolkit *tools;

/* Test texts use ' for " (q() swaps them in place of a copy). */
static char *q(const char *s)
{
    char *d = strdup(s);

    ck_assert_ptr_nonnull(d);
    for (char *p = d; *p; p++)
        if (*p == '\'')
            *p = '"';
    return d;
}

static json_t *qjson(const char *s)
{
    char *t = q(s);
    json_error_t e;
    json_t *v = json_loads(t, JSON_DECODE_ANY, &e);

    ck_assert_msg(v != NULL, "bad test json '%s': %s", t, e.text);
    free(t);
    return v;
}

/* ---- the fake server --------------------------------------------------------- */

static void fake_start(void)
{
    char exe[PATH_MAX], path[PATH_MAX + 16];
    const char *env = getenv("FAKE_OPENAI");
    char *argv[] = {path, (char *)"--exit-on-eof", NULL};
    posix_spawn_file_actions_t fa;
    ssize_t n;
    char line[64] = "";
    int fds[2], in[2];
    FILE *f;

    ck_assert_int_eq(curl_global_init(CURL_GLOBAL_DEFAULT), CURLE_OK);
    /* The developer's own provider settings must not leak into the tests. */
    unsetenv("REFLEXOR_LLM_BASE_URL");
    unsetenv("REFLEXOR_LLM_MODEL");
    if (env && *env) {
        snprintf(path, sizeof(path), "%s", env);
    } else {
        n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        ck_assert_int_gt(n, 0);
        exe[n] = '\0';
        *strrchr(exe, '/') = '\0';
        snprintf(path, sizeof(path), "%s/fake_openai", exe);
    }
    ck_assert_int_eq(pipe2(fds, O_CLOEXEC), 0);
    ck_assert_int_eq(pipe2(in, O_CLOEXEC), 0);
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    ck_assert_msg(posix_spawn(&fake_pid, path, &fa, NULL, argv, environ) == 0,
                  "cannot start %s", path);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    close(in[0]);
    fake_stdin = in[1];
    f = fdopen(fds[0], "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_msg(fgets(line, sizeof(line), f) &&
                      sscanf(line, "port %d", &fake_port) == 1,
                  "%s did not say its port", path);
    fclose(f);
    tools = toolkit_create();
    ck_assert_ptr_nonnull(tools);
    ck_assert_int_eq(toolkit_add_builtins(tools), 0);
}

static void fake_stop(void)
{
    int status;

    close(fake_stdin);
    fake_stdin = -1;
    kill(fake_pid, SIGTERM);
    waitpid(fake_pid, &status, 0);
    toolkit_destroy(tools);
    curl_global_cleanup();
}

static size_t collect(char *p, size_t size, size_t n, void *ud)
{
    struct rx_buf *b = ud;

    return rx_buf_append(b, p, size * n) ? 0 : size * n;
}

/* GET or POST a control route of the fake; the parsed JSON answer (new). */
static json_t *fake_get(const char *route, bool post)
{
    CURL *c = curl_easy_init();
    struct rx_buf b;
    char url[128];
    json_t *v;

    rx_buf_init(&b, 64u << 20);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", fake_port, route);
    curl_easy_setopt(c, CURLOPT_URL, url);
    if (post)
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    ck_assert_int_eq(curl_easy_perform(c), CURLE_OK);
    curl_easy_cleanup(c);
    v = json_loadb(b.data, b.len, 0, NULL);
    ck_assert_ptr_nonnull(v);
    rx_buf_release(&b);
    return v;
}

static void fake_reset(void)
{
    json_decref(fake_get("/__reset", true));
}

/* ---- the fake session --------------------------------------------------------- */

struct session {
    struct brain_ask ask;
    struct rx_state snap; /* what ask->view points to: the view of st */
    struct rx_state st;   /* the session's state: dispatched inputs go here */
    json_t *inputs;       /* every dispatched input, encoded */
    json_t *chunks;       /* [[message id, delta], ...] */
    json_t *reasonings;   /* the same, of reasoning deltas */
    size_t reasoned;      /* reasoning deltas relayed before the first chunk */
    int efd;
    atomic_bool cancelled;
    int cancel_after_chunks; /* cancel from inside the n-th chunk; 0 never */
    int cancel_after_ms;     /* cancel from a thread after this; 0 never */
    int sleeps;
    pthread_t canceller;
};

static void cancel(struct session *s)
{
    uint64_t one = 1;

    atomic_store(&s->cancelled, true);
    ck_assert_int_eq(write(s->efd, &one, sizeof(one)), sizeof(one));
}

static int s_dispatch(struct brain_ask *ask, struct rx_input *in)
{
    struct session *s = (struct session *)ask;
    struct rx_input copy;
    struct rx_outcome out;
    struct rx_buf b;
    json_t *enc;

    if (atomic_load(&s->cancelled))
        return -ECANCELED;
    ck_assert_int_eq(rx_input_copy(in, &copy), 0);
    copy.has_timestamp = false;
    rx_buf_init(&b, 1 << 24);
    ck_assert_int_eq(rx_input_encode(&copy, &b), 0);
    enc = json_loads(b.data, 0, NULL);
    ck_assert_ptr_nonnull(enc);
    json_object_del(enc, "timestamp"); /* the session's stamp, not the brain's */
    ck_assert_int_eq(json_array_append_new(s->inputs, enc), 0);
    rx_buf_release(&b);
    /* Stamp it the way the session does: strictly after everything before. */
    copy.timestamp = s->st.updated_at + 1;
    copy.has_timestamp = true;
    ck_assert_int_eq(rx_machine_apply(&s->st, &copy, &out), 0);
    ck_assert_msg(out.verdict != RX_REJECTED, "input %s rejected: %s",
                  rx_input_type_name(copy.type), rx_reason_name(out.reason));
    rx_input_release(&copy);
    return 0;
}

static int s_chunk(struct brain_ask *ask, const char *id, const char *delta)
{
    struct session *s = (struct session *)ask;

    if (atomic_load(&s->cancelled))
        return -ECANCELED;
    if (!json_array_size(s->chunks))
        s->reasoned = json_array_size(s->reasonings);
    ck_assert_int_eq(json_array_append_new(s->chunks, json_pack("[s, s]", id, delta)), 0);
    if (s->cancel_after_chunks &&
        json_array_size(s->chunks) == (size_t)s->cancel_after_chunks)
        cancel(s); /* the user presses stop; the brain must notice by itself */
    return 0;
}

static int s_reasoning(struct brain_ask *ask, const char *id, const char *delta)
{
    struct session *s = (struct session *)ask;

    if (atomic_load(&s->cancelled))
        return -ECANCELED;
    ck_assert_int_eq(json_array_append_new(s->reasonings, json_pack("[s, s]", id, delta)),
                     0);
    return 0;
}

static bool s_is_cancelled(struct brain_ask *ask)
{
    return atomic_load(&((struct session *)ask)->cancelled);
}

static int s_sleep_ms(struct brain_ask *ask, int ms)
{
    struct session *s = (struct session *)ask;
    struct pollfd p = {.fd = s->efd, .events = POLLIN};

    s->sleeps++;
    return poll(&p, 1, ms) > 0 ? -ECANCELED : 0;
}

static void *canceller(void *arg)
{
    struct session *s = arg;

    usleep((useconds_t)s->cancel_after_ms * 1000);
    cancel(s);
    return NULL;
}

/* A session over `state` (JSON, ' for "), asking for signals up to `cut`. */
static void session_init(struct session *s, const char *state, int64_t cut)
{
    json_t *j = qjson(state);
    struct rx_error err = {""};

    memset(s, 0, sizeof(*s));
    ck_assert_msg(rx_state_decode(j, &s->st, &err) == 0, "%s", err.text);
    ck_assert_int_eq(rx_context_view(&s->st, 0, &s->snap), 0);
    json_decref(j);
    s->inputs = json_array();
    s->chunks = json_array();
    s->reasonings = json_array();
    s->efd = eventfd(0, EFD_CLOEXEC);
    ck_assert_int_ge(s->efd, 0);
    s->ask = (struct brain_ask){.view = &s->snap,
                                .signals_cut_at = cut,
                                .system_prompt = "You are terse.",
                                .tools = tools,
                                .dispatch = s_dispatch,
                                .chunk = s_chunk,
                                .reasoning = s_reasoning,
                                .is_cancelled = s_is_cancelled,
                                .cancel_fd = s->efd,
                                .sleep_ms = s_sleep_ms};
}

/* Take the view of the session's current state for the next ask. */
static void session_next(struct session *s, int64_t cut)
{
    rx_state_release(&s->snap);
    ck_assert_int_eq(rx_context_view(&s->st, 0, &s->snap), 0);
    s->ask.signals_cut_at = cut;
    json_array_clear(s->inputs);
    json_array_clear(s->chunks);
}

static void session_release(struct session *s)
{
    rx_state_release(&s->snap);
    rx_state_release(&s->st);
    json_decref(s->inputs);
    json_decref(s->chunks);
    json_decref(s->reasonings);
    close(s->efd);
}

/* Apply an outside input (a tool result) to the session. */
static void session_apply(struct session *s, const char *input)
{
    json_t *j = qjson(input);
    struct rx_input in;
    struct rx_outcome out;

    ck_assert_int_eq(rx_input_parse(j, &in, NULL, NULL), 0);
    in.timestamp = s->st.updated_at + 1;
    in.has_timestamp = true;
    ck_assert_int_eq(rx_machine_apply(&s->st, &in, &out), 0);
    ck_assert_int_eq(out.verdict, RX_ACCEPTED);
    rx_input_release(&in);
    json_decref(j);
}

/* Run one ask with a brain made from `config` (' for "; PORT is the fake's port). */
static int run_ask(struct session *s, const char *config)
{
    struct rx_error err = {""};
    const char *at = strstr(config, "PORT");
    char text[1024];
    json_t *cfg;
    struct brain *b;
    int rc;

    ck_assert_ptr_nonnull(at);
    snprintf(text, sizeof(text), "%.*s%d%s", (int)(at - config), config, fake_port,
             at + 4);
    cfg = qjson(text);
    b = brain_openai_create(cfg, tools, &err);
    ck_assert_msg(b != NULL, "%s", err.text);
    json_decref(cfg);
    /* The view the runtime would hand this brain. */
    rx_state_release(&s->snap);
    ck_assert_int_eq(rx_context_view(&s->st, b->view_messages, &s->snap), 0);
    if (s->cancel_after_ms)
        ck_assert_int_eq(pthread_create(&s->canceller, NULL, canceller, s), 0);
    rc = b->ask(b, &s->ask);
    if (s->cancel_after_ms)
        pthread_join(s->canceller, NULL);
    b->destroy(b);
    return rc;
}

#define CONFIG(model, extra)                                                             \
    "{'base_url':'http://127.0.0.1:PORT/v1/','model':'" model "','api_key_env':'',"      \
    "'connect_timeout_ms':5000,'stall_timeout_ms':10000,'retries':2,'backoff_ms':"       \
    "1" extra "}"

#define S_HI                                                                             \
    "{'updatedAt':10,'userMessages':[{'kind':'user','id':'m1','content':'hi',"           \
    "'receivedAt':10}],'assistantMessages':[],'toolCallRecords':[],'calledBrainAt':0,"   \
    "'contextSummary':'','summaryCutAt':0}"

/* What a complete reports about its answer: the fake's usage, and a clock. */
#define USED(p, c)                                                                       \
    ",'usage':{'promptTokens':" #p ",'completionTokens':" #c "},'firstTokenAt':'*'"

/* Compare JSON with an expected text (' for "); "*" in a string matches any. */
static bool match(json_t *got, json_t *want)
{
    if (json_is_string(want) && !strcmp(json_string_value(want), "*"))
        return got != NULL;
    if (json_is_object(want)) {
        const char *k;
        json_t *v;

        if (!json_is_object(got) || json_object_size(got) != json_object_size(want))
            return false;
        json_object_foreach(want, k,
                            v) if (!match(json_object_get(got, k), v)) return false;
        return true;
    }
    if (json_is_array(want)) {
        if (!json_is_array(got) || json_array_size(got) != json_array_size(want))
            return false;
        for (size_t i = 0; i < json_array_size(want); i++)
            if (!match(json_array_get(got, i), json_array_get(want, i)))
                return false;
        return true;
    }
    return json_equal(got, want);
}

static void expect_json(json_t *got, const char *want_text, const char *what)
{
    json_t *want = qjson(want_text);
    char *g = json_dumps(got, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
    char *w = json_dumps(want, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);

    ck_assert_msg(match(got, want), "%s:\n got: %s\nwant: %s", what, g, w);
    free(g);
    free(w);
    json_decref(want);
}

/* The id every input of the answer used (the generated message id). */
static const char *input_str(struct session *s, size_t i, const char *key)
{
    return json_string_value(json_object_get(json_array_get(s->inputs, i), key));
}

static json_t *requests(void)
{
    return fake_get("/__requests", false);
}

static json_t *request_body(json_t *reqs, size_t i)
{
    return json_object_get(json_array_get(reqs, i), "body");
}

static void setup(void)
{
    fake_reset();
}

/* ---- tests ------------------------------------------------------------------------ */

START_TEST(test_text)
{
    struct session s;
    json_t *reqs, *body, *schemas;

    session_init(&s, S_HI, 10);
    ck_assert_int_eq(run_ask(&s, CONFIG("text", ",'temperature':0.5,'max_tokens':64")),
                     0);
    expect_json(
        s.inputs,
        "[{'type':'brain-send-message-start','calledBrainAt':10,'messageId':'*'},"
        "{'type':'brain-send-message-complete','calledBrainAt':10,'messageId':'*',"
        "'content':'Hello world!'" USED(10, 5) "}]",
        "inputs");
    ck_assert_str_eq(input_str(&s, 0, "messageId"), input_str(&s, 1, "messageId"));
    ck_assert_uint_eq(strlen(input_str(&s, 0, "messageId")), 36);
    expect_json(s.chunks, "[['*','Hello'],['*',' world'],['*','!']]", "chunks");
    ck_assert_str_eq(json_string_value(json_array_get(json_array_get(s.chunks, 0), 0)),
                     input_str(&s, 0, "messageId"));

    reqs = requests();
    ck_assert_uint_eq(json_array_size(reqs), 1);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(reqs, 0), "path")),
                     "/v1/chat/completions");
    /* No key configured: no Authorization header at all. */
    ck_assert(json_is_null(json_object_get(json_array_get(reqs, 0), "authorization")));
    body = request_body(reqs, 0);
    schemas = toolkit_schemas(tools);
    ck_assert(json_equal(json_object_get(body, "tools"), schemas));
    json_object_del(body, "tools");
    expect_json(
        body,
        "{'model':'text','messages':[{'role':'system','content':'You are terse.'},"
        "{'role':'user','content':'hi'}],'stream':true,"
        "'stream_options':{'include_usage':true},'temperature':0.5,"
        "'max_tokens':64}",
        "request");
    json_decref(schemas);
    json_decref(reqs);
    session_release(&s);
}
END_TEST

START_TEST(test_api_key_and_resume)
{
    struct session s;
    json_t *reqs;

    session_init(
        &s,
        "{'updatedAt':11,'userMessages':[{'kind':'user','id':'m1','content':'hi',"
        "'receivedAt':10}],'assistantMessages':[{'kind':'assistant','id':'a1',"
        "'content':'','receivedAt':11,'updatedAt':11,'status':'streaming',"
        "'calledBrainAt':10}],'toolCallRecords':[],'calledBrainAt':10,"
        "'contextSummary':'','summaryCutAt':0}",
        10);
    s.ask.resume_message_id = "a1";
    setenv("FAKE_TEST_KEY", "sk-test", 1);
    ck_assert_int_eq(run_ask(&s, CONFIG("text", ",'api_key_env':'FAKE_TEST_KEY'")), 0);
    unsetenv("FAKE_TEST_KEY");
    /* The streaming message is reused: no second start. */
    expect_json(s.inputs,
                "[{'type':'brain-send-message-complete','calledBrainAt':10,"
                "'messageId':'a1','content':'Hello world!'" USED(10, 5) "}]",
                "inputs");
    reqs = requests();
    ck_assert_str_eq(
        json_string_value(json_object_get(json_array_get(reqs, 0), "authorization")),
        "Bearer sk-test");
    json_decref(reqs);
    session_release(&s);
}
END_TEST

#define S_STREAMING                                                                      \
    "{'updatedAt':11,'userMessages':[{'kind':'user','id':'m1','content':'hi',"           \
    "'receivedAt':10}],'assistantMessages':[{'kind':'assistant','id':'a1',"              \
    "'content':'','receivedAt':11,'updatedAt':11,'status':'streaming',"                  \
    "'calledBrainAt':10}],'toolCallRecords':[],'calledBrainAt':10,"                      \
    "'contextSummary':'','summaryCutAt':0}"

/*
 * A resumed answer keeps the text shown (SPEC 3.7): with `continue` it is
 * sent as a trailing assistant message and the reply continues it; without,
 * the new answer follows it after a visible mark. Either way the complete
 * message begins with it and no chunk repeats it.
 */
START_TEST(test_resume_continues_text_shown)
{
    static const struct {
        const char *extra, *chunks, *content;
        bool prefix;
    } cases[] = {
        {",'continue':true", "[['a1','Hello'],['a1',' world'],['a1','!']]",
         "Kept text, Hello world!", true},
        {"",
         "[['a1','\\n\\n--- restarted after an interruption ---\\n\\n'],"
         "['a1','Hello'],['a1',' world'],['a1','!']]",
         "Kept text, \n\n--- restarted after an interruption ---\n\nHello world!", false},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct session s;
        json_t *reqs, *msgs, *tail, *in;
        char config[512];

        session_init(&s, S_STREAMING, 10);
        s.ask.resume_message_id = "a1";
        s.ask.resume_text = "Kept text, ";
        s.ask.resume_len = strlen("Kept text, ");
        snprintf(config, sizeof(config), CONFIG("text", "%s"), cases[i].extra);
        ck_assert_int_eq(run_ask(&s, config), 0);
        expect_json(s.chunks, cases[i].chunks, "chunks");
        in = json_array_get(s.inputs, json_array_size(s.inputs) - 1);
        ck_assert_str_eq(json_string_value(json_object_get(in, "messageId")), "a1");
        ck_assert_str_eq(json_string_value(json_object_get(in, "content")),
                         cases[i].content);
        reqs = requests();
        msgs = json_object_get(
            json_object_get(json_array_get(reqs, json_array_size(reqs) - 1), "body"),
            "messages");
        tail = json_array_get(msgs, json_array_size(msgs) - 1);
        if (cases[i].prefix) {
            ck_assert_str_eq(json_string_value(json_object_get(tail, "role")),
                             "assistant");
            ck_assert_str_eq(json_string_value(json_object_get(tail, "content")),
                             "Kept text, ");
        } else {
            ck_assert_str_eq(json_string_value(json_object_get(tail, "role")), "user");
        }
        json_decref(reqs);
        session_release(&s);
    }
}
END_TEST

/* A resumed message is completed even when the new reply only calls tools,
 * or it would stay `streaming` and keep its ask wanted for ever. */
START_TEST(test_resume_tool_only)
{
    struct session s;

    session_init(&s, S_STREAMING, 10);
    s.ask.resume_message_id = "a1";
    ck_assert_int_eq(run_ask(&s, CONFIG("text-tools", "")), 0);
    expect_json(
        s.inputs,
        "[{'type':'brain-send-message-complete','calledBrainAt':10,"
        "'messageId':'a1','content':'Let me check.'" USED(
            10,
            5) "},"
               "{'type':'brain-call-tools','calledBrainAt':10,'toolCalls':{'call_calc':"
               "{'name':'calculator','parameters':'{\\'expression\\':\\'6*7\\'}'}}}]",
        "text and tools");
    session_release(&s);
    session_init(&s, S_STREAMING, 10);
    s.ask.resume_message_id = "a1";
    ck_assert_int_eq(run_ask(&s, CONFIG("tools", "")), 0);
    ck_assert_uint_eq(json_array_size(s.inputs), 2);
    expect_json(json_array_get(s.inputs, 0),
                "{'type':'brain-send-message-complete','calledBrainAt':10,"
                "'messageId':'a1','content':'','usage':{'promptTokens':10,"
                "'completionTokens':5}}",
                "tools only");
    ck_assert_int_eq(s.st.assistant.items[0].status, RX_STATUS_COMPLETE);
    session_release(&s);
    session_init(&s, S_STREAMING, 10);
    s.ask.resume_message_id = "a1";
    ck_assert_int_eq(run_ask(&s, CONFIG("unauthorized", "")), 0);
    ck_assert_uint_eq(json_array_size(s.inputs), 1);
    ck_assert_str_eq(input_str(&s, 0, "messageId"), "a1");
    session_release(&s);
}
END_TEST

START_TEST(test_parallel_tools)
{
    struct session s;

    session_init(&s, S_HI, 10);
    ck_assert_int_eq(run_ask(&s, CONFIG("tools", "")), 0);
    /* A tool-only reply starts no message. */
    expect_json(
        s.inputs,
        "[{'type':'brain-call-tools','calledBrainAt':10,'toolCalls':{"
        "'call_calc':{'name':'calculator','parameters':'{\\'expression\\':\\'2+3\\'}'},"
        "'call_clock':{'name':'clock','parameters':'{\\'timezone\\':\\'UTC\\'}'}}}]",
        "inputs");
    ck_assert_uint_eq(json_array_size(s.chunks), 0);
    ck_assert_uint_eq(s.st.tools.len, 2);
    ck_assert_str_eq(s.st.tools.items[0].id, "call_calc");
    session_release(&s);
}
END_TEST

START_TEST(test_text_then_tools)
{
    struct session s;

    session_init(&s, S_HI, 10);
    ck_assert_int_eq(run_ask(&s, CONFIG("text-tools", "")), 0);
    expect_json(
        s.inputs,
        "[{'type':'brain-send-message-start','calledBrainAt':10,'messageId':'*'},"
        "{'type':'brain-send-message-complete','calledBrainAt':10,'messageId':'*',"
        "'content':'Let me check.'" USED(
            10, 5) "},"
                   "{'type':'brain-call-tools','calledBrainAt':10,'toolCalls':{"
                   "'call_calc':{'name':'calculator','parameters':'{\\'expression\\':\\'"
                   "6*7\\'}'}}}"
                   "]",
        "inputs");
    session_release(&s);
}
END_TEST

/* The tool round trip: call, the tool's result, then the answer with it. */
START_TEST(test_tool_round_trip)
{
    struct session s;
    json_t *reqs;

    session_init(&s,
                 "{'updatedAt':10,'userMessages':[{'kind':'user','id':'m1','content':"
                 "'what is 2+3?','receivedAt':10}],'assistantMessages':[],"
                 "'toolCallRecords':[],'calledBrainAt':0,'contextSummary':'',"
                 "'summaryCutAt':0}",
                 10);
    ck_assert_int_eq(run_ask(&s, CONFIG("tool-then-text", "")), 0);
    expect_json(
        s.inputs,
        "[{'type':'brain-call-tools','calledBrainAt':10,'toolCalls':{"
        "'call_1':{'name':'calculator','parameters':'{\\'expression\\':\\'2+3\\'}'}}}]",
        "first ask");
    session_apply(&s, "{'type':'toolkit-respond','toolCallId':'call_1','result':'5'}");
    session_next(&s, s.st.updated_at);
    ck_assert_int_eq(run_ask(&s, CONFIG("tool-then-text", "")), 0);
    expect_json(
        s.inputs,
        "[{'type':'brain-send-message-start','calledBrainAt':12,'messageId':'*'},"
        "{'type':'brain-send-message-complete','calledBrainAt':12,'messageId':'*',"
        "'content':'2+3 = 5'" USED(10, 5) "}]",
        "second ask");
    reqs = requests();
    ck_assert_uint_eq(json_array_size(reqs), 2);
    /* RX_TRANSCRIPT=1 prints both request bodies (for the docs). */
    if (getenv("RX_TRANSCRIPT"))
        json_dumpf(reqs, stderr, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    expect_json(json_object_get(request_body(reqs, 1), "messages"),
                "[{'role':'system','content':'You are terse.'},"
                "{'role':'user','content':'what is 2+3?'},"
                "{'role':'assistant','content':null,'tool_calls':[{'id':'call_1',"
                "'type':'function','function':{'name':'calculator',"
                "'arguments':'{\\'expression\\':\\'2+3\\'}'}}]},"
                "{'role':'tool','tool_call_id':'call_1','content':'5'}]",
                "second request");
    json_decref(reqs);
    session_release(&s);
}
END_TEST

/* An older unloaded call is offered through load_tool_call; loading it makes
 * a second request that carries the call and its result. */
START_TEST(test_load_tool_call)
{
    struct session s;
    json_t *reqs, *tl;

    session_init(&s,
                 "{'updatedAt':30,'userMessages':[{'kind':'user','id':'m0','content':"
                 "'compute 6*7','receivedAt':12},{'kind':'user','id':'m1','content':"
                 "'what was it?','receivedAt':30}],'assistantMessages':[],"
                 "'toolCallRecords':[{'id':'c-old','name':'calculator','parameters':"
                 "'{}','calledAt':15,'result':{'isSuccess':true,'content':'42',"
                 "'receivedAt':16},'isLoaded':false}],'calledBrainAt':20,"
                 "'contextSummary':'We computed 6*7.','summaryCutAt':20}",
                 30);
    ck_assert_int_eq(run_ask(&s, CONFIG("load", "")), 0);
    expect_json(
        s.inputs,
        "[{'type':'brain-load-tool-call','calledBrainAt':30,'toolCallId':'c-old'},"
        "{'type':'brain-send-message-start','calledBrainAt':30,'messageId':'*'},"
        "{'type':'brain-send-message-complete','calledBrainAt':30,'messageId':'*',"
        "'content':'It was 42.'" USED(20, 10) "}]",
        "inputs");
    reqs = requests();
    ck_assert_uint_eq(json_array_size(reqs), 2);
    tl = json_object_get(request_body(reqs, 0), "tools");
    ck_assert_uint_eq(json_array_size(tl), toolkit_count(tools) + 1);
    expect_json(
        json_array_get(tl, json_array_size(tl) - 1),
        "{'type':'function','function':{'name':'load_tool_call','description':'*',"
        "'parameters':{'type':'object','properties':{'toolCallId':{'type':"
        "'string','description':'*'}},'required':['toolCallId']}}}",
        "load_tool_call schema");
    expect_json(json_object_get(request_body(reqs, 0), "messages"),
                "[{'role':'system','content':'You are terse.'},"
                "{'role':'user','content':'[Previous conversation summary]\\nWe computed "
                "6*7.'},{'role':'system','content':'*'},"
                "{'role':'user','content':'what was it?'}]",
                "first request");
    expect_json(json_object_get(request_body(reqs, 1), "messages"),
                "[{'role':'system','content':'You are terse.'},"
                "{'role':'user','content':'[Previous conversation summary]\\nWe computed "
                "6*7.'},{'role':'assistant','content':null,'tool_calls':[{'id':'c-old',"
                "'type':'function','function':{'name':'calculator','arguments':'{}'}}]},"
                "{'role':'tool','tool_call_id':'c-old','content':'42'},"
                "{'role':'user','content':'what was it?'}]",
                "second request");
    /* Loaded, nothing unloaded is left: load_tool_call is no longer offered. */
    ck_assert_uint_eq(json_array_size(json_object_get(request_body(reqs, 1), "tools")),
                      toolkit_count(tools));
    ck_assert(s.st.tools.items[0].is_loaded);
    json_decref(reqs);
    session_release(&s);
}
END_TEST

/* An unknown id is not sent to the session; the model is told instead. */
START_TEST(test_load_unknown_id)
{
    struct session s;
    json_t *reqs;

    session_init(&s,
                 "{'updatedAt':30,'userMessages':[{'kind':'user','id':'m1','content':"
                 "'what was it?','receivedAt':30}],'assistantMessages':[],"
                 "'toolCallRecords':[{'id':'c-old','name':'calculator','parameters':"
                 "'{}','calledAt':15,'result':{'isSuccess':true,'content':'42',"
                 "'receivedAt':16},'isLoaded':false}],'calledBrainAt':20,"
                 "'contextSummary':'S','summaryCutAt':20}",
                 30);
    ck_assert_int_eq(run_ask(&s, CONFIG("load-bad", "")), 0);
    expect_json(
        s.inputs,
        "[{'type':'brain-send-message-start','calledBrainAt':30,'messageId':'*'},"
        "{'type':'brain-send-message-complete','calledBrainAt':30,'messageId':'*',"
        "'content':'Sorry.'" USED(20, 10) "}]",
        "inputs");
    reqs = requests();
    ck_assert_uint_eq(json_array_size(reqs), 2);
    json_decref(reqs);
    session_release(&s);
}
END_TEST

/* Over the budget (the history's texts are 29 bytes, 8 estimated tokens, by
 * the one policy of rx_context): a summary request for all but the newest two
 * items, a brain-compress-history, then the answer on the compressed context. */
START_TEST(test_compress)
{
    struct session s;
    json_t *reqs, *first;

    session_init(
        &s,
        "{'updatedAt':14,'userMessages':[{'kind':'user','id':'u1','content':'hello 1',"
        "'receivedAt':10},{'kind':'user','id':'u2','content':'hello 2','receivedAt':12},"
        "{'kind':'user','id':'u3','content':'hello 3','receivedAt':14}],"
        "'assistantMessages':[{'kind':'assistant','id':'a1','content':'hi 1',"
        "'receivedAt':11,'updatedAt':11,'status':'complete','calledBrainAt':10},"
        "{'kind':'assistant','id':'a2','content':'hi 2','receivedAt':13,'updatedAt':13,"
        "'status':'complete','calledBrainAt':12}],'toolCallRecords':[],"
        "'calledBrainAt':12,'contextSummary':'','summaryCutAt':0}",
        14);
    ck_assert_int_eq(
        run_ask(&s, CONFIG("summarize", ",'context_budget':7,'keep_recent':2")), 0);
    expect_json(
        s.inputs,
        "[{'type':'brain-compress-history','calledBrainAt':14,"
        "'summary':'The user said hello several times.','cutAt':12},"
        "{'type':'brain-send-message-start','calledBrainAt':14,'messageId':'*'},"
        "{'type':'brain-send-message-complete','calledBrainAt':14,'messageId':'*',"
        "'content':'Fine.'" USED(10, 5) "}]",
        "inputs");
    /* The summary's text is not relayed as answer chunks. */
    expect_json(s.chunks, "[['*','Fine.']]", "chunks");
    reqs = requests();
    ck_assert_uint_eq(json_array_size(reqs), 2);
    first = request_body(reqs, 0);
    ck_assert_str_eq(json_string_value(json_object_get(first, "tool_choice")), "none");
    expect_json(
        json_object_get(first, "messages"),
        "[{'role':'system','content':'*'},{'role':'user','content':'hello 1'},"
        "{'role':'assistant','content':'hi 1'},{'role':'user','content':'hello 2'},"
        "{'role':'user','content':'*'}]",
        "summary request");
    expect_json(
        json_object_get(request_body(reqs, 1), "messages"),
        "[{'role':'system','content':'You are terse.'},"
        "{'role':'user','content':'[Previous conversation summary]\\nThe user said "
        "hello several times.'},{'role':'assistant','content':'hi 2'},"
        "{'role':'user','content':'hello 3'}]",
        "answer request");
    ck_assert_int_eq(s.st.summary_cut_at, 12);
    json_decref(reqs);
    session_release(&s);
}
END_TEST

START_TEST(test_whole_json_reply)
{
    struct session s;

    session_init(&s, S_HI, 10);
    ck_assert_int_eq(run_ask(&s, CONFIG("json", "")), 0);
    expect_json(
        s.inputs,
        "[{'type':'brain-send-message-start','calledBrainAt':10,'messageId':'*'},"
        "{'type':'brain-send-message-complete','calledBrainAt':10,'messageId':'*',"
        "'content':'Whole reply','firstTokenAt':'*'}]",
        "inputs");
    session_release(&s);
}
END_TEST

/*
 * A reasoning model: reasoning_content deltas are relayed (before the answer's
 * text) on their own channel, and the complete carries the whole reasoning,
 * the provider's usage and when the first token came.
 */
START_TEST(test_reasoning)
{
    struct session s;
    const char *id;
    json_t *done;

    session_init(&s, S_HI, 10);
    ck_assert_int_eq(run_ask(&s, CONFIG("reasoning", "")), 0);
    expect_json(
        s.inputs,
        "[{'type':'brain-send-message-start','calledBrainAt':10,'messageId':'*'},"
        "{'type':'brain-send-message-complete','calledBrainAt':10,'messageId':'*',"
        "'content':'Answer.'" USED(12, 3) ",'reasoning':'Let me think.'}]",
        "inputs");
    id = input_str(&s, 0, "messageId");
    expect_json(s.reasonings, "[['*','Let me '],['*','think.']]", "reasoning deltas");
    expect_json(s.chunks, "[['*','Answer.']]", "chunks");
    ck_assert_str_eq(
        json_string_value(json_array_get(json_array_get(s.reasonings, 0), 0)), id);
    ck_assert_uint_eq(s.reasoned, 2);
    /* The brain's wall clock, read when the first reasoning came. */
    done = json_array_get(s.inputs, 1);
    ck_assert_int_gt(json_integer_value(json_object_get(done, "firstTokenAt")),
                     1700000000000LL);
    ck_assert_str_eq(s.st.assistant.items[0].reasoning, "Let me think.");
    ck_assert_int_eq(s.st.assistant.items[0].usage.prompt_tokens, 12);
    ck_assert_int_eq(s.st.assistant.items[0].usage.completion_tokens, 3);
    session_release(&s);
}
END_TEST

#define S_SET(set)                                                                       \
    "{'updatedAt':10,'userMessages':[{'kind':'user','id':'m1','content':'hi',"           \
    "'receivedAt':10}],'assistantMessages':[],'toolCallRecords':[],'calledBrainAt':0,"   \
    "'contextSummary':'','summaryCutAt':0,'settings':{" set "}}"

/* The session's settings (user-configure) win over the brain's configuration. */
START_TEST(test_session_settings)
{
    struct session s;
    json_t *reqs, *body;

    session_init(&s, S_SET("'model':'text','temperature':0.25"), 10);
    ck_assert_int_eq(run_ask(&s, CONFIG("no-such-model", ",'temperature':0.9")), 0);
    reqs = requests();
    body = request_body(reqs, 0);
    ck_assert_str_eq(json_string_value(json_object_get(body, "model")), "text");
    ck_assert(json_real_value(json_object_get(body, "temperature")) == 0.25);
    json_decref(reqs);
    session_release(&s);

    /* What the session leaves unset stays the brain's; a brain without the
       reasoning hook still reports the reasoning with the answer. */
    fake_reset();
    session_init(&s, S_SET("'model':'reasoning'"), 10);
    s.ask.reasoning = NULL;
    ck_assert_int_eq(run_ask(&s, CONFIG("text", ",'temperature':0.9")), 0);
    reqs = requests();
    body = request_body(reqs, 0);
    ck_assert_str_eq(json_string_value(json_object_get(body, "model")), "reasoning");
    ck_assert(json_real_value(json_object_get(body, "temperature")) == 0.9);
    ck_assert_str_eq(input_str(&s, 1, "reasoning"), "Let me think.");
    ck_assert_uint_eq(json_array_size(s.reasonings), 0);
    json_decref(reqs);
    session_release(&s);

    /* No temperature anywhere: none is sent. */
    fake_reset();
    session_init(&s, S_SET("'model':'text'"), 10);
    ck_assert_int_eq(run_ask(&s, CONFIG("x", "")), 0);
    reqs = requests();
    ck_assert_ptr_null(json_object_get(request_body(reqs, 0), "temperature"));
    json_decref(reqs);
    session_release(&s);
}
END_TEST

/* Failures: model, extra config, the exact final content, requests made. */
static const struct fcase {
    const char *model;
    const char *extra;
    const char *content; /* ' for "; a trailing * matches any rest */
    size_t requests;
    bool started; /* text streamed before the failure */
} failures[] = {
    {"unauthorized", "",
     "[Error] Incorrect API key provided: sk-bad. You can find your API key at "
     "https://platform.openai.com/account/api-keys.",
     1, false},
    {"server-error", "",
     "[Error] The server had an error while processing your request. (after 3 attempts)",
     3, false},
    {"no-such-model", "", "[Error] The model does not exist", 1, false},
    {"stall", ",'stall_timeout_ms':300",
     "Hel\n\n[Error] the model sent nothing for 300 ms", 1, true},
    {"cut", "", "Hel\n\n[Error] the reply stream ended before [DONE]", 1, true},
    {"reset", "", "Hel\n\n[Error] http://127.0.0.1:*", 1, true},
    {"garbage", "",
     "Hi\n\n[Error] malformed JSON in the reply: line 1, column 14: string or '}' "
     "expected",
     1, true},
    {"stream-error", "", "par\n\n[Error] The model overloaded mid-stream", 1, true},
    {"empty", "", "[Error] the model returned an empty reply", 1, false},
};

START_TEST(test_failure)
{
    const struct fcase *f = &failures[_i];
    struct session s;
    char cfg[512];
    const char *got;
    json_t *reqs;
    size_t n;

    snprintf(cfg, sizeof(cfg), CONFIG("%s", "%s"), f->model, f->extra);
    session_init(&s, S_HI, 10);
    ck_assert_int_eq(run_ask(&s, cfg), 0);
    n = json_array_size(s.inputs);
    ck_assert_uint_eq(n, f->started ? 2 : 1);
    ck_assert_str_eq(input_str(&s, n - 1, "type"), "brain-send-message-complete");
    got = input_str(&s, n - 1, "content");
    if (f->content[strlen(f->content) - 1] == '*')
        ck_assert_msg(!strncmp(got, f->content, strlen(f->content) - 1), "%s: got '%s'",
                      f->model, got);
    else
        ck_assert_msg(!strcmp(got, f->content), "%s: got '%s'", f->model, got);
    ck_assert_int_eq(s.st.assistant.len, 1);
    ck_assert_int_eq(s.st.assistant.items[0].status, RX_STATUS_COMPLETE);
    reqs = requests();
    ck_assert_uint_eq(json_array_size(reqs), f->requests);
    ck_assert_int_eq(s.sleeps, (int)f->requests - 1);
    json_decref(reqs);
    session_release(&s);
}
END_TEST

START_TEST(test_rate_limit_then_success)
{
    struct session s;
    json_t *reqs;

    session_init(&s, S_HI, 10);
    ck_assert_int_eq(run_ask(&s, CONFIG("rate-limit", "")), 0);
    expect_json(
        s.inputs,
        "[{'type':'brain-send-message-start','calledBrainAt':10,'messageId':'*'},"
        "{'type':'brain-send-message-complete','calledBrainAt':10,'messageId':'*',"
        "'content':'Hello'" USED(10, 5) "}]",
        "inputs");
    ck_assert_int_eq(s.sleeps, 1);
    reqs = requests();
    ck_assert_uint_eq(json_array_size(reqs), 2);
    ck_assert(json_equal(request_body(reqs, 0), request_body(reqs, 1)));
    json_decref(reqs);
    session_release(&s);
}
END_TEST

START_TEST(test_connection_refused)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0), saved = fake_port;
    struct session s;
    const char *got;

    /* A port that was just free: nothing listens there. */
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    fake_port = ntohs(a.sin_port);
    session_init(&s, S_HI, 10);
    ck_assert_int_eq(run_ask(&s, CONFIG("text", "")), 0);
    fake_port = saved;
    ck_assert_uint_eq(json_array_size(s.inputs), 1);
    got = input_str(&s, 0, "content");
    ck_assert_msg(!strncmp(got, "[Error] http://127.0.0.1:", 25) &&
                      strstr(got, "(after 3 attempts)"),
                  "got '%s'", got);
    ck_assert_int_eq(s.sleeps, 2);
    session_release(&s);
}
END_TEST

/* Cancel while nothing arrives: only cancel_fd can wake the brain (the fake
 * hangs for 30 s, the stall limit is a minute, the test times out in 20 s). */
START_TEST(test_cancel_while_waiting)
{
    struct session s;

    session_init(&s, S_HI, 10);
    s.cancel_after_ms = 200;
    ck_assert_int_eq(run_ask(&s, CONFIG("hang", ",'stall_timeout_ms':60000")),
                     -ECANCELED);
    ck_assert_uint_eq(json_array_size(s.inputs), 0);
    session_release(&s);
}
END_TEST

/* Cancel mid-stream: no complete follows the start. */
START_TEST(test_cancel_mid_stream)
{
    struct session s;

    session_init(&s, S_HI, 10);
    s.cancel_after_chunks = 2;
    ck_assert_int_eq(run_ask(&s, CONFIG("slow", "")), -ECANCELED);
    expect_json(
        s.inputs,
        "[{'type':'brain-send-message-start','calledBrainAt':10,'messageId':'*'}]",
        "inputs");
    ck_assert_uint_eq(json_array_size(s.chunks), 2);
    session_release(&s);
}
END_TEST

/* Cancel during the backoff between retries. */
START_TEST(test_cancel_during_backoff)
{
    struct session s;
    json_t *reqs;

    session_init(&s, S_HI, 10);
    s.cancel_after_ms = 200;
    ck_assert_int_eq(
        run_ask(&s, CONFIG("server-error", ",'backoff_ms':60000,'backoff_max_ms':60000")),
        -ECANCELED);
    ck_assert_uint_eq(json_array_size(s.inputs), 0);
    reqs = requests();
    ck_assert_uint_eq(json_array_size(reqs), 1);
    json_decref(reqs);
    session_release(&s);
}
END_TEST

static const struct {
    const char *config;
    const char *err;
} bad_configs[] = {
    {"{'model':5}", "brain.openai.model: must be a string"},
    {"{'stall_timeout_ms':0}",
     "brain.openai.stall_timeout_ms: must be an integer from 1 to 86400000"},
    {"{'retries':'3'}", "brain.openai.retries: must be an integer from 0 to 10"},
    {"{'temperature':3}", "brain.openai.temperature: must be a number from 0 to 2"},
    {"{'base_url':'ftp://x'}",
     "brain.openai.base_url: must start with http:// or https://"},
    {"{'model':''}", "brain.openai.model: must not be empty"},
    {"{'continue':'yes'}", "brain.openai.continue: must be true or false"},
    {"[1]", "brain.openai: must be an object"},
};

START_TEST(test_bad_config)
{
    json_t *cfg = qjson(bad_configs[_i].config);
    struct rx_error err = {""};

    ck_assert_ptr_null(brain_openai_create(cfg, NULL, &err));
    ck_assert_str_eq(err.text, bad_configs[_i].err);
    json_decref(cfg);
}
END_TEST

START_TEST(test_env)
{
    struct brain *b;
    struct session s;
    json_t *reqs;
    char url[64];

    unsetenv("OPENAI_API_KEY");
    unsetenv("REFLEXOR_LLM_BASE_URL");
    ck_assert(!brain_openai_env_selected());
    setenv("OPENAI_API_KEY", "sk-env", 1);
    ck_assert(brain_openai_env_selected());
    unsetenv("OPENAI_API_KEY");
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1", fake_port);
    setenv("REFLEXOR_LLM_BASE_URL", url, 1);
    setenv("REFLEXOR_LLM_MODEL", "text", 1);
    ck_assert(brain_openai_env_selected());
    /* NULL config: every default, then the environment's endpoint and model. */
    b = brain_openai_create(NULL, NULL, NULL);
    ck_assert_ptr_nonnull(b);
    unsetenv("REFLEXOR_LLM_BASE_URL");
    unsetenv("REFLEXOR_LLM_MODEL");
    session_init(&s, S_HI, 10);
    ck_assert_int_eq(b->ask(b, &s.ask), 0);
    b->destroy(b);
    ck_assert_uint_eq(json_array_size(s.inputs), 2);
    reqs = requests();
    ck_assert_str_eq(json_string_value(json_object_get(request_body(reqs, 0), "model")),
                     "text");
    /* No toolkit: no tools field. */
    ck_assert_ptr_null(json_object_get(request_body(reqs, 0), "tools"));
    json_decref(reqs);
    session_release(&s);
}
END_TEST

Suite *brain_openai_suite(void)
{
    Suite *s = suite_create("brain_openai");
    TCase *tc = tcase_create("fake");
    TCase *cfg = tcase_create("config");

    tcase_add_unchecked_fixture(tc, fake_start, fake_stop);
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_text);
    tcase_add_test(tc, test_api_key_and_resume);
    tcase_add_test(tc, test_resume_tool_only);
    tcase_add_test(tc, test_resume_continues_text_shown);
    tcase_add_test(tc, test_parallel_tools);
    tcase_add_test(tc, test_text_then_tools);
    tcase_add_test(tc, test_tool_round_trip);
    tcase_add_test(tc, test_load_tool_call);
    tcase_add_test(tc, test_load_unknown_id);
    tcase_add_test(tc, test_compress);
    tcase_add_test(tc, test_whole_json_reply);
    tcase_add_test(tc, test_reasoning);
    tcase_add_test(tc, test_session_settings);
    tcase_add_loop_test(tc, test_failure, 0,
                        (int)(sizeof(failures) / sizeof(failures[0])));
    tcase_add_test(tc, test_rate_limit_then_success);
    tcase_add_test(tc, test_connection_refused);
    tcase_add_test(tc, test_cancel_while_waiting);
    tcase_add_test(tc, test_cancel_mid_stream);
    tcase_add_test(tc, test_cancel_during_backoff);
    tcase_add_test(tc, test_env);
    suite_add_tcase(s, tc);
    tcase_add_loop_test(cfg, test_bad_config, 0,
                        (int)(sizeof(bad_configs) / sizeof(bad_configs[0])));
    suite_add_tcase(s, cfg);
    return s;
}
