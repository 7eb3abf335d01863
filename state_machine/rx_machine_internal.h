/*
 * rx_machine_internal - what state_machine/rx_machine.c (the transition, the
 * reducers) and state_machine/rx_machine_tools.c (tool calls and their
 * approval, SPEC 3.6) share, and nothing else may see: the partial update an
 * input builds in phase 1 and the merge folds in phase 2 (rx_machine.c).
 *
 * Pure, like rx_machine. Depends on rx_machine, rx_input and rx_state only.
 * Ownership: a struct update owns every string and array in it until the
 * merge moves them into the state (setting the update's pointer to NULL);
 * update_release (rx_machine.c) frees the rest.
 * The prep functions may grow a list's capacity (never its contents) and
 * fill `u`; on -ENOMEM or a verdict other than accepted the caller releases u.
 */
#ifndef RX_MACHINE_INTERNAL_H
#define RX_MACHINE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "state_machine/rx_input.h"
#include "state_machine/rx_machine.h"
#include "state_machine/rx_state.h"

struct verdict {
    enum rx_verdict verdict;
    enum rx_reason reason;
    const char *field;
};

#define ACCEPT     ((struct verdict){RX_ACCEPTED, RX_REASON_NONE, NULL})
#define UNCHANGED  ((struct verdict){RX_UNCHANGED, RX_REASON_NONE, NULL})
#define REJECT(r)  ((struct verdict){RX_REJECTED, RX_REASON_##r, NULL})
#define INVALID(f) ((struct verdict){RX_REJECTED, RX_REASON_INVALID, f})

/* One record change of a list: replace records[index], or append when index == len. */
struct message_put {
    size_t index;
    struct rx_message msg;
};

/* patch_by_id for toolCallRecords[index]: only the fields it names change. */
struct tool_patch {
    size_t index;
    bool set_result;
    struct rx_tool_result result;
    bool set_loaded;
    bool is_loaded;
    bool set_approval;
    enum rx_approval approval;
    bool set_started;
    int64_t started_at;
    char *parameters; /* non-NULL: replaces the record's parameters */
};

struct update {
    int64_t updated_at;
    bool has_called_brain_at;
    int64_t called_brain_at;
    bool has_user;
    struct rx_message user; /* appended */
    struct message_put *assistant;
    size_t n_assistant;
    struct rx_tool_call *new_tools;
    size_t n_new_tools;
    struct tool_patch *tool_patches;
    size_t n_tool_patches;
    char *summary; /* non-NULL: replaces contextSummary, with cut_at */
    int64_t cut_at;
    /* non-NULL: toolPolicies[policy_tool] = policy (UNSET removes); room for a
       new entry is reserved */
    char *policy_tool;
    enum rx_policy policy;
    /* has_settings: `settings` (owned) replaces the state's */
    bool has_settings;
    struct rx_settings settings;
};

/* Make room for `extra` more records so the merge phase never allocates. */
int rx_machine__reserve(void **items, size_t len, size_t *cap, size_t extra,
                        size_t size) RX_WUR;

/* The prep functions of rx_machine_tools.c: 0 (with *v set when not
   accepted) or -ENOMEM. */
int rx_machine__prep_call_tools(struct rx_state *s, const struct rx_input *in,
                                struct update *u, struct verdict *v) RX_WUR;
int rx_machine__prep_review(struct rx_state *s, const struct rx_input *in,
                            struct update *u, struct verdict *v) RX_WUR;
int rx_machine__prep_start_call(struct rx_state *s, const struct rx_input *in,
                                struct update *u, struct verdict *v) RX_WUR;
int rx_machine__prep_in_doubt(struct rx_state *s, const struct rx_input *in,
                              struct update *u, struct verdict *v) RX_WUR;
int rx_machine__prep_set_policy(struct rx_state *s, const struct rx_input *in,
                                struct update *u, struct verdict *v) RX_WUR;
/*
 * A new user message: every record awaiting a person gets approval REJECTED
 * and the error result "not approved: the user sent a new message" (awaiting
 * approval) or "not run again after an interruption" (in doubt). Sets
 * u->tool_patches (which must be unset). 0 or -ENOMEM.
 */
int rx_machine__reject_awaiting(const struct rx_state *s, const struct rx_input *in,
                                struct update *u) RX_WUR;

#endif
