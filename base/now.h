/*
 * now - the one clock: wall time for stamps, monotonic time for timeouts,
 * and the absolute deadlines pthread_cond_timedwait wants.
 *
 * Part of base/, the impure floor under graph/ and effects/. Depends on the
 * C library and POSIX clocks only; never on graph/, effects/ or server/.
 * The pure layer never reads a clock; every timestamp an input carries comes
 * from now_wall_ms() at the moment the server queues it.
 * Ownership: nothing is allocated; results are returned by value.
 */
#ifndef NOW_H
#define NOW_H

#include <stdint.h>
#include <time.h>

/* Milliseconds since the epoch (CLOCK_REALTIME): input stamps, created-at. */
int64_t now_wall_ms(void);
/* Milliseconds on a clock that never jumps (CLOCK_MONOTONIC): deadlines. */
int64_t now_mono_ms(void);
/*
 * The moment `ns` nanoseconds from now on `clock`, normalised (tv_nsec below
 * one second), for pthread_cond_timedwait: CLOCK_REALTIME for a condvar made
 * with default attributes, CLOCK_MONOTONIC for one made with
 * pthread_condattr_setclock(CLOCK_MONOTONIC). A negative `ns` counts as 0.
 */
struct timespec now_deadline(clockid_t clock, int64_t ns);

/* Nanoseconds in one millisecond, for now_deadline(clock, ms * NOW_NS_PER_MS). */
#define NOW_NS_PER_MS 1000000LL

#endif
