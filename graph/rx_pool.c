/*
 * rx_pool - a growing pool of worker threads. See rx_pool.h.
 */
#include "graph/rx_pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>

#include "state_machine/rx_alloc.h"

struct rx_pool_batch {
    size_t left; /* jobs not finished yet */
    pthread_cond_t done;
};

struct rx_pool {
    pthread_mutex_t lock;
    pthread_cond_t work;
    pthread_cond_t gone;
    struct rx_pool_job *head, *tail; /* queued jobs */
    size_t queued;
    size_t workers;  /* alive */
    size_t idle;     /* waiting for a job */
    size_t starting; /* created, not yet at the queue */
    bool stop;
};

static void finish(struct rx_pool *p, struct rx_pool_job *j)
{
    struct rx_pool_batch *b = j->batch;

    if (--b->left == 0)
        pthread_cond_signal(&b->done);
    (void)p;
}

/* Lock held. Take the first queued job. */
static struct rx_pool_job *pop(struct rx_pool *p)
{
    struct rx_pool_job *j = p->head;

    p->head = j->next;
    if (!p->head)
        p->tail = NULL;
    p->queued--;
    return j;
}

static void *worker_main(void *arg)
{
    struct rx_pool *p = arg;

    pthread_mutex_lock(&p->lock);
    p->starting--;
    for (;;) {
        struct rx_pool_job *j;

        while (!p->head && !p->stop) {
            p->idle++;
            pthread_cond_wait(&p->work, &p->lock);
            p->idle--;
        }
        if (!p->head)
            break;
        j = pop(p);
        pthread_mutex_unlock(&p->lock);
        j->fn(j->arg);
        pthread_mutex_lock(&p->lock);
        finish(p, j);
    }
    if (--p->workers == 0)
        pthread_cond_signal(&p->gone);
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

struct rx_pool *rx_pool_create(void)
{
    struct rx_pool *p = rx_malloc(sizeof(*p));

    if (!p)
        return NULL;
    p->head = p->tail = NULL;
    p->queued = p->workers = p->idle = p->starting = 0;
    p->stop = false;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->gone, NULL);
    return p;
}

void rx_pool_destroy(struct rx_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->stop = true;
    pthread_cond_broadcast(&p->work);
    while (p->workers)
        pthread_cond_wait(&p->gone, &p->lock);
    pthread_mutex_unlock(&p->lock);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->gone);
    rx_free(p);
}

/* Lock held. A free worker for every queued job, so none waits for another. */
static int grow(struct rx_pool *p)
{
    pthread_attr_t attr;
    int err = 0;

    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    while (p->idle + p->starting < p->queued && !err) {
        pthread_t t;

        err = -pthread_create(&t, &attr, worker_main, p);
        if (!err) {
            p->workers++;
            p->starting++;
        }
    }
    pthread_attr_destroy(&attr);
    return err;
}

int rx_pool_run(struct rx_pool *p, struct rx_pool_job *jobs, size_t n)
{
    struct rx_pool_batch b = {.left = n};
    int err = 0;

    if (!n)
        return 0;
    pthread_cond_init(&b.done, NULL);
    pthread_mutex_lock(&p->lock);
    for (size_t i = 1; i < n; i++) {
        jobs[i].batch = &b;
        jobs[i].next = NULL;
        if (p->tail)
            p->tail->next = &jobs[i];
        else
            p->head = &jobs[i];
        p->tail = &jobs[i];
        p->queued++;
    }
    if (n > 1) {
        err = grow(p);
        pthread_cond_broadcast(&p->work);
    }
    pthread_mutex_unlock(&p->lock);

    jobs[0].fn(jobs[0].arg);

    pthread_mutex_lock(&p->lock);
    b.left--;
    /* While waiting, run what no worker took yet: never slower than alone. */
    while (b.left) {
        struct rx_pool_job *j = p->head;

        if (j && j->batch == &b) {
            pop(p);
            pthread_mutex_unlock(&p->lock);
            j->fn(j->arg);
            pthread_mutex_lock(&p->lock);
            finish(p, j);
            continue;
        }
        pthread_cond_wait(&b.done, &p->lock);
    }
    pthread_mutex_unlock(&p->lock);
    pthread_cond_destroy(&b.done);
    return err;
}
