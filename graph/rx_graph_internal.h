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
 *                     the reducers, interrupt/resume and breakpoints, the
 *                     recursion limit, streaming
 *   rx_graph_load.c   a run's init/release, loading and storing checkpoints
 *   rx_graph_state.c  the state API: get_state, history, update_state
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
    int rank;    /* position in name order: the merge order */
    char **ends; /* where its commands may go (rx_graph_set_ends) */
    size_t nends;
    struct rx_graph_retry retry; /* max_attempts 0: none */
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

#define RX_GRAPH_TASK_ID_LEN 17 /* 16 hex digits and the NUL */

struct rx_graph_run;

struct rx_graph_task {
    const struct rx_graph *g;
    struct rx_graph_run *run; /* for the stream modes a node writes to */
    json_t *streamed;         /* owned or NULL: ids of messages it streamed */
    int step;                 /* the step it runs in, as get_state counts */
    int node;
    int send;    /* -1: edge-triggered */
    json_t *arg; /* borrowed: the input */
    /*
     * Interrupts. `answers` (borrowed, or NULL) are the answers this task
     * was given at earlier pauses of this step, returned in order by its
     * interrupt() calls; `fresh` (borrowed, or NULL) is the caller's new
     * answer, for the first call past them. `calls` counts the calls.
     */
    json_t *answers;
    json_t *fresh;
    size_t calls;
    bool fresh_used;
    char id[RX_GRAPH_TASK_ID_LEN]; /* also the id of its interrupt */
    size_t index;                  /* its place in the run's `next` */
    bool done;                     /* its result came from a checkpoint */
    /* The result. */
    int rc;
    json_t *update;
    json_t *interrupt; /* owned: the value it paused with */
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
    json_t *state;      /* owned */
    json_t *next;       /* owned: the tasks of the coming step */
    json_t *joins;      /* owned: per join, {source: true} seen so far */
    json_t *pending;    /* owned or NULL: per next entry, a finished result or null */
    json_t *updates;    /* owned: this step's [{"node","update"}] */
    json_t *ran;        /* owned: names of the nodes the last step ran */
    json_t *writes;     /* owned or NULL: {task id: result} stored before a crash */
    const char *source; /* what wrote the coming checkpoint: input, loop, update */
    int step, steps;
    char last_id[RX_CHECKPOINT_ID_LEN];
    char parent_id[RX_CHECKPOINT_ID_LEN]; /* of the loaded checkpoint */
    /* Nodes stream from worker threads: one chunk at a time, the first error kept. */
    pthread_mutex_t stream_lock;
    bool stream_lock_init;
    int stream_rc;
};

/*
 * rx_graph_load.c and rx_graph_state.c, shared with rx_graph_run.c. run_init: an empty
 * run of g (state {}, no next). run_load_cp: the run as checkpoint `cp` (borrowed) left
 * it; -EINVAL with r->err set when it does not fit the graph. run_load: the checkpoint
 * cfg names (newest when no id; *found false and 0 for a thread without one).
 * run_checkpoint: store the run as the thread's newest (interrupts: new reference or
 * NULL, kept in the checkpoint). run_values: the state with the writes of the tasks that
 * finished before a pause merged in, in merge order (a new reference). run_tasks: per
 * `next` entry, {"id","name","interrupts":[...]} (a new reference). run_release: drop
 * what r owns. run_joins_init: no join has seen a source.
 */
int rx_graph_run_init(struct rx_graph_run *r, const struct rx_graph *g,
                      const struct rx_graph_config *cfg, struct rx_error *err) RX_WUR;
int rx_graph_run_load_cp(struct rx_graph_run *r, json_t *cp) RX_WUR;
int rx_graph_run_load(struct rx_graph_run *r, bool *found) RX_WUR;
int rx_graph_run_checkpoint(struct rx_graph_run *r, json_t *interrupts) RX_WUR;
int rx_graph_run_values(struct rx_graph_run *r, json_t **out) RX_WUR;
int rx_graph_run_tasks(struct rx_graph_run *r, json_t **out) RX_WUR;
void rx_graph_run_release(struct rx_graph_run *r);
int rx_graph_run_joins_init(struct rx_graph_run *r) RX_WUR;
/*
 * rx_graph_run.c. make_tasks: a task per `next` entry, finished ones (before
 * a pause or a crash) marked done with their results; with `answer`, paused
 * ones get the caller's new answer. merge: the concurrent-write rule and the
 * updates of t[0..n) through the reducers into a copy of r->state (*merged,
 * new), each also appended to r->updates when that is not NULL.
 */
int rx_graph_run_make_tasks(struct rx_graph_run *r, bool answer,
                            struct rx_graph_task **out, size_t *nout) RX_WUR;
int rx_graph_run_merge(struct rx_graph_run *r, struct rx_graph_task *t, size_t n,
                       json_t **merged) RX_WUR;

/*
 * rx_graph_stream.c. emit: one chunk (borrowed) of `mode` to cfg->on_stream
 * when that mode was asked for, under the run's stream lock; a non-zero
 * answer is kept in r->stream_rc and returned as -ECANCELED. step: what a
 * finished step streams (updates in merge order, whole messages the tasks
 * did not stream as tokens, values), t[0..n) sorted. start: the values after
 * the input. pause: {"__interrupt__": interrupts} in updates mode.
 */
int rx_graph_stream_emit(struct rx_graph_run *r, unsigned mode, json_t *chunk) RX_WUR;
int rx_graph_stream_step(struct rx_graph_run *r, struct rx_graph_task *t,
                         size_t n) RX_WUR;
int rx_graph_stream_start(struct rx_graph_run *r) RX_WUR;
int rx_graph_stream_pause(struct rx_graph_run *r, json_t *interrupts) RX_WUR;

/*
 * rx_graph_task.c: a task's id (borrowed from the task), from its step,
 * node and place in `next`; the same for the same task of a paused step.
 */
const char *rx_graph_task_id(struct rx_graph_task *t);

/* rx_graph.c: a node's index, RX_GRAPH_IDX_START, _END, or _NONE when unknown. */
int rx_graph_lookup(const struct rx_graph *g, const char *name);

/*
 * rx_graph_task.c. Run every task not `done` (at once, on the graph's
 * workers, the first on this thread); each one's results land in its struct.
 */
void rx_graph_tasks_execute(struct rx_graph_task *t, size_t n);
/* Sort into merge order: edge-triggered tasks by node name, then Sends in order. */
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
 * ran: its edges, its routers, its join progress. Routers see `before` (the
 * state before the step, borrowed) with `own` (the task's own update,
 * borrowed, NULL for none) merged in, as LangGraph's do; a NULL `before`
 * means r->state as it is.
 */
int rx_graph_route_follow(struct rx_graph_run *r, json_t *next, int src, json_t *before,
                          json_t *own) RX_WUR;
/* Joins whose sources have all run fire once, and start over. */
int rx_graph_route_fire_joins(struct rx_graph_run *r, json_t *next) RX_WUR;

#endif
