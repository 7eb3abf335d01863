/*
 * rx_machine - the Reflexor transition (SPEC 3.2): validate an input against
 * the state, build a partial update, merge it through the per-key reducers.
 *
 * Pure: no I/O, clock, threads or globals. Depends on rx_input, rx_state,
 * rx_json and rx_alloc only; nothing from server/ or effects/.
 * Atomic: every allocation happens while the update is built; the merge that
 * follows cannot fail. So a rejected input, an unchanged one and an -ENOMEM
 * all leave the state byte-for-byte as it was.
 * Tool approval (SPEC 3.6), as the transition applies it:
 *  - brain-call-tools: each entry's stamped policy makes its record: AUTO or
 *    UNSET a pending record; ASK one awaiting approval (approval PENDING, no
 *    request-toolkit until reviewed); DENY one answered at once with the
 *    error "denied by policy" (receivedAt = timestamp, no approval).
 *  - user-review-tool-call: unknown id: unknown-id; a record not awaiting
 *    a person (auto, approved, rejected or answered): not-pending; no
 *    decision: invalid ("decision"); resolve without a result: invalid
 *    ("result"). approve:
 *    APPROVED, parameters replaced when edited ones are given; reject:
 *    REJECTED and the error "rejected by the user" (": <reason>" for a
 *    reason that is not blank). `always`: toolPolicies[name] = auto
 *    (approve) or deny (reject), and the same decision for every other
 *    record of that tool still awaiting approval, each keeping its own
 *    parameters. A new override past RX_POLICIES_MAX: too-many-policies.
 *  - user-set-tool-policy: sets or clears (UNSET) toolPolicies[tool]; the
 *    value it already has (clearing an absent one too): unchanged.
 *  - user-send-message (accepted, not the idempotent retry): every record
 *    awaiting approval becomes REJECTED with the error "not approved: the
 *    user sent a new message"; user-cancel answers them "cancelled" and
 *    REJECTED (an approved record keeps APPROVED when cancelled).
 *  - toolkit-respond / toolkit-error for a record awaiting a person
 *    (approval PENDING or IN_DOUBT): awaiting-approval (no tool ran, or the
 *    person decides what happened, so no tool may answer).
 * Effects that survive a crash (SPEC 3.7):
 *  - toolkit-start-call: the runtime commits it before a tool acts. For a
 *    record with no result that does not wait for a person, startedAt =
 *    timestamp (again on a re-run: the new time). Unknown id: unknown-id;
 *    answered: already-answered; waiting for a person: awaiting-approval.
 *  - toolkit-call-in-doubt: on recovery, for a record that started, has no
 *    result and does not wait (rx_tool_call_is_running): approval IN_DOUBT,
 *    which waits for a person exactly like PENDING (no request-toolkit, no
 *    ask). Unknown id: unknown-id; answered: already-answered; waiting for
 *    a person (in doubt already included): awaiting-approval; never
 *    started: not-started.
 *  - user-review-tool-call on a record IN_DOUBT: retry: APPROVED (the tool
 *    runs again, with the same idempotency key; startedAt is kept until its
 *    new toolkit-start-call); reject: REJECTED and the error "not run again
 *    after an interruption" (a reason is not added); resolve: RESOLVED and
 *    a success result with the given `result` text. approve: in-doubt;
 *    `always`: invalid (field "always"), it is for approvals only. On a
 *    record PENDING, retry and resolve: not-in-doubt. `always` applies the
 *    decision to the other records of the tool awaiting approval (PENDING),
 *    never to calls in doubt.
 *  - a new user message answers a call in doubt with the error "not run
 *    again after an interruption" (REJECTED); user-cancel with "cancelled"
 *    (REJECTED), as for calls awaiting approval.
 * Per-session settings (SPEC 3.2 user-configure): the fields an input names
 * are set (or cleared, for a null) in `settings`, the others kept; naming
 * none, a model outside 1..RX_SETTINGS_MODEL_MAX bytes or a temperature
 * outside 0..2: invalid (field "settings", "model", "temperature"); the
 * settings as they already are: unchanged.
 * brain-send-message-complete keeps its optional usage, firstTokenAt and
 * reasoning on the message (absent when not given); negative token counts or
 * firstTokenAt: invalid ("usage", "firstTokenAt").
 * Ownership: the state is the caller's and is changed in place; the input is
 * borrowed; `struct rx_outcome` holds no pointers that need freeing.
 */
#ifndef RX_MACHINE_H
#define RX_MACHINE_H

#include "state_machine/rx_input.h"
#include "state_machine/rx_state.h"
#include "state_machine/rx_common.h"

enum rx_verdict { RX_ACCEPTED, RX_UNCHANGED, RX_REJECTED };

#define RX_REASONS(X)                                                                    \
    X(NONE, "none")                                                                      \
    X(STALE_TIMESTAMP, "stale-timestamp")                                                \
    X(DUPLICATE_ID, "duplicate-id")                                                      \
    X(UNKNOWN_ID, "unknown-id")                                                          \
    X(NOT_STREAMING, "not-streaming")                                                    \
    X(ALREADY_ANSWERED, "already-answered")                                              \
    X(CUT_BACKWARDS, "cut-backwards")                                                    \
    X(CUT_IN_FUTURE, "cut-in-future")                                                    \
    X(INVALID, "invalid")                                                                \
    X(NOT_PENDING, "not-pending")             /* review of a call not awaiting one */    \
    X(AWAITING_APPROVAL, "awaiting-approval") /* a result for an unreviewed call */      \
    X(TOO_MANY_POLICIES, "too-many-policies") /* a new override past RX_POLICIES_MAX */  \
    X(NOT_STARTED, "not-started")             /* in doubt, yet never started */          \
    X(IN_DOUBT, "in-doubt")                   /* approve of a call in doubt */           \
    X(NOT_IN_DOUBT, "not-in-doubt")           /* retry or resolve of another call */

enum rx_reason {
#define RX_X(e, name) RX_REASON_##e,
    RX_REASONS(RX_X)
#undef RX_X
        RX_REASON__COUNT
};

/*
 * What a transition changed, so callers can publish it without diffing (a
 * JSON Patch is made from it and the new state: rx_patch). `changed` is a bit
 * set of RX_CHANGED_*; `index` is the first touched record of the changed list.
 */
enum {
    RX_CHANGED_USER = 1 << 0,      /* userMessages appended */
    RX_CHANGED_ASSISTANT = 1 << 1, /* assistantMessages set or appended */
    RX_CHANGED_TOOLS = 1 << 2,     /* toolCallRecords appended or patched */
    RX_CHANGED_SUMMARY = 1 << 3,   /* contextSummary, summaryCutAt */
    RX_CHANGED_CALLED_BRAIN = 1 << 4,
    RX_CHANGED_MANY = 1 << 5,     /* user-cancel / compress: several records changed */
    RX_CHANGED_POLICIES = 1 << 6, /* toolPolicies set or cleared */
    RX_CHANGED_SETTINGS = 1 << 7, /* settings changed (user-configure) */
};

/* Records changed in place that an outcome lists one by one; past it, "all". */
#define RX_OUTCOME_PLACES 8

struct rx_outcome {
    enum rx_verdict verdict;
    enum rx_reason reason; /* RX_REASON_NONE unless rejected */
    const char *field;     /* for RX_REASON_INVALID: the offending field */
    unsigned changed;      /* RX_CHANGED_* on RX_ACCEPTED */
    size_t index;          /* first touched record of the changed list */
    /* Records appended at the end of each list. */
    size_t user_added, assistant_added, tools_added;
    /* Positions changed in place; a count above RX_OUTCOME_PLACES means
       "too many to list": the whole list should be taken as changed. */
    size_t assistant_at[RX_OUTCOME_PLACES], n_assistant_at;
    size_t tools_at[RX_OUTCOME_PLACES], n_tools_at;
};

/*
 * Apply `in` to `s`. Returns 0 with `out` filled (accepted, unchanged or
 * rejected), or -ENOMEM with the state untouched.
 */
int rx_machine_apply(struct rx_state *s, const struct rx_input *in,
                     struct rx_outcome *out) RX_WUR;

const char *rx_reason_name(enum rx_reason r);
const char *rx_verdict_name(enum rx_verdict v);

#endif
