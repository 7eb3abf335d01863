/*
 * brain - the interface every brain (LLM provider) implements, and what the
 * effect runtime hands one ask.
 *
 * Depends on state_machine/ only; knows nothing of server/ or HTTP clients.
 * An ask runs on a worker thread and may block (network, sleeps). It reports
 * through `struct brain_ask`: dispatch() for inputs (stamped and applied by the
 * session, one at a time, like client inputs), chunk() for streamed text and
 * reasoning() for the model's streamed reasoning, neither of which enters the
 * state until the answer completes, and is_cancelled()/cancel_fd for a
 * prompt stop.
 * Per-session settings (SPEC 3.2 user-configure) reach the brain in the view
 * (view->settings): a brain that has a model or a temperature uses the
 * session's over its configured ones; the system prompt is resolved here
 * already (`system_prompt`).
 * A brain always ends an ask with a terminal input (complete or call-tools),
 * also on error ("[Error] ..." as the message), unless cancelled.
 * An ask never sees the whole session (SPEC 3.4): it gets the brain's view
 * of the state (rx_context_view), made when it started, which is all that
 * rx_context and the compression policy read, and may ask the session
 * whether a tool call id exists (tool_exists).
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
    /*
     * What the ask sees, read-only (rx_context_view of the session's state as
     * the ask started, with the brain's view_messages): the summary and
     * scalars, the records after summaryCutAt (of the user and assistant
     * messages, the newest view_messages) and the RX_CONTEXT_OLDER_MAX newest
     * tool records at or before it. Older records are not there: a lookup of
     * an older id finds nothing (use tool_exists).
     */
    const struct rx_state *view;
    int64_t signals_cut_at; /* the ask's key time: brain inputs carry it */
    /* The session's settings.systemPrompt when set, else the server's; may be "". */
    const char *system_prompt;
    const struct toolkit *tools; /* the tools the brain may call */
    /*
     * A message of the session that is already `streaming` for this ask
     * (after a restart or a crash): reuse its id instead of starting a new
     * one. NULL when none.
     */
    const char *resume_message_id;
    /*
     * The text already shown of resume_message_id (SPEC 3.7: an answer
     * survives a crash), resume_len bytes, NUL-terminated; NULL when none.
     * The brain's chunks follow it: a brain continues the answer after it
     * (the builtin brain's deterministic text at that offset, the openai
     * brain by a prefix continuation) or, when it cannot, appends a new
     * answer after a visible separator; never repeats or replaces it. The
     * complete message's content begins with it.
     */
    const char *resume_text;
    size_t resume_len;

    /*
     * Hand an input to the session. 0 when accepted or unchanged; -ECANCELED
     * when this ask was cancelled (stop at once); -EPROTO when the machine
     * rejected it; -ENOMEM. The timestamp is set by the session.
     */
    int (*dispatch)(struct brain_ask *ask, struct rx_input *in);
    /* Streamed text of a started message. 0 or -ECANCELED. */
    int (*chunk)(struct brain_ask *ask, const char *message_id, const char *delta);
    /*
     * Streamed reasoning of a started message (a model's reasoning_content),
     * relayed live to the message's followers; the whole reasoning goes with
     * brain-send-message-complete. 0, -ECANCELED, or -ENOENT (nobody buffers
     * the message). NULL: not relayed.
     */
    int (*reasoning)(struct brain_ask *ask, const char *message_id, const char *delta);
    /* True once the ask is cancelled; cancel_fd becomes readable then too. */
    bool (*is_cancelled)(struct brain_ask *ask);
    int cancel_fd;
    /*
     * Sleep up to ms milliseconds, waking early on cancel. 0, or -ECANCELED.
     */
    int (*sleep_ms)(struct brain_ask *ask, int ms);
    /*
     * Whether the session holds a tool call `id` now, older ones included
     * (takes the session's lock for one indexed lookup). NULL: not known; a
     * brain then checks the view only.
     */
    bool (*tool_exists)(struct brain_ask *ask, const char *id);
    void *runtime; /* the runtime's own context */
};

struct brain {
    const char *name;
    /*
     * The most user messages, and the most assistant messages, after
     * summaryCutAt an ask of this brain is handed (the newest ones;
     * rx_context_view): enough for its compression policy to decide
     * (rx_context_view_messages). 0: all of them.
     */
    size_t view_messages;
    /* Run one ask to its end. 0, -ECANCELED, or a negative errno on failure. */
    int (*ask)(struct brain *self, struct brain_ask *ask);
    void (*destroy)(struct brain *self);
};

#endif
