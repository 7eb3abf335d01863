/*
 * park - a request whose answer comes later. See park.h.
 */
#include "server/park.h"

void park_init(struct park *p, const struct park_ops *ops, struct MHD_Connection *conn)
{
    p->ops = ops;
    pthread_mutex_init(&p->lock, NULL);
    p->conn = conn;
    p->suspended = p->finished = p->counted = false;
}

void park_destroy(struct park *p)
{
    pthread_mutex_destroy(&p->lock);
}

/* Connections suspended for an answer: none may be left at MHD_stop_daemon. */
static pthread_mutex_t parked_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t parked_none = PTHREAD_COND_INITIALIZER;
static int parked;

static void parked_add(int n)
{
    pthread_mutex_lock(&parked_lock);
    parked += n;
    if (!parked)
        pthread_cond_broadcast(&parked_none);
    pthread_mutex_unlock(&parked_lock);
}

void park_enter(void)
{
    parked_add(1);
}

void park_leave(void)
{
    parked_add(-1);
}

void park_drain(void)
{
    pthread_mutex_lock(&parked_lock);
    while (parked)
        pthread_cond_wait(&parked_none, &parked_lock);
    pthread_mutex_unlock(&parked_lock);
}

bool park_suspend(struct park *p)
{
    bool suspended = false;

    /* Under p->lock: park_finish resumes only a connection suspended. */
    pthread_mutex_lock(&p->lock);
    if (!p->finished) {
        MHD_suspend_connection(p->conn);
        p->suspended = suspended = true;
        p->counted = true; /* park_enter's count stays until the request ends */
    }
    pthread_mutex_unlock(&p->lock);
    return suspended;
}

void park_finish(struct park *p)
{
    pthread_mutex_lock(&p->lock);
    p->finished = true;
    if (p->suspended) {
        MHD_resume_connection(p->conn);
        p->suspended = false;
    }
    pthread_mutex_unlock(&p->lock);
}

void park_end(struct park *p)
{
    bool counted;

    pthread_mutex_lock(&p->lock);
    counted = p->counted;
    p->counted = false;
    pthread_mutex_unlock(&p->lock);
    /* Not at the resume: MHD_stop_daemon would close a resumed connection
       before its answer is queued. Now it is sent, or its client is gone. */
    if (counted)
        parked_add(-1);
}
