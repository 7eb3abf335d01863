/*
 * api_internal - what server/api.c and server/api_sessions.c share: the
 * answers and checks every route uses, and the routes of the sessions list
 * (search, rename, export, import, the sessions feed) that api_sessions.c
 * serves. Private to those two files; http.c uses api.h.
 *
 * Depends on libmicrohttpd, server/door, server/session and
 * state_machine/rx_buf; its files, on what api.h names.
 * Ownership: as in api.h, `body` is borrowed; a request that parks leaves
 * its park in *slot, the request's.
 */
#ifndef API_INTERNAL_H
#define API_INTERNAL_H

#include <stdbool.h>

#include <microhttpd.h>

#include "server/door.h"
#include "server/session.h"
#include "state_machine/rx_buf.h"

struct sse_channel;
struct sse_frame;

/* application/json or text/plain (what the original accepted). */
bool api__content_type_ok(struct MHD_Connection *conn);
/*
 * The one status per cause of SPEC 4 for an errno of the store or the table:
 * 404, 400 (at), 507, 503, 429, 501 (no log), else 500.
 */
enum MHD_Result api__store_error(struct MHD_Connection *conn, int err);
/* session_attach_fn: a channel becomes this connection's SSE response. */
void *api__attach_stream(void *conn, struct sse_channel *ch, struct sse_frame **first,
                         size_t n, bool closed);

/* ---- api.c, for the other api_*.c ---- */

struct park;
/* 503 with Retry-After: 1 and {"error": code, "message": msg}: the client
   (or nginx) tries again, soon. */
enum MHD_Result api__retry_soon(struct MHD_Connection *conn, const char *code,
                                const char *msg);

/* ---- api_sessions.c ---- */

/*
 * GET /sessions: the plain array when no paging is asked; with q, limit or
 * before, one page {"sessions":[...],"next":T|null}. Only `who`'s sessions
 * (an admin's: all, or ?owner='s).
 */
enum MHD_Result api_sessions_list(struct door *srv, const struct principal *who,
                                  struct MHD_Connection *conn);
/* PATCH /sessions/<sid> {"title": ...}. */
enum MHD_Result api_session_rename(struct door *srv, struct MHD_Connection *conn,
                                   struct session *s, const struct rx_buf *body);
/* GET /sessions/<sid>/export: the log as one document, streamed page by page. */
enum MHD_Result api_session_export(struct door *srv, struct MHD_Connection *conn,
                                   struct session *s);
/*
 * POST /sessions/import: a new session from an exported document, replayed
 * on a thread of its own while the connection waits parked in *slot (at most
 * limits.imports_running at once; 429 past it). `body` is borrowed until the
 * park is finished: the request, which owns it, outlives its park.
 */
enum MHD_Result api_sessions_import(struct door *srv, const struct principal *who,
                                    struct MHD_Connection *conn,
                                    const struct rx_buf *body, struct park **slot);
/* GET /events: the sessions feed (SSE) of `who`'s sessions. */
enum MHD_Result api_events(struct door *srv, const struct principal *who,
                           struct MHD_Connection *conn);

#endif
