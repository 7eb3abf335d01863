/*
 * store_notifier - the thread that answers committed writes. See
 * store_notifier.h.
 */
#include "store/store_notifier.h"

#include <stddef.h>

void store_notifier_init(struct store_notifier *n)
{
    pthread_mutex_init(&n->lock, NULL);
    pthread_cond_init(&n->cond, NULL);
    n->head = NULL;
    n->tail = &n->head;
    n->ended = false;
    n->started = false;
}

static void *notifier_main(void *arg)
{
    struct store_notifier *n = arg;

    for (;;) {
        struct store_write *w;

        pthread_mutex_lock(&n->lock);
        while (!n->head && !n->ended)
            pthread_cond_wait(&n->cond, &n->lock);
        w = n->head;
        n->head = NULL;
        n->tail = &n->head;
        pthread_mutex_unlock(&n->lock);
        if (!w)
            return NULL; /* the writer ended and everything is answered */
        while (w) {
            struct store_write *next = w->next;

            /* `done` may free its write: nothing of it is read afterwards. */
            w->done(w, w->err);
            w = next;
        }
    }
}

int store_notifier_start(struct store_notifier *n)
{
    int rc = pthread_create(&n->thread, NULL, notifier_main, n);

    n->started = rc == 0;
    return rc;
}

void store_notifier_push(struct store_notifier *n, struct store_write *first,
                         struct store_write *last)
{
    last->next = NULL;
    pthread_mutex_lock(&n->lock);
    *n->tail = first;
    n->tail = &last->next;
    pthread_cond_signal(&n->cond);
    pthread_mutex_unlock(&n->lock);
}

void store_notifier_push_batch(struct store_notifier *n, struct store_write **v,
                               size_t count)
{
    for (size_t i = 0; i + 1 < count; i++)
        v[i]->next = v[i + 1];
    store_notifier_push(n, v[0], v[count - 1]);
}

void store_notifier_end(struct store_notifier *n)
{
    pthread_mutex_lock(&n->lock);
    n->ended = true;
    pthread_cond_signal(&n->cond);
    pthread_mutex_unlock(&n->lock);
}

void store_notifier_release(struct store_notifier *n)
{
    if (n->started)
        pthread_join(n->thread, NULL);
    n->started = false;
    pthread_cond_destroy(&n->cond);
    pthread_mutex_destroy(&n->lock);
}
