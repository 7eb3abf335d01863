/*
 * a2a - the A2A (Agent2Agent) door (SPEC 4.3): the JSON-RPC binding of A2A
 * 1.0 under its prefix (a2a.prefix, "/api/a2a"; "" turns it off, the agent
 * card too), with 0.3's methods and shapes still answered for older peers,
 * and the agent card at /.well-known/agent-card.json.
 *
 * Methods: SendMessage, SendStreamingMessage (SSE of StreamResponses), GetTask,
 * CancelTask, SubscribeToTask; 0.3's message/send, message/stream,
 * tasks/get, tasks/cancel, tasks/resubscribe. A request with
 * `A2A-Version: 1.0` and a 1.0 method is answered in 1.0's shapes; one
 * without the header, or with 0.3's method names, in 0.3's.
 *
 * A context is a session (created on first use, owned by the caller; a
 * message without contextId starts a new one); a task is a run (server/run)
 * of the message's text; its answer is the task's artifact. A task whose
 * agent waits for a person (an approval, a call in doubt) is
 * input-required; a message on the same task carrying a data part
 * {"decision": "approve"|"edit"|"reject" (for a call in doubt "retry"|
 * "reject"|"resolve"), "args"?, "reason"?, "result"?, "toolCallId"?} answers
 * it (every waiting call of the task, or the one named by toolCallId) with
 * user-review-tool-call inputs, and the task goes on. CancelTask is a
 * user-cancel. Another principal's task or context is answered as unknown.
 *
 * Depends on server/door; its files also on server/run, session_table,
 * records, reply, sse, park, server/protocols/a2a_wire, lg_msg (the
 * decisions' mapping, shared with the LangGraph door), timeline, store and
 * state_machine/; never on server/http, which knows it through a2a_door
 * and a2a_card.
 * Ownership: `body` is borrowed.
 */
#ifndef A2A_H
#define A2A_H

#include <microhttpd.h>

#include "server/door.h"

/* The door of the A2A JSON-RPC binding, under a2a.prefix. */
extern const struct door_ops a2a_door;
/* Where the agent card is served (no credentials needed: agent discovery). */
#define A2A_CARD_PATH "/.well-known/agent-card.json"
/* GET A2A_CARD_PATH: the card (404 when a2a.prefix is ""). Shows nothing private. */
enum MHD_Result a2a_card(struct door *d, struct MHD_Connection *conn, const char *method);
/* Free the tasks kept between requests (at shutdown, after the HTTP server). */
void a2a_shutdown(void);

#endif
