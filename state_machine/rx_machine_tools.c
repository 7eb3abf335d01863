/*
 * rx_machine_tools - the phase 1 of the inputs about tool calls and their
 * approval (SPEC 3.2, 3.6): brain-call-tools, user-review-tool-call,
 * user-set-tool-policy, and what a new user message does to the calls that
 * await a person. See rx_machine.h and rx_machine_internal.h.
 *
 * A call awaits a person while its approval is PENDING (a review, SPEC 3.6)
 * or IN_DOUBT (cut off by a crash after toolkit-start-call, SPEC 3.7); it has
 * no result then (rx_state's invariant), so it is pending for effects_at (no
 * ask) without a tool request. Every way out of the wait answers it or lets
 * the tool run: approve or retry (the tool runs), reject, resolve, a new user
 * message, user-cancel. Also here: toolkit-start-call and
 * toolkit-call-in-doubt, the runtime's marks on a call's record.
 */
#include "state_machine/rx_machine_internal.h"

#include <errno.h>
#include <string.h>

#include "state_machine/rx_alloc.h"
#include "state_machine/rx_json.h"

#define DENIED_ERROR      "denied by policy"
#define REJECTED_ERROR    "rejected by the user"
#define SUPERSEDED_ERROR  "not approved: the user sent a new message"
#define INTERRUPTED_ERROR "not run again after an interruption"

/* Waits for a review (PENDING): what `always` extends a decision to. */
static bool awaiting_review(const struct rx_tool_call *c)
{
    return c->approval == RX_APPROVAL_PENDING && !c->result.present;
}

int rx_machine__prep_call_tools(struct rx_state *s, const struct rx_input *in,
                                struct update *u, struct verdict *v)
{
    struct rx_tool_call_list *tools = &s->tools;

    if (!in->n_calls)
        return *v = INVALID("toolCalls"), 0;
    for (size_t i = 0; i < in->n_calls; i++) {
        if (!in->calls[i].id || !*in->calls[i].id ||
            strlen(in->calls[i].id) > RX_ID_MAX || !in->calls[i].name ||
            !in->calls[i].parameters || (unsigned)in->calls[i].policy > RX_POLICY_DENY)
            return *v = INVALID("toolCalls"), 0;
        if (rx_state_find_tool(s, in->calls[i].id))
            return *v = REJECT(DUPLICATE_ID), 0;
        for (size_t j = 0; j < i; j++)
            if (!strcmp(in->calls[j].id, in->calls[i].id))
                return *v = REJECT(DUPLICATE_ID), 0;
    }
    if (rx_machine__reserve((void **)&tools->items, tools->len, &tools->cap, in->n_calls,
                            sizeof(*tools->items)) ||
        rx_index_reserve(&tools->ids, in->n_calls))
        return -ENOMEM;
    u->new_tools = rx_malloc(in->n_calls * sizeof(*u->new_tools));
    if (!u->new_tools)
        return -ENOMEM;
    memset(u->new_tools, 0, in->n_calls * sizeof(*u->new_tools));
    for (size_t i = 0; i < in->n_calls; i++) {
        struct rx_tool_call *c = &u->new_tools[i];

        u->n_new_tools++;
        c->called_at = in->timestamp;
        c->id = rx_strdup(in->calls[i].id);
        c->name = rx_strdup(in->calls[i].name);
        c->parameters = rx_strdup(in->calls[i].parameters);
        if (!c->id || !c->name || !c->parameters)
            return -ENOMEM;
        /* The server's stamp decides; UNSET (older logs) is auto. */
        if (in->calls[i].policy == RX_POLICY_ASK) {
            c->approval = RX_APPROVAL_PENDING;
        } else if (in->calls[i].policy == RX_POLICY_DENY) {
            c->result = (struct rx_tool_result){true, false, NULL, in->timestamp};
            c->result.text = rx_strdup(DENIED_ERROR);
            if (!c->result.text)
                return -ENOMEM;
        }
    }
    return 0;
}

/* "rejected by the user", with ": <reason>" when the reason says something. */
static char *rejection_text(const char *reason)
{
    size_t n = strlen(REJECTED_ERROR), r;
    char *t;

    if (!reason || rx_text_is_blank(reason))
        return rx_strdup(REJECTED_ERROR);
    r = strlen(reason);
    t = rx_malloc(n + 2 + r + 1);
    if (!t)
        return NULL;
    memcpy(t, REJECTED_ERROR, n);
    memcpy(t + n, ": ", 2);
    memcpy(t + n + 2, reason, r + 1);
    return t;
}

/* The decision of `in` for record i: approval, and for a rejection the answer. */
static int add_decision(struct update *u, const struct rx_input *in, size_t i,
                        const char *error)
{
    struct tool_patch *p = &u->tool_patches[u->n_tool_patches++];

    memset(p, 0, sizeof(*p));
    p->index = i;
    p->set_approval = true;
    p->approval =
        in->decision == RX_DECISION_APPROVE ? RX_APPROVAL_APPROVED : RX_APPROVAL_REJECTED;
    if (in->decision == RX_DECISION_APPROVE)
        return 0;
    p->set_result = true;
    p->result = (struct rx_tool_result){true, false, NULL, in->timestamp};
    p->result.text = rx_strdup(error);
    return p->result.text ? 0 : -ENOMEM;
}

/*
 * user-review-tool-call. With `always`, the decision also becomes the tool's
 * policy for the session (approve: auto, reject: deny) and applies to every
 * other call of that tool still awaiting approval, with its own parameters
 * and the same answer. Patches go in record order.
 */
/*
 * The review of a call in doubt (SPEC 3.7): retry runs it again (APPROVED),
 * reject answers it with INTERRUPTED_ERROR, resolve with the person's result
 * (RESOLVED). It never has `always`: that is a policy for approvals.
 */
static int prep_doubt_review(struct rx_state *s, const struct rx_input *in,
                             const struct rx_tool_call *c, struct update *u,
                             struct verdict *v)
{
    struct tool_patch *p;

    if (in->decision == RX_DECISION_APPROVE)
        return *v = REJECT(IN_DOUBT), 0;
    if (in->always)
        return *v = INVALID("always"), 0;
    p = u->tool_patches = rx_malloc(sizeof(*p));
    if (!p)
        return -ENOMEM;
    memset(p, 0, sizeof(*p));
    u->n_tool_patches = 1;
    p->index = (size_t)(c - s->tools.items);
    p->set_approval = true;
    if (in->decision == RX_DECISION_RETRY) {
        /* Not started again yet: a crash before the retry's own
           toolkit-start-call leaves a call that simply runs, as the person
           asked, not one in doubt twice. */
        p->approval = RX_APPROVAL_APPROVED;
        p->set_started = true;
        p->started_at = 0;
        return 0;
    }
    p->set_result = true;
    p->result = (struct rx_tool_result){true, false, NULL, in->timestamp};
    if (in->decision == RX_DECISION_RESOLVE) {
        p->approval = RX_APPROVAL_RESOLVED;
        p->result.is_success = true;
        p->result.text = rx_strdup(in->text);
    } else {
        p->approval = RX_APPROVAL_REJECTED;
        p->result.text = rx_strdup(INTERRUPTED_ERROR);
    }
    return p->result.text ? 0 : -ENOMEM;
}

int rx_machine__prep_review(struct rx_state *s, const struct rx_input *in,
                            struct update *u, struct verdict *v)
{
    const struct rx_tool_call *c;
    size_t target, n = 0;
    char *error = NULL;
    bool approve = in->decision == RX_DECISION_APPROVE;
    int err = -ENOMEM;

    if (!in->tool_call_id)
        return *v = INVALID("toolCallId"), 0;
    if (!rx_decision_name(in->decision))
        return *v = INVALID("decision"), 0;
    if (approve && in->parameters &&
        !rx_json_is_object_text(in->parameters, strlen(in->parameters)))
        return *v = INVALID("parameters"), 0;
    if (in->decision == RX_DECISION_RESOLVE && !in->text)
        return *v = INVALID("result"), 0;
    c = rx_state_find_tool(s, in->tool_call_id);
    if (!c)
        return *v = REJECT(UNKNOWN_ID), 0;
    if (!rx_tool_call_is_awaiting(c))
        return *v = REJECT(NOT_PENDING), 0;
    if (c->approval == RX_APPROVAL_IN_DOUBT)
        return prep_doubt_review(s, in, c, u, v);
    if (in->decision != RX_DECISION_APPROVE && in->decision != RX_DECISION_REJECT)
        return *v = REJECT(NOT_IN_DOUBT), 0;
    target = (size_t)(c - s->tools.items);
    if (in->always) {
        if (rx_state_tool_policy(s, c->name) == RX_POLICY_UNSET) {
            if (s->policies.len >= RX_POLICIES_MAX)
                return *v = REJECT(TOO_MANY_POLICIES), 0;
            if (rx_policy_map_reserve(&s->policies, 1))
                return -ENOMEM;
        }
        u->policy = approve ? RX_POLICY_AUTO : RX_POLICY_DENY;
        u->policy_tool = rx_strdup(c->name);
        if (!u->policy_tool)
            return -ENOMEM;
        /* Awaiting calls have no result: they are all at or past `settled`.
           Calls in doubt of the tool wait on: each may have acted. */
        for (size_t i = s->tools.settled; i < s->tools.len; i++)
            n += awaiting_review(&s->tools.items[i]) &&
                 !strcmp(s->tools.items[i].name, c->name);
    } else {
        n = 1;
    }
    u->tool_patches = rx_malloc(n * sizeof(*u->tool_patches));
    if (!u->tool_patches || (!approve && !(error = rejection_text(in->text))))
        goto out_free;
    for (size_t i = in->always ? s->tools.settled : target;
         i < s->tools.len && u->n_tool_patches < n; i++) {
        if (i != target && (!awaiting_review(&s->tools.items[i]) ||
                            strcmp(s->tools.items[i].name, c->name)))
            continue;
        if (add_decision(u, in, i, error))
            goto out_free;
    }
    /* Edited arguments are for the reviewed call only. */
    if (approve && in->parameters) {
        for (size_t i = 0; i < u->n_tool_patches; i++)
            if (u->tool_patches[i].index == target &&
                !(u->tool_patches[i].parameters = rx_strdup(in->parameters)))
                goto out_free;
    }
    err = 0;

out_free:
    rx_free(error);
    return err;
}

/* The record toolkit-start-call or toolkit-call-in-doubt marks, or NULL
   with *v set: it must exist, have no result and not wait for a person. */
static const struct rx_tool_call *
runtime_target(const struct rx_state *s, const struct rx_input *in, struct verdict *v)
{
    const struct rx_tool_call *c;

    if (!in->tool_call_id)
        return *v = INVALID("toolCallId"), NULL;
    c = rx_state_find_tool(s, in->tool_call_id);
    if (!c)
        return *v = REJECT(UNKNOWN_ID), NULL;
    if (c->result.present)
        return *v = REJECT(ALREADY_ANSWERED), NULL;
    if (rx_approval_is_awaiting(c->approval))
        return *v = REJECT(AWAITING_APPROVAL), NULL;
    return c;
}

static int one_patch(struct rx_state *s, const struct rx_tool_call *c, struct update *u,
                     struct tool_patch **out)
{
    struct tool_patch *p = u->tool_patches = rx_malloc(sizeof(*p));

    if (!p)
        return -ENOMEM;
    memset(p, 0, sizeof(*p));
    u->n_tool_patches = 1;
    p->index = (size_t)(c - s->tools.items);
    *out = p;
    return 0;
}

/* toolkit-start-call: the tool is about to act; a re-run moves the time on. */
int rx_machine__prep_start_call(struct rx_state *s, const struct rx_input *in,
                                struct update *u, struct verdict *v)
{
    const struct rx_tool_call *c = runtime_target(s, in, v);
    struct tool_patch *p;

    if (!c)
        return 0;
    if (one_patch(s, c, u, &p))
        return -ENOMEM;
    p->set_started = true;
    p->started_at = in->timestamp;
    return 0;
}

/* toolkit-call-in-doubt: a started call cut off by a restart or takeover,
   whose tool is not safe to repeat, waits for a person. */
int rx_machine__prep_in_doubt(struct rx_state *s, const struct rx_input *in,
                              struct update *u, struct verdict *v)
{
    const struct rx_tool_call *c = runtime_target(s, in, v);
    struct tool_patch *p;

    if (!c)
        return 0;
    if (!c->started_at)
        return *v = REJECT(NOT_STARTED), 0;
    if (one_patch(s, c, u, &p))
        return -ENOMEM;
    p->set_approval = true;
    p->approval = RX_APPROVAL_IN_DOUBT;
    return 0;
}

int rx_machine__prep_set_policy(struct rx_state *s, const struct rx_input *in,
                                struct update *u, struct verdict *v)
{
    enum rx_policy now;

    if (!in->tool || !*in->tool)
        return *v = INVALID("tool"), 0;
    if ((unsigned)in->policy > RX_POLICY_DENY)
        return *v = INVALID("policy"), 0;
    now = rx_state_tool_policy(s, in->tool);
    /* The same again (or clearing what is not set) changes nothing. */
    if (now == in->policy)
        return *v = UNCHANGED, 0;
    if (now == RX_POLICY_UNSET) {
        if (s->policies.len >= RX_POLICIES_MAX)
            return *v = REJECT(TOO_MANY_POLICIES), 0;
        if (rx_policy_map_reserve(&s->policies, 1))
            return -ENOMEM;
    }
    u->policy = in->policy;
    u->policy_tool = rx_strdup(in->tool);
    return u->policy_tool ? 0 : -ENOMEM;
}

int rx_machine__reject_awaiting(const struct rx_state *s, const struct rx_input *in,
                                struct update *u)
{
    size_t n = rx_state_awaiting_approval(s);

    if (!n)
        return 0;
    u->tool_patches = rx_malloc(n * sizeof(*u->tool_patches));
    if (!u->tool_patches)
        return -ENOMEM;
    for (size_t i = s->tools.settled; i < s->tools.len; i++) {
        struct tool_patch *p = &u->tool_patches[u->n_tool_patches];

        if (!rx_tool_call_is_awaiting(&s->tools.items[i]))
            continue;
        memset(p, 0, sizeof(*p));
        p->index = i;
        p->set_approval = true;
        p->approval = RX_APPROVAL_REJECTED;
        p->set_result = true;
        p->result = (struct rx_tool_result){true, false, NULL, in->timestamp};
        u->n_tool_patches++;
        p->result.text = rx_strdup(s->tools.items[i].approval == RX_APPROVAL_IN_DOUBT
                                       ? INTERRUPTED_ERROR
                                       : SUPERSEDED_ERROR);
        if (!p->result.text)
            return -ENOMEM;
    }
    return 0;
}
