/*
 * rx_state - the Reflexor session state: records, lookups, copies and
 * invariants. Encoding and decoding are in rx_state_json.c. See rx_state.h.
 */
#include "state_machine/rx_state.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "state_machine/rx_alloc.h"
#include "state_machine/rx_state_internal.h"

static const char *const status_names[] = {
    [RX_STATUS_STREAMING] = "streaming",
    [RX_STATUS_COMPLETE] = "complete",
    [RX_STATUS_STOPPED] = "stopped",
};

const char *rx_status_name(enum rx_status st)
{
    return status_names[st];
}

int rx_status_parse(const char *name, enum rx_status *out)
{
    for (size_t i = 0; i < sizeof(status_names) / sizeof(status_names[0]); i++) {
        if (!strcmp(name, status_names[i])) {
            *out = (enum rx_status)i;
            return 0;
        }
    }
    return -EINVAL;
}

/* The summary of every state without one: most sessions never get one, and
   an idle session is meant to cost under 1 KB (its own allocation was 32 B).
   Read-only memory: a write through it would fault, not reach every state. */
static const char no_summary[1];

int rx_state_init(struct rx_state *s)
{
    memset(s, 0, sizeof(*s));
    s->user.time_sorted = s->assistant.time_sorted = s->tools.time_sorted = true;
    s->context_summary = (char *)no_summary;
    return 0;
}

void rx_state_set_summary(struct rx_state *s, char *text)
{
    if (s->context_summary != no_summary)
        rx_free(s->context_summary);
    if (text && !*text) { /* empty: the shared one */
        rx_free(text);
        text = NULL;
    }
    s->context_summary = text ? text : (char *)no_summary;
}

void rx_message_forget(struct rx_message *m)
{
    rx_free(m->json);
    m->json = NULL;
    m->json_len = 0;
}

void rx_tool_call_forget(struct rx_tool_call *c)
{
    rx_free(c->json);
    c->json = NULL;
    c->json_len = 0;
}

void rx_state__message_release(struct rx_message *m)
{
    rx_free(m->id);
    rx_free(m->content);
    rx_free(m->reasoning);
    rx_message_forget(m);
}

void rx_state__tool_call_release(struct rx_tool_call *c)
{
    rx_free(c->id);
    rx_free(c->name);
    rx_free(c->parameters);
    rx_free(c->result.text);
    rx_tool_call_forget(c);
}

const char *rx_message_key(const void *list, size_t i)
{
    return ((const struct rx_message_list *)list)->items[i].id;
}

const char *rx_tool_call_key(const void *list, size_t i)
{
    return ((const struct rx_tool_call_list *)list)->items[i].id;
}

void rx_state_settle(struct rx_state *s)
{
    struct rx_message_list *a = &s->assistant;
    struct rx_tool_call_list *t = &s->tools;

    while (a->settled < a->len && a->items[a->settled].status != RX_STATUS_STREAMING)
        a->settled++;
    while (t->settled < t->len && t->items[t->settled].result.present)
        t->settled++;
}

static bool messages_in_time_order(const struct rx_message_list *l)
{
    for (size_t i = 1; i < l->len; i++)
        if (l->items[i].received_at < l->items[i - 1].received_at)
            return false;
    return true;
}

static bool tools_in_time_order(const struct rx_tool_call_list *l)
{
    for (size_t i = 1; i < l->len; i++)
        if (l->items[i].called_at < l->items[i - 1].called_at)
            return false;
    return true;
}

int rx_state__derive(struct rx_state *s)
{
    int err;

    if ((err = rx_index_rebuild(&s->user.ids, s->user.len, rx_message_key, &s->user)) ||
        (err = rx_index_rebuild(&s->assistant.ids, s->assistant.len, rx_message_key,
                                &s->assistant)) ||
        (err =
             rx_index_rebuild(&s->tools.ids, s->tools.len, rx_tool_call_key, &s->tools)))
        return err;
    s->user.time_sorted = messages_in_time_order(&s->user);
    s->assistant.time_sorted = messages_in_time_order(&s->assistant);
    s->tools.time_sorted = tools_in_time_order(&s->tools);
    s->user.settled = s->user.len;
    s->assistant.settled = s->tools.settled = 0;
    rx_state_settle(s);
    s->latest_result_at = 0;
    for (size_t i = 0; i < s->tools.len; i++)
        if (s->tools.items[i].result.present &&
            s->tools.items[i].result.received_at > s->latest_result_at)
            s->latest_result_at = s->tools.items[i].result.received_at;
    return 0;
}

void rx_state_release(struct rx_state *s)
{
    for (size_t i = 0; i < s->user.len; i++)
        rx_state__message_release(&s->user.items[i]);
    for (size_t i = 0; i < s->assistant.len; i++)
        rx_state__message_release(&s->assistant.items[i]);
    for (size_t i = 0; i < s->tools.len; i++)
        rx_state__tool_call_release(&s->tools.items[i]);
    rx_free(s->user.items);
    rx_free(s->assistant.items);
    rx_free(s->tools.items);
    rx_index_release(&s->user.ids);
    rx_index_release(&s->assistant.ids);
    rx_index_release(&s->tools.ids);
    rx_state_set_summary(s, NULL);
    rx_policy_map_release(&s->policies);
    rx_settings_release(&s->settings);
    memset(s, 0, sizeof(*s));
}

static struct rx_message *find_message(const struct rx_message_list *l, const char *id)
{
    long i = rx_index_find(&l->ids, id, rx_message_key, l);

    return i < 0 ? NULL : &l->items[i];
}

struct rx_message *rx_state_find_user(const struct rx_state *s, const char *id)
{
    return find_message(&s->user, id);
}

struct rx_message *rx_state_find_assistant(const struct rx_state *s, const char *id)
{
    return find_message(&s->assistant, id);
}

struct rx_tool_call *rx_state_find_tool(const struct rx_state *s, const char *id)
{
    long i = rx_index_find(&s->tools.ids, id, rx_tool_call_key, &s->tools);

    return i < 0 ? NULL : &s->tools.items[i];
}

size_t rx_state_pending_tools(const struct rx_state *s)
{
    size_t n = 0;

    for (size_t i = s->tools.settled; i < s->tools.len; i++)
        n += !s->tools.items[i].result.present;
    return n;
}

size_t rx_state_awaiting_approval(const struct rx_state *s)
{
    size_t n = 0;

    for (size_t i = s->tools.settled; i < s->tools.len; i++)
        n += rx_tool_call_is_awaiting(&s->tools.items[i]);
    return n;
}

bool rx_tool_call_is_awaiting(const struct rx_tool_call *c)
{
    return !c->result.present && rx_approval_is_awaiting(c->approval);
}

bool rx_tool_call_is_running(const struct rx_tool_call *c)
{
    return c->started_at && !c->result.present && !rx_approval_is_awaiting(c->approval);
}

/* What a string holds: its bytes and malloc's word of overhead. */
static size_t str_bytes(const char *p)
{
    return p ? strlen(p) + 1 + sizeof(size_t) : 0;
}

static size_t messages_bytes(const struct rx_message_list *l)
{
    size_t n = l->cap * (sizeof(*l->items) + 2 * sizeof(size_t));

    for (size_t i = 0; i < l->len; i++) {
        const struct rx_message *m = &l->items[i];

        n += str_bytes(m->id) + str_bytes(m->content) + str_bytes(m->reasoning) +
             (m->json ? m->json_len + 1 : 0);
    }
    return n;
}

size_t rx_state_bytes(const struct rx_state *s)
{
    size_t n = sizeof(*s) + messages_bytes(&s->user) + messages_bytes(&s->assistant) +
               s->tools.cap * (sizeof(*s->tools.items) + 2 * sizeof(size_t));

    for (size_t i = 0; i < s->tools.len; i++) {
        const struct rx_tool_call *c = &s->tools.items[i];

        n += str_bytes(c->id) + str_bytes(c->name) + str_bytes(c->parameters) +
             str_bytes(c->result.text) + (c->json ? c->json_len + 1 : 0);
    }
    return n + strlen(s->context_summary);
}

size_t rx_state_title(const struct rx_state *s, const char **text)
{
    const char *c;
    size_t n;

    if (!s->user.len)
        return 0;
    c = s->user.items[0].content;
    c += strspn(c, " \t\r\n");
    n = strcspn(c, "\r\n");
    if (n > 60) {
        n = 60;
        while (n > 30 && c[n] != ' ')
            n--;
        /* Never cut inside a UTF-8 sequence. */
        while (n && ((unsigned char)c[n] & 0xC0) == 0x80)
            n--;
    }
    *text = c;
    return n;
}

enum rx_policy rx_state_tool_policy(const struct rx_state *s, const char *tool)
{
    return rx_policy_map_get(&s->policies, tool);
}

/* ---- copy and invariants ------------------------------------------------- */

static int copy_str(char **dst, const char *src)
{
    if (!src) {
        *dst = NULL;
        return 0;
    }
    *dst = rx_strdup(src);
    return *dst ? 0 : -ENOMEM;
}

/* The records of src from `from` on; dst is zeroed by the caller. */
static int copy_messages(const struct rx_message_list *src, size_t from,
                         struct rx_message_list *dst)
{
    size_t n = from < src->len ? src->len - from : 0;

    dst->items = rx_malloc(n * sizeof(*dst->items));
    if (!dst->items)
        return -ENOMEM;
    dst->cap = n;
    for (size_t i = 0; i < n; i++) {
        const struct rx_message *m = &src->items[from + i];
        struct rx_message *d = &dst->items[i];

        *d = *m;
        d->id = d->content = d->reasoning = d->json = NULL;
        d->json_len = 0;
        if (copy_str(&d->id, m->id) || copy_str(&d->content, m->content) ||
            copy_str(&d->reasoning, m->reasoning)) {
            rx_state__message_release(d);
            return -ENOMEM;
        }
        dst->len++;
    }
    return 0;
}

static int copy_tools(const struct rx_tool_call_list *src, size_t from,
                      struct rx_tool_call_list *dst)
{
    size_t n = from < src->len ? src->len - from : 0;

    dst->items = rx_malloc(n * sizeof(*dst->items));
    if (!dst->items)
        return -ENOMEM;
    dst->cap = n;
    for (size_t i = 0; i < n; i++) {
        const struct rx_tool_call *c = &src->items[from + i];
        struct rx_tool_call *d = &dst->items[i];

        *d = *c;
        d->id = d->name = d->parameters = d->result.text = d->json = NULL;
        d->json_len = 0;
        if (copy_str(&d->id, c->id) || copy_str(&d->name, c->name) ||
            copy_str(&d->parameters, c->parameters) ||
            copy_str(&d->result.text, c->result.text)) {
            rx_state__tool_call_release(d);
            return -ENOMEM;
        }
        dst->len++;
    }
    return 0;
}

int rx_state_copy_tail(const struct rx_state *src, size_t user_from,
                       size_t assistant_from, size_t tools_from, struct rx_state *dst)
{
    struct rx_state s;

    memset(&s, 0, sizeof(s));
    s.updated_at = src->updated_at;
    s.called_brain_at = src->called_brain_at;
    s.summary_cut_at = src->summary_cut_at;
    s.context_summary = (char *)no_summary;
    if ((*src->context_summary && copy_str(&s.context_summary, src->context_summary)) ||
        rx_policy_map_copy(&src->policies, &s.policies) ||
        rx_settings_copy(&src->settings, &s.settings) ||
        copy_messages(&src->user, user_from, &s.user) ||
        copy_messages(&src->assistant, assistant_from, &s.assistant) ||
        copy_tools(&src->tools, tools_from, &s.tools) || rx_state__derive(&s))
        goto out_release;
    *dst = s;
    return 0;

out_release:
    rx_state_release(&s);
    return -ENOMEM;
}

int rx_state_copy(const struct rx_state *src, struct rx_state *dst)
{
    return rx_state_copy_tail(src, 0, 0, 0, dst);
}

/* Quadratic, on purpose: it is a test oracle, independent of any index. */
static bool messages_sane(const struct rx_message_list *l, int64_t updated_at,
                          bool assistant)
{
    if (l->len > l->cap)
        return false;
    for (size_t i = 0; i < l->len; i++) {
        const struct rx_message *m = &l->items[i];

        if (!m->id || !m->content || m->received_at > updated_at)
            return false;
        if (assistant && (m->updated_at > updated_at || m->updated_at < m->received_at))
            return false;
        if (!assistant &&
            (m->usage.present || m->has_first_token_at || m->reasoning || m->restarted))
            return false;
        if (m->usage.present
                ? m->usage.prompt_tokens < 0 || m->usage.completion_tokens < 0
                : m->usage.prompt_tokens || m->usage.completion_tokens)
            return false;
        if (m->has_first_token_at ? m->first_token_at < 0 : m->first_token_at != 0)
            return false;
        for (size_t j = 0; j < i; j++)
            if (!strcmp(l->items[j].id, m->id))
                return false;
        if (rx_index_find(&l->ids, m->id, rx_message_key, l) != (long)i)
            return false;
        if (assistant && i < l->settled && m->status == RX_STATUS_STREAMING)
            return false;
        if (l->time_sorted && i && m->received_at < l->items[i - 1].received_at)
            return false;
    }
    return l->ids.used == l->len && l->settled <= l->len;
}

bool rx_state_check_invariants(const struct rx_state *s)
{
    int64_t latest = s->latest_result_at;
    bool latest_seen = false;

    if (!s->context_summary || !rx_policy_map_check(&s->policies) ||
        !rx_settings_check(&s->settings) ||
        !messages_sane(&s->user, s->updated_at, false) ||
        !messages_sane(&s->assistant, s->updated_at, true) || s->tools.len > s->tools.cap)
        return false;
    for (size_t i = 0; i < s->tools.len; i++) {
        const struct rx_tool_call *c = &s->tools.items[i];

        if (!c->id || !c->name || !c->parameters || c->called_at > s->updated_at ||
            strlen(c->id) > RX_ID_MAX)
            return false;
        if (c->result.present &&
            (!c->result.text || c->result.received_at > s->updated_at))
            return false;
        /* Awaiting a person means no answer yet; every answer ends the wait.
           Only a call that started can be in doubt; a resolved one holds
           what the person said happened, a result. */
        if ((c->approval != RX_APPROVAL_NONE && !rx_approval_name(c->approval)) ||
            (rx_approval_is_awaiting(c->approval) && c->result.present) ||
            (c->approval == RX_APPROVAL_IN_DOUBT && !c->started_at) ||
            (c->approval == RX_APPROVAL_RESOLVED &&
             (!c->result.present || !c->result.is_success)))
            return false;
        if (c->started_at &&
            (c->started_at < c->called_at || c->started_at > s->updated_at))
            return false;
        for (size_t j = 0; j < i; j++)
            if (!strcmp(s->tools.items[j].id, c->id))
                return false;
        if (rx_index_find(&s->tools.ids, c->id, rx_tool_call_key, &s->tools) != (long)i ||
            (i < s->tools.settled && !c->result.present) ||
            (c->result.present && c->result.received_at > latest))
            return false;
        if (c->result.present && c->result.received_at == latest)
            latest_seen = true;
        if (s->tools.time_sorted && i && c->called_at < s->tools.items[i - 1].called_at)
            return false;
    }
    return s->tools.ids.used == s->tools.len && s->tools.settled <= s->tools.len &&
           (latest_seen || s->latest_result_at == 0);
}
