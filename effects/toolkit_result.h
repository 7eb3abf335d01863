/*
 * toolkit_result - how every tool hands its answer to the caller of
 * toolkit_call: a malloc'd, NUL-terminated text that is valid UTF-8 (invalid
 * bytes and NULs become U+FFFD, so it can go into inputs and JSON as it is),
 * and whether it is the tool's result or an error for a `toolkit-error`.
 *
 * Private to the toolkit modules (toolkit, toolkit_command, toolkit_clock).
 * Depends on libc only.
 * Ownership: *result becomes the caller's, to free(3); on failure *result and
 * *is_error are left as they were.
 */
#ifndef TOOLKIT_RESULT_H
#define TOOLKIT_RESULT_H

#include <stdbool.h>
#include <stddef.h>

#include "state_machine/rx_common.h"

/* Longest error text toolkit_result_errorf writes; longer ones are cut. */
#define TOOLKIT_RESULT_ERROR_MAX 1024

/* Hand `n` bytes of `text` over as a result (error or not). 0 or -ENOMEM. */
int toolkit_result_set(char **result, bool *is_error, bool error, const char *text,
                       size_t n) RX_WUR;

/* Hand a printf-style error message over. 0 or -ENOMEM. */
int toolkit_result_errorf(char **result, bool *is_error, const char *fmt, ...)
    __attribute__((format(printf, 3, 4))) RX_WUR;

#endif
