/*
 * mcp_hub - every configured MCP server (effects/mcp_server), and the names
 * under which their tools appear to the brains: `<server>__<tool>`, with
 * what LLM APIs refuse replaced by '_', cut to 64 and made unique (also
 * against the names the toolkit already has), the config's include/exclude
 * applied and each tool's default approval policy worked out.
 *
 * The table of names is rebuilt whenever a server's status or list
 * changes; the brains see (mcp_hub_schemas) the tools of the servers that
 * are up; a call of a tool whose server is down fails at once, naming it.
 * A reload (SIGHUP) keeps the servers whose entry did not change, stops
 * those that went and starts the new ones.
 *
 * Depends on effects/mcp_server, mcp_config, mcp_names (the table of
 * names), log, state_machine/rx_buf (the metrics' text) and jansson;
 * nothing from server/.
 * Threads: all functions may be called from any thread. The table of names
 * is rebuilt off the hub's lock (a hash, linear in the tools, under a lock
 * of its own that readers never take) and published by swapping a pointer;
 * readers hold the lock only to take a reference to the table, so no work
 * that grows with a server's answer, no call and no I/O ever runs under it.
 * Ownership: struct mcp_hub is a heap object (mcp_hub_create / _destroy);
 * json_t given in is borrowed; returned ones are NEW; mcp_hub_call steals
 * `args` and its *text is malloc'd.
 */
#ifndef MCP_HUB_H
#define MCP_HUB_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "state_machine/rx_buf.h"
#include "state_machine/rx_common.h"

struct mcp_hub;

/* Whether a name is already someone else's (the toolkit's own tools). */
typedef bool (*mcp_hub_taken_fn)(void *ctx, const char *name);

/*
 * Check the `mcpServers` object (borrowed; NULL: none) and start connecting
 * to each server in the background; a server may list at most `tools_max`
 * tools (limits.mcp_tools_max; 0: MCP_SERVER_TOOLS_MAX_DEFAULT), past which
 * its list is refused and it is down, saying so. 0 and *out; -EINVAL with
 * `err` naming the server and field (nothing started); -ENOMEM.
 */
int mcp_hub_create(json_t *servers, size_t tools_max, mcp_hub_taken_fn taken, void *ctx,
                   struct mcp_hub **out, struct rx_error *err) RX_WUR;
/* Stop every server (ending calls in flight) and free. NULL is fine. */
void mcp_hub_destroy(struct mcp_hub *hub);

/* Apply a new `mcpServers` object. All or nothing, as mcp_hub_create;
   `tools_max` holds for the servers started by it (those kept keep theirs). */
int mcp_hub_reload(struct mcp_hub *hub, json_t *servers, size_t tools_max,
                   struct rx_error *err) RX_WUR;

bool mcp_hub_has(struct mcp_hub *hub, const char *name);

/* The OpenAI `tools` entries of the tools of servers that are up,
   appended to `arr`. 0 or -ENOMEM. */
int mcp_hub_schemas(struct mcp_hub *hub, json_t *arr) RX_WUR;

/* GET /tools: each tool as {"name", "description", "parameters", "source":
   "mcp:<server>", "policy", "annotations"}, appended to `tools`; each
   server as {"name", "transport", "status", "error", "tools", "protocol",
   "skipped", "warning"} appended to `servers` ("skipped": the tools of its
   list left out, "warning" says why when there are any). `tools` may be NULL (servers
   only). 0 or -ENOMEM. */
int mcp_hub_describe(struct mcp_hub *hub, json_t *tools, json_t *servers) RX_WUR;

/* The metric families of the servers (Prometheus text). 0 or -ENOMEM. */
int mcp_hub_metrics(struct mcp_hub *hub, struct rx_buf *b) RX_WUR;

/* The tool's default approval policy, a static "auto" | "ask" | "deny";
   "auto" when no tool has that name. */
const char *mcp_hub_policy(struct mcp_hub *hub, const char *name);
/* Whether tool `name` may run again after an interruption (mcp_config_idempotent);
   false for a tool not there. */
bool mcp_hub_idempotent(struct mcp_hub *hub, const char *name);

/*
 * Call the tool known as `name`, with `args` (a JSON object, STOLEN). As
 * mcp_server_call; -ENOENT when no tool has that name.
 */
int mcp_hub_call(struct mcp_hub *hub, const char *name, json_t *args, const char *key,
                 int cancel_fd, char **text, bool *is_error) RX_WUR;

#endif
