/*
 * log - one line per event that matters, to stderr, with a time and a level.
 *
 * The level is set once at start-up (log_set_level); lines below it cost a
 * comparison. Thread-safe: each line is written with one write(2).
 * It lives in effects/ (writing to stderr is an effect) so that the brains
 * and tools can say what went wrong, and the server uses the same lines.
 * Depends on the C library and write(2) only; nothing else of the project.
 * Ownership: nothing is allocated; the format and its arguments are borrowed
 * for the call.
 */
#ifndef LOG_H
#define LOG_H

enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };

void log_set_level(enum log_level level);
/* 0 and *out for "debug", "info", "warn", "error"; -EINVAL otherwise. */
int log_level_parse(const char *name, enum log_level *out);
void log_msg(enum log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

#endif
