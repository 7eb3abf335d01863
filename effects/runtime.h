/*
 * runtime - the keyed effect runtime of one session (SPEC 3.4, Moorex).
 *
 * After every accepted input the session calls runtime_reconcile() with the
 * new state: effects whose key is newly wanted start, each on a detached
 * thread of its own with a copy of the state; running effects whose key is
 * gone are cancelled, except the effect whose own input removed the key (the
 * `cause`): it runs on to its end, and if its key comes back while it runs it
 * is the same effect, never a second one. Such an effect (its key gone by its
 * own input and not back) is cancelled later only by an input with no effect
 * as its cause (a client's: user-cancel, a newer message); another effect's
 * input leaves it running.
 *
 * Events, each given to host->event() with the lock held, per effect:
 * "effect-started" once it runs (after its thread exists, so always before the
 * others); then exactly one of "effect-canceled" (at the moment of the cancel;
 * nothing more is reported for it, whatever it returns), "effect-completed"
 * (it returned 0) or "effect-failed" (it returned an error).
 *
 * Restarts: an effect that completes or fails while its key is still wanted
 * (by the state of that moment) starts again as a new effect, with a new
 * "effect-started", after runtime_backoff_ms(cfg, n) for the nth restart in a
 * row. The wait ends at once when the effect is cancelled. A start by
 * reconcile counts from 0 again.
 *
 * Guarded dispatch: an effect's inputs and chunks reach the host only while
 * it is not cancelled; afterwards they return -ECANCELED and apply nothing.
 *
 * Locking: the runtime has no lock of its own. Every runtime_* call except
 * runtime_create/_wait_idle/_destroy/_backoff_ms is made with the host's lock
 * held, and worker threads take that lock (host->lock) before touching the
 * runtime.
 * Depends on state_machine/ and the brain/toolkit interfaces; not on server/.
 * Ownership: the host, brain and toolkit are borrowed and must outlive the
 * runtime. Each worker holds a host reference (host->ref at its start,
 * host->unref as the very last thing it does, after which it touches neither
 * the runtime nor the host), so a host freed on its last unref is safe.
 */
#ifndef RUNTIME_H
#define RUNTIME_H

#include <stdbool.h>
#include <stdint.h>

#include "effects/brain.h"
#include "state_machine/rx_effects.h"
#include "state_machine/rx_input.h"
#include "state_machine/rx_state.h"
#include "state_machine/rx_common.h"

struct toolkit;
struct effect;

/* What the session (the host) provides. Called from worker threads. */
struct runtime_host {
    void *ctx;
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
    /* An effect event (see above); lock held. `type` is "effect-started" etc. */
    void (*event)(void *ctx, const char *type, const struct effect *fx);
    /* Keep the host alive while a worker runs; unref may be called without the
       lock, from a worker, and may free the host and the runtime. */
    void (*ref)(void *ctx);
    void (*unref)(void *ctx);
};

struct runtime_config {
    struct brain *brain;         /* borrowed */
    const struct toolkit *tools; /* borrowed */
    const char *system_prompt;   /* borrowed */
    int backoff_ms;              /* first restart delay; 0: restart at once */
    int backoff_max_ms;          /* no restart waits longer */
    /*
     * How a restart waits `ms` (runtime_backoff_ms) before it runs; NULL (the
     * default): poll(2) on the effect's cancel fd. A hook returns 0, or
     * -ECANCELED once effect_is_cancelled(fx) (the effect then ends, reported
     * as cancelled). Called on the worker, lock NOT held. For tests.
     */
    int (*sleep_ms)(void *arg, const struct effect *fx, int ms);
    void *sleep_arg;
};

/* NULL on ENOMEM. The config and host are copied. */
struct runtime *runtime_create(const struct runtime_config *cfg,
                               const struct runtime_host *host) RX_WUR;
/*
 * Start and cancel effects so the running set matches effects_at(s).
 * `cause` is the effect whose input produced `s` (NULL for any other source).
 * Lock held. First every running effect whose key `s` no longer wants is
 * cancelled (except `cause`, and, when `cause` is an effect, those whose own
 * earlier input removed their key), then each newly wanted key that is not
 * running starts, in effects_at order.
 * Returns 0, or -ENOMEM / -EAGAIN (no thread) from the first start that
 * failed. That is a partial reconcile: the cancels are done, the keys before
 * the failed one have started, it and the keys after it have not, and nothing
 * retries them until the next reconcile (the next accepted input). If
 * effects_at itself fails (-ENOMEM), nothing is cancelled or started.
 */
int runtime_reconcile(struct runtime *rt, const struct rx_state *s,
                      const struct effect *cause) RX_WUR;
/* Cancel everything (shutdown, delete). Lock held. */
void runtime_cancel_all(struct runtime *rt);
/* Number of effects running (cancelled ones still draining included). Lock held. */
int runtime_running(const struct runtime *rt);
/*
 * Wait until no worker uses the runtime any more. Lock NOT held. A worker may
 * still be making its final host->unref() call when this returns (see above).
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
/* Milliseconds since the effect started (monotonic clock). */
double effect_elapsed_ms(const struct effect *fx);

#endif
