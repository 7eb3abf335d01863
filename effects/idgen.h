/*
 * idgen - fresh random ids (libuuid) for the server and its effects.
 *
 * The pure layer never makes ids: the server assigns them (message ids,
 * session ids) before an input reaches the machine, so replay is exact.
 * The library in graph/ has its own injectable generator (rx_uuid).
 */
#ifndef IDGEN_H
#define IDGEN_H

#include "state_machine/rx_common.h"

/* A new random UUID in lower-case text form. */
void idgen_uuid(char out[RX_UUID_LEN]);

#endif
