/*
 * api - the session routes under the API prefix (SPEC section 4): sessions,
 * inputs, streams, messages, history, time travel and forks; the sessions
 * list's search, rename, export, import and feed are in api_sessions.c.
 *
 * Depends on server/session, server/session_table, server/reply and server/sse.
 * Called by server/http once the request's body is read and the client is
 * authorized; `path` is the URL after the prefix.
 * A POST whose input must first be durable (group commit) suspends its
 * connection and leaves a struct api_pending in the request's slot; once the
 * store has answered, the connection is resumed and the caller, seeing the
 * slot set, calls api_pending_answer instead of routing again.
 * Ownership: `body` is borrowed (the request's bytes, bounded by limits.body_max).
 * The slot's api_pending belongs to the request: api_pending_answer or
 * api_pending_release frees it.
 */
#ifndef API_H
#define API_H

#include <microhttpd.h>

#include "server/http.h"
#include "state_machine/rx_buf.h"

struct api_pending;

/* Route one request; `*pending` (NULL on entry) may be set, see above. */
enum MHD_Result api_route(struct http_server *srv, struct MHD_Connection *conn,
                          const char *method, const char *path, const struct rx_buf *body,
                          struct api_pending **pending);
/* The resumed request's answer, queued on `conn`; *pending is freed and NULL. */
enum MHD_Result api_pending_answer(struct http_server *srv, struct MHD_Connection *conn,
                                   struct api_pending **pending);
/* A request ended before its answer was sent (connection closed). NULL is fine. */
void api_pending_release(struct api_pending *p);
/* Wait until no connection is suspended for an answer (before MHD_stop_daemon). */
void api_pending_drain(void);

#endif
