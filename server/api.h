/*
 * api - the session routes under the API prefix (SPEC section 4): sessions,
 * inputs, streams, messages, history, time travel and forks.
 *
 * Depends on server/session, server/session_table, server/reply and server/sse.
 * Called by server/http once the request's body is read and the client is
 * authorized; `path` is the URL after the prefix.
 * Ownership: `body` is borrowed (the request's bytes, bounded by limits.body_max).
 */
#ifndef API_H
#define API_H

#include <microhttpd.h>

#include "server/http.h"
#include "state_machine/rx_buf.h"

enum MHD_Result api_route(struct http_server *srv, struct MHD_Connection *conn,
                          const char *method, const char *path,
                          const struct rx_buf *body);

#endif
