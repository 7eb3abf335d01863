/*
 * rx_graph_internal - what the files of rx_graph share. Private to graph/:
 * include it only from the rx_graph*.c files below, never from a header.
 *
 * One public API (graph/rx_graph.h), split by job:
 *   rx_graph.c        building: struct rx_graph, add_*, compile (names become
 *                     indices, rank gives the merge order)
 *   rx_graph_task.c   one run of a node: struct rx_graph_task, the calls a node
 *                     makes, a step's tasks on the worker pool, their merge order
 *   rx_graph_route.c  where a step goes next: struct rx_graph_route, edges,
 *                     routers and path maps, commands, Sends, joins
 *   rx_graph_run.c    invoke: struct rx_graph_run, supersteps, the merge through
 *                     the reducers, checkpoints, interrupt/resume, the recursion
 *                     limit, streaming
 *
 * Depends on state_machine/ and graph/ only (threads through rx_pool).
 * Invariants: once `compiled` is set, every index in an edge, join or branch
 * is a node index or RX_GRAPH_IDX_START/_END, node names are unique, and
 * nodes[i].rank is node i's position in name order; nothing in the graph
 * changes after that but `pool`, made once under pool_lock, and `ids` if
 * rx_graph_set_ids is called late.
 * Ownership: struct rx_graph owns every name string, its arrays and its pool;
 * node, router and checkpointer contexts and the schema are borrowed. A task
 * owns update, interrupt and route.items and borrows arg and resume. A run
 * owns the json_t it points at, as marked at each field.
 */
#ifndef RX_GRAPH_INTERNAL_H
#define RX_GRAPH_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "graph/rx_graph.h"
#include "graph/rx_pool.h"
#include "state_machine/rx_common.h"

/* What rx_graph_lookup returns besides a node index (>= 0). */
#define RX_GRAPH_IDX_START (-1)
#define RX_GRAPH_IDX_END   (-2)
#define RX_GRAPH_IDX_NONE  (-3) /* unknown, or not resolved yet */

struct rx_graph_node {
    char *name;
    rx_graph_node_fn fn;
    void *ctx;
    int rank; /* position in name order: the merge order */
};

struct rx_graph_edge {
    char *from, *to;
    int f, t; /* resolved by compile */
};

struct rx_graph_join {
    char **src; /* n source names */
    int *s;     /* their indices, resolved by compile */
    size_t n;
    char *to;
    int t;
};

struct rx_graph_branch {
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
    struct rx_graph_node *nodes;
    size_t nnodes, cnodes;
    struct rx_graph_edge *edges;
    size_t nedges, cedges;
    struct rx_graph_join *joins;
    size_t njoins, cjoins;
    struct rx_graph_branch *branches;
    size_t nbranches, cbranches;
    struct rx_pool *pool; /* made at the first step with several tasks */
    pthread_mutex_t pool_lock;
};

struct rx_graph_route {
    json_t *items; /* owned: [{"to":name}] or [{"node":name,"arg":v}] */
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

/*
 * One invoke. A run is a loop of supersteps over `next`, a JSON array of
 * {"node":n} (edge-triggered, one per node) and {"node":n,"arg":v} (Send)
 * entries. Keeping it as JSON makes a checkpoint nothing more than the state,
 * that list and the join progress, so resuming and forking are "load, then
 * run the loop".
 */
struct rx_graph_run {
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

/* rx_graph.c: a node's index, RX_GRAPH_IDX_START, _END, or _NONE when unknown. */
int rx_graph_lookup(const struct rx_graph *g, const char *name);

/*
 * rx_graph_task.c. Run every task not `done` (at once, on the graph's
 * workers, the first on this thread); each one's results land in its struct.
 */
void rx_graph_tasks_execute(struct rx_graph_task *t, size_t n);
/* Sort into merge order: node name, then the edge task, then Sends in order. */
void rx_graph_tasks_sort(struct rx_graph_task *t, size_t n);
/* Drop what t[0..n) own, then t itself (NULL is allowed). */
void rx_graph_tasks_release(struct rx_graph_task *t, size_t n);

/*
 * rx_graph_route.c. Each adds destinations to `next` (r->next or a list being
 * built) and returns 0, or a negative errno with r->err filled (but for
 * -ENOMEM); on error `next` and r->joins may hold part of the change.
 * route_into: the items of a command or a router (b: the branch whose path map
 * translates "to" names, or NULL).
 */
int rx_graph_route_into(struct rx_graph_run *r, json_t *next, json_t *items,
                        const struct rx_graph_branch *b) RX_WUR;
/*
 * Everything that leaves `src` (a node index or RX_GRAPH_IDX_START) after it
 * ran: its edges, its routers (run now, on r->state), its join progress.
 */
int rx_graph_route_follow(struct rx_graph_run *r, json_t *next, int src) RX_WUR;
/* Joins whose sources have all run fire once, and start over. */
int rx_graph_route_fire_joins(struct rx_graph_run *r, json_t *next) RX_WUR;

#endif
