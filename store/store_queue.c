/*
 * store_queue - the writes on their way to a backend's writer thread. See
 * store_queue.h.
 */
#include "store/store_queue.h"

#include <errno.h>
#include <time.h>

#include "base/now.h"

void store_queue_init(struct store_queue *q)
{
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->cond, NULL);
    q->head = NULL;
    q->tail = &q->head;
    q->queued = 0;
    q->wake_at = 1;
    q->stopping = false;
    q->writer_started = false;
    store_notifier_init(&q->notifier);
}

int store_queue_start(struct store_queue *q, void *(*writer_main)(void *), void *arg)
{
    int rc = store_notifier_start(&q->notifier);

    if (!rc && !(rc = pthread_create(&q->writer, NULL, writer_main, arg)))
        q->writer_started = true;
    return rc;
}

void store_queue_close(struct store_queue *q)
{
    pthread_mutex_lock(&q->lock);
    q->stopping = true;
    pthread_cond_signal(&q->cond);
    pthread_mutex_unlock(&q->lock);
    /* The writer ends the notifier once it is done; without one, end it here. */
    if (q->writer_started)
        pthread_join(q->writer, NULL);
    else
        store_notifier_end(&q->notifier);
    store_notifier_release(&q->notifier);
    pthread_cond_destroy(&q->cond);
    pthread_mutex_destroy(&q->lock);
}

void store_queue_push(struct store_queue *q, struct store_write *w)
{
    w->next = NULL;
    w->err = 0;
    pthread_mutex_lock(&q->lock);
    *q->tail = w;
    q->tail = &w->next;
    q->queued++;
    if (q->queued >= q->wake_at)
        pthread_cond_signal(&q->cond);
    pthread_mutex_unlock(&q->lock);
}

bool store_queue_wait(struct store_queue *q, int ms)
{
    struct timespec until;

    if (q->head || q->stopping)
        return false;
    if (ms < 0) {
        pthread_cond_wait(&q->cond, &q->lock);
        return false;
    }
    until = now_deadline(CLOCK_REALTIME, (int64_t)ms * NOW_NS_PER_MS);
    return pthread_cond_timedwait(&q->cond, &q->lock, &until) == ETIMEDOUT && !q->head &&
           !q->stopping;
}

void store_queue_gather(struct store_queue *q, size_t want, int64_t last_commit_ns,
                        int64_t max_ns, bool durable)
{
    int64_t wait_ns = last_commit_ns / 2;
    struct timespec until;

    /* A commit that does not sync is cheap, and nothing waits for it. */
    if (!durable || q->queued >= want || wait_ns <= 0)
        return;
    until = now_deadline(CLOCK_REALTIME, wait_ns < max_ns ? wait_ns : max_ns);
    q->wake_at = want;
    while (q->queued < want && !q->stopping &&
           pthread_cond_timedwait(&q->cond, &q->lock, &until) == 0)
        ;
    q->wake_at = 1; /* the idle wait wants the first one */
}

size_t store_queue_take(struct store_queue *q, struct store_write **v, size_t max)
{
    size_t n = 0;

    while (q->head && n < max) {
        v[n++] = q->head;
        q->head = q->head->next;
    }
    if (!q->head)
        q->tail = &q->head;
    q->queued -= n;
    return n;
}
