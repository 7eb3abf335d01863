/*
 * rx_context - the conversation handed to a brain (SPEC 3.5), as an
 * OpenAI-style `messages` array.
 *
 * Pure: no I/O, clock, threads or globals.
 * Shape: system prompt first; then, if a summary is set, a user message
 * "[Previous conversation summary]\n<summary>"; then, if older unloaded tool
 * calls exist, a system message listing them by id and name; then user
 * messages, completed or stopped assistant messages with content, and tool
 * calls with their results after summaryCutAt (plus loaded records), stable-
 * sorted by time (ties: user, assistant, tools). The calls of one
 * brain-call-tools (same calledAt) form one assistant message with all of them,
 * each followed by a "tool" message with its result ("Error: <error>" for
 * failures); a pending call has no result message.
 * Ownership: rx_context_build returns a NEW reference in *out.
 */
#ifndef RX_CONTEXT_H
#define RX_CONTEXT_H

#include <jansson.h>

#include "state_machine/rx_state.h"
#include "state_machine/rx_common.h"

#define RX_CONTEXT_SUMMARY_PREFIX "[Previous conversation summary]\n"

/*
 * Build the messages for an ask that sees signals up to `signals_cut_at`
 * (items later than it are left out; pass INT64_MAX for everything).
 * `system_prompt` may be NULL or "" for none. 0 or -ENOMEM.
 */
int rx_context_build(const struct rx_state *s, const char *system_prompt,
                     int64_t signals_cut_at, json_t **out) RX_WUR;

#endif
