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
#include "effects/mcp_rpc.h"
#include "effects/mcp_server.h"
#include "state_machine/rx_index.h"

struct hub_server {
    struct mcp_server *srv;       /* one reference */
    struct mcp_config_entry conf; /* its server part moved into srv */
};

/* One tool as the brains know it. */
struct hub_tool {
    char name[MCP_RPC_NAME_MAX + 1];
    struct mcp_server *srv; /* the table holds a reference (table_server) */
    json_t *tool;           /* the server's {"name","description","inputSchema",...} */
    const char *policy;     /* static string */
    bool up;
};

/* A server as the table saw it. */
struct table_server {
    struct mcp_server *srv; /* one reference: the table may outlive the hub's */
    size_t tools;           /* of its tools, those named here */
};

/*
 * The names, built anew after every change and never changed once
 * published: readers take a reference under the hub's lock and read it
 * without (a table grows with the servers' answers, the lock must not).
 */
struct hub_table {
    int refs; /* hub->lock */
    struct hub_tool *tools;
    size_t n, cap;
    struct rx_index index; /* name -> position in tools */
    struct table_server *servers;
    size_t n_servers;
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
    struct hub_server *servers;
    size_t n_servers;
    struct hub_table *table; /* never NULL once created */
};

/* ------------------------------------------------------------ the table */

static const char *tool_name_at(const void *list, size_t i)
{
    return ((const struct hub_tool *)list)[i].name;
}

static void table_free(struct hub_table *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n; i++)
        json_decref(t->tools[i].tool);
    for (size_t i = 0; i < t->n_servers; i++)
        mcp_server_unref(t->servers[i].srv);
    rx_index_release(&t->index);
    free(t->tools);
    free(t->servers);
    free(t);
}

/* The published table, with a reference for the caller (table_put). */
static struct hub_table *table_get(struct mcp_hub *hub)
{
    struct hub_table *t;

    pthread_mutex_lock(&hub->lock);
    t = hub->table;
    t->refs++;
    pthread_mutex_unlock(&hub->lock);
    return t;
}

static void table_put(struct mcp_hub *hub, struct hub_table *t)
{
    int left;

    if (!t)
        return;
    pthread_mutex_lock(&hub->lock);
    left = --t->refs;
    pthread_mutex_unlock(&hub->lock);
    if (!left)
        table_free(t);
}

static const struct hub_tool *table_find(const struct hub_table *t, const char *name)
{
    long i = name ? rx_index_find(&t->index, name, tool_name_at, t->tools) : -1;

    return i < 0 ? NULL : &t->tools[i];
}

/* Where the next suffix of a name that collided is tried: each duplicate
   starts where the last one of its name stopped, so naming stays linear. */
struct base_next {
    char base[MCP_RPC_NAME_MAX + 1];
    unsigned next;
};

struct naming {
    struct mcp_hub *hub;
    struct hub_table *t;
    struct base_next *bases;
    size_t n_bases, cap_bases;
    struct rx_index base_index;
};

static const char *base_at(const void *list, size_t i)
{
    return ((const struct base_next *)list)[i].base;
}

static bool name_taken(void *ctx, const char *name)
{
    struct naming *nm = ctx;

    return table_find(nm->t, name) ||
           (nm->hub->taken && nm->hub->taken(nm->hub->ctx, name));
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

/* Add the wanted tools of one server (build_lock held) to the table. */
static int add_server_tools(struct naming *nm, struct hub_server *hs)
{
    struct hub_table *t = nm->t;
    struct table_server *ts = &t->servers[t->n_servers];
    struct mcp_server_info info;
    json_t *list = mcp_server_tools(hs->srv), *tl;
    size_t i;
    int rc = 0;

    if (!list)
        return -ENOMEM;
    mcp_server_ref(hs->srv);
    ts->srv = hs->srv;
    ts->tools = 0;
    t->n_servers++;
    mcp_server_info(hs->srv, &info);
    if (t->n + json_array_size(list) > t->cap) {
        size_t cap = t->n + json_array_size(list);
        struct hub_tool *grown = realloc(t->tools, cap * sizeof(*grown));

        if (!grown || rx_index_reserve(&t->index, cap - t->n)) {
            if (grown)
                t->tools = grown;
            json_decref(list);
            return -ENOMEM;
        }
        t->tools = grown;
        t->cap = cap;
    }
    json_array_foreach(list, i, tl)
    {
        const char *tool = json_string_value(json_object_get(tl, "name"));
        struct hub_tool *ht = &t->tools[t->n];

        if (!tool || !mcp_config_tool_wanted(&hs->conf, tool))
            continue;
        memset(ht, 0, sizeof(*ht));
        rc = name_tool(nm, mcp_server_name(hs->srv), tool, ht->name);
        if (rc == -ENOMEM)
            break;
        if (rc) {
            log_warn("mcp %s: no unique name for its tool '%s'", mcp_server_name(hs->srv),
                     tool);
            rc = 0;
            continue;
        }
        ht->srv = hs->srv;
        ht->tool = json_incref(tl);
        ht->policy =
            mcp_config_policy(&hs->conf, tool, json_object_get(tl, "annotations"));
        ht->up = info.status == MCP_UP;
        rx_index_insert(&t->index, ht->name, t->n++);
        ts->tools++;
    }
    json_decref(list);
    return rc;
}

/*
 * Build the table anew from every server's list and publish it. The work
 * grows with the servers' answers, so it runs under build_lock only: the
 * hub's lock is taken to swap the pointer, for nothing else.
 */
static void rebuild(struct mcp_hub *hub)
{
    struct naming nm = {.hub = hub};
    struct hub_table *t, *old;
    int rc = -ENOMEM;

    pthread_mutex_lock(&hub->build_lock);
    rx_index_init(&nm.base_index);
    t = calloc(1, sizeof(*t));
    if (t) {
        rx_index_init(&t->index);
        t->refs = 1;
        t->servers = calloc(hub->n_servers ? hub->n_servers : 1, sizeof(*t->servers));
        rc = t->servers ? 0 : -ENOMEM;
    }
    nm.t = t;
    for (size_t i = 0; i < hub->n_servers && !rc; i++)
        rc = add_server_tools(&nm, &hub->servers[i]);
    rx_index_release(&nm.base_index);
    free(nm.bases);
    if (rc) { /* keep the old table rather than a partial one */
        table_free(t);
        pthread_mutex_unlock(&hub->build_lock);
        log_error("mcp: out of memory while naming tools");
        return;
    }
    pthread_mutex_lock(&hub->lock);
    old = hub->table;
    hub->table = t;
    pthread_mutex_unlock(&hub->lock);
    pthread_mutex_unlock(&hub->build_lock);
    table_put(hub, old);
}

static void on_changed(void *ctx)
{
    rebuild(ctx);
}

/* The tools of `srv` the table names (the config lets the agent use). */
static size_t tools_of(const struct hub_table *t, const struct mcp_server *srv)
{
    for (size_t i = 0; i < t->n_servers; i++)
        if (t->servers[i].srv == srv)
            return t->servers[i].tools;
    return 0;
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
        !(hub->table = calloc(1, sizeof(*hub->table)))) {
        if (hub)
            free(hub->servers);
        free(hub);
        mcp_config_free(entries, n);
        return rx_error_set(err, -ENOMEM, "mcpServers: out of memory");
    }
    hub->table->refs = 1;
    rx_index_init(&hub->table->index);
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
    /* Stopping joins each supervisor, whose last change may rebuild the
       table: the hub stays whole until every one has stopped. */
    stop_servers(hub->servers, hub->n_servers);
    table_put(hub, hub->table);
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
    pthread_mutex_lock(&hub->build_lock);
    pthread_mutex_lock(&hub->lock);
    old = hub->servers;
    n_old = hub->n_servers;
    hub->servers = next;
    hub->n_servers = started;
    pthread_mutex_unlock(&hub->lock);
    pthread_mutex_unlock(&hub->build_lock);
    /* The names with the list, so no tool of a server on its way out is
       offered; calls and readers that hold the old table hold its servers. */
    rebuild(hub);
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
    struct hub_table *t = table_get(hub);
    bool has = table_find(t, name) != NULL;

    table_put(hub, t);
    return has;
}

int mcp_hub_schemas(struct mcp_hub *hub, json_t *arr)
{
    struct hub_table *t = table_get(hub);
    int rc = 0;

    for (size_t i = 0; i < t->n && !rc; i++) {
        const struct hub_tool *ht = &t->tools[i];

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
    table_put(hub, t);
    return rc;
}

static const char *status_name(enum mcp_status st)
{
    return st == MCP_UP ? "up" : st == MCP_STARTING ? "starting" : "down";
}

static int describe_tools(const struct hub_table *t, json_t *tools)
{
    int rc = 0;

    for (size_t i = 0; i < t->n && !rc; i++) {
        const struct hub_tool *ht = &t->tools[i];
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
static json_t *describe_server(const struct hub_table *t, struct mcp_server *srv)
{
    struct mcp_server_info info;
    char warning[128] = "";

    mcp_server_info(srv, &info);
    if (info.skipped)
        snprintf(warning, sizeof(warning),
                 "%zu of its tools left out: no valid name or schema, or a NUL "
                 "(\\u0000) in a string",
                 info.skipped);
    return json_pack("{s:s, s:s, s:s, s:s?, s:I, s:s?, s:I, s:s?}", "name",
                     mcp_server_name(srv), "transport", info.transport, "status",
                     status_name(info.status), "error", info.error[0] ? info.error : NULL,
                     "tools", (json_int_t)tools_of(t, srv), "protocol",
                     info.version[0] ? info.version : NULL, "skipped",
                     (json_int_t)info.skipped, "warning", warning[0] ? warning : NULL);
}

int mcp_hub_describe(struct mcp_hub *hub, json_t *tools, json_t *servers)
{
    struct hub_table *t = table_get(hub);
    struct mcp_server **srvs = NULL;
    size_t n;
    int rc = tools ? describe_tools(t, tools) : 0;

    /* The configured servers, each with a reference: a reload may stop them. */
    pthread_mutex_lock(&hub->lock);
    n = hub->n_servers;
    srvs = calloc(n ? n : 1, sizeof(*srvs));
    for (size_t i = 0; srvs && i < n; i++) {
        srvs[i] = hub->servers[i].srv;
        mcp_server_ref(srvs[i]);
    }
    pthread_mutex_unlock(&hub->lock);
    if (!srvs)
        rc = -ENOMEM;
    for (size_t i = 0; srvs && i < n; i++) {
        if (!rc && json_array_append_new(servers, describe_server(t, srvs[i])))
            rc = -ENOMEM;
        mcp_server_unref(srvs[i]);
    }
    free(srvs);
    table_put(hub, t);
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
    struct hub_table *t = table_get(hub);
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
        table_put(hub, t);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        mcp_server_info(srvs[i], &info[i]);
        info[i].tools = tools_of(t, srvs[i]);
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
    table_put(hub, t);
    return rc ? -ENOMEM : 0;
}

const char *mcp_hub_policy(struct mcp_hub *hub, const char *name)
{
    struct hub_table *t = table_get(hub);
    const struct hub_tool *ht = table_find(t, name);
    const char *p = ht ? ht->policy : "auto";

    table_put(hub, t);
    return p;
}

int mcp_hub_call(struct mcp_hub *hub, const char *name, json_t *args, int cancel_fd,
                 char **text, bool *is_error)
{
    struct hub_table *t = table_get(hub);
    const struct hub_tool *ht = table_find(t, name);
    struct mcp_server *srv = NULL;
    char *tool = NULL;
    int rc;

    if (ht) {
        srv = ht->srv;
        mcp_server_ref(srv);
        tool = strdup(json_string_value(json_object_get(ht->tool, "name")));
    }
    table_put(hub, t);
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
