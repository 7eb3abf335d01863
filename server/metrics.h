/*
 * metrics - process-wide counters for GET /metrics (Prometheus text format).
 *
 * Lock-free: every counter is updated with atomic adds from any thread, and a
 * scrape reads them without walking sessions or taking a session's lock.
 * Depends on state_machine/rx_machine (the rejection reasons),
 * state_machine/rx_buf (the text), effects/runtime (its gauges) and
 * server/session_table (its figures).
 * Ownership: counters are process-wide statics; the caller owns the buffer.
 */
#ifndef METRICS_H
#define METRICS_H

#include <stddef.h>

#include "effects/runtime.h"
#include "server/session_table.h"
#include "state_machine/rx_buf.h"
#include "state_machine/rx_machine.h"
#include "state_machine/rx_common.h"

void metrics_input(enum rx_verdict v, enum rx_reason r);
void metrics_http_error(int status);
/* An effect finished: kind 0 brain, 1 tool; duration in milliseconds. */
void metrics_effect_done(int kind, double ms, int failed);

/* A session was read from the store on a touch, in `ms` milliseconds. */
void metrics_session_loaded(int64_t ms);

/*
 * Append the exposition text, with the gauges given by the caller.
 * 0 or -ENOMEM.
 */
int metrics_render(struct rx_buf *b, const struct session_figures *sessions,
                   long sse_clients, long sse_dropped,
                   const struct runtime_gauges *fx) RX_WUR;

#endif
