/*
 * oai - the OpenAI-compatible API (SPEC 4.3) under its prefix (openai.prefix,
 * "/v1"): GET /models, POST /chat/completions, streaming and not, mapped onto
 * sessions and inputs through server/run (no second engine, no second store).
 *
 * Called by server/http once the body is read and the client is authorized;
 * `path` is the URL after the prefix. A request that waits for the agent
 * (not streaming) leaves a park in *slot (server/park.h); a streaming one
 * answers with an SSE response at once.
 * Depends on server/door (the door it is); its files also on server/run,
 * session, session_table, session_import, reply and sse,
 * server/protocols/oai_wire, oai_memo and timeline, base/, effects/log and
 * state_machine/; never on server/http, which knows it only through oai_door.
 * Ownership: `body` is borrowed.
 */
#ifndef OAI_H
#define OAI_H

#include <microhttpd.h>

#include "server/door.h"

/* The door of the OpenAI-compatible API (server/door), under its prefix; see above. */
extern const struct door_ops oai_door;
/* Free what the module keeps between requests (at shutdown, after the HTTP server). */
void oai_shutdown(void);

#endif
