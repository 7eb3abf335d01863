/*
 * mcp_names - a table of MCP tool names, built once. See mcp_names.h.
 */
#include "effects/mcp_names.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "effects/log.h"
#include "state_machine/rx_index.h"

/* A server as the table saw it. */
struct names_server {
    struct mcp_server *srv; /* one reference: the table may outlive the hub's */
    size_t tools;           /* of its tools, those named here */
    bool up;                /* it was up when its tools were named */
};

struct mcp_names {
    int refs; /* atomic */
    struct mcp_names_tool *tools;
    size_t n, cap;
    struct rx_index index; /* name -> position in tools */
    struct names_server *servers;
    size_t n_servers;
};

/* Where the next suffix of a name that collided is tried: each duplicate
   starts where the last one of its name stopped, so naming stays linear. */
struct base_next {
    char base[MCP_RPC_NAME_MAX + 1];
    unsigned next;
};

/* The state of one build. */
struct naming {
    struct mcp_names *t;
    mcp_names_taken_fn taken;
    void *ctx;
    struct base_next *bases;
    size_t n_bases, cap_bases;
    struct rx_index base_index;
};

static const char *tool_name_at(const void *list, size_t i)
{
    return ((const struct mcp_names_tool *)list)[i].name;
}

static const char *base_at(const void *list, size_t i)
{
    return ((const struct base_next *)list)[i].base;
}

static void names_free(struct mcp_names *t)
{
    for (size_t i = 0; i < t->n; i++)
        json_decref(t->tools[i].tool);
    for (size_t i = 0; i < t->n_servers; i++)
        mcp_server_unref(t->servers[i].srv);
    rx_index_release(&t->index);
    free(t->tools);
    free(t->servers);
    free(t);
}

void mcp_names_ref(struct mcp_names *t)
{
    __atomic_add_fetch(&t->refs, 1, __ATOMIC_ACQUIRE);
}

void mcp_names_unref(struct mcp_names *t)
{
    if (t && __atomic_sub_fetch(&t->refs, 1, __ATOMIC_ACQ_REL) == 0)
        names_free(t);
}

const struct mcp_names_tool *mcp_names_find(const struct mcp_names *t, const char *name)
{
    long i = name ? rx_index_find(&t->index, name, tool_name_at, t->tools) : -1;

    return i < 0 ? NULL : &t->tools[i];
}

size_t mcp_names_count(const struct mcp_names *t)
{
    return t->n;
}

const struct mcp_names_tool *mcp_names_at(const struct mcp_names *t, size_t i)
{
    return &t->tools[i];
}

size_t mcp_names_of(const struct mcp_names *t, const struct mcp_server *srv)
{
    for (size_t i = 0; i < t->n_servers; i++)
        if (t->servers[i].srv == srv)
            return t->servers[i].tools;
    return 0;
}

bool mcp_names_saw_up(const struct mcp_names *t, const struct mcp_server *srv)
{
    for (size_t i = 0; i < t->n_servers; i++)
        if (t->servers[i].srv == srv)
            return t->servers[i].up;
    return false;
}

/* ---------------------------------------------------------------- naming */

static bool name_taken(void *ctx, const char *name)
{
    struct naming *nm = ctx;

    return mcp_names_find(nm->t, name) || (nm->taken && nm->taken(nm->ctx, name));
}

/* The resume point of `base` (added at 2 when new), or NULL (ENOMEM). */
static unsigned *next_of(struct naming *nm, const char *base)
{
    long i = rx_index_find(&nm->base_index, base, base_at, nm->bases);
    struct base_next *b;

    if (i >= 0)
        return &nm->bases[i].next;
    if (nm->n_bases == nm->cap_bases) {
        size_t cap = nm->cap_bases ? nm->cap_bases * 2 : 16;

        b = realloc(nm->bases, cap * sizeof(*b));
        if (!b)
            return NULL;
        nm->bases = b;
        nm->cap_bases = cap;
    }
    if (rx_index_reserve(&nm->base_index, 1))
        return NULL;
    b = &nm->bases[nm->n_bases];
    snprintf(b->base, sizeof(b->base), "%s", base);
    b->next = 2;
    rx_index_insert(&nm->base_index, b->base, nm->n_bases++);
    return &b->next;
}

/* A free name for `tool` of server `srv` into out. 0, -EEXIST, -ENOMEM. */
static int name_tool(struct naming *nm, const char *srv, const char *tool,
                     char out[MCP_RPC_NAME_MAX + 1])
{
    char base[MCP_RPC_NAME_MAX + 1];
    unsigned *next;

    if (mcp_rpc_tool_name(srv, tool, NULL, NULL, NULL, base))
        return -EEXIST; /* cannot happen: nothing is taken */
    if (!name_taken(nm, base)) {
        memcpy(out, base, sizeof(base));
        return 0;
    }
    if (!(next = next_of(nm, base)))
        return -ENOMEM;
    return mcp_rpc_tool_name(srv, tool, name_taken, nm, next, out);
}

/* Room for `more` tools. 0 or -ENOMEM. */
static int reserve(struct mcp_names *t, size_t more)
{
    struct mcp_names_tool *grown;

    if (t->n + more <= t->cap)
        return 0;
    grown = realloc(t->tools, (t->n + more) * sizeof(*grown));
    if (!grown)
        return -ENOMEM;
    t->tools = grown;
    t->cap = t->n + more;
    return rx_index_reserve(&t->index, more);
}

/* Add the wanted tools of one server. 0 or -ENOMEM. */
static int add_server_tools(struct naming *nm, const struct mcp_names_source *src)
{
    struct mcp_names *t = nm->t;
    struct names_server *ts = &t->servers[t->n_servers];
    const char *server = mcp_server_name(src->srv);
    struct mcp_server_info info;
    json_t *list = mcp_server_tools(src->srv), *tl;
    size_t i;
    int rc = 0;

    if (!list)
        return -ENOMEM;
    mcp_server_ref(src->srv);
    ts->srv = src->srv;
    ts->tools = 0;
    t->n_servers++;
    mcp_server_info(src->srv, &info);
    ts->up = info.status == MCP_UP;
    if (reserve(t, json_array_size(list))) {
        json_decref(list);
        return -ENOMEM;
    }
    json_array_foreach(list, i, tl)
    {
        const char *tool = json_string_value(json_object_get(tl, "name"));
        struct mcp_names_tool *nt = &t->tools[t->n];

        if (!tool || !mcp_config_tool_wanted(src->conf, tool))
            continue;
        memset(nt, 0, sizeof(*nt));
        rc = name_tool(nm, server, tool, nt->name);
        if (rc == -ENOMEM)
            break;
        if (rc) {
            log_warn("mcp %s: no unique name for its tool '%s'", server, tool);
            rc = 0;
            continue;
        }
        nt->srv = src->srv;
        nt->tool = json_incref(tl);
        nt->policy =
            mcp_config_policy(src->conf, tool, json_object_get(tl, "annotations"));
        nt->idempotent =
            mcp_config_idempotent(src->conf, tool, json_object_get(tl, "annotations"));
        nt->up = info.status == MCP_UP;
        rx_index_insert(&t->index, nt->name, t->n++);
        ts->tools++;
    }
    json_decref(list);
    return rc;
}

int mcp_names_build(const struct mcp_names_source *src, size_t n,
                    mcp_names_taken_fn taken, void *ctx, struct mcp_names **out)
{
    struct naming nm = {.taken = taken, .ctx = ctx};
    struct mcp_names *t = calloc(1, sizeof(*t));
    int rc = -ENOMEM;

    rx_index_init(&nm.base_index);
    if (!t)
        return -ENOMEM;
    t->refs = 1;
    rx_index_init(&t->index);
    t->servers = calloc(n ? n : 1, sizeof(*t->servers));
    if (!t->servers)
        goto out_free;
    nm.t = t;
    rc = 0;
    for (size_t i = 0; i < n && !rc; i++)
        rc = add_server_tools(&nm, &src[i]);
    if (rc)
        goto out_free;
    *out = t;
    t = NULL;

out_free:
    rx_index_release(&nm.base_index);
    free(nm.bases);
    if (t)
        names_free(t);
    return rc;
}
