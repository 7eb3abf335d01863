/*
 * agui - the AG-UI protocol (revision 1.0; CopilotKit, @ag-ui/client's
 * HttpAgent) under its prefix (agui.prefix, "/api/ag-ui"; "" turns it off),
 * mapped onto sessions and runs through server/run like the LangGraph subset
 * (SPEC 4.3): no second engine, no second store.
 *
 * POST {prefix} (also {prefix}/ and {prefix}/agent) with a RunAgentInput:
 * `threadId` is a session of the principal's, created on first use with it
 * as owner (another principal's id is answered 404, as an unknown one is
 * everywhere else; a request that is refused, or that only resumes, makes
 * none); `runId` names the run in its events; of `messages`, the
 * newest one, when it is a user message the thread does not hold yet, is
 * posted as user-send-message under its own id; `resume` entries answer the
 * pending interrupts (user-review-tool-call, as LangGraph's command.resume);
 * `state`, `tools`, `context` and `forwardedProps` are accepted and ignored
 * (the agent runs its own tools; the shared state is the server's, SPEC 3.1).
 * The answer is the run as AG-UI events over SSE (`data: {json}`):
 * RUN_STARTED, MESSAGES_SNAPSHOT (when the thread had history), STATE_SNAPSHOT
 * then a STATE_DELTA per input applied (the server's own JSON Patch,
 * state_machine/rx_patch), TEXT_MESSAGE_* and REASONING_* as tokens stream,
 * TOOL_CALL_START/ARGS/END and TOOL_CALL_RESULT for the agent's tools, then
 * RUN_FINISHED (outcome success; interrupt with one interrupt per call
 * awaiting a person, its id the call's id; cancelled) or RUN_ERROR. A request
 * with nothing to post or answer joins the thread: once the runs before it in
 * the lane are over, snapshots and the outcome.
 * A client that goes away does not stop the run (the next one sees it).
 * Errors before the stream: the native shape {"error","message"} (400 body
 * not JSON, 422 a RunAgentInput it cannot use, 404 unknown interrupt or
 * another's thread, 409 an interrupt already answered, 413 too large).
 *
 * Depends on server/door, run, session_table, sse, reply, server/protocols/
 * lg_msg (LangChain messages and resume decisions, reused) and
 * state_machine/; never on server/http, which knows it only through agui_door.
 * Ownership: the body is borrowed.
 */
#ifndef AGUI_H
#define AGUI_H

#include "server/door.h"

/* The door of the AG-UI protocol (server/door), under its prefix; see above. */
extern const struct door_ops agui_door;

#endif
