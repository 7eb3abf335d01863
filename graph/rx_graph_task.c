/*
 * rx_graph_task - one run of a node: the calls a node makes (commands,
 * interrupts, its name), and running a superstep's tasks on the graph's
 * worker pool. See rx_graph.h and rx_graph_internal.h.
 *
 * A task writes only to its own struct, so tasks of one step need no lock
 * between them; the run reads the results once every task has returned.
 */
#include "graph/rx_graph.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "graph/rx_graph_internal.h"
#include "graph/rx_pool.h"
#include "state_machine/rx_alloc.h"

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

/* A job of the pool: call the node; everything it returns stays in its task. */
static void task_job(void *p)
{
    struct rx_graph_task *t = p;
    const struct rx_graph_node *n = &t->g->nodes[t->node];

    t->rc = n->fn(t, t->arg, n->ctx, &t->update);
}

/* The merge order: node name, then send index (-1, the edge task, first). */
static int task_cmp(const void *a, const void *b)
{
    const struct rx_graph_task *x = a, *y = b;
    int rx = x->g->nodes[x->node].rank, ry = y->g->nodes[y->node].rank;

    if (rx != ry)
        return rx < ry ? -1 : 1;
    return (x->send > y->send) - (x->send < y->send);
}

void rx_graph_tasks_sort(struct rx_graph_task *t, size_t n)
{
    qsort(t, n, sizeof(*t), task_cmp);
}

void rx_graph_tasks_release(struct rx_graph_task *t, size_t n)
{
    size_t i;

    for (i = 0; t && i < n; i++) {
        json_decref(t[i].update);
        json_decref(t[i].interrupt);
        json_decref(t[i].route.items);
    }
    rx_free(t);
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

/* Concurrently on the graph's workers, the first on this thread. */
void rx_graph_tasks_execute(struct rx_graph_task *t, size_t n)
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
                task_job(&t[i]);
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
