/*
 * toolkit_internal - the toolkit's registry, shared by toolkit.c (the
 * registry, MCP and calls) and toolkit_config.c (the config's `tools`).
 * Private to effects/toolkit*.c; everyone else goes through toolkit.h.
 *
 * Depends on effects/toolkit (the interface whose struct it completes),
 * toolkit_command (a command tool's argv and bounds), mcp_hub and jansson.
 * Invariants: items[0..len) are complete tools with distinct names; cap is
 * what items holds. Ownership: a tool owns its name, description,
 * parameters (one reference) and command; the toolkit owns its tools and
 * its MCP hub.
 */
#ifndef TOOLKIT_INTERNAL_H
#define TOOLKIT_INTERNAL_H

#include <stddef.h>

#include <jansson.h>

#include "effects/toolkit.h"
#include "effects/toolkit_command.h"

enum tool_kind { TOOL_CALCULATOR, TOOL_CLOCK, TOOL_COMMAND };

struct tool {
    enum tool_kind kind;
    char *name;
    char *description;
    json_t *parameters;         /* owned; read-only once added, so calls may share it */
    const char *policy;         /* "auto" | "ask" | "deny" (static) */
    struct toolkit_command cmd; /* TOOL_COMMAND */
};

struct toolkit {
    struct tool *items;
    size_t len, cap;
    size_t result_max;    /* every result is cut there */
    size_t mcp_tools_max; /* tools one MCP server may list */
    struct mcp_hub *mcp;  /* NULL until toolkit_add_mcp */
};

/* Free what t owns and zero it. */
void toolkit__tool_release(struct tool *t);
/* The toolkit's own tool (built-in or command) called `name`, or NULL. */
const struct tool *toolkit__find_tool(const struct toolkit *tk, const char *name);
/* Make room for n more tools: 0 or -ENOMEM, nothing changed on failure. */
int toolkit__reserve(struct toolkit *tk, size_t n) RX_WUR;

#endif
