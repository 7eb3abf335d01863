/*
 * idgen - fresh random ids (libuuid), the one generator of the process: the
 * server's session and message ids, the effects' call ids, and the ids the
 * library's add_messages gives to id-less messages by default.
 *
 * Part of base/. Depends on libuuid and state_machine/rx_common.h only;
 * never on graph/, effects/ or server/. The pure layer never makes ids: the
 * server assigns them before an input reaches the machine, so replay is
 * exact; the library's reducers take an injectable generator (struct
 * rx_reducer_ids) for callers that must be deterministic.
 * Ownership: `out` is the caller's buffer.
 */
#ifndef IDGEN_H
#define IDGEN_H

#include "state_machine/rx_common.h"

/* Write a new random UUID, lower-case text and its NUL, into out. Cannot fail. */
void idgen_uuid(char out[RX_UUID_LEN]);

#endif
