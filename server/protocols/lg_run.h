/*
 * lg_run - the LangGraph runs the server knows: one record per run (its
 * object as GET .../runs/<rid> shows it), the run's events as SSE frames
 * (server/protocols/lg_frames: kept, bounded in bytes, for joins with Last-Event-ID),
 * a channel its live streams follow, and the requests that wait for its end
 * (runs/wait, runs/<rid>/join, cancel?wait=1).
 *
 * A record drives one engine run (server/run): its callbacks turn the
 * session's progress into events: `metadata` first, then, as the client
 * asked (stream_mode), `values` (the thread's values when they change),
 * `updates` ({"model"|"tools": {"messages": [...]}}, {"__interrupt__": [...]}),
 * `messages` (messages-tuple: [chunk, metadata] per token delta, a settled
 * message that was not streamed as one whole chunk) and `custom` (tool call
 * progress: {"type":"tool_call","id","name","status"}), then `error` when
 * the run fails. When the run ends its streams end and its waiters are
 * answered from its final values (with "__interrupt__"), or {"__error__"}.
 *
 * Records live in memory (the registry): at most LG_RUNS_MAX, the oldest
 * finished ones go first; only the LG_RUNS_REPLAYABLE newest finished runs
 * keep their frames; and what the finished ones keep (their metadata and
 * kwargs as JSON text, frames, final values) is at most
 * limits.lg_runs_bytes in all, the oldest finished unlisted past it (the one
 * that just ended always stays). With a store (server/records), a run that
 * is over is also a record there (kind LG_RUN_KIND, key "<tid>/<rid>",
 * owned by the thread's session), written behind its end: after a restart,
 * on another node or once the registry let it go, lg_run_load revives it
 * (the run object; no frames; joins get the thread's values) and
 * lg_run_list lists it. Live runs (streams, waiters) are in memory only.
 *
 * Locks: the registry's lock, then a record's lock (never the other way);
 * the engine calls back with the session's lock held and takes the record's
 * lock under it, so no session_* or run_* call is made with either held.
 * Depends on server/run, server/door, server/park, server/sse,
 * server/protocols/lg_frames, server/protocols/lg_msg and libmicrohttpd.
 * Ownership: records are refcounted: lg_run_create, lg_run_find and the
 * lists give NEW references (lg_run_unref); the registry, the engine (until
 * `ended`) and each waiter hold their own. json_t arguments are stolen (_new)
 * or borrowed as marked; json_t results are NEW.
 */
#ifndef LG_RUN_H
#define LG_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <microhttpd.h>

#include "server/door.h"
#include "server/park.h"
#include "server/run.h"
#include "state_machine/rx_common.h"

#define LG_RUNS_MAX        1000
#define LG_RUNS_REPLAYABLE 64
/* The store's records of runs that are over. */
#define LG_RUN_KIND "lg.run"

/* stream_mode, as a bit set; modes Reflexor has no events for are accepted. */
enum {
    LG_MODE_VALUES = 1 << 0,
    LG_MODE_UPDATES = 1 << 1,
    LG_MODE_MESSAGES = 1 << 2, /* messages-tuple */
    LG_MODE_CUSTOM = 1 << 3,
};

enum lg_multitask { LG_MT_REJECT, LG_MT_ENQUEUE, LG_MT_INTERRUPT, LG_MT_ROLLBACK };

struct lg_run;

/* Parse a multitask_strategy word. 0 or -EINVAL. */
int lg_multitask_parse(const char *s, enum lg_multitask *out) RX_WUR;

/*
 * A new pending record for thread `tid`, registered, its `metadata` event
 * made. `metadata` (an object) and `kwargs` are stolen. NEW reference, or
 * NULL on ENOMEM.
 */
struct lg_run *lg_run_create(const struct config *cfg, const char *tid, unsigned modes,
                             enum lg_multitask mt, json_t *metadata, json_t *kwargs);
/*
 * Start it on `s` with `n` inputs (moved in, as run_start). 0; -ENOMEM or
 * -ENOENT (the session is gone): the record is then unregistered.
 */
int lg_run_start(struct lg_run *lr, struct session *s, struct rx_input *in,
                 size_t n) RX_WUR;
/* Cancel (run_cancel: never waits; nothing to do when over). */
void lg_run_cancel(struct lg_run *lr);
/* Cancel every run of `tid` that is not over (multitask "interrupt"). */
void lg_run_cancel_thread(const char *tid);

void lg_run_ref(struct lg_run *lr);
void lg_run_unref(struct lg_run *lr);
const char *lg_run_id(const struct lg_run *lr);
bool lg_run_is_over(const struct lg_run *lr);

/* The run `rid` of thread `tid` (NEW), or NULL. */
struct lg_run *lg_run_find(const char *tid, const char *rid);
/* NEW: the run object {run_id, thread_id, assistant_id, ...}. */
json_t *lg_run_json(struct lg_run *lr);
/*
 * NEW: the runs of `tid`, newest first, `status` (NULL: any), paged: the
 * registry's and, with a store, the records of the others. NULL on ENOMEM
 * (or a store that cannot be read: logged).
 */
json_t *lg_run_list(const struct config *cfg, const char *tid, const char *status,
                    size_t limit, size_t offset);
/* True when the newest run of `tid` ended with an error (thread status). */
bool lg_run_thread_failed(const char *tid);
/*
 * A run of the thread of `s` that is over and known only from the store,
 * revived (not registered): 0 and a NEW reference in *out, whose object is
 * the stored one and whose joins get the thread's values now; -ENOENT (no
 * such record, or no store), -ENOMEM or the store's errno.
 */
int lg_run_load(const struct config *cfg, struct session *s, const char *rid,
                struct lg_run **out) RX_WUR;
/* Forget one record (DELETE .../runs/<rid>), in the store too. */
void lg_run_forget(struct lg_run *lr);
/* Forget the records of a deleted thread. */
void lg_run_forget_thread(const char *tid);

/*
 * The run's events as an SSE response: kept frames with an id above `after`
 * (< 0: all), then live ones until the run ends (at once for a run that is
 * over). With `cancel_on_close`, a client that goes away before the end
 * cancels the run (on_disconnect "cancel"): a watcher is left in *slot,
 * which server/http releases when the request ends. Queued with the headers
 * Content-Location (`location`, borrowed) and Location (its stream). MHD's
 * verdict; 500 on ENOMEM.
 */
enum MHD_Result lg_run_stream(struct lg_run *lr, struct MHD_Connection *conn,
                              int64_t after, bool cancel_on_close, const char *location,
                              struct park **slot);

enum lg_wait_kind {
    LG_WAIT_VALUES, /* 200 with the final values (runs/wait, join) */
    LG_WAIT_EMPTY,  /* 204 (cancel?wait=1) */
};
/*
 * Answer once the run is over, parking the request meanwhile (server/park):
 * 503 when the server is stopping. `location` (borrowed, may be NULL) is
 * sent as Content-Location.
 */
enum MHD_Result lg_run_wait(struct lg_run *lr, struct door *srv,
                            struct MHD_Connection *conn, enum lg_wait_kind kind,
                            const char *location, struct park **slot);

/* Drop every record (lg_shutdown). */
void lg_run_shutdown(void);

#endif
