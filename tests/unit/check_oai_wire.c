/*
 * check_oai_wire - the OpenAI wire, pure (server/protocols/oai_wire), and the
 * continuity memo (server/protocols/oai_memo).
 *
 * Every validation rule of a chat completion request is a row: the body and
 * the status, param and code of the error it must give (or 0 for a request
 * taken, with what was read). Normalization and fingerprints are rows too;
 * the history a new session imports is replayed through the real importer
 * (server/session_import) and must want no effect; every encoder's output is
 * parsed back with jansson and checked field by field.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/protocols/oai_memo.h"
#include "server/protocols/oai_wire.h"
#include "server/session_import.h"
#include "state_machine/rx_effects.h"

Suite *oai_wire_suite(void);

static const char *const models[] = {"reflexor", "agent"};

#define U(text)   "{\"role\":\"user\",\"content\":\"" text "\"}"
#define A(text)   "{\"role\":\"assistant\",\"content\":\"" text "\"}"
#define REQ(msgs) "{\"model\":\"reflexor\",\"messages\":[" msgs "]}"

static const struct prow {
    const char *name;
    const char *body;
    unsigned status; /* 0: taken */
    const char *param;
    const char *code;
    size_t n, turn; /* when taken */
    bool stream, usage;
} prows[] = {
#define BAD(name, body, status, param, code)                                             \
    {                                                                                    \
        name, body, status, param, code, 0, 0, false, false                              \
    }
#define OK(name, body, n, turn, stream, usage)                                           \
    {                                                                                    \
        name, body, 0, NULL, NULL, n, turn, stream, usage                                \
    }
    /* The body. */
    BAD("not JSON", "{\"model\":", 400, NULL, NULL),
    BAD("empty body", "", 400, NULL, NULL),
    BAD("not an object", "[1,2]", 400, NULL, NULL),
    /* The model. */
    BAD("model missing", "{\"messages\":[" U("hi") "]}", 400, "model",
        "missing_required_parameter"),
    BAD("model not a string", "{\"model\":3,\"messages\":[" U("hi") "]}", 400, "model",
        "missing_required_parameter"),
    BAD("unknown model", "{\"model\":\"gpt-4o\",\"messages\":[" U("hi") "]}", 404,
        "model", "model_not_found"),
    OK("second configured model", "{\"model\":\"agent\",\"messages\":[" U("hi") "]}", 1,
       0, false, false),
    /* The messages. */
    BAD("messages missing", "{\"model\":\"reflexor\"}", 400, "messages",
        "missing_required_parameter"),
    BAD("messages null", "{\"model\":\"reflexor\",\"messages\":null}", 400, "messages",
        "invalid_type"),
    BAD("messages not an array", "{\"model\":\"reflexor\",\"messages\":{}}", 400,
        "messages", "invalid_type"),
    BAD("messages empty", REQ(""), 400, "messages", "empty_array"),
    BAD("a message not an object", REQ("\"hi\""), 400, "messages[0]", "invalid_type"),
    BAD("role missing", REQ("{\"content\":\"hi\"}"), 400, "messages[0].role",
        "invalid_value"),
    BAD("role unknown", REQ("{\"role\":\"wizard\",\"content\":\"hi\"}"), 400,
        "messages[0].role", "invalid_value"),
    BAD("role not a string", REQ("{\"role\":1,\"content\":\"hi\"}"), 400,
        "messages[0].role", "invalid_value"),
    BAD("user content missing", REQ("{\"role\":\"user\"}"), 400, "messages[0].content",
        "invalid_type"),
    BAD("user content null", REQ("{\"role\":\"user\",\"content\":null}"), 400,
        "messages[0].content", "invalid_type"),
    BAD("content a number", REQ("{\"role\":\"user\",\"content\":42}"), 400,
        "messages[0].content", "invalid_type"),
    BAD("content an image part",
        REQ("{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{}}]"
            "}"),
        400, "messages[0].content", "invalid_type"),
    BAD("a text part without text",
        REQ("{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}"), 400,
        "messages[0].content", "invalid_type"),
    BAD("a part not an object", REQ("{\"role\":\"user\",\"content\":[\"hi\"]}"), 400,
        "messages[0].content", "invalid_type"),
    BAD("system content null", REQ("{\"role\":\"system\",\"content\":null}," U("hi")),
        400, "messages[0].content", "invalid_type"),
    BAD("the second message is bad",
        REQ(U("hi") ",{\"role\":\"robot\",\"content\":\"x\"}"), 400, "messages[1].role",
        "invalid_value"),
    BAD("last from the assistant", REQ(U("hi") "," A("hello")), 400, "messages[1].role",
        "invalid_value"),
    BAD("last from the system", REQ("{\"role\":\"system\",\"content\":\"s\"}"), 400,
        "messages[0].role", "invalid_value"),
    BAD("last user blank", REQ(U(" \\n\\t ")), 400, "messages[0].content",
        "invalid_value"),
    BAD("new turn blank over two messages", REQ(U(" ") "," U("")), 400,
        "messages[1].content", "invalid_value"),
    /* The options. */
    BAD("stream not a boolean",
        "{\"model\":\"reflexor\",\"stream\":\"yes\",\"messages\":[" U("hi") "]}", 400,
        "stream", "invalid_type"),
    BAD("n of 3", "{\"model\":\"reflexor\",\"n\":3,\"messages\":[" U("hi") "]}", 400, "n",
        "invalid_value"),
    BAD("n a string", "{\"model\":\"reflexor\",\"n\":\"1\",\"messages\":[" U("hi") "]}",
        400, "n", "invalid_value"),
    OK("n of 1", "{\"model\":\"reflexor\",\"n\":1,\"messages\":[" U("hi") "]}", 1, 0,
       false, false),
    BAD("stream_options not an object",
        "{\"model\":\"reflexor\",\"stream\":true,\"stream_options\":1,\"messages\":[" U(
            "hi") "]}",
        400, "stream_options", "invalid_type"),
    BAD("include_usage not a boolean",
        "{\"model\":\"reflexor\",\"stream\":true,\"stream_options\":{\"include_usage\":1}"
        ","
        "\"messages\":[" U("hi") "]}",
        400, "stream_options", "invalid_type"),
    /* Taken. */
    OK("one user message", REQ(U("hi")), 1, 0, false, false),
    OK("stream with usage",
       "{\"model\":\"reflexor\",\"stream\":true,\"stream_options\":{\"include_usage\":"
       "true},"
       "\"messages\":[" U("hi") "]}",
       1, 0, true, true),
    OK("stream null",
       "{\"model\":\"reflexor\",\"stream\":null,\"messages\":[" U("hi") "]}", 1, 0, false,
       false),
    OK("tools are accepted and ignored",
       "{\"model\":\"reflexor\",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":"
       "\"f\"}}],\"temperature\":0.2,\"messages\":[" U("hi") "]}",
       1, 0, false, false),
    OK("history and a turn",
       REQ("{\"role\":\"system\",\"content\":\"s\"}," U("a") "," A("b") "," U("c")), 4, 3,
       false, false),
    OK("a turn of two user messages", REQ(U("a") "," A("b") "," U("c") "," U("d")), 4, 2,
       false, false),
    OK("developer, tool and function roles, null assistant content",
       REQ("{\"role\":\"developer\",\"content\":\"d\"}," U(
           "a") ",{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[]},"
                "{\"role\":\"tool\",\"content\":\"r\"},"
                "{\"role\":\"function\",\"content\":null}," U("b")),
       6, 5, false, false),
    OK("text parts",
       REQ("{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
           "{\"type\":\"text\",\"text\":\"b\"}]}"),
       1, 0, false, false),
#undef BAD
#undef OK
};

START_TEST(test_parse)
{
    const struct prow *r = &prows[_i];
    struct oai_request req;
    struct oai_error e;
    int err = oai_request_parse(r->body, strlen(r->body), models, 2, &req, &e);

    if (r->status) {
        ck_assert_msg(err == -EINVAL, "%s: taken", r->name);
        ck_assert_msg(e.status == r->status, "%s: status %u", r->name, e.status);
        ck_assert_str_eq(e.type, "invalid_request_error");
        if (r->param)
            ck_assert_msg(e.param && !strcmp(e.param, r->param), "%s: param %s", r->name,
                          e.param ? e.param : "(null)");
        else
            ck_assert_ptr_null(e.param);
        if (r->code)
            ck_assert_msg(e.code && !strcmp(e.code, r->code), "%s: code %s", r->name,
                          e.code ? e.code : "(null)");
        ck_assert(e.message[0]);
        return;
    }
    ck_assert_msg(!err, "%s: %s", r->name, e.message);
    ck_assert_uint_eq(req.n, r->n);
    ck_assert_uint_eq(req.turn, r->turn);
    ck_assert_int_eq(req.stream, r->stream);
    ck_assert_int_eq(req.include_usage, r->usage);
    oai_request_release(&req);
}
END_TEST

static struct oai_request parse_ok(const char *body)
{
    struct oai_request req;
    struct oai_error e;

    ck_assert_msg(!oai_request_parse(body, strlen(body), models, 2, &req, &e), "%s",
                  e.message);
    return req;
}

START_TEST(test_turn_and_system)
{
    struct oai_request req = parse_ok(REQ("{\"role\":\"system\",\"content\":\"one\"}," U(
        "a") ",{\"role\":\"developer\","
             "\"content\":\"two\"}," A("b") "," U("c") "," U("d")));
    char *turn = oai_request_turn(&req), *sys;
    bool oom;

    ck_assert_str_eq(turn, "c\n\nd");
    sys = oai_request_system(&req, &oom);
    ck_assert_str_eq(sys, "one\n\ntwo");
    ck_assert(oai_request_has_turns(&req));
    free(turn);
    free(sys);
    oai_request_release(&req);
    req = parse_ok(REQ("{\"role\":\"system\",\"content\":\"s\"}," U("only")));
    ck_assert(!oai_request_has_turns(&req));
    oai_request_release(&req);
    req = parse_ok(REQ(U("x")));
    ck_assert_ptr_null(oai_request_system(&req, &oom));
    ck_assert(!oom);
    oai_request_release(&req);
}
END_TEST

static const struct nrow {
    const char *in, *out;
} nrows[] = {
    {"", ""},
    {"  hello  ", "hello"},
    {"a \n\n\t b", "a b"},
    {"before<details type=\"tool_calls\" "
     "done=\"true\">\n<summary>x</summary>\n</details>\n\n"
     "after",
     "before after"},
    {"<details>one</details><details>two</details>text", "text"},
    {"<DETAILS open>x</Details> y", "y"},
    {"<details><details>in</details>still</details>out", "out"},
    {"an unclosed <details> stays", "an unclosed <details> stays"},
    {"<detailsx>not a block</detailsx>", "<detailsx>not a block</detailsx>"},
    {"<details\ttype=\"a\">x</details>", ""},
    {"日本 \n 語", "日本 語"},
};

START_TEST(test_normalize)
{
    struct rx_buf b;

    rx_buf_init(&b, 1 << 20);
    ck_assert_int_eq(oai_normalize(nrows[_i].in, &b), 0);
    ck_assert_str_eq(b.data ? b.data : "", nrows[_i].out);
    rx_buf_release(&b);
}
END_TEST

static struct oai_fp fp_of(const enum oai_role *roles, const char *const *texts, size_t n)
{
    struct oai_fp fp;

    oai_fp_init(&fp);
    for (size_t i = 0; i < n; i++)
        ck_assert_int_eq(oai_fp_add(&fp, roles[i], texts[i]), 0);
    return fp;
}

START_TEST(test_fingerprint)
{
    const enum oai_role ua[] = {OAI_ROLE_USER, OAI_ROLE_ASSISTANT};
    const enum oai_role uu[] = {OAI_ROLE_USER, OAI_ROLE_USER};
    const char *const plain[] = {"what is 6*7?", "6*7 = 42"};
    const char *const shown[] = {" what is  6*7? ", "<details type=\"tool_calls\">\n"
                                                    "<summary>Tool Executed</summary>\n"
                                                    "</details>\n\n6*7 = 42"};
    const char *const shifted[] = {"what is 6*7?6", "*7 = 42"};
    struct oai_fp a = fp_of(ua, plain, 2), b = fp_of(ua, shown, 2);
    struct oai_fp c = fp_of(uu, plain, 2), d = fp_of(ua, shifted, 2);
    struct oai_fp e = fp_of(ua, plain, 1), empty;

    oai_fp_init(&empty);
    ck_assert(oai_fp_equal(&a, &b));  /* blocks and spacing do not count */
    ck_assert(!oai_fp_equal(&a, &c)); /* roles do */
    ck_assert(!oai_fp_equal(&a, &d)); /* where one message ends does */
    ck_assert(!oai_fp_equal(&a, &e));
    ck_assert(!oai_fp_equal(&e, &empty));
}
END_TEST

START_TEST(test_fp_messages_is_a_prefix)
{
    struct oai_request req = parse_ok(REQ(U("a") "," A("b") "," U("c")));
    struct oai_fp hist, all, step;

    ck_assert_int_eq(oai_fp_messages(&req, req.turn, &hist), 0);
    ck_assert_int_eq(oai_fp_messages(&req, req.n, &all), 0);
    step = hist;
    ck_assert_int_eq(oai_fp_add(&step, OAI_ROLE_USER, "c"), 0);
    ck_assert(oai_fp_equal(&step, &all));
    /* The answer a completion records extends the whole request the same way. */
    ck_assert_int_eq(oai_fp_add(&all, OAI_ROLE_ASSISTANT, "Echo: c"), 0);
    oai_request_release(&req);
    req = parse_ok(REQ(U("a") "," A("b") "," U("c") "," A("Echo: c") "," U("d")));
    ck_assert_int_eq(oai_fp_messages(&req, req.turn, &hist), 0);
    ck_assert(oai_fp_equal(&hist, &all));
    oai_request_release(&req);
}
END_TEST

/* Replay the history document through the importer: accepted, nothing wanted. */
static void replay(const char *body, const char *system, size_t users, size_t answers,
                   const char *last_answer)
{
    struct oai_request req = parse_ok(body);
    json_t *doc = oai_history_doc(&req, system, 1000);
    char *text = json_dumps(doc, JSON_COMPACT);
    struct session_import imp, from_text;
    struct session_import_error ie;
    struct rx_effect_set fx;

    ck_assert_ptr_nonnull(doc);
    /* The document as text, read input by input, makes the same log and state. */
    ck_assert_int_eq(session_import_init(&from_text, NULL, true), 0);
    ck_assert_msg(!session_import_replay_text(text, strlen(text), &from_text, &ie),
                  "input %ld: %s", ie.index, ie.message);
    ck_assert_int_eq(session_import_init(&imp, NULL, true), 0);
    ck_assert_msg(!session_import_replay(doc, &imp, &ie), "input %ld: %s", ie.index,
                  ie.message);
    ck_assert_uint_eq(imp.texts.len, from_text.texts.len);
    ck_assert(!imp.texts.len ||
              !memcmp(imp.texts.data, from_text.texts.data, imp.texts.len));
    ck_assert_uint_eq(imp.snap.len, from_text.snap.len);
    ck_assert(!imp.snap.len || !memcmp(imp.snap.data, from_text.snap.data, imp.snap.len));
    session_import_release(&from_text);
    free(text);
    ck_assert_uint_eq(imp.state.user.len, users);
    ck_assert_uint_eq(imp.state.assistant.len, answers);
    if (last_answer)
        ck_assert_str_eq(imp.state.assistant.items[answers - 1].content, last_answer);
    if (system)
        ck_assert_str_eq(imp.state.settings.system_prompt, system);
    rx_effect_set_init(&fx);
    ck_assert_int_eq(rx_effects_at(&imp.state, &fx), 0);
    ck_assert_uint_eq(fx.len, 0);
    rx_effect_set_release(&fx);
    session_import_release(&imp);
    json_decref(doc);
    oai_request_release(&req);
}

START_TEST(test_history_doc)
{
    replay(REQ(U("a") "," A("b") "," U("c")), NULL, 1, 1, "b");
    replay(REQ("{\"role\":\"system\",\"content\":\"sys\"}," U("a") "," A("b") "," U("c")),
           "sys", 1, 1, "b");
    /* Runs of one role become one message; tool messages and blocks go. */
    replay(
        REQ(U("a") "," U(
            "b") ",{\"role\":\"assistant\",\"content\":null},"
                 "{\"role\":\"tool\",\"content\":\"r\"}," A(
                     "<details "
                     "type=\\\"tool_calls\\\">x</"
                     "details>\\n\\nfine") "," A("more") "," U("c") "," A("d") "," U("e")),
        NULL, 2, 2, "d");
    replay(REQ(U("a") "," A("fine") "," U("c")), NULL, 1, 1, "fine");
    /* An answer first (a greeting), and blank texts skipped. */
    replay(REQ(A("Hi, how can I help?") "," U("  ") "," A("") "," U("q")), NULL, 0, 1,
           "Hi, how can I help?");
}
END_TEST

START_TEST(test_history_doc_joins)
{
    struct oai_request req =
        parse_ok(REQ(U("a") "," U("b") "," A("c") "," A("d") "," U("e")));
    json_t *doc = oai_history_doc(&req, NULL, 5);
    json_t *in = json_object_get(doc, "inputs");

    ck_assert_uint_eq(json_array_size(in), 2);
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_object_get(json_array_get(in, 0), "input"), "content")),
                     "a\n\nb");
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_object_get(json_array_get(in, 1), "input"), "content")),
                     "c\n\nd");
    json_decref(doc);
    oai_request_release(&req);
}
END_TEST

/* ---- rendering and encoding ---------------------------------------------------- */

/* A tool call record from constant strings (the record's fields are not const). */
struct tcall {
    const char *id, *name, *parameters;
    bool done, ok;
    const char *result;
    enum rx_approval approval;
};

static struct rx_tool_call call_of(const struct tcall *t)
{
    return (struct rx_tool_call){.id = (char *)t->id,
                                 .name = (char *)t->name,
                                 .parameters = (char *)t->parameters,
                                 .result = {t->done, t->ok, (char *)t->result, 0},
                                 .approval = t->approval};
}

static const struct trow {
    const char *name;
    struct tcall call;
    const char *want[4]; /* substrings, NULL-ended */
} trows[] = {
    {"done",
     {"c1", "calculator", "{\"expression\":\"6*7\"}", true, true, "42", RX_APPROVAL_NONE},
     {"<details type=\"tool_calls\" done=\"true\" id=\"c1\" name=\"calculator\" "
      "arguments=\"&quot;{\\&quot;expression\\&quot;:\\&quot;6*7\\&quot;}&quot;\" "
      "result=\"&quot;42&quot;\">\n<summary>Tool Executed</summary>\n\n",
      "- tool: calculator\n- arguments: {\"expression\":\"6*7\"}\n- result: 42\n",
      "\n</details>\n", NULL}},
    {"failed",
     {"c2", "clock", "{}", true, false, "boom", RX_APPROVAL_NONE},
     {"result=\"&quot;Error: boom&quot;\"", "- error: boom\n", NULL, NULL}},
    {"waiting for approval",
     {"c3", "calculator", "{}", false, false, NULL, RX_APPROVAL_PENDING},
     {"done=\"false\"", "<summary>Waiting for approval</summary>",
      "- status: waits for approval (see below)", NULL}},
    {"escaped",
     {"i\"d", "t<x>", "{\"a\":\"<&'>\"}", true, true, "line1\nline2 </details>",
      RX_APPROVAL_NONE},
     {"id=\"i&quot;d\" name=\"t&lt;x&gt;\"",
      "arguments=\"&quot;{\\&quot;a\\&quot;:\\&quot;&lt;&amp;&#x27;&gt;\\&quot;}&quot;\"",
      "result=\"&quot;line1\\nline2 &lt;/details&gt;&quot;\"",
      "- result: line1\n  line2 &lt;/details&gt;\n"}},
};

START_TEST(test_render_tool)
{
    const struct trow *r = &trows[_i];
    struct rx_tool_call c = call_of(&r->call);
    struct rx_buf b;

    rx_buf_init(&b, 1 << 20);
    ck_assert_int_eq(oai_render_tool(&b, &c), 0);
    for (size_t k = 0; k < 4 && r->want[k]; k++)
        ck_assert_msg(strstr(b.data, r->want[k]), "%s: no '%s' in:\n%s", r->name,
                      r->want[k], b.data);
    /* One block: its only closing tag is the last line. */
    ck_assert_ptr_eq(strstr(b.data, "</details>"),
                     b.data + b.len - strlen("</details>\n"));
    rx_buf_release(&b);
}
END_TEST

START_TEST(test_render_waiting)
{
    const struct tcall t = {"x", "a<b", "{}", false, false, NULL, RX_APPROVAL_PENDING};
    struct rx_tool_call c = call_of(&t);
    struct rx_buf b;

    rx_buf_init(&b, 1024);
    ck_assert_int_eq(oai_render_waiting(&b, &c, " in the UI"), 0);
    ck_assert_str_eq(b.data,
                     "The call to 'a&lt;b' with {} waits for approval in the UI (a "
                     "new message here refuses it).\n");
    rx_buf_release(&b);
}
END_TEST

static json_t *load(const struct rx_buf *b)
{
    json_error_t err;
    json_t *j = json_loadb(b->data, b->len, 0, &err);

    ck_assert_msg(j != NULL, "not JSON (%s): %s", err.text, b->data);
    return j;
}

static const struct oai_head head = {"chatcmpl-1", 1700000000, "reflexor"};

START_TEST(test_chunks)
{
    static const struct {
        enum oai_chunk_kind kind;
        const char *text, *delta, *finish;
    } rows[] = {
        {OAI_CHUNK_ROLE, NULL, "{\"role\":\"assistant\",\"content\":\"\"}", NULL},
        {OAI_CHUNK_CONTENT, "he said \"hi\"\n", "{\"content\":\"he said \\\"hi\\\"\\n\"}",
         NULL},
        {OAI_CHUNK_REASONING, "hmm", "{\"reasoning_content\":\"hmm\"}", NULL},
        {OAI_CHUNK_STOP, NULL, "{}", "stop"},
    };

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct rx_buf b;
        json_t *j, *choice;
        char *delta;

        rx_buf_init(&b, 4096);
        ck_assert_int_eq(oai_chunk_encode(&b, &head, rows[i].kind, rows[i].text,
                                          rows[i].text ? strlen(rows[i].text) : 0),
                         0);
        j = load(&b);
        ck_assert_str_eq(json_string_value(json_object_get(j, "id")), "chatcmpl-1");
        ck_assert_str_eq(json_string_value(json_object_get(j, "object")),
                         "chat.completion.chunk");
        ck_assert_int_eq(json_integer_value(json_object_get(j, "created")), 1700000000);
        ck_assert_str_eq(json_string_value(json_object_get(j, "model")), "reflexor");
        choice = json_array_get(json_object_get(j, "choices"), 0);
        ck_assert_int_eq(json_integer_value(json_object_get(choice, "index")), 0);
        delta = json_dumps(json_object_get(choice, "delta"),
                           JSON_COMPACT | JSON_PRESERVE_ORDER);
        ck_assert_str_eq(delta, rows[i].delta);
        if (rows[i].finish)
            ck_assert_str_eq(json_string_value(json_object_get(choice, "finish_reason")),
                             rows[i].finish);
        else
            ck_assert(json_is_null(json_object_get(choice, "finish_reason")));
        free(delta);
        json_decref(j);
        rx_buf_release(&b);
    }
}
END_TEST

START_TEST(test_usage_completion_error_models)
{
    struct oai_usage u = {7, 5};
    struct oai_error e;
    struct rx_buf b;
    json_t *j, *x;
    const char *const names[] = {"a", "b\"c"};

    rx_buf_init(&b, 1 << 16);
    ck_assert_int_eq(oai_usage_chunk_encode(&b, &head, &u), 0);
    j = load(&b);
    ck_assert_uint_eq(json_array_size(json_object_get(j, "choices")), 0);
    x = json_object_get(j, "usage");
    ck_assert_int_eq(json_integer_value(json_object_get(x, "prompt_tokens")), 7);
    ck_assert_int_eq(json_integer_value(json_object_get(x, "completion_tokens")), 5);
    ck_assert_int_eq(json_integer_value(json_object_get(x, "total_tokens")), 12);
    json_decref(j);

    rx_buf_reset(&b);
    ck_assert_int_eq(oai_completion_encode(&b, &head, "Echo: hi", 8, &u), 0);
    j = load(&b);
    ck_assert_str_eq(json_string_value(json_object_get(j, "object")), "chat.completion");
    x = json_array_get(json_object_get(j, "choices"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(x, "finish_reason")), "stop");
    x = json_object_get(x, "message");
    ck_assert_str_eq(json_string_value(json_object_get(x, "role")), "assistant");
    ck_assert_str_eq(json_string_value(json_object_get(x, "content")), "Echo: hi");
    json_decref(j);

    rx_buf_reset(&b);
    oai_error_set(&e, 0, 404, "invalid_request_error", "model", "model_not_found",
                  "The model '%s' does not exist", "x");
    ck_assert_int_eq(oai_error_encode(&b, &e), 0);
    ck_assert_str_eq(b.data, "{\"error\":{\"message\":\"The model 'x' does not exist\","
                             "\"type\":\"invalid_request_error\",\"param\":\"model\","
                             "\"code\":\"model_not_found\"}}");
    rx_buf_reset(&b);
    oai_error_set(&e, 0, 400, "invalid_request_error", NULL, NULL, "bad");
    ck_assert_int_eq(oai_error_encode(&b, &e), 0);
    ck_assert_str_eq(b.data, "{\"error\":{\"message\":\"bad\",\"type\":\"invalid_request_"
                             "error\",\"param\":null,\"code\":null}}");

    rx_buf_reset(&b);
    ck_assert_int_eq(oai_models_encode(&b, names, 2, 99), 0);
    ck_assert_str_eq(b.data, "{\"object\":\"list\",\"data\":["
                             "{\"id\":\"a\",\"object\":\"model\",\"created\":99,"
                             "\"owned_by\":\"reflexor\"},"
                             "{\"id\":\"b\\\"c\",\"object\":\"model\",\"created\":99,"
                             "\"owned_by\":\"reflexor\"}]}");
    rx_buf_release(&b);
}
END_TEST

/* An encoder past its buffer's bound leaves the buffer as it was. */
START_TEST(test_encoders_all_or_nothing)
{
    struct rx_tool_call c = call_of(&trows[0].call);
    struct oai_usage u = {1, 2};

    for (size_t max = 0; max < 600; max++) {
        struct rx_buf b;

        rx_buf_init(&b, max);
        if (rx_buf_puts(&b, "x"))
            continue;
        if (oai_render_tool(&b, &c))
            ck_assert_uint_eq(b.len, 1);
        rx_buf_truncate(&b, 1);
        if (oai_chunk_encode(&b, &head, OAI_CHUNK_CONTENT, "abc", 3))
            ck_assert_uint_eq(b.len, 1);
        rx_buf_truncate(&b, 1);
        if (oai_completion_encode(&b, &head, "abc", 3, &u))
            ck_assert_uint_eq(b.len, 1);
        rx_buf_release(&b);
    }
}
END_TEST

/* ---- the memo ------------------------------------------------------------------ */

static struct oai_fp fp_n(size_t n)
{
    struct oai_fp fp;
    char text[32];

    snprintf(text, sizeof(text), "conversation %zu", n);
    oai_fp_init(&fp);
    ck_assert_int_eq(oai_fp_add(&fp, OAI_ROLE_USER, text), 0);
    return fp;
}

START_TEST(test_memo)
{
    struct oai_memo m;
    struct oai_memo_entry e = {.fp = fp_n(0), .sid = "s0", .n_user = 1, .seq = 4}, got;
    struct oai_fp other = fp_n(1);

    oai_memo_init(&m);
    ck_assert(!oai_memo_get(&m, &e.fp, &got));
    ck_assert_int_eq(oai_memo_put(&m, &e), 0);
    ck_assert(oai_memo_get(&m, &e.fp, &got));
    ck_assert_str_eq(got.sid, "s0");
    ck_assert_uint_eq(got.n_user, 1);
    ck_assert_int_eq(got.seq, 4);
    ck_assert(!oai_memo_get(&m, &other, &got));
    /* The same conversation again: the newest session wins, one slot. */
    strcpy(e.sid, "s1");
    ck_assert_int_eq(oai_memo_put(&m, &e), 0);
    ck_assert(oai_memo_get(&m, &e.fp, &got));
    ck_assert_str_eq(got.sid, "s1");
    ck_assert_uint_eq(m.len, 1);
    oai_memo_release(&m);
}
END_TEST

START_TEST(test_memo_bounded)
{
    struct oai_memo m;
    struct oai_memo_entry e = {.sid = "s"}, got;

    oai_memo_init(&m);
    for (size_t i = 0; i < OAI_MEMO_MAX + 10; i++) {
        e.fp = fp_n(i);
        e.seq = (int64_t)i;
        ck_assert_int_eq(oai_memo_put(&m, &e), 0);
    }
    ck_assert_uint_eq(m.len, OAI_MEMO_MAX);
    for (size_t i = 0; i < 10; i++) { /* the oldest were replaced */
        struct oai_fp fp = fp_n(i);

        ck_assert(!oai_memo_get(&m, &fp, &got));
    }
    for (size_t i = 10; i < OAI_MEMO_MAX + 10; i += 997) {
        struct oai_fp fp = fp_n(i);

        ck_assert(oai_memo_get(&m, &fp, &got));
        ck_assert_int_eq(got.seq, (int64_t)i);
    }
    oai_memo_release(&m);
}
END_TEST

Suite *oai_wire_suite(void)
{
    Suite *s = suite_create("oai_wire");
    TCase *parse = tcase_create("parse");
    TCase *conv = tcase_create("conversation");
    TCase *enc = tcase_create("encode");
    TCase *memo = tcase_create("memo");

    tcase_add_loop_test(parse, test_parse, 0, (int)(sizeof(prows) / sizeof(prows[0])));
    tcase_add_test(parse, test_turn_and_system);
    suite_add_tcase(s, parse);
    tcase_add_loop_test(conv, test_normalize, 0, (int)(sizeof(nrows) / sizeof(nrows[0])));
    tcase_add_test(conv, test_fingerprint);
    tcase_add_test(conv, test_fp_messages_is_a_prefix);
    tcase_add_test(conv, test_history_doc);
    tcase_add_test(conv, test_history_doc_joins);
    suite_add_tcase(s, conv);
    tcase_add_loop_test(enc, test_render_tool, 0,
                        (int)(sizeof(trows) / sizeof(trows[0])));
    tcase_add_test(enc, test_render_waiting);
    tcase_add_test(enc, test_chunks);
    tcase_add_test(enc, test_usage_completion_error_models);
    tcase_add_test(enc, test_encoders_all_or_nothing);
    suite_add_tcase(s, enc);
    tcase_add_test(memo, test_memo);
    tcase_add_test(memo, test_memo_bounded);
    suite_add_tcase(s, memo);
    return s;
}
