/*
 * rx_uuid - fresh random ids (libuuid), the one place every layer gets them.
 *
 * Randomness is the only thing here that is not pure; callers that must be
 * deterministic (tests, replay) take their ids from elsewhere, as the
 * reducers' injectable generator does.
 */
#ifndef RX_UUID_H
#define RX_UUID_H

#include "state_machine/rx_common.h"

/* A new random UUID in lower-case text form. */
void rx_uuid_new(char out[RX_UUID_LEN]);

#endif
