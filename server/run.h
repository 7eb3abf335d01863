/*
 * run - one agent run on a session, for the client protocols (server/protocols/oai,
 * server/protocols/lg): inputs submitted on a client's behalf, then everything the
 * agent does until the session is idle (its state wants no effect) or waits
 * for a person (a tool call awaiting approval), as SPEC 4.3 defines a run:
 * no effect wanted or running.
 *
 * A session's runs form a lane: one runs at a time, the others wait in the
 * order they were started (the OpenAI protocol's "waits its turn", the
 * LangGraph protocol's `enqueue`). A run at the head of the lane starts when
 * the session is idle (or waits for a person): inputs from other clients or
 * the native API are not runs, and a run waits until what they set off is
 * over. Its inputs are then submitted in order (session_submit_start, as a
 * client's, so they are durable before anything follows), and the run
 * follows the session until it is idle again.
 *
 * What a protocol sees, through run_ops, each call with the session's lock
 * held, in this order: started (once, the inputs accepted), then any number
 * of delta (text streamed onto an assistant message) and step (the session
 * settled: its state durable and its effects reconciled), then ended (once).
 * A run that never starts (its inputs refused, the session deleted, a cancel
 * while it waits) gets only ended. Callbacks may encode and publish frames
 * (server/sse), park_finish, run_ref, run_cancel_held and run_unref of a
 * reference that is not the last (the lane holds one until `ended` has
 * returned), but must not call session_* or other run_* (the lock is held)
 * nor block.
 *
 * Statuses use LangGraph's words (SPEC 4.3): pending (waiting in the lane),
 * running, success, error (an input refused, the store failed, the session
 * deleted), interrupted (cancelled, or waiting for an approval).
 *
 * Depends on server/session (its internals: the lane lives in the session)
 * and state_machine/. One process-wide thread submits the inputs of runs
 * whose turn came (a submit may wait for the pipeline; no HTTP or store
 * thread waits for it).
 * Ownership: a run is refcounted; run_start gives a NEW reference, which the
 * protocol drops with run_unref when it no longer needs the run (the lane
 * holds its own until ended). Inputs are moved in. `arg` is the protocol's;
 * the run never frees it.
 */
#ifndef RUN_H
#define RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/session.h"
#include "state_machine/rx_input.h"
#include "state_machine/rx_state.h"

struct run;
struct rx_outcome;

enum run_status { RUN_PENDING, RUN_RUNNING, RUN_SUCCESS, RUN_ERROR, RUN_INTERRUPTED };

/* "pending", "running", "success", "error", "interrupted". */
const char *run_status_name(enum run_status st);

struct run_ops {
    /* Its inputs were accepted (seq: the last one's); `st` is the state now. */
    void (*started)(void *arg, struct run *r, const struct rx_state *st, int64_t seq);
    /* Text streamed onto assistant message `mid`; `reasoning`: onto its reasoning. */
    void (*delta)(void *arg, struct run *r, const char *mid, const char *delta,
                  bool reasoning);
    /* The session settled with `st` (durable) after input `seq`. */
    void (*step)(void *arg, struct run *r, const struct rx_state *st, int64_t seq);
    /*
     * The run is over: `status` SUCCESS, INTERRUPTED or ERROR; `st` the state
     * (NULL when the session is gone); for ERROR, `why` says what went wrong
     * and `reason` is the machine's word when an input was refused
     * (RX_REASON_NONE otherwise). Last call; the lane lets go of the run.
     */
    void (*ended)(void *arg, struct run *r, enum run_status status,
                  const struct rx_state *st, enum rx_reason reason, const char *why);
    /*
     * Optional (NULL: not wanted): input `seq` was applied while the run is
     * running (after `started`), with outcome `o`, making `st`; called as it
     * is applied, like `started`, so rx_patch_encode(st, o) after started's
     * state gives every later state in order (AG-UI's STATE_DELTA).
     */
    void (*patch)(void *arg, struct run *r, const struct rx_state *st,
                  const struct rx_outcome *o, int64_t seq);
};

/*
 * Queue a run of `n` inputs (moved in: `in` is left released) on `s`; n may
 * be 0 (a client that only follows: at its turn it is `started` with the
 * state, and ends as soon as the session is idle). 0 and a
 * NEW reference in *out; -ENOMEM (the inputs are released), -ENOENT (the
 * session was deleted), -EBUSY (limits.session_queue_max runs already wait
 * in its lane: the inputs are released). ops->ended may come before run_start returns
 * only for a run that never starts (the session deleted meanwhile).
 */
int run_start(struct session *s, struct rx_input *in, size_t n, const struct run_ops *ops,
              void *arg, struct run **out) RX_WUR;
/*
 * Cancel: a run still waiting in the lane ends INTERRUPTED at once; a
 * running one gets a user-cancel, submitted by the starter (its streaming
 * answers stop, its waiting approvals are refused), and ends INTERRUPTED
 * when the session is idle. Never waits; nothing to do for a run that is
 * over; a cancel that cannot be submitted is logged.
 */
void run_cancel(struct run *r);
/* run_cancel from a run_ops callback (the session's lock held). */
void run_cancel_held(struct run *r);

void run_ref(struct run *r);
void run_unref(struct run *r);
enum run_status run_status(const struct run *r);
struct session *run_session(const struct run *r); /* borrowed */

/* True when a run of `s` is running or waiting in its lane (any thread). */
bool run_lane_busy(struct session *s);

/*
 * Stop the submitting thread (shutdown, after the HTTP server stopped):
 * runs still waiting end with ERROR "the server is stopping".
 */
void run_shutdown(void);

/* ---- for server/session (lock held) ---- */

/* Input `seq` was applied with outcome `o`: the running run's `patch`, if any. */
void run__patch(struct session *s, const struct rx_outcome *o, int64_t seq);
/* One of the run's inputs was applied as input `seq`. */
void run__applied(struct run *r, int64_t seq);
/* The session settled: step the running run, end it if idle, start the next. */
void run__settled(struct session *s);
/* An effect of `s` ended (completed, failed or cancelled): the session may be idle. */
void run__effect_ended(struct session *s);
/* Text streamed onto message `mid` of `s`. */
void run__delta(struct session *s, const char *mid, const char *delta, bool reasoning);
/* The session is stopping (deleted, shutdown): every run of it ends ERROR. */
void run__session_stopped(struct session *s);

#endif
