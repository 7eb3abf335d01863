/*
 * rx_machine - the Reflexor transition (SPEC 3.2): validate an input against
 * the state, build a partial update, merge it through the per-key reducers.
 *
 * Pure: no I/O, clock, threads or globals; nothing from server/ or effects/.
 * Atomic: every allocation happens while the update is built; the merge that
 * follows cannot fail. So a rejected input, an unchanged one and an -ENOMEM
 * all leave the state byte-for-byte as it was.
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
    X(INVALID, "invalid")

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
    RX_CHANGED_MANY = 1 << 5, /* user-cancel / compress: several records changed */
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
