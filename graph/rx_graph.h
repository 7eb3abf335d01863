/*
 * rx_graph - a StateGraph over JSON states with LangGraph's semantics
 * (seed 004, SPEC 8): nodes, edges from START and to END, conditional edges
 * (a router and an optional path map), join edges, Send, commands (goto plus
 * update), supersteps, a recursion limit, stream modes, checkpoints with
 * interrupts (dynamic and static), the state API and forks, retry policies
 * and subgraphs.
 *
 * Depends on state_machine/ and graph/ only (no effects/ or server/ header);
 * no I/O (a checkpointer may do some), no globals; the only clock use is a
 * retry policy's sleep. Threads come from rx_pool: the tasks of one
 * superstep run concurrently (a node may block on I/O). Each task sees the
 * state as of the step's start; the updates are merged through the schema's
 * reducers only when every task has finished, in LangGraph's order (the
 * edge-triggered tasks by node name, then the Send tasks in the order they
 * were sent, whatever their node), whatever order they finished in. Two
 * writes to a last-value key in one step are an error naming the key
 * (LangGraph INVALID_CONCURRENT_GRAPH_UPDATE).
 *
 * Routing happens per task, after the merge: a task's routers see the state
 * before the step plus that task's own update, not its siblings' (as in
 * LangGraph, where a branch reads its node's fresh writes); every Send task
 * of a node with a router runs the router once. A node triggered several
 * times in one step by edges runs once; each Send is its own task with its
 * own input. Stricter than LangGraph: a router, command or Send naming a
 * node that is not in the graph, or a router answer missing from its path
 * map, fails the invoke.
 *
 * Lifecycle: rx_graph_create, set_ids and add_*, rx_graph_compile (after
 * which add_* returns -EBUSY), then any number of rx_graph_invoke. One graph
 * may be invoked from several threads at once: invoke changes nothing in it
 * but its worker pool, made once under a lock (checkpointers are
 * thread-safe, see rx_checkpoint.h; two invokes of one thread at once are
 * the caller's to avoid).
 * Ownership: the schema passed to create, node/router contexts and the
 * checkpointer are borrowed and must outlive the graph or the invoke.
 * Names are copied. The graph owns its worker threads (rx_graph_destroy
 * waits for them to exit). Every json_t is described at its function.
 * Errors: 0 or a negative errno, with struct rx_error (NULL allowed)
 * naming the node or key.
 */
#ifndef RX_GRAPH_H
#define RX_GRAPH_H

#include <stdbool.h>
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
 * A router of a conditional edge: read `state` (borrowed: the state before
 * the step with the source task's own update merged in) and name destinations with
 * rx_graph_route_to/_send; `route` is valid only during the call. Naming none ends that
 * path. 0, or a negative errno to fail the invoke.
 */
typedef int (*rx_graph_router_fn)(json_t *state, void *ctx, struct rx_graph_route *route);

/* Stream modes (LangGraph's streamMode), or-ed into rx_graph_config.stream_mode. */
#define RX_GRAPH_STREAM_VALUES   (1u << 0) /* the whole state after each step */
#define RX_GRAPH_STREAM_UPDATES  (1u << 1) /* {node: update} per task of a step */
#define RX_GRAPH_STREAM_CUSTOM   (1u << 2) /* what nodes write (rx_graph_task_write) */
#define RX_GRAPH_STREAM_MESSAGES (1u << 3) /* [message chunk, metadata] */

/*
 * A stream-mode callback: `mode` is "values", "updates", "custom" or
 * "messages", `chunk` (borrowed) its payload, as LangGraph shapes it:
 * - values: the state after the input and after each step that did not pause;
 * - updates: {"node": update-or-null} per task of a finished step, in merge
 *   order (LangGraph sends them as tasks finish; here the order is fixed),
 *   and {"__interrupt__": [...]} when the run pauses;
 * - custom: what a node passed to rx_graph_task_write, as it writes it;
 * - messages: [chunk, {"langgraph_node", "langgraph_step"}] for each token
 *   chunk a node passes to rx_graph_task_stream_message, then, when the
 *   step ends, each message of the node's add_messages update whose id it
 *   did not stream.
 * custom and messages chunks come from the worker threads that run nodes,
 * never two at once. Non-zero stops the invoke with -ECANCELED.
 */
typedef int (*rx_graph_stream_fn)(void *ctx, const char *mode, json_t *chunk);

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
 * Where the commands of `node` (rx_graph_task_goto/_send) may go: the
 * NULL-terminated `ends` (copied; END allowed), LangGraph's
 * addNode(..., {ends}). Only compile's reachability check reads them; a
 * command may still go anywhere. Replaces earlier ends. 0, -EINVAL (a NULL
 * argument), -ENOENT (no such node added yet), -ENOMEM, -EBUSY.
 */
int rx_graph_set_ends(struct rx_graph *g, const char *node,
                      const char *const *ends) RX_WUR;

/*
 * LangGraph's RetryPolicy for one node: when a run of the node fails and
 * retry_on says so, run it again (from its start, its earlier writes
 * dropped) after min(max_interval, initial_interval * backoff_factor^(n-1))
 * seconds for the n-th retry, plus up to 1 s of jitter, until max_attempts
 * runs in all. A zero field takes LangGraph's default: 3 attempts, 0.5 s,
 * factor 2, 128 s (jitter is off unless set). retry_on NULL: every error
 * but -ECANCELED, -EINVAL and -ENOMEM (LangGraph retries all but
 * cancellations and value errors). A pause (interrupt) is never retried.
 */
struct rx_graph_retry {
    int max_attempts;
    double initial_interval, backoff_factor, max_interval; /* seconds */
    bool jitter;
    bool (*retry_on)(int rc, void *ctx);
    void *retry_ctx;
};

/*
 * A compiled graph `sub` (borrowed; it must outlive g) as node `name`
 * (LangGraph's addNode(name, compiledSubgraph)). The node invokes sub with
 * its input (the state, or a Send's argument); sub's whole final state is
 * the node's update, merged through g's reducers (as in LangGraph: share
 * add_messages keys, or keys sub only reads, since an append key would get
 * sub's whole list again). With a checkpointer, sub keeps its checkpoints
 * in its own namespace, thread "<thread>|<name>:<task id>", stable across
 * resumes of the same step. When sub pauses, the node pauses with it: the
 * caller sees one interrupt from `name` whose value is sub's interrupt value
 * (or the array of sub's interrupts, when several), and resuming the caller
 * resumes sub from its checkpoint with that answer (with several, the
 * answer is sub's resume_map). Streams of sub are not passed on.
 * 0, -EINVAL (a NULL argument, sub not compiled, sub == g), -ENOMEM, -EBUSY.
 */
int rx_graph_add_subgraph(struct rx_graph *g, const char *name,
                          const struct rx_graph *sub) RX_WUR;

/*
 * Give `node` a retry policy (copied; NULL removes it). 0, -EINVAL (g or
 * node NULL, a negative field), -ENOENT (no such node added yet), -EBUSY
 * after compile.
 */
int rx_graph_set_retry(struct rx_graph *g, const char *node,
                       const struct rx_graph_retry *policy) RX_WUR;

/*
 * Validate and freeze. 0 (also when already compiled), or -EINVAL with a
 * message naming the node for: no entry point (nothing leaves START), an
 * edge, join, path map or ends naming an unknown node, a duplicate or
 * reserved (START, END, empty) node name, END as a source, START as a
 * target or among a join's sources; and, as LangGraph: a node name that is
 * a key of the schema, and a node nothing can reach (no edge, join, path
 * map or ends names it; a router without a path map reaches every node but
 * its source). -EINVAL for a NULL g.
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
 * In a node: LangGraph's interrupt(). Pause the graph with `value` (stolen;
 * NULL gives -ENOMEM, so a json_pack result may be passed straight in):
 * returns -EINTR, the node must return at once (what it wrote is dropped)
 * and invoke returns with the interrupt. A resume runs the node again from
 * its start, and its calls return, in order, the answers it was given at
 * earlier pauses of this step, then the caller's new answer (0 with
 * *answer borrowed, valid until the node returns); the call after that
 * pauses again. So a node that asks twice pauses twice. Tasks of the
 * paused step that finished are not run again. -EINVAL for NULL task or
 * answer (value is still dropped).
 */
int rx_graph_task_interrupt(struct rx_graph_task *task, json_t *value,
                            json_t **answer) RX_WUR;
/*
 * In a node: LangGraph's stream writer. write: a "custom" chunk;
 * stream_message: a token chunk of a message ("messages" mode; its "id", if
 * any, marks the message as streamed so the step's end does not send it
 * whole). `chunk` is stolen, even on error. 0 (also when that mode was not
 * asked for), -EINVAL (task or chunk NULL), -ECANCELED (the callback asked
 * to stop: return it), -ENOMEM.
 */
int rx_graph_task_write(struct rx_graph_task *task, json_t *chunk) RX_WUR;
int rx_graph_task_stream_message(struct rx_graph_task *task, json_t *chunk) RX_WUR;

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
    /*
     * Borrowed: the answer to the one pending interrupt (-EINVAL when
     * several are pending), or resume_map: {interrupt id: answer}, for
     * parallel interrupts (LangGraph's Command({resume: {id: v}})); a paused
     * task without an answer in it pauses again.
     */
    json_t *resume;
    json_t *resume_map;
    /*
     * Static breakpoints: NULL-terminated node names ("*": all), or NULL.
     * Before a step that would run one of interrupt_before, after a step
     * that ran one of interrupt_after, invoke returns with interrupts = []
     * (the state as checkpointed). An invoke without input continues past
     * the breakpoint it stopped at, as in LangGraph.
     */
    const char *const *interrupt_before;
    const char *const *interrupt_after;
    /*
     * 0: the default. Counted as LangGraph counts it: with input, its input
     * checkpoint and START node take a step each, so a run of `limit` node
     * steps fails (a 3-node chain with limit 3; 4 is enough); a resumed or
     * continued run fails at step limit + 2. -ELOOP after that step ran and
     * was checkpointed, even when nothing follows it (as in LangGraph).
     */
    int recursion_limit;
    rx_graph_step_fn on_step;
    void *on_step_ctx;
    /* Stream modes: RX_GRAPH_STREAM_* bits, delivered to on_stream. */
    unsigned stream_mode;
    rx_graph_stream_fn on_stream;
    void *on_stream_ctx;
};

struct rx_graph_result {
    /*
     * New reference: the state at the end; when paused by interrupt(), with
     * the writes of the step's tasks that finished merged in.
     */
    json_t *state;
    /*
     * New reference, or NULL when the run ended: when paused,
     * [{"id","node","value"}] per interrupt() (ids for resume_map), [] at a
     * static breakpoint.
     */
    json_t *interrupts;
    /* The thread's newest: the last one written, else the one loaded; "" without. */
    char checkpoint_id[RX_CHECKPOINT_ID_LEN];
    int steps; /* supersteps run by this invoke */
};

/*
 * Run the compiled graph. `input` (borrowed; NULL or JSON null for none) is
 * merged into the state through the reducers and the run starts at START.
 * Without input, a checkpointed thread continues from its newest checkpoint
 * (or cfg->checkpoint_id: a fork), rerunning what had not finished; with
 * cfg->resume or resume_map it answers the pending interrupts (input is
 * then ignored).
 * cfg may be NULL. A checkpoint is written after the input step, after each
 * superstep, and when a step pauses.
 * 0 with *res filled (release with rx_graph_result_release), also when the
 * run paused on an interrupt (res->interrupts set). Errors, *res untouched:
 * -ELOOP recursion limit; -EINVAL g or res NULL, graph not compiled,
 * concurrent write, bad update, unknown destination, resume without a
 * pending interrupt, one resume for several interrupts, a resume_map id
 * not pending, no input and nothing to continue, a corrupt checkpoint or
 * one that does not fit the graph;
 * -ENOENT cfg->checkpoint_id not in the thread; -ECANCELED the stream
 * callback; a node's own error (-EIO for a positive one); a router's; the
 * checkpointer's; -ENOMEM.
 */
int rx_graph_invoke(const struct rx_graph *g, json_t *input,
                    const struct rx_graph_config *cfg, struct rx_graph_result *res,
                    struct rx_error *err) RX_WUR;
/* Drop res's references and set them to NULL; safe to call twice. */
void rx_graph_result_release(struct rx_graph_result *res);

/*
 * The state API (LangGraph's getState, getStateHistory, updateState), on
 * the thread of cfg (a checkpointer and thread_id are required).
 *
 * get_state: *out (a new reference) is the snapshot of cfg->checkpoint_id,
 * or of the thread's newest checkpoint:
 *   {"values": the state (a paused step's finished writes merged in),
 *    "next": [node names of the coming step's tasks, Sends included],
 *    "tasks": [{"id","name","interrupts":[{"id","value"}],"done":bool}],
 *    "interrupts": every pending interrupt, "checkpoint_id", "parent_checkpoint_id"
 *    (null for the first), "metadata": {"step","source":"input"|"loop"|"update",
 *    "ran": [nodes the step ran]}}.
 * A thread without checkpoints gives an empty snapshot (values {}, ids null).
 * get_state_history: *out (new) is the array of every snapshot of the
 * thread, newest first ([] for an unknown thread).
 * update_state: merge `values` (borrowed; an object, or NULL/null for no
 * write) through the reducers as if node `as_node` had written it, and
 * store the result as a new checkpoint whose parent is the one loaded (the
 * newest, or cfg->checkpoint_id: a fork). What follows is what follows that
 * node: its edges, its routers (seeing the state before plus `values`), its
 * joins; as_node START treats values as input, END leaves nothing to run.
 * as_node NULL: START for a thread without checkpoints, else the one node
 * the last step ran (more than one: -EINVAL, ambiguous, as in LangGraph).
 * A pending pause is dropped; the paused step's finished writes are kept.
 * The new checkpoint's id goes to id_out (may be NULL); invoke with no
 * input then continues from it.
 * All three: 0, or -EINVAL (a NULL argument, no checkpointer or thread,
 * graph not compiled, an unknown as_node, values not an object, a corrupt
 * checkpoint), -ENOENT (cfg->checkpoint_id not in the thread), a reducer's
 * or router's error, the checkpointer's, -ENOMEM; err says which. *out and
 * the store are unchanged on error.
 */
int rx_graph_get_state(const struct rx_graph *g, const struct rx_graph_config *cfg,
                       json_t **out, struct rx_error *err) RX_WUR;
int rx_graph_get_state_history(const struct rx_graph *g,
                               const struct rx_graph_config *cfg, json_t **out,
                               struct rx_error *err) RX_WUR;
int rx_graph_update_state(const struct rx_graph *g, const struct rx_graph_config *cfg,
                          json_t *values, const char *as_node,
                          char id_out[RX_CHECKPOINT_ID_LEN], struct rx_error *err) RX_WUR;

#endif
