/*
 * mcp_hub - the MCP servers and the names of their tools. See mcp_hub.h.
 */
#include "effects/mcp_hub.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "effects/log.h"
#include "effects/mcp_config.h"
#include "effects/mcp_names.h"
#include "effects/mcp_server.h"

struct hub_server {
    struct mcp_server *srv;       /* one reference */
    struct mcp_config_entry conf; /* its server part moved into srv */
};

struct mcp_hub {
    /* Held only to read or swap the pointers below, never for work. */
    pthread_mutex_t lock;
    /* One rebuild at a time; a reload's swap of `servers` takes it too, so
       a rebuild reads `servers` without `lock`. Readers never take it. */
    pthread_mutex_t build_lock;
    mcp_hub_taken_fn taken;
    void *ctx;
    size_t tools_max;
    bool closing; /* build_lock: the servers are being stopped, no more rebuilds */
    struct hub_server *servers;
    size_t n_servers;
    struct mcp_names *table; /* never NULL once created */
};

/* ------------------------------------------------------------ the table */

/* The published table, with a reference for the caller (mcp_names_unref). */
static struct mcp_names *table_get(struct mcp_hub *hub)
{
    struct mcp_names *t;

    pthread_mutex_lock(&hub->lock);
    t = hub->table;
    mcp_names_ref(t);
    pthread_mutex_unlock(&hub->lock);
    return t;
}

/* The table of names of servers[0..n) (build_lock held): 0 or -ENOMEM. */
static int build(struct mcp_hub *hub, const struct hub_server *servers, size_t n,
                 struct mcp_names **out)
{
    struct mcp_names_source *src = calloc(n ? n : 1, sizeof(*src));
    int rc;

    if (!src)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        src[i].srv = servers[i].srv;
        src[i].conf = &servers[i].conf;
    }
    rc = mcp_names_build(src, n, hub->taken, hub->ctx, out);
    free(src);
    if (rc)
        log_error("mcp: out of memory while naming tools");
    return rc;
}

/*
 * Build the table anew from every server's list and publish it. The work
 * grows with the servers' answers, so it runs under build_lock only: the
 * hub's lock is taken to swap the pointer, for nothing else. Out of memory
 * keeps the old table rather than a partial one.
 */
static void rebuild(struct mcp_hub *hub)
{
    struct mcp_names *t = NULL, *old = NULL;

    pthread_mutex_lock(&hub->build_lock);
    /* Closing: the servers are on their way out, one by one. */
    if (!hub->closing && !build(hub, hub->servers, hub->n_servers, &t)) {
        pthread_mutex_lock(&hub->lock);
        old = hub->table;
        hub->table = t;
        pthread_mutex_unlock(&hub->lock);
    }
    pthread_mutex_unlock(&hub->build_lock);
    mcp_names_unref(old);
}

static void on_changed(void *ctx)
{
    rebuild(ctx);
}

/* ----------------------------------------------------------- life cycle */

/*
 * Start the servers of `entries[0..n)` into hub->servers, one by one. A
 * server's status may change (and rebuild the table) before this returns:
 * each is counted in n_servers only once it exists, so a rebuild never
 * meets an empty slot, and one last rebuild takes in the changes of
 * servers that came before they were counted. 0 or -ENOMEM (those started
 * are stopped again).
 */
static int start_servers(struct mcp_hub *hub, struct mcp_config_entry *entries, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct hub_server hs = {.conf = entries[i]};

        memset(&entries[i], 0, sizeof(entries[i]));
        hs.conf.server.tools_max = hub->tools_max;
        hs.srv = mcp_server_start(&hs.conf.server, on_changed, hub);
        if (!hs.srv) {
            mcp_config_entry_release(&hs.conf);
            return -ENOMEM;
        }
        pthread_mutex_lock(&hub->build_lock);
        pthread_mutex_lock(&hub->lock);
        hub->servers[hub->n_servers++] = hs;
        pthread_mutex_unlock(&hub->lock);
        pthread_mutex_unlock(&hub->build_lock);
    }
    rebuild(hub);
    return 0;
}

int mcp_hub_create(json_t *servers, size_t tools_max, mcp_hub_taken_fn taken, void *ctx,
                   struct mcp_hub **out, struct rx_error *err)
{
    struct mcp_config_entry *entries = NULL;
    struct mcp_hub *hub;
    size_t n = 0;
    int rc;

    if ((rc = mcp_config_parse(servers, &entries, &n, err)))
        return rc;
    hub = calloc(1, sizeof(*hub));
    if (!hub || !(hub->servers = calloc(n ? n : 1, sizeof(*hub->servers))) ||
        mcp_names_build(NULL, 0, NULL, NULL, &hub->table)) {
        if (hub)
            free(hub->servers);
        free(hub);
        mcp_config_free(entries, n);
        return rx_error_set(err, -ENOMEM, "mcpServers: out of memory");
    }
    pthread_mutex_init(&hub->lock, NULL);
    pthread_mutex_init(&hub->build_lock, NULL);
    hub->taken = taken;
    hub->ctx = ctx;
    hub->tools_max = tools_max;
    if ((rc = start_servers(hub, entries, n))) {
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
    /* Stopping joins each supervisor; another's change meanwhile must not
       rebuild from servers already stopped and released. */
    pthread_mutex_lock(&hub->build_lock);
    hub->closing = true;
    pthread_mutex_unlock(&hub->build_lock);
    stop_servers(hub->servers, hub->n_servers);
    mcp_names_unref(hub->table);
    free(hub->servers);
    pthread_mutex_destroy(&hub->build_lock);
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

int mcp_hub_reload(struct mcp_hub *hub, json_t *servers, size_t tools_max,
                   struct rx_error *err)
{
    struct mcp_config_entry *entries = NULL;
    struct mcp_names *table, *old_table;
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
    hub->tools_max = tools_max; /* for the servers started from now on */
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
        next[i].conf.server.tools_max = hub->tools_max;
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
    /* The names with the list, so no tool of a server on its way out is
       offered; calls and readers that hold the old table hold its servers. */
    pthread_mutex_lock(&hub->build_lock);
    table = NULL;
    if (build(hub, next, started, &table))
        table = NULL; /* the old names stay; their servers answer "stopping" */
    pthread_mutex_lock(&hub->lock);
    old = hub->servers;
    n_old = hub->n_servers;
    hub->servers = next;
    hub->n_servers = started;
    old_table = table ? hub->table : NULL;
    if (table)
        hub->table = table;
    pthread_mutex_unlock(&hub->lock);
    pthread_mutex_unlock(&hub->build_lock);
    mcp_names_unref(old_table);
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
    struct mcp_names *t = table_get(hub);
    bool has = mcp_names_find(t, name) != NULL;

    mcp_names_unref(t);
    return has;
}

int mcp_hub_schemas(struct mcp_hub *hub, json_t *arr)
{
    struct mcp_names *t = table_get(hub);
    int rc = 0;

    for (size_t i = 0; i < mcp_names_count(t) && !rc; i++) {
        const struct mcp_names_tool *ht = mcp_names_at(t, i);

        if (!ht->up)
            continue;
        rc = json_array_append_new(
                 arr, json_pack("{s:s, s:{s:s, s:O, s:O}}", "type", "function",
                                "function", "name", ht->name, "description",
                                json_object_get(ht->tool, "description"), "parameters",
                                json_object_get(ht->tool, "inputSchema")))
                 ? -ENOMEM
                 : 0;
    }
    mcp_names_unref(t);
    return rc;
}

static const char *status_name(enum mcp_status st)
{
    return st == MCP_UP ? "up" : st == MCP_STARTING ? "starting" : "down";
}

static int describe_tools(const struct mcp_names *t, json_t *tools)
{
    int rc = 0;

    for (size_t i = 0; i < mcp_names_count(t) && !rc; i++) {
        const struct mcp_names_tool *ht = mcp_names_at(t, i);
        char source[MCP_CONFIG_NAME_MAX + 8];

        snprintf(source, sizeof(source), "mcp:%s", mcp_server_name(ht->srv));
        rc = json_array_append_new(
                 tools,
                 json_pack("{s:s, s:O, s:O, s:s, s:s, s:O, s:s, s:b}", "name", ht->name,
                           "description", json_object_get(ht->tool, "description"),
                           "parameters", json_object_get(ht->tool, "inputSchema"),
                           "source", source, "policy", ht->policy, "annotations",
                           json_object_get(ht->tool, "annotations"), "tool",
                           json_string_value(json_object_get(ht->tool, "name")),
                           "available", ht->up))
                 ? -ENOMEM
                 : 0;
    }
    return rc;
}

/* One server of GET /tools: NEW, or NULL. */
static json_t *describe_server(const struct mcp_names *t, struct mcp_server *srv)
{
    struct mcp_server_info info;
    char warning[128] = "";

    mcp_server_info(srv, &info);
    if (info.status == MCP_UP && !mcp_names_saw_up(t, srv))
        info.status = MCP_STARTING; /* its tools are being named */
    if (info.skipped)
        snprintf(warning, sizeof(warning),
                 "%zu of its tools left out: no valid name or schema, or a NUL "
                 "(\\u0000) in a string",
                 info.skipped);
    return json_pack("{s:s, s:s, s:s, s:s?, s:I, s:s?, s:I, s:s?}", "name",
                     mcp_server_name(srv), "transport", info.transport, "status",
                     status_name(info.status), "error", info.error[0] ? info.error : NULL,
                     "tools", (json_int_t)mcp_names_of(t, srv), "protocol",
                     info.version[0] ? info.version : NULL, "skipped",
                     (json_int_t)info.skipped, "warning", warning[0] ? warning : NULL);
}

int mcp_hub_describe(struct mcp_hub *hub, json_t *tools, json_t *servers)
{
    struct mcp_names *t;
    struct mcp_server **srvs = NULL;
    size_t n;
    int rc;

    /* The names and the configured servers (each with a reference: a reload
       may stop them) taken together, as a reload swaps them together: the
       tools of a server just removed are never shown without it. */
    pthread_mutex_lock(&hub->lock);
    t = hub->table;
    mcp_names_ref(t);
    n = hub->n_servers;
    srvs = calloc(n ? n : 1, sizeof(*srvs));
    for (size_t i = 0; srvs && i < n; i++) {
        srvs[i] = hub->servers[i].srv;
        mcp_server_ref(srvs[i]);
    }
    pthread_mutex_unlock(&hub->lock);
    rc = tools ? describe_tools(t, tools) : 0;
    if (!srvs)
        rc = -ENOMEM;
    for (size_t i = 0; srvs && i < n; i++) {
        if (!rc && json_array_append_new(servers, describe_server(t, srvs[i])))
            rc = -ENOMEM;
        mcp_server_unref(srvs[i]);
    }
    free(srvs);
    mcp_names_unref(t);
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
    struct mcp_names *t = table_get(hub);
    struct mcp_server_info *info;
    struct mcp_server **srvs;
    size_t n;
    int rc = 0;

    pthread_mutex_lock(&hub->lock);
    n = hub->n_servers;
    info = calloc(n ? n : 1, sizeof(*info));
    srvs = calloc(n ? n : 1, sizeof(*srvs));
    for (size_t i = 0; info && srvs && i < n; i++) {
        srvs[i] = hub->servers[i].srv;
        mcp_server_ref(srvs[i]);
    }
    pthread_mutex_unlock(&hub->lock);
    if (!info || !srvs) {
        free(info);
        free(srvs);
        mcp_names_unref(t);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        mcp_server_info(srvs[i], &info[i]);
        info[i].tools = mcp_names_of(t, srvs[i]);
    }
    for (size_t f = 0; f < 4 && !rc; f++) {
        rc = rx_buf_puts(b, head[f]);
        for (size_t i = 0; i < n && !rc; i++) {
            const char *name = mcp_server_name(srvs[i]);

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
    for (size_t i = 0; i < n; i++)
        mcp_server_unref(srvs[i]);
    free(srvs);
    free(info);
    mcp_names_unref(t);
    return rc ? -ENOMEM : 0;
}

bool mcp_hub_idempotent(struct mcp_hub *hub, const char *name)
{
    struct mcp_names *t = table_get(hub);
    const struct mcp_names_tool *ht = mcp_names_find(t, name);
    bool idem = ht && ht->idempotent;

    mcp_names_unref(t);
    return idem;
}

const char *mcp_hub_policy(struct mcp_hub *hub, const char *name)
{
    struct mcp_names *t = table_get(hub);
    const struct mcp_names_tool *ht = mcp_names_find(t, name);
    const char *p = ht ? ht->policy : "auto";

    mcp_names_unref(t);
    return p;
}

int mcp_hub_call(struct mcp_hub *hub, const char *name, json_t *args, const char *key,
                 int cancel_fd, char **text, bool *is_error)
{
    struct mcp_names *t = table_get(hub);
    const struct mcp_names_tool *ht = mcp_names_find(t, name);
    struct mcp_server *srv = NULL;
    char *tool = NULL;
    int rc;

    if (ht) {
        srv = ht->srv;
        mcp_server_ref(srv);
        tool = strdup(json_string_value(json_object_get(ht->tool, "name")));
    }
    mcp_names_unref(t);
    if (!srv) {
        json_decref(args);
        return -ENOENT;
    }
    rc =
        tool ? mcp_server_call(srv, tool, args, key, cancel_fd, text, is_error) : -ENOMEM;
    if (!tool)
        json_decref(args);
    free(tool);
    mcp_server_unref(srv);
    return rc;
}
