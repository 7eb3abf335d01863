/*
 * now - the one clock: wall time for stamps, monotonic time for timeouts.
 *
 * The pure layer never reads a clock; every timestamp an input carries comes
 * from now_wall_ms() at the moment the server queues it.
 */
#ifndef NOW_H
#define NOW_H

#include <stdint.h>

/* Milliseconds since the epoch (CLOCK_REALTIME): input stamps, created-at. */
int64_t now_wall_ms(void);
/* Milliseconds on a clock that never jumps (CLOCK_MONOTONIC): deadlines. */
int64_t now_mono_ms(void);

#endif
