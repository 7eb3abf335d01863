/*
 * mcp_rpc - the JSON-RPC 2.0 messages of an MCP client (Model Context
 * Protocol, revision 2025-11-25, down to 2025-03-26): building requests,
 * notifications and replies; classifying what a server sends; checking the
 * initialize result; reading tools/list pages; naming tools for the LLM; and
 * turning a tools/call result into the text the agent sees. Two files:
 * mcp_rpc.c the messages, mcp_rpc_text.c the text of a call's result
 * (their shared helpers in mcp_rpc_internal.h).
 *
 * Pure: no I/O, clock, threads or globals. Depends on jansson, libc,
 * state_machine/rx_buf and rx_common only; nothing from server/ or the
 * transports (mcp_server, mcp_stdio, mcp_http, mcp_hub build on this).
 * Every function is reentrant; values passed in are only read.
 *
 * Ownership:
 *  - constructors (mcp_rpc_request, _notification, _result, _error,
 *    _initialize_params, _call_params, _cancelled, _reply, _progress_token)
 *    return a NEW reference, or NULL when out of memory;
 *  - a `params` / `result` / `arguments` argument is STOLEN, on failure too
 *    and also when NULL (jansson's `_new` rule), so calls chain without checks;
 *  - `id`, `msg`, `result` (of the readers) and `token` are BORROWED;
 *  - *method from mcp_rpc_classify is borrowed from `msg`;
 *  - *cursor_out of mcp_rpc_tools_page is a NEW reference; the objects it
 *    appends to `tools` are new copies that share nothing with `result`;
 *  - *text of mcp_rpc_call_text is the caller's, to free(3) (it comes from
 *    rx_buf, i.e. jansson's allocator, which is malloc unless a test swaps it).
 * Actions return 0 or a negative errno and fill a caller's struct rx_error
 * (NULL allowed); on failure their outputs are left as they were.
 */
#ifndef MCP_RPC_H
#define MCP_RPC_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "state_machine/rx_common.h"

#define MCP_RPC_VERSION_LATEST "2025-11-25"
/* The oldest revision we speak (the first with tool annotations). */
#define MCP_RPC_VERSION_OLDEST "2025-03-26"

/* JSON-RPC error codes (the ones a client sends or meets). */
#define MCP_RPC_PARSE_ERROR      (-32700)
#define MCP_RPC_INVALID_REQUEST  (-32600)
#define MCP_RPC_METHOD_NOT_FOUND (-32601)
#define MCP_RPC_INVALID_PARAMS   (-32602)
#define MCP_RPC_INTERNAL_ERROR   (-32603)

/* Longest tool name the LLM sees (OpenAI's [A-Za-z0-9_-]{1,64}). */
#define MCP_RPC_NAME_MAX 64
/* Names one mcp_rpc_tool_name tries (the name, then 999 suffixes) before giving up. */
#define MCP_RPC_NAME_TRIES 1000
/* Longest text mcp_rpc_call_text builds (the text is about as long as the result). */
#define MCP_RPC_TEXT_MAX (64u << 20)

/* Protocol versions we speak, newest first: 2025-11-25, 2025-06-18, 2025-03-26. */
bool mcp_rpc_version_supported(const char *v);

/* ------------------------------------------------------------ building */

/*
 * {"jsonrpc":"2.0","id":id,"method":method,"params":params}; no "params" key
 * when params is NULL. params STOLEN. NEW reference, or NULL (out of memory,
 * or method NULL).
 */
json_t *mcp_rpc_request(json_int_t id, const char *method, json_t *params) RX_WUR;

/* {"jsonrpc":"2.0","method":method,"params":params}; as mcp_rpc_request. */
json_t *mcp_rpc_notification(const char *method, json_t *params) RX_WUR;

/*
 * The answer to a request of the server: {"jsonrpc":"2.0","id":id,
 * "result":result}. id BORROWED and copied (must not be NULL: NULL is
 * returned); result STOLEN (NULL gives NULL). NEW reference or NULL.
 */
json_t *mcp_rpc_result(json_t *id, json_t *result) RX_WUR;

/*
 * {"jsonrpc":"2.0","id":id,"error":{"code":code,"message":message}}. id
 * BORROWED and copied; NULL means "id": null (a request whose id could not be
 * read). message NULL is "". NEW reference or NULL.
 */
json_t *mcp_rpc_error(json_t *id, int code, const char *message) RX_WUR;

/*
 * The initialize request's params: {"protocolVersion": LATEST,
 * "capabilities": {}, "clientInfo": {"name": "reflexor", "version":
 * client_version}} (client_version NULL is "unknown"). We declare no client
 * capabilities, so a server may only ping us (see mcp_rpc_reply). NEW or NULL.
 */
json_t *mcp_rpc_initialize_params(const char *client_version) RX_WUR;

/* Where a tools/call carries the call's idempotency key (SPEC 3.7). */
#define MCP_RPC_IDEMPOTENCY_KEY "io.reflexor/idempotency-key"

/*
 * The tools/call params for call number `id`: {"name": tool, "arguments":
 * arguments, "_meta": {"progressToken": "rx-<id>"}}, and in _meta
 * MCP_RPC_IDEMPOTENCY_KEY: key when `key` is not NULL. arguments STOLEN; NULL
 * is {}. NEW reference or NULL (out of memory, tool NULL).
 */
json_t *mcp_rpc_call_params(json_int_t id, const char *tool, json_t *arguments,
                            const char *key) RX_WUR;

/*
 * The notifications/cancelled message for our request `id`: params
 * {"requestId": id, "reason": reason} (no reason key when NULL). NEW or NULL.
 */
json_t *mcp_rpc_cancelled(json_int_t id, const char *reason) RX_WUR;

/*
 * Our answer to a request the server sent (`request` BORROWED, classified
 * MCP_RPC_REQUEST): "ping" gets the empty result {}, anything else the error
 * -32601 "method not found: '<method>'" (we declare no capabilities). NEW
 * reference, or NULL (out of memory, or not a request).
 */
json_t *mcp_rpc_reply(json_t *request) RX_WUR;

/* ---------------------------------------------------------- initialize */

/*
 * Check an initialize result (BORROWED): "protocolVersion" must be a string
 * we speak, "capabilities" an object, "capabilities.tools" an object when
 * present and its "listChanged" a boolean when present. On success the
 * version is copied into version_out (size >= 16), *list_changed (may be
 * NULL) says whether the server sends notifications/tools/list_changed, and 0
 * is returned. -EPROTO names the field and why ("the server speaks protocol
 * '2024-11-05', which Reflexor does not: it needs 2025-03-26 or newer");
 * -EINVAL when version_out is too small. serverInfo and instructions are not
 * read. Outputs are untouched on failure.
 */
int mcp_rpc_check_initialize(json_t *result, char *version_out, size_t size,
                             bool *list_changed, struct rx_error *err) RX_WUR;

/* -------------------------------------------------------- classifying */

enum mcp_rpc_kind {
    MCP_RPC_INVALID,
    MCP_RPC_RESPONSE,
    MCP_RPC_ERROR_RESPONSE,
    MCP_RPC_NOTIFICATION,
    MCP_RPC_REQUEST,
};

/*
 * Classify one incoming message (BORROWED). It must be an object with
 * "jsonrpc": "2.0", else MCP_RPC_INVALID. Then:
 *  - "method" (a string) and no "id": a notification; with an "id" that is a
 *    string or an integer: a request (reply with mcp_rpc_result/_error on its
 *    "id", or mcp_rpc_reply); *method is set, borrowed from msg;
 *  - no "method", exactly one of "result" (any value; the readers below check
 *    its shape) and "error" (any value; mcp_rpc_error_text copes with a
 *    malformed one, so the waiting call still ends), and an "id" that is an
 *    integer or a string of decimal digits that fits json_int_t: a response or
 *    an error response, *id is set. Any other id, null included (an error
 *    about a message the server could not read), is MCP_RPC_INVALID: it cannot
 *    be matched to one of our requests.
 * A batch (a JSON array) is MCP_RPC_INVALID: 2025-03-26 allowed servers to
 * send them, so a caller that meets an array classifies each element.
 * id and method may be NULL; they are written only for the kinds above.
 */
enum mcp_rpc_kind mcp_rpc_classify(json_t *msg, json_int_t *id, const char **method);

/*
 * The text of an error response (BORROWED): "MCP error -32602: Invalid
 * params", with " (<data>)" when the error has "data" (a string as it is,
 * anything else as compact JSON; the whole text is cut to fit err). Always
 * returns -EIO, the error of the call it answers; a malformed error object
 * gives "MCP error: the server sent a malformed error".
 */
int mcp_rpc_error_text(json_t *msg, struct rx_error *err);

/* ------------------------------------------------------------ progress */

/* The progressToken we put on call number `id`: the string "rx-<id>". NEW or NULL. */
json_t *mcp_rpc_progress_token(json_int_t id) RX_WUR;

/*
 * The reverse (token BORROWED): 0 and *id when token is exactly what
 * mcp_rpc_progress_token(*id) makes; -ENOENT for anything else (other
 * strings, numbers, "rx-007", "rx-1x", NULL): not one of ours.
 */
int mcp_rpc_progress_id(json_t *token, json_int_t *id) RX_WUR;

/* --------------------------------------------------------------- tools */

/*
 * One tools/list page (result BORROWED): append to `tools` (a JSON array) a
 * NEW object per usable tool, {"name", "description", "inputSchema",
 * "annotations"}, deep copies. description is "" when absent or not a string;
 * inputSchema defaults to {"type":"object","properties":{}}; annotations are
 * {} when absent or not an object. Entries that are not objects, whose name is
 * not a non-empty string, whose inputSchema is present but not an object, or
 * that hold a NUL ("\u0000", which a parse with RX_JSON_ALLOW_NUL lets
 * through) in any string or key are skipped and counted in *skipped (this
 * page's count; may be NULL): one bad tool does not cost the others. *cursor_out (may be
 * NULL) gets a NEW reference to "nextCursor", or NULL when there is none (absent, null or
 * ""; "" would loop forever on a sloppy server). 0; -EPROTO (result not an object,
 * "tools" not an array, "nextCursor" neither a string nor null); -ENOMEM. On failure
 * nothing is appended and the outputs are untouched.
 */
int mcp_rpc_tools_page(json_t *result, json_t *tools, json_t **cursor_out,
                       size_t *skipped, struct rx_error *err) RX_WUR;

/*
 * The name the LLM sees: "<server>__<tool>" with every character outside
 * [A-Za-z0-9_-] replaced by '_' (one '_' per UTF-8 sequence: a lead byte
 * and the continuation bytes after it; a stray continuation byte is one '_'
 * too), cut to MCP_RPC_NAME_MAX bytes. When taken(ctx, name) says the name
 * is used (taken may be NULL: nothing is), "_<n>" replaces the tail
 * (appended while there is room) for n = 2, 3, ... until a free one is
 * found. `next` (may be NULL) lets a caller that names many tools of one
 * name stay linear: the suffixes start at *next (when above 2), and *next
 * is left one past the suffix given (untouched when none was needed), so
 * the next tool of that name starts where this one stopped. out has room
 * for MCP_RPC_NAME_MAX + 1 bytes. 0, or -EEXIST after MCP_RPC_NAME_TRIES
 * names (the name itself and the suffixes) were taken (out and *next
 * untouched). server and tool may be "" but not NULL.
 */
int mcp_rpc_tool_name(const char *server, const char *tool,
                      bool (*taken)(void *ctx, const char *name), void *ctx,
                      unsigned *next, char out[MCP_RPC_NAME_MAX + 1]) RX_WUR;

/*
 * A tools/call result (BORROWED) as text for the agent. The "content" parts,
 * in order, joined with "\n":
 *  - text: its text (a NUL inside becomes U+FFFD, so the C string is whole);
 *  - image, audio: "[image/png, 1234 bytes]", the decoded size of the base64
 *    "data" (computed, not decoded); "[image/png]" without data;
 *  - resource_link: "[resource <name>: <uri>]", or "[resource: <uri>]"
 *    without a name;
 *  - resource (embedded): resource.text, or "[resource <uri>, <mimeType>,
 *    N bytes]" for a blob;
 *  - anything else, and parts missing what their type needs: "[<type>
 *    content]" ("[malformed content]" without a string "type").
 * With no text parts at all but a "structuredContent" (not null), the text is
 * that value as compact JSON, followed by the parts above. No content and no
 * structuredContent is "" (not an error). *is_error (may be NULL) is true when
 * "isError" is true; the text is then the server's message. Valid UTF-8 is
 * not guaranteed (the toolkit sanitises). "content": null counts as absent.
 * 0; -EPROTO (result not an object, or "content" neither an array nor null
 * and no structuredContent); -E2BIG
 * (past MCP_RPC_TEXT_MAX); -ENOMEM. Outputs untouched on failure.
 */
int mcp_rpc_call_text(json_t *result, char **text, bool *is_error,
                      struct rx_error *err) RX_WUR;

#endif
