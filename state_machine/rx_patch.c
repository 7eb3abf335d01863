/*
 * rx_patch - JSON Patch from a transition's outcome. See rx_patch.h.
 */
#include "state_machine/rx_patch.h"

#include <errno.h>

#define PUT(call)                                                                        \
    do {                                                                                 \
        if ((err = (call)))                                                              \
            goto out_truncate;                                                           \
    } while (0)

static int put_int(struct rx_buf *b, bool *first, const char *path, int64_t v)
{
    int err = rx_buf_printf(
        b, "%s{\"op\":\"replace\",\"path\":\"%s\",\"value\":", *first ? "" : ",", path);

    *first = false;
    if (!err)
        err = rx_buf_put_i64(b, v);
    return err ? err : rx_buf_putc(b, '}');
}

/* {"op":op,"path":"/<list>/<at or ->","value": */
static int put_head(struct rx_buf *b, bool *first, const char *op, const char *list,
                    long at)
{
    int err = at < 0
                  ? rx_buf_printf(b, "%s{\"op\":\"%s\",\"path\":\"/%s/-\",\"value\":",
                                  *first ? "" : ",", op, list)
                  : rx_buf_printf(b, "%s{\"op\":\"%s\",\"path\":\"/%s/%ld\",\"value\":",
                                  *first ? "" : ",", op, list, at);

    *first = false;
    return err;
}

static int put_messages(struct rx_buf *b, bool *first, const struct rx_message_list *l,
                        bool assistant, const char *name, size_t added, const size_t *at,
                        size_t n_at)
{
    int err;

    if (n_at > RX_OUTCOME_PLACES) {
        /* Too many to list: the whole array, once. */
        if ((err = rx_buf_printf(b, "%s{\"op\":\"replace\",\"path\":\"/%s\",\"value\":[",
                                 *first ? "" : ",", name)))
            return err;
        *first = false;
        for (size_t i = 0; i < l->len; i++)
            if ((i && (err = rx_buf_putc(b, ','))) ||
                (err = rx_message_encode(&l->items[i], assistant, b)))
                return err;
        return rx_buf_puts(b, "]}");
    }
    for (size_t i = 0; i < n_at; i++)
        if ((err = put_head(b, first, "replace", name, (long)at[i])) ||
            (err = rx_message_encode(&l->items[at[i]], assistant, b)) ||
            (err = rx_buf_putc(b, '}')))
            return err;
    for (size_t i = l->len - added; i < l->len; i++)
        if ((err = put_head(b, first, "add", name, -1)) ||
            (err = rx_message_encode(&l->items[i], assistant, b)) ||
            (err = rx_buf_putc(b, '}')))
            return err;
    return 0;
}

static int put_tools(struct rx_buf *b, bool *first, const struct rx_tool_call_list *l,
                     const struct rx_outcome *o)
{
    static const char name[] = "toolCallRecords";
    int err;

    if (o->n_tools_at > RX_OUTCOME_PLACES) {
        if ((err = rx_buf_printf(b, "%s{\"op\":\"replace\",\"path\":\"/%s\",\"value\":[",
                                 *first ? "" : ",", name)))
            return err;
        *first = false;
        for (size_t i = 0; i < l->len; i++)
            if ((i && (err = rx_buf_putc(b, ','))) ||
                (err = rx_tool_call_encode(&l->items[i], b)))
                return err;
        return rx_buf_puts(b, "]}");
    }
    for (size_t i = 0; i < o->n_tools_at; i++)
        if ((err = put_head(b, first, "replace", name, (long)o->tools_at[i])) ||
            (err = rx_tool_call_encode(&l->items[o->tools_at[i]], b)) ||
            (err = rx_buf_putc(b, '}')))
            return err;
    for (size_t i = l->len - o->tools_added; i < l->len; i++)
        if ((err = put_head(b, first, "add", name, -1)) ||
            (err = rx_tool_call_encode(&l->items[i], b)) || (err = rx_buf_putc(b, '}')))
            return err;
    return 0;
}

int rx_patch_encode(const struct rx_state *after, const struct rx_outcome *o,
                    struct rx_buf *b)
{
    size_t start = b->len;
    bool first = true;
    int err;

    PUT(rx_buf_putc(b, '['));
    PUT(put_int(b, &first, "/updatedAt", after->updated_at));
    if (o->changed & RX_CHANGED_USER)
        PUT(put_messages(b, &first, &after->user, false, "userMessages", o->user_added,
                         NULL, 0));
    if (o->changed & RX_CHANGED_ASSISTANT)
        PUT(put_messages(b, &first, &after->assistant, true, "assistantMessages",
                         o->assistant_added, o->assistant_at, o->n_assistant_at));
    if (o->changed & RX_CHANGED_TOOLS)
        PUT(put_tools(b, &first, &after->tools, o));
    if (o->changed & RX_CHANGED_CALLED_BRAIN)
        PUT(put_int(b, &first, "/calledBrainAt", after->called_brain_at));
    if (o->changed & RX_CHANGED_SUMMARY) {
        PUT(rx_buf_puts(b,
                        ",{\"op\":\"replace\",\"path\":\"/contextSummary\",\"value\":"));
        PUT(rx_buf_put_json_str(b, after->context_summary));
        PUT(rx_buf_putc(b, '}'));
        PUT(put_int(b, &first, "/summaryCutAt", after->summary_cut_at));
    }
    /* The map is small (RX_POLICIES_MAX): replaced whole, so clients need no
       JSON Pointer escaping of tool names nor "remove". */
    if (o->changed & RX_CHANGED_POLICIES) {
        PUT(rx_buf_puts(b, ",{\"op\":\"replace\",\"path\":\"/toolPolicies\",\"value\":"));
        PUT(rx_policy_map_encode(&after->policies, b));
        PUT(rx_buf_putc(b, '}'));
    }
    /* Three keys at most: replaced whole, like toolPolicies. */
    if (o->changed & RX_CHANGED_SETTINGS) {
        PUT(rx_buf_puts(b, ",{\"op\":\"replace\",\"path\":\"/settings\",\"value\":"));
        PUT(rx_settings_encode(&after->settings, b));
        PUT(rx_buf_putc(b, '}'));
    }
    PUT(rx_buf_putc(b, ']'));
    return 0;

out_truncate:
    rx_buf_truncate(b, start);
    return err;
}
