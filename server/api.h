/*
 * api - the session routes under the API prefix (SPEC section 4): sessions,
 * inputs, streams, messages, history, time travel and forks; the sessions
 * list's search, rename, export, import and feed are in api_sessions.c.
 *
 * Depends on server/door (the door it is), session, session_table,
 * session_follow, session_import, cluster, reply, sse and metrics,
 * effects/toolkit, effects/log, server/relay and state_machine/;
 * never on server/http, which knows it only through api_door.
 * Called by server/http once the request's body is read and the client is
 * authorized; `path` is the URL after the prefix.
 * A POST whose input must first be durable (group commit) parks its
 * connection (server/park) and leaves the park in the request's slot; once
 * the store has answered, the connection is resumed and server/http, seeing
 * the slot set, answers from the park instead of routing again.
 * Ownership: `body` is borrowed (the request's bytes, bounded by limits.body_max).
 * The slot's park belongs to the request (its ops->release frees it).
 */
#ifndef API_H
#define API_H

#include <microhttpd.h>

#include "server/door.h"

/* The door of the native API (server/door), under its prefix; see above. */
extern const struct door_ops api_door;

#endif
