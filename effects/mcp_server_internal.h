/*
 * mcp_server_internal - what the MCP server's core (mcp_server.c) shares with
 * its two transports (mcp_server_stdio.c, mcp_server_http.c): the server
 * struct, the requests in flight, and the table of transport operations.
 *
 * The core knows only the table (struct mcp_server_transport); each
 * transport knows only the core's helpers below, never the other
 * transport; no code outside these three files includes this header.
 *
 * Depends on effects/mcp_server, log, now and jansson; nothing from server/.
 * Threads: the fields marked "lock" are read and written with s->lock held;
 * `link` is the transport's own and follows its rules.
 * Ownership: s->link is allocated by the transport's init and freed by its
 * release; struct pending lives on the requesting thread's stack, and is
 * linked into s->pending (with s->lock) only while it waits.
 */
#ifndef MCP_SERVER_INTERNAL_H
#define MCP_SERVER_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "effects/mcp_server.h"
#include "state_machine/rx_common.h"

/* Grace a stopping program (or a closing session) gets. */
#define MCP_SERVER_KILL_GRACE_MS 2000

/* One request waiting for its answer. */
struct pending {
    json_int_t id;
    int64_t deadline; /* now_mono_ms(); moved on by progress notifications */
    int evfd;         /* signalled when done; -1 when the transport waits itself */
    bool done;
    json_t *answer;                  /* the response, when one came */
    char lost[MCP_SERVER_ERROR_MAX]; /* done without answer: why */
    struct pending *next;
};

struct mcp_server;

/*
 * One transport: how messages reach the server and its answers come back.
 * Every operation runs on the caller's thread; the transport hands each
 * message it receives to mcp_server_handle_message.
 */
struct mcp_server_transport {
    const char *name; /* "stdio" or "http", as GET /tools shows it */
    /* Set up s->link from s->cfg, before any thread runs. 0 or -errno with err. */
    int (*init)(struct mcp_server *s, struct rx_error *err);
    /* Free s->link (closed by then). */
    void (*release)(struct mcp_server *s);
    /* Before initialize: start the program, or forget an old session. */
    int (*open)(struct mcp_server *s, struct rx_error *err);
    /* After initialize: the negotiated version. */
    void (*set_version)(struct mcp_server *s, const char *version);
    /* Send one message that wants no answer, waiting at most wait_ms for the
       server to take it, and not past a stop. 0 or -errno with err. */
    int (*send)(struct mcp_server *s, const char *text, int wait_ms,
                struct rx_error *err);
    /* Send request p (linked in s->pending) and wait for its answer, at most
       until p->deadline. 0 (p->done), -EIO with err, -ETIMEDOUT, -ECANCELED. */
    int (*exchange)(struct mcp_server *s, struct pending *p, const char *text,
                    const char *method, int cancel_fd, struct rx_error *err);
    /* Answer a request the server sent (`reply` borrowed); NULL: we cannot. */
    void (*reply)(struct mcp_server *s, json_t *reply, const char *method);
    /* Undo open (the supervisor, on a break or a stop); `why` may gain how
       the program ended. */
    void (*close)(struct mcp_server *s, bool stopping, char *why, size_t size);
};

extern const struct mcp_server_transport mcp_server_stdio_transport;
extern const struct mcp_server_transport mcp_server_http_transport;

struct mcp_server {
    struct mcp_server_config cfg;
    const struct mcp_server_transport *tp;
    void *link; /* the transport's state */
    mcp_server_changed_fn changed;
    void *ctx;

    pthread_mutex_t lock;
    pthread_cond_t wake;
    int refs;                         /* lock */
    enum mcp_status status;           /* lock */
    char error[MCP_SERVER_ERROR_MAX]; /* lock */
    char version[16];                 /* lock */
    json_t *tools;                    /* lock; read-only once published */
    size_t skipped;                   /* lock: tools of that list left out */
    bool refresh, broken, stopping;   /* lock */
    json_int_t next_id;               /* lock */
    struct pending *pending;          /* lock */
    unsigned long calls_ok, calls_failed, restarts, generation; /* lock */
    unsigned warnings, stderr_lines;                            /* lock */
    int64_t stderr_window;                                      /* lock */

    pthread_t thread;
    int stop_pipe[2]; /* readable once stopping: cancels the supervisor's waits */
    pthread_mutex_t init_lock; /* one initialize at a time */
};

/* Every message from the server, from either transport (msg borrowed). */
void mcp_server_handle_message(struct mcp_server *s, json_t *msg);

/* Lock held. Whether a warning about what the server sent is still logged. */
bool mcp_server_may_warn(struct mcp_server *s);

/* Lock held. End every request in flight with `why`. */
void mcp_server_fail_pending(struct mcp_server *s, const char *why);

/* The connection is broken: keep the first reason, wake the supervisor. */
void mcp_server_set_broken(struct mcp_server *s, const char *why);

/* p's deadline, read under the lock (progress moves it on). */
int64_t mcp_server_deadline(struct mcp_server *s, struct pending *p);

/* initialize, then notifications/initialized. The caller holds init_lock. */
int mcp_server_initialize(struct mcp_server *s, int cancel_fd, struct rx_error *err);

#endif
