/*
 * runtime - the keyed effect runtime of one session (SPEC 3.4, Moorex).
 *
 * After every accepted input the session calls runtime_reconcile() with the
 * new state: effects whose key is newly wanted start on a worker thread with
 * a copy of the state; running effects whose key is gone are cancelled,
 * except when the input that removed the key came from the effect itself
 * (it runs on to its end, and if its key comes back it is the same effect).
 * An effect that ends while its key is still wanted restarts after a growing
 * backoff. Events (effect-started/-completed/-canceled/-failed) go to the host.
 *
 * Locking: the runtime has no lock of its own. Every runtime_* call except
 * runtime_create/_wait_idle/_destroy is made with the host's lock held, and
 * worker threads take that lock (host->lock) before touching the runtime.
 * Depends on state_machine/ and the brain/toolkit interfaces; not on server/.
 * Ownership: the host, brain and toolkit are borrowed and must outlive the
 * runtime (runtime_wait_idle() returns once no worker uses them).
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
     * rejected, -ECANCELED (the runtime checks first), -ENOMEM.
     */
    int (*dispatch)(void *ctx, struct effect *fx, struct rx_input *in);
    /* Streamed text of a started message from `fx`, lock NOT held (the host
       checks under it that fx was not cancelled). 0, -ECANCELED or -ENOENT. */
    int (*chunk)(void *ctx, const struct effect *fx, const char *message_id,
                 const char *delta);
    /* An effect event; lock held. `type` is "effect-started" etc. */
    void (*event)(void *ctx, const char *type, const struct effect *fx);
    /* Keep the host alive while a worker runs. */
    void (*ref)(void *ctx);
    void (*unref)(void *ctx);
};

struct runtime_config {
    struct brain *brain;         /* borrowed */
    const struct toolkit *tools; /* borrowed */
    const char *system_prompt;   /* borrowed */
    int backoff_ms;              /* first restart delay */
    int backoff_max_ms;
};

/* NULL on ENOMEM. */
struct runtime *runtime_create(const struct runtime_config *cfg,
                               const struct runtime_host *host);
/*
 * Start and cancel effects so the running set matches effects_at(s).
 * `cause` is the effect whose input produced `s` (NULL for any other source).
 * Lock held. 0 or -ENOMEM (nothing was started then; the next input retries).
 */
int runtime_reconcile(struct runtime *rt, const struct rx_state *s,
                      const struct effect *cause) RX_WUR;
/* Cancel everything (shutdown, delete). Lock held. */
void runtime_cancel_all(struct runtime *rt);
/* Number of effects running (cancelled ones still draining included). Lock held. */
int runtime_running(const struct runtime *rt);
/* Wait until no worker thread is left. Lock NOT held. */
void runtime_wait_idle(struct runtime *rt);
/* After runtime_wait_idle(). */
void runtime_destroy(struct runtime *rt);

/* The effect's key (borrowed, valid while the effect runs). */
const char *effect_key(const struct effect *fx);
/* True once cancelled; safe without the lock. */
bool effect_is_cancelled(const struct effect *fx);
enum rx_effect_kind effect_kind(const struct effect *fx);
/* Milliseconds since the effect started (monotonic clock). */
double effect_elapsed_ms(const struct effect *fx);

#endif
