/*
 * rx_context - the messages handed to a brain. See rx_context.h.
 */
#include "state_machine/rx_context.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "state_machine/rx_alloc.h"
#include "state_machine/rx_buf.h"

/* json_array_append_new steals, even NULL, so building chains with ||. */
static int add_text(json_t *msgs, const char *role, const char *text)
{
    return json_array_append_new(msgs,
                                 json_pack("{s:s, s:s}", "role", role, "content", text));
}

/* ---- where to read: binary search on the lists in time order ---------------- */

/*
 * The positions a context reads from, found once per call: the first record
 * of each list after summaryCutAt (0 for a list out of time order: it is read
 * whole), and the first older tool record within reach (RX_CONTEXT_OLDER_MAX).
 */
struct reach {
    size_t user, assistant, tools;
    size_t older;
};

static size_t messages_after(const struct rx_message_list *l, int64_t t)
{
    size_t lo = 0, hi = l->len;

    if (!l->time_sorted)
        return 0;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (l->items[mid].received_at <= t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static size_t tools_after(const struct rx_tool_call_list *l, int64_t t)
{
    size_t lo = 0, hi = l->len;

    if (!l->time_sorted)
        return 0;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (l->items[mid].called_at <= t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void reach_of(const struct rx_state *s, struct reach *r)
{
    const struct rx_tool_call_list *l = &s->tools;
    size_t k = 0;

    r->user = messages_after(&s->user, s->summary_cut_at);
    r->assistant = messages_after(&s->assistant, s->summary_cut_at);
    r->tools = tools_after(l, s->summary_cut_at);
    if (l->time_sorted) {
        r->older = r->tools > RX_CONTEXT_OLDER_MAX ? r->tools - RX_CONTEXT_OLDER_MAX : 0;
        return;
    }
    /* Out of time order: the newest older records by position, counted back. */
    r->older = 0;
    for (size_t i = l->len; i-- > 0;) {
        if (l->items[i].called_at <= s->summary_cut_at && ++k == RX_CONTEXT_OLDER_MAX) {
            r->older = i;
            break;
        }
    }
}

/* Past the ask's signals: in a list in time order, nothing after it is either. */
static bool message_past(const struct rx_message_list *l, size_t i, int64_t cut)
{
    return l->time_sorted && l->items[i].received_at > cut;
}

static bool tool_past(const struct rx_tool_call_list *l, size_t i, int64_t cut)
{
    return l->time_sorted && l->items[i].called_at > cut;
}

/* Tool record i in the context of an ask seeing up to `cut`. */
static bool tool_visible(const struct rx_state *s, const struct reach *r, size_t i,
                         int64_t cut)
{
    const struct rx_tool_call *c = &s->tools.items[i];

    return i >= r->older && c->called_at <= cut &&
           (c->called_at > s->summary_cut_at || c->is_loaded);
}

/* An older record within reach that is not loaded: listed, not shown. */
static bool tool_listed(const struct rx_state *s, const struct reach *r, size_t i)
{
    const struct rx_tool_call *c = &s->tools.items[i];

    return i >= r->older && c->called_at <= s->summary_cut_at && !c->is_loaded;
}

/* The first of the newest `max` records after `from` (a list in time order only). */
static size_t newest_from(size_t from, size_t len, bool sorted, size_t max)
{
    return max && sorted && len - from > max ? len - max : from;
}

int rx_context_view(const struct rx_state *s, size_t messages_max, struct rx_state *out)
{
    struct reach r;

    reach_of(s, &r);
    return rx_state_copy_tail(
        s, newest_from(r.user, s->user.len, s->user.time_sorted, messages_max),
        newest_from(r.assistant, s->assistant.len, s->assistant.time_sorted,
                    messages_max),
        r.older, out);
}

bool rx_context_has_unloaded(const struct rx_state *s, int64_t signals_cut_at)
{
    struct reach r;

    reach_of(s, &r);
    for (size_t i = r.older;
         i < s->tools.len && !tool_past(&s->tools, i, s->summary_cut_at); i++)
        if (tool_listed(s, &r, i) && s->tools.items[i].called_at <= signals_cut_at)
            return true;
    return false;
}

/* ---- the messages ---------------------------------------------------------------- */

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

/* The calls sharing calledAt with tools[first] (one brain-call-tools) and their results.
 */
static int add_tool_group(json_t *msgs, const struct rx_state *s, const struct reach *r,
                          size_t first, int64_t cut)
{
    const struct rx_tool_call *c0 = &s->tools.items[first];
    json_t *calls = json_array(), *results = json_array();
    json_t *call_msg;
    int err = -ENOMEM;

    if (!calls || !results)
        goto out_decref;
    for (size_t i = first; i < s->tools.len && !tool_past(&s->tools, i, c0->called_at);
         i++) {
        const struct rx_tool_call *c = &s->tools.items[i];
        json_t *res;

        if (c->called_at != c0->called_at || !tool_visible(s, r, i, cut))
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
static int add_unloaded_list(json_t *msgs, const struct rx_state *s,
                             const struct reach *r)
{
    struct rx_buf b;
    size_t n = 0;
    int err = 0;

    rx_buf_init(&b, RX_BUF_STATE_MAX);
    for (size_t i = r->older;
         i < s->tools.len && !tool_past(&s->tools, i, s->summary_cut_at) && !err; i++) {
        const struct rx_tool_call *c = &s->tools.items[i];

        if (!tool_listed(s, r, i))
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

static bool user_shown(const struct rx_state *s, const struct rx_message *m, int64_t cut)
{
    return m->received_at > s->summary_cut_at && m->received_at <= cut;
}

/* A streaming answer is not final and an empty one says nothing: neither is shown. */
static bool assistant_shown(const struct rx_state *s, const struct rx_message *m,
                            int64_t cut)
{
    return m->status != RX_STATUS_STREAMING && *m->content && user_shown(s, m, cut);
}

/*
 * Only the first visible call of a brain-call-tools (same calledAt) starts an
 * item. In time order the calls of one group are neighbours, so the look back
 * stops at the first older call and a long history costs no more per record.
 */
static bool starts_group(const struct rx_state *s, const struct reach *r, size_t i,
                         int64_t cut)
{
    const struct rx_tool_call *c = &s->tools.items[i];
    bool sorted = s->tools.time_sorted;

    if (!tool_visible(s, r, i, cut))
        return false;
    for (size_t j = i; j-- > r->older;) {
        if (sorted && s->tools.items[j].called_at != c->called_at)
            break;
        if (s->tools.items[j].called_at == c->called_at && tool_visible(s, r, j, cut))
            return false;
    }
    return true;
}

/* How many items collect() may return at most. */
static size_t collect_cap(const struct rx_state *s, const struct reach *r)
{
    return (s->user.len - r->user) + (s->assistant.len - r->assistant) +
           (s->tools.len - r->older) + 1;
}

static size_t collect(const struct rx_state *s, const struct reach *r, int64_t cut,
                      struct item *items)
{
    size_t n = 0;

    for (size_t i = r->user; i < s->user.len && !message_past(&s->user, i, cut); i++)
        if (user_shown(s, &s->user.items[i], cut))
            items[n++] = (struct item){s->user.items[i].received_at, RANK_USER, i, i};
    for (size_t i = r->assistant;
         i < s->assistant.len && !message_past(&s->assistant, i, cut); i++)
        if (assistant_shown(s, &s->assistant.items[i], cut))
            items[n++] =
                (struct item){s->assistant.items[i].received_at, RANK_ASSISTANT, i, i};
    for (size_t i = r->older; i < s->tools.len && !tool_past(&s->tools, i, cut); i++)
        if (starts_group(s, r, i, cut))
            items[n++] = (struct item){s->tools.items[i].called_at, RANK_TOOLS, i, i};
    return n;
}

int rx_context_build(const struct rx_state *s, const char *system_prompt,
                     int64_t signals_cut_at, json_t **out)
{
    struct reach r;
    struct item *items;
    json_t *msgs = json_array();
    size_t n;
    int err = -ENOMEM;

    reach_of(s, &r);
    items = rx_malloc(collect_cap(s, &r) * sizeof(*items));
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
    if (add_unloaded_list(msgs, s, &r))
        goto out_free;
    n = collect(s, &r, signals_cut_at, items);
    qsort(items, n, sizeof(*items), item_cmp);
    for (size_t i = 0; i < n; i++) {
        const struct item *it = &items[i];
        int rc;

        if (it->rank == RANK_USER)
            rc = add_text(msgs, "user", s->user.items[it->index].content);
        else if (it->rank == RANK_ASSISTANT)
            rc = add_text(msgs, "assistant", s->assistant.items[it->index].content);
        else
            rc = add_tool_group(msgs, s, &r, it->index, signals_cut_at);
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

/* ---- the compression policy ---------------------------------------------------- */

size_t rx_context_view_messages(const struct rx_context_budget *budget)
{
    /* A byte is a quarter token: four times as many messages may be needed. */
    int64_t per = budget->unit == RX_CONTEXT_TOKENS ? 4 : 1;
    int64_t max = (int64_t)((SIZE_MAX < (uint64_t)INT64_MAX ? SIZE_MAX : INT64_MAX) / 8);

    if (budget->limit <= 0 || budget->limit > max / per || budget->keep > (size_t)max)
        return 0;
    return (size_t)(budget->limit * per) + budget->keep + 1;
}

/* The length of one text in `unit` (ITEMS counts items, not texts: 0). */
static int64_t text_length(const char *t, enum rx_context_unit unit)
{
    int64_t n = 0;

    if (unit == RX_CONTEXT_ITEMS)
        return 0;
    for (; *t; t++)
        n += unit == RX_CONTEXT_TOKENS || ((unsigned char)*t & 0xc0) != 0x80;
    return n;
}

/* A tool record as the context shows it: its call, and its result when seen. */
static int64_t tool_length(const struct rx_tool_call *c, int64_t cut,
                           enum rx_context_unit unit)
{
    int64_t n = text_length(c->name, unit) + text_length(c->parameters, unit);

    if (c->result.present && c->result.received_at <= cut)
        n += text_length(c->result.text, unit) +
             (c->result.is_success ? 0 : text_length("Error: ", unit));
    return n;
}

int64_t rx_context_length(const struct rx_state *s, int64_t signals_cut_at,
                          enum rx_context_unit unit)
{
    int64_t n = text_length(s->context_summary, unit), cut = signals_cut_at;
    struct reach r;

    reach_of(s, &r);
    for (size_t i = r.user; i < s->user.len && !message_past(&s->user, i, cut); i++)
        if (user_shown(s, &s->user.items[i], cut))
            n += unit == RX_CONTEXT_ITEMS ? 1
                                          : text_length(s->user.items[i].content, unit);
    for (size_t i = r.assistant;
         i < s->assistant.len && !message_past(&s->assistant, i, cut); i++)
        if (assistant_shown(s, &s->assistant.items[i], cut))
            n += unit == RX_CONTEXT_ITEMS
                     ? 1
                     : text_length(s->assistant.items[i].content, unit);
    for (size_t i = r.older; i < s->tools.len && !tool_past(&s->tools, i, cut); i++) {
        if (unit == RX_CONTEXT_ITEMS)
            n += starts_group(s, &r, i, cut);
        else if (tool_visible(s, &r, i, cut))
            n += tool_length(&s->tools.items[i], cut, unit);
    }
    /* Bytes / 4, rounded up: a common estimate for English text and JSON. */
    return unit == RX_CONTEXT_TOKENS ? (n + 3) / 4 : n;
}

/* Times in [from, to) are not legal cuts: something there is unfinished or open. */
struct span {
    int64_t from, to;
};

static int span_cmp(const void *a, const void *b)
{
    const struct span *x = a, *y = b;

    return x->from < y->from ? -1 : x->from > y->from;
}

/*
 * What a cut must not pass, in spans[], and how many. A call is open from its
 * calledAt until its result (forever while pending or unseen by this ask), a
 * streaming answer forever, the newest user message forever.
 */
static size_t open_spans(const struct rx_state *s, const struct reach *r, int64_t cut,
                         struct span *spans)
{
    int64_t newest_user = -1;
    size_t m = 0;

    for (size_t i = r->tools; i < s->tools.len && !tool_past(&s->tools, i, cut); i++) {
        const struct rx_tool_call *c = &s->tools.items[i];

        if (c->called_at > s->summary_cut_at && c->called_at <= cut)
            spans[m++] = (struct span){
                c->called_at, c->result.present ? c->result.received_at : INT64_MAX};
    }
    for (size_t i = r->assistant; i < s->assistant.len; i++) {
        const struct rx_message *a = &s->assistant.items[i];

        if (a->status == RX_STATUS_STREAMING && a->received_at > s->summary_cut_at)
            spans[m++] = (struct span){a->received_at, INT64_MAX};
    }
    for (size_t i = r->user; i < s->user.len && !message_past(&s->user, i, cut); i++)
        if (user_shown(s, &s->user.items[i], cut) &&
            s->user.items[i].received_at > newest_user)
            newest_user = s->user.items[i].received_at;
    if (newest_user >= 0)
        spans[m++] = (struct span){newest_user, INT64_MAX};
    return m;
}

int rx_context_choose_cut(const struct rx_state *s, int64_t signals_cut_at,
                          const struct rx_context_budget *budget, int64_t *cut_at)
{
    struct reach r;
    size_t cap, n = 0, m, j = 0;
    struct item *items = NULL;
    struct span *spans = NULL;
    int64_t best = RX_CONTEXT_NO_CUT, reach = INT64_MIN;
    int err = -ENOMEM;

    if (budget->limit <= 0 ||
        rx_context_length(s, signals_cut_at, budget->unit) <= budget->limit) {
        *cut_at = RX_CONTEXT_NO_CUT;
        return 0;
    }
    reach_of(s, &r);
    cap = collect_cap(s, &r);
    items = rx_malloc(cap * sizeof(*items));
    spans = rx_malloc(cap * sizeof(*spans));
    if (!items || !spans)
        goto out_free;
    /* The candidates: items after the current cut (loaded records are before it). */
    for (size_t i = 0, all = collect(s, &r, signals_cut_at, items); i < all; i++)
        if (items[i].time > s->summary_cut_at)
            items[n++] = items[i];
    qsort(items, n, sizeof(*items), item_cmp);
    m = open_spans(s, &r, signals_cut_at, spans);
    qsort(spans, m, sizeof(*spans), span_cmp);
    /*
     * One sweep, oldest first: `reach` is the furthest end of the spans begun
     * by time t, so t is inside one of them exactly when reach > t. A cut is
     * the last item of its time, so items of one time stay together.
     */
    for (size_t k = 0; k < n; k++) {
        int64_t t = items[k].time;

        for (; j < m && spans[j].from <= t; j++)
            reach = spans[j].to > reach ? spans[j].to : reach;
        if (k + 1 < n && items[k + 1].time == t)
            continue;
        if (n - 1 - k < budget->keep)
            break;
        if (reach <= t)
            best = t;
    }
    *cut_at = best;
    err = 0;

out_free:
    rx_free(spans);
    rx_free(items);
    return err;
}
