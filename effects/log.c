/*
 * log - stderr lines with a level. See log.h.
 */
#include "effects/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static enum log_level min_level = LOG_INFO;

void log_set_level(enum log_level level)
{
    min_level = level;
}

int log_level_parse(const char *name, enum log_level *out)
{
    static const char *const names[] = {"debug", "info", "warn", "error"};

    for (int i = 0; i < 4; i++) {
        if (!strcmp(name, names[i])) {
            *out = (enum log_level)i;
            return 0;
        }
    }
    return -EINVAL;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    static const char *const tags[] = {"debug", "info", "warn", "error"};
    char line[1024];
    struct timespec ts;
    struct tm tm;
    va_list ap;
    int n;

    if (level < min_level)
        return;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = (int)strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
    n += snprintf(line + n, sizeof(line) - (size_t)n, ".%03ldZ %-5s ",
                  ts.tv_nsec / 1000000, tags[level]);
    va_start(ap, fmt);
    n += vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof(line) - 2)
        n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    if (write(STDERR_FILENO, line, (size_t)n) < 0) {
        /* Nowhere left to report it. */
    }
}
