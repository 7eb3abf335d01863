/*
 * mcp_rpc_text - a tools/call result as the text the agent sees: the second
 * file of the mcp_rpc module (mcp_rpc_call_text, declared in mcp_rpc.h),
 * apart because it is the one part that builds text. Pure, as mcp_rpc.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "effects/mcp_rpc.h"
#include "effects/mcp_rpc_internal.h"
#include "state_machine/rx_buf.h"

/* --------------------------------------------------------- tools/call text */

/* The size of base64 `s` once decoded: 3 bytes per 4 symbols, '=' and spaces aside. */
static size_t base64_size(const char *s, size_t n)
{
    size_t symbols = 0;

    for (size_t i = 0; i < n; i++)
        if (s[i] != '=' && s[i] != ' ' && s[i] != '\n' && s[i] != '\r' && s[i] != '\t')
            symbols++;
    return symbols / 4 * 3 + (symbols % 4 ? symbols % 4 - 1 : 0);
}

/* Append n bytes of text, a NUL as U+FFFD: the C string must not end early. */
static int put_text(struct rx_buf *b, const char *s, size_t n)
{
    size_t start = 0;
    int rc;

    for (size_t i = 0; i < n; i++) {
        if (s[i])
            continue;
        if ((rc = rx_buf_append(b, s + start, i - start)) ||
            (rc = rx_buf_puts(b, "\xef\xbf\xbd")))
            return rc;
        start = i + 1;
    }
    return rx_buf_append(b, s + start, n - start);
}

static int put_json_text(struct rx_buf *b, json_t *s)
{
    return put_text(b, json_string_value(s), json_string_length(s));
}

/* "[<type> content]": a type we do not know, or a part that lacks what it needs. */
static int put_unknown(struct rx_buf *b, json_t *part)
{
    json_t *type = json_object_get(part, "type");

    if (!mcp_rpc_is_plain_string(type))
        return rx_buf_puts(b, "[malformed content]");
    return rx_buf_printf(b, "[%.*s content]", mcp_rpc_quote_len(json_string_value(type)),
                         json_string_value(type));
}

static int put_size(struct rx_buf *b, json_t *data)
{
    size_t n = base64_size(json_string_value(data), json_string_length(data));

    return rx_buf_printf(b, ", %zu byte%s", n, n == 1 ? "" : "s");
}

/* image and audio: "[image/png, 1234 bytes]". */
static int put_media(struct rx_buf *b, json_t *part)
{
    json_t *mime = json_object_get(part, "mimeType"),
           *data = json_object_get(part, "data");
    int rc;

    rc = rx_buf_putc(b, '[');
    if (!rc && json_is_string(mime))
        rc = put_json_text(b, mime);
    else if (!rc)
        rc = rx_buf_puts(b, mcp_rpc_get_string(part, "type"));
    if (!rc && json_is_string(data))
        rc = put_size(b, data);
    return rc ? rc : rx_buf_putc(b, ']');
}

/* resource_link: "[resource <name>: <uri>]" or "[resource: <uri>]". */
static int put_link(struct rx_buf *b, json_t *part)
{
    json_t *uri = json_object_get(part, "uri"), *name = json_object_get(part, "name");
    int rc;

    if (!json_is_string(uri))
        return put_unknown(b, part);
    rc = rx_buf_puts(b, "[resource");
    if (!rc && json_is_string(name) && json_string_length(name)) {
        rc = rx_buf_putc(b, ' ');
        if (!rc)
            rc = put_json_text(b, name);
    }
    if (!rc)
        rc = rx_buf_puts(b, ": ");
    if (!rc)
        rc = put_json_text(b, uri);
    return rc ? rc : rx_buf_putc(b, ']');
}

/* resource: its text, or "[resource <uri>, <mimeType>, N bytes]" for a blob. */
static int put_embedded(struct rx_buf *b, json_t *part)
{
    json_t *r = json_object_get(part, "resource");
    json_t *text = json_object_get(r, "text"), *uri = json_object_get(r, "uri");
    json_t *mime = json_object_get(r, "mimeType"), *blob = json_object_get(r, "blob");
    int rc;

    if (json_is_string(text))
        return put_json_text(b, text);
    if (!json_is_string(uri))
        return put_unknown(b, part);
    rc = rx_buf_puts(b, "[resource ");
    if (!rc)
        rc = put_json_text(b, uri);
    if (!rc && json_is_string(mime)) {
        rc = rx_buf_puts(b, ", ");
        if (!rc)
            rc = put_json_text(b, mime);
    }
    if (!rc && json_is_string(blob))
        rc = put_size(b, blob);
    return rc ? rc : rx_buf_putc(b, ']');
}

/* A text part proper: what decides whether structuredContent stands in. */
static bool is_text_part(json_t *part)
{
    const char *type = mcp_rpc_get_string(part, "type");

    return type && !strcmp(type, "text") && json_is_string(json_object_get(part, "text"));
}

static int put_part(struct rx_buf *b, json_t *part)
{
    const char *type = mcp_rpc_get_string(part, "type");

    if (is_text_part(part))
        return put_json_text(b, json_object_get(part, "text"));
    if (!type)
        return put_unknown(b, part);
    if (!strcmp(type, "image") || !strcmp(type, "audio"))
        return put_media(b, part);
    if (!strcmp(type, "resource_link"))
        return put_link(b, part);
    if (!strcmp(type, "resource"))
        return put_embedded(b, part);
    return put_unknown(b, part);
}

struct dump_ctx {
    struct rx_buf *b;
    int rc;
};

static int dump_to_buf(const char *s, size_t n, void *data)
{
    struct dump_ctx *d = data;

    d->rc = rx_buf_append(d->b, s, n);
    return d->rc ? -1 : 0;
}

/* Append structuredContent as compact JSON; -ENOMEM or -E2BIG, b unchanged. */
static int put_structured(struct rx_buf *b, json_t *sc)
{
    struct dump_ctx d = {b, 0};
    size_t before = b->len;

    if (!json_dump_callback(sc, dump_to_buf, &d, JSON_COMPACT | JSON_ENCODE_ANY))
        return 0;
    rx_buf_truncate(b, before);
    return d.rc ? d.rc : -ENOMEM; /* else jansson ran out of memory itself */
}

/* The whole text into b: the parts, preceded by structuredContent when stood in. */
static int build_text(struct rx_buf *b, json_t *content, json_t *sc)
{
    bool any_text = false, first = true;
    json_t *part;
    size_t i;
    int rc;

    json_array_foreach(content, i, part)
    {
        any_text |= is_text_part(part);
    }
    if (!any_text && sc) {
        if ((rc = put_structured(b, sc)))
            return rc;
        first = false;
    }
    json_array_foreach(content, i, part)
    {
        if (!first && (rc = rx_buf_putc(b, '\n')))
            return rc;
        if ((rc = put_part(b, part)))
            return rc;
        first = false;
    }
    return 0;
}

int mcp_rpc_call_text(json_t *result, char **text, bool *is_error, struct rx_error *err)
{
    json_t *content = json_object_get(result, "content");
    json_t *sc = json_object_get(result, "structuredContent");
    struct rx_buf b;
    int rc;

    if (!json_is_object(result))
        return rx_error_set(err, -EPROTO, "tools/call result: not an object");
    /* null is how some servers say "none" */
    if (json_is_null(sc))
        sc = NULL;
    if (json_is_null(content))
        content = NULL;
    if (content && !json_is_array(content)) {
        if (!sc)
            return rx_error_set(err, -EPROTO,
                                "tools/call result: 'content' is not an array");
        content = NULL;
    }
    rx_buf_init(&b, MCP_RPC_TEXT_MAX);
    /* Allocate now: an empty result is "" too, not NULL. */
    rc = rx_buf_append(&b, "", 0);
    if (!rc)
        rc = build_text(&b, content, sc);
    if (rc) {
        rx_buf_release(&b);
        if (rc == -E2BIG)
            return rx_error_set(err, rc, "tools/call result: longer than %u bytes",
                                MCP_RPC_TEXT_MAX);
        return rx_error_set(err, rc, "tools/call result: out of memory");
    }
    *text = rx_buf_take(&b, NULL);
    if (is_error)
        *is_error = json_is_true(json_object_get(result, "isError"));
    return 0;
}
