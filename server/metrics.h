/*
 * metrics - process-wide counters for GET /metrics (Prometheus text format).
 *
 * Lock-free: every counter is updated with atomic adds from any thread.
 * Depends on state_machine/rx_machine for the rejection reasons.
 */
#ifndef METRICS_H
#define METRICS_H

#include <stddef.h>

#include "state_machine/rx_buf.h"
#include "state_machine/rx_machine.h"
#include "state_machine/rx_common.h"

void metrics_input(enum rx_verdict v, enum rx_reason r);
void metrics_http_error(int status);
/* An effect finished: kind 0 brain, 1 tool; duration in milliseconds. */
void metrics_effect_done(int kind, double ms, int failed);

/*
 * Append the exposition text, with the gauges given by the caller.
 * 0 or -ENOMEM.
 */
int metrics_render(struct rx_buf *b, size_t sessions, long sse_clients, long sse_dropped,
                   int effects_running) RX_WUR;

#endif
