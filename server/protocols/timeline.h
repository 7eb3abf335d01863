/*
 * timeline - a session's records in conversation order, as the client
 * protocols show them (server/protocols/oai, server/protocols/lg): user messages,
 * assistant messages and the tool calls of one brain-call-tools (same calledAt) as one
 * item, by time; ties: user, assistant, tools (rx_context's order).
 *
 * Pure: reads a state, allocates nothing. Depends on state_machine/rx_state
 * only. Unlike rx_context it shows the whole history (no summary cut) and
 * streaming answers too.
 * Ownership: items point into the state (borrowed, valid until its next
 * transition).
 */
#ifndef TIMELINE_H
#define TIMELINE_H

#include <stdbool.h>
#include <stddef.h>

#include "state_machine/rx_state.h"

/* Where a walk is: the next record of each list. {0,0,0} is the beginning. */
struct timeline_pos {
    size_t user, assistant, tools;
};

enum timeline_kind { TIMELINE_USER, TIMELINE_ASSISTANT, TIMELINE_TOOLS };

struct timeline_item {
    enum timeline_kind kind;
    const struct rx_message *msg;     /* USER, ASSISTANT */
    const struct rx_tool_call *calls; /* TOOLS: n_calls calls of one batch */
    size_t n_calls;
};

/* The end of `st` now: a walk from here sees only what comes later. */
struct timeline_pos timeline_end(const struct rx_state *st);
/* The next item after `pos` (advanced past it); false at the end. */
bool timeline_next(const struct rx_state *st, struct timeline_pos *pos,
                   struct timeline_item *it);

#endif
