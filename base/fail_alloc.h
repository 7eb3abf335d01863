/*
 * fail_alloc - the switch that makes one allocation of the running server
 * fail, so the paths taken on out of memory are run for real (SPEC: every
 * failure a clean 500/503 or a toolkit-error, no crash, no leak).
 *
 * RX_FAIL_ALLOC=N in the environment: from fail_alloc_arm() on, the Nth
 * allocation fails (returns NULL with errno ENOMEM), once; the others go
 * through. N = 0 only counts. What is counted: every malloc, calloc, realloc,
 * strdup, strndup and asprintf of the server's own code (server/, effects/,
 * graph/, base/, state_machine/), wrapped at link time (ld --wrap, the
 * Makefile's FAIL_ALLOC_LDFLAGS), and every allocation of jansson
 * (json_set_alloc_funcs), which is where most of them happen. libcurl,
 * libmicrohttpd and SQLite allocate on their own and are not counted.
 *
 * Only the sanitizer build (make SANITIZE=...) has it: the objects are
 * compiled with RX_FAIL_ALLOC and the server linked with the wraps. In any
 * other build every function here does nothing, and the allocator is libc's.
 * Depends on the C library and jansson only.
 * Ownership: none; the count is process-wide (atomic: any thread allocates).
 */
#ifndef FAIL_ALLOC_H
#define FAIL_ALLOC_H

#include <stdbool.h>

/* Start counting, if RX_FAIL_ALLOC is set and this build has the switch. */
void fail_alloc_arm(void);
/*
 * Stop counting (a stopping server is not what is tested). The allocations
 * counted while armed, and in *failed whether the Nth was among them; -1
 * when the switch is off.
 */
long fail_alloc_disarm(bool *failed);

#endif
