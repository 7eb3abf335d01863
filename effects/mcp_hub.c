/*
 * mcp_hub - the MCP servers and the names of their tools. See mcp_hub.h.
 */
#include "effects/mcp_hub.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "effects/log.h"
#include "effects/mcp_config.h"
#include "effects/mcp_rpc.h"
#include "effects/mcp_server.h"

struct hub_server {
    struct mcp_server *srv;       /* one reference */
    struct mcp_config_entry conf; /* its server part moved into srv */
};

/* One tool as the brains know it. */
struct hub_tool {
    char name[MCP_RPC_NAME_MAX + 1];
    struct mcp_server *srv; /* borrowed from the hub's servers */
    json_t *tool;           /* the server's {"name","description","inputSchema",...} */
    const char *policy;     /* static string */
    bool up;
};

struct mcp_hub {
    pthread_mutex_t lock;
    mcp_hub_taken_fn taken;
    void *ctx;
    struct hub_server *servers;
    size_t n_servers;
    struct hub_tool *tools;
    size_t n_tools;
};

/* ------------------------------------------------------------ the table */

static void tools_free(struct hub_tool *tools, size_t n)
{
    for (size_t i = 0; i < n; i++)
        json_decref(tools[i].tool);
    free(tools);
}

struct naming {
    struct mcp_hub *hub;
    struct hub_tool *tools;
    size_t n;
};

static bool name_taken(void *ctx, const char *name)
{
    struct naming *nm = ctx;

    for (size_t i = 0; i < nm->n; i++)
        if (!strcmp(nm->tools[i].name, name))
            return true;
    return nm->hub->taken && nm->hub->taken(nm->hub->ctx, name);
}

/* Lock held. Add server i's wanted tools to the table being built. */
static int add_server_tools(struct naming *nm, size_t *cap, struct hub_server *hs)
{
    struct mcp_server_info info;
    json_t *list = mcp_server_tools(hs->srv), *t;
    size_t i;
    int rc = 0;

    if (!list)
        return -ENOMEM;
    mcp_server_info(hs->srv, &info);
    json_array_foreach(list, i, t)
    {
        const char *tool = json_string_value(json_object_get(t, "name"));
        struct hub_tool *ht;

        if (!tool || !mcp_config_tool_wanted(&hs->conf, tool))
            continue;
        if (nm->n == *cap) {
            size_t ncap = *cap ? *cap * 2 : 16;
            struct hub_tool *grown = realloc(nm->tools, ncap * sizeof(*grown));

            if (!grown) {
                rc = -ENOMEM;
                break;
            }
            nm->tools = grown;
            *cap = ncap;
        }
        ht = &nm->tools[nm->n];
        memset(ht, 0, sizeof(*ht));
        if (mcp_rpc_tool_name(mcp_server_name(hs->srv), tool, name_taken, nm, ht->name)) {
            log_warn("mcp %s: no unique name for its tool '%s'", mcp_server_name(hs->srv),
                     tool);
            continue;
        }
        ht->srv = hs->srv;
        ht->tool = json_incref(t);
        ht->policy =
            mcp_config_policy(&hs->conf, tool, json_object_get(t, "annotations"));
        ht->up = info.status == MCP_UP;
        nm->n++;
    }
    json_decref(list);
    return rc;
}

/* Lock held. Build the table anew from every server's list (after any change). */
static void rebuild_locked(struct mcp_hub *hub)
{
    struct naming nm = {.hub = hub};
    size_t cap = 0;
    int rc = 0;

    for (size_t i = 0; i < hub->n_servers && !rc; i++)
        rc = add_server_tools(&nm, &cap, &hub->servers[i]);
    if (rc) { /* keep the old table rather than a partial one */
        tools_free(nm.tools, nm.n);
        log_error("mcp: out of memory while naming tools");
        return;
    }
    tools_free(hub->tools, hub->n_tools);
    hub->tools = nm.tools;
    hub->n_tools = nm.n;
}

static void on_changed(void *ctx)
{
    struct mcp_hub *hub = ctx;

    pthread_mutex_lock(&hub->lock);
    rebuild_locked(hub);
    pthread_mutex_unlock(&hub->lock);
}

/* Lock held. How many of the server's tools the config lets the agent use. */
static size_t tools_of(const struct mcp_hub *hub, const struct mcp_server *srv)
{
    size_t n = 0;

    for (size_t i = 0; i < hub->n_tools; i++)
        n += hub->tools[i].srv == srv;
    return n;
}

/* Lock held. */
static struct hub_tool *find(struct mcp_hub *hub, const char *name)
{
    for (size_t i = 0; name && i < hub->n_tools; i++)
        if (!strcmp(hub->tools[i].name, name))
            return &hub->tools[i];
    return NULL;
}

/* ----------------------------------------------------------- life cycle */

/* Start the servers of `entries[0..n)` into `out` (same length). The
   entries' server configs move into the servers. 0 or -ENOMEM (those
   started are stopped again). */
static int start_servers(struct mcp_hub *hub, struct mcp_config_entry *entries, size_t n,
                         struct hub_server *out)
{
    for (size_t i = 0; i < n; i++) {
        out[i].conf = entries[i];
        memset(&entries[i], 0, sizeof(entries[i]));
        out[i].srv = mcp_server_start(&out[i].conf.server, on_changed, hub);
        if (!out[i].srv) {
            for (size_t j = 0; j <= i; j++) {
                mcp_server_stop(out[j].srv);
                mcp_config_entry_release(&out[j].conf);
            }
            return -ENOMEM;
        }
    }
    return 0;
}

int mcp_hub_create(json_t *servers, mcp_hub_taken_fn taken, void *ctx,
                   struct mcp_hub **out, struct rx_error *err)
{
    struct mcp_config_entry *entries = NULL;
    struct mcp_hub *hub;
    size_t n = 0;
    int rc;

    if ((rc = mcp_config_parse(servers, &entries, &n, err)))
        return rc;
    hub = calloc(1, sizeof(*hub));
    if (!hub || (n && !(hub->servers = calloc(n, sizeof(*hub->servers))))) {
        free(hub);
        mcp_config_free(entries, n);
        return rx_error_set(err, -ENOMEM, "mcpServers: out of memory");
    }
    pthread_mutex_init(&hub->lock, NULL);
    hub->taken = taken;
    hub->ctx = ctx;
    hub->n_servers = n;
    /* Servers call back into the hub at once: it must be whole by now. */
    if ((rc = start_servers(hub, entries, n, hub->servers))) {
        hub->n_servers = 0;
        mcp_hub_destroy(hub);
        mcp_config_free(entries, n);
        return rx_error_set(err, rc, "mcpServers: out of memory");
    }
    mcp_config_free(entries, n);
    *out = hub;
    return 0;
}

static void stop_servers(struct hub_server *servers, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        mcp_server_stop(servers[i].srv);
        mcp_config_entry_release(&servers[i].conf);
    }
}

void mcp_hub_destroy(struct mcp_hub *hub)
{
    if (!hub)
        return;
    /* Stopping joins each supervisor, whose last change may rebuild the
       table: the hub stays whole until every one has stopped. */
    stop_servers(hub->servers, hub->n_servers);
    pthread_mutex_lock(&hub->lock);
    tools_free(hub->tools, hub->n_tools);
    hub->tools = NULL;
    hub->n_tools = 0;
    pthread_mutex_unlock(&hub->lock);
    free(hub->servers);
    pthread_mutex_destroy(&hub->lock);
    free(hub);
}

/* The running server whose entry is `entry`, unchanged; or -1. */
static long same_server(const struct mcp_hub *hub, const char *name, json_t *entry)
{
    for (size_t i = 0; i < hub->n_servers; i++)
        if (!strcmp(mcp_server_name(hub->servers[i].srv), name) &&
            json_equal(hub->servers[i].conf.entry, entry))
            return (long)i;
    return -1;
}

int mcp_hub_reload(struct mcp_hub *hub, json_t *servers, struct rx_error *err)
{
    struct mcp_config_entry *entries = NULL;
    struct hub_server *next, *old;
    size_t n = 0, n_old, kept = 0, started;
    bool *keep;
    int rc;

    if ((rc = mcp_config_parse(servers, &entries, &n, err)))
        return rc;
    next = calloc(n ? n : 1, sizeof(*next));
    keep = calloc(hub->n_servers ? hub->n_servers : 1, sizeof(*keep));
    if (!next || !keep) {
        free(next);
        free(keep);
        mcp_config_free(entries, n);
        return rx_error_set(err, -ENOMEM, "mcpServers: out of memory");
    }
    /* Unchanged servers carry on (and their calls in flight with them). */
    for (size_t i = 0; i < n; i++) {
        long j = same_server(hub, entries[i].server.name, entries[i].entry);

        if (j < 0 || keep[j])
            continue;
        keep[j] = true;
        next[i] = hub->servers[j];
        mcp_config_entry_release(&entries[i]);
        kept++;
    }
    for (size_t i = 0; i < n; i++) {
        if (next[i].srv)
            continue;
        next[i].conf = entries[i];
        memset(&entries[i], 0, sizeof(entries[i]));
        next[i].srv = mcp_server_start(&next[i].conf.server, on_changed, hub);
        if (!next[i].srv) {
            log_error("mcp: a server could not be started (out of memory)");
            mcp_config_entry_release(&next[i].conf);
        }
    }
    started = 0; /* leave out what did not start */
    for (size_t i = 0; i < n; i++)
        if (next[i].srv)
            next[started++] = next[i];
    pthread_mutex_lock(&hub->lock);
    old = hub->servers;
    n_old = hub->n_servers;
    hub->servers = next;
    hub->n_servers = started;
    /* The names with the list, so no tool of a server on its way out is
       offered or points at it; calls already made hold their own reference. */
    rebuild_locked(hub);
    pthread_mutex_unlock(&hub->lock);
    for (size_t j = 0; j < n_old; j++)
        if (!keep[j])
            stop_servers(&old[j], 1);
    log_info("mcp: reloaded: %zu servers kept, %zu started, %zu stopped", kept,
             started - kept, n_old - kept);
    free(old);
    free(keep);
    mcp_config_free(entries, n);
    return 0;
}

/* -------------------------------------------------------------- queries */

bool mcp_hub_has(struct mcp_hub *hub, const char *name)
{
    bool has;

    pthread_mutex_lock(&hub->lock);
    has = find(hub, name) != NULL;
    pthread_mutex_unlock(&hub->lock);
    return has;
}

int mcp_hub_schemas(struct mcp_hub *hub, json_t *arr)
{
    int rc = 0;

    pthread_mutex_lock(&hub->lock);
    for (size_t i = 0; i < hub->n_tools && !rc; i++) {
        const struct hub_tool *t = &hub->tools[i];

        if (!t->up)
            continue;
        rc = json_array_append_new(
                 arr, json_pack("{s:s, s:{s:s, s:O, s:O}}", "type", "function",
                                "function", "name", t->name, "description",
                                json_object_get(t->tool, "description"), "parameters",
                                json_object_get(t->tool, "inputSchema")))
                 ? -ENOMEM
                 : 0;
    }
    pthread_mutex_unlock(&hub->lock);
    return rc;
}

static const char *status_name(enum mcp_status st)
{
    return st == MCP_UP ? "up" : st == MCP_STARTING ? "starting" : "down";
}

int mcp_hub_describe(struct mcp_hub *hub, json_t *tools, json_t *servers)
{
    int rc = 0;

    pthread_mutex_lock(&hub->lock);
    for (size_t i = 0; tools && i < hub->n_tools && !rc; i++) {
        const struct hub_tool *t = &hub->tools[i];
        char source[MCP_CONFIG_NAME_MAX + 8];

        snprintf(source, sizeof(source), "mcp:%s", mcp_server_name(t->srv));
        rc = json_array_append_new(
                 tools,
                 json_pack("{s:s, s:O, s:O, s:s, s:s, s:O, s:s, s:b}", "name", t->name,
                           "description", json_object_get(t->tool, "description"),
                           "parameters", json_object_get(t->tool, "inputSchema"),
                           "source", source, "policy", t->policy, "annotations",
                           json_object_get(t->tool, "annotations"), "tool",
                           json_string_value(json_object_get(t->tool, "name")),
                           "available", t->up))
                 ? -ENOMEM
                 : 0;
    }
    for (size_t i = 0; i < hub->n_servers && !rc; i++) {
        struct mcp_server_info info;

        mcp_server_info(hub->servers[i].srv, &info);
        rc = json_array_append_new(
                 servers, json_pack("{s:s, s:s, s:s, s:s?, s:I, s:s?}", "name",
                                    mcp_server_name(hub->servers[i].srv), "transport",
                                    info.transport, "status", status_name(info.status),
                                    "error", info.error[0] ? info.error : NULL, "tools",
                                    (json_int_t)tools_of(hub, hub->servers[i].srv),
                                    "protocol", info.version[0] ? info.version : NULL))
                 ? -ENOMEM
                 : 0;
    }
    pthread_mutex_unlock(&hub->lock);
    return rc;
}

int mcp_hub_metrics(struct mcp_hub *hub, struct rx_buf *b)
{
    static const char *const head[] = {
        "# HELP reflexor_mcp_server_up Whether the MCP server is connected and "
        "initialized.\n# TYPE reflexor_mcp_server_up gauge\n",
        "# HELP reflexor_mcp_tools Tools of the MCP server the agent may use.\n"
        "# TYPE reflexor_mcp_tools gauge\n",
        "# HELP reflexor_mcp_calls_total Tool calls made to the MCP server, by result.\n"
        "# TYPE reflexor_mcp_calls_total counter\n",
        "# HELP reflexor_mcp_restarts_total Connections to the MCP server lost after it "
        "was up.\n# TYPE reflexor_mcp_restarts_total counter\n"};
    struct mcp_server_info *info;
    size_t n;
    int rc = 0;

    pthread_mutex_lock(&hub->lock);
    n = hub->n_servers;
    info = n ? calloc(n, sizeof(*info)) : NULL;
    for (size_t i = 0; info && i < n; i++) {
        mcp_server_info(hub->servers[i].srv, &info[i]);
        info[i].tools = tools_of(hub, hub->servers[i].srv);
    }
    for (size_t f = 0; info && f < 4 && !rc; f++) {
        rc = rx_buf_puts(b, head[f]);
        for (size_t i = 0; i < n && !rc; i++) {
            const char *name = mcp_server_name(hub->servers[i].srv);

            if (f == 0)
                rc = rx_buf_printf(b, "reflexor_mcp_server_up{server=\"%s\"} %d\n", name,
                                   info[i].status == MCP_UP);
            else if (f == 1)
                rc = rx_buf_printf(b, "reflexor_mcp_tools{server=\"%s\"} %zu\n", name,
                                   info[i].tools);
            else if (f == 2)
                rc =
                    rx_buf_printf(b,
                                  "reflexor_mcp_calls_total{server=\"%s\",result=\"ok\"} "
                                  "%lu\nreflexor_mcp_calls_total{server=\"%s\",result="
                                  "\"error\"} %lu\n",
                                  name, info[i].calls_ok, name, info[i].calls_failed);
            else
                rc = rx_buf_printf(b, "reflexor_mcp_restarts_total{server=\"%s\"} %lu\n",
                                   name, info[i].restarts);
        }
    }
    pthread_mutex_unlock(&hub->lock);
    if (n && !info)
        rc = -ENOMEM;
    free(info);
    return rc ? -ENOMEM : 0;
}

const char *mcp_hub_policy(struct mcp_hub *hub, const char *name)
{
    const char *p = "auto";
    struct hub_tool *t;

    pthread_mutex_lock(&hub->lock);
    if ((t = find(hub, name)))
        p = t->policy;
    pthread_mutex_unlock(&hub->lock);
    return p;
}

int mcp_hub_call(struct mcp_hub *hub, const char *name, json_t *args, int cancel_fd,
                 char **text, bool *is_error)
{
    struct mcp_server *srv = NULL;
    char *tool = NULL;
    struct hub_tool *t;
    int rc;

    pthread_mutex_lock(&hub->lock);
    if ((t = find(hub, name))) {
        srv = t->srv;
        mcp_server_ref(srv);
        tool = strdup(json_string_value(json_object_get(t->tool, "name")));
    }
    pthread_mutex_unlock(&hub->lock);
    if (!srv) {
        json_decref(args);
        return -ENOENT;
    }
    rc = tool ? mcp_server_call(srv, tool, args, cancel_fd, text, is_error) : -ENOMEM;
    if (!tool)
        json_decref(args);
    free(tool);
    mcp_server_unref(srv);
    return rc;
}
