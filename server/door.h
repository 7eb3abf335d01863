/*
 * door - a client protocol's way into the server, and what its routes are
 * given. Each protocol (the native API, OpenAI's /v1, LangGraph's) is one
 * `struct door_ops` under its own configurable prefix. The HTTP server
 * (server/http) sends a request to the door whose prefix it is under, and
 * answers a refusal it makes before the door sees the request (no
 * credentials, a body too large) in that door's own error shape. Routes are
 * given `struct door`, the parts of the server every protocol shares, never
 * the HTTP server itself: the protocols do not depend on server/http, and
 * server/http knows them only through their tables.
 *
 * Depends on libmicrohttpd, server/config, server/park, server/principal and
 * state_machine/rx_buf;
 * the session table and the cluster are only named.
 * Ownership: struct door is embedded in the HTTP server, which owns it and
 * everything it points to; a route borrows it for the request. The body a
 * route is given is borrowed; a route that parks the request stores its
 * park in *pending (the HTTP server ends and releases it).
 */
#ifndef DOOR_H
#define DOOR_H

#include <stdbool.h>
#include <stdint.h>

#include <microhttpd.h>

#include "server/config.h"
#include "server/park.h"
#include "server/principal.h"
#include "state_machine/rx_buf.h"

struct cluster;
struct session_table;

struct door {
    const struct config *cfg;
    struct session_table *sessions;
    const char *brain_name;
    int64_t started_ms;
    bool stopping;           /* set once at shutdown; read with door_is_stopping */
    struct cluster *cluster; /* NULL: one node alone; set once, read atomically */
};

/* True once the server began to stop (any thread may ask): routes answer 503. */
bool door_is_stopping(const struct door *d);
/*
 * The request's Origin when it is a page on this machine (localhost,
 * 127.0.0.1 or [::1], any port): the browser clients a protocol answers
 * CORS for (agent-chat-ui, CopilotKit in development). Any other site gets
 * no CORS header, so it cannot read a local server's threads from a
 * visitor's browser. Borrowed, or NULL.
 */
const char *door_local_origin(struct MHD_Connection *conn);
/* A non-negative decimal integer (a query value, Last-Event-ID), or -1. */
long long door_parse_count(const char *v);

struct door_ops {
    const char *name;
    /* Its prefix, read from the config at each request: "" turns it off. */
    const char *(*prefix)(const struct config *cfg);
    /*
     * A request under the prefix from `who` (SPEC 4.4: a route shows `who`
     * only its own sessions, another's answered as an unknown id); `path` is
     * what follows the prefix ("" or "/...").
     */
    enum MHD_Result (*route)(struct door *d, const struct principal *who,
                             struct MHD_Connection *conn, const char *method,
                             const char *path, const struct rx_buf *body,
                             struct park **pending);
    /* The 401 for a request without the right credentials. */
    enum MHD_Result (*unauthorized)(struct MHD_Connection *conn);
    /* The 413 for a body over the bound, with `why` to say so. */
    enum MHD_Result (*too_large)(struct MHD_Connection *conn, const char *why);
    /* The 429 of a per-principal limit, `why`, with Retry-After: retry_s. */
    enum MHD_Result (*too_many)(struct MHD_Connection *conn, const char *why,
                                int retry_s);
    /* OPTIONS goes to the route without credentials (a CORS preflight has none). */
    bool open_preflight;
};

#endif
