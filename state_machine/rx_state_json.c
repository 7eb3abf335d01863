/*
 * rx_state_json - the state's JSON wire shape (SPEC 3.1): encoding, with a
 * cache per final record, and decoding with the offending field named. See
 * rx_state.h.
 */
#include "state_machine/rx_state.h"

#include <errno.h>
#include <string.h>

#include "state_machine/rx_alloc.h"
#include "state_machine/rx_state_internal.h"

/* ---- encoding ------------------------------------------------------------ */

/* Appends a sequence of pieces; the first failure stops and is returned. */
#define PUT(call)                                                                        \
    do {                                                                                 \
        if ((err = (call)))                                                              \
            goto out_truncate;                                                           \
    } while (0)

int rx_message_encode(const struct rx_message *m, bool assistant, struct rx_buf *b)
{
    size_t start = b->len;
    int err;

    PUT(rx_buf_puts(b, assistant ? "{\"kind\":\"assistant\",\"id\":"
                                 : "{\"kind\":\"user\",\"id\":"));
    PUT(rx_buf_put_json_str(b, m->id));
    PUT(rx_buf_puts(b, ",\"content\":"));
    PUT(rx_buf_put_json_str(b, m->content));
    PUT(rx_buf_puts(b, ",\"receivedAt\":"));
    PUT(rx_buf_put_i64(b, m->received_at));
    if (assistant) {
        PUT(rx_buf_puts(b, ",\"updatedAt\":"));
        PUT(rx_buf_put_i64(b, m->updated_at));
        PUT(rx_buf_puts(b, ",\"status\":\""));
        PUT(rx_buf_puts(b, rx_status_name(m->status)));
        PUT(rx_buf_puts(b, "\",\"calledBrainAt\":"));
        PUT(rx_buf_put_i64(b, m->called_brain_at));
        if (m->usage.present) {
            PUT(rx_buf_puts(b, ",\"usage\":{\"promptTokens\":"));
            PUT(rx_buf_put_i64(b, m->usage.prompt_tokens));
            PUT(rx_buf_puts(b, ",\"completionTokens\":"));
            PUT(rx_buf_put_i64(b, m->usage.completion_tokens));
            PUT(rx_buf_putc(b, '}'));
        }
        if (m->has_first_token_at) {
            PUT(rx_buf_puts(b, ",\"firstTokenAt\":"));
            PUT(rx_buf_put_i64(b, m->first_token_at));
        }
        if (m->reasoning) {
            PUT(rx_buf_puts(b, ",\"reasoning\":"));
            PUT(rx_buf_put_json_str(b, m->reasoning));
        }
        if (m->restarted)
            PUT(rx_buf_puts(b, ",\"restarted\":true"));
    }
    PUT(rx_buf_putc(b, '}'));
    return 0;

out_truncate:
    rx_buf_truncate(b, start);
    return err;
}

int rx_tool_call_encode(const struct rx_tool_call *c, struct rx_buf *b)
{
    size_t start = b->len;
    int err;

    PUT(rx_buf_puts(b, "{\"id\":"));
    PUT(rx_buf_put_json_str(b, c->id));
    PUT(rx_buf_puts(b, ",\"name\":"));
    PUT(rx_buf_put_json_str(b, c->name));
    PUT(rx_buf_puts(b, ",\"parameters\":"));
    PUT(rx_buf_put_json_str(b, c->parameters));
    PUT(rx_buf_puts(b, ",\"calledAt\":"));
    PUT(rx_buf_put_i64(b, c->called_at));
    if (c->started_at) {
        PUT(rx_buf_puts(b, ",\"startedAt\":"));
        PUT(rx_buf_put_i64(b, c->started_at));
    }
    PUT(rx_buf_puts(b, ",\"result\":"));
    if (!c->result.present) {
        PUT(rx_buf_puts(b, "null"));
    } else {
        PUT(rx_buf_puts(b, c->result.is_success ? "{\"isSuccess\":true,\"content\":"
                                                : "{\"isSuccess\":false,\"error\":"));
        PUT(rx_buf_put_json_str(b, c->result.text));
        PUT(rx_buf_puts(b, ",\"receivedAt\":"));
        PUT(rx_buf_put_i64(b, c->result.received_at));
        PUT(rx_buf_putc(b, '}'));
    }
    PUT(rx_buf_puts(b, c->is_loaded ? ",\"isLoaded\":true" : ",\"isLoaded\":false"));
    if (c->approval != RX_APPROVAL_NONE) {
        PUT(rx_buf_puts(b, ",\"approval\":"));
        PUT(rx_buf_put_json_str(b, rx_approval_name(c->approval)));
    }
    PUT(rx_buf_putc(b, '}'));
    return 0;

out_truncate:
    rx_buf_truncate(b, start);
    return err;
}

/*
 * Keep a copy of the bytes just encoded for the record, so the next state
 * encoding is a memcpy. The cache is an optimisation: out of memory, skip it.
 */
static void remember(char **json, size_t *json_len, const struct rx_buf *b, size_t from)
{
    char *copy = rx_strndup(b->data + from, b->len - from);

    if (copy) {
        *json = copy;
        *json_len = b->len - from;
    }
}

/* The cache is mutable through a const state: it never changes what is encoded. */
static int encode_message_cached(const struct rx_message *cm, bool assistant,
                                 struct rx_buf *b)
{
    struct rx_message *m = (struct rx_message *)cm;
    size_t from = b->len;
    int err;

    if (m->json)
        return rx_buf_append(b, m->json, m->json_len);
    if ((err = rx_message_encode(m, assistant, b)))
        return err;
    /* A streaming message still changes: caching it would only be dropped. */
    if (!assistant || m->status != RX_STATUS_STREAMING)
        remember(&m->json, &m->json_len, b, from);
    return 0;
}

static int encode_tool_call_cached(const struct rx_tool_call *cc, struct rx_buf *b)
{
    struct rx_tool_call *c = (struct rx_tool_call *)cc;
    size_t from = b->len;
    int err;

    if (c->json)
        return rx_buf_append(b, c->json, c->json_len);
    if ((err = rx_tool_call_encode(c, b)))
        return err;
    if (c->result.present)
        remember(&c->json, &c->json_len, b, from);
    return 0;
}

static int encode_messages(const struct rx_message_list *l, bool assistant,
                           struct rx_buf *b)
{
    int err;

    if ((err = rx_buf_putc(b, '[')))
        return err;
    for (size_t i = 0; i < l->len; i++) {
        if (i && (err = rx_buf_putc(b, ',')))
            return err;
        if ((err = encode_message_cached(&l->items[i], assistant, b)))
            return err;
    }
    return rx_buf_putc(b, ']');
}

int rx_state_encode(const struct rx_state *s, struct rx_buf *b)
{
    size_t start = b->len;
    int err;

    PUT(rx_buf_puts(b, "{\"updatedAt\":"));
    PUT(rx_buf_put_i64(b, s->updated_at));
    PUT(rx_buf_puts(b, ",\"userMessages\":"));
    PUT(encode_messages(&s->user, false, b));
    PUT(rx_buf_puts(b, ",\"assistantMessages\":"));
    PUT(encode_messages(&s->assistant, true, b));
    PUT(rx_buf_puts(b, ",\"toolCallRecords\":["));
    for (size_t i = 0; i < s->tools.len; i++) {
        if (i)
            PUT(rx_buf_putc(b, ','));
        PUT(encode_tool_call_cached(&s->tools.items[i], b));
    }
    PUT(rx_buf_puts(b, "],\"calledBrainAt\":"));
    PUT(rx_buf_put_i64(b, s->called_brain_at));
    PUT(rx_buf_puts(b, ",\"contextSummary\":"));
    PUT(rx_buf_put_json_str(b, s->context_summary));
    PUT(rx_buf_puts(b, ",\"summaryCutAt\":"));
    PUT(rx_buf_put_i64(b, s->summary_cut_at));
    PUT(rx_buf_puts(b, ",\"toolPolicies\":"));
    PUT(rx_policy_map_encode(&s->policies, b));
    PUT(rx_buf_puts(b, ",\"settings\":"));
    PUT(rx_settings_encode(&s->settings, b));
    PUT(rx_buf_putc(b, '}'));
    return 0;

out_truncate:
    rx_buf_truncate(b, start);
    return err;
}

/* ---- decoding ------------------------------------------------------------ */

static int fail(struct rx_error *err, const char *field, const char *why)
{
    return rx_error_set(err, -EINVAL, "'%s' %s", field, why);
}

static int get_time(json_t *o, const char *key, int64_t *out, struct rx_error *err)
{
    json_t *v = json_object_get(o, key);

    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return fail(err, key, "must be a non-negative integer");
    *out = json_integer_value(v);
    return 0;
}

static int get_str(json_t *o, const char *key, char **out, struct rx_error *err)
{
    json_t *v = json_object_get(o, key);

    if (!json_is_string(v))
        return fail(err, key, "must be a string");
    *out = rx_strndup(json_string_value(v), json_string_length(v));
    return *out ? 0 : -ENOMEM;
}

/*
 * What brain-send-message-complete may add to an assistant message: "usage"
 * {promptTokens, completionTokens}, "firstTokenAt", "reasoning"; each absent
 * or null when not given.
 */
static int decode_answer_extras(json_t *j, struct rx_message *m, struct rx_error *err)
{
    json_t *usage = json_object_get(j, "usage");
    json_t *first = json_object_get(j, "firstTokenAt");
    json_t *reasoning = json_object_get(j, "reasoning");
    int rc;

    if (usage && !json_is_null(usage)) {
        if (!json_is_object(usage))
            return fail(err, "usage", "must be {promptTokens, completionTokens}");
        if ((rc = get_time(usage, "promptTokens", &m->usage.prompt_tokens, err)) ||
            (rc = get_time(usage, "completionTokens", &m->usage.completion_tokens, err)))
            return rc;
        m->usage.present = true;
    }
    if (first && !json_is_null(first)) {
        if ((rc = get_time(j, "firstTokenAt", &m->first_token_at, err)))
            return rc;
        m->has_first_token_at = true;
    }
    m->restarted = json_is_true(json_object_get(j, "restarted"));
    if (reasoning && !json_is_null(reasoning))
        return get_str(j, "reasoning", &m->reasoning, err);
    return 0;
}

static int decode_message(json_t *j, bool assistant, struct rx_message *m,
                          struct rx_error *err)
{
    const char *kind = json_string_value(json_object_get(j, "kind"));
    int rc;

    memset(m, 0, sizeof(*m));
    if (!json_is_object(j))
        return fail(err, assistant ? "assistantMessages" : "userMessages",
                    "must hold objects");
    if (!kind || strcmp(kind, assistant ? "assistant" : "user"))
        return fail(err, "kind",
                    assistant ? "must be \"assistant\"" : "must be \"user\"");
    if ((rc = get_time(j, "receivedAt", &m->received_at, err)))
        return rc;
    if (assistant) {
        const char *st = json_string_value(json_object_get(j, "status"));

        if ((rc = get_time(j, "updatedAt", &m->updated_at, err)) ||
            (rc = get_time(j, "calledBrainAt", &m->called_brain_at, err)))
            return rc;
        if (!st || rx_status_parse(st, &m->status))
            return fail(err, "status", "must be streaming, complete or stopped");
    }
    if ((rc = get_str(j, "id", &m->id, err)))
        return rc;
    if ((rc = get_str(j, "content", &m->content, err)) ||
        (assistant && (rc = decode_answer_extras(j, m, err)))) {
        rx_state__message_release(m);
        return rc;
    }
    return 0;
}

static int decode_result(json_t *j, struct rx_tool_result *r, struct rx_error *err)
{
    json_t *ok = json_object_get(j, "isSuccess");
    int rc;

    if (json_is_null(j))
        return 0;
    if (!json_is_object(j) || !json_is_boolean(ok))
        return fail(err, "result",
                    "must be null or {isSuccess, content|error, receivedAt}");
    r->is_success = json_is_true(ok);
    if ((rc = get_time(j, "receivedAt", &r->received_at, err)))
        return rc;
    if ((rc = get_str(j, r->is_success ? "content" : "error", &r->text, err)))
        return rc;
    r->present = true;
    return 0;
}

/* "approval": absent or null (none needed), or a known name. */
static int decode_approval(json_t *v, enum rx_approval *out, struct rx_error *err)
{
    *out = RX_APPROVAL_NONE;
    if (!v || json_is_null(v))
        return 0;
    if (rx_approval_parse(json_string_value(v), out))
        return fail(err, "approval",
                    "must be pending, approved, rejected, in-doubt or resolved");
    return 0;
}

/* "startedAt": absent or null (never started, as in snapshots older than
   SPEC 3.7), or a time; 0 reads as never started. */
static int decode_started(json_t *j, int64_t *out, struct rx_error *err)
{
    json_t *v = json_object_get(j, "startedAt");

    *out = 0;
    if (!v || json_is_null(v))
        return 0;
    return get_time(j, "startedAt", out, err);
}

static int decode_tool_call(json_t *j, struct rx_tool_call *c, struct rx_error *err)
{
    json_t *loaded = json_object_get(j, "isLoaded");
    int rc;

    memset(c, 0, sizeof(*c));
    if (!json_is_object(j))
        return fail(err, "toolCallRecords", "must hold objects");
    if (!json_is_boolean(loaded))
        return fail(err, "isLoaded", "must be a boolean");
    c->is_loaded = json_is_true(loaded);
    if ((rc = get_time(j, "calledAt", &c->called_at, err)) ||
        (rc = decode_started(j, &c->started_at, err)) ||
        (rc = decode_approval(json_object_get(j, "approval"), &c->approval, err)))
        return rc;
    if ((rc = get_str(j, "id", &c->id, err)) ||
        (rc = get_str(j, "name", &c->name, err)) ||
        (rc = get_str(j, "parameters", &c->parameters, err)) ||
        (rc = decode_result(json_object_get(j, "result"), &c->result, err)))
        goto out_release;
    return 0;

out_release:
    rx_state__tool_call_release(c);
    return rc;
}

static int decode_messages(json_t *arr, bool assistant, struct rx_message_list *l,
                           struct rx_error *err)
{
    size_t n = json_array_size(arr);
    int rc;

    if (!json_is_array(arr))
        return fail(err, assistant ? "assistantMessages" : "userMessages",
                    "must be an array");
    l->items = rx_malloc(n * sizeof(*l->items));
    if (!l->items)
        return -ENOMEM;
    l->cap = n;
    for (size_t i = 0; i < n; i++) {
        if ((rc = decode_message(json_array_get(arr, i), assistant, &l->items[i], err)))
            return rc;
        l->len++;
    }
    return 0;
}

int rx_state_decode(json_t *json, struct rx_state *out, struct rx_error *err)
{
    struct rx_state s;
    char *summary;
    json_t *tools = json_object_get(json, "toolCallRecords");
    size_t n;
    int rc;

    if (!json_is_object(json))
        return fail(err, "state", "must be an object");
    if ((rc = rx_state_init(&s)))
        return rc;
    if ((rc = get_time(json, "updatedAt", &s.updated_at, err)) ||
        (rc = get_time(json, "calledBrainAt", &s.called_brain_at, err)) ||
        (rc = get_time(json, "summaryCutAt", &s.summary_cut_at, err)))
        goto out_release;
    s.context_summary = NULL; /* the shared empty one: nothing to free */
    if ((rc = get_str(json, "contextSummary", &s.context_summary, err)))
        goto out_release;
    summary = s.context_summary;
    s.context_summary = NULL;
    rx_state_set_summary(&s, summary); /* "" becomes the shared one */
    /* Absent from snapshots older than tool approval: no overrides. */
    if ((rc = rx_policy_map_decode(json_object_get(json, "toolPolicies"), &s.policies,
                                   err)))
        goto out_release;
    /* Absent from snapshots older than per-session settings: none. */
    if ((rc = rx_settings_decode(json_object_get(json, "settings"), &s.settings, err)))
        goto out_release;
    if ((rc = decode_messages(json_object_get(json, "userMessages"), false, &s.user,
                              err)) ||
        (rc = decode_messages(json_object_get(json, "assistantMessages"), true,
                              &s.assistant, err)))
        goto out_release;
    if (!json_is_array(tools)) {
        rc = fail(err, "toolCallRecords", "must be an array");
        goto out_release;
    }
    n = json_array_size(tools);
    s.tools.items = rx_malloc(n * sizeof(*s.tools.items));
    if (!s.tools.items) {
        rc = -ENOMEM;
        goto out_release;
    }
    s.tools.cap = n;
    for (size_t i = 0; i < n; i++) {
        if ((rc = decode_tool_call(json_array_get(tools, i), &s.tools.items[i], err)))
            goto out_release;
        s.tools.len++;
    }
    if ((rc = rx_state__derive(&s)))
        goto out_release;
    if (!rx_state_check_invariants(&s)) {
        rc = fail(err, "state",
                  "breaks an invariant (duplicate id or time after updatedAt)");
        goto out_release;
    }
    *out = s;
    return 0;

out_release:
    rx_state_release(&s);
    return rc;
}
