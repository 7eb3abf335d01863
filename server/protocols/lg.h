/*
 * lg - the LangGraph Agent Server API subset (SPEC 4.3) under its prefix
 * (langgraph.prefix, "/api/langgraph"): assistants, threads and runs, mapped onto
 * sessions and inputs through server/run (no second engine, no second store).
 *
 * Called by server/http once the body is read and the client is authorized;
 * `path` is the URL after the prefix. A request that waits for the agent
 * (runs/wait) leaves a park in *slot (server/park.h); a streaming one
 * answers with an SSE response at once.
 * Depends on server/door (the door it is); its files also on server/run,
 * session_table, reply, sse, event and config, server/protocols/lg_run,
 * lg_frames, lg_msg and timeline, store/store.h, base/, effects/log and
 * state_machine/; never on server/http, which knows it only through lg_door.
 * Ownership: `body` is borrowed.
 */
#ifndef LG_H
#define LG_H

#include <microhttpd.h>

#include "server/door.h"

/* The door of the LangGraph API (server/door), under its prefix; see above. */
extern const struct door_ops lg_door;
/*
 * A session left the table (session_env.removed): its thread's metadata and
 * run records go too, however it was deleted (the native API, retention).
 */
void lg_thread_removed(const char *tid);
/* Free what the module keeps between requests (at shutdown, after the HTTP server). */
void lg_shutdown(void);

#endif
