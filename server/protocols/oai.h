/*
 * oai - the OpenAI-compatible API (SPEC 4.3) under its prefix (openai.prefix,
 * "/v1"): GET /models, POST /chat/completions, streaming and not, mapped onto
 * sessions and inputs through server/run (no second engine, no second store).
 *
 * Called by server/http once the body is read and the client is authorized;
 * `path` is the URL after the prefix. A request that waits for the agent
 * (not streaming) leaves a park in *slot (server/park.h); a streaming one
 * answers with an SSE response at once.
 * Ownership: `body` is borrowed.
 */
#ifndef OAI_H
#define OAI_H

#include <microhttpd.h>

#include "server/door.h"
#include "server/park.h"
#include "state_machine/rx_buf.h"

/* The door of the OpenAI-compatible API (server/door), under its prefix; see above. */
extern const struct door_ops oai_door;
/* Free what the module keeps between requests (at shutdown, after the HTTP server). */
void oai_shutdown(void);

#endif
