/*
 * fake_openai - a fake OpenAI-compatible Chat Completions server for tests.
 *
 *   fake_openai [--port N] [--exit-on-eof]
 *
 * Prints "port <N>\n" on stdout once it listens (N is any free port on
 * 127.0.0.1 by default), then serves until SIGTERM or SIGINT, or, with
 * --exit-on-eof, until its stdin reaches end of file: a test runner that
 * keeps the other end of a pipe open cannot leave the fake behind when it is
 * killed. Standalone: libmicrohttpd and jansson only, nothing of Reflexor.
 *
 *   POST .../chat/completions  plays the scenario named by the body's "model"
 *   GET  /__requests           every request so far: [{"path","authorization",
 *                              "body"}] (body parsed, or the raw text)
 *   POST /__reset              forgets the requests
 *
 * Scenarios (the model name):
 *   text            "Hello", " world", "!" streamed, usage, [DONE]
 *   reasoning       reasoning_content "Let me " then, 800 ms later, "think.";
 *                   400 ms later the content "Answer."; a usage chunk
 *                   (prompt_tokens 12, completion_tokens 3), [DONE]
 *   tools           two parallel calls, arguments interleaved in fragments
 *   text-tools      "Let me check." then a calculator call
 *   deep-args       a calculator call whose arguments nest 1 000 deep
 *   tool-then-text  a calculator call; once the last message is a tool
 *                   result: "2+3 = <result>"
 *   mcp-echo        an everything__echo call (an MCP tool); once the last
 *                   message is a tool result: "LLM saw: <result>"
 *   load            load_tool_call {"toolCallId":"c-old"}; once the
 *                   messages carry c-old's result: "It was 42."
 *   load-bad        load_tool_call of an unknown id; once told so: "Sorry."
 *   summarize       with tool_choice "none" (a summary request): a summary;
 *                   otherwise "Fine."
 *   json            a non-streamed chat.completion body
 *   unauthorized    401 with an OpenAI error body
 *   rate-limit      429 on the first request of the model, then "Hello"
 *   server-error    500 forever
 *   stall           "Hel", then 5 s of silence, then the rest
 *   hang            no response at all for 30 s
 *   slow            "tick " every 20 ms, 200 times
 *   repeat          the last message's text after its first line, said as
 *                   many times as that line's number (1 to 100; blank lines
 *                   between), 16 bytes every 4 ms: a long answer to a short
 *                   question ("20\n<1 KB of markdown>" streams 20 KB)
 *   cut             "Hel", then the body ends cleanly without [DONE]
 *   reset           "Hel", then the connection is dropped
 *   garbage         "Hi", then an event that is not JSON
 *   stream-error    "par", then an error object in the stream
 *   empty           [DONE] only
 *   anything else   404 "model not found"
 * Threads: one per connection, so a stalled reply blocks nobody else.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <jansson.h>
#include <microhttpd.h>

#define BODY_MAX (8u << 20)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static json_t *requests; /* guarded by lock */
static volatile sig_atomic_t stopping;

struct upload {
    char *data;
    size_t len;
};

enum end_mode { END_CLEAN, END_DROP };

/* A scripted SSE body: segments, each sent after its delay. */
struct script {
    char **seg;
    int *delay_ms;
    size_t n, i, off;
    bool waited;
    enum end_mode end;
};

static void die(const char *what)
{
    fprintf(stderr, "fake_openai: %s\n", what);
    exit(1);
}

static void nap(int ms)
{
    /* In slices, so a stop does not wait out a long stall. */
    for (int left = ms; left > 0 && !stopping; left -= 20) {
        struct timespec ts = {0, (left < 20 ? left : 20) * 1000000L};

        nanosleep(&ts, NULL);
    }
}

static void add_raw(struct script *s, int delay_ms, const char *text)
{
    s->seg = realloc(s->seg, (s->n + 1) * sizeof(*s->seg));
    s->delay_ms = realloc(s->delay_ms, (s->n + 1) * sizeof(*s->delay_ms));
    if (!s->seg || !s->delay_ms || !(s->seg[s->n] = strdup(text)))
        die("out of memory");
    s->delay_ms[s->n++] = delay_ms;
}

/* One `data:` event holding a chat.completion.chunk with `choice` (stolen). */
static void add_chunk(struct script *s, int delay_ms, const char *model, json_t *choice)
{
    json_t *chunk = json_pack("{s:s, s:s, s:i, s:s, s:[o]}", "id", "chatcmpl-fake",
                              "object", "chat.completion.chunk", "created", 1700000000,
                              "model", model, "choices", choice);
    char *text = chunk ? json_dumps(chunk, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    char *ev;

    if (!text || asprintf(&ev, "data: %s\n\n", text) < 0)
        die("out of memory");
    add_raw(s, delay_ms, ev);
    free(ev);
    free(text);
    json_decref(chunk);
}

static void add_text(struct script *s, int delay_ms, const char *model, const char *t)
{
    add_chunk(s, delay_ms, model,
              json_pack("{s:i, s:{s:s}, s:n}", "index", 0, "delta", "content", t,
                        "finish_reason"));
}

/* A reasoning delta, as llama.cpp, DeepSeek and vLLM send it. */
static void add_reasoning(struct script *s, int delay_ms, const char *model,
                          const char *t)
{
    add_chunk(s, delay_ms, model,
              json_pack("{s:i, s:{s:s}, s:n}", "index", 0, "delta", "reasoning_content",
                        t, "finish_reason"));
}

static void add_role(struct script *s, const char *model)
{
    add_chunk(s, 0, model,
              json_pack("{s:i, s:{s:s, s:s}, s:n}", "index", 0, "delta", "role",
                        "assistant", "content", "", "finish_reason"));
}

/* A tool call fragment: id and name when given (the first one), arguments. */
static void add_call(struct script *s, const char *model, int index, const char *id,
                     const char *name, const char *args)
{
    json_t *call =
        json_pack("{s:i, s:{s:s}}", "index", index, "function", "arguments", args);

    if (id)
        json_object_set_new(call, "id", json_string(id));
    if (id)
        json_object_set_new(call, "type", json_string("function"));
    if (name)
        json_object_set_new(json_object_get(call, "function"), "name", json_string(name));
    add_chunk(s, 0, model,
              json_pack("{s:i, s:{s:[o]}, s:n}", "index", 0, "delta", "tool_calls", call,
                        "finish_reason"));
}

static void add_finish(struct script *s, const char *model, const char *reason)
{
    add_chunk(
        s, 0, model,
        json_pack("{s:i, s:{}, s:s}", "index", 0, "delta", "finish_reason", reason));
    add_raw(s, 0,
            "data: {\"id\":\"chatcmpl-fake\",\"object\":\"chat.completion.chunk\","
            "\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":5,"
            "\"total_tokens\":15}}\n\n");
    add_raw(s, 0, "data: [DONE]\n\n");
}

static void say(struct script *s, const char *model, const char *text)
{
    add_role(s, model);
    add_text(s, 0, model, text);
    add_finish(s, model, "stop");
}

static ssize_t script_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct script *s = cls;
    size_t len, n;

    (void)pos;
    if (s->i == s->n)
        return s->end == END_CLEAN ? MHD_CONTENT_READER_END_OF_STREAM
                                   : MHD_CONTENT_READER_END_WITH_ERROR;
    if (!s->waited && s->delay_ms[s->i]) {
        nap(s->delay_ms[s->i]);
        if (stopping)
            return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    s->waited = true;
    len = strlen(s->seg[s->i]);
    n = len - s->off < max ? len - s->off : max;
    memcpy(buf, s->seg[s->i] + s->off, n);
    s->off += n;
    if (s->off == len) {
        s->i++;
        s->off = 0;
        s->waited = false;
    }
    return (ssize_t)n;
}

static void script_free(void *cls)
{
    struct script *s = cls;

    for (size_t i = 0; i < s->n; i++)
        free(s->seg[i]);
    free(s->seg);
    free(s->delay_ms);
    free(s);
}

static enum MHD_Result reply_json(struct MHD_Connection *c, unsigned status,
                                  const char *body)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        strlen(body), (void *)(uintptr_t)body, MHD_RESPMEM_MUST_COPY);
    enum MHD_Result ret;

    MHD_add_response_header(r, "Content-Type", "application/json");
    ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result reply_script(struct MHD_Connection *c, struct script *s)
{
    struct MHD_Response *r = MHD_create_response_from_callback(
        MHD_SIZE_UNKNOWN, 1024, script_read, s, script_free);
    enum MHD_Result ret;

    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    ret = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

/* The content of the last message, and its role. */
static const char *last_message(json_t *body, const char **role)
{
    json_t *msgs = json_object_get(body, "messages");
    json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);

    *role = json_string_value(json_object_get(last, "role"));
    if (!*role)
        *role = "";
    return json_string_value(json_object_get(last, "content"));
}

/* Whether some message has this tool_call_id, or contains `text`. */
static bool messages_have(json_t *body, const char *tool_call_id, const char *text)
{
    json_t *msgs = json_object_get(body, "messages"), *m;
    size_t i;

    json_array_foreach(msgs, i, m)
    {
        const char *id = json_string_value(json_object_get(m, "tool_call_id"));
        const char *content = json_string_value(json_object_get(m, "content"));

        if (tool_call_id && id && !strcmp(id, tool_call_id))
            return true;
        if (text && content && strstr(content, text))
            return true;
    }
    return false;
}

static size_t count_model(const char *model)
{
    size_t n = 0, i;
    json_t *r;

    pthread_mutex_lock(&lock);
    json_array_foreach(requests, i, r)
    {
        const char *m =
            json_string_value(json_object_get(json_object_get(r, "body"), "model"));

        n += m && !strcmp(m, model);
    }
    pthread_mutex_unlock(&lock);
    return n;
}

/* The "repeat" scenario's text, in pieces of 16 bytes (never splitting a
 * UTF-8 character) 4 ms apart. */
static void add_repeat(struct script *s, const char *model, const char *msg)
{
    const char *nl = strchr(msg, '\n'), *text = nl ? nl + 1 : "";
    long times = strtol(msg, NULL, 10);
    size_t len = strlen(text), total = 0, off = 0;
    char *all, piece[24];

    times = times < 1 ? 1 : times > 100 ? 100 : times;
    all = malloc((size_t)times * (len + 2) + 1);
    if (!all)
        die("out of memory");
    for (long i = 0; i < times; i++) {
        if (i) {
            memcpy(all + total, "\n\n", 2);
            total += 2;
        }
        memcpy(all + total, text, len);
        total += len;
    }
    while (off < total) {
        size_t n = total - off < 16 ? total - off : 16;

        while (off + n < total && ((unsigned char)all[off + n] & 0xc0) == 0x80)
            n++;
        memcpy(piece, all + off, n);
        piece[n] = '\0';
        add_text(s, off ? 4 : 0, model, piece);
        off += n;
    }
    free(all);
}

static enum MHD_Result play(struct MHD_Connection *c, json_t *body)
{
    const char *model = json_string_value(json_object_get(body, "model"));
    struct script *s = calloc(1, sizeof(*s));
    const char *role, *last;

    if (!s)
        die("out of memory");
    if (!model)
        model = "";
    last = last_message(body, &role);
    if (!strcmp(model, "text")) {
        add_raw(s, 0, ": keep-alive\n\n");
        add_role(s, model);
        add_text(s, 0, model, "Hello");
        add_text(s, 0, model, " world");
        add_text(s, 0, model, "!");
        add_finish(s, model, "stop");
    } else if (!strcmp(model, "reasoning")) {
        /* The pauses let a test follow the message while it thinks. */
        add_role(s, model);
        add_reasoning(s, 0, model, "Let me ");
        add_reasoning(s, 800, model, "think.");
        add_text(s, 400, model, "Answer.");
        add_chunk(
            s, 0, model,
            json_pack("{s:i, s:{}, s:s}", "index", 0, "delta", "finish_reason", "stop"));
        add_raw(s, 0,
                "data: {\"id\":\"chatcmpl-fake\",\"object\":\"chat.completion.chunk\","
                "\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":3,"
                "\"total_tokens\":15}}\n\n");
        add_raw(s, 0, "data: [DONE]\n\n");
    } else if (!strcmp(model, "tools")) {
        add_role(s, model);
        add_call(s, model, 0, "call_calc", "calculator", "");
        add_call(s, model, 1, "call_clock", "clock", "{\"time");
        add_call(s, model, 0, NULL, NULL, "{\"expression\":");
        add_call(s, model, 1, NULL, NULL, "zone\":\"UTC\"}");
        add_call(s, model, 0, NULL, NULL, "\"2+3\"}");
        add_finish(s, model, "tool_calls");
    } else if (!strcmp(model, "deep-args")) {
        /* A calculator call whose arguments nest 1 000 arrays deep. */
        char deep[2048] = "{\"expression\":";
        size_t n = strlen(deep);

        memset(deep + n, '[', 1000);
        memset(deep + n + 1000, ']', 1000);
        strcpy(deep + n + 2000, "}");
        add_role(s, model);
        add_call(s, model, 0, "call_deep", "calculator", deep);
        add_finish(s, model, "tool_calls");
    } else if (!strcmp(model, "text-tools")) {
        add_role(s, model);
        add_text(s, 0, model, "Let me ");
        add_text(s, 0, model, "check.");
        add_call(s, model, 0, "call_calc", "calculator", "{\"expression\":\"6*7\"}");
        add_finish(s, model, "tool_calls");
    } else if (!strcmp(model, "tool-then-text")) {
        if (!strcmp(role, "tool")) {
            char *t;

            if (asprintf(&t, "2+3 = %s", last ? last : "?") < 0)
                die("out of memory");
            say(s, model, t);
            free(t);
        } else {
            add_role(s, model);
            add_call(s, model, 0, "call_1", "calculator", "{\"expression\":");
            add_call(s, model, 0, NULL, NULL, "\"2+3\"}");
            add_finish(s, model, "tool_calls");
        }
    } else if (!strcmp(model, "mcp-echo")) {
        if (!strcmp(role, "tool")) {
            char *t;

            if (asprintf(&t, "LLM saw: %s", last ? last : "(nothing)") < 0)
                die("out of memory");
            say(s, model, t);
            free(t);
        } else {
            add_role(s, model);
            add_call(s, model, 0, "call_mcp", "everything__echo",
                     "{\"message\":\"from the llm\"}");
            add_finish(s, model, "tool_calls");
        }
    } else if (!strcmp(model, "load")) {
        if (messages_have(body, "c-old", NULL)) {
            say(s, model, "It was 42.");
        } else {
            add_call(s, model, 0, "call_load", "load_tool_call", "{\"toolCallId\":");
            add_call(s, model, 0, NULL, NULL, "\"c-old\"}");
            add_finish(s, model, "tool_calls");
        }
    } else if (!strcmp(model, "load-bad")) {
        if (messages_have(body, NULL, "no earlier tool call")) {
            say(s, model, "Sorry.");
        } else {
            add_call(s, model, 0, "call_load", "load_tool_call",
                     "{\"toolCallId\":\"nope\"}");
            add_finish(s, model, "tool_calls");
        }
    } else if (!strcmp(model, "summarize")) {
        const char *choice = json_string_value(json_object_get(body, "tool_choice"));

        say(s, model,
            choice && !strcmp(choice, "none") ? "The user said hello several times."
                                              : "Fine.");
    } else if (!strcmp(model, "json")) {
        script_free(s);
        return reply_json(
            c, MHD_HTTP_OK,
            "{\"id\":\"chatcmpl-fake\",\"object\":\"chat.completion\",\"choices\":[{"
            "\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"Whole "
            "reply\"},"
            "\"finish_reason\":\"stop\"}]}");
    } else if (!strcmp(model, "unauthorized")) {
        script_free(s);
        return reply_json(c, MHD_HTTP_UNAUTHORIZED,
                          "{\"error\":{\"message\":\"Incorrect API key provided: sk-bad. "
                          "You can find your API key at "
                          "https://platform.openai.com/account/api-keys.\",\"type\":"
                          "\"invalid_request_error\",\"param\":null,\"code\":"
                          "\"invalid_api_key\"}}");
    } else if (!strcmp(model, "rate-limit") && count_model(model) == 1) {
        script_free(s);
        return reply_json(c, MHD_HTTP_TOO_MANY_REQUESTS,
                          "{\"error\":{\"message\":\"Rate limit reached for requests\","
                          "\"type\":\"requests\",\"code\":\"rate_limit_exceeded\"}}");
    } else if (!strcmp(model, "rate-limit")) {
        say(s, model, "Hello");
    } else if (!strcmp(model, "server-error")) {
        script_free(s);
        return reply_json(c, MHD_HTTP_INTERNAL_SERVER_ERROR,
                          "{\"error\":{\"message\":\"The server had an error while "
                          "processing your request.\",\"type\":\"server_error\"}}");
    } else if (!strcmp(model, "stall")) {
        add_role(s, model);
        add_text(s, 0, model, "Hel");
        add_text(s, 5000, model, "lo");
        add_finish(s, model, "stop");
    } else if (!strcmp(model, "hang")) {
        nap(30000);
        script_free(s);
        return MHD_NO;
    } else if (!strcmp(model, "slow")) {
        add_role(s, model);
        for (int i = 0; i < 200; i++)
            add_text(s, 20, model, "tick ");
        add_finish(s, model, "stop");
    } else if (!strcmp(model, "cut") || !strcmp(model, "reset")) {
        add_role(s, model);
        add_text(s, 0, model, "Hel");
        s->end = !strcmp(model, "cut") ? END_CLEAN : END_DROP;
    } else if (!strcmp(model, "garbage")) {
        add_role(s, model);
        add_text(s, 0, model, "Hi");
        add_raw(s, 0, "data: {\"choices\":[{garbage\n\n");
        add_raw(s, 0, "data: [DONE]\n\n");
    } else if (!strcmp(model, "stream-error")) {
        add_role(s, model);
        add_text(s, 0, model, "par");
        add_raw(s, 0,
                "data: {\"error\":{\"message\":\"The model overloaded mid-stream\","
                "\"type\":\"server_error\"}}\n\n");
    } else if (!strcmp(model, "repeat")) {
        add_role(s, model);
        add_repeat(s, model, last ? last : "");
        add_finish(s, model, "stop");
    } else if (!strcmp(model, "empty")) {
        add_raw(s, 0, "data: [DONE]\n\n");
    } else {
        script_free(s);
        return reply_json(c, MHD_HTTP_NOT_FOUND,
                          "{\"error\":{\"message\":\"The model does not exist\","
                          "\"type\":\"invalid_request_error\"}}");
    }
    return reply_script(c, s);
}

static void record(struct MHD_Connection *c, const char *url, const struct upload *u,
                   json_t *body)
{
    const char *auth =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    json_t *r = json_pack("{s:s, s:s?, s:o}", "path", url, "authorization", auth, "body",
                          body ? json_incref(body)
                               : json_stringn(u->data ? u->data : "", u->len));

    pthread_mutex_lock(&lock);
    json_array_append_new(requests, r);
    pthread_mutex_unlock(&lock);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *data, size_t *size, void **con_cls)
{
    struct upload *u = *con_cls;
    size_t ulen = strlen(url), suffix = strlen("/chat/completions");
    enum MHD_Result ret;
    json_t *body;

    (void)cls;
    (void)version;
    if (!u) {
        u = calloc(1, sizeof(*u));
        if (!u)
            return MHD_NO;
        *con_cls = u;
        return MHD_YES;
    }
    if (*size) {
        if (u->len + *size > BODY_MAX)
            return MHD_NO;
        u->data = realloc(u->data, u->len + *size + 1);
        if (!u->data)
            die("out of memory");
        memcpy(u->data + u->len, data, *size);
        u->len += *size;
        u->data[u->len] = '\0';
        *size = 0;
        return MHD_YES;
    }
    if (!strcmp(method, "GET") && !strcmp(url, "/__requests")) {
        char *text;

        pthread_mutex_lock(&lock);
        text = json_dumps(requests, JSON_COMPACT | JSON_PRESERVE_ORDER);
        pthread_mutex_unlock(&lock);
        if (!text)
            die("out of memory");
        ret = reply_json(c, MHD_HTTP_OK, text);
        free(text);
        return ret;
    }
    if (!strcmp(method, "POST") && !strcmp(url, "/__reset")) {
        pthread_mutex_lock(&lock);
        json_array_clear(requests);
        pthread_mutex_unlock(&lock);
        return reply_json(c, MHD_HTTP_OK, "{}");
    }
    if (strcmp(method, "POST") || ulen < suffix ||
        strcmp(url + ulen - suffix, "/chat/completions"))
        return reply_json(c, MHD_HTTP_NOT_FOUND, "{\"error\":\"no such route\"}");
    body = json_loadb(u->data ? u->data : "", u->len, 0, NULL);
    record(c, url, u, body);
    if (!body)
        return reply_json(c, MHD_HTTP_BAD_REQUEST,
                          "{\"error\":{\"message\":\"the body is not JSON\"}}");
    ret = play(c, body);
    json_decref(body);
    return ret;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct upload *u = *con_cls;

    (void)cls;
    (void)c;
    (void)toe;
    if (u) {
        free(u->data);
        free(u);
    }
    *con_cls = NULL;
}

/* --exit-on-eof: the parent's end of our stdin closed, so it is gone. */
static void *watch_stdin(void *arg)
{
    char buf[256];

    (void)arg;
    while (read(0, buf, sizeof(buf)) > 0)
        ;
    kill(getpid(), SIGTERM);
    return NULL;
}

int main(int argc, char **argv)
{
    bool exit_on_eof = false;
    pthread_t watcher;
    struct sockaddr_in addr = {.sin_family = AF_INET};
    const union MHD_DaemonInfo *info;
    struct MHD_Daemon *d;
    sigset_t set;
    int port = 0, sig;

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--port") && i + 1 < argc)
            port = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--exit-on-eof"))
            exit_on_eof = true;
        else
            die("usage: fake_openai [--port N] [--exit-on-eof]");
    }
    requests = json_array();
    if (!requests)
        die("out of memory");
    /* Signals are taken by sigwait below, not by whichever thread is running. */
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    addr.sin_port = htons((uint16_t)port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION,
                         0, NULL, NULL, on_request, NULL, MHD_OPTION_SOCK_ADDR, &addr,
                         MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
                         MHD_OPTION_CONNECTION_TIMEOUT, 60u, MHD_OPTION_END);
    if (!d)
        die("cannot start the daemon");
    info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    if (!info)
        die("cannot read the bound port");
    printf("port %u\n", (unsigned)info->port);
    fflush(stdout);
    if (exit_on_eof && pthread_create(&watcher, NULL, watch_stdin, NULL))
        die("cannot start the stdin watcher");
    sigwait(&set, &sig);
    stopping = 1;
    MHD_stop_daemon(d);
    json_decref(requests);
    return 0;
}
