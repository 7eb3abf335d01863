/*
 * toolkit_clock - the built-in `clock` tool: the current date and time as
 * {"iso":"2025-01-02T03:04:05.678Z","epoch_ms":1735787045678,"timezone":"UTC"}
 * (JSON text), in UTC or at a fixed offset given as `timezone`: "UTC", "Z",
 * "GMT", or "+02:00" / "-0530" / "+2", maybe after UTC or GMT ("GMT+1"), up
 * to 14 hours. The time comes from now_wall_ms(), the one clock.
 *
 * Depends on base/now and effects/toolkit_result; jansson.
 * Ownership: `args` is borrowed; *result is malloc'd and the caller's
 * (toolkit_result.h).
 */
#ifndef TOOLKIT_CLOCK_H
#define TOOLKIT_CLOCK_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "state_machine/rx_common.h"

/* The tool's JSON Schema `parameters` and description, for the registry. */
#define TOOLKIT_CLOCK_DESCRIPTION                                                        \
    "Current date and time: ISO-8601 and milliseconds since the Unix epoch. Optional "   \
    "timezone: UTC or an offset like +02:00."
#define TOOLKIT_CLOCK_SCHEMA                                                             \
    "{\"type\":\"object\",\"properties\":{\"timezone\":{\"type\":\"string\","            \
    "\"description\":\"UTC (default) or an offset such as +02:00 or -0530\"}}}"

/*
 * Answer a call with the arguments object `args` at the time `now_ms`
 * (milliseconds since the epoch). 0 with *result and *is_error set (an
 * unsupported timezone is an error result), or -ENOMEM.
 */
int toolkit_clock_at(int64_t now_ms, json_t *args, char **result, bool *is_error) RX_WUR;

/* The same at now_wall_ms(). */
int toolkit_clock_run(json_t *args, char **result, bool *is_error) RX_WUR;

#endif
