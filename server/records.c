/*
 * records - the protocols' records in the store, and the thread that writes
 * the ones changed under a session's lock. See records.h.
 *
 * The queue is a FIFO list with two counters, queued and written: a flush
 * waits until `written` reaches the `queued` it saw, so it waits for what
 * was queued before it and never for what comes after.
 */
#include "server/records.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "effects/log.h"
#include "store/store.h"

struct pending {
    struct pending *next;
    char *kind, *key, *sid, *text;
    size_t len;
};

static pthread_mutex_t q_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t q_wake = PTHREAD_COND_INITIALIZER; /* work queued, or stop */
static pthread_cond_t q_done = PTHREAD_COND_INITIALIZER; /* `written` moved */
static struct pending *q_head, **q_tail = &q_head;
static uint64_t q_queued, q_written;
static size_t q_bytes; /* of the texts queued: at most RECORDS_QUEUE_BYTES */
static bool q_stop, q_running;
static pthread_t q_thread;
static struct store *q_store; /* set before the thread starts, read atomically */

struct store *records_store(void)
{
    return __atomic_load_n(&q_store, __ATOMIC_ACQUIRE);
}

static void pending_free(struct pending *p)
{
    free(p->kind);
    free(p->key);
    free(p->sid);
    free(p->text);
    free(p);
}

static void write_one(struct store *st, const struct pending *p)
{
    struct rx_error why;
    int err = store_record_put(st, p->kind, p->key, p->sid, p->text, p->len);

    if (!err || err == -ENOENT) /* -ENOENT: its session was deleted meanwhile */
        return;
    store_last_error(st, &why);
    log_warn("record %s '%s' not stored (%s): %s", p->kind, p->key, strerror(-err),
             why.text);
}

/* Take the whole queue, write it without the lock, count it written. */
static void *writer_main(void *arg)
{
    struct store *st = arg;

    pthread_mutex_lock(&q_lock);
    for (;;) {
        struct pending *batch;
        uint64_t n = 0;

        while (!q_head && !q_stop)
            pthread_cond_wait(&q_wake, &q_lock);
        if (!q_head)
            break; /* stopping, and nothing left to write */
        batch = q_head;
        q_head = NULL;
        q_tail = &q_head;
        q_bytes = 0; /* taken: the batch is bounded by what was queued */
        pthread_mutex_unlock(&q_lock);
        while (batch) {
            struct pending *next = batch->next;

            write_one(st, batch);
            pending_free(batch);
            batch = next;
            n++;
        }
        pthread_mutex_lock(&q_lock);
        q_written += n;
        pthread_cond_broadcast(&q_done);
    }
    pthread_mutex_unlock(&q_lock);
    return NULL;
}

int records_start(struct store *st)
{
    int rc;

    if (!st)
        return 0;
    pthread_mutex_lock(&q_lock);
    q_stop = false;
    rc = q_running ? 0 : pthread_create(&q_thread, NULL, writer_main, st);
    if (!rc) {
        q_running = true;
        __atomic_store_n(&q_store, st, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&q_lock);
    return rc ? -EAGAIN : 0;
}

void records_stop(void)
{
    struct pending *late;
    bool was;

    pthread_mutex_lock(&q_lock);
    was = q_running;
    q_stop = true;
    pthread_cond_signal(&q_wake);
    pthread_mutex_unlock(&q_lock);
    if (was)
        pthread_join(q_thread, NULL);
    pthread_mutex_lock(&q_lock);
    q_running = false;
    __atomic_store_n(&q_store, NULL, __ATOMIC_RELEASE);
    /* Queued after the writer's last look (a put racing the stop): dropped. */
    late = q_head;
    q_head = NULL;
    q_tail = &q_head;
    q_bytes = 0;
    q_written = q_queued;
    pthread_cond_broadcast(&q_done);
    pthread_mutex_unlock(&q_lock);
    while (late) {
        struct pending *next = late->next;

        log_warn("record %s '%s' not stored: the server stopped", late->kind, late->key);
        pending_free(late);
        late = next;
    }
}

int records_put_later(const char *kind, const char *key, const char *sid,
                      const char *text, size_t len)
{
    struct pending *p;

    if (!records_store())
        return -ENODEV;
    if (!(p = calloc(1, sizeof(*p))))
        return -ENOMEM;
    p->kind = strdup(kind);
    p->key = strdup(key);
    p->sid = sid ? strdup(sid) : NULL;
    p->text = strndup(text, len);
    p->len = len;
    if (!p->kind || !p->key || (sid && !p->sid) || !p->text) {
        pending_free(p);
        return -ENOMEM;
    }
    pthread_mutex_lock(&q_lock);
    if (q_bytes + len > RECORDS_QUEUE_BYTES) {
        pthread_mutex_unlock(&q_lock);
        pending_free(p);
        return -ENOBUFS;
    }
    *q_tail = p;
    q_tail = &p->next;
    q_queued++;
    q_bytes += len;
    pthread_cond_signal(&q_wake);
    pthread_mutex_unlock(&q_lock);
    return 0;
}

void records_flush(void)
{
    pthread_mutex_lock(&q_lock);
    for (uint64_t want = q_queued; q_running && q_written < want;)
        pthread_cond_wait(&q_done, &q_lock);
    pthread_mutex_unlock(&q_lock);
}
