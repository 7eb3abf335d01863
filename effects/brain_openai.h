/*
 * brain_openai - the `openai` brain: any OpenAI-compatible Chat Completions
 * endpoint (OpenAI, Ollama, llama.cpp server, vLLM, LM Studio, OpenRouter)
 * over libcurl, streamed.
 *
 * One ask:
 *  1. copies the ask's view (ask->view: what follows summaryCutAt and the
 *     newest older tool calls, never the whole session);
 *  2. when the compression policy of rx_context says so (the history's
 *     estimated tokens over `context_budget`, the newest `keep_recent` items
 *     kept), asks the model for a summary of what is before the policy's cut
 *     (with tool_choice "none") and dispatches brain-compress-history
 *     {summary, cutAt}; the answer is then built from the compressed copy;
 *  3. POSTs {base_url}/chat/completions with "stream": true and
 *     stream_options.include_usage, and relays every content delta through
 *     ask->chunk and every reasoning delta (reasoning_content) through
 *     ask->reasoning: the first text or reasoning dispatches
 *     brain-send-message-start (or reuses ask->resume_message_id), the end
 *     brain-send-message-complete with the whole text, its reasoning, the
 *     usage the provider reported (prompt_tokens and completion_tokens of
 *     the answer's requests, summed, as promptTokens/completionTokens) and
 *     firstTokenAt (now_wall_ms() when its first text or reasoning came);
 *     tool calls then go out as one brain-call-tools (ids from the provider,
 *     or generated);
 *  4. a call of the extra `load_tool_call` function (offered only while the
 *     context lists older unloaded calls) dispatches brain-load-tool-call for
 *     a listed id and asks again with the record loaded; text of that reply
 *     continues the same message.
 * Every request uses the session's settings (view->settings, SPEC 3.2
 * user-configure): its model and temperature over the configured ones; its
 * system prompt comes resolved in ask->system_prompt.
 * The inputs a brain dispatches are applied to the ask's own copy of the view
 * through rx_machine, so each follow-up request sees what the session sees.
 * A provider's tool call id is used when neither the view nor the session
 * (ask->tool_exists) has it, else one is generated.
 * Failures end the answer as "[Error] <why>" (the transfer's retries, stall
 * and cancel rules are effects/openai_http's); text already streamed is kept,
 * the error appended. A summary that cannot be had is not an error: the
 * answer goes ahead on the whole context. A cancelled ask returns -ECANCELED
 * and dispatches nothing more.
 *
 * Depends on effects/brain (the interface it implements), openai_config (the
 * config), openai_http (the transfer: curl_global_init must have been called
 * once, before any thread starts), openai_stream, toolkit, log, base/idgen,
 * base/now, state_machine/ and jansson; nothing from server/.
 * Threads: one brain may run any number of asks concurrently.
 * Ownership: the config json_t given to brain_openai_create is borrowed (the
 * brain keeps copies of what it needs); `tools` is borrowed and must outlive
 * the brain; `err` is the caller's. brain->destroy() frees the brain.
 */
#ifndef BRAIN_OPENAI_H
#define BRAIN_OPENAI_H

#include <stdbool.h>

#include <jansson.h>

#include "effects/brain.h"
#include "state_machine/rx_common.h"

/* The function offered to load an older tool call back into the context. */
#define BRAIN_OPENAI_LOAD_TOOL "load_tool_call"

/*
 * Create the brain from its config object (borrowed; NULL means {}):
 *   base_url            "https://api.openai.com/v1"
 *   model               "gpt-4o-mini"
 *   api_key             literal key; or
 *   api_key_env         name of the variable holding it ("OPENAI_API_KEY");
 *                       no key: no Authorization header (local servers)
 *   temperature         number, sent when given
 *   max_tokens          integer > 0, sent when given
 *   connect_timeout_ms  10000
 *   stall_timeout_ms    60000   longest silence between bytes of a reply
 *   timeout_ms          600000  whole request; 0 = none
 *   retries             2       retries after the first attempt (0..10)
 *   backoff_ms          500     first retry delay, doubled each time
 *   backoff_max_ms      30000   (also caps a 429's Retry-After)
 *   context_budget      0       estimated tokens of the history (its texts'
 *                               bytes / 4, rx_context_length) past which
 *                               older history is summarised; 0 = never
 *   keep_recent         4       newest items never summarised
 * The environment overrides: REFLEXOR_LLM_BASE_URL (base_url) and
 * REFLEXOR_LLM_MODEL (model). Unknown fields are ignored.
 * Returns the brain, or NULL with `err` (may be NULL) a one-line message
 * naming the field, e.g.
 *   "brain.openai.stall_timeout_ms: must be an integer from 1 to 86400000".
 */
struct brain *brain_openai_create(json_t *config, const struct toolkit *tools,
                                  struct rx_error *err) RX_WUR;

/*
 * Whether the environment asks for this brain: OPENAI_API_KEY or
 * REFLEXOR_LLM_BASE_URL is set and not empty.
 */
bool brain_openai_env_selected(void);

#endif
