/*
 * rx_context - the messages handed to a brain. See rx_context.h.
 */
#include "state_machine/rx_context.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "state_machine/rx_alloc.h"
#include "state_machine/rx_buf.h"

enum item_rank { RANK_USER, RANK_ASSISTANT, RANK_TOOLS };

/* One entry of the conversation before sorting; a tool group is its first call. */
struct item {
    int64_t time;
    enum item_rank rank;
    size_t seq; /* position in its list: keeps the sort stable */
    size_t index;
};

static int item_cmp(const void *a, const void *b)
{
    const struct item *x = a, *y = b;

    if (x->time != y->time)
        return x->time < y->time ? -1 : 1;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* json_array_append_new steals, even NULL, so building chains with ||. */
static int add_text(json_t *msgs, const char *role, const char *text)
{
    return json_array_append_new(msgs,
                                 json_pack("{s:s, s:s}", "role", role, "content", text));
}

static bool tool_visible(const struct rx_state *s, const struct rx_tool_call *c,
                         int64_t cut)
{
    return c->called_at <= cut && (c->called_at > s->summary_cut_at || c->is_loaded);
}

/* The calls sharing calledAt with tools[first] (one brain-call-tools) and their results.
 */
static int add_tool_group(json_t *msgs, const struct rx_state *s, size_t first,
                          int64_t cut)
{
    const struct rx_tool_call *c0 = &s->tools.items[first];
    json_t *calls = json_array(), *results = json_array();
    json_t *call_msg;
    int err = -ENOMEM;

    if (!calls || !results)
        goto out_decref;
    for (size_t i = first; i < s->tools.len; i++) {
        const struct rx_tool_call *c = &s->tools.items[i];
        json_t *res;

        if (c->called_at != c0->called_at || !tool_visible(s, c, cut))
            continue;
        if (json_array_append_new(calls,
                                  json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", c->id,
                                            "type", "function", "function", "name",
                                            c->name, "arguments", c->parameters)))
            goto out_decref;
        if (!c->result.present || c->result.received_at > cut)
            continue;
        if (c->result.is_success) {
            res = json_string(c->result.text);
        } else {
            struct rx_buf b;

            rx_buf_init(&b, RX_BUF_STATE_MAX);
            res = NULL;
            if (!rx_buf_puts(&b, "Error: ") && !rx_buf_puts(&b, c->result.text))
                res = json_stringn(b.data, b.len);
            rx_buf_release(&b);
        }
        if (json_array_append_new(results,
                                  json_pack("{s:s, s:s, s:o}", "role", "tool",
                                            "tool_call_id", c->id, "content", res)))
            goto out_decref;
    }
    call_msg =
        json_pack("{s:s, s:n, s:O}", "role", "assistant", "content", "tool_calls", calls);
    if (json_array_append_new(msgs, call_msg) || json_array_extend(msgs, results))
        goto out_decref;
    err = 0;

out_decref:
    json_decref(calls);
    json_decref(results);
    return err;
}

/* Older calls that are not loaded: the brain sees that they exist and can load one. */
static int add_unloaded_list(json_t *msgs, const struct rx_state *s)
{
    struct rx_buf b;
    size_t n = 0;
    int err = 0;

    rx_buf_init(&b, RX_BUF_STATE_MAX);
    for (size_t i = 0; i < s->tools.len && !err; i++) {
        const struct rx_tool_call *c = &s->tools.items[i];

        if (c->called_at > s->summary_cut_at || c->is_loaded)
            continue;
        err = rx_buf_puts(&b, n++ ? ", "
                                  : "Earlier tool calls, not loaded (load one "
                                    "with load_tool_call and its id): ");
        err = err ? err : rx_buf_puts(&b, c->id);
        err = err ? err : rx_buf_puts(&b, " (");
        err = err ? err : rx_buf_puts(&b, c->name);
        err = err ? err : rx_buf_putc(&b, ')');
    }
    if (!err && n && add_text(msgs, "system", b.data))
        err = -ENOMEM;
    rx_buf_release(&b);
    return err ? -ENOMEM : 0;
}

static size_t collect(const struct rx_state *s, int64_t cut, struct item *items)
{
    size_t n = 0;

    for (size_t i = 0; i < s->user.len; i++) {
        const struct rx_message *m = &s->user.items[i];

        if (m->received_at > s->summary_cut_at && m->received_at <= cut)
            items[n++] = (struct item){m->received_at, RANK_USER, i, i};
    }
    for (size_t i = 0; i < s->assistant.len; i++) {
        const struct rx_message *m = &s->assistant.items[i];

        if (m->status != RX_STATUS_STREAMING && *m->content &&
            m->received_at > s->summary_cut_at && m->received_at <= cut)
            items[n++] = (struct item){m->received_at, RANK_ASSISTANT, i, i};
    }
    for (size_t i = 0; i < s->tools.len; i++) {
        const struct rx_tool_call *c = &s->tools.items[i];
        bool first = true;

        if (!tool_visible(s, c, cut))
            continue;
        /* Only the first visible call of a group starts an item. */
        for (size_t j = 0; j < i && first; j++)
            first = !(s->tools.items[j].called_at == c->called_at &&
                      tool_visible(s, &s->tools.items[j], cut));
        if (first)
            items[n++] = (struct item){c->called_at, RANK_TOOLS, i, i};
    }
    return n;
}

int rx_context_build(const struct rx_state *s, const char *system_prompt,
                     int64_t signals_cut_at, json_t **out)
{
    size_t cap = s->user.len + s->assistant.len + s->tools.len, n;
    struct item *items = rx_malloc((cap + 1) * sizeof(*items));
    json_t *msgs = json_array();
    int err = -ENOMEM;

    if (!items || !msgs)
        goto out_free;
    if (system_prompt && *system_prompt && add_text(msgs, "system", system_prompt))
        goto out_free;
    if (*s->context_summary) {
        struct rx_buf b;
        int rc;

        rx_buf_init(&b, RX_BUF_STATE_MAX);
        rc = rx_buf_puts(&b, RX_CONTEXT_SUMMARY_PREFIX) ||
             rx_buf_puts(&b, s->context_summary) || add_text(msgs, "user", b.data);
        rx_buf_release(&b);
        if (rc)
            goto out_free;
    }
    if (add_unloaded_list(msgs, s))
        goto out_free;
    n = collect(s, signals_cut_at, items);
    qsort(items, n, sizeof(*items), item_cmp);
    for (size_t i = 0; i < n; i++) {
        const struct item *it = &items[i];
        int rc;

        if (it->rank == RANK_USER)
            rc = add_text(msgs, "user", s->user.items[it->index].content);
        else if (it->rank == RANK_ASSISTANT)
            rc = add_text(msgs, "assistant", s->assistant.items[it->index].content);
        else
            rc = add_tool_group(msgs, s, it->index, signals_cut_at);
        if (rc)
            goto out_free;
    }
    *out = msgs;
    msgs = NULL;
    err = 0;

out_free:
    json_decref(msgs);
    rx_free(items);
    return err;
}
