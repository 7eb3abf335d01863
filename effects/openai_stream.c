/*
 * openai_stream - incremental parser of a streamed Chat Completions body.
 * See openai_stream.h.
 */
#include "effects/openai_stream.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "state_machine/rx_alloc.h"
#include "state_machine/rx_json.h"

static int on_event(void *ctx, const struct sse_parse_event *ev);

void openai_stream_init(struct openai_stream *st, openai_stream_content_fn on_content,
                        void *ctx)
{
    memset(st, 0, sizeof(*st));
    st->on_content = on_content;
    st->ctx = ctx;
    rx_buf_init(&st->content, OPENAI_STREAM_CONTENT_MAX);
    rx_buf_init(&st->reasoning, OPENAI_STREAM_CONTENT_MAX);
    sse_parse_init(&st->sse, OPENAI_STREAM_EVENT_MAX, on_event, st);
    rx_buf_init(&st->whole, OPENAI_STREAM_EVENT_MAX);
}

void openai_stream_on_reasoning(struct openai_stream *st, openai_stream_content_fn fn)
{
    st->on_reasoning = fn;
}

void openai_stream_release(struct openai_stream *st)
{
    for (size_t i = 0; i < st->n_calls; i++) {
        rx_free(st->calls[i].id);
        rx_free(st->calls[i].name);
        rx_buf_release(&st->calls[i].args);
    }
    rx_free(st->calls);
    json_decref(st->usage);
    rx_buf_release(&st->content);
    rx_buf_release(&st->reasoning);
    sse_parse_release(&st->sse);
    rx_buf_release(&st->whole);
    memset(st, 0, sizeof(*st));
}

bool openai_stream_has_calls(const struct openai_stream *st)
{
    return st->n_calls > 0;
}

/* Record the first error; every later feed() and finish() returns it. */
static int fail(struct openai_stream *st, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(struct openai_stream *st, int code, const char *fmt, ...)
{
    va_list ap;

    if (st->error_code)
        return st->error_code;
    st->error_code = code;
    va_start(ap, fmt);
    rx_error_setv(&st->error, code, fmt, ap);
    va_end(ap);
    return code;
}

/* A failed append: name the bound that was passed, or report ENOMEM. */
static int fail_buf(struct openai_stream *st, int rc, const char *what)
{
    if (rc == -E2BIG)
        return fail(st, rc, "%s is too long", what);
    return fail(st, rc, "out of memory");
}

/*
 * The call that a tool_calls entry belongs to. Providers that omit `index`
 * (some local servers) send each call whole: an entry with an id or a name
 * starts a new call, one with neither continues the last.
 */
static int call_for(struct openai_stream *st, json_t *entry,
                    struct openai_stream_call **out)
{
    json_t *jindex = json_object_get(entry, "index");
    json_t *fn = json_object_get(entry, "function");
    struct openai_stream_call *calls;
    int index;

    if (json_is_integer(jindex)) {
        json_int_t v = json_integer_value(jindex);

        if (v < 0 || v >= OPENAI_STREAM_CALLS_MAX)
            return fail(st, -EPROTO, "tool call index %lld is out of range",
                        (long long)v);
        index = (int)v;
    } else if (st->n_calls && !json_is_string(json_object_get(entry, "id")) &&
               !json_is_string(json_object_get(fn, "name"))) {
        *out = &st->calls[st->n_calls - 1];
        return 0;
    } else {
        index = 0;
        for (size_t i = 0; i < st->n_calls; i++)
            if (st->calls[i].index >= index)
                index = st->calls[i].index + 1;
    }
    for (size_t i = 0; i < st->n_calls; i++) {
        if (st->calls[i].index == index) {
            *out = &st->calls[i];
            return 0;
        }
    }
    if (st->n_calls >= OPENAI_STREAM_CALLS_MAX)
        return fail(st, -E2BIG, "too many tool calls");
    calls = rx_realloc(st->calls, st->n_calls * sizeof(*calls),
                       (st->n_calls + 1) * sizeof(*calls));
    if (!calls)
        return fail(st, -ENOMEM, "out of memory");
    st->calls = calls;
    *out = &calls[st->n_calls++];
    memset(*out, 0, sizeof(**out));
    (*out)->index = index;
    rx_buf_init(&(*out)->args, OPENAI_STREAM_ARGS_MAX);
    return 0;
}

static int take_tool_call(struct openai_stream *st, json_t *entry)
{
    struct openai_stream_call *c = NULL;
    json_t *fn, *id, *name, *args;
    int rc;

    if (!json_is_object(entry))
        return fail(st, -EPROTO, "a tool call is not an object");
    rc = call_for(st, entry, &c);
    if (rc)
        return rc;
    fn = json_object_get(entry, "function");
    id = json_object_get(entry, "id");
    name = json_object_get(fn, "name");
    args = json_object_get(fn, "arguments");
    /* The first id and name win: some servers repeat them in every fragment. */
    if (!c->id && json_is_string(id) && json_string_length(id) &&
        !(c->id = rx_strdup(json_string_value(id))))
        return fail(st, -ENOMEM, "out of memory");
    if (!c->name && json_is_string(name) && json_string_length(name) &&
        !(c->name = rx_strdup(json_string_value(name))))
        return fail(st, -ENOMEM, "out of memory");
    if (json_is_string(args)) {
        rc = rx_buf_append(&c->args, json_string_value(args), json_string_length(args));
    } else if (json_is_object(args) || json_is_array(args)) {
        /* Not OpenAI's shape, but some servers send the arguments as JSON. */
        char *text = json_dumps(args, JSON_COMPACT);

        rc = text ? rx_buf_puts(&c->args, text) : -ENOMEM;
        free(text);
    }
    return rc ? fail_buf(st, rc, "a tool call's arguments") : 0;
}

/* A text delta: kept in `buf` (bounded; `what` names it) and handed to `fn`. */
static int take_text(struct openai_stream *st, json_t *text, struct rx_buf *buf,
                     openai_stream_content_fn fn, const char *what)
{
    int rc;

    if (!json_is_string(text) || !json_string_length(text))
        return 0;
    rc = rx_buf_append(buf, json_string_value(text), json_string_length(text));
    if (rc)
        return fail_buf(st, rc, what);
    if (fn && (rc = fn(st->ctx, json_string_value(text), json_string_length(text))))
        return fail(st, rc, "stopped by the receiver");
    return 0;
}

/* One parsed chunk (or a whole reply, where `key` is "message"). */
static int take_chunk(struct openai_stream *st, json_t *root, const char *key)
{
    json_t *err, *choices, *c0, *delta, *reasoning, *calls, *finish, *usage;
    int rc;

    if (!json_is_object(root))
        return fail(st, -EPROTO, "malformed reply stream: an event is not an object");
    err = json_object_get(root, "error");
    if (err && !json_is_null(err)) {
        json_t *msg = json_is_string(err) ? err : json_object_get(err, "message");

        return fail(st, -EPROTO, "%s",
                    json_is_string(msg) && json_string_length(msg)
                        ? json_string_value(msg)
                        : "the provider reported an error");
    }
    usage = json_object_get(root, "usage");
    if (json_is_object(usage)) {
        json_decref(st->usage);
        st->usage = json_incref(usage);
    }
    choices = json_object_get(root, "choices");
    c0 = json_array_get(choices, 0);
    /* With n > 1 choices may come in any order: follow the one with index 0. */
    for (size_t i = 1; i < json_array_size(choices); i++) {
        json_t *ci = json_array_get(choices, i);

        if (json_integer_value(json_object_get(ci, "index")) == 0 &&
            json_is_integer(json_object_get(ci, "index")))
            c0 = ci;
    }
    if (!json_is_object(c0))
        return 0; /* the usage chunk has no choices */
    delta = json_object_get(c0, key);
    /* Reasoning comes before the answer it leads to. One name per delta:
       servers that send both send the same text twice. */
    reasoning = json_object_get(delta, "reasoning_content");
    if (!json_string_length(reasoning))
        reasoning = json_object_get(delta, "reasoning");
    if ((rc = take_text(st, reasoning, &st->reasoning, st->on_reasoning,
                        "the reasoning")) ||
        (rc = take_text(st, json_object_get(delta, "content"), &st->content,
                        st->on_content, "the reply")))
        return rc;
    calls = json_object_get(delta, "tool_calls");
    for (size_t i = 0; i < json_array_size(calls); i++) {
        rc = take_tool_call(st, json_array_get(calls, i));
        if (rc)
            return rc;
    }
    finish = json_object_get(c0, "finish_reason");
    if (json_is_string(finish))
        snprintf(st->finish_reason, sizeof(st->finish_reason), "%s",
                 json_string_value(finish));
    return 0;
}

static int take_json(struct openai_stream *st, const char *p, size_t n, const char *key)
{
    struct rx_error jerr;
    json_t *root;
    int rc;

    /* On an effect's small stack: the parser does not recurse, and refuses
       nesting past RX_JSON_DEPTH_MAX. */
    if ((rc = rx_json_parse(p, n, RX_JSON_ANY, &root, &jerr)))
        return fail(st, rc == -ENOMEM ? rc : -EPROTO, "malformed JSON in the reply: %s",
                    jerr.text);
    rc = take_chunk(st, root, key);
    json_decref(root);
    return rc;
}

/*
 * One SSE event: [DONE] ends the reply, anything else is a chunk. A positive
 * return stops the SSE parser without an error: bytes after [DONE] are
 * ignored, whatever they are.
 */
static int on_event(void *ctx, const struct sse_parse_event *ev)
{
    struct openai_stream *st = ctx;

    if (!strcmp(ev->data, "[DONE]")) {
        st->done = true;
        return 1;
    }
    return take_json(st, ev->data, ev->data_len, "delta");
}

/*
 * What sse_parse_feed/finish returned. An error of ours (from on_event) is
 * already recorded; one of the framing gets its message here.
 */
static int after_sse(struct openai_stream *st, int rc)
{
    if (st->error_code)
        return st->error_code;
    if (!rc || st->done)
        return 0;
    if (rc == -E2BIG && st->sse.bound == SSE_PARSE_BOUND_EVENT)
        return fail(st, rc, "an event of the reply stream is too long");
    if (rc == -E2BIG)
        return fail(st, rc, "a line of the reply stream is too long");
    return fail_buf(st, rc, "the reply stream");
}

int openai_stream_feed(struct openai_stream *st, const char *p, size_t n)
{
    const char *end = p + n;
    int rc;

    if (st->error_code)
        return st->error_code;
    if (st->done)
        return 0;
    while (p < end && !st->started) {
        if (*p == '{' || *p == '[') {
            st->json_body = true;
            st->started = true;
        } else if (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n') {
            p++; /* leading blank lines carry no event either way */
        } else {
            st->started = true;
        }
    }
    if (st->json_body) {
        rc = rx_buf_append(&st->whole, p, (size_t)(end - p));
        return rc ? fail_buf(st, rc, "the reply") : 0;
    }
    return after_sse(st, sse_parse_feed(&st->sse, p, (size_t)(end - p)));
}

int openai_stream_finish(struct openai_stream *st)
{
    int rc;

    if (st->error_code)
        return st->error_code;
    if (st->json_body) {
        rc = take_json(st, st->whole.data, st->whole.len, "message");
        if (rc)
            return rc;
        st->done = true;
        return 0;
    }
    /* Be lenient about a missing final blank line: the data is all there. */
    if (!st->done && (rc = after_sse(st, sse_parse_finish(&st->sse, true))))
        return rc;
    if (!st->done)
        return fail(st, -EPROTO,
                    st->started ? "the reply stream ended before [DONE]"
                                : "the reply was empty");
    return 0;
}
