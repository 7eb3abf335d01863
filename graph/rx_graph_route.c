/*
 * rx_graph_route - where a superstep goes next: what routers and commands
 * name (struct rx_graph_route), path maps, Sends, plain edges and joins,
 * all added to the run's "next" list. See rx_graph.h and rx_graph_internal.h.
 *
 * Stricter than LangGraph (SPEC 8): a destination that is not a node of the
 * graph, or a router's answer missing from its path map, fails the invoke.
 */
#include "graph/rx_graph.h"

#include <errno.h>
#include <string.h>

#include "graph/rx_graph_internal.h"

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

/* Add a destination to `next`; an edge-triggered node is added once per step. */
static int next_add(struct rx_graph_run *r, json_t *next, const char *node, json_t *arg)
{
    json_t *e;
    size_t i;
    int idx = rx_graph_lookup(r->g, node);

    if (idx == RX_GRAPH_IDX_END && !arg)
        return 0;
    if (idx < 0)
        return rx_error_set(r->err, -EINVAL, "node '%s': no such node to go to", node);
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
int rx_graph_route_into(struct rx_graph_run *r, json_t *next, json_t *items,
                        const struct rx_graph_branch *b)
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
                return rx_error_set(
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

static int run_router(struct rx_graph_run *r, json_t *next,
                      const struct rx_graph_branch *b, json_t *view)
{
    struct rx_graph_route route;
    int rc;

    route.items = json_array();
    if (!route.items)
        return -ENOMEM;
    rc = b->fn(view, b->ctx, &route);
    if (rc)
        rc = rx_error_set(r->err, rc, "node '%s': router failed (%s)", b->from,
                          strerror(-rc));
    else
        rc = rx_graph_route_into(r, next, route.items, b);
    json_decref(route.items);
    return rc;
}

/*
 * What a router of `src` reads: the state before the step with only this
 * task's update merged in (LangGraph's fresh read of the task's own writes),
 * not its siblings'. A new reference.
 */
static int router_view(struct rx_graph_run *r, json_t *before, json_t *own, json_t **view)
{
    struct rx_error rerr = {{0}};
    json_t *v;
    int rc;

    if (!before) {
        *view = json_incref(r->state);
        return 0;
    }
    v = json_copy(before);
    if (!v)
        return -ENOMEM;
    if (own) {
        rc = rx_reducer_merge(v, own, r->g->schema, r->g->nschema, r->ids, &rerr);
        if (rc) {
            json_decref(v);
            return rx_error_set(r->err, rc, "router input: %s", rerr.text);
        }
    }
    *view = v;
    return 0;
}

/* Edges, routers, then join progress: the order a step's next list is built in. */
int rx_graph_route_follow(struct rx_graph_run *r, json_t *next, int src, json_t *before,
                          json_t *own)
{
    const struct rx_graph *g = r->g;
    json_t *view = NULL;
    size_t i, j;
    int rc = 0;

    for (i = 0; i < g->nedges; i++) {
        if (g->edges[i].f != src)
            continue;
        rc = next_add(r, next, g->edges[i].to, NULL);
        if (rc)
            goto out_release;
    }
    for (i = 0; i < g->nbranches; i++) {
        if (g->branches[i].f != src)
            continue;
        if (!view) {
            rc = router_view(r, before, own, &view);
            if (rc)
                goto out_release;
        }
        rc = run_router(r, next, &g->branches[i], view);
        if (rc)
            goto out_release;
    }
    for (i = 0; src >= 0 && i < g->njoins; i++) {
        for (j = 0; j < g->joins[i].n; j++) {
            if (g->joins[i].s[j] != src)
                continue;
            if (json_object_set_new(json_array_get(r->joins, i), g->joins[i].src[j],
                                    json_true())) {
                rc = -ENOMEM;
                goto out_release;
            }
        }
    }
out_release:
    json_decref(view);
    return rc;
}

/* Joins whose sources have all run fire once, and start over. */
int rx_graph_route_fire_joins(struct rx_graph_run *r, json_t *next)
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
