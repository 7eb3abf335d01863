/*
 * rx_state_delta - the difference between two JSON states (objects), as the
 * SQLite checkpointer stores it: {"s": {key: value}} for keys whose value
 * changed, {"a": {key: [items]}} for lists that only grew at the end (the
 * new items alone: add_messages and append keys), {"d": [key]} for keys
 * removed; parts with nothing in them are left out, so an unchanged state
 * is {}.
 *
 * Depends on jansson only; pure (no I/O, clock, threads or globals).
 * Ownership: prev, now and d are borrowed; make returns a new reference
 * whose values are shared with `now`; apply changes `state` (which must be
 * the caller's own object) in place, sharing values with d, and builds new
 * lists for grown keys instead of changing the old ones.
 */
#ifndef RX_STATE_DELTA_H
#define RX_STATE_DELTA_H

#include <jansson.h>

#include "state_machine/rx_common.h"

/* The difference of `now` from `prev` (NULL: from nothing), or NULL (no memory). */
json_t *rx_state_delta_make(json_t *prev, json_t *now) RX_WUR;

/*
 * Apply d to state. 0, -EBADMSG (d is not a delta, or grows a key that is
 * not a list: a corrupt row), -ENOMEM; state may then be partly changed.
 */
int rx_state_delta_apply(json_t *state, json_t *d) RX_WUR;

#endif
