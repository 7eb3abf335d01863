/*
 * mcp_rpc - the JSON-RPC 2.0 messages of an MCP client. See mcp_rpc.h.
 */
#include "effects/mcp_rpc.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "effects/mcp_rpc_internal.h"

/* Newest first: the order we would prefer, were we ever to choose. */
static const char *const versions[] = {MCP_RPC_VERSION_LATEST, "2025-06-18",
                                       MCP_RPC_VERSION_OLDEST};

/* The smallest json_int_t: jansson names its type, not its bounds. */
#if JSON_INTEGER_IS_LONG_LONG
#define INT_VALUE_MIN LLONG_MIN
#else
#define INT_VALUE_MIN LONG_MIN
#endif

bool mcp_rpc_version_supported(const char *v)
{
    if (!v)
        return false;
    for (size_t i = 0; i < sizeof(versions) / sizeof(versions[0]); i++)
        if (!strcmp(v, versions[i]))
            return true;
    return false;
}

/* ---------------------------------------------------------------- helpers */

bool mcp_rpc_is_plain_string(json_t *v)
{
    return json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v);
}

const char *mcp_rpc_get_string(json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

int mcp_rpc_quote_len(const char *s)
{
    size_t n = strnlen(s, MCP_RPC_QUOTE_MAX);

    if (s[n])
        while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80)
            n--;
    return (int)n;
}

/* Parse a whole decimal number that fits json_int_t: 0 or -ERANGE/-EINVAL. */
static int parse_int(const char *s, bool allow_sign, json_int_t *out)
{
    json_int_t v = 0;
    bool neg = false;

    if (allow_sign && *s == '-') {
        neg = true;
        s++;
    }
    if (!*s)
        return -EINVAL;
    /* Accumulate negatively so that the most negative value parses too. */
    for (; *s; s++) {
        int d = *s - '0';

        if (d < 0 || d > 9)
            return -EINVAL;
        if (v < (INT_VALUE_MIN + d) / 10)
            return -ERANGE;
        v = v * 10 - d;
    }
    if (!neg && v == INT_VALUE_MIN)
        return -ERANGE;
    *out = neg ? v : -v;
    return 0;
}

/* ---------------------------------------------------------------- building */

/* {"jsonrpc":"2.0"} plus `key: value` (value stolen); NULL when out of memory. */
static json_t *envelope(const char *key, json_t *value)
{
    json_t *msg = json_object();

    if (!msg || json_object_set_new(msg, "jsonrpc", json_string("2.0"))) {
        json_decref(value);
        json_decref(msg);
        return NULL;
    }
    if (key && json_object_set_new(msg, key, value)) {
        json_decref(msg);
        return NULL;
    }
    return msg;
}

/* Add "method" and, when given, "params" (stolen) to msg (stolen). */
static json_t *with_method(json_t *msg, const char *method, json_t *params)
{
    if (!msg || json_object_set_new(msg, "method", json_string(method)))
        goto err_decref;
    if (params && json_object_set_new(msg, "params", params)) {
        params = NULL; /* set_new dropped it */
        goto err_decref;
    }
    return msg;

err_decref:
    json_decref(params);
    json_decref(msg);
    return NULL;
}

json_t *mcp_rpc_request(json_int_t id, const char *method, json_t *params)
{
    if (!method) {
        json_decref(params);
        return NULL;
    }
    return with_method(envelope("id", json_integer(id)), method, params);
}

json_t *mcp_rpc_notification(const char *method, json_t *params)
{
    if (!method) {
        json_decref(params);
        return NULL;
    }
    return with_method(envelope(NULL, NULL), method, params);
}

json_t *mcp_rpc_result(json_t *id, json_t *result)
{
    json_t *msg;

    if (!id || !result) {
        json_decref(result);
        return NULL;
    }
    msg = envelope("id", json_deep_copy(id));
    if (!msg) {
        json_decref(result);
        return NULL;
    }
    if (json_object_set_new(msg, "result", result)) {
        json_decref(msg);
        return NULL;
    }
    return msg;
}

json_t *mcp_rpc_error(json_t *id, int code, const char *message)
{
    json_t *msg = envelope("id", id ? json_deep_copy(id) : json_null());

    if (!msg || json_object_set_new(msg, "error",
                                    json_pack("{s:i, s:s}", "code", code, "message",
                                              message ? message : ""))) {
        json_decref(msg);
        return NULL;
    }
    return msg;
}

json_t *mcp_rpc_initialize_params(const char *client_version)
{
    return json_pack("{s:s, s:{}, s:{s:s, s:s}}", "protocolVersion",
                     MCP_RPC_VERSION_LATEST, "capabilities", "clientInfo", "name",
                     "reflexor", "version", client_version ? client_version : "unknown");
}

json_t *mcp_rpc_call_params(json_int_t id, const char *tool, json_t *arguments,
                            const char *key)
{
    /* "o" steals even when the pack fails; "s" with NULL fails the pack. */
    json_t *p = json_pack("{s:s, s:o, s:{s:o}}", "name", tool, "arguments",
                          arguments ? arguments : json_object(), "_meta", "progressToken",
                          mcp_rpc_progress_token(id));

    if (p && key &&
        json_object_set_new(json_object_get(p, "_meta"), MCP_RPC_IDEMPOTENCY_KEY,
                            json_string(key))) {
        json_decref(p);
        return NULL;
    }
    return p;
}

json_t *mcp_rpc_cancelled(json_int_t id, const char *reason)
{
    json_t *params = json_pack("{s:I}", "requestId", id);

    if (!params)
        return NULL;
    if (reason && json_object_set_new(params, "reason", json_string(reason))) {
        json_decref(params);
        return NULL;
    }
    return mcp_rpc_notification("notifications/cancelled", params);
}

json_t *mcp_rpc_reply(json_t *request)
{
    const char *method = NULL;
    char text[MCP_RPC_QUOTE_MAX + 32];

    if (mcp_rpc_classify(request, NULL, &method) != MCP_RPC_REQUEST)
        return NULL;
    if (!strcmp(method, "ping"))
        return mcp_rpc_result(json_object_get(request, "id"), json_object());
    snprintf(text, sizeof(text), "method not found: '%.*s'", mcp_rpc_quote_len(method),
             method);
    return mcp_rpc_error(json_object_get(request, "id"), MCP_RPC_METHOD_NOT_FOUND, text);
}

/* -------------------------------------------------------------- initialize */

static int check_version(json_t *v, struct rx_error *err)
{
    const char *s = json_string_value(v);

    if (!v)
        return rx_error_set(err, -EPROTO,
                            "initialize result: 'protocolVersion' is missing");
    if (!mcp_rpc_is_plain_string(v))
        return rx_error_set(err, -EPROTO,
                            "initialize result: 'protocolVersion' is not a string");
    if (mcp_rpc_version_supported(s))
        return 0;
    /* Dates compare as strings: name the way out that applies. */
    if (strcmp(s, MCP_RPC_VERSION_OLDEST) < 0)
        return rx_error_set(err, -EPROTO,
                            "the server speaks protocol '%.*s', which Reflexor does not: "
                            "it needs " MCP_RPC_VERSION_OLDEST " or newer",
                            mcp_rpc_quote_len(s), s);
    return rx_error_set(err, -EPROTO,
                        "the server speaks protocol '%.*s', which Reflexor does not: it "
                        "speaks " MCP_RPC_VERSION_LATEST
                        ", 2025-06-18 and " MCP_RPC_VERSION_OLDEST,
                        mcp_rpc_quote_len(s), s);
}

/* capabilities.tools.listChanged, checking the types on the way. */
static int check_capabilities(json_t *caps, bool *list_changed, struct rx_error *err)
{
    json_t *tools, *lc;

    if (!caps)
        return rx_error_set(err, -EPROTO, "initialize result: 'capabilities' is missing");
    if (!json_is_object(caps))
        return rx_error_set(err, -EPROTO,
                            "initialize result: 'capabilities' is not an object");
    tools = json_object_get(caps, "tools");
    if (tools && !json_is_object(tools))
        return rx_error_set(err, -EPROTO,
                            "initialize result: 'capabilities.tools' is not an object");
    lc = json_object_get(tools, "listChanged");
    if (lc && !json_is_boolean(lc))
        return rx_error_set(
            err, -EPROTO,
            "initialize result: 'capabilities.tools.listChanged' is not a boolean");
    *list_changed = json_is_true(lc);
    return 0;
}

int mcp_rpc_check_initialize(json_t *result, char *version_out, size_t size,
                             bool *list_changed, struct rx_error *err)
{
    bool lc = false;
    const char *v;
    int rc;

    if (!json_is_object(result))
        return rx_error_set(err, -EPROTO, "initialize result: not an object");
    rc = check_version(json_object_get(result, "protocolVersion"), err);
    if (rc)
        return rc;
    rc = check_capabilities(json_object_get(result, "capabilities"), &lc, err);
    if (rc)
        return rc;
    v = mcp_rpc_get_string(result, "protocolVersion");
    if (strlen(v) >= size)
        return rx_error_set(err, -EINVAL, "initialize: no room for the protocol version");
    memcpy(version_out, v, strlen(v) + 1);
    if (list_changed)
        *list_changed = lc;
    return 0;
}

/* ------------------------------------------------------------- classifying */

/* A response's id: an integer, or a string of decimal digits (some servers). */
static bool response_id(json_t *v, json_int_t *out)
{
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        return true;
    }
    return mcp_rpc_is_plain_string(v) && parse_int(json_string_value(v), false, out) == 0;
}

static enum mcp_rpc_kind classify_call(json_t *msg, const char **method)
{
    json_t *id = json_object_get(msg, "id");
    const char *m = mcp_rpc_get_string(msg, "method");

    /* A method with NULs would be matched on a prefix: refuse it. */
    if (!mcp_rpc_is_plain_string(json_object_get(msg, "method")))
        return MCP_RPC_INVALID;
    if (json_object_get(msg, "result") || json_object_get(msg, "error"))
        return MCP_RPC_INVALID;
    if (id && !json_is_integer(id) && !json_is_string(id))
        return MCP_RPC_INVALID; /* MCP: ids are strings or integers, never null */
    if (method)
        *method = m;
    return id ? MCP_RPC_REQUEST : MCP_RPC_NOTIFICATION;
}

enum mcp_rpc_kind mcp_rpc_classify(json_t *msg, json_int_t *id, const char **method)
{
    json_t *result, *error;
    json_int_t v;

    if (!json_is_object(msg))
        return MCP_RPC_INVALID; /* batches included: the caller iterates */
    if (!mcp_rpc_is_plain_string(json_object_get(msg, "jsonrpc")) ||
        strcmp(mcp_rpc_get_string(msg, "jsonrpc"), "2.0"))
        return MCP_RPC_INVALID;
    if (json_object_get(msg, "method"))
        return classify_call(msg, method);
    result = json_object_get(msg, "result");
    error = json_object_get(msg, "error");
    if (!result == !error)
        return MCP_RPC_INVALID;
    if (!response_id(json_object_get(msg, "id"), &v))
        return MCP_RPC_INVALID;
    if (id)
        *id = v;
    return result ? MCP_RPC_RESPONSE : MCP_RPC_ERROR_RESPONSE;
}

/* A fixed buffer for json_dump_callback: keeps what fits, then stops the dump. */
struct cut_buf {
    char *p;
    size_t len, cap; /* cap counts the NUL */
};

static int dump_cut(const char *s, size_t n, void *data)
{
    struct cut_buf *c = data;
    size_t room = c->cap - 1 - c->len, k = n < room ? n : room;

    memcpy(c->p + c->len, s, k);
    c->len += k;
    c->p[c->len] = '\0';
    return k < n ? -1 : 0;
}

/* " (<data>)" of an error; "" without data. Never allocates: it cannot fail. */
static void error_detail(json_t *data, char *out, size_t size)
{
    char dump[RX_ERR_LEN] = "";
    struct cut_buf c = {dump, 0, sizeof(dump)};

    out[0] = '\0';
    if (!data || json_is_null(data))
        return;
    if (json_is_string(data))
        snprintf(out, size, " (%s)", json_string_value(data));
    else if (json_dump_callback(data, dump_cut, &c, JSON_COMPACT | JSON_ENCODE_ANY) ==
                 0 ||
             c.len)
        snprintf(out, size, " (%s)", dump); /* a cut dump is still worth showing */
}

int mcp_rpc_error_text(json_t *msg, struct rx_error *err)
{
    json_t *e = json_object_get(msg, "error"), *code = json_object_get(e, "code");
    const char *message = mcp_rpc_get_string(e, "message");
    char detail[RX_ERR_LEN];

    if (!json_is_object(e) || (!json_is_integer(code) && !message))
        return rx_error_set(err, -EIO, "MCP error: the server sent a malformed error");
    error_detail(json_object_get(e, "data"), detail, sizeof(detail));
    if (!json_is_integer(code))
        return rx_error_set(err, -EIO, "MCP error: %s%s", message, detail);
    return rx_error_set(err, -EIO, "MCP error %" JSON_INTEGER_FORMAT ": %s%s",
                        json_integer_value(code), message ? message : "no message",
                        detail);
}

/* --------------------------------------------------------------- progress */

#define TOKEN_PREFIX "rx-"

json_t *mcp_rpc_progress_token(json_int_t id)
{
    char s[sizeof(TOKEN_PREFIX) + 24];

    snprintf(s, sizeof(s), TOKEN_PREFIX "%" JSON_INTEGER_FORMAT, id);
    return json_string(s);
}

int mcp_rpc_progress_id(json_t *token, json_int_t *id)
{
    const char *s = json_string_value(token);
    char again[sizeof(TOKEN_PREFIX) + 24];
    json_int_t v;

    if (!mcp_rpc_is_plain_string(token) ||
        strncmp(s, TOKEN_PREFIX, strlen(TOKEN_PREFIX)) ||
        parse_int(s + strlen(TOKEN_PREFIX), true, &v))
        return -ENOENT;
    /* Only the exact form we make: "rx-007" or "rx--0" are someone else's. */
    snprintf(again, sizeof(again), TOKEN_PREFIX "%" JSON_INTEGER_FORMAT, v);
    if (strcmp(s, again))
        return -ENOENT;
    *id = v;
    return 0;
}

/* ------------------------------------------------------------------ tools */

/*
 * Whether v holds a NUL ("\u0000") in a string or a key, anywhere: such a
 * string would be cut where C code reads it, or reach an LLM API that
 * refuses it. The depth is bounded by the parser's.
 */
static bool has_nul(json_t *v)
{
    const char *key;
    json_t *x;
    size_t i;

    if (json_is_string(v))
        return !mcp_rpc_is_plain_string(v);
    json_array_foreach(v, i, x)
    {
        if (has_nul(x))
            return true;
    }
    json_object_foreach(v, key, x)
    {
        if (strlen(key) != json_object_iter_key_len(json_object_key_to_iter(key)) ||
            has_nul(x))
            return true;
    }
    return false;
}

/* Whether tools/list entry t can be offered; why not is only counted. */
static bool tool_is_usable(json_t *t)
{
    json_t *name = json_object_get(t, "name"),
           *schema = json_object_get(t, "inputSchema");

    return json_is_object(t) && mcp_rpc_is_plain_string(name) &&
           json_string_length(name) > 0 && (!schema || json_is_object(schema)) &&
           !has_nul(t);
}

/* The copy of a usable entry that we keep: NEW, or NULL when out of memory. */
static json_t *tool_copy(json_t *t)
{
    json_t *schema = json_object_get(t, "inputSchema");
    json_t *ann = json_object_get(t, "annotations");
    const char *desc = mcp_rpc_get_string(t, "description");

    /* "s" copies the name: nothing of `result` is shared with the page. */
    return json_pack(
        "{s:s, s:s%, s:o, s:o}", "name", mcp_rpc_get_string(t, "name"), "description",
        desc ? desc : "",
        desc ? json_string_length(json_object_get(t, "description")) : 0, "inputSchema",
        schema ? json_deep_copy(schema)
               : json_pack("{s:s, s:{}}", "type", "object", "properties"),
        "annotations", json_is_object(ann) ? json_deep_copy(ann) : json_object());
}

static int page_cursor(json_t *result, json_t **cursor, struct rx_error *err)
{
    json_t *c = json_object_get(result, "nextCursor");

    *cursor = NULL;
    if (!c || json_is_null(c))
        return 0;
    if (!json_is_string(c))
        return rx_error_set(err, -EPROTO,
                            "tools/list result: 'nextCursor' is not a string");
    if (json_string_length(c) == 0)
        return 0;
    *cursor = json_incref(c);
    return 0;
}

int mcp_rpc_tools_page(json_t *result, json_t *tools, json_t **cursor_out,
                       size_t *skipped, struct rx_error *err)
{
    json_t *list = json_object_get(result, "tools"), *page, *t, *cursor;
    size_t i, n_skipped = 0;
    int rc;

    if (!json_is_object(result))
        return rx_error_set(err, -EPROTO, "tools/list result: not an object");
    if (!json_is_array(list))
        return rx_error_set(err, -EPROTO, "tools/list result: 'tools' is not an array");
    rc = page_cursor(result, &cursor, err);
    if (rc)
        return rc;
    /* Built apart and added in one go, so a failure appends nothing. */
    page = json_array();
    if (!page)
        goto err_decref_cursor;
    json_array_foreach(list, i, t)
    {
        if (!tool_is_usable(t)) {
            n_skipped++;
            continue;
        }
        if (json_array_append_new(page, tool_copy(t)))
            goto err_decref_page;
    }
    if (json_array_extend(tools, page))
        goto err_decref_page;
    json_decref(page);
    if (skipped)
        *skipped = n_skipped;
    if (cursor_out)
        *cursor_out = cursor;
    else
        json_decref(cursor);
    return 0;

err_decref_page:
    json_decref(page);
err_decref_cursor:
    json_decref(cursor);
    return rx_error_set(err, -ENOMEM, "tools/list: out of memory");
}

static bool name_char_ok(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '-';
}

/*
 * Append the sanitised `s` to out[*len], up to MCP_RPC_NAME_MAX. A UTF-8
 * sequence becomes one '_' ("café" is "caf_", not "caf__"), so names in other
 * scripts keep their length in characters; a stray byte is one '_' too.
 */
static void put_sanitised(char *out, size_t *len, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;

    while (*p && *len < MCP_RPC_NAME_MAX) {
        if (name_char_ok(*p)) {
            out[(*len)++] = (char)*p++;
            continue;
        }
        out[(*len)++] = '_';
        if (*p++ < 0xc0)
            continue; /* ASCII or a stray continuation byte */
        while ((*p & 0xc0) == 0x80)
            p++;
    }
    out[*len] = '\0';
}

int mcp_rpc_tool_name(const char *server, const char *tool,
                      bool (*taken)(void *ctx, const char *name), void *ctx,
                      unsigned *next, char out[MCP_RPC_NAME_MAX + 1])
{
    char base[MCP_RPC_NAME_MAX + 1], name[MCP_RPC_NAME_MAX + 1], suffix[16];
    unsigned first = next && *next > 2 ? *next : 2;
    size_t len = 0;

    put_sanitised(base, &len, server);
    put_sanitised(base, &len, "__");
    put_sanitised(base, &len, tool);
    if (!taken || !taken(ctx, base)) {
        memcpy(out, base, len + 1);
        return 0;
    }
    /* The name itself was one try: MCP_RPC_NAME_TRIES - 1 suffixes remain. */
    for (unsigned n = first; n - first < MCP_RPC_NAME_TRIES - 1 && n < UINT_MAX; n++) {
        int k = snprintf(suffix, sizeof(suffix), "_%u", n);
        size_t keep =
            len < MCP_RPC_NAME_MAX - (size_t)k ? len : MCP_RPC_NAME_MAX - (size_t)k;

        memcpy(name, base, keep);
        memcpy(name + keep, suffix, (size_t)k + 1);
        if (!taken(ctx, name)) {
            memcpy(out, name, strlen(name) + 1);
            if (next)
                *next = n + 1;
            return 0;
        }
    }
    return -EEXIST;
}
