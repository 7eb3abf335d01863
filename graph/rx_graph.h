/*
 * rx_graph - a StateGraph over JSON states with LangGraph's semantics
 * (seed 004, SPEC 8): nodes, edges from START and to END, conditional edges
 * (a router and an optional path map), join edges, Send, commands (goto plus
 * update), supersteps, a recursion limit, streaming, checkpoints with
 * interrupt/resume and forks.
 *
 * Depends on state_machine/ and graph/ only (no effects/ or server/ header);
 * no I/O, clock or globals. Threads come from rx_pool: the tasks of one
 * superstep run concurrently (a node may block on I/O). Each task sees the
 * state as of the step's start; the updates are merged through the schema's
 * reducers only when every task has finished, in a fixed order (node name,
 * then the edge-triggered task before Send tasks in Send order), whatever
 * order they finished in. Two writes to a last-value key in one step are an
 * error naming the key (LangGraph INVALID_CONCURRENT_GRAPH_UPDATE).
 *
 * Routing happens after the merge: routers see the merged state of the step,
 * siblings' writes included. A node triggered several times in one step by
 * edges runs once; each Send is its own task with its own input. Stricter
 * than LangGraph: a router, command or Send naming a node that is not in the
 * graph, or a router answer missing from its path map, fails the invoke.
 *
 * Lifecycle: rx_graph_create, set_ids and add_*, rx_graph_compile (after
 * which add_* returns -EBUSY), then any number of rx_graph_invoke. One graph
 * may be invoked from several threads at once: invoke changes nothing in it
 * but its worker pool, made once under a lock (a checkpointer they share must
 * be serialised by the caller, see rx_checkpoint.h).
 * Ownership: the schema passed to create, node/router contexts and the
 * checkpointer are borrowed and must outlive the graph or the invoke.
 * Names are copied. The graph owns its worker threads (rx_graph_destroy
 * waits for them to exit). Every json_t is described at its function.
 * Errors: 0 or a negative errno, with struct rx_error (NULL allowed)
 * naming the node or key.
 */
#ifndef RX_GRAPH_H
#define RX_GRAPH_H

#include <stddef.h>

#include <jansson.h>

#include "graph/rx_checkpoint.h"
#include "graph/rx_reducer.h"
#include "state_machine/rx_common.h"

#define RX_GRAPH_START           "__start__"
#define RX_GRAPH_END             "__end__"
#define RX_GRAPH_RECURSION_LIMIT 25 /* LangGraph's default */

struct rx_graph;
struct rx_graph_task;  /* one run of a node, handed to the node */
struct rx_graph_route; /* what a router fills in */

/*
 * A node. `input` (borrowed, read-only: other tasks read it concurrently) is
 * the state, or the Send's argument for a Send task. Set *update to a new
 * reference to a partial update (an object naming only the keys it writes)
 * or leave it NULL for none; the graph takes it over, also when the node
 * fails. Return 0, or a negative errno to fail the invoke (a positive value
 * fails it with -EIO). A command is an update plus rx_graph_task_goto/_send
 * calls.
 */
typedef int (*rx_graph_node_fn)(struct rx_graph_task *task, json_t *input, void *ctx,
                                json_t **update);

/*
 * A router of a conditional edge: read `state` (borrowed, merged state after
 * the source's step) and name destinations with rx_graph_route_to/_send;
 * `route` is valid only during the call. Naming none ends that path. 0, or
 * a negative errno to fail the invoke.
 */
typedef int (*rx_graph_router_fn)(json_t *state, void *ctx, struct rx_graph_route *route);

/*
 * The stream callback, after the input step and after each superstep that
 * did not pause. `step` is the checkpoint's step: 0 for the input of a new
 * thread, then counting on across invokes of the same thread. `updates` is
 * an array of {"node":name,"update":{...}} in merge order (the input step's
 * node is RX_GRAPH_START), `values` the state after the step; both borrowed.
 * Non-zero stops the invoke with -ECANCELED.
 */
typedef int (*rx_graph_step_fn)(void *ctx, int step, json_t *updates, json_t *values);

/*
 * A new graph whose keys merge through schema[0..n) (borrowed), or NULL.
 * Free it with rx_graph_destroy.
 */
struct rx_graph *rx_graph_create(const struct rx_reducer *schema, size_t n) RX_WUR;
/* Stops the graph's workers and frees it; no invoke may be running. NULL is allowed. */
void rx_graph_destroy(struct rx_graph *g);

/*
 * Ids for id-less messages in add_messages and patch_by_id keys; NULL goes
 * back to the default (libuuid). The struct is copied, ids->ctx borrowed.
 * Call it before invoking: it is not synchronised with running invokes.
 */
void rx_graph_set_ids(struct rx_graph *g, const struct rx_reducer_ids *ids);

/*
 * Building. These record what they are given; compile() validates names, so
 * a node may be named by an edge before it is added. 0, -EINVAL for a NULL
 * name or function (add_join: no sources; path_map: a key without its node),
 * -ENOMEM, or -EBUSY after compile; on error nothing is recorded.
 * path_map: NULL, or "key", "node", ... , NULL pairs that translate what the
 * router names.
 */
int rx_graph_add_node(struct rx_graph *g, const char *name, rx_graph_node_fn fn,
                      void *ctx) RX_WUR;
int rx_graph_add_edge(struct rx_graph *g, const char *from, const char *to) RX_WUR;
/* `to` runs once every one of sources[0..n) has finished (since it last ran). */
int rx_graph_add_join(struct rx_graph *g, const char *const *sources, size_t n,
                      const char *to) RX_WUR;
int rx_graph_add_conditional_edges(struct rx_graph *g, const char *from,
                                   rx_graph_router_fn router, void *ctx,
                                   const char *const *path_map) RX_WUR;

/*
 * Validate and freeze. 0 (also when already compiled), or -EINVAL with a
 * message naming the node for: no entry point (nothing leaves START), an
 * edge, join or path map naming an unknown node, a duplicate or reserved
 * (START, END, empty) node name, END as a source, START as a target or
 * among a join's sources. Not checked yet (SPEC 8 asks for both):
 * unreachable nodes, and node names equal to state keys.
 */
int rx_graph_compile(struct rx_graph *g, struct rx_error *err) RX_WUR;

/*
 * In a router: go to `dest` (a node, END, or a path-map key; copied).
 * 0, -EINVAL (dest NULL) or -ENOMEM. An unknown dest fails the invoke later.
 */
int rx_graph_route_to(struct rx_graph_route *route, const char *dest) RX_WUR;
/*
 * In a router: a Send task of `node` with input `arg` (stolen, even on error,
 * so a json_pack result may be passed straight in). 0, -EINVAL (node or arg
 * NULL) or -ENOMEM.
 */
int rx_graph_route_send(struct rx_graph_route *route, const char *node,
                        json_t *arg) RX_WUR;

/*
 * In a node: a command's goto (added to the node's edges) and Sends, with
 * the returns and ownership of rx_graph_route_to/_send.
 */
int rx_graph_task_goto(struct rx_graph_task *task, const char *node) RX_WUR;
int rx_graph_task_send(struct rx_graph_task *task, const char *node, json_t *arg) RX_WUR;
/*
 * In a node: pause the graph with `value` (stolen; NULL gives -ENOMEM, so a
 * json_pack result may be passed straight in). The first time, returns
 * -EINTR: the node must return at once (its update is dropped) and invoke
 * returns with the interrupt. When the caller resumes the thread with an
 * answer, the node runs again from its start and this returns 0 with
 * *answer (borrowed, valid until the node returns). One answer per resume:
 * every task of the paused step that had not finished runs again, and every
 * call in them returns that same answer (SPEC 8's answers in order, by
 * interrupt id, are not done yet).
 */
int rx_graph_task_interrupt(struct rx_graph_task *task, json_t *value,
                            json_t **answer) RX_WUR;
/* A message for the caller when the node fails (copied, cut to RX_ERR_LEN). */
void rx_graph_task_set_error(struct rx_graph_task *task, const char *text);
/*
 * The node's name (borrowed from the graph), and its Send index among the
 * step's Send tasks (-1 for an edge-triggered task).
 */
const char *rx_graph_task_node(const struct rx_graph_task *task);
int rx_graph_task_send_index(const struct rx_graph_task *task);
/* The reducer of `key` in the graph's schema (borrowed), or NULL (last value). */
const struct rx_reducer *rx_graph_task_reducer(const struct rx_graph_task *task,
                                               const char *key);

struct rx_graph_config {
    struct rx_checkpoint *checkpointer; /* NULL: no checkpoints */
    const char *thread_id;              /* with a checkpointer: the thread */
    const char *checkpoint_id;          /* NULL: the thread's newest; else fork from it */
    json_t *resume;                     /* borrowed: the answer to an interrupt */
    /* Supersteps per invoke, the input step not counted; 0: the default. */
    int recursion_limit;
    rx_graph_step_fn on_step;
    void *on_step_ctx;
};

struct rx_graph_result {
    json_t *state;      /* new reference: the state at the end */
    json_t *interrupts; /* new reference or NULL: [{"node":..,"value":..}] when paused */
    /* The thread's newest: the last one written, else the one loaded; "" without. */
    char checkpoint_id[RX_CHECKPOINT_ID_LEN];
    int steps; /* supersteps run by this invoke */
};

/*
 * Run the compiled graph. `input` (borrowed; NULL or JSON null for none) is
 * merged into the state through the reducers and the run starts at START.
 * Without input, a checkpointed thread continues from its newest checkpoint
 * (or cfg->checkpoint_id: a fork), rerunning what had not finished; with
 * cfg->resume it answers the pending interrupt (input is then ignored).
 * cfg may be NULL. A checkpoint is written after the input step, after each
 * superstep, and when a step pauses.
 * 0 with *res filled (release with rx_graph_result_release), also when the
 * run paused on an interrupt (res->interrupts set). Errors, *res untouched:
 * -ELOOP recursion limit; -EINVAL graph not compiled, concurrent write, bad
 * update, unknown destination, resume without a pending interrupt, no input
 * and nothing to continue, a checkpoint that does not fit the graph;
 * -ENOENT cfg->checkpoint_id not in the thread; -ECANCELED the stream
 * callback; a node's own error (-EIO for a positive one); a router's; the
 * checkpointer's; -ENOMEM.
 */
int rx_graph_invoke(const struct rx_graph *g, json_t *input,
                    const struct rx_graph_config *cfg, struct rx_graph_result *res,
                    struct rx_error *err) RX_WUR;
/* Drop res's references and set them to NULL; safe to call twice. */
void rx_graph_result_release(struct rx_graph_result *res);

#endif
