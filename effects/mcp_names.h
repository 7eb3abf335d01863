/*
 * mcp_names - one table of the names under which the tools of the MCP
 * servers appear to the brains: `<server>__<tool>`, sanitised, cut to 64
 * and made unique (also against the names the toolkit already has), with
 * the config's include/exclude applied and each tool's default policy.
 *
 * A table is built at once from a list of servers (mcp_names_build) and
 * never changed after, so any number of threads read it without a lock;
 * the hub (effects/mcp_hub) builds a new one after every change and swaps
 * it in. Building is linear in the tools: the names are hashed
 * (state_machine/rx_index), and for a name that collided the suffix to try
 * next is remembered, so a thousand tools of one name do not try a
 * thousand suffixes each.
 *
 * Depends on effects/mcp_server, mcp_config, mcp_rpc, log,
 * state_machine/rx_index and jansson; nothing from server/.
 * Threads: mcp_names_ref/_unref are atomic; everything else only reads.
 * Ownership: a table starts with one reference; it holds a reference to
 * each of its servers and to each tool's json_t, dropped with the last
 * reference to the table. Pointers returned by the readers are borrowed
 * from the table.
 */
#ifndef MCP_NAMES_H
#define MCP_NAMES_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "effects/mcp_config.h"
#include "effects/mcp_rpc.h"
#include "effects/mcp_server.h"
#include "state_machine/rx_common.h"

/* Whether a name is already someone else's (the toolkit's own tools). */
typedef bool (*mcp_names_taken_fn)(void *ctx, const char *name);

/* One tool as the brains know it. */
struct mcp_names_tool {
    char name[MCP_RPC_NAME_MAX + 1];
    struct mcp_server *srv; /* the table holds a reference */
    json_t *tool;           /* the server's {"name","description","inputSchema",...} */
    const char *policy;     /* static: "auto" | "ask" | "deny" */
    bool idempotent;        /* may run again after an interruption (SPEC 3.7) */
    bool up;                /* its server was up when the table was built */
};

/* A server to take the tools of; both borrowed during mcp_names_build. */
struct mcp_names_source {
    struct mcp_server *srv;
    const struct mcp_config_entry *conf;
};

struct mcp_names;

/*
 * The table of the tools of `src[0..n)`, in that order, in *out (one
 * reference). A tool that gets no unique name is left out with a warning.
 * 0 or -ENOMEM (*out untouched).
 */
int mcp_names_build(const struct mcp_names_source *src, size_t n,
                    mcp_names_taken_fn taken, void *ctx, struct mcp_names **out) RX_WUR;

void mcp_names_ref(struct mcp_names *t);
/* Drop one reference; the last frees the table. NULL is fine. */
void mcp_names_unref(struct mcp_names *t);

/* The tool named `name` (may be NULL), or NULL. */
const struct mcp_names_tool *mcp_names_find(const struct mcp_names *t, const char *name);

size_t mcp_names_count(const struct mcp_names *t);
/* Tool i, i < mcp_names_count. */
const struct mcp_names_tool *mcp_names_at(const struct mcp_names *t, size_t i);

/* How many tools of `srv` the table names. */
size_t mcp_names_of(const struct mcp_names *t, const struct mcp_server *srv);
/* Whether `srv` was up when the table named its tools: until a server's tools
   are named, GET /tools shows it "starting", so "up" always comes with them. */
bool mcp_names_saw_up(const struct mcp_names *t, const struct mcp_server *srv);

#endif
