/*
 * rx_patch - the change a transition made, as an RFC 6902 JSON Patch.
 *
 * Pure: no I/O. Depends on rx_machine (the outcome), rx_state and rx_buf
 * only. Built from the new state and the transition's rx_outcome, never by
 * diffing, so a patch costs the size of the change, not of the history.
 * Applying it to the JSON of the state before the input gives the JSON of
 * the state after it (the tests check exactly that).
 * Ownership: the state and outcome are borrowed; bytes go to the caller's buffer.
 */
#ifndef RX_PATCH_H
#define RX_PATCH_H

#include "state_machine/rx_buf.h"
#include "state_machine/rx_machine.h"
#include "state_machine/rx_state.h"
#include "state_machine/rx_common.h"

/*
 * Append the patch of an accepted transition (`o`, `after` the state it
 * produced) as a compact JSON array. 0, -ENOMEM or -E2BIG (buffer as it was).
 */
int rx_patch_encode(const struct rx_state *after, const struct rx_outcome *o,
                    struct rx_buf *b) RX_WUR;

#endif
