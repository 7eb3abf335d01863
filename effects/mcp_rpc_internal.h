/*
 * mcp_rpc_internal - the helpers the two files of the mcp_rpc module
 * (mcp_rpc.c, the messages; mcp_rpc_text.c, call results as text) share.
 * Pure, as mcp_rpc. Depends on jansson only; included by those two files only.
 * Ownership: every json_t passed in is borrowed; strings returned are
 * borrowed from it.
 */
#ifndef MCP_RPC_INTERNAL_H
#define MCP_RPC_INTERNAL_H

#include <stdbool.h>

#include <jansson.h>

/* Longest piece of a server's string quoted in an error or a description. */
#define MCP_RPC_QUOTE_MAX 64

/* A JSON string without embedded NULs, as C code will see it. */
bool mcp_rpc_is_plain_string(json_t *v);

/* The string value of o[key], or NULL when absent or not a string. */
const char *mcp_rpc_get_string(json_t *o, const char *key);

/* How much of a server's string to quote: at most MCP_RPC_QUOTE_MAX bytes,
   never ending inside a UTF-8 sequence (the text may end up in JSON). */
int mcp_rpc_quote_len(const char *s);

#endif
