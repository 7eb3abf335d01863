/*
 * http - the HTTP face of Reflexor on libmicrohttpd: the daemon, reading
 * request bodies, auth, and the top-level routes: each client protocol's
 * prefix goes to its door (server/door: the native API, /v1, LangGraph's),
 * then /healthz, /metrics, /client.json and static files.
 *
 * MHD runs a pool of internal epoll threads (limits.http_threads; 0 means one
 * per CPU, at most 4); streams suspend while idle. A request
 * is answered on the access handler's second call at the earliest (answering
 * on the first makes MHD close the connection), after its body is read.
 * Every request under a door is identified first (server/auth: 401 in the
 * door's shape when it cannot be, 429 past limits.user_rate) and its route
 * is given the principal.
 * Depends on server/door (the protocols come in through their tables),
 * server/auth, server/config and server/session.
 * Ownership: struct http_server is caller-allocated; it borrows the config
 * and the session table, which must outlive http_server_stop().
 */
#ifndef HTTP_H
#define HTTP_H

#include <stdbool.h>
#include <stdint.h>

#include "server/config.h"
#include "server/door.h"
#include "server/session.h"
#include "state_machine/rx_common.h"

struct auth;

struct http_server {
    struct MHD_Daemon *daemon;
    struct door door;  /* what the protocols' routes are given */
    struct auth *auth; /* who each request comes from (server/auth) */
    char *web_root;    /* realpath of cfg->web_root, NULL when absent */
    int port;          /* the bound port (useful with port 0) */
};

/* Bind and start serving. 0, or a negative errno with a logged reason. */
int http_server_start(struct http_server *srv, const struct config *cfg,
                      struct session_table *sessions, const char *brain_name) RX_WUR;
/* From now on requests are answered 503 "stopping" (connections are still
   accepted until http_server_stop). */
void http_server_quiesce(struct http_server *srv);
/* Close every connection and free the daemon. */
void http_server_stop(struct http_server *srv);

#endif
