/*
 * runtime_pool - the process-wide pool of effect workers. See runtime_pool.h.
 *
 * The queue links and the place of an effect (struct effect, enum fx_place)
 * come from runtime_internal.h; a worker hands what it takes to effect_run()
 * (runtime.c). The pool touches nothing of a runtime itself.
 */
#include "effects/runtime_pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "effects/runtime_internal.h"

struct runtime_pool {
    pthread_mutex_t lock; /* a leaf: guards everything below */
    pthread_cond_t work;  /* an effect was queued, or stop */
    struct fx_queue queue;
    int max;      /* workers at most */
    int sleeping; /* workers waiting on `work` */
    int busy;     /* workers running an effect */
    bool stop;
    pthread_t *threads; /* the workers made so far */
    int n_threads, cap_threads;
};

static void *worker_main(void *arg)
{
    struct runtime_pool *p = arg;
    struct effect *fx;

    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->queue.head && !p->stop) {
            p->sleeping++;
            pthread_cond_wait(&p->work, &p->lock);
            p->sleeping--;
        }
        if (!(fx = fx_queue_pop(&p->queue)))
            break; /* stopping, and nothing left */
        fx->place = FX_ACTIVE;
        p->busy++;
        pthread_mutex_unlock(&p->lock);
        effect_run(fx); /* frees fx; touches neither it nor its runtime after */
        pthread_mutex_lock(&p->lock);
        p->busy--;
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

/* Pool lock held. One more worker, if the maximum allows. 0 or -errno. */
static int runtime_pool_grow(struct runtime_pool *p)
{
    pthread_attr_t attr;
    int err;

    if (p->n_threads >= p->max)
        return -EAGAIN;
    if (p->n_threads == p->cap_threads) {
        int cap = p->cap_threads ? p->cap_threads * 2 : 8;
        pthread_t *t = realloc(p->threads, (size_t)cap * sizeof(*t));

        if (!t)
            return -ENOMEM;
        p->threads = t;
        p->cap_threads = cap;
    }
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, RUNTIME_WORKER_STACK);
    err = -pthread_create(&p->threads[p->n_threads], &attr, worker_main, p);
    pthread_attr_destroy(&attr);
    if (!err)
        p->n_threads++;
    return err;
}

/*
 * Queue fx for a worker: a sleeping one is woken, or one more is made while
 * the queue holds more effects than there are sleepers to take them. 0, or
 * -EAGAIN / -ENOMEM when there is no worker at all (fx is then not queued).
 */
int runtime_pool_push(struct runtime_pool *p, struct effect *fx)
{
    int err = 0;

    pthread_mutex_lock(&p->lock);
    fx->place = FX_QUEUED;
    fx_queue_push(&p->queue, fx);
    if (p->queue.len > p->sleeping && p->n_threads < p->max &&
        (err = runtime_pool_grow(p)) && p->n_threads > 0)
        err = 0; /* the workers there are will come to it */
    if (err) {
        fx_queue_unlink(&p->queue, fx);
        fx->place = FX_WAITING;
    } else {
        pthread_cond_signal(&p->work);
    }
    pthread_mutex_unlock(&p->lock);
    return err;
}

/*
 * Where fx is, read under the pool's lock (a worker moves it from QUEUED to
 * ACTIVE under that lock alone); a QUEUED one is taken out of the queue.
 */
enum fx_place runtime_pool_take_back(struct runtime_pool *p, struct effect *fx)
{
    enum fx_place place;

    pthread_mutex_lock(&p->lock);
    place = fx->place;
    if (place == FX_QUEUED)
        fx_queue_unlink(&p->queue, fx);
    pthread_mutex_unlock(&p->lock);
    return place;
}

struct runtime_pool *runtime_pool_create(int max_workers)
{
    struct runtime_pool *p = calloc(1, sizeof(*p));

    if (!p)
        return NULL;
    p->max = max_workers > 0 ? max_workers : RUNTIME_POOL_MAX_DEFAULT;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->work, NULL);
    return p;
}

void runtime_pool_destroy(struct runtime_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->stop = true;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->n_threads; i++)
        pthread_join(p->threads[i], NULL);
    free(p->threads);
    pthread_cond_destroy(&p->work);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

static pthread_mutex_t g_shared_lock = PTHREAD_MUTEX_INITIALIZER;
static struct runtime_pool *g_shared;

struct runtime_pool *runtime_pool_shared(int max_workers)
{
    struct runtime_pool *p;

    pthread_mutex_lock(&g_shared_lock);
    if (!g_shared) {
        g_shared = runtime_pool_create(max_workers);
    } else if (max_workers > 0) {
        pthread_mutex_lock(&g_shared->lock);
        if (max_workers > g_shared->max)
            g_shared->max = max_workers;
        pthread_mutex_unlock(&g_shared->lock);
    }
    p = g_shared;
    pthread_mutex_unlock(&g_shared_lock);
    return p;
}

void runtime_pool_stats(struct runtime_pool *p, struct runtime_pool_stats *out)
{
    pthread_mutex_lock(&p->lock);
    out->max = p->max;
    out->workers = p->n_threads;
    out->busy = p->busy;
    out->queued = p->queue.len;
    pthread_mutex_unlock(&p->lock);
}
