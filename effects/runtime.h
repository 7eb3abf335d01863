/*
 * runtime - the keyed effect runtime of one session (SPEC 3.4, Moorex), and
 * the bounded pool of worker threads the effects of every session run on.
 *
 * After every accepted input the session calls runtime_reconcile() with the
 * new state: effects whose key is newly wanted start; running effects whose
 * key is gone are cancelled, except the effect whose own input removed the
 * key (the `cause`): it runs on to its end, and if its key comes back while
 * it runs it is the same effect, never a second one. Such an effect (its key
 * gone by its own input and not back) is cancelled later only by an input
 * with no effect as its cause (a client's: user-cancel, a newer message);
 * another effect's input leaves it running.
 *
 * No thread per effect: a started effect waits for a worker of its pool
 * (runtime_pool.h, included here: at most `max_workers` threads for the
 * whole process, made as needed and then reused) and for a free place among
 * its session's `session_max`. What is over either limit waits in start
 * order (FIFO: first in the session's own list, then in the pool's queue). A
 * cancel of an effect still waiting removes it at once: it never runs. An
 * effect occupies its worker until it returns, blocking included (an LLM
 * stream, a brain's pauses, a command tool, the wait before a restart), so
 * max_workers bounds the effects *running* at once, not those started; see
 * docs/ARCHITECTURE.md.
 *
 * What an effect gets (SPEC 3.4: never a copy of the session): when a worker
 * takes it up, under the host's lock and at a cost that does not grow with
 * the history, an ask gets the brain's view of the state (rx_context_view:
 * the summary, the records after summaryCutAt and the RX_CONTEXT_OLDER_MAX
 * newest tool records before it) and the id of its own `streaming` message
 * if one exists (resume); a tool gets its record's id, name and parameters.
 *
 * Events, each given to host->event() with the lock held, per effect:
 * "effect-started" once it is started (accepted into the runtime, running or
 * waiting for a worker; always before the others); then exactly one of
 * "effect-canceled" (at the moment of the cancel; nothing more is reported
 * for it, whatever it returns), "effect-completed" (it returned 0) or
 * "effect-failed" (it returned an error).
 *
 * Restarts: an effect that completes or fails while its key is still wanted
 * (by the state of that moment) starts again as a new effect, with a new
 * "effect-started", after runtime_backoff_ms(cfg, n) for the nth restart in a
 * row (waited on its worker). The wait ends at once when the effect is
 * cancelled. A start by reconcile counts from 0 again.
 *
 * Guarded dispatch: an effect's inputs, chunks and reasoning reach the host
 * only while it is not cancelled; afterwards they return -ECANCELED and apply
 * nothing. A chunk (or reasoning) takes no lock of the runtime or of the pool.
 * An ask's system prompt is the session's settings.systemPrompt (from its
 * view) when set, else the configured one.
 *
 * Locking: every runtime_* call on a runtime except runtime_create/
 * _wait_idle/_destroy/_backoff_ms is made with the host's lock held, and
 * workers take that lock (host->lock) before touching the runtime. The pool's
 * lock and the runtime's idle lock are leaves: taken alone or under the
 * host's lock, never the other way round.
 * Depends on state_machine/, the brain/toolkit interfaces and runtime_pool;
 * not on server/.
 * Ownership: the host, brain, toolkit and pool are borrowed and must outlive
 * the runtime. Each effect holds a host reference from its start (host->ref)
 * to its end; a worker's host->unref after an effect ran is the last thing it
 * does with that runtime and host, so a host freed on its last unref is safe.
 * A waiting effect cancelled by runtime_reconcile/_cancel_all is unreffed
 * there, with the lock held: the caller holds a reference of its own, so that
 * unref is never the last.
 */
#ifndef RUNTIME_H
#define RUNTIME_H

#include <stdbool.h>
#include <stdint.h>

#include "effects/brain.h"
#include "effects/runtime_pool.h"
#include "state_machine/rx_effects.h"
#include "state_machine/rx_input.h"
#include "state_machine/rx_state.h"
#include "state_machine/rx_common.h"

struct toolkit;
struct effect;

/* Effects of one session on the pool's workers at once, by default. */
#define RUNTIME_SESSION_MAX_DEFAULT 8

/* What the session (the host) provides, for every session alike (each call
   gets the runtime's ctx). Called from worker threads. */
struct runtime_host {
    void (*lock)(void *ctx);
    void (*unlock)(void *ctx);
    /* Current state, with the lock held (borrowed). */
    const struct rx_state *(*state)(void *ctx);
    /*
     * Apply an input from effect `fx`, lock NOT held (the host takes it and
     * reconciles with `fx` as the cause). 0 accepted or unchanged, -EPROTO
     * rejected, -ECANCELED, -ENOMEM. The runtime never calls it for an effect
     * already cancelled, but a cancel can land between that check and the host
     * taking its lock: so the host checks effect_is_cancelled() again under the
     * lock and then returns -ECANCELED without applying anything.
     */
    int (*dispatch)(void *ctx, struct effect *fx, struct rx_input *in);
    /* Streamed text of a started message from `fx`, lock NOT held; the same
       two checks as dispatch. 0, -ECANCELED or -ENOENT. */
    int (*chunk)(void *ctx, const struct effect *fx, const char *message_id,
                 const char *delta);
    /* Streamed reasoning of a started message, as chunk(); NULL: dropped. */
    int (*reasoning)(void *ctx, const struct effect *fx, const char *message_id,
                     const char *delta);
    /* An effect event (see above); lock held. `type` is "effect-started" etc. */
    void (*event)(void *ctx, const char *type, const struct effect *fx);
    /* Keep the host alive while an effect lives (from its start to its end).
       unref is called without the lock by a worker, and may then free the host
       and the runtime; or with the lock held, for an effect cancelled before
       it reached a worker, when it is never the last (see above). */
    void (*ref)(void *ctx);
    void (*unref)(void *ctx);
    /*
     * An ask resumes streaming message `message_id` (after a restart, a
     * takeover, a retry; SPEC 3.7), lock held: the text its followers were
     * shown of it, copied into *text (malloc'd, NUL-terminated; NULL and 0:
     * none), which the brain continues; the host counts the brain's next
     * chunk as following it. NULL: not known (the brain starts over).
     * 0 or -ENOMEM.
     */
    int (*resume)(void *ctx, const char *message_id, char **text, size_t *len);
};

struct runtime_config {
    struct brain *brain;         /* borrowed */
    const struct toolkit *tools; /* borrowed */
    const char *system_prompt;   /* borrowed */
    struct runtime_pool *pool;   /* borrowed; NULL: runtime_pool_shared() */
    int session_max;    /* effects of this runtime on workers at once; < 1: the default */
    int backoff_ms;     /* first restart delay; 0: restart at once */
    int backoff_max_ms; /* no restart waits longer */
    /*
     * How a restart waits `ms` (runtime_backoff_ms) before it runs; NULL (the
     * default): poll(2) on the effect's cancel fd. A hook returns 0, or
     * -ECANCELED once effect_is_cancelled(fx) (the effect then ends, reported
     * as cancelled). Called on the worker, lock NOT held. For tests.
     */
    int (*sleep_ms)(void *arg, const struct effect *fx, int ms);
    void *sleep_arg;
    /*
     * What a tool call's idempotency key starts with (SPEC 3.7): the key is
     * "<key_prefix>/<toolCallId>", the session's id and the call's, the same
     * for every run of the call, on every node. Borrowed; outlives the
     * runtime. NULL: "".
     */
    const char *key_prefix;
};

/* NULL on ENOMEM. The config is copied; `host` is borrowed and outlives the
   runtime (a static table: sessions do not pay for a copy each); `ctx` is
   what every host call gets. */
struct runtime *runtime_create(const struct runtime_config *cfg,
                               const struct runtime_host *host, void *ctx) RX_WUR;
/*
 * Start and cancel effects so the running set matches effects_at(s).
 * `cause` is the effect whose input produced `s` (NULL for any other source).
 * Lock held. First every running effect whose key `s` no longer wants is
 * cancelled (except `cause`, and, when `cause` is an effect, those whose own
 * earlier input removed their key), then each newly wanted key that is not
 * running starts, in effects_at order.
 * Returns 0, or -ENOMEM / -EAGAIN (no worker thread at all) from the first
 * start that failed. That is a partial reconcile: the cancels are done, the keys before
 * the failed one have started, it and the keys after it have not, and nothing
 * here retries them: the caller reconciles again (server/: a session marks
 * itself and the housekeeping thread tries again within a second). If
 * effects_at itself fails (-ENOMEM), nothing is cancelled or started.
 */
int runtime_reconcile(struct runtime *rt, const struct rx_state *s,
                      const struct effect *cause) RX_WUR;
/* Cancel everything (shutdown, delete). Lock held. */
void runtime_cancel_all(struct runtime *rt);
/*
 * Number of effects started and not ended: running, waiting for a worker, and
 * cancelled ones still draining. Lock held.
 */
int runtime_running(const struct runtime *rt);
/*
 * Process-wide, over every runtime: effects on a worker (running), started and
 * waiting for a worker or a place (waiting), cancelled and still on a worker
 * (draining). Counters kept where effects start, move and end, so reading
 * them takes no lock and costs nothing per session; any thread.
 */
struct runtime_gauges {
    long running, waiting, draining;
};
void runtime_gauges(struct runtime_gauges *g);
/* Of those, the ones not cancelled: running or waiting, to report again. Lock held. */
int runtime_active(const struct runtime *rt);
/* Of those, the ones waiting for a place among the session's `session_max`. Lock held. */
int runtime_waiting(const struct runtime *rt);
/*
 * Wait until no effect of the runtime is left (none running, waiting or
 * draining). Lock NOT held. A worker may still be making its final
 * host->unref() call when this returns (see above).
 */
void runtime_wait_idle(struct runtime *rt);
/* After runtime_wait_idle(). NULL is fine. */
void runtime_destroy(struct runtime *rt);
/*
 * The wait before the nth restart in a row (attempt >= 1): backoff_ms doubled
 * attempt - 1 times, capped at backoff_max_ms; 0 for attempt <= 0. Pure.
 */
int runtime_backoff_ms(const struct runtime_config *cfg, int attempt);

/* The effect's key (borrowed, valid while the effect runs). */
const char *effect_key(const struct effect *fx);
/* True once cancelled; safe without the lock. */
bool effect_is_cancelled(const struct effect *fx);
enum rx_effect_kind effect_kind(const struct effect *fx);
/* Milliseconds since the effect started (monotonic clock; waiting included). */
double effect_elapsed_ms(const struct effect *fx);

#endif
