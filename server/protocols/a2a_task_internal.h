/*
 * a2a_task_internal - what the files of the A2A tasks share: the task
 * itself and its streams. Private to a2a_task.c (registry, record, engine
 * callbacks) and a2a_task_wait.c (streams and waiting requests); the rest
 * of the door uses a2a_internal.h.
 * Depends on server/protocols/a2a_internal.h, server/run and server/sse.
 * Locks as in a2a_internal.h.
 * Ownership: as in a2a_internal.h; a task owns its view, its
 * reason, its streams and one reference to its run in flight.
 */
#ifndef A2A_TASK_INTERNAL_H
#define A2A_TASK_INTERNAL_H

#include <pthread.h>

#include "server/protocols/a2a_internal.h"
#include "server/run.h"
#include "server/sse.h"

struct a2a_stream {
    struct sse_channel ch;
    char *rpc_id;
    bool v03;
    struct a2a_stream *next;
};

struct a2a_waiter;

struct a2a_task {
    int refs;             /* atomic */
    pthread_mutex_t lock; /* guards what follows the ids */
    char id[RX_UUID_LEN];
    char ctx[SESSION_ID_MAX + 1];
    char umid[RX_ID_MAX + 1];
    const struct config *cfg;
    enum a2a_state state;
    char *why; /* a failure's reason */
    int64_t created_ms, updated_ms;
    struct run *run;   /* the run in flight, or NULL */
    bool busy, cancel; /* a run in flight; it was asked to cancel */
    bool chunked;      /* an artifact chunk of this run was sent */
    unsigned gen;      /* counts the runs started */
    json_t *view;      /* the 1.0 Task as last built */
    struct a2a_stream *streams;
    struct a2a_waiter *waiters;
    struct a2a_task *prev, *next; /* the registry, newest first */
    bool listed;
};

void a2a_task__ref(struct a2a_task *t);
/* The run is over (task's lock held): answer every waiting request. */
void a2a_task__finish_waiters_locked(struct a2a_task *t);

#endif
