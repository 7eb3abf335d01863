/*
 * rx_graph_sub - a compiled graph as a node of another (SPEC 8 subgraphs).
 * See rx_graph_add_subgraph in rx_graph.h.
 *
 * The node is an ordinary node function that invokes the subgraph. What
 * makes it a subgraph rather than a call is the checkpoint namespace and
 * the pause: sub's checkpoints go to a thread of their own, named after the
 * parent's thread and the task (whose id does not change while its step is
 * paused), so when the parent resumes, the node resumes sub from where it
 * paused instead of starting it again.
 */
#include "graph/rx_graph.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "graph/rx_graph_internal.h"

#define SUB_THREAD_LEN 512 /* parent thread, node name and task id */

/* The answer the parent's caller gave this task, if any (consumes it). */
static json_t *take_answer(struct rx_graph_task *t)
{
    if (!t->fresh || t->fresh_used)
        return NULL;
    t->fresh_used = true;
    t->calls++;
    return t->fresh;
}

/* What the parent's caller sees of sub's pause: the one value, or them all. */
static json_t *pause_value(json_t *interrupts)
{
    if (json_array_size(interrupts) == 1)
        return json_incref(json_object_get(json_array_get(interrupts, 0), "value"));
    return json_incref(interrupts);
}

static int subgraph_node(struct rx_graph_task *task, json_t *input, void *ctx,
                         json_t **update)
{
    const struct rx_graph *sub = ctx;
    const struct rx_graph_config *pc = task->run->cfg;
    struct rx_graph_config cfg = {0};
    struct rx_graph_result res = {0};
    struct rx_error err = {{0}};
    char thread[SUB_THREAD_LEN];
    json_t *answer = take_answer(task), *probe = NULL;
    int rc;

    if (pc && pc->checkpointer && pc->thread_id) {
        snprintf(thread, sizeof(thread), "%s|%s:%s", pc->thread_id,
                 rx_graph_task_node(task), rx_graph_task_id(task));
        cfg.checkpointer = pc->checkpointer;
        cfg.thread_id = thread;
        cfg.recursion_limit = pc->recursion_limit;
    }
    if (answer) {
        /* One pending interrupt in sub takes the answer; several, a resume_map. */
        rc = cfg.checkpointer ? rx_graph_get_state(sub, &cfg, &probe, &err) : -EINVAL;
        if (rc) {
            rx_graph_task_set_error(task, err.text[0] ? err.text : "nothing to resume");
            return rc;
        }
        if (json_array_size(json_object_get(probe, "interrupts")) > 1)
            cfg.resume_map = answer;
        else
            cfg.resume = answer;
        input = NULL;
    }
    rc = rx_graph_invoke(sub, input, &cfg, &res, &err);
    json_decref(probe);
    if (rc) {
        rx_graph_task_set_error(task, err.text);
        return rc;
    }
    if (res.interrupts) {
        /* sub paused: so does this node, and the caller's answer comes back here. */
        json_decref(task->interrupt);
        task->interrupt = pause_value(res.interrupts);
        rx_graph_result_release(&res);
        return task->interrupt ? -EINTR : -ENOMEM;
    }
    *update = res.state; /* sub's whole state, as LangGraph's output */
    return 0;
}

int rx_graph_add_subgraph(struct rx_graph *g, const char *name,
                          const struct rx_graph *sub)
{
    if (!g || !name || !sub || sub == g || !sub->compiled)
        return -EINVAL;
    return rx_graph_add_node(g, name, subgraph_node, (void *)sub);
}
