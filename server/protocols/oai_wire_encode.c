/*
 * oai_wire - the JSON the OpenAI protocol answers with, and the tool block.
 * See oai_wire.h. Every encoder appends all or nothing: on failure the
 * buffer is cut back to where it was.
 */
#include "server/protocols/oai_wire.h"

#include <errno.h>
#include <string.h>

#define PUT(x)                                                                           \
    do {                                                                                 \
        if ((err = (x)))                                                                 \
            goto out_truncate;                                                           \
    } while (0)

/*
 * HTML-escape `n` bytes: & < > always, quotes too in an attribute. In the
 * body of a block, a newline is indented so a multi-line result stays inside
 * its list item.
 */
static int put_html(struct rx_buf *b, const char *s, size_t n, bool attr)
{
    size_t start = b->len, run = 0, i;
    int err = 0;

    for (i = 0; i < n; i++) {
        const char *esc = NULL;

        switch (s[i]) {
        case '&':
            esc = "&amp;";
            break;
        case '<':
            esc = "&lt;";
            break;
        case '>':
            esc = "&gt;";
            break;
        case '"':
            esc = attr ? "&quot;" : NULL;
            break;
        case '\'':
            esc = attr ? "&#x27;" : NULL;
            break;
        case '\n':
            esc = attr ? NULL : "\n  ";
            break;
        }
        if (!esc)
            continue;
        PUT(rx_buf_append(b, s + run, i - run));
        PUT(rx_buf_puts(b, esc));
        run = i + 1;
    }
    PUT(rx_buf_append(b, s + run, n - run));
    return 0;

out_truncate:
    rx_buf_truncate(b, start);
    return err;
}

/*
 * `<pre><label><mid>` then `len` bytes of text HTML-escaped (`attr`: for an
 * attribute value, quotes too), then `end`: an attribute ` name="..."` or a
 * body line `- label: ...\n`.
 */
static int put_field(struct rx_buf *b, const char *pre, const char *label,
                     const char *mid, const char *text, size_t len, bool attr, char end)
{
    size_t start = b->len;
    int err;

    PUT(rx_buf_puts(b, pre));
    PUT(rx_buf_puts(b, label));
    PUT(rx_buf_puts(b, mid));
    PUT(put_html(b, text, len, attr));
    PUT(rx_buf_putc(b, end));
    return 0;

out_truncate:
    rx_buf_truncate(b, start);
    return err;
}

static int put_text_attr(struct rx_buf *b, const char *name, const char *text)
{
    return put_field(b, " ", name, "=\"", text, strlen(text), true, '"');
}

/* ` name="<the text as a JSON string, HTML-escaped>"`, as Open WebUI reads it. */
static int put_json_attr(struct rx_buf *b, const char *name, const char *text)
{
    struct rx_buf j;
    int err;

    rx_buf_init(&j, RX_BUF_STATE_MAX);
    err = rx_buf_put_json_str(&j, text);
    if (!err)
        err = put_field(b, " ", name, "=\"", j.data, j.len, true, '"');
    rx_buf_release(&j);
    return err;
}

/* "- label: text\n" in the block's body. */
static int put_item(struct rx_buf *b, const char *label, const char *text)
{
    return put_field(b, "- ", label, ": ", text, strlen(text), false, '\n');
}

int oai_render_tool(struct rx_buf *b, const struct rx_tool_call *c)
{
    bool done = c->result.present;
    bool waiting = rx_tool_call_is_awaiting(c);
    const char *text = done ? c->result.text : "";
    struct rx_buf result;
    size_t start = b->len;
    int err;

    rx_buf_init(&result, RX_BUF_STATE_MAX);
    /* Open WebUI shows the result attribute as is: a failure says so. */
    PUT(rx_buf_puts(&result, done && !c->result.is_success ? "Error: " : ""));
    PUT(rx_buf_puts(&result, text));
    PUT(rx_buf_printf(b, "<details type=\"tool_calls\" done=\"%s\"",
                      done ? "true" : "false"));
    PUT(put_text_attr(b, "id", c->id));
    PUT(put_text_attr(b, "name", c->name));
    PUT(put_json_attr(b, "arguments", c->parameters));
    if (done)
        PUT(put_json_attr(b, "result", result.data));
    PUT(rx_buf_printf(b, ">\n<summary>%s</summary>\n\n",
                      done      ? "Tool Executed"
                      : waiting ? "Waiting for approval"
                                : "Executing..."));
    PUT(put_item(b, "tool", c->name));
    PUT(put_item(b, "arguments", c->parameters));
    if (done)
        PUT(put_item(b, c->result.is_success ? "result" : "error", text));
    else
        PUT(put_item(b, "status",
                     waiting ? "waits for approval (see below)" : "not finished"));
    PUT(rx_buf_puts(b, "\n</details>\n"));
    rx_buf_release(&result);
    return 0;

out_truncate:
    rx_buf_release(&result);
    rx_buf_truncate(b, start);
    return err;
}

int oai_render_waiting(struct rx_buf *b, const struct rx_tool_call *c, const char *where)
{
    size_t start = b->len;
    int err;

    PUT(rx_buf_puts(b, "The call to '"));
    PUT(put_html(b, c->name, strlen(c->name), false));
    PUT(rx_buf_puts(b, "' with "));
    PUT(put_html(b, c->parameters, strlen(c->parameters), false));
    /* SPEC 3.6: the next user message refuses every call still waiting. */
    if (c->approval == RX_APPROVAL_IN_DOUBT) /* SPEC 3.7 */
        PUT(rx_buf_puts(b, " was interrupted after it started and may have acted: "
                           "retry it, reject it or say what happened"));
    else
        PUT(rx_buf_puts(b, " waits for approval"));
    PUT(rx_buf_puts(b, where));
    PUT(rx_buf_puts(b, " (a new message here refuses it).\n"));
    return 0;

out_truncate:
    rx_buf_truncate(b, start);
    return err;
}

/* {"id":..,"object":<object>,"created":..,"model":.. (no closing brace). */
static int put_head(struct rx_buf *b, const struct oai_head *h, const char *object)
{
    size_t start = b->len;
    int err;

    PUT(rx_buf_puts(b, "{\"id\":"));
    PUT(rx_buf_put_json_str(b, h->id));
    PUT(rx_buf_printf(b, ",\"object\":\"%s\",\"created\":%lld,\"model\":", object,
                      (long long)h->created));
    PUT(rx_buf_put_json_str(b, h->model));
    return 0;

out_truncate:
    rx_buf_truncate(b, start);
    return err;
}

static int put_usage(struct rx_buf *b, const struct oai_usage *u)
{
    return rx_buf_printf(b,
                         "\"usage\":{\"prompt_tokens\":%lld,\"completion_tokens\":%lld,"
                         "\"total_tokens\":%lld}",
                         (long long)u->prompt_tokens, (long long)u->completion_tokens,
                         (long long)(u->prompt_tokens + u->completion_tokens));
}

int oai_chunk_encode(struct rx_buf *b, const struct oai_head *h, enum oai_chunk_kind kind,
                     const char *text, size_t len)
{
    size_t start = b->len;
    int err;

    PUT(put_head(b, h, "chat.completion.chunk"));
    PUT(rx_buf_puts(b, ",\"choices\":[{\"index\":0,\"delta\":{"));
    switch (kind) {
    case OAI_CHUNK_ROLE:
        PUT(rx_buf_puts(b, "\"role\":\"assistant\",\"content\":\"\""));
        break;
    case OAI_CHUNK_CONTENT:
    case OAI_CHUNK_REASONING:
        PUT(rx_buf_puts(b, kind == OAI_CHUNK_CONTENT ? "\"content\":"
                                                     : "\"reasoning_content\":"));
        PUT(rx_buf_put_json_strn(b, text, len));
        break;
    case OAI_CHUNK_STOP:
        break;
    }
    PUT(rx_buf_printf(b, "},\"logprobs\":null,\"finish_reason\":%s}]}",
                      kind == OAI_CHUNK_STOP ? "\"stop\"" : "null"));
    return 0;

out_truncate:
    rx_buf_truncate(b, start);
    return err;
}

int oai_usage_chunk_encode(struct rx_buf *b, const struct oai_head *h,
                           const struct oai_usage *u)
{
    size_t start = b->len;
    int err;

    PUT(put_head(b, h, "chat.completion.chunk"));
    PUT(rx_buf_puts(b, ",\"choices\":[],"));
    PUT(put_usage(b, u));
    PUT(rx_buf_putc(b, '}'));
    return 0;

out_truncate:
    rx_buf_truncate(b, start);
    return err;
}

int oai_completion_encode(struct rx_buf *b, const struct oai_head *h, const char *content,
                          size_t len, const struct oai_usage *u)
{
    size_t start = b->len;
    int err;

    PUT(put_head(b, h, "chat.completion"));
    PUT(rx_buf_puts(b, ",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
                       "\"content\":"));
    PUT(rx_buf_put_json_strn(b, content ? content : "", content ? len : 0));
    PUT(rx_buf_puts(
        b, ",\"refusal\":null},\"logprobs\":null,\"finish_reason\":\"stop\"}],"));
    PUT(put_usage(b, u));
    PUT(rx_buf_putc(b, '}'));
    return 0;

out_truncate:
    rx_buf_truncate(b, start);
    return err;
}

static int put_str_or_null(struct rx_buf *b, const char *s)
{
    return s ? rx_buf_put_json_str(b, s) : rx_buf_puts(b, "null");
}

int oai_error_encode(struct rx_buf *b, const struct oai_error *e)
{
    size_t start = b->len;
    int err;

    PUT(rx_buf_puts(b, "{\"error\":{\"message\":"));
    PUT(rx_buf_put_json_str(b, e->message));
    PUT(rx_buf_puts(b, ",\"type\":"));
    PUT(put_str_or_null(b, e->type));
    PUT(rx_buf_puts(b, ",\"param\":"));
    PUT(put_str_or_null(b, e->param));
    PUT(rx_buf_puts(b, ",\"code\":"));
    PUT(put_str_or_null(b, e->code));
    PUT(rx_buf_puts(b, "}}"));
    return 0;

out_truncate:
    rx_buf_truncate(b, start);
    return err;
}

int oai_model_encode(struct rx_buf *b, const char *id, int64_t created)
{
    size_t start = b->len;
    int err;

    PUT(rx_buf_puts(b, "{\"id\":"));
    PUT(rx_buf_put_json_str(b, id));
    PUT(rx_buf_printf(b,
                      ",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"reflexor\"}",
                      (long long)created));
    return 0;

out_truncate:
    rx_buf_truncate(b, start);
    return err;
}

int oai_models_encode(struct rx_buf *b, const char *const *models, size_t n,
                      int64_t created)
{
    size_t start = b->len;
    int err;

    PUT(rx_buf_puts(b, "{\"object\":\"list\",\"data\":["));
    for (size_t i = 0; i < n; i++) {
        if (i)
            PUT(rx_buf_putc(b, ','));
        PUT(oai_model_encode(b, models[i], created));
    }
    PUT(rx_buf_puts(b, "]}"));
    return 0;

out_truncate:
    rx_buf_truncate(b, start);
    return err;
}
