/*
 * builtin_reply - what the builtin brain says (SPEC 5): its answers, its tool
 * calls and its summaries, decided from the conversation alone.
 *
 * Decision (builtin_reply_decide): looking at the conversation after the last
 * user message (the summary rx_context puts first is not one),
 *  1. if tool calls follow it, answer in text from their results:
 *     "2+3 = 5", "The time is 2025-01-02T03:04:05.678Z.",
 *     "The calculator said: Error: division by zero",
 *     "Tool 'weather' returned: sunny";
 *  2. else if the message is "/call <tool> <JSON arguments>", call that tool
 *     (any tool, MCP included) with the arguments as written, blank meaning
 *     {}; a /call without a tool name is answered with BUILTIN_REPLY_CALL_USAGE;
 *  3. else if the message is arithmetic ("what is 2+3?", "12*(3+4)",
 *     "calculate 7/0"), call `calculator` with the expression;
 *  4. else if it asks for the time or date ("what time is it", "date",
 *     "clock"), call `clock`;
 *  5. else echo it as BUILTIN_REPLY_ECHO_PREFIX + the text ("Echo: hello"),
 *     like the seed's EchoAgent; with no user message at all, a greeting.
 * Tool call ids are deterministic and unique per conversation:
 * "<prefix>-<number of messages>-<hash of the conversation>".
 *
 * Pure: no I/O, clock, threads or globals (the effect that streams the answer
 * is brain_builtin). Depends on jansson, state_machine/ and the bounds of
 * effects/calculator.h; nothing else of effects/ and nothing from server/.
 * Ownership: builtin_reply_decide borrows `messages` and returns a NEW
 * reference in *reply; builtin_reply_summary borrows the state (an ask's
 * view, rx_context_view: it reads every record it is given) and returns a
 * malloc'd text in *out, the caller's to free(3).
 */
#ifndef BUILTIN_REPLY_H
#define BUILTIN_REPLY_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "state_machine/rx_common.h"
#include "state_machine/rx_state.h"

#define BUILTIN_REPLY_ECHO_PREFIX "Echo: "
#define BUILTIN_REPLY_CALL_USAGE                                                         \
    "Usage: /call <tool> <JSON arguments>, e.g. /call calculator "                       \
    "{\"expression\":\"2+3\"}"
/* Longest tool name a /call takes (the OpenAI limit). */
#define BUILTIN_REPLY_TOOL_NAME_MAX 64
/* Longest summary builtin_reply_summary writes; older parts are dropped first. */
#define BUILTIN_REPLY_SUMMARY_MAX 1024

/*
 * Decide the reply to an OpenAI-style `messages` array (borrowed): roles
 * system / user / assistant (content and/or tool_calls [{id, function: {name,
 * arguments}}]) / tool (tool_call_id, content). Tool call ids start with
 * `prefix` (NULL: "call"). 0 and *reply, a NEW reference to
 * {"content": "..."} or {"tool_calls": [{"id", "name", "arguments"}]}
 * (arguments a JSON text); -EINVAL when messages is not an array, -ENOMEM;
 * *reply is unchanged on failure.
 */
int builtin_reply_decide(json_t *messages, const char *prefix, json_t **reply) RX_WUR;

/*
 * The summary for a brain-compress-history up to `cut`: the state's summary
 * plus one line counting the user messages, answers and tool calls in
 * (summaryCutAt, cut] and quoting the last few user texts; at most
 * BUILTIN_REPLY_SUMMARY_MAX bytes, the oldest lines dropped first. 0 and *out
 * (malloc'd), or -ENOMEM with *out unchanged.
 */
int builtin_reply_summary(const struct rx_state *s, int64_t cut, char **out) RX_WUR;

/* Bytes of the first `chars` UTF-8 characters of s: a chunk never splits one. */
size_t builtin_reply_chunk_len(const char *s, size_t chars);

#endif
