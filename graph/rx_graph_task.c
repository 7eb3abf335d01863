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
#include <string.h>
#include <time.h>

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

/*
 * LangGraph's interrupt(): the node reruns from its start on every resume,
 * so the k-th call returns the k-th answer given so far; the first call
 * past them takes the caller's new answer, and the one after that pauses.
 */
int rx_graph_task_interrupt(struct rx_graph_task *task, json_t *value, json_t **answer)
{
    if (!task || !answer) {
        json_decref(value);
        return -EINVAL;
    }
    if (task->calls < json_array_size(task->answers)) {
        json_decref(value);
        *answer = json_array_get(task->answers, task->calls++);
        return 0;
    }
    if (task->fresh && !task->fresh_used) {
        json_decref(value);
        task->fresh_used = true;
        task->calls++;
        *answer = task->fresh;
        return 0;
    }
    if (!value)
        return -ENOMEM;
    json_decref(task->interrupt);
    task->interrupt = value;
    return -EINTR;
}

/*
 * FNV-1a over "step:node:index": the same task of the same paused step gets
 * the same id at every resume, so answers can be given by interrupt id.
 */
const char *rx_graph_task_id(struct rx_graph_task *t)
{
    char key[RX_ERR_LEN];
    unsigned long long h = 1469598103934665603ULL;
    const char *c;

    if (t->id[0])
        return t->id;
    /* Made when first asked for: most runs (no checkpointer) never need it. */
    snprintf(key, sizeof(key), "%d:%s:%zu", t->step - 1, rx_graph_task_node(t), t->index);
    for (c = key; *c; c++)
        h = (h ^ (unsigned char)*c) * 1099511628211ULL;
    snprintf(t->id, sizeof(t->id), "%016llx", h);
    return t->id;
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

static bool default_retry_on(int rc, void *ctx)
{
    (void)ctx;
    return rc != -ECANCELED && rc != -EINVAL && rc != -ENOMEM;
}

/* Seconds before retry `n` (1-based), LangGraph's formula. */
static double retry_delay(const struct rx_graph_retry *p, int n, unsigned *seed)
{
    double d = p->initial_interval;
    int i;

    for (i = 1; i < n && d < p->max_interval; i++)
        d *= p->backoff_factor;
    if (d > p->max_interval)
        d = p->max_interval;
    if (p->jitter)
        d += (double)rand_r(seed) / ((double)RAND_MAX + 1.0);
    return d;
}

static void sleep_seconds(double s)
{
    struct timespec ts;

    ts.tv_sec = (time_t)s;
    ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    while (nanosleep(&ts, &ts) && errno == EINTR) {
    }
}

/* Undo what a failed run of the node left, so the next attempt starts clean. */
static void task_reset(struct rx_graph_task *t)
{
    json_decref(t->update);
    t->update = NULL;
    json_array_clear(t->route.items);
    t->error[0] = '\0';
    t->calls = 0;
    t->fresh_used = false;
}

/*
 * Store a finished task's result at once (SPEC 8: a crash mid-step does not
 * run it again). A failure to store fails the task: a result that would be
 * lost is not a result.
 */
static void store_writes(struct rx_graph_task *t)
{
    const struct rx_graph_config *c = t->run ? t->run->cfg : NULL;
    json_t *w;
    int rc;

    if (!c || !c->checkpointer || !c->thread_id || !t->run->last_id[0] ||
        !c->checkpointer->put_writes)
        return;
    w = json_pack("{s:O?,s:O}", "update", t->update, "route", t->route.items);
    rc = w ? rx_checkpoint_put_writes(c->checkpointer, c->thread_id, t->run->last_id,
                                      rx_graph_task_id(t), w)
           : -ENOMEM;
    json_decref(w);
    if (rc) {
        t->rc = rc;
        snprintf(t->error, sizeof(t->error), "cannot store its result (%s)",
                 strerror(-rc));
    }
}

/* A job of the pool: call the node; everything it returns stays in its task. */
static void task_job(void *p)
{
    struct rx_graph_task *t = p;
    const struct rx_graph_node *n = &t->g->nodes[t->node];
    const struct rx_graph_retry *rp = &n->retry;
    unsigned seed = (unsigned)t->index * 2654435761u + (unsigned)t->step;
    int attempt;

    for (attempt = 1;; attempt++) {
        t->rc = n->fn(t, t->arg, n->ctx, &t->update);
        if (!t->rc || t->interrupt || attempt >= rp->max_attempts ||
            !(rp->retry_on ? rp->retry_on : default_retry_on)(t->rc, rp->retry_ctx))
            break;
        task_reset(t);
        sleep_seconds(retry_delay(rp, attempt, &seed));
    }
    if (t->interrupt) {
        /* Paused: what it wrote before interrupt() is dropped, as in LangGraph. */
        json_decref(t->update);
        t->update = NULL;
        json_array_clear(t->route.items);
        if (t->rc == 0 || t->rc == -EINTR)
            t->rc = -EINTR;
    }
    if (!t->rc && !t->interrupt)
        store_writes(t);
}

/*
 * The merge order, LangGraph's (tasks sorted by path, "__pregel_pull" before
 * "__pregel_push"): edge-triggered tasks by node name, then Send tasks in
 * the order they were sent, whatever node they run.
 */
static int task_cmp(const void *a, const void *b)
{
    const struct rx_graph_task *x = a, *y = b;
    int rx = x->g->nodes[x->node].rank, ry = y->g->nodes[y->node].rank;

    if ((x->send < 0) != (y->send < 0))
        return x->send < 0 ? -1 : 1;
    if (x->send < 0)
        return (rx > ry) - (rx < ry);
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
        json_decref(t[i].streamed);
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
