/*
 * brain_builtin - the embedded, deterministic `builtin` brain (SPEC 5), so the
 * server runs with no LLM and no network, and every input type gets exercised.
 *
 * Decision (brain_builtin_reply, pure): looking at the conversation after the
 * last user message,
 *  1. if tool calls follow it, answer in text from their results:
 *     "2+3 = 5", "The time is 2025-01-02T03:04:05.678Z.",
 *     "The calculator said: Error: division by zero";
 *  2. else if the message is arithmetic ("what is 2+3?", "12*(3+4)",
 *     "calculate 7/0"), call `calculator` with the expression;
 *  3. else if it asks for the time or date ("what time is it", "date",
 *     "clock"), call `clock`;
 *  4. else echo it as BRAIN_BUILTIN_ECHO_PREFIX + the text ("Echo: hello"),
 *     like the seed's EchoAgent.
 * Tool call ids are deterministic and unique per conversation:
 * "call-<number of messages>-<hash of the conversation>" (the prefix is
 * configurable in the brain).
 *
 * The struct brain (brain_builtin_create) runs one ask: compress history when
 * it is long (brain-compress-history), build the context (rx_context_build),
 * decide, then either dispatch brain-call-tools, or stream the answer:
 * brain-send-message-start (skipped when resuming ask->resume_message_id),
 * chunks of a few UTF-8 characters with a pause between them, and
 * brain-send-message-complete with the whole text. Every input carries
 * calledBrainAt = ask->signals_cut_at. Failures end the ask with a complete
 * "[Error] ..." message when possible. A user message starting with "/slow"
 * streams at least BRAIN_BUILTIN_SLOW_FACTOR times slower, so a stop can be
 * tried by hand.
 *
 * Depends on effects/brain.h, effects/calculator (nothing else of effects/),
 * state_machine/ and jansson.
 * Ownership: brain_builtin_reply borrows `messages` and returns a NEW reference
 * in *reply. The brain copies its config; free it with brain->destroy().
 */
#ifndef BRAIN_BUILTIN_H
#define BRAIN_BUILTIN_H

#include <jansson.h>

#include "effects/brain.h"
#include "state_machine/rx_common.h"

#define BRAIN_BUILTIN_ECHO_PREFIX "Echo: "
/* Longest summary the brain writes; older parts are dropped first. */
#define BRAIN_BUILTIN_SUMMARY_MAX 1024
/* Delay multiplier of a "/slow" message. */
#define BRAIN_BUILTIN_SLOW_FACTOR 50
/* Longest pause between chunks, whatever the factors say. */
#define BRAIN_BUILTIN_DELAY_MAX_MS 60000
/* Longest call_id_prefix (ids must fit RX_ID_MAX). */
#define BRAIN_BUILTIN_PREFIX_MAX 32

struct brain_builtin_config {
    int chunk_chars;    /* UTF-8 characters per streamed chunk; < 1 means 1 */
    int chunk_delay_ms; /* pause between chunks; < 0 means 0 */
    int slow_factor; /* multiplies the pause (a slow brain, to test stop); < 1 means 1 */
    int compress_after; /* compress when more records than this follow summaryCutAt;
                           0 never */
    int compress_keep;  /* newest records kept out of a compression; < 1 means 1 */
    const char *call_id_prefix; /* tool call ids start with it; NULL: "call" */
};

/* The defaults: 4 characters, 30 ms, factor 1, compress after 40 keeping 6. */
void brain_builtin_config_init(struct brain_builtin_config *cfg);

/*
 * Decide the reply to an OpenAI-style `messages` array (borrowed): roles
 * system / user / assistant (content and/or tool_calls [{id, function: {name,
 * arguments}}]) / tool (tool_call_id, content). 0 and *reply, a NEW reference
 * to {"content": "..."} or {"tool_calls": [{"id", "name", "arguments"}]}
 * (arguments a JSON text); -EINVAL when messages is not an array; -ENOMEM.
 */
int brain_builtin_reply(json_t *messages, json_t **reply) RX_WUR;

/*
 * A builtin brain with `cfg` (copied; NULL for the defaults), or NULL when out
 * of memory or when cfg->call_id_prefix is longer than BRAIN_BUILTIN_PREFIX_MAX.
 */
struct brain *brain_builtin_create(const struct brain_builtin_config *cfg) RX_WUR;

#endif
