/*
 * rx_graph - see rx_graph.h.
 *
 * A run is a loop of supersteps over a "next" list, a JSON array of
 * {"node":n} (edge-triggered, one per node) and {"node":n,"arg":v} (Send)
 * entries. Keeping it as JSON makes a checkpoint nothing more than the state,
 * that list and the join progress, so resuming and forking are "load, then
 * run the loop".
 */
#include "graph/rx_graph.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "state_machine/rx_alloc.h"
#include "graph/rx_pool.h"

#define START_IDX (-1)
#define END_IDX   (-2)
#define NO_IDX    (-3)

struct gnode {
    char *name;
    rx_graph_node_fn fn;
    void *ctx;
    int rank; /* position in name order: the merge order */
};

struct gedge {
    char *from, *to;
    int f, t;
};

struct gjoin {
    char **src;
    int *s;
    size_t n;
    char *to;
    int t;
};

struct gbranch {
    char *from;
    int f;
    rx_graph_router_fn fn;
    void *ctx;
    char **map; /* key, node pairs */
    size_t nmap;
};

struct rx_graph {
    const struct rx_reducer *schema;
    size_t nschema;
    struct rx_reducer_ids ids;
    bool has_ids, compiled;
    struct gnode *nodes;
    size_t nnodes, cnodes;
    struct gedge *edges;
    size_t nedges, cedges;
    struct gjoin *joins;
    size_t njoins, cjoins;
    struct gbranch *branches;
    size_t nbranches, cbranches;
    struct rx_pool *pool; /* made at the first step with several tasks */
    pthread_mutex_t pool_lock;
};

struct rx_graph_route {
    json_t *items; /* [{"to":name}] or [{"node":name,"arg":v}] */
};

struct rx_graph_task {
    const struct rx_graph *g;
    int node;
    int send;    /* -1: edge-triggered */
    json_t *arg; /* borrowed: the input */
    json_t *resume;
    bool done; /* its result came from a checkpoint */
    /* The result. */
    int rc;
    json_t *update;
    json_t *interrupt;
    struct rx_graph_route route;
    char error[RX_ERR_LEN];
};

__attribute__((format(printf, 3, 4))) static int fail(struct rx_error *e, int code,
                                                      const char *fmt, ...)
{
    va_list ap;

    if (e) {
        va_start(ap, fmt);
        vsnprintf(e->text, sizeof(e->text), fmt, ap);
        va_end(ap);
    }
    return code;
}

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
    for (i = 0; i < g->nnodes; i++)
        rx_free(g->nodes[i].name);
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
    g->has_ids = ids != NULL;
    if (ids)
        g->ids = *ids;
}

int rx_graph_add_node(struct rx_graph *g, const char *name, rx_graph_node_fn fn,
                      void *ctx)
{
    char *copy;

    if (g->compiled)
        return -EBUSY;
    if (!name || !fn)
        return -EINVAL;
    copy = rx_strdup(name);
    if (!copy || grow((void **)&g->nodes, &g->cnodes, g->nnodes, sizeof(*g->nodes))) {
        rx_free(copy);
        return -ENOMEM;
    }
    g->nodes[g->nnodes++] = (struct gnode){copy, fn, ctx, 0};
    return 0;
}

int rx_graph_add_edge(struct rx_graph *g, const char *from, const char *to)
{
    char *f, *t;

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
    g->edges[g->nedges++] = (struct gedge){f, t, NO_IDX, NO_IDX};
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

int rx_graph_add_join(struct rx_graph *g, const char *const *sources, size_t n,
                      const char *to)
{
    struct gjoin j = {0};
    size_t i;

    if (g->compiled)
        return -EBUSY;
    if (!sources || !n || !to)
        return -EINVAL;
    for (i = 0; i < n; i++)
        if (!sources[i])
            return -EINVAL;
    j.n = n;
    j.t = NO_IDX;
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
    struct gbranch b = {0};

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
    b.f = NO_IDX;
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

/* A node's index, START_IDX, END_IDX, or NO_IDX when unknown. */
static int lookup(const struct rx_graph *g, const char *name)
{
    size_t i;

    if (!strcmp(name, RX_GRAPH_START))
        return START_IDX;
    if (!strcmp(name, RX_GRAPH_END))
        return END_IDX;
    for (i = 0; i < g->nnodes; i++)
        if (!strcmp(g->nodes[i].name, name))
            return (int)i;
    return NO_IDX;
}

static int resolve_source(const struct rx_graph *g, const char *name, int *out,
                          struct rx_error *err)
{
    int i = lookup(g, name);

    if (i == END_IDX)
        return fail(err, -EINVAL, "node '%s': END cannot be a source", name);
    if (i == NO_IDX)
        return fail(err, -EINVAL, "node '%s': edge from an unknown node", name);
    *out = i;
    return 0;
}

static int resolve_target(const struct rx_graph *g, const char *name, int *out,
                          struct rx_error *err)
{
    int i = lookup(g, name);

    if (i == START_IDX)
        return fail(err, -EINVAL, "node '%s': START cannot be a target", name);
    if (i == NO_IDX)
        return fail(err, -EINVAL, "node '%s': edge to an unknown node", name);
    *out = i;
    return 0;
}

int rx_graph_compile(struct rx_graph *g, struct rx_error *err)
{
    bool entry = false;
    size_t i, j;
    int rc, dummy;

    if (g->compiled)
        return 0;
    for (i = 0; i < g->nnodes; i++) {
        const char *n = g->nodes[i].name;

        if (!*n || !strcmp(n, RX_GRAPH_START) || !strcmp(n, RX_GRAPH_END))
            return fail(err, -EINVAL, "node '%s': the name is reserved", n);
        for (j = 0; j < i; j++)
            if (!strcmp(g->nodes[j].name, n))
                return fail(err, -EINVAL, "node '%s': added twice", n);
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
        entry |= g->edges[i].f == START_IDX;
    }
    for (i = 0; i < g->njoins; i++) {
        for (j = 0; j < g->joins[i].n; j++) {
            rc = resolve_source(g, g->joins[i].src[j], &g->joins[i].s[j], err);
            if (rc)
                return rc;
            if (g->joins[i].s[j] == START_IDX)
                return fail(err, -EINVAL, "node '%s': START cannot be joined",
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
        entry |= g->branches[i].f == START_IDX;
        for (j = 1; j < g->branches[i].nmap; j += 2) {
            rc = resolve_target(g, g->branches[i].map[j], &dummy, err);
            if (rc)
                return rc;
        }
    }
    if (!entry)
        return fail(err, -EINVAL, "graph has no entry point: add an edge from START");
    g->compiled = true;
    return 0;
}

int rx_graph_route_to(struct rx_graph_route *route, const char *dest)
{
    if (!dest)
        return -EINVAL;
    return json_array_append_new(route->items, json_pack("{s:s}", "to", dest)) ? -ENOMEM
                                                                               : 0;
}

int rx_graph_route_send(struct rx_graph_route *route, const char *node, json_t *arg)
{
    if (!node || !arg) {
        json_decref(arg);
        return -EINVAL;
    }
    return json_array_append_new(route->items,
                                 json_pack("{s:s,s:o}", "node", node, "arg", arg))
               ? -ENOMEM
               : 0;
}

int rx_graph_task_goto(struct rx_graph_task *task, const char *node)
{
    return rx_graph_route_to(&task->route, node);
}

int rx_graph_task_send(struct rx_graph_task *task, const char *node, json_t *arg)
{
    return rx_graph_route_send(&task->route, node, arg);
}

int rx_graph_task_interrupt(struct rx_graph_task *task, json_t *value, json_t **answer)
{
    if (task->resume) {
        json_decref(value);
        *answer = task->resume;
        return 0;
    }
    if (!value)
        return -ENOMEM;
    json_decref(task->interrupt);
    task->interrupt = value;
    return -EINTR;
}

void rx_graph_task_set_error(struct rx_graph_task *task, const char *text)
{
    snprintf(task->error, sizeof(task->error), "%s", text ? text : "");
}

const char *rx_graph_task_node(const struct rx_graph_task *task)
{
    return task->g->nodes[task->node].name;
}

int rx_graph_task_send_index(const struct rx_graph_task *task)
{
    return task->send;
}

const struct rx_reducer *rx_graph_task_reducer(const struct rx_graph_task *task,
                                               const char *key)
{
    return rx_reducer_find(task->g->schema, task->g->nschema, key);
}

/* ---- the executor ---- */

struct run {
    const struct rx_graph *g;
    const struct rx_graph_config *cfg;
    struct rx_error *err;
    const struct rx_reducer_ids *ids;
    json_t *state;   /* owned */
    json_t *next;    /* owned: the tasks of the coming step */
    json_t *joins;   /* owned: per join, {source: true} seen so far */
    json_t *pending; /* owned or NULL: per next entry, a finished result or null */
    json_t *updates; /* owned: this step's [{"node","update"}] */
    int step, steps;
    char last_id[RX_CHECKPOINT_ID_LEN];
};

static void *task_main(void *p)
{
    struct rx_graph_task *t = p;
    const struct gnode *n = &t->g->nodes[t->node];

    t->rc = n->fn(t, t->arg, n->ctx, &t->update);
    return NULL;
}

static int task_cmp(const void *a, const void *b)
{
    const struct rx_graph_task *x = a, *y = b;
    int rx = x->g->nodes[x->node].rank, ry = y->g->nodes[y->node].rank;

    if (rx != ry)
        return rx < ry ? -1 : 1;
    return (x->send > y->send) - (x->send < y->send);
}

static void tasks_release(struct rx_graph_task *t, size_t n)
{
    size_t i;

    for (i = 0; t && i < n; i++) {
        json_decref(t[i].update);
        json_decref(t[i].interrupt);
        json_decref(t[i].route.items);
    }
    rx_free(t);
}

/* Add a destination to `next`; an edge-triggered node is added once per step. */
static int next_add(struct run *r, json_t *next, const char *node, json_t *arg)
{
    json_t *e;
    size_t i;
    int idx = lookup(r->g, node);

    if (idx == END_IDX && !arg)
        return 0;
    if (idx < 0)
        return fail(r->err, -EINVAL, "node '%s': no such node to go to", node);
    if (!arg) {
        json_array_foreach(next, i, e)
        {
            if (!json_object_get(e, "arg") &&
                !strcmp(json_string_value(json_object_get(e, "node")), node))
                return 0;
        }
        return json_array_append_new(next, json_pack("{s:s}", "node", node)) ? -ENOMEM
                                                                             : 0;
    }
    return json_array_append_new(next, json_pack("{s:s,s:O}", "node", node, "arg", arg))
               ? -ENOMEM
               : 0;
}

/* Route entries (from a command or a router) into `next`. */
static int route_into(struct run *r, json_t *next, json_t *items, const struct gbranch *b)
{
    json_t *e;
    size_t i, k;
    const char *to;
    int rc;

    json_array_foreach(items, i, e)
    {
        to = json_string_value(json_object_get(e, "to"));
        if (!to) {
            rc = next_add(r, next, json_string_value(json_object_get(e, "node")),
                          json_object_get(e, "arg"));
            if (rc)
                return rc;
            continue;
        }
        if (b && b->nmap) {
            for (k = 0; k < b->nmap; k += 2)
                if (!strcmp(b->map[k], to))
                    break;
            if (k == b->nmap)
                return fail(
                    r->err, -EINVAL,
                    "node '%s': router returned '%s', which is not in its path map",
                    b->from, to);
            to = b->map[k + 1];
        }
        rc = next_add(r, next, to, NULL);
        if (rc)
            return rc;
    }
    return 0;
}

static int run_router(struct run *r, json_t *next, const struct gbranch *b)
{
    struct rx_graph_route route;
    int rc;

    route.items = json_array();
    if (!route.items)
        return -ENOMEM;
    rc = b->fn(r->state, b->ctx, &route);
    if (rc)
        rc = fail(r->err, rc, "node '%s': router failed (%s)", b->from, strerror(-rc));
    else
        rc = route_into(r, next, route.items, b);
    json_decref(route.items);
    return rc;
}

/* Everything that leaves `src` (an index, or START_IDX) after it ran. */
static int follow(struct run *r, json_t *next, int src)
{
    const struct rx_graph *g = r->g;
    size_t i, j;
    int rc;

    for (i = 0; i < g->nedges; i++) {
        if (g->edges[i].f != src)
            continue;
        rc = next_add(r, next, g->edges[i].to, NULL);
        if (rc)
            return rc;
    }
    for (i = 0; i < g->nbranches; i++) {
        if (g->branches[i].f != src)
            continue;
        rc = run_router(r, next, &g->branches[i]);
        if (rc)
            return rc;
    }
    for (i = 0; src >= 0 && i < g->njoins; i++) {
        for (j = 0; j < g->joins[i].n; j++) {
            if (g->joins[i].s[j] != src)
                continue;
            if (json_object_set_new(json_array_get(r->joins, i), g->joins[i].src[j],
                                    json_true()))
                return -ENOMEM;
        }
    }
    return 0;
}

/* Joins whose sources have all run fire once, and start over. */
static int fire_joins(struct run *r, json_t *next)
{
    size_t i;
    int rc;

    for (i = 0; i < r->g->njoins; i++) {
        json_t *seen = json_array_get(r->joins, i);
        size_t j;

        for (j = 0; j < r->g->joins[i].n; j++)
            if (!json_object_get(seen, r->g->joins[i].src[j]))
                break;
        if (j < r->g->joins[i].n)
            continue;
        json_object_clear(seen);
        rc = next_add(r, next, r->g->joins[i].to, NULL);
        if (rc)
            return rc;
    }
    return 0;
}

static int checkpoint(struct run *r, json_t *interrupts)
{
    const struct rx_graph_config *c = r->cfg;
    json_t *cp;
    int rc;

    if (!c || !c->checkpointer || !c->thread_id)
        return 0;
    cp = json_pack("{s:i,s:s?,s:O,s:O,s:O}", "step", r->step, "parent",
                   r->last_id[0] ? r->last_id : NULL, "state", r->state, "next", r->next,
                   "joins", r->joins);
    if (!cp)
        return -ENOMEM;
    if (interrupts && (json_object_set(cp, "interrupts", interrupts) ||
                       json_object_set(cp, "pending", r->pending))) {
        json_decref(cp);
        return -ENOMEM;
    }
    rc = rx_checkpoint_put(c->checkpointer, c->thread_id, cp, r->last_id);
    json_decref(cp);
    if (rc)
        return fail(r->err, rc, "thread '%s': cannot store a checkpoint (%s)",
                    c->thread_id, strerror(-rc));
    return 0;
}

static int stream(struct run *r)
{
    if (!r->cfg || !r->cfg->on_step)
        return 0;
    if (r->cfg->on_step(r->cfg->on_step_ctx, r->step, r->updates, r->state))
        return fail(r->err, -ECANCELED, "stopped by the stream callback at step %d",
                    r->step);
    return 0;
}

static void task_job(void *p)
{
    task_main(p);
}

/* The graph's pool, made on first use (a graph of single steps never needs one). */
static struct rx_pool *graph_pool(const struct rx_graph *cg)
{
    struct rx_graph *g = (struct rx_graph *)cg; /* the pool is not the graph's shape */
    struct rx_pool *p;

    pthread_mutex_lock(&g->pool_lock);
    if (!g->pool)
        g->pool = rx_pool_create();
    p = g->pool;
    pthread_mutex_unlock(&g->pool_lock);
    return p;
}

/* Run the tasks concurrently on the graph's workers; the first on this thread. */
static void execute(struct rx_graph_task *t, size_t n)
{
    struct rx_pool_job *jobs;
    struct rx_pool *pool;
    size_t i, k = 0;

    for (i = 0; i < n; i++)
        k += !t[i].done;
    if (k <= 1 || !(pool = graph_pool(t[0].g)) ||
        !(jobs = rx_malloc(k * sizeof(*jobs)))) {
        /* One task, or no pool to be had: still correct, only slower. */
        for (i = 0; i < n; i++)
            if (!t[i].done)
                task_main(&t[i]);
        return;
    }
    for (i = 0, k = 0; i < n; i++)
        if (!t[i].done)
            jobs[k++] = (struct rx_pool_job){.fn = task_job, .arg = &t[i]};
    if (rx_pool_run(pool, jobs, k)) {
        /* Fewer workers than tasks: the pool ran the rest on this thread. */
    }
    rx_free(jobs);
}

static int make_tasks(struct run *r, struct rx_graph_task **out, size_t *nout)
{
    size_t n = json_array_size(r->next), i;
    struct rx_graph_task *t;
    int sends = 0;
    json_t *e, *p;

    t = rx_malloc((n ? n : 1) * sizeof(*t));
    if (!t)
        return -ENOMEM;
    memset(t, 0, (n ? n : 1) * sizeof(*t));
    json_array_foreach(r->next, i, e)
    {
        t[i].g = r->g;
        t[i].node = lookup(r->g, json_string_value(json_object_get(e, "node")));
        if (t[i].node < 0) {
            tasks_release(t, i);
            return fail(r->err, -EINVAL, "node '%s': not in this graph",
                        json_string_value(json_object_get(e, "node")));
        }
        t[i].arg = json_object_get(e, "arg");
        t[i].send = t[i].arg ? sends++ : -1;
        if (!t[i].arg)
            t[i].arg = r->state;
        t[i].route.items = json_array();
        if (!t[i].route.items) {
            tasks_release(t, i + 1);
            return -ENOMEM;
        }
        p = r->pending ? json_array_get(r->pending, i) : NULL;
        if (json_is_object(p)) {
            /* Finished before an interrupt: keep its result, do not rerun. */
            t[i].done = true;
            t[i].update = json_incref(json_object_get(p, "update"));
            if (json_array_extend(t[i].route.items, json_object_get(p, "route"))) {
                tasks_release(t, i + 1);
                return -ENOMEM;
            }
        } else if (r->pending) {
            t[i].resume = r->cfg ? r->cfg->resume : NULL;
        }
    }
    *out = t;
    *nout = n;
    return 0;
}

/* The result of every task, in `next` order, for a checkpoint taken on an interrupt. */
static int save_interrupt(struct run *r, struct rx_graph_task *t, size_t n,
                          json_t **interrupts)
{
    json_t *ints = json_array(), *pend = json_array();
    size_t i;

    if (!ints || !pend)
        goto err_nomem;
    for (i = 0; i < n; i++) {
        if (t[i].interrupt) {
            if (json_array_append_new(ints, json_pack("{s:s,s:O}", "node",
                                                      rx_graph_task_node(&t[i]), "value",
                                                      t[i].interrupt)) ||
                json_array_append(pend, json_null()))
                goto err_nomem;
            continue;
        }
        if (json_array_append_new(pend, json_pack("{s:O?,s:O}", "update", t[i].update,
                                                  "route", t[i].route.items)))
            goto err_nomem;
    }
    json_decref(r->pending);
    r->pending = pend;
    *interrupts = ints;
    return 0;

err_nomem:
    json_decref(ints);
    json_decref(pend);
    return -ENOMEM;
}

/* The concurrent-write rule, then every update through the reducers, in order. */
static int merge_step(struct run *r, struct rx_graph_task *t, size_t n, json_t **merged)
{
    json_t *writers = json_object(), *st = json_copy(r->state), *w;
    struct rx_error rerr = {{0}};
    const char *key, *who;
    json_t *v;
    size_t i;
    int rc = -ENOMEM;

    if (!writers || !st)
        goto out_release;
    for (i = 0; i < n; i++) {
        if (!t[i].update)
            continue;
        who = rx_graph_task_node(&t[i]);
        if (!json_is_object(t[i].update)) {
            rc = fail(r->err, -EINVAL, "node '%s': the update is not an object", who);
            goto out_release;
        }
        json_object_foreach(t[i].update, key, v)
        {
            if (!rx_reducer_is_last_value(r->g->schema, r->g->nschema, key))
                continue;
            w = json_object_get(writers, key);
            if (w) {
                rc = fail(r->err, -EINVAL,
                          "key '%s': written by '%s' and '%s' in one step, but it keeps "
                          "only the last value (give it a reducer)",
                          key, json_string_value(w), who);
                goto out_release;
            }
            if (json_object_set_new(writers, key, json_string(who)))
                goto out_release;
        }
        rc =
            rx_reducer_merge(st, t[i].update, r->g->schema, r->g->nschema, r->ids, &rerr);
        if (rc) {
            fail(r->err, rc, "node '%s': %s", who, rerr.text);
            goto out_release;
        }
        if (json_array_append_new(
                r->updates, json_pack("{s:s,s:O}", "node", who, "update", t[i].update))) {
            rc = -ENOMEM;
            goto out_release;
        }
    }
    *merged = st;
    st = NULL;
    rc = 0;
out_release:
    json_decref(st);
    json_decref(writers);
    return rc;
}

static int superstep(struct run *r, json_t **interrupts)
{
    struct rx_graph_task *t = NULL;
    json_t *next = NULL, *merged = NULL;
    size_t n = 0, i;
    int rc;

    rc = make_tasks(r, &t, &n);
    if (rc)
        return rc;
    execute(t, n);
    /* In `next` order for the checkpoint; then sorted for a deterministic merge. */
    for (i = 0; i < n; i++)
        if (t[i].interrupt)
            break;
    if (i < n) {
        rc = save_interrupt(r, t, n, interrupts);
        if (!rc)
            rc = checkpoint(r, *interrupts);
        goto out_release_tasks;
    }
    qsort(t, n, sizeof(*t), task_cmp);
    for (i = 0; i < n; i++) {
        if (!t[i].rc)
            continue;
        rc = fail(r->err, t[i].rc, "node '%s' failed: %s", rx_graph_task_node(&t[i]),
                  t[i].error[0] ? t[i].error : strerror(-t[i].rc));
        if (rc >= 0)
            rc = -EIO; /* a node returned a positive value */
        goto out_release_tasks;
    }
    json_array_clear(r->updates);
    rc = merge_step(r, t, n, &merged);
    if (rc)
        goto out_release_tasks;
    json_decref(r->state);
    r->state = merged;
    json_decref(r->pending);
    r->pending = NULL;

    rc = -ENOMEM;
    next = json_array();
    if (!next)
        goto out_release_tasks;
    for (i = 0; i < n; i++) {
        rc = route_into(r, next, t[i].route.items, NULL);
        if (rc)
            goto out_release_next;
        /* Each node's edges are followed once, whatever its number of tasks. */
        if (i && t[i - 1].node == t[i].node)
            continue;
        rc = follow(r, next, t[i].node);
        if (rc)
            goto out_release_next;
    }
    rc = fire_joins(r, next);
    if (rc)
        goto out_release_next;
    json_decref(r->next);
    r->next = next;
    next = NULL;
    r->step++;
    r->steps++;
    rc = checkpoint(r, NULL);
    if (!rc)
        rc = stream(r);
out_release_next:
    json_decref(next);
out_release_tasks:
    tasks_release(t, n);
    return rc;
}

static int joins_init(struct run *r)
{
    size_t i;

    json_decref(r->joins);
    r->joins = json_array();
    if (!r->joins)
        return -ENOMEM;
    for (i = 0; i < r->g->njoins; i++)
        if (json_array_append_new(r->joins, json_object()))
            return -ENOMEM;
    return 0;
}

/* Start from a checkpoint, or from nothing. */
static int load(struct run *r, bool *continuing)
{
    const struct rx_graph_config *c = r->cfg;
    json_t *cp = NULL;
    int rc;

    *continuing = false;
    r->state = json_object();
    r->next = json_array();
    r->updates = json_array();
    if (!r->state || !r->next || !r->updates || joins_init(r))
        return -ENOMEM;
    if (!c || !c->checkpointer || !c->thread_id)
        return 0;
    rc = rx_checkpoint_get(c->checkpointer, c->thread_id, c->checkpoint_id, &cp);
    if (rc == -ENOENT && !c->checkpoint_id)
        return 0; /* a new thread */
    if (rc)
        return fail(r->err, rc, "thread '%s': no checkpoint '%s'", c->thread_id,
                    c->checkpoint_id ? c->checkpoint_id : "(newest)");
    if (!json_is_object(json_object_get(cp, "state")) ||
        !json_is_array(json_object_get(cp, "next")) ||
        json_array_size(json_object_get(cp, "joins")) != r->g->njoins) {
        json_decref(cp);
        return fail(r->err, -EINVAL, "thread '%s': checkpoint does not fit this graph",
                    c->thread_id);
    }
    json_decref(r->state);
    json_decref(r->next);
    json_decref(r->joins);
    r->state = json_incref(json_object_get(cp, "state"));
    r->next = json_incref(json_object_get(cp, "next"));
    r->joins = json_incref(json_object_get(cp, "joins"));
    if (json_object_get(cp, "interrupts"))
        r->pending = json_incref(json_object_get(cp, "pending"));
    r->step = (int)json_integer_value(json_object_get(cp, "step"));
    snprintf(r->last_id, sizeof(r->last_id), "%s",
             json_string_value(json_object_get(cp, "id")));
    json_decref(cp);
    *continuing = true;
    return 0;
}

/* The input step: merge the input, then follow START. */
static int start(struct run *r, json_t *input)
{
    struct rx_error rerr = {{0}};
    int rc;

    json_array_clear(r->next);
    json_decref(r->pending);
    r->pending = NULL;
    rc = joins_init(r);
    if (rc)
        return rc;
    rc = rx_reducer_merge(r->state, input, r->g->schema, r->g->nschema, r->ids, &rerr);
    if (rc)
        return fail(r->err, rc, "input: %s", rerr.text);
    rc = follow(r, r->next, START_IDX);
    if (rc)
        return rc;
    r->step = r->last_id[0] ? r->step + 1 : 0;
    if (json_array_append_new(
            r->updates, json_pack("{s:s,s:O}", "node", RX_GRAPH_START, "update", input)))
        return -ENOMEM;
    rc = checkpoint(r, NULL);
    if (!rc)
        rc = stream(r);
    return rc;
}

int rx_graph_invoke(const struct rx_graph *g, json_t *input,
                    const struct rx_graph_config *cfg, struct rx_graph_result *res,
                    struct rx_error *err)
{
    struct run r = {0};
    json_t *interrupts = NULL, *loaded;
    bool continuing;
    int rc, limit = cfg && cfg->recursion_limit > 0 ? cfg->recursion_limit
                                                    : RX_GRAPH_RECURSION_LIMIT;

    if (!g->compiled)
        return fail(err, -EINVAL, "graph is not compiled");
    if (err)
        err->text[0] = '\0';
    r.g = g;
    r.cfg = cfg;
    r.err = err;
    r.ids = g->has_ids ? &g->ids : NULL;
    rc = load(&r, &continuing);
    if (rc)
        goto out_release;
    /* A checkpoint's state is shared with the store's copy: merge into our own. */
    loaded = r.state;
    r.state = json_copy(loaded);
    json_decref(loaded);
    if (!r.state) {
        rc = -ENOMEM;
        goto out_release;
    }
    if (cfg && cfg->resume && !r.pending) {
        rc = fail(err, -EINVAL, "thread '%s': no interrupt to resume",
                  cfg->thread_id ? cfg->thread_id : "");
        goto out_release;
    }
    if (input && !json_is_null(input) && !(cfg && cfg->resume)) {
        rc = start(&r, input);
        if (rc)
            goto out_release;
    } else if (!continuing) {
        rc = fail(err, -EINVAL, "no input and no checkpoint to continue from");
        goto out_release;
    }
    while (json_array_size(r.next)) {
        if (r.steps >= limit) {
            rc = fail(
                err, -ELOOP,
                "recursion limit of %d steps reached without hitting END "
                "(next: '%s')",
                limit,
                json_string_value(json_object_get(json_array_get(r.next, 0), "node")));
            goto out_release;
        }
        rc = superstep(&r, &interrupts);
        if (rc || interrupts)
            break;
    }
    if (rc)
        goto out_release;
    res->state = r.state;
    r.state = NULL;
    res->interrupts = interrupts;
    interrupts = NULL;
    res->steps = r.steps;
    memcpy(res->checkpoint_id, r.last_id, sizeof(r.last_id));
out_release:
    if (rc == -ENOMEM && err && !err->text[0])
        fail(err, rc, "out of memory");
    json_decref(interrupts);
    json_decref(r.state);
    json_decref(r.next);
    json_decref(r.joins);
    json_decref(r.pending);
    json_decref(r.updates);
    return rc;
}

void rx_graph_result_release(struct rx_graph_result *res)
{
    json_decref(res->state);
    json_decref(res->interrupts);
    res->state = NULL;
    res->interrupts = NULL;
}
