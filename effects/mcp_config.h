/*
 * mcp_config - the `mcpServers` block of the config, in the shape the MCP
 * hosts share (Claude Desktop, LibreChat), checked whole:
 *
 *   "mcpServers": {
 *     "fs":  {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem",
 *             "/srv/docs"], "env": {"NAME": "value"}, "timeout_ms": 60000,
 *             "approval": "ask"},
 *     "web": {"url": "http://127.0.0.1:3001/mcp", "headers": {"Authorization": "Bearer
 * x"}}, "mem": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"],
 *             "tools": {"exclude": ["delete_entities"], "approval": {"read_graph":
 * "auto"}}}
 *   }
 *
 * `idempotent` (SPEC 3.7: may a call in doubt after a crash run again by
 * itself?) is true or false on a server, or per tool in "tools":
 * {"idempotent": {"read_graph": true}}; without either, the tool's
 * readOnlyHint or idempotentHint annotation decides.
 *
 * `type` may say "stdio", "http" or "streamable-http" (LibreChat writes
 * it); without it `command` means stdio and `url` Streamable HTTP. Any
 * other key, a wrong type, or both or neither of command and url is an
 * error: one line naming the server and the field.
 *
 * Depends on effects/mcp_server (the connection's config), state_machine/
 * rx_policy (the policies) and jansson.
 * Pure: no I/O.
 * Ownership: the json_t given is borrowed; everything parsed is copied into
 * the caller's structs, released with mcp_config_entry_release.
 */
#ifndef MCP_CONFIG_H
#define MCP_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "effects/mcp_server.h"
#include "state_machine/rx_common.h"
#include "state_machine/rx_policy.h"

/* Longest server name. */
#define MCP_CONFIG_NAME_MAX    64
#define MCP_CONFIG_MAX_SERVERS 64

/* One server's entry: how to reach it, and what of it to use. */
struct mcp_config_entry {
    struct mcp_server_config server;
    json_t *entry;             /* a copy of the entry: a reload compares them */
    json_t *include, *exclude; /* arrays of tool names, or NULL */
    json_t *tool_policies;     /* {"tool": "auto"|"ask"|"deny"} or NULL */
    enum rx_policy policy;     /* the server's `approval`; UNSET when none */
    json_t *tool_idempotent;   /* {"tool": true|false} or NULL */
    int idempotent;            /* the server's `idempotent`: 1, 0, or -1 when none */
};

/*
 * Parse `servers` (an object, or NULL for none) into *entries (malloc'd
 * array of *n). All or nothing: 0, or -EINVAL / -ENOMEM with `err` such as
 *   "mcpServers.fs.args: must be an array of strings".
 */
int mcp_config_parse(json_t *servers, struct mcp_config_entry **entries, size_t *n,
                     struct rx_error *err) RX_WUR;

void mcp_config_entry_release(struct mcp_config_entry *e);
void mcp_config_free(struct mcp_config_entry *entries, size_t n);

/* Whether the config lets `tool` of this server be used (include/exclude). */
bool mcp_config_tool_wanted(const struct mcp_config_entry *e, const char *tool);

/* The tool's effective default policy (SPEC 3.6): its own `approval`, else
   the server's, else "auto" when annotated readOnlyHint, else "ask". */
const char *mcp_config_policy(const struct mcp_config_entry *e, const char *tool,
                              json_t *annotations);
/* May a call of `tool` that was interrupted run again by itself (SPEC 3.7)?
   Its own `idempotent`, else the server's, else readOnlyHint or idempotentHint. */
bool mcp_config_idempotent(const struct mcp_config_entry *e, const char *tool,
                           json_t *annotations);

#endif
