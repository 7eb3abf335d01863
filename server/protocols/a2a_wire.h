/*
 * a2a_wire - the A2A protocol's view of a session (SPEC 4.3), pure: a task
 * (a run, and the decisions that continued it) as A2A 1.0's Task object, the
 * same objects in 0.3's shapes for older peers, and a client's Message read
 * back (its text, its decision data part, its ids).
 *
 * A task shows the session from the user message that opened it up to the
 * next user message (server/protocols/timeline): that message and the
 * agent's answers are its history; the answers' text, joined, is its one
 * artifact ("answer"); the calls awaiting a person there make it
 * input-required, its status message saying what waits (a text part and a
 * data part {"awaiting": [{"toolCallId","name","args","inDoubt",
 * "decisions"}]}).
 *
 * 1.0 (proto JSON): no `kind`, states TASK_STATE_*, roles ROLE_USER/AGENT,
 * parts {"text"} / {"data"}. 0.3: `kind` discriminators ("task",
 * "message", "status-update", "artifact-update", "text", "data"),
 * lowercase states ("input-required"), roles "user"/"agent", and a status
 * update's `final`.
 *
 * Depends on state_machine/, server/protocols/timeline, server/protocols/lg_msg
 * (times) and jansson; no I/O, clock, locks or MHD.
 * Ownership: states and JSON arguments are borrowed; every json_t returned
 * is NEW (NULL on ENOMEM); strings handed out are malloc'd.
 */
#ifndef A2A_WIRE_H
#define A2A_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "state_machine/rx_common.h"
#include "state_machine/rx_state.h"

/* 1.0's numbering (TaskState), 0 unknown. */
enum a2a_state {
    A2A_UNKNOWN = 0,
    A2A_SUBMITTED,
    A2A_WORKING,
    A2A_COMPLETED,
    A2A_FAILED,
    A2A_CANCELED,
    A2A_INPUT_REQUIRED,
};

/* "TASK_STATE_WORKING" (1.0) or "working" (0.3). */
const char *a2a_state_name(enum a2a_state s, bool v03);
/* A 1.0 name back, or A2A_UNKNOWN. */
enum a2a_state a2a_state_parse(const char *name);
/* Completed, failed or canceled: nothing more happens to it. */
bool a2a_state_terminal(enum a2a_state s);

/* What a task is, besides the session it shows. */
struct a2a_task_info {
    const char *id, *context_id;
    const char *umid; /* the user message that opened it */
    enum a2a_state state;
    const char *why; /* a failure's reason, or NULL */
    int64_t updated_ms;
    bool idle; /* no run of it in flight: what it shows follows the session */
};

/*
 * NEW: the 1.0 Task of `t` over `st` (NULL: the session is gone, no
 * history). An idle task that is not over follows the session: a call
 * that waits makes it input-required; once answered (through any door)
 * it is working, then completed when its last item is a complete answer.
 */
json_t *a2a_wire_task(const struct rx_state *st, const struct a2a_task_info *t);
/* The session's newest user message (borrowed from `st`), or NULL. */
const struct rx_message *a2a_wire_last_user(const struct rx_state *st);
/* The calls awaiting a person in the task opened by `umid`: up to `max` in *out. */
size_t a2a_wire_awaiting(const struct rx_state *st, const char *umid,
                         const struct rx_tool_call **out, size_t max);
/*
 * NEW: the 0.3 shape of a 1.0 object: `kind` "task", "message",
 * "status-update" (`final` added) or "artifact-update".
 */
json_t *a2a_wire_v03(json_t *v10, const char *kind);

/* A client's Message, read back (1.0 or 0.3 parts both accepted). */
struct a2a_msg {
    char *text;                       /* text parts joined by "\n"; NULL when none */
    json_t *data;                     /* NEW: the first data part's object, or NULL */
    const char *mid;                  /* messageId (borrowed), NULL when absent */
    const char *context_id, *task_id; /* borrowed, NULL when absent */
};
/*
 * `m` (borrowed; the parsed struct borrows from it). 0; -EINVAL with `err`
 * (not an object, no parts, a part that is neither text nor data, an id
 * that is not a string, a role that is not the user's); -ENOMEM.
 */
int a2a_wire_parse_message(json_t *m, struct a2a_msg *out, struct rx_error *err) RX_WUR;
void a2a_msg_release(struct a2a_msg *m);

#endif
