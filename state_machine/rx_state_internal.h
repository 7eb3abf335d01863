/*
 * rx_state_internal - what state_machine/rx_state.c (records, copies,
 * invariants) and state_machine/rx_state_json.c (encoding, decoding) share,
 * and nothing else may see.
 *
 * Pure, like rx_state. Depends on rx_state only.
 * Ownership: as in rx_state.h; the release helpers free a record's strings,
 * not the record.
 */
#ifndef RX_STATE_INTERNAL_H
#define RX_STATE_INTERNAL_H

#include "state_machine/rx_state.h"

/* Free the strings of one record (and its cached encoding). */
void rx_state__message_release(struct rx_message *m);
void rx_state__tool_call_release(struct rx_tool_call *c);
/* Build every derived aid from the records (after decode or copy). 0 or -ENOMEM. */
int rx_state__derive(struct rx_state *s) RX_WUR;

#endif
