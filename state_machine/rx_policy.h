/*
 * rx_policy - tool approval (SPEC 3.6): the policy of a tool (auto, ask,
 * deny), the approval state of one tool call record, and the per-session map
 * of overrides (`toolPolicies` in the state).
 *
 * Pure: no I/O, clock, threads or globals. Depends on rx_buf, rx_alloc
 * (allocation) and jansson only.
 * rx_state.h includes this header: the enums are part of the state.
 *
 * Invariants of struct rx_policy_map (rx_policy_map_check): entries sorted by
 * tool name (strcmp), strictly, so names are unique; every name non-empty;
 * every policy AUTO, ASK or DENY (an UNSET entry is no entry); len <= cap and
 * len <= RX_POLICIES_MAX.
 * Ownership: struct rx_policy_map is caller-allocated (rx_policy_map_init /
 * _release) and owns its names. Names and enum names returned are borrowed.
 */
#ifndef RX_POLICY_H
#define RX_POLICY_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "state_machine/rx_buf.h"
#include "state_machine/rx_common.h"

/* What happens to a call of a tool. UNSET: no override (a stamp never holds it
   for a real call; a call stamped UNSET, as in logs older than approvals,
   behaves as AUTO). */
enum rx_policy { RX_POLICY_UNSET = 0, RX_POLICY_AUTO, RX_POLICY_ASK, RX_POLICY_DENY };

/*
 * Where a call stands with a person. NONE: no approval was needed ("approval"
 * absent on the wire). PENDING: waits for a review (SPEC 3.6). IN_DOUBT: it
 * started, a restart or takeover cut it off before its result, and its tool
 * is not safe to repeat, so it waits for a person too (SPEC 3.7). RESOLVED:
 * the person gave the result of a call in doubt. PENDING and IN_DOUBT are the
 * two that wait (rx_approval_is_awaiting).
 */
enum rx_approval {
    RX_APPROVAL_NONE = 0,
    RX_APPROVAL_PENDING,
    RX_APPROVAL_APPROVED,
    RX_APPROVAL_REJECTED,
    RX_APPROVAL_IN_DOUBT,
    RX_APPROVAL_RESOLVED
};

/* Most overrides one session keeps: a new tool past it is refused. */
#define RX_POLICIES_MAX 256

/* "auto", "ask", "deny"; NULL for UNSET (or out of range). */
const char *rx_policy_name(enum rx_policy p);
/* 0 and *out (never UNSET), or -EINVAL for anything else, NULL included. */
int rx_policy_parse(const char *s, enum rx_policy *out) RX_WUR;
/* "pending", "approved", "rejected", "in-doubt", "resolved"; NULL for NONE (or
   out of range). */
const char *rx_approval_name(enum rx_approval a);
/* 0 and *out (never NONE), or -EINVAL for anything else, NULL included. */
int rx_approval_parse(const char *s, enum rx_approval *out) RX_WUR;
/* True for the approvals that wait for a person: PENDING and IN_DOUBT. */
bool rx_approval_is_awaiting(enum rx_approval a);

struct rx_tool_policy {
    char *tool;
    enum rx_policy policy;
};

struct rx_policy_map {
    struct rx_tool_policy *items;
    size_t len, cap;
};

void rx_policy_map_init(struct rx_policy_map *m);
void rx_policy_map_release(struct rx_policy_map *m);
/* The override for `tool`, or RX_POLICY_UNSET. O(log n). */
enum rx_policy rx_policy_map_get(const struct rx_policy_map *m, const char *tool);
/* Room for `extra` more entries without allocating. 0 or -ENOMEM (unchanged). */
int rx_policy_map_reserve(struct rx_policy_map *m, size_t extra) RX_WUR;
/*
 * Set the override of *tool to `p`; RX_POLICY_UNSET removes it. Cannot fail:
 * a new entry needs room reserved before. A new entry takes the string *tool
 * (allocated with rx_alloc) and sets *tool = NULL; otherwise *tool stays the
 * caller's. Returns true when the map changed.
 */
bool rx_policy_map_put(struct rx_policy_map *m, char **tool, enum rx_policy p);
/* Deep copy into dst (initialised here). 0, or -ENOMEM with dst empty. */
int rx_policy_map_copy(const struct rx_policy_map *src, struct rx_policy_map *dst) RX_WUR;
/* Append {"tool":"policy",...} in name order. 0, -ENOMEM or -E2BIG (b as it was). */
int rx_policy_map_encode(const struct rx_policy_map *m, struct rx_buf *b) RX_WUR;
/*
 * Fill an empty map from `json` (borrowed): NULL (absent) or null gives an
 * empty map; else an object of "auto"/"ask"/"deny" strings with non-empty
 * names, at most RX_POLICIES_MAX. 0, -EINVAL (err names "toolPolicies") or
 * -ENOMEM; on failure the map is released.
 */
int rx_policy_map_decode(json_t *json, struct rx_policy_map *m,
                         struct rx_error *err) RX_WUR;
/* True when the invariants above hold. */
bool rx_policy_map_check(const struct rx_policy_map *m);

#endif
