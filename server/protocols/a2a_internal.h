/*
 * a2a_internal - what the files of the A2A door share: JSON-RPC answers
 * (a2a.c) and the tasks (a2a_task.c). Private to server/protocols/a2a*.c.
 *
 * A task is one A2A task: the user message that opened it, and the engine
 * runs (server/run) that carried it: the first, then one per decision sent
 * on it while it was input-required. Tasks live in a bounded registry in
 * memory; with a store each is also a record (kind A2A_TASK_KIND, key its
 * id, owned by its context's session), written when it starts and when a
 * run of it ends, so GetTask finds it after a restart and on every node
 * (its history and answer are read from the session). Live streams and
 * waiting requests are in memory only.
 *
 * Locks: the registry's lock, then a task's lock; the engine calls back with
 * the session's lock held and takes the task's lock under it, so no
 * session_* or run_* call is made with a task's lock held.
 * Depends on server/door, server/session, server/run, server/park,
 * server/sse, server/records, server/protocols/a2a_wire, state_machine/rx_input
 * and libmicrohttpd.
 * Ownership: tasks are refcounted (a2a_task_unref); functions that hand one
 * out give a NEW reference. json_t results are NEW; `rpc_id` (the request's
 * id as JSON text) is copied.
 */
#ifndef A2A_INTERNAL_H
#define A2A_INTERNAL_H

#include <stdbool.h>

#include <jansson.h>
#include <microhttpd.h>

#include "server/door.h"
#include "server/park.h"
#include "server/protocols/a2a_wire.h"
#include "server/session.h"
#include "state_machine/rx_input.h"

#define A2A_TASK_KIND "a2a.task"
#define A2A_TASKS_MAX 1000

/* A2A's JSON-RPC error codes. */
enum {
    A2A_PARSE_ERROR = -32700,
    A2A_INVALID_REQUEST = -32600,
    A2A_METHOD_NOT_FOUND = -32601,
    A2A_INVALID_PARAMS = -32602,
    A2A_INTERNAL_ERROR = -32603,
    A2A_TASK_NOT_FOUND = -32001,
    A2A_TASK_NOT_CANCELABLE = -32002,
    A2A_UNSUPPORTED_OPERATION = -32004,
    A2A_CONTENT_TYPE_NOT_SUPPORTED = -32005,
    A2A_VERSION_NOT_SUPPORTED = -32009,
};

/* {"jsonrpc":"2.0","id":<rpc_id>,"result":<result>} as text (malloc'd), or NULL. */
char *a2a__envelope(const char *rpc_id, json_t *result);
/* A JSON-RPC result (stolen), HTTP 200. */
enum MHD_Result a2a__result(struct MHD_Connection *conn, const char *rpc_id,
                            json_t *result);
/* A JSON-RPC error, HTTP 200 (a transport that worked, a request that did not). */
enum MHD_Result a2a__error(struct MHD_Connection *conn, const char *rpc_id, int code,
                           const char *fmt, ...) __attribute__((format(printf, 4, 5)));

struct a2a_task;

/*
 * A new task of session `ctx`, opened by user message `umid` whose text is
 * `text`, state submitted, registered (and stored). NEW, or NULL on ENOMEM.
 */
struct a2a_task *a2a_task_create(const struct config *cfg, const char *ctx,
                                 const char *umid, const char *text);
/* The task `id` (NEW): the registry's, else revived from the store; NULL if none. */
struct a2a_task *a2a_task_get(const struct config *cfg, const char *id);
void a2a_task_unref(struct a2a_task *t);
const char *a2a_task_context(const struct a2a_task *t);
const char *a2a_task_umid(const struct a2a_task *t);
/* A run of it is in flight (queued or running). */
bool a2a_task_busy(struct a2a_task *t);
/* Its state as last known (not reading the session). */
enum a2a_state a2a_task_state(struct a2a_task *t);

/*
 * Run `n` inputs (moved in, as run_start) on `s` for the task. `cancel`:
 * they cancel it (a user-cancel of an input-required task): it ends
 * canceled. 0; -ENOMEM, -ENOENT (the session is gone), -EBUSY (its lane
 * is full).
 */
int a2a_task_start(struct a2a_task *t, struct session *s, struct rx_input *in, size_t n,
                   bool cancel) RX_WUR;
/* Cancel the run in flight (run_cancel: never waits). The task ends canceled. */
void a2a_task_cancel(struct a2a_task *t);

/* NEW: the 1.0 Task now, reading session `s` (NULL: as last known). */
json_t *a2a_task_view(struct a2a_task *t, struct session *s);
/*
 * The task's events as an SSE response of JSON-RPC results (1.0
 * StreamResponses, or 0.3 events with `v03`): the task as it is, then what
 * happens until its run ends (at once when none is in flight).
 */
enum MHD_Result a2a_task_stream(struct a2a_task *t, struct MHD_Connection *conn,
                                const char *rpc_id, bool v03);
/*
 * Answer with the task once its run is over (parked meanwhile): 1.0's
 * SendMessage result {"task": ...} with `wrap`, else the Task (CancelTask).
 */
enum MHD_Result a2a_task_wait(struct a2a_task *t, struct door *srv,
                              struct MHD_Connection *conn, const char *rpc_id, bool v03,
                              bool wrap, struct park **slot);
/* Drop every task (shutdown). */
void a2a_task_shutdown(void);

/* ---- a2a.c and a2a_decide.c: the methods ---- */

/* What every method is given: the request, read. */
struct call {
    struct door *d;
    const struct principal *who;
    struct MHD_Connection *conn;
    const char *rpc_id; /* the id as JSON text */
    json_t *params;     /* an object */
    bool v03;
    struct park **slot;
    const struct rx_buf *body; /* the whole request, for a relay */
};

/*
 * A task the caller may see and its session (both NEW): 0, or the error
 * answered in *ret (-EINVAL no id, -ENOENT unknown or another's).
 */
int a2a__task_of(struct call *c, const char *id, struct a2a_task **t, struct session **s,
                 enum MHD_Result *ret);
/* A message on an existing task: the decision it carries; *started once it runs. */
enum MHD_Result a2a__send_decision(struct call *c, struct a2a_msg *m,
                                   struct a2a_task **out, bool *started);
/* A decision sent to a context with no taskId: a new task answering what waits. */
enum MHD_Result a2a__send_context_decision(struct call *c, struct a2a_msg *m,
                                           struct a2a_task **out);

#endif
