/*
 * rx_input - parse, encode and copy the Reflexor inputs. See rx_input.h.
 */
#include "state_machine/rx_input.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "state_machine/rx_alloc.h"
#include "state_machine/rx_json.h"

static const struct {
    const char *name;
    enum rx_origin origin;
} types[] = {
#define RX_X(e, name, origin) {name, origin},
    RX_INPUT_TYPES(RX_X)
#undef RX_X
};

const char *rx_input_type_name(enum rx_input_type t)
{
    return types[t].name;
}

enum rx_origin rx_input_type_origin(enum rx_input_type t)
{
    return types[t].origin;
}

int rx_input_type_parse(const char *name, enum rx_input_type *out)
{
    for (size_t i = 0; i < RX_IN__COUNT; i++) {
        if (!strcmp(name, types[i].name)) {
            *out = (enum rx_input_type)i;
            return 0;
        }
    }
    return -EINVAL;
}

static const char *const decision_names[] = {
    [RX_DECISION_APPROVE] = "approve",
    [RX_DECISION_REJECT] = "reject",
    [RX_DECISION_RETRY] = "retry",
    [RX_DECISION_RESOLVE] = "resolve",
};

#define N_DECISIONS (sizeof(decision_names) / sizeof(decision_names[0]))

const char *rx_decision_name(enum rx_decision d)
{
    return (size_t)d < N_DECISIONS ? decision_names[d] : NULL;
}

int rx_decision_parse(const char *s, enum rx_decision *out)
{
    for (size_t i = 1; s && i < N_DECISIONS; i++) {
        if (!strcmp(s, decision_names[i])) {
            *out = (enum rx_decision)i;
            return 0;
        }
    }
    return -EINVAL;
}

static void calls_release(struct rx_input_call *calls, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        rx_free(calls[i].id);
        rx_free(calls[i].name);
        rx_free(calls[i].parameters);
    }
    rx_free(calls);
}

void rx_input_release(struct rx_input *in)
{
    rx_free(in->message_id);
    rx_free(in->content);
    rx_free(in->tool_call_id);
    rx_free(in->text);
    rx_free(in->parameters);
    rx_free(in->tool);
    rx_free(in->reasoning);
    rx_settings_release(&in->settings);
    calls_release(in->calls, in->n_calls);
    memset(in, 0, sizeof(*in));
}

int rx_input_set_str(char **field, const char *value)
{
    char *d = rx_strdup(value);

    if (!d)
        return -ENOMEM;
    rx_free(*field);
    *field = d;
    return 0;
}

/* ---- parsing ------------------------------------------------------------- */

struct parse {
    json_t *json;
    const char **field;
    struct rx_error *err;
};

static int bad(struct parse *p, const char *field, const char *why)
{
    *p->field = field;
    rx_error_set(p->err, 0, "'%s' %s", field, why);
    return -EINVAL;
}

static int want_time(struct parse *p, const char *key, int64_t *out, bool *present)
{
    json_t *v = json_object_get(p->json, key);

    if (present)
        *present = v && !json_is_null(v);
    if ((!v || json_is_null(v)) && present)
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return bad(p, key, "must be a non-negative integer (milliseconds)");
    *out = json_integer_value(v);
    return 0;
}

/* A required string, or an optional one when `optional` (absent/null -> NULL). */
static int want_str(struct parse *p, const char *key, char **out, bool optional)
{
    json_t *v = json_object_get(p->json, key);

    if (optional && (!v || json_is_null(v)))
        return 0;
    if (!json_is_string(v))
        return bad(p, key, "must be a string");
    /* A NUL would cut the text silently once it is a C string. */
    if (strlen(json_string_value(v)) != json_string_length(v))
        return bad(p, key, "must not contain \\u0000");
    *out = rx_strndup(json_string_value(v), json_string_length(v));
    return *out ? 0 : -ENOMEM;
}

/* Strings that must name something: an empty id would be a key to nothing. */
static int want_id(struct parse *p, const char *key, char **out, bool optional)
{
    int rc = want_str(p, key, out, optional);

    if (!rc && *out && (!**out || strlen(*out) > RX_ID_MAX))
        return bad(p, key, "must be 1 to 128 bytes long");
    return rc;
}

static int parse_tool_calls(struct parse *p, struct rx_input *in)
{
    json_t *calls = json_object_get(p->json, "toolCalls"), *v;
    const char *id;
    size_t i = 0;

    if (!json_is_object(calls) || !json_object_size(calls))
        return bad(p, "toolCalls", "must be a non-empty object {id: {name, parameters}}");
    in->calls = rx_malloc(json_object_size(calls) * sizeof(*in->calls));
    if (!in->calls)
        return -ENOMEM;
    memset(in->calls, 0, json_object_size(calls) * sizeof(*in->calls));
    /* jansson keeps insertion order, so this is document order. */
    json_object_foreach(calls, id, v)
    {
        json_t *name = json_object_get(v, "name");
        json_t *params = json_object_get(v, "parameters");
        json_t *policy = json_object_get(v, "policy");
        struct rx_input_call *c = &in->calls[i];

        if (!*id || strlen(id) > RX_ID_MAX)
            return bad(p, "toolCalls", "ids must be 1 to 128 bytes long");
        if (!json_is_object(v) || !json_is_string(name) || !json_string_length(name))
            return bad(p, "toolCalls.name", "must be a non-empty string");
        if (!json_is_string(params) && !json_is_object(params))
            return bad(p, "toolCalls.parameters", "must be a JSON text or an object");
        /* The server's stamp (SPEC 3.6); absent or null in older logs. */
        if (policy && !json_is_null(policy) &&
            rx_policy_parse(json_string_value(policy), &c->policy))
            return bad(p, "toolCalls.policy", "must be \"auto\", \"ask\" or \"deny\"");
        in->n_calls = ++i;
        c->id = rx_strdup(id);
        c->name = rx_strdup(json_string_value(name));
        /* An object is kept as its compact text: the state stores text. */
        c->parameters = json_is_string(params)
                            ? rx_strdup(json_string_value(params))
                            : json_dumps(params, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (!c->id || !c->name || !c->parameters)
            return -ENOMEM;
    }
    return 0;
}

static int parse_partials(struct parse *p, struct rx_input *in)
{
    json_t *parts = json_object_get(p->json, "partialContents"), *v;
    const char *id;
    size_t i = 0;

    if (!parts || json_is_null(parts))
        return 0;
    if (!json_is_object(parts))
        return bad(p, "partialContents", "must be an object {messageId: text}");
    in->calls = rx_malloc((json_object_size(parts) + 1) * sizeof(*in->calls));
    if (!in->calls)
        return -ENOMEM;
    memset(in->calls, 0, (json_object_size(parts) + 1) * sizeof(*in->calls));
    json_object_foreach(parts, id, v)
    {
        if (!json_is_string(v))
            return bad(p, "partialContents", "values must be strings");
        in->n_calls = ++i;
        in->calls[i - 1].id = rx_strdup(id);
        in->calls[i - 1].parameters = rx_strdup(json_string_value(v));
        if (!in->calls[i - 1].id || !in->calls[i - 1].parameters)
            return -ENOMEM;
    }
    return 0;
}

/* An optional boolean: absent or null is false. */
static int want_bool(struct parse *p, const char *key, bool *out)
{
    json_t *v = json_object_get(p->json, key);

    if (v && !json_is_null(v) && !json_is_boolean(v))
        return bad(p, key, "must be a boolean");
    *out = json_is_true(v);
    return 0;
}

static int parse_review(struct parse *p, struct rx_input *in)
{
    const char *d = json_string_value(json_object_get(p->json, "decision"));
    char *reason = NULL, *result = NULL;
    int rc;

    if ((rc = want_id(p, "toolCallId", &in->tool_call_id, false)))
        return rc;
    if (rx_decision_parse(d, &in->decision))
        return bad(p, "decision",
                   "must be \"approve\", \"reject\", \"retry\" or \"resolve\"");
    if ((rc = want_bool(p, "always", &in->always)) ||
        (rc = want_str(p, "reason", &reason, true)) ||
        (rc = want_str(p, "result", &result, in->decision != RX_DECISION_RESOLVE)) ||
        (rc = want_str(p, "parameters", &in->parameters, true)))
        goto out_free;
    if (in->parameters &&
        !rx_json_is_object_text(in->parameters, strlen(in->parameters))) {
        rc = bad(p, "parameters", "must be the JSON text of an object");
        goto out_free;
    }
    /* Each belongs to one decision; the others are dropped, never applied. */
    if (in->decision == RX_DECISION_REJECT) {
        in->text = reason;
        reason = NULL;
    } else if (in->decision == RX_DECISION_RESOLVE) {
        in->text = result;
        result = NULL;
    }
    if (in->decision != RX_DECISION_APPROVE) {
        rx_free(in->parameters);
        in->parameters = NULL;
    }
    if (in->decision != RX_DECISION_APPROVE && in->decision != RX_DECISION_REJECT)
        in->always = false;

out_free:
    rx_free(reason);
    rx_free(result);
    return rc;
}

static int parse_set_policy(struct parse *p, struct rx_input *in)
{
    json_t *v = json_object_get(p->json, "policy");
    int rc;

    if ((rc = want_str(p, "tool", &in->tool, false)))
        return rc;
    if (!*in->tool)
        return bad(p, "tool", "must not be empty");
    /* null clears the override; absent is a mistake, not a clear. */
    if (!v || (!json_is_null(v) && rx_policy_parse(json_string_value(v), &in->policy)))
        return bad(p, "policy", "must be \"auto\", \"ask\", \"deny\" or null");
    return 0;
}

static int parse_configure(struct parse *p, struct rx_input *in)
{
    int rc =
        rx_settings_read(p->json, &in->settings, &in->settings_named, p->field, p->err);

    if (rc)
        return rc;
    if (!in->settings_named)
        return bad(p, "settings",
                   "needs at least one of systemPrompt, model or temperature");
    return 0;
}

/* What a complete may say about its answer: usage, firstTokenAt, reasoning. */
static int parse_answer_extras(struct parse *p, struct rx_input *in)
{
    json_t *usage = json_object_get(p->json, "usage");
    json_t *pt = json_object_get(usage, "promptTokens");
    json_t *ct = json_object_get(usage, "completionTokens");
    int rc;

    if (usage && !json_is_null(usage)) {
        if (!json_is_object(usage) || !json_is_integer(pt) || !json_is_integer(ct) ||
            json_integer_value(pt) < 0 || json_integer_value(ct) < 0)
            return bad(p, "usage",
                       "must be {promptTokens, completionTokens}, non-negative integers");
        in->usage.present = true;
        in->usage.prompt_tokens = json_integer_value(pt);
        in->usage.completion_tokens = json_integer_value(ct);
    }
    if ((rc = want_time(p, "firstTokenAt", &in->first_token_at, &in->has_first_token_at)))
        return rc;
    if (json_object_get(p->json, "restarted")) {
        json_t *r = json_object_get(p->json, "restarted");

        if (!json_is_boolean(r))
            return bad(p, "restarted", "must be true or false");
        in->restarted = json_is_true(r);
    }
    return want_str(p, "reasoning", &in->reasoning, true);
}

static int parse_body(struct parse *p, struct rx_input *in)
{
    int rc = 0;

    if (rx_input_type_origin(in->type) == RX_ORIGIN_BRAIN &&
        (rc = want_time(p, "calledBrainAt", &in->called_brain_at, NULL)))
        return rc;
    switch (in->type) {
    case RX_IN_USER_SEND_MESSAGE:
        if ((rc = want_id(p, "messageId", &in->message_id, true)) ||
            (rc = want_str(p, "content", &in->content, false)))
            return rc;
        if (rx_text_is_blank(in->content))
            return bad(p, "content", "must not be blank");
        return 0;
    case RX_IN_USER_CANCEL:
        return parse_partials(p, in);
    case RX_IN_USER_REVIEW_TOOL_CALL:
        return parse_review(p, in);
    case RX_IN_USER_SET_TOOL_POLICY:
        return parse_set_policy(p, in);
    case RX_IN_USER_CONFIGURE:
        return parse_configure(p, in);
    case RX_IN_BRAIN_SEND_MESSAGE_START:
        return want_id(p, "messageId", &in->message_id, false);
    case RX_IN_BRAIN_SEND_MESSAGE_COMPLETE:
        if ((rc = want_id(p, "messageId", &in->message_id, false)) ||
            (rc = want_str(p, "content", &in->content, false)))
            return rc;
        return parse_answer_extras(p, in);
    case RX_IN_BRAIN_CALL_TOOLS:
        return parse_tool_calls(p, in);
    case RX_IN_BRAIN_COMPRESS_HISTORY:
        if ((rc = want_str(p, "summary", &in->text, false)))
            return rc;
        return want_time(p, "cutAt", &in->cut_at, NULL);
    case RX_IN_BRAIN_LOAD_TOOL_CALL:
        return want_id(p, "toolCallId", &in->tool_call_id, false);
    case RX_IN_TOOLKIT_START_CALL:
    case RX_IN_TOOLKIT_CALL_IN_DOUBT:
        return want_id(p, "toolCallId", &in->tool_call_id, false);
    case RX_IN_TOOLKIT_RESPOND:
    case RX_IN_TOOLKIT_ERROR:
        if ((rc = want_id(p, "toolCallId", &in->tool_call_id, false)))
            return rc;
        return want_str(p, in->type == RX_IN_TOOLKIT_RESPOND ? "result" : "error",
                        &in->text, false);
    case RX_IN__COUNT:
        break;
    }
    return bad(p, "type", "is not an input type");
}

int rx_input_parse(json_t *json, struct rx_input *in, const char **field,
                   struct rx_error *err)
{
    const char *dummy;
    struct parse p = {json, field ? field : &dummy, err};
    struct rx_input tmp;
    json_t *type = json_object_get(json, "type");
    int rc;

    memset(&tmp, 0, sizeof(tmp));
    *p.field = NULL;
    if (!json_is_object(json))
        return bad(&p, "input", "must be a JSON object");
    if (!json_is_string(type))
        return bad(&p, "type", "must be a string");
    if (rx_input_type_parse(json_string_value(type), &tmp.type))
        return bad(&p, "type", "is not a known input type");
    if ((rc = want_time(&p, "timestamp", &tmp.timestamp, &tmp.has_timestamp)) ||
        (rc = parse_body(&p, &tmp))) {
        rx_input_release(&tmp);
        return rc;
    }
    *in = tmp;
    return 0;
}

/* ---- encoding ------------------------------------------------------------ */

#define PUT(call)                                                                        \
    do {                                                                                 \
        if ((err = (call)))                                                              \
            goto out_truncate;                                                           \
    } while (0)

static int put_key_str(struct rx_buf *b, const char *key, const char *v)
{
    int err;

    if ((err = rx_buf_printf(b, ",\"%s\":", key)))
        return err;
    return rx_buf_put_json_str(b, v);
}

int rx_input_encode(const struct rx_input *in, struct rx_buf *b)
{
    size_t start = b->len;
    int err;

    PUT(rx_buf_printf(b,
                      "{\"type\":\"%s\",\"timestamp\":", rx_input_type_name(in->type)));
    PUT(rx_buf_put_i64(b, in->timestamp));
    if (rx_input_type_origin(in->type) == RX_ORIGIN_BRAIN) {
        PUT(rx_buf_puts(b, ",\"calledBrainAt\":"));
        PUT(rx_buf_put_i64(b, in->called_brain_at));
    }
    if (in->message_id)
        PUT(put_key_str(b, "messageId", in->message_id));
    if (in->content)
        PUT(put_key_str(b, "content", in->content));
    if (in->tool_call_id)
        PUT(put_key_str(b, "toolCallId", in->tool_call_id));
    if (in->type == RX_IN_USER_REVIEW_TOOL_CALL && rx_decision_name(in->decision))
        PUT(put_key_str(b, "decision", rx_decision_name(in->decision)));
    if (in->text) {
        static const char *const text_key[RX_IN__COUNT] = {
            [RX_IN_TOOLKIT_RESPOND] = "result",
            [RX_IN_TOOLKIT_ERROR] = "error",
            [RX_IN_BRAIN_COMPRESS_HISTORY] = "summary",
            [RX_IN_USER_REVIEW_TOOL_CALL] = "reason",
        };
        const char *key = text_key[in->type];

        /* A review's text is the reason of a rejection or the result of a
           resolve. */
        if (in->type == RX_IN_USER_REVIEW_TOOL_CALL &&
            in->decision == RX_DECISION_RESOLVE)
            key = "result";
        if (key)
            PUT(put_key_str(b, key, in->text));
    }
    if (in->type == RX_IN_USER_REVIEW_TOOL_CALL) {
        if (in->parameters)
            PUT(put_key_str(b, "parameters", in->parameters));
        if (in->always)
            PUT(rx_buf_puts(b, ",\"always\":true"));
    }
    if (in->type == RX_IN_USER_SET_TOOL_POLICY) {
        const char *policy = rx_policy_name(in->policy);

        if (in->tool)
            PUT(put_key_str(b, "tool", in->tool));
        PUT(rx_buf_puts(b, ",\"policy\":"));
        PUT(policy ? rx_buf_put_json_str(b, policy) : rx_buf_puts(b, "null"));
    }
    if (in->type == RX_IN_USER_CONFIGURE)
        PUT(rx_settings_encode_named(&in->settings, in->settings_named, b));
    if (in->usage.present) {
        PUT(rx_buf_puts(b, ",\"usage\":{\"promptTokens\":"));
        PUT(rx_buf_put_i64(b, in->usage.prompt_tokens));
        PUT(rx_buf_puts(b, ",\"completionTokens\":"));
        PUT(rx_buf_put_i64(b, in->usage.completion_tokens));
        PUT(rx_buf_putc(b, '}'));
    }
    if (in->has_first_token_at) {
        PUT(rx_buf_puts(b, ",\"firstTokenAt\":"));
        PUT(rx_buf_put_i64(b, in->first_token_at));
    }
    if (in->reasoning)
        PUT(put_key_str(b, "reasoning", in->reasoning));
    if (in->restarted)
        PUT(rx_buf_puts(b, ",\"restarted\":true"));
    if (in->type == RX_IN_BRAIN_COMPRESS_HISTORY) {
        PUT(rx_buf_puts(b, ",\"cutAt\":"));
        PUT(rx_buf_put_i64(b, in->cut_at));
    }
    if (in->type == RX_IN_BRAIN_CALL_TOOLS || in->n_calls) {
        bool tools = in->type == RX_IN_BRAIN_CALL_TOOLS;

        PUT(rx_buf_puts(b, tools ? ",\"toolCalls\":{" : ",\"partialContents\":{"));
        for (size_t i = 0; i < in->n_calls; i++) {
            if (i)
                PUT(rx_buf_putc(b, ','));
            PUT(rx_buf_put_json_str(b, in->calls[i].id));
            if (tools) {
                PUT(rx_buf_puts(b, ":{\"name\":"));
                PUT(rx_buf_put_json_str(b, in->calls[i].name));
                PUT(rx_buf_puts(b, ",\"parameters\":"));
                PUT(rx_buf_put_json_str(b, in->calls[i].parameters));
                if (rx_policy_name(in->calls[i].policy)) {
                    PUT(rx_buf_puts(b, ",\"policy\":"));
                    PUT(rx_buf_put_json_str(b, rx_policy_name(in->calls[i].policy)));
                }
                PUT(rx_buf_putc(b, '}'));
            } else {
                PUT(rx_buf_putc(b, ':'));
                PUT(rx_buf_put_json_str(b, in->calls[i].parameters));
            }
        }
        PUT(rx_buf_putc(b, '}'));
    }
    PUT(rx_buf_putc(b, '}'));
    return 0;

out_truncate:
    rx_buf_truncate(b, start);
    return err;
}

/* ---- copying ------------------------------------------------------------- */

static int dup_opt(char **dst, const char *src)
{
    *dst = src ? rx_strdup(src) : NULL;
    return src && !*dst ? -ENOMEM : 0;
}

int rx_input_copy(const struct rx_input *src, struct rx_input *dst)
{
    struct rx_input t = *src;

    t.message_id = t.content = t.tool_call_id = t.text = t.parameters = t.tool = NULL;
    t.reasoning = NULL;
    rx_settings_init(&t.settings);
    t.calls = NULL;
    t.n_calls = 0;
    if (dup_opt(&t.message_id, src->message_id) || dup_opt(&t.content, src->content) ||
        dup_opt(&t.tool_call_id, src->tool_call_id) || dup_opt(&t.text, src->text) ||
        dup_opt(&t.parameters, src->parameters) || dup_opt(&t.tool, src->tool) ||
        dup_opt(&t.reasoning, src->reasoning) ||
        rx_settings_copy(&src->settings, &t.settings))
        goto out_release;
    if (src->n_calls) {
        t.calls = rx_malloc(src->n_calls * sizeof(*t.calls));
        if (!t.calls)
            goto out_release;
        memset(t.calls, 0, src->n_calls * sizeof(*t.calls));
        for (size_t i = 0; i < src->n_calls; i++) {
            t.n_calls = i + 1;
            t.calls[i].policy = src->calls[i].policy;
            if (dup_opt(&t.calls[i].id, src->calls[i].id) ||
                dup_opt(&t.calls[i].name, src->calls[i].name) ||
                dup_opt(&t.calls[i].parameters, src->calls[i].parameters))
                goto out_release;
        }
    }
    *dst = t;
    return 0;

out_release:
    rx_input_release(&t);
    return -ENOMEM;
}

/* Bytes of the blank character at `s`, or 0 when it is not blank. */
static size_t blank_len(const unsigned char *s)
{
    if (s[0] && strchr(" \t\n\v\f\r", s[0]))
        return 1;
    if (s[0] == 0xC2 && (s[1] == 0x85 || s[1] == 0xA0))
        return 2;
    if (s[0] == 0xE1 && s[1] == 0x9A && s[2] == 0x80)
        return 3;
    if (s[0] == 0xE2 && s[1] == 0x80 &&
        ((s[2] >= 0x80 && s[2] <= 0x8B) || s[2] == 0xA8 || s[2] == 0xA9 || s[2] == 0xAF))
        return 3;
    if (s[0] == 0xE2 && s[1] == 0x81 && (s[2] == 0x9F || s[2] == 0xA0))
        return 3;
    if (s[0] == 0xE3 && s[1] == 0x80 && s[2] == 0x80)
        return 3;
    if (s[0] == 0xEF && s[1] == 0xBB && s[2] == 0xBF)
        return 3;
    return 0;
}

bool rx_text_is_blank(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n;

    while ((n = blank_len(p)))
        p += n;
    return !*p;
}

bool rx_input_calls_depth_ok(const struct rx_input *in)
{
    if (in->type != RX_IN_BRAIN_CALL_TOOLS)
        return true;
    for (size_t i = 0; i < in->n_calls; i++)
        if (in->calls[i].parameters && !rx_json_depth_ok(in->calls[i].parameters))
            return false;
    return true;
}

void rx_input_clear_calls(struct rx_input *in)
{
    calls_release(in->calls, in->n_calls);
    in->calls = NULL;
    in->n_calls = 0;
}

int rx_input_add_partial(struct rx_input *in, const char *message_id, const char *text)
{
    struct rx_input_call c = {0}, *calls;

    c.id = rx_strdup(message_id);
    c.parameters = rx_strdup(text);
    calls = rx_realloc(in->calls, in->n_calls * sizeof(*calls),
                       (in->n_calls + 1) * sizeof(*calls));
    if (!c.id || !c.parameters || !calls) {
        rx_free(c.id);
        rx_free(c.parameters);
        if (calls)
            in->calls = calls;
        return -ENOMEM;
    }
    calls[in->n_calls++] = c;
    in->calls = calls;
    return 0;
}
