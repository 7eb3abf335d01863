/*
 * a2a_task_wait - the requests that follow an A2A task: its SSE streams (the
 * task as it is, then its events until its run ends) and the requests
 * parked until it is over. See a2a_internal.h.
 */
#include "server/protocols/a2a_task_internal.h"

#include <stdlib.h>
#include <string.h>

#include "server/reply.h"

/*
 * Let go of the streams whose clients are all gone (exact under the task's
 * lock, which subscribers take), so a task followed many times keeps only
 * the streams still read.
 */
static void prune_locked(struct a2a_task *t)
{
    struct a2a_stream **pp = &t->streams, *s;

    while ((s = *pp)) {
        if (sse_channel_has_clients(&s->ch)) {
            pp = &s->next;
            continue;
        }
        *pp = s->next;
        sse_channel_release(&s->ch);
        free(s->rpc_id);
        free(s);
    }
}

enum MHD_Result a2a_task_stream(struct a2a_task *t, struct MHD_Connection *conn,
                                const char *rpc_id, bool v03)
{
    struct a2a_stream *s = calloc(1, sizeof(*s));
    struct MHD_Response *resp = NULL;
    struct sse_frame *first = NULL;
    json_t *w = NULL;
    char *text = NULL;

    if (!s || !(s->rpc_id = strdup(rpc_id))) {
        free(s);
        return a2a__error(conn, rpc_id, A2A_INTERNAL_ERROR, "out of memory");
    }
    s->v03 = v03;
    sse_channel_init(&s->ch, (size_t)t->cfg->sse_queue_max);
    sse_channel_set_queue_bytes(
        &s->ch, __atomic_load_n(&t->cfg->sse_queue_bytes, __ATOMIC_RELAXED));
    MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, 0U);
    /* Under the lock the events are published with: the task as it is, then
       what follows, nothing lost in between. */
    pthread_mutex_lock(&t->lock);
    prune_locked(t);
    w = v03 ? a2a_wire_v03(t->view, "task") : json_pack("{s:O}", "task", t->view);
    text = w ? a2a__envelope(rpc_id, w) : NULL;
    first = text ? sse_frame_event(-1, text, strlen(text)) : NULL;
    if (first)
        resp = sse_channel_subscribe(&s->ch, conn, &first, 1, !t->busy);
    if (resp) {
        s->next = t->streams;
        t->streams = s;
    }
    pthread_mutex_unlock(&t->lock);
    if (first)
        sse_frame_unref(first);
    json_decref(w);
    free(text);
    if (!resp) {
        sse_channel_release(&s->ch);
        free(s->rpc_id);
        free(s);
        return a2a__error(conn, rpc_id, A2A_INTERNAL_ERROR, "out of memory");
    }
    return reply_stream(conn, resp);
}

/* A request parked until the run ends. Two references while listed. */
struct a2a_waiter {
    struct park park;
    int refs; /* atomic */
    struct a2a_task *t;
    char *rpc_id;
    bool v03, wrap, listed;
    struct a2a_waiter *next;
};

static void waiter_unref(struct a2a_waiter *w)
{
    if (__atomic_sub_fetch(&w->refs, 1, __ATOMIC_ACQ_REL))
        return;
    a2a_task_unref(w->t);
    park_destroy(&w->park);
    free(w->rpc_id);
    free(w);
}

void a2a_task__finish_waiters_locked(struct a2a_task *t)
{
    struct a2a_waiter *w = t->waiters, *next;

    t->waiters = NULL;
    for (; w; w = next) {
        next = w->next;
        w->next = NULL;
        w->listed = false;
        park_finish(&w->park);
        waiter_unref(w); /* the list's; the engine's reference keeps t */
    }
}

static enum MHD_Result waiter_reply(struct a2a_waiter *w, struct MHD_Connection *conn)
{
    json_t *v = a2a_task_view(w->t, NULL), *r;

    if (!v)
        return a2a__error(conn, w->rpc_id, A2A_INTERNAL_ERROR, "out of memory");
    r = w->v03    ? a2a_wire_v03(v, "task")
        : w->wrap ? json_pack("{s:O}", "task", v)
                  : json_incref(v);
    json_decref(v);
    return a2a__result(conn, w->rpc_id, r);
}

static enum MHD_Result waiter_answer(struct park *p, struct door *srv,
                                     struct MHD_Connection *conn)
{
    (void)srv;
    return waiter_reply((struct a2a_waiter *)p, conn);
}

static void waiter_release(struct park *p)
{
    struct a2a_waiter *w = (struct a2a_waiter *)p, **pp;
    bool unlisted = false;

    pthread_mutex_lock(&w->t->lock);
    if (w->listed) {
        for (pp = &w->t->waiters; *pp && *pp != w; pp = &(*pp)->next)
            ;
        if (*pp)
            *pp = w->next;
        w->listed = false;
        unlisted = true;
    }
    pthread_mutex_unlock(&w->t->lock);
    if (unlisted)
        waiter_unref(w);
    waiter_unref(w);
}

static const struct park_ops waiter_ops = {waiter_answer, waiter_release};

enum MHD_Result a2a_task_wait(struct a2a_task *t, struct door *srv,
                              struct MHD_Connection *conn, const char *rpc_id, bool v03,
                              bool wrap, struct park **slot)
{
    struct a2a_waiter *w = calloc(1, sizeof(*w));
    enum MHD_Result ret;
    bool listed;

    if (!w || !(w->rpc_id = strdup(rpc_id))) {
        free(w);
        return a2a__error(conn, rpc_id, A2A_INTERNAL_ERROR, "out of memory");
    }
    w->refs = 1;
    w->v03 = v03;
    w->wrap = wrap;
    a2a_task__ref(t);
    w->t = t;
    park_init(&w->park, &waiter_ops, conn);
    park_enter();
    if (door_is_stopping(srv)) {
        park_leave();
        waiter_unref(w);
        return a2a__error(conn, rpc_id, A2A_INTERNAL_ERROR, "the server is stopping");
    }
    pthread_mutex_lock(&t->lock);
    if ((listed = t->busy)) {
        w->refs++;
        w->listed = true;
        w->next = t->waiters;
        t->waiters = w;
    }
    pthread_mutex_unlock(&t->lock);
    if (listed && park_suspend(&w->park)) {
        *slot = &w->park;
        return MHD_YES;
    }
    park_leave();
    ret = waiter_reply(w, conn);
    waiter_unref(w);
    return ret;
}
