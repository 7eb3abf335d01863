/*
 * lg_run_wait - the requests that follow a LangGraph run: its SSE streams
 * (kept frames, then live ones; a watcher cancels the run when a client
 * that asked for it goes away) and the requests parked until it is over.
 * See lg_run.h.
 */
#include "server/protocols/lg_run_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/protocols/lg_internal.h"
#include "server/protocols/lg_msg.h"
#include "server/run.h"

/*
 * on_disconnect "cancel": left in the request's slot, never suspended; the
 * request's end (server/http) cancels a run that is not over.
 */
struct lg_watch {
    struct park park;
    struct lg_run *lr;
};

static enum MHD_Result watch_answer(struct park *p, struct door *srv,
                                    struct MHD_Connection *conn)
{
    (void)p;
    (void)srv;
    (void)conn;
    return MHD_NO; /* never resumed: its answer is the stream */
}

static void watch_release(struct park *p)
{
    struct lg_watch *w = (struct lg_watch *)p;

    if (!lg_run_is_over(w->lr))
        lg_run_cancel(w->lr);
    lg_run_unref(w->lr);
    park_destroy(&w->park);
    free(w);
}

static const struct park_ops watch_ops = {watch_answer, watch_release};

/* A run over whose frames were dropped still shows how it ended. */
static void replay_final_locked(struct lg_run *lr)
{
    if (!lr->over || lr->frames.len || !lr->final)
        return;
    if (json_object_get(lr->final, "__error__"))
        lg_run__emit_json(lr, "error",
                          json_incref(json_object_get(lr->final, "__error__")));
    else
        lg_run__emit_json(lr, "values", json_incref(lr->final));
}

enum MHD_Result lg_run_stream(struct lg_run *lr, struct MHD_Connection *conn,
                              int64_t after, bool cancel_on_close, const char *location,
                              struct park **slot)
{
    struct lg_watch *w = NULL;
    struct MHD_Response *resp;
    struct sse_frame **first;
    char where[512];
    size_t n;

    if (cancel_on_close) {
        if (!(w = calloc(1, sizeof(*w))))
            return lg__detail(conn, 500, "out of memory");
        park_init(&w->park, &watch_ops, conn);
        lg_run_ref(lr);
        w->lr = lr;
    }
    MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, 0U);
    /* Under the lock the events are published with: the kept frames, then
       the live ones, none lost or doubled in between. */
    pthread_mutex_lock(&lr->lock);
    replay_final_locked(lr);
    first = lg_frames_after(&lr->frames, after, &n);
    resp = sse_channel_subscribe(&lr->ch, conn, first, n, lr->over);
    pthread_mutex_unlock(&lr->lock);
    if (!resp) {
        if (w) { /* no stream, so no client to lose: nothing to cancel */
            lg_run_unref(lr);
            park_destroy(&w->park);
            free(w);
        }
        return lg__detail(conn, 500, "out of memory");
    }
    MHD_add_response_header(resp, "Content-Location", location);
    /* The SDK reconnects to Location (with Last-Event-ID) when a stream breaks. */
    snprintf(where, sizeof(where), "/threads/%s/runs/%s/stream", lr->tid, lr->id);
    MHD_add_response_header(resp, "Location", where);
    if (w)
        *slot = &w->park;
    return lg__queue(conn, 200, resp);
}

/* ---- waiters ------------------------------------------------------------------ */

/*
 * A request that waits for the end of a run (server/park). Two references
 * while listed: the request's and the run's list's.
 */
struct lg_waiter {
    struct park park;
    int refs; /* atomic */
    struct lg_run *lr;
    enum lg_wait_kind kind;
    char *location;
    bool listed; /* in lr->waiters (record's lock) */
    struct lg_waiter *next;
};

static void waiter_unref(struct lg_waiter *w)
{
    if (__atomic_sub_fetch(&w->refs, 1, __ATOMIC_ACQ_REL))
        return;
    lg_run_unref(w->lr);
    park_destroy(&w->park);
    free(w->location);
    free(w);
}

void lg_run__finish_waiters(struct lg_run *lr)
{
    struct lg_waiter *w = lr->waiters, *next;

    lr->waiters = NULL;
    for (; w; w = next) {
        next = w->next;
        w->next = NULL;
        w->listed = false;
        park_finish(&w->park);
        waiter_unref(w); /* the list's; the run's own reference keeps lr */
    }
}

/* session_read_fn: the thread's values now. */
static void read_values(void *arg, const struct rx_state *st, int64_t seq,
                        const struct event_session *entry)
{
    (void)seq;
    (void)entry;
    *(json_t **)arg = json_pack("{s:o}", "messages", lg_msg_messages(st));
}

static enum MHD_Result waiter_reply(struct lg_waiter *w, struct MHD_Connection *conn)
{
    struct run *r;
    json_t *j;

    if (w->kind == LG_WAIT_EMPTY)
        return lg__empty(conn, 204);
    pthread_mutex_lock(&w->lr->lock);
    j = json_incref(w->lr->final);
    r = w->lr->run;
    if (r)
        run_ref(r);
    pthread_mutex_unlock(&w->lr->lock);
    /* Cancelled before it started: the thread's values as they are. */
    if (!j && r && session_read(run_session(r), read_values, &j))
        j = NULL; /* the thread is gone: no values */
    if (!j)
        j = json_pack("{s:[]}", "messages");
    run_unref(r);
    return lg__reply(conn, 200, j, w->location);
}

static enum MHD_Result waiter_answer(struct park *p, struct door *srv,
                                     struct MHD_Connection *conn)
{
    (void)srv;
    return waiter_reply((struct lg_waiter *)p, conn);
}

static void waiter_release(struct park *p)
{
    struct lg_waiter *w = (struct lg_waiter *)p, **pp;
    bool unlisted = false;

    /* The client left before the end: take it off the list. */
    pthread_mutex_lock(&w->lr->lock);
    if (w->listed) {
        for (pp = &w->lr->waiters; *pp && *pp != w; pp = &(*pp)->next)
            ;
        if (*pp)
            *pp = w->next;
        w->listed = false;
        unlisted = true;
    }
    pthread_mutex_unlock(&w->lr->lock);
    if (unlisted)
        waiter_unref(w);
    waiter_unref(w);
}

static const struct park_ops waiter_ops = {waiter_answer, waiter_release};

enum MHD_Result lg_run_wait(struct lg_run *lr, struct door *srv,
                            struct MHD_Connection *conn, enum lg_wait_kind kind,
                            const char *location, struct park **slot)
{
    struct lg_waiter *w = calloc(1, sizeof(*w));
    enum MHD_Result ret;
    bool listed;

    if (!w || (location && !(w->location = strdup(location)))) {
        free(w);
        return lg__detail(conn, 500, "out of memory");
    }
    w->refs = 1;
    w->kind = kind;
    lg_run_ref(lr);
    w->lr = lr;
    park_init(&w->park, &waiter_ops, conn);
    park_enter();
    if (door_is_stopping(srv)) {
        park_leave();
        waiter_unref(w);
        return lg__detail(conn, 503, "the server is stopping");
    }
    pthread_mutex_lock(&lr->lock);
    if ((listed = !lr->over)) {
        w->refs++;
        w->listed = true;
        w->next = lr->waiters;
        lr->waiters = w;
    }
    pthread_mutex_unlock(&lr->lock);
    if (listed && park_suspend(&w->park)) {
        *slot = &w->park;
        return MHD_YES;
    }
    /* Over already (or it ended while we listed it): answer now. */
    park_leave();
    ret = waiter_reply(w, conn);
    waiter_unref(w);
    return ret;
}
