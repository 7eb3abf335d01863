/*
 * lg_internal - what the files of the LangGraph module share (server/protocols/lg.c,
 * lg_threads.c, lg_state.c, lg_runs.c, lg_run*.c): answers in the protocol's shapes and
 * the entry points of its files. Private to server/protocols/lg*; http.c uses lg.h.
 *
 * Errors are the LangGraph server's {"detail": "..."}. Statuses are chosen
 * so the SDK does not retry what cannot succeed: 404 unknown ids, 409 a
 * conflict, 422 a body it could not use (all in its no-retry list).
 * Every answer carries CORS headers for a local origin (a browser client
 * such as agent-chat-ui on http://localhost:3000).
 * Depends on libmicrohttpd, jansson, server/door, server/park, server/session
 * and state_machine/rx_buf; never on server/http.
 * Ownership: json_t passed to the reply helpers is stolen; strings and
 * bodies are borrowed.
 */
#ifndef LG_INTERNAL_H
#define LG_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>
#include <microhttpd.h>

#include "server/door.h"
#include "server/park.h"
#include "server/session.h"
#include "state_machine/rx_buf.h"

/* {"detail": <fmt...>} with `status`. */
enum MHD_Result lg__detail(struct MHD_Connection *conn, unsigned status, const char *fmt,
                           ...) __attribute__((format(printf, 3, 4)));
/*
 * `j` (stolen; NULL: out of memory, 500) as JSON with `status`, and
 * Content-Location when `location` is set.
 */
enum MHD_Result lg__reply(struct MHD_Connection *conn, unsigned status, json_t *j,
                          const char *location);
/* A body-less answer (202, 204). */
enum MHD_Result lg__empty(struct MHD_Connection *conn, unsigned status);
/* Queue `r` (destroyed here; NULL: 500) with the CORS headers. */
enum MHD_Result lg__queue(struct MHD_Connection *conn, unsigned status,
                          struct MHD_Response *r);

/*
 * The request's JSON body: an object, or {} when the body is empty. NEW
 * reference, or NULL with the 422 already answered in *ret.
 */
json_t *lg__body(struct MHD_Connection *conn, const struct rx_buf *body,
                 enum MHD_Result *ret);
/* 429 {"detail": why} with Retry-After: retry_s (a per-principal limit). */
enum MHD_Result lg__too_many(struct MHD_Connection *conn, const char *why, int retry_s);
/* A query value as a non-negative count, `dflt` when absent; -1 when bad. */
long long lg__query_count(struct MHD_Connection *conn, const char *key, long long dflt);

/*
 * The session behind thread `tid` (NEW reference), or NULL with 404
 * answered in *ret: also when it is another principal's than `who`'s.
 */
struct session *lg__thread(struct door *srv, const struct principal *who,
                           struct MHD_Connection *conn, const char *tid,
                           enum MHD_Result *ret);

/* ---- lg_threads.c ---- */

/* /threads, /threads/search and /threads/<tid>[/state|/history...]. */
enum MHD_Result lg_threads_route(struct door *srv, const struct principal *who,
                                 struct MHD_Connection *conn, const char *method,
                                 const char *path, const struct rx_buf *body);
/* NEW: a thread's metadata: {"graph_id","assistant_id"} under what clients set. */
json_t *lg__thread_meta(const char *tid);
/* NEW: the same for what clients set being `set` (borrowed; NULL: nothing). */
json_t *lg__thread_meta_with(json_t *set);
/*
 * NEW: {thread id: what clients set} of every thread with metadata in the
 * store, read in pages (one query per page, not one per thread), for a
 * search that filters on it. NULL with *err 0 when there is no store (ask
 * lg__thread_meta), or with the store's errno / -ENOMEM.
 */
json_t *lg__thread_meta_all(int *err);
/* The answer for an errno of the session table or the store (404, 409, 507...). */
enum MHD_Result lg__table_error(struct MHD_Connection *conn, int err, const char *tid);
/* Forget every thread's metadata (lg_shutdown). */
void lg_threads_shutdown(void);

/* ---- lg_state.c ---- */

/* "idle", "busy", "interrupted" or "error" for a thread's session. */
const char *lg_thread_status(struct session *s);
/*
 * NEW: the thread object, only the `select`ed fields (a list, or NULL: all).
 * NULL with *err: -ENOENT (deleted meanwhile) or -ENOMEM.
 */
json_t *lg__thread_json(struct session *s, json_t *select, int *err);
/* 200 with the thread object (404 when it was deleted meanwhile). */
enum MHD_Result lg__reply_thread(struct MHD_Connection *conn, struct session *s);
/* The seq of the thread's newest input (its checkpoint). 0, -ENOENT, -ENOMEM. */
int lg__thread_seq(struct session *s, int64_t *seq);
/* /threads/<tid>/state, /state/<checkpoint>, /state/checkpoint, /history. */
enum MHD_Result lg__state_route(struct door *srv, struct MHD_Connection *conn,
                                const char *method, struct session *s, const char *rest,
                                const struct rx_buf *body);

/* ---- lg_runs.c ---- */

/* /threads/<tid>/runs[...]: `rest` is what follows "/runs". */
enum MHD_Result lg_runs_route(struct door *srv, const struct principal *who,
                              struct MHD_Connection *conn, const char *method,
                              const char *tid, const char *rest,
                              const struct rx_buf *body, struct park **slot);

/* ---- lg_search.c ---- */

/* POST /threads/search: the threads filtered, sorted and paged, from the store's list. */
enum MHD_Result lg__threads_search(struct door *srv, const struct principal *who,
                                   struct MHD_Connection *conn,
                                   const struct rx_buf *body);

#endif
