/*
 * rx_graph - building a graph: create, add_*, compile. See rx_graph.h, and
 * rx_graph_internal.h for the files that run what is built here.
 *
 * Building only records names (an edge may name a node added later);
 * compile checks them all and resolves sources to indices once, so a run can
 * trust every name it follows, and ranks the nodes by name for the merge
 * order.
 */
#include "graph/rx_graph.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "graph/rx_graph_internal.h"
#include "graph/rx_pool.h"
#include "state_machine/rx_alloc.h"

/* Grow an array of `size`-byte items so one more fits. */
static int grow(void **p, size_t *cap, size_t len, size_t size)
{
    size_t ncap;
    void *q;

    if (len < *cap)
        return 0;
    ncap = *cap ? *cap * 2 : 4;
    q = rx_realloc(*p, *cap * size, ncap * size);
    if (!q)
        return -ENOMEM;
    *p = q;
    *cap = ncap;
    return 0;
}

struct rx_graph *rx_graph_create(const struct rx_reducer *schema, size_t n)
{
    struct rx_graph *g = rx_malloc(sizeof(*g));

    if (!g)
        return NULL;
    memset(g, 0, sizeof(*g));
    g->schema = schema;
    g->nschema = n;
    pthread_mutex_init(&g->pool_lock, NULL);
    return g;
}

static void free_strv(char **v, size_t n)
{
    size_t i;

    for (i = 0; v && i < n; i++)
        rx_free(v[i]);
    rx_free(v);
}

void rx_graph_destroy(struct rx_graph *g)
{
    size_t i;

    if (!g)
        return;
    rx_pool_destroy(g->pool);
    pthread_mutex_destroy(&g->pool_lock);
    for (i = 0; i < g->nnodes; i++) {
        rx_free(g->nodes[i].name);
        free_strv(g->nodes[i].ends, g->nodes[i].nends);
    }
    for (i = 0; i < g->nedges; i++) {
        rx_free(g->edges[i].from);
        rx_free(g->edges[i].to);
    }
    for (i = 0; i < g->njoins; i++) {
        free_strv(g->joins[i].src, g->joins[i].n);
        rx_free(g->joins[i].s);
        rx_free(g->joins[i].to);
    }
    for (i = 0; i < g->nbranches; i++) {
        rx_free(g->branches[i].from);
        free_strv(g->branches[i].map, g->branches[i].nmap);
    }
    rx_free(g->nodes);
    rx_free(g->edges);
    rx_free(g->joins);
    rx_free(g->branches);
    rx_free(g);
}

void rx_graph_set_ids(struct rx_graph *g, const struct rx_reducer_ids *ids)
{
    if (!g)
        return;
    g->has_ids = ids != NULL;
    if (ids)
        g->ids = *ids;
}

int rx_graph_add_node(struct rx_graph *g, const char *name, rx_graph_node_fn fn,
                      void *ctx)
{
    char *copy;

    if (!g)
        return -EINVAL;
    if (g->compiled)
        return -EBUSY;
    if (!name || !fn)
        return -EINVAL;
    copy = rx_strdup(name);
    if (!copy || grow((void **)&g->nodes, &g->cnodes, g->nnodes, sizeof(*g->nodes))) {
        rx_free(copy);
        return -ENOMEM;
    }
    g->nodes[g->nnodes++] = (struct rx_graph_node){copy, fn, ctx, 0, NULL, 0, {0}};
    return 0;
}

int rx_graph_add_edge(struct rx_graph *g, const char *from, const char *to)
{
    char *f, *t;

    if (!g)
        return -EINVAL;
    if (g->compiled)
        return -EBUSY;
    if (!from || !to)
        return -EINVAL;
    f = rx_strdup(from);
    t = rx_strdup(to);
    if (!f || !t || grow((void **)&g->edges, &g->cedges, g->nedges, sizeof(*g->edges))) {
        rx_free(f);
        rx_free(t);
        return -ENOMEM;
    }
    g->edges[g->nedges++] =
        (struct rx_graph_edge){f, t, RX_GRAPH_IDX_NONE, RX_GRAPH_IDX_NONE};
    return 0;
}

static char **dup_strv(const char *const *v, size_t n)
{
    char **d = rx_malloc((n ? n : 1) * sizeof(*d));
    size_t i;

    if (!d)
        return NULL;
    for (i = 0; i < n; i++) {
        d[i] = rx_strdup(v[i]);
        if (!d[i]) {
            free_strv(d, i);
            return NULL;
        }
    }
    return d;
}

int rx_graph_set_retry(struct rx_graph *g, const char *node,
                       const struct rx_graph_retry *policy)
{
    struct rx_graph_retry p = {0};
    size_t i;

    if (!g || !node)
        return -EINVAL;
    if (g->compiled)
        return -EBUSY;
    if (policy) {
        p = *policy;
        if (p.max_attempts < 0 || p.initial_interval < 0 || p.backoff_factor < 0 ||
            p.max_interval < 0)
            return -EINVAL;
        /* LangGraph's defaults (RetryPolicy in pregel/utils). */
        p.max_attempts = p.max_attempts ? p.max_attempts : 3;
        p.initial_interval = p.initial_interval ? p.initial_interval : 0.5;
        p.backoff_factor = p.backoff_factor ? p.backoff_factor : 2.0;
        p.max_interval = p.max_interval ? p.max_interval : 128.0;
    }
    for (i = 0; i < g->nnodes; i++) {
        if (!strcmp(g->nodes[i].name, node)) {
            g->nodes[i].retry = p;
            return 0;
        }
    }
    return -ENOENT;
}

int rx_graph_set_ends(struct rx_graph *g, const char *node, const char *const *ends)
{
    struct rx_graph_node *nd = NULL;
    char **copy;
    size_t i, n = 0;

    if (!g || !node || !ends)
        return -EINVAL;
    if (g->compiled)
        return -EBUSY;
    for (i = 0; i < g->nnodes; i++)
        if (!strcmp(g->nodes[i].name, node))
            nd = &g->nodes[i];
    if (!nd)
        return -ENOENT;
    while (ends[n])
        n++;
    copy = dup_strv(ends, n);
    if (!copy)
        return -ENOMEM;
    free_strv(nd->ends, nd->nends);
    nd->ends = copy;
    nd->nends = n;
    return 0;
}

int rx_graph_add_join(struct rx_graph *g, const char *const *sources, size_t n,
                      const char *to)
{
    struct rx_graph_join j = {0};
    size_t i;

    if (!g)
        return -EINVAL;
    if (g->compiled)
        return -EBUSY;
    if (!sources || !n || !to)
        return -EINVAL;
    for (i = 0; i < n; i++)
        if (!sources[i])
            return -EINVAL;
    j.n = n;
    j.t = RX_GRAPH_IDX_NONE;
    j.src = dup_strv(sources, n);
    j.s = rx_malloc(n * sizeof(*j.s));
    j.to = rx_strdup(to);
    if (!j.src || !j.s || !j.to ||
        grow((void **)&g->joins, &g->cjoins, g->njoins, sizeof(*g->joins))) {
        free_strv(j.src, j.src ? n : 0);
        rx_free(j.s);
        rx_free(j.to);
        return -ENOMEM;
    }
    g->joins[g->njoins++] = j;
    return 0;
}

int rx_graph_add_conditional_edges(struct rx_graph *g, const char *from,
                                   rx_graph_router_fn router, void *ctx,
                                   const char *const *path_map)
{
    struct rx_graph_branch b = {0};

    if (!g)
        return -EINVAL;
    if (g->compiled)
        return -EBUSY;
    if (!from || !router)
        return -EINVAL;
    while (path_map && path_map[b.nmap]) {
        if (!path_map[b.nmap + 1])
            return -EINVAL; /* a key without its node */
        b.nmap += 2;
    }
    b.from = rx_strdup(from);
    b.f = RX_GRAPH_IDX_NONE;
    b.fn = router;
    b.ctx = ctx;
    b.map = b.nmap ? dup_strv(path_map, b.nmap) : NULL;
    if (!b.from || (b.nmap && !b.map) ||
        grow((void **)&g->branches, &g->cbranches, g->nbranches, sizeof(*g->branches))) {
        rx_free(b.from);
        free_strv(b.map, b.map ? b.nmap : 0);
        return -ENOMEM;
    }
    g->branches[g->nbranches++] = b;
    return 0;
}

/* See rx_graph_internal.h. */
int rx_graph_lookup(const struct rx_graph *g, const char *name)
{
    size_t i;

    if (!strcmp(name, RX_GRAPH_START))
        return RX_GRAPH_IDX_START;
    if (!strcmp(name, RX_GRAPH_END))
        return RX_GRAPH_IDX_END;
    for (i = 0; i < g->nnodes; i++)
        if (!strcmp(g->nodes[i].name, name))
            return (int)i;
    return RX_GRAPH_IDX_NONE;
}

static int resolve_source(const struct rx_graph *g, const char *name, int *out,
                          struct rx_error *err)
{
    int i = rx_graph_lookup(g, name);

    if (i == RX_GRAPH_IDX_END)
        return rx_error_set(err, -EINVAL, "node '%s': END cannot be a source", name);
    if (i == RX_GRAPH_IDX_NONE)
        return rx_error_set(err, -EINVAL, "node '%s': edge from an unknown node", name);
    *out = i;
    return 0;
}

static int resolve_target(const struct rx_graph *g, const char *name, int *out,
                          struct rx_error *err)
{
    int i = rx_graph_lookup(g, name);

    if (i == RX_GRAPH_IDX_START)
        return rx_error_set(err, -EINVAL, "node '%s': START cannot be a target", name);
    if (i == RX_GRAPH_IDX_NONE)
        return rx_error_set(err, -EINVAL, "node '%s': edge to an unknown node", name);
    *out = i;
    return 0;
}

/* Is `node` named as a target by an edge, a join, a path map or declared ends? */
static bool is_target(const struct rx_graph *g, size_t node)
{
    const char *name = g->nodes[node].name;
    size_t i, j;

    for (i = 0; i < g->nedges; i++)
        if (g->edges[i].t == (int)node)
            return true;
    for (i = 0; i < g->njoins; i++)
        if (g->joins[i].t == (int)node)
            return true;
    for (i = 0; i < g->nbranches; i++) {
        /* A router without a path map may name any node but its own source. */
        if (!g->branches[i].nmap && g->branches[i].f != (int)node)
            return true;
        for (j = 1; j < g->branches[i].nmap; j += 2)
            if (!strcmp(g->branches[i].map[j], name))
                return true;
    }
    for (i = 0; i < g->nnodes; i++)
        for (j = 0; j < g->nodes[i].nends; j++)
            if (!strcmp(g->nodes[i].ends[j], name))
                return true;
    return false;
}

/*
 * LangGraph's two checks (graph.ts validate, state.ts addNode): every node
 * is the target of something, and no node shares its name with a state key.
 */
static int check_names_and_reach(const struct rx_graph *g, struct rx_error *err)
{
    size_t i;

    for (i = 0; i < g->nnodes; i++) {
        const char *n = g->nodes[i].name;

        if (rx_reducer_find(g->schema, g->nschema, n))
            return rx_error_set(err, -EINVAL,
                                "node '%s': the name is a state key, a node cannot "
                                "share it",
                                n);
        if (!is_target(g, i))
            return rx_error_set(err, -EINVAL,
                                "node '%s': not reachable (no edge, join, path map or "
                                "declared ends lead to it; a node a command goes to "
                                "needs rx_graph_set_ends)",
                                n);
    }
    return 0;
}

int rx_graph_compile(struct rx_graph *g, struct rx_error *err)
{
    bool entry = false;
    size_t i, j;
    int rc, dummy;

    if (!g)
        return rx_error_set(err, -EINVAL, "graph is NULL");
    if (g->compiled)
        return 0;
    for (i = 0; i < g->nnodes; i++) {
        const char *n = g->nodes[i].name;

        if (!*n || !strcmp(n, RX_GRAPH_START) || !strcmp(n, RX_GRAPH_END))
            return rx_error_set(err, -EINVAL, "node '%s': the name is reserved", n);
        for (j = 0; j < i; j++)
            if (!strcmp(g->nodes[j].name, n))
                return rx_error_set(err, -EINVAL, "node '%s': added twice", n);
        g->nodes[i].rank = 0;
        for (j = 0; j < g->nnodes; j++)
            if (strcmp(g->nodes[j].name, n) < 0)
                g->nodes[i].rank++;
    }
    for (i = 0; i < g->nedges; i++) {
        rc = resolve_source(g, g->edges[i].from, &g->edges[i].f, err);
        if (!rc)
            rc = resolve_target(g, g->edges[i].to, &g->edges[i].t, err);
        if (rc)
            return rc;
        entry |= g->edges[i].f == RX_GRAPH_IDX_START;
    }
    for (i = 0; i < g->njoins; i++) {
        for (j = 0; j < g->joins[i].n; j++) {
            rc = resolve_source(g, g->joins[i].src[j], &g->joins[i].s[j], err);
            if (rc)
                return rc;
            if (g->joins[i].s[j] == RX_GRAPH_IDX_START)
                return rx_error_set(err, -EINVAL, "node '%s': START cannot be joined",
                                    g->joins[i].to);
        }
        rc = resolve_target(g, g->joins[i].to, &g->joins[i].t, err);
        if (rc)
            return rc;
    }
    for (i = 0; i < g->nbranches; i++) {
        rc = resolve_source(g, g->branches[i].from, &g->branches[i].f, err);
        if (rc)
            return rc;
        entry |= g->branches[i].f == RX_GRAPH_IDX_START;
        for (j = 1; j < g->branches[i].nmap; j += 2) {
            rc = resolve_target(g, g->branches[i].map[j], &dummy, err);
            if (rc)
                return rc;
        }
    }
    if (!entry)
        return rx_error_set(err, -EINVAL,
                            "graph has no entry point: add an edge from START");
    for (i = 0; i < g->nnodes; i++) {
        for (j = 0; j < g->nodes[i].nends; j++) {
            rc = resolve_target(g, g->nodes[i].ends[j], &dummy, err);
            if (rc)
                return rc;
        }
    }
    rc = check_names_and_reach(g, err);
    if (rc)
        return rc;
    g->compiled = true;
    return 0;
}
