/*
 * lg_msg - the LangGraph protocol's view of a session (SPEC 4.3), pure:
 * a state as thread values {"messages": [...]} in LangChain's message
 * format, its tool calls awaiting approval as one interrupt in
 * agent-chat-ui's shape (HITLRequest), token deltas as message chunks, and
 * a run's input or `command.resume` as machine inputs.
 *
 * Messages, in conversation order (server/protocols/timeline):
 *   user message       {"type":"human","content","id",...}
 *   assistant message  {"type":"ai","content","id","tool_calls":[],
 *                       "response_metadata":{"status":"complete"|"stopped"},
 *                       "usage_metadata":{...}|null,...}; a streaming one is
 *                       left out (values show what a step settled; its tokens
 *                       come as chunks)
 *   tool-call batch    {"type":"ai","content":"","id":"ai-tools-<first call id>",
 *                       "tool_calls":[{"name","args","id","type":"tool_call"}]}
 *   each answered call {"type":"tool","content","tool_call_id","name",
 *                       "id":"tool-result-<call id>","status":"success"|"error"}
 * Interrupt (records awaiting approval, in record order):
 *   {"value":{"action_requests":[{"name","args","description"}],
 *             "review_configs":[{"action_name","allowed_decisions":[...]}]},
 *    "id":"interrupt-<first call id>"}
 *
 * Depends on state_machine/ and server/protocols/timeline (pure) and jansson; no I/O,
 * clock, locks or MHD.
 * Ownership: states and JSON arguments are borrowed; every json_t returned is
 * a NEW reference (NULL on ENOMEM); strings handed out are malloc'd (free).
 */
#ifndef LG_MSG_H
#define LG_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "state_machine/rx_buf.h"
#include "state_machine/rx_common.h"
#include "state_machine/rx_input.h"
#include "state_machine/rx_state.h"

/* The one graph and assistant the server offers (uuid5 of the graph id, as
   LangGraph names a graph's default assistant). */
#define LG_GRAPH_ID     "agent"
#define LG_ASSISTANT_ID "fe096781-5601-53d2-b2f6-0d3403f7e9ca"

/* "2025-01-31T12:00:00.000Z" and the NUL. */
#define LG_ISO_LEN 32
/* `ms` since the epoch as ISO 8601 UTC with milliseconds. */
void lg_msg_iso(int64_t ms, char out[LG_ISO_LEN]);

/* NEW: the messages of `st` (see above). */
json_t *lg_msg_messages(const struct rx_state *st);
/* NEW: [{"value","id"}]: one interrupt when a call awaits approval, else []. */
json_t *lg_msg_interrupts(const struct rx_state *st);
/* NEW: {"messages":[...]}, with "__interrupt__" when `interrupt` and one is pending. */
json_t *lg_msg_values(const struct rx_state *st, bool interrupt);
/* The interrupt's task id ("task-<first call id>"), or NULL when none awaits. */
int lg_msg_task_id(const struct rx_state *st, char **out) RX_WUR;

/*
 * Append one AIMessageChunk of assistant message `mid` as JSON to `b`: `delta`
 * as its content, or with `reasoning` as additional_kwargs.reasoning_content
 * (content ""). Written directly (one per token: no JSON tree). 0, -ENOMEM or
 * -E2BIG (b unchanged).
 */
int lg_msg_chunk_encode(struct rx_buf *b, const char *mid, const char *delta,
                        bool reasoning) RX_WUR;

/*
 * A run's `input` (borrowed): {"messages":[...]}, each message an object with
 * "type" or "role" (human/user, ai/assistant, system, tool...), a string, or a
 * [role, content] pair; content a string or text parts. The last message must
 * be a human one: its text (parts joined) goes to *text and its "id", when it
 * is a plain id (RX_ID_MAX), to *id (else NULL); earlier messages are the
 * client's copy of the thread and are not posted again. 0; -EINVAL with `err`
 * saying why (missing or malformed messages, a wrong role, blank text);
 * -ENOMEM. Outputs are set only on success.
 */
int lg_msg_parse_input(json_t *input, char **text, char **id,
                       struct rx_error *err) RX_WUR;
/* 0 and a user-send-message input in `in` (moved-in strings are copied). */
int lg_msg_user_input(const char *text, const char *id, struct rx_input *in) RX_WUR;

/*
 * A run's `command` (borrowed) against `st`: command.resume answers the
 * interrupt. Accepted: {"decisions":[...]}, {<interrupt id>: {"decisions":
 * [...]}}, or the decisions array itself; a decision is {"type":"approve"},
 * {"type":"edit","edited_action":{"name","args":{...}}} or {"type":"reject",
 * "message"?}, or agent-inbox's {"type":"accept"|"edit"|"ignore"|"response",
 * "args"}. One user-review-tool-call per call awaiting approval, in record
 * order. 0 and *out (malloc'd array of *n inputs: the caller moves them into
 * run_start, then frees the array); -ENOENT (nothing awaits approval);
 * -EINVAL with `err` (not a command with resume, a wrong count or shape);
 * -ENOMEM.
 */
int lg_msg_parse_resume(json_t *command, const struct rx_state *st, struct rx_input **out,
                        size_t *n, struct rx_error *err) RX_WUR;
/*
 * One decision (borrowed, a decision of command.resume's shapes) on the one
 * call `c` awaiting a person: the user-review-tool-call input in *in. For
 * protocols that answer calls one at a time (A2A). 0; -EINVAL with `err`;
 * -ENOMEM.
 */
int lg_msg_review_one(json_t *decision, const struct rx_tool_call *c, struct rx_input *in,
                      struct rx_error *err) RX_WUR;

#endif
