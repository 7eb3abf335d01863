/*
 * now - see now.h.
 */
#include "base/now.h"

static int64_t read_ms(clockid_t id)
{
    struct timespec ts;

    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t now_wall_ms(void)
{
    return read_ms(CLOCK_REALTIME);
}

int64_t now_mono_ms(void)
{
    return read_ms(CLOCK_MONOTONIC);
}

struct timespec now_deadline(clockid_t clock, int64_t ns)
{
    struct timespec ts;

    clock_gettime(clock, &ts);
    if (ns > 0) {
        ts.tv_sec += (time_t)(ns / 1000000000);
        ts.tv_nsec += (long)(ns % 1000000000);
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
    }
    return ts;
}
