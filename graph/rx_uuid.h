/*
 * rx_uuid - fresh random ids (libuuid) for the library in graph/: the ids
 * add_messages and patch_by_id give to id-less messages by default.
 *
 * Depends on libuuid and state_machine/rx_common.h only; effects/ and
 * server/ have their own generator (effects/idgen), which graph/ must not
 * include. Randomness is the only thing here that is not pure; callers that
 * must be deterministic (tests, replay) take their ids from elsewhere, as
 * the reducers' injectable generator (struct rx_reducer_ids) does.
 * Ownership: `out` is the caller's buffer.
 */
#ifndef RX_UUID_H
#define RX_UUID_H

#include "state_machine/rx_common.h"

/* Write a new random UUID, lower-case text and its NUL, into out. Cannot fail. */
void rx_uuid_new(char out[RX_UUID_LEN]);

#endif
