/*
 * relay - a client protocol's request for a session another node owns,
 * passed whole to that node and its answer streamed back (SPEC 6.1: any node
 * answers any route for any session). A run (LangGraph, /v1, AG-UI, A2A)
 * lives where its session's inputs are applied, on the owner: a request that
 * starts, joins, waits for or cancels one on a follower goes there.
 *
 * The request goes out as it came (method, path, query, body and every
 * header but the connection's own, plus X-Reflexor-Forwarded), so the owner
 * checks the credentials again (SPEC 4.4; behind a proxy that authenticates,
 * this node must be one of the owner's auth.trusted_proxies). The owner's
 * answer comes back with its status and headers: a JSON answer once whole
 * (at most RELAY_ANSWER_MAX bytes), an event stream as it arrives, whole
 * events at a time, through a server/sse channel (so a client that leaves
 * is noticed as on any stream, and the relay then stops). A request relayed
 * once is never relayed again: it crosses at most one hop.
 *
 * libcurl does the HTTP, on a thread of its own while the request is parked
 * (server/park): no MHD thread waits.
 *
 * Depends on libcurl, libmicrohttpd, server/door, server/principal,
 * server/cluster, server/park, server/session_table, server/session_follow,
 * server/sse and state_machine/rx_buf.
 * Ownership: the relay keeps copies of everything it sends; the park holds
 * one reference, the thread another.
 */
#ifndef RELAY_H
#define RELAY_H

#include <microhttpd.h>

#include "server/door.h"
#include "server/park.h"
#include "server/principal.h"
#include "state_machine/rx_buf.h"

/* The most of a JSON answer kept to pass on (a stream has no bound). */
#define RELAY_ANSWER_MAX ((size_t)16 << 20)

/*
 * When session `sid` (seen by `who`) is followed here, another live node
 * owning it: relay the request (`method`, `url` its path from the root,
 * `body`) to the owner, set *ret and return 1. 0: go on here (no cluster,
 * the session is this node's, is nobody's and was claimed now, or is not
 * `who`'s: the caller answers as for any unknown id). A request relayed
 * here already is never relayed again: the session is claimed if it is
 * nobody's (then 0), else answered 503. The caller has counted the request
 * (park_enter); *suspended is set when the park was suspended.
 */
int relay_to_owner(struct door *d, const struct principal *who,
                   struct MHD_Connection *conn, const char *sid, const char *method,
                   const char *url, const struct rx_buf *body, struct park **pending,
                   bool *suspended, enum MHD_Result *ret);

/*
 * The same for a door's route as a whole: counts the request, and gives it
 * back when it was not suspended. For routes that do not park otherwise.
 */
int relay_route(struct door *d, const struct principal *who, struct MHD_Connection *conn,
                const char *sid, const char *method, const char *url,
                const struct rx_buf *body, struct park **pending, enum MHD_Result *ret);

#endif
