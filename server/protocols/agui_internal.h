/*
 * agui_internal - what the files of the AG-UI door share (agui.c: routing,
 * the request, resume; agui_run.c: one run streamed as AG-UI events).
 * Private to server/protocols/agui*; http.c uses agui.h.
 *
 * Depends on libmicrohttpd, jansson, server/door, server/session,
 * state_machine/rx_input and state_machine/rx_state.
 * Ownership: inputs are moved in (left released); strings are borrowed.
 */
#ifndef AGUI_INTERNAL_H
#define AGUI_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>
#include <microhttpd.h>

#include "server/door.h"
#include "server/session.h"
#include "state_machine/rx_input.h"
#include "state_machine/rx_state.h"

/* `r` (destroyed here; NULL: 500) with CORS headers for a local origin. */
enum MHD_Result agui__queue(struct MHD_Connection *conn, unsigned status,
                            struct MHD_Response *r);
/* {"error": code, "message": <fmt...>} with `status` and the CORS headers. */
enum MHD_Result agui__error(struct MHD_Connection *conn, unsigned status,
                            const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/*
 * NEW: the interrupts of `st`: one per call awaiting a person, in record
 * order, {"id": call id, "reason", "message", "toolCallId", "responseSchema",
 * "metadata"}; [] when none. NULL on ENOMEM.
 */
json_t *agui__interrupts(const struct rx_state *st);

/*
 * Stream run `rid` of thread `s` (`n` inputs, moved in and left released
 * whatever happens; 0: a join, which waits for the runs before it in the
 * lane, then shows the thread and its outcome).
 * `posted`: the last input is the user message the client sent (the
 * MESSAGES_SNAPSHOT goes out only when the thread holds more). MHD's verdict.
 */
enum MHD_Result agui__run(struct door *srv, struct MHD_Connection *conn,
                          struct session *s, const char *rid, struct rx_input *in,
                          size_t n, bool posted);

#endif
