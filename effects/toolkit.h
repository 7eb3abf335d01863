/*
 * toolkit - the tools a brain may call: the registry of name, description and
 * JSON-Schema `parameters` (what LLM APIs take), their config, the check of a
 * call's arguments against the schema, and the dispatch to the code that runs
 * each kind of tool:
 *  - built-in: `calculator` {"expression": string} (effects/calculator, no
 *    shell, no eval) and `clock` (effects/toolkit_clock);
 *  - MCP tools (effects/mcp_hub): those of the configured MCP servers, named
 *    `<server>__<tool>`, present while their server lists them;
 *  - command tools from the config (effects/toolkit_command): the program in
 *    `command` with the arguments JSON on its stdin, its stdout the result;
 *    when it ends, times out or is cancelled, the program and every process
 *    it started (also those that left its group or session) are killed and
 *    reaped, and every descriptor closed, before toolkit_call returns.
 *
 * Results and errors are valid UTF-8 (invalid bytes become U+FFFD), so they
 * can go into inputs and JSON as they are (effects/toolkit_result).
 *
 * Every result, of any tool, is cut at `result_max` bytes (default
 * TOOLKIT_RESULT_MAX_DEFAULT) with a note saying how much was left out.
 *
 * Split in three: toolkit.c (registry, MCP, calls), toolkit_config.c (the
 * config's `tools`), toolkit_internal.h (the registry they share).
 * Depends on effects/calculator, toolkit_clock, toolkit_command,
 * toolkit_result, mcp_hub, state_machine/rx_buf (the metrics' text) and
 * jansson; nothing from server/.
 * Threads: set the toolkit up (toolkit_add_*, toolkit_set_result_max)
 * before sharing it; after that its own tools are read-only, the MCP part
 * has its own lock, and any number of toolkit_call()s may run concurrently
 * with one toolkit_reload_mcp.
 * Ownership: struct toolkit is a heap object (toolkit_create/_destroy). It
 * keeps its own copies of everything it is given: the json_t passed to
 * toolkit_add_from_config is borrowed. toolkit_schemas returns a NEW
 * reference. toolkit_call's *result is malloc'd and the caller's to free(3).
 */
#ifndef TOOLKIT_H
#define TOOLKIT_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>
#include "state_machine/rx_buf.h"
#include "state_machine/rx_common.h"

/* Defaults and bounds of a command tool's `timeout_ms`. */
#define TOOLKIT_TIMEOUT_DEFAULT_MS 5000
#define TOOLKIT_TIMEOUT_MAX_MS     (3600 * 1000)
/* Defaults and bounds of a command tool's stdout (`max_output_bytes`). */
#define TOOLKIT_OUTPUT_DEFAULT (64u << 10)
#define TOOLKIT_OUTPUT_MAX     (16u << 20)
/* Longest `params_json` accepted by toolkit_call. */
#define TOOLKIT_PARAMS_MAX (1u << 20)
/* Longest tool name (the OpenAI limit: [A-Za-z0-9_-]{1,64}). */
#define TOOLKIT_NAME_MAX 64
/* Where a result is cut by default (limits.tool_result_max). */
#define TOOLKIT_RESULT_MAX_DEFAULT (64u << 10)

struct toolkit;

/* An empty toolkit, or NULL when out of memory. */
struct toolkit *toolkit_create(void) RX_WUR;
/* Kill nothing (calls must have returned), free everything. NULL is fine. */
void toolkit_destroy(struct toolkit *tk);

/* Add `calculator` and `clock`. 0, -EEXIST (already there) or -ENOMEM. */
int toolkit_add_builtins(struct toolkit *tk) RX_WUR;

/*
 * Add the command tools of a config `tools` array (borrowed), each
 *   {"name": "weather", "description": "...", "parameters": {JSON Schema},
 *    "command": ["/usr/bin/prog", "arg"], "timeout_ms": 5000,
 *    "max_output_bytes": 65536, "approval": "auto"}
 * where description, parameters, timeout_ms, max_output_bytes and approval
 * ("auto", "ask" or "deny") are optional and any other key is an error;
 * NULL adds nothing. An entry that names a built-in tool and has no command,
 * {"name": "calculator", "approval": "ask"}, sets that tool's approval.
 * All or nothing: 0, or
 * -EINVAL / -EEXIST / -ENOMEM with the toolkit unchanged and `err` (may be
 * NULL) a one-line message naming the field, e.g.
 *   "tools[1].command: must be a non-empty array of strings".
 * A command whose path contains '/' must be executable now; a bare name is
 * looked up in PATH when the tool runs.
 */
int toolkit_add_from_config(struct toolkit *tk, json_t *tools,
                            struct rx_error *err) RX_WUR;

/*
 * Connect to the MCP servers of a config `mcpServers` object (borrowed;
 * effects/mcp_config has its shape), in the background: this returns at
 * once, and their tools join as each server comes up. 0, or -EINVAL /
 * -ENOMEM with `err` naming the server and field; -EEXIST when called twice.
 */
int toolkit_add_mcp(struct toolkit *tk, json_t *servers, struct rx_error *err) RX_WUR;
/* Apply a changed `mcpServers` (SIGHUP): as mcp_hub_reload. */
int toolkit_reload_mcp(struct toolkit *tk, json_t *servers, struct rx_error *err) RX_WUR;

/* Cut every result past `max` bytes (> 0). */
void toolkit_set_result_max(struct toolkit *tk, size_t max);
/* The most tools one MCP server may list (limits.mcp_tools_max), for the
   servers started from now on (toolkit_add_mcp, toolkit_reload_mcp). */
void toolkit_set_mcp_tools_max(struct toolkit *tk, size_t max);

/*
 * GET /tools: {"tools": [{"name", "description", "parameters", "source",
 * "policy", "annotations"}], "servers": [{"name", "transport", "status",
 * "error", "tools"}]}. NEW reference or NULL (out of memory).
 */
json_t *toolkit_describe(const struct toolkit *tk) RX_WUR;

/* The "servers" part of toolkit_describe alone (for /healthz, which is
   polled often and needs no tool list). NEW reference or NULL. */
json_t *toolkit_mcp_servers(const struct toolkit *tk) RX_WUR;

/* The MCP servers' metric families, appended to b. 0 or -ENOMEM. */
int toolkit_metrics(const struct toolkit *tk, struct rx_buf *b) RX_WUR;

/*
 * The tool's approval policy from the config (SPEC 3.6): "auto", "ask" or
 * "deny" (a static string): its `approval`, else the default (built-in and
 * command tools auto; MCP tools auto when annotated readOnlyHint, else ask).
 * "auto" for a name no tool has.
 */
const char *toolkit_policy(const struct toolkit *tk, const char *name);

/* Number of tools, and whether `name` is one of them. */
size_t toolkit_count(const struct toolkit *tk);
bool toolkit_has(const struct toolkit *tk, const char *name);

/*
 * The OpenAI `tools` array, in the order the tools were added:
 *   [{"type":"function","function":{"name","description","parameters"}}]
 * A NEW reference, or NULL when out of memory.
 */
json_t *toolkit_schemas(const struct toolkit *tk) RX_WUR;

/*
 * Run tool `name` with `params_json` (a JSON object as text; NULL or blank
 * means {}), under idempotency key `key` (SPEC 3.7: "<session>/<toolCallId>",
 * the same for every run of one call; NULL: none): a command tool gets it
 * in its environment as REFLEXOR_IDEMPOTENCY_KEY, an MCP tools/call in
 * params._meta["io.reflexor/idempotency-key"], the built-ins ignore it.
 * Blocks until the tool ends, fails, times out or is cancelled.
 * `cancel_fd` (or -1) is polled: once it is readable the call stops promptly,
 * killing a command and everything it started.
 * Returns 0 with *result a malloc'd NUL-terminated text and *is_error telling
 * whether it is the tool's result or an error message for a `toolkit-error`
 * (unknown tool, parameters that are not a JSON object or lack a required
 * argument or have the wrong type, a failing command...). Returns -ECANCELED
 * or -ENOMEM with *result and *is_error unchanged.
 */
int toolkit_call(const struct toolkit *tk, const char *name, const char *params_json,
                 const char *key, int cancel_fd, char **result, bool *is_error) RX_WUR;
/*
 * May a call of tool `name` that was interrupted (started, no result: SPEC
 * 3.7) run again by itself, with the same key? The built-ins yes; a command
 * tool when configured "idempotent": true; an MCP tool by its config or its
 * readOnlyHint / idempotentHint annotation (mcp_config_idempotent). False
 * for a tool not there.
 */
bool toolkit_is_idempotent(const struct toolkit *tk, const char *name);
/*
 * Is tool `name` known now: a built-in, a command tool, or an MCP tool whose
 * server has listed it (an MCP server still starting knows none yet).
 */
bool toolkit_knows(const struct toolkit *tk, const char *name);

#endif
