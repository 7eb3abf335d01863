/*
 * rx_machine - the Reflexor transition. See rx_machine.h.
 *
 * Each input is handled in two phases, as the seed 000 design has it:
 *   1. prepare: validate against the state and build a partial update (struct
 *      update) holding every new string and record, with list capacity
 *      reserved. This is the only phase that allocates or can fail.
 *   2. merge: fold the update into the state key by key through the reducers
 *      of SPEC 2 (updatedAt: replace, calledBrainAt: max, message lists:
 *      add_messages, tool records: patch_by_id, toolPolicies: set or remove
 *      one key, settings: replace). It cannot fail.
 * The inputs about tool calls and approval prepare in rx_machine_tools.c.
 * A rejection or -ENOMEM in phase 1 frees the update and leaves the state as
 * it was, which is what makes every transition atomic without copying state.
 * (Phase 1 may grow a list's capacity, never its contents, so it takes the
 * state mutable.)
 */
#include "state_machine/rx_machine.h"

#include <errno.h>
#include <string.h>

#include "state_machine/rx_alloc.h"
#include "state_machine/rx_machine_internal.h"

static const char *const reason_names[] = {
#define RX_X(e, name) name,
    RX_REASONS(RX_X)
#undef RX_X
};

const char *rx_reason_name(enum rx_reason r)
{
    return reason_names[r];
}

const char *rx_verdict_name(enum rx_verdict v)
{
    static const char *const names[] = {"accepted", "unchanged", "rejected"};

    return names[v];
}

static void update_release(struct update *u)
{
    rx_free(u->user.id);
    rx_free(u->user.content);
    for (size_t i = 0; i < u->n_assistant; i++) {
        rx_free(u->assistant[i].msg.id);
        rx_free(u->assistant[i].msg.content);
        rx_free(u->assistant[i].msg.reasoning);
    }
    rx_free(u->assistant);
    for (size_t i = 0; i < u->n_new_tools; i++) {
        rx_free(u->new_tools[i].id);
        rx_free(u->new_tools[i].name);
        rx_free(u->new_tools[i].parameters);
        rx_free(u->new_tools[i].result.text);
    }
    rx_free(u->new_tools);
    for (size_t i = 0; i < u->n_tool_patches; i++) {
        rx_free(u->tool_patches[i].result.text);
        rx_free(u->tool_patches[i].parameters);
    }
    rx_free(u->tool_patches);
    rx_free(u->summary);
    rx_free(u->policy_tool);
    rx_settings_release(&u->settings);
}

int rx_machine__reserve(void **items, size_t len, size_t *cap, size_t extra, size_t size)
{
    size_t want = len + extra, ncap;
    void *p;

    if (want <= *cap)
        return 0;
    ncap = *cap ? *cap : 8;
    while (ncap < want)
        ncap *= 2;
    p = rx_realloc(*items, *cap * size, ncap * size);
    if (!p)
        return -ENOMEM;
    *items = p;
    *cap = ncap;
    return 0;
}

static int reserve_messages(struct rx_message_list *l, size_t extra)
{
    int err = rx_machine__reserve((void **)&l->items, l->len, &l->cap, extra,
                                  sizeof(*l->items));

    return err ? err : rx_index_reserve(&l->ids, extra);
}

/* ---- phase 1: one prepare function per input type ------------------------- */

/*
 * Record `m` with `content` as the new assistantMessages[index]; copies its
 * strings (id, content, reasoning), never its cached encoding.
 */
static int add_assistant_put(struct update *u, size_t index, const struct rx_message *m,
                             const char *content)
{
    struct message_put *p = &u->assistant[u->n_assistant];

    p->index = index;
    p->msg = *m;
    p->msg.json = NULL;
    p->msg.json_len = 0;
    p->msg.id = rx_strdup(m->id);
    p->msg.content = rx_strdup(content);
    p->msg.reasoning = m->reasoning ? rx_strdup(m->reasoning) : NULL;
    u->n_assistant++;
    return p->msg.id && p->msg.content && (p->msg.reasoning || !m->reasoning) ? 0
                                                                              : -ENOMEM;
}

static int prep_user_message(struct rx_state *s, const struct rx_input *in,
                             struct update *u, struct verdict *v)
{
    const struct rx_message *old;

    if (!in->message_id || !*in->message_id)
        return *v = INVALID("messageId"), 0;
    if (!in->content || rx_text_is_blank(in->content))
        return *v = INVALID("content"), 0;
    old = rx_state_find_user(s, in->message_id);
    if (old) {
        /* A retried POST of the same message is a success that changes nothing. */
        *v = strcmp(old->content, in->content) ? REJECT(DUPLICATE_ID) : UNCHANGED;
        return 0;
    }
    if (reserve_messages(&s->user, 1))
        return -ENOMEM;
    u->has_user = true;
    u->user.received_at = in->timestamp;
    u->user.id = rx_strdup(in->message_id);
    u->user.content = rx_strdup(in->content);
    if (!u->user.id || !u->user.content)
        return -ENOMEM;
    /* What still awaits a person is answered, so every call has a result
       when the brain reads the new message (SPEC 3.6). */
    return rx_machine__reject_awaiting(s, in, u);
}

static const char *partial_for(const struct rx_input *in, const char *message_id)
{
    for (size_t i = 0; i < in->n_calls; i++)
        if (in->calls[i].id && !strcmp(in->calls[i].id, message_id))
            return in->calls[i].parameters;
    return NULL;
}

static int prep_cancel(struct rx_state *s, const struct rx_input *in, struct update *u)
{
    size_t n_streaming = 0, n_pending = rx_state_pending_tools(s);

    for (size_t i = 0; i < s->assistant.len; i++)
        n_streaming += s->assistant.items[i].status == RX_STATUS_STREAMING;
    u->assistant = rx_malloc((n_streaming + 1) * sizeof(*u->assistant));
    u->tool_patches = rx_malloc((n_pending + 1) * sizeof(*u->tool_patches));
    if (!u->assistant || !u->tool_patches)
        return -ENOMEM;
    for (size_t i = 0; i < s->assistant.len; i++) {
        struct rx_message m = s->assistant.items[i];
        const char *partial;

        if (m.status != RX_STATUS_STREAMING)
            continue;
        partial = partial_for(in, m.id);
        m.status = RX_STATUS_STOPPED;
        m.updated_at = in->timestamp;
        if (add_assistant_put(u, i, &m, partial ? partial : m.content))
            return -ENOMEM;
    }
    for (size_t i = 0; i < s->tools.len; i++) {
        struct tool_patch *p = &u->tool_patches[u->n_tool_patches];

        if (s->tools.items[i].result.present)
            continue;
        memset(p, 0, sizeof(*p));
        p->index = i;
        p->set_result = true;
        p->result = (struct rx_tool_result){true, false, NULL, in->timestamp};
        /* A call that waited for a person is refused with the rest: the
           answer ends the wait (rx_state: no result while PENDING or
           IN_DOUBT). */
        if (rx_approval_is_awaiting(s->tools.items[i].approval)) {
            p->set_approval = true;
            p->approval = RX_APPROVAL_REJECTED;
        }
        u->n_tool_patches++;
        p->result.text = rx_strdup("cancelled");
        if (!p->result.text)
            return -ENOMEM;
    }
    /* No new ask may start until the next user message. */
    u->has_called_brain_at = true;
    u->called_brain_at = in->timestamp;
    return 0;
}

static int prep_message_start(struct rx_state *s, const struct rx_input *in,
                              struct update *u, struct verdict *v)
{
    struct rx_message m = {0};

    if (!in->message_id || !*in->message_id)
        return *v = INVALID("messageId"), 0;
    if (rx_state_find_assistant(s, in->message_id))
        return *v = REJECT(DUPLICATE_ID), 0;
    u->assistant = rx_malloc(sizeof(*u->assistant));
    if (!u->assistant || reserve_messages(&s->assistant, 1))
        return -ENOMEM;
    m.id = in->message_id;
    m.received_at = m.updated_at = in->timestamp;
    m.called_brain_at = in->called_brain_at;
    m.status = RX_STATUS_STREAMING;
    return add_assistant_put(u, s->assistant.len, &m, "");
}

static int prep_message_complete(struct rx_state *s, const struct rx_input *in,
                                 struct update *u, struct verdict *v)
{
    const struct rx_message *old;
    struct rx_message m = {0};
    size_t index = s->assistant.len;

    if (!in->message_id || !*in->message_id)
        return *v = INVALID("messageId"), 0;
    if (!in->content)
        return *v = INVALID("content"), 0;
    if (in->usage.present &&
        (in->usage.prompt_tokens < 0 || in->usage.completion_tokens < 0))
        return *v = INVALID("usage"), 0;
    if (in->has_first_token_at && in->first_token_at < 0)
        return *v = INVALID("firstTokenAt"), 0;
    old = rx_state_find_assistant(s, in->message_id);
    if (old && old->status != RX_STATUS_STREAMING)
        return *v = REJECT(NOT_STREAMING), 0;
    u->assistant = rx_malloc(sizeof(*u->assistant));
    if (!u->assistant)
        return -ENOMEM;
    if (old) {
        m = *old;
        index = (size_t)(old - s->assistant.items);
    } else {
        /* A brain that does not stream sends only the complete input. */
        if (reserve_messages(&s->assistant, 1))
            return -ENOMEM;
        m.id = in->message_id;
        m.received_at = in->timestamp;
        m.called_brain_at = in->called_brain_at;
    }
    m.updated_at = in->timestamp;
    m.status = RX_STATUS_COMPLETE;
    /* What the brain says about its answer replaces what the record had. */
    m.usage = in->usage.present ? in->usage : (struct rx_usage){0};
    m.has_first_token_at = in->has_first_token_at;
    m.first_token_at = in->has_first_token_at ? in->first_token_at : 0;
    m.restarted = in->restarted;
    m.reasoning = in->reasoning;
    return add_assistant_put(u, index, &m, in->content);
}

static int prep_configure(struct rx_state *s, const struct rx_input *in, struct update *u,
                          struct verdict *v)
{
    const char *bad_field;

    if (!(in->settings_named & RX_SETTINGS_ALL))
        return *v = INVALID("settings"), 0;
    if ((bad_field = rx_settings_invalid(&in->settings, in->settings_named)))
        return *v = INVALID(bad_field), 0;
    if (rx_settings_merge(&s->settings, &in->settings, in->settings_named, &u->settings))
        return -ENOMEM;
    if (rx_settings_equal(&s->settings, &u->settings))
        return *v = UNCHANGED, 0;
    u->has_settings = true;
    return 0;
}

static int prep_compress(struct rx_state *s, const struct rx_input *in, struct update *u,
                         struct verdict *v)
{
    size_t n = 0;

    if (!in->text)
        return *v = INVALID("summary"), 0;
    if (in->cut_at < s->summary_cut_at)
        return *v = REJECT(CUT_BACKWARDS), 0;
    if (in->cut_at > in->timestamp)
        return *v = REJECT(CUT_IN_FUTURE), 0;
    for (size_t i = 0; i < s->tools.len; i++)
        n += s->tools.items[i].called_at <= in->cut_at && s->tools.items[i].is_loaded;
    u->tool_patches = rx_malloc((n + 1) * sizeof(*u->tool_patches));
    u->summary = rx_strdup(in->text);
    if (!u->tool_patches || !u->summary)
        return -ENOMEM;
    for (size_t i = 0; i < s->tools.len; i++) {
        if (s->tools.items[i].called_at > in->cut_at || !s->tools.items[i].is_loaded)
            continue;
        u->tool_patches[u->n_tool_patches++] =
            (struct tool_patch){.index = i, .set_loaded = true, .is_loaded = false};
    }
    u->cut_at = in->cut_at;
    return 0;
}

static int prep_load(struct rx_state *s, const struct rx_input *in, struct update *u,
                     struct verdict *v)
{
    const struct rx_tool_call *c;

    if (!in->tool_call_id)
        return *v = INVALID("toolCallId"), 0;
    c = rx_state_find_tool(s, in->tool_call_id);
    if (!c)
        return *v = REJECT(UNKNOWN_ID), 0;
    if (c->is_loaded)
        return *v = UNCHANGED, 0;
    u->tool_patches = rx_malloc(sizeof(*u->tool_patches));
    if (!u->tool_patches)
        return -ENOMEM;
    u->tool_patches[0] = (struct tool_patch){
        .index = (size_t)(c - s->tools.items), .set_loaded = true, .is_loaded = true};
    u->n_tool_patches = 1;
    return 0;
}

static int prep_tool_result(struct rx_state *s, const struct rx_input *in,
                            struct update *u, struct verdict *v)
{
    const struct rx_tool_call *c;
    struct tool_patch *p;

    if (!in->tool_call_id)
        return *v = INVALID("toolCallId"), 0;
    if (!in->text)
        return *v = INVALID(in->type == RX_IN_TOOLKIT_RESPOND ? "result" : "error"), 0;
    c = rx_state_find_tool(s, in->tool_call_id);
    if (!c)
        return *v = REJECT(UNKNOWN_ID), 0;
    if (c->result.present) /* the first answer wins */
        return *v = REJECT(ALREADY_ANSWERED), 0;
    /* No tool runs before a person said yes (SPEC 3.6), so no answer either;
       a call in doubt is answered by the person (SPEC 3.7). */
    if (rx_approval_is_awaiting(c->approval))
        return *v = REJECT(AWAITING_APPROVAL), 0;
    p = u->tool_patches = rx_malloc(sizeof(*p));
    if (!p)
        return -ENOMEM;
    memset(p, 0, sizeof(*p));
    u->n_tool_patches = 1;
    p->index = (size_t)(c - s->tools.items);
    p->set_result = true;
    p->result.present = true;
    p->result.is_success = in->type == RX_IN_TOOLKIT_RESPOND;
    p->result.received_at = in->timestamp;
    p->result.text = rx_strdup(in->text);
    return p->result.text ? 0 : -ENOMEM;
}

static int prepare(struct rx_state *s, const struct rx_input *in, struct update *u,
                   struct verdict *v)
{
    if (!in->has_timestamp)
        return *v = INVALID("timestamp"), 0;
    /* Time irreversibility: live inputs are stamped in order, replays must be too. */
    if (in->timestamp < s->updated_at)
        return *v = REJECT(STALE_TIMESTAMP), 0;
    u->updated_at = in->timestamp;
    /* An answer cannot come from an ask made after it: that would raise
       calledBrainAt past updatedAt and silence every later message. */
    if (rx_input_type_origin(in->type) == RX_ORIGIN_BRAIN &&
        in->called_brain_at > in->timestamp)
        return *v = INVALID("calledBrainAt"), 0;
    if (rx_input_type_origin(in->type) == RX_ORIGIN_BRAIN) {
        u->has_called_brain_at = true;
        u->called_brain_at = in->called_brain_at;
    }
    switch (in->type) {
    case RX_IN_USER_SEND_MESSAGE:
        return prep_user_message(s, in, u, v);
    case RX_IN_USER_CANCEL:
        return prep_cancel(s, in, u);
    case RX_IN_USER_REVIEW_TOOL_CALL:
        return rx_machine__prep_review(s, in, u, v);
    case RX_IN_USER_SET_TOOL_POLICY:
        return rx_machine__prep_set_policy(s, in, u, v);
    case RX_IN_USER_CONFIGURE:
        return prep_configure(s, in, u, v);
    case RX_IN_BRAIN_SEND_MESSAGE_START:
        return prep_message_start(s, in, u, v);
    case RX_IN_BRAIN_SEND_MESSAGE_COMPLETE:
        return prep_message_complete(s, in, u, v);
    case RX_IN_BRAIN_CALL_TOOLS:
        return rx_machine__prep_call_tools(s, in, u, v);
    case RX_IN_BRAIN_COMPRESS_HISTORY:
        return prep_compress(s, in, u, v);
    case RX_IN_BRAIN_LOAD_TOOL_CALL:
        return prep_load(s, in, u, v);
    case RX_IN_TOOLKIT_RESPOND:
    case RX_IN_TOOLKIT_ERROR:
        return prep_tool_result(s, in, u, v);
    case RX_IN_TOOLKIT_START_CALL:
        return rx_machine__prep_start_call(s, in, u, v);
    case RX_IN_TOOLKIT_CALL_IN_DOUBT:
        return rx_machine__prep_in_doubt(s, in, u, v);
    case RX_IN__COUNT:
        break;
    }
    return *v = INVALID("type"), 0;
}

/* ---- phase 2: the reducers; nothing here allocates or fails --------------- */

static void note_place(size_t *at, size_t *n, size_t index)
{
    if (*n < RX_OUTCOME_PLACES)
        at[*n] = index;
    if (*n <= RX_OUTCOME_PLACES)
        (*n)++;
}

/* add_messages for one record: replace in place (position kept) or append. */
static void put_message(struct rx_message_list *l, struct rx_message *m, size_t index)
{
    if (index < l->len) {
        rx_free(l->items[index].id);
        rx_free(l->items[index].content);
        rx_free(l->items[index].reasoning);
        rx_message_forget(&l->items[index]);
        l->items[index] = *m; /* same id: the index stays right */
    } else {
        l->items[l->len] = *m;
        rx_index_insert(&l->ids, m->id, l->len);
        l->len++;
    }
    m->id = m->content = m->reasoning = NULL; /* moved into the state */
}

/* patch_by_id: only the fields the patch names change. */
static void patch_tool(struct rx_state *s, struct tool_patch *p)
{
    struct rx_tool_call *c = &s->tools.items[p->index];

    rx_tool_call_forget(c);
    if (p->set_approval)
        c->approval = p->approval;
    if (p->set_started)
        c->started_at = p->started_at;
    if (p->parameters) {
        rx_free(c->parameters);
        c->parameters = p->parameters;
        p->parameters = NULL;
    }
    if (p->set_result) {
        rx_free(c->result.text);
        c->result = p->result;
        p->result.text = NULL;
        if (c->result.received_at > s->latest_result_at)
            s->latest_result_at = c->result.received_at;
    }
    if (p->set_loaded)
        c->is_loaded = p->is_loaded;
}

static void merge(struct rx_state *s, struct update *u, struct rx_outcome *out)
{
    s->updated_at = u->updated_at; /* replace */
    if (u->has_called_brain_at && u->called_brain_at > s->called_brain_at) {
        s->called_brain_at = u->called_brain_at; /* max: never backwards */
        out->changed |= RX_CHANGED_CALLED_BRAIN;
    }
    if (u->has_user) {
        out->changed |= RX_CHANGED_USER;
        out->index = s->user.len;
        out->user_added = 1;
        put_message(&s->user, &u->user, s->user.len);
    }
    for (size_t i = 0; i < u->n_assistant; i++) {
        size_t at = u->assistant[i].index;

        out->changed |= RX_CHANGED_ASSISTANT;
        if (i == 0)
            out->index = at;
        if (at < s->assistant.len)
            note_place(out->assistant_at, &out->n_assistant_at, at);
        else
            out->assistant_added++;
        put_message(&s->assistant, &u->assistant[i].msg, at);
    }
    if (u->n_new_tools) {
        out->changed |= RX_CHANGED_TOOLS;
        out->index = s->tools.len;
        out->tools_added = u->n_new_tools;
        for (size_t i = 0; i < u->n_new_tools; i++) {
            const struct rx_tool_result *r = &u->new_tools[i].result;

            /* A call denied by policy is answered as it is made. */
            if (r->present && r->received_at > s->latest_result_at)
                s->latest_result_at = r->received_at;
            s->tools.items[s->tools.len] = u->new_tools[i];
            rx_index_insert(&s->tools.ids, u->new_tools[i].id, s->tools.len);
            s->tools.len++;
        }
        u->n_new_tools = 0; /* moved */
    }
    for (size_t i = 0; i < u->n_tool_patches; i++) {
        out->changed |= RX_CHANGED_TOOLS;
        if (i == 0 && !(out->changed & (RX_CHANGED_ASSISTANT | RX_CHANGED_USER)))
            out->index = u->tool_patches[i].index;
        note_place(out->tools_at, &out->n_tools_at, u->tool_patches[i].index);
        patch_tool(s, &u->tool_patches[i]);
    }
    if (u->summary) {
        out->changed |= RX_CHANGED_SUMMARY;
        rx_state_set_summary(s, u->summary);
        s->summary_cut_at = u->cut_at;
        u->summary = NULL;
    }
    /* put, never a failure: a new entry's room was reserved in phase 1. */
    if (u->policy_tool && rx_policy_map_put(&s->policies, &u->policy_tool, u->policy))
        out->changed |= RX_CHANGED_POLICIES;
    if (u->has_settings) {
        rx_settings_release(&s->settings);
        s->settings = u->settings; /* moved */
        rx_settings_init(&u->settings);
        out->changed |= RX_CHANGED_SETTINGS;
    }
    if (u->n_assistant > 1 || u->n_tool_patches > 1 ||
        (u->n_assistant && u->n_tool_patches))
        out->changed |= RX_CHANGED_MANY;
    rx_state_settle(s);
}

int rx_machine_apply(struct rx_state *s, const struct rx_input *in,
                     struct rx_outcome *out)
{
    struct update u;
    struct verdict v = ACCEPT;
    int err;

    memset(&u, 0, sizeof(u));
    memset(out, 0, sizeof(*out));
    err = prepare(s, in, &u, &v);
    if (!err && v.verdict == RX_ACCEPTED)
        merge(s, &u, out);
    update_release(&u);
    if (err)
        return err;
    out->verdict = v.verdict;
    out->reason = v.reason;
    out->field = v.field;
    return 0;
}
