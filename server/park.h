/*
 * park - a request whose answer comes later, from another thread: its
 * connection is suspended (no MHD thread waits) until the answer is ready,
 * then resumed, and MHD calls the access handler again, which answers from
 * the park instead of routing again (server/http).
 *
 * Who uses it: a POST whose input waits for the log (server/api), a
 * non-streaming chat completion (server/protocols/oai) or run (server/protocols/lg) that
 * waits for the agent to finish. A park that is never suspended tells its owner when the
 * request ends (its release), whatever the response was: how a LangGraph stream with
 * on_disconnect "cancel" learns that its client left.
 *
 * Shutdown: MHD_stop_daemon aborts with a suspended connection, so every
 * request that may suspend is counted (park_enter) before it checks
 * door_is_stopping, and the server waits (park_drain) until none is
 * left before it stops the daemon.
 *
 * Depends on libmicrohttpd only. Locks: a park's lock is a leaf.
 * Ownership: struct park is embedded in the owner's object (first member or
 * not); `answer` is called once on the resumed request and `release` once
 * when the request ends, answered or not. Between them the owner keeps the
 * object alive (a refcount of its own: one for the request, one for the
 * thread that will call park_finish).
 */
#ifndef PARK_H
#define PARK_H

#include <pthread.h>
#include <stdbool.h>

#include <microhttpd.h>

struct door;
struct park;

struct park_ops {
    /* Queue the answer on the resumed `conn`. */
    enum MHD_Result (*answer)(struct park *p, struct door *srv,
                              struct MHD_Connection *conn);
    /* The request is over (answered, or the client went away). */
    void (*release)(struct park *p);
};

struct park {
    const struct park_ops *ops;
    pthread_mutex_t lock; /* guards conn, suspended, finished, counted */
    struct MHD_Connection *conn;
    bool suspended, finished;
    bool counted; /* suspended once: park_enter's count is given back by park_end */
};

void park_init(struct park *p, const struct park_ops *ops, struct MHD_Connection *conn);
void park_destroy(struct park *p);

/*
 * Suspend the connection unless the answer is ready: true when suspended
 * (the handler returns MHD_YES and leaves the park in the request's slot);
 * false when park_finish came first (answer now). Call once, on the MHD
 * thread, between park_enter and park_leave: a suspended park keeps its
 * count until park_finish resumes it.
 */
bool park_suspend(struct park *p);
/* The answer is ready (any thread): resume the connection if suspended. Once. */
void park_finish(struct park *p);
/*
 * The request ended (MHD's completed callback, before `release`): a park
 * that was suspended gives back the count park_enter took, so park_drain
 * returns only once every resumed request was answered (or its client left).
 */
void park_end(struct park *p);

/* Count a request that may suspend (before the stopping check)... */
void park_enter(void);
/* ...and give the count back when it did not suspend. */
void park_leave(void);
/* Wait until no connection is suspended (before MHD_stop_daemon). */
void park_drain(void);

#endif
