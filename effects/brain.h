/*
 * brain - the interface every brain (LLM provider) implements, and what the
 * effect runtime hands one ask.
 *
 * Depends on state_machine/ only; knows nothing of server/ or HTTP clients.
 * An ask runs on a worker thread and may block (network, sleeps). It reports
 * through `struct brain_ask`: dispatch() for inputs (stamped and applied by the
 * session, one at a time, like client inputs), chunk() for streamed text that
 * never enters the state, and is_cancelled()/cancel_fd for a prompt stop.
 * A brain always ends an ask with a terminal input (complete or call-tools),
 * also on error ("[Error] ..." as the message), unless cancelled.
 * Ownership: everything in struct brain_ask is borrowed for the duration of
 * ask(). Inputs given to dispatch() are borrowed (the runtime copies them).
 */
#ifndef BRAIN_H
#define BRAIN_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "state_machine/rx_input.h"
#include "state_machine/rx_state.h"

struct toolkit;

struct brain_ask {
    const struct rx_state *state; /* snapshot as of the ask's start, read-only */
    int64_t signals_cut_at;       /* the ask's key time: brain inputs carry it */
    const char *system_prompt;    /* may be "" */
    const struct toolkit *tools;  /* the tools the brain may call */
    /*
     * A message of this state that is already `streaming` for this ask (after
     * a restart or a crash): reuse its id instead of starting a new one. NULL
     * when none.
     */
    const char *resume_message_id;

    /*
     * Hand an input to the session. 0 when accepted or unchanged; -ECANCELED
     * when this ask was cancelled (stop at once); -EPROTO when the machine
     * rejected it; -ENOMEM. The timestamp is set by the session.
     */
    int (*dispatch)(struct brain_ask *ask, struct rx_input *in);
    /* Streamed text of a started message. 0 or -ECANCELED. */
    int (*chunk)(struct brain_ask *ask, const char *message_id, const char *delta);
    /* True once the ask is cancelled; cancel_fd becomes readable then too. */
    bool (*is_cancelled)(struct brain_ask *ask);
    int cancel_fd;
    /*
     * Sleep up to ms milliseconds, waking early on cancel. 0, or -ECANCELED.
     */
    int (*sleep_ms)(struct brain_ask *ask, int ms);
    void *runtime; /* the runtime's own context */
};

struct brain {
    const char *name;
    /* Run one ask to its end. 0, -ECANCELED, or a negative errno on failure. */
    int (*ask)(struct brain *self, struct brain_ask *ask);
    void (*destroy)(struct brain *self);
};

#endif
