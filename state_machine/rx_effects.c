/*
 * rx_effects - effects_at. See rx_effects.h.
 */
#include "state_machine/rx_effects.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "state_machine/rx_alloc.h"

void rx_effect_set_init(struct rx_effect_set *set)
{
    memset(set, 0, sizeof(*set));
}

static void effect_set_clear(struct rx_effect_set *set)
{
    for (size_t i = 0; i < set->len; i++)
        rx_free(set->items[i].tool_call_id);
    set->len = 0;
}

void rx_effect_set_release(struct rx_effect_set *set)
{
    effect_set_clear(set);
    rx_free(set->items);
    rx_effect_set_init(set);
}

const struct rx_effect *rx_effect_set_find(const struct rx_effect_set *set,
                                           const char *key)
{
    for (size_t i = 0; i < set->len; i++)
        if (!strcmp(set->items[i].key, key))
            return &set->items[i];
    return NULL;
}

static struct rx_effect *push(struct rx_effect_set *set)
{
    if (set->len == set->cap) {
        size_t ncap = set->cap ? set->cap * 2 : 4;
        struct rx_effect *p =
            rx_realloc(set->items, set->cap * sizeof(*p), ncap * sizeof(*p));

        if (!p)
            return NULL;
        set->items = p;
        set->cap = ncap;
    }
    memset(&set->items[set->len], 0, sizeof(set->items[0]));
    return &set->items[set->len++];
}

/* Insert an ask keeping ascending signalsCutAt and unique keys. */
static int want_ask(struct rx_effect_set *set, int64_t t)
{
    struct rx_effect *e;
    size_t at = 0;

    while (at < set->len && set->items[at].signals_cut_at < t)
        at++;
    if (at < set->len && set->items[at].signals_cut_at == t)
        return 0;
    if (!push(set))
        return -ENOMEM;
    memmove(&set->items[at + 1], &set->items[at], (set->len - 1 - at) * sizeof(*e));
    e = &set->items[at];
    memset(e, 0, sizeof(*e));
    e->kind = RX_EFFECT_ASK_BRAIN;
    e->signals_cut_at = t;
    snprintf(e->key, sizeof(e->key), "ask-brain-%" PRId64, t);
    return 0;
}

static int want_tool(struct rx_effect_set *set, const char *id)
{
    struct rx_effect *e = push(set);

    if (!e)
        return -ENOMEM;
    e->kind = RX_EFFECT_REQUEST_TOOLKIT;
    e->tool_call_id = rx_strdup(id);
    if (!e->tool_call_id) {
        set->len--;
        return -ENOMEM;
    }
    /* Ids are at most RX_ID_MAX bytes (rx_input), so the key is never cut. */
    snprintf(e->key, sizeof(e->key), "request-toolkit-%s", id);
    return 0;
}

bool rx_effects_any(const struct rx_state *s)
{
    bool pending = false;
    int64_t t = s->latest_result_at;

    for (size_t i = s->tools.settled; i < s->tools.len; i++) {
        const struct rx_tool_call *c = &s->tools.items[i];

        if (!c->result.present) {
            pending = true;
            if (!rx_approval_is_awaiting(c->approval))
                return true;
        }
    }
    if (s->user.len && s->user.items[s->user.len - 1].received_at > t)
        t = s->user.items[s->user.len - 1].received_at;
    if (!pending && t > s->called_brain_at)
        return true;
    for (size_t i = s->assistant.settled; i < s->assistant.len; i++)
        if (s->assistant.items[i].status == RX_STATUS_STREAMING)
            return true;
    return false;
}

int rx_effects_at(const struct rx_state *s, struct rx_effect_set *out)
{
    int64_t t = 0;
    bool pending = false;
    int err = 0;

    effect_set_clear(out);
    /* Everything before `settled` is final, so only the tail is scanned. */
    for (size_t i = s->tools.settled; i < s->tools.len && !pending; i++)
        pending = !s->tools.items[i].result.present;
    t = s->latest_result_at;
    if (s->user.len && s->user.items[s->user.len - 1].received_at > t)
        t = s->user.items[s->user.len - 1].received_at;
    /* The brain waits for every answer of the tools it called before it is
       asked about new signals; answers already in flight go on (below). */
    if (!pending && t > s->called_brain_at && (err = want_ask(out, t)))
        goto out_clear;
    /* An answer in flight keeps its ask, so a crash mid-stream resumes it. */
    for (size_t i = s->assistant.settled; i < s->assistant.len; i++) {
        const struct rx_message *m = &s->assistant.items[i];

        if (m->status == RX_STATUS_STREAMING && (err = want_ask(out, m->called_brain_at)))
            goto out_clear;
    }
    /* Tool requests after every ask: want_ask sorts only what is before them.
       A call awaiting a person (a review, or in doubt after a crash) runs when
       approved or retried; until then it is pending (no ask above) without a
       request. */
    for (size_t i = s->tools.settled; i < s->tools.len && pending; i++)
        if (!s->tools.items[i].result.present &&
            !rx_approval_is_awaiting(s->tools.items[i].approval) &&
            (err = want_tool(out, s->tools.items[i].id)))
            goto out_clear;
    return 0;

out_clear:
    effect_set_clear(out);
    return err;
}
