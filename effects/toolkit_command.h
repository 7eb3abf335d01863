/*
 * toolkit_command - command tools (SPEC 5): a program from the config run
 * with no shell (posix_spawn), in a process group of its own, with the
 * arguments JSON on its stdin; its stdout, less one trailing newline, is the
 * result. A non-zero exit, a signal, a timeout or output past the bound is an
 * error result naming the cause (with the first line of stderr when there is
 * one). On timeout or cancel the whole process group is killed; the child is
 * always reaped and every descriptor closed before toolkit_command_run
 * returns. A program that does not read its input is not an error (the
 * writes stop; no SIGPIPE reaches the server).
 *
 * Depends on POSIX (spawn, poll, sockets for stdin), effects/now (deadlines)
 * and effects/toolkit_result; nothing from server/ or state_machine/ but
 * rx_buf and rx_common.
 * Threads: any number of runs may go on at once (descriptors are
 * close-on-exec, so a concurrent spawn inherits none of them).
 * Ownership: struct toolkit_command owns argv and each string in it,
 * released by toolkit_command_release; *result is malloc'd and the caller's.
 */
#ifndef TOOLKIT_COMMAND_H
#define TOOLKIT_COMMAND_H

#include <stdbool.h>
#include <stddef.h>

#include "state_machine/rx_common.h"

/* Bytes of stderr kept for the error message of a failed command. */
#define TOOLKIT_COMMAND_STDERR_MAX 4096

struct toolkit_command {
    char **argv;       /* NULL-terminated; argv[0] is a path or a name found in PATH */
    int timeout_ms;    /* > 0 */
    size_t output_max; /* stdout bound, bytes */
};

/* Free argv and its strings, and zero the struct. */
void toolkit_command_release(struct toolkit_command *cmd);

/*
 * Run `cmd` for tool `tool` (named in messages) with `input` (NUL-terminated)
 * on its stdin, until it ends, times out, or `cancel_fd` (or -1) becomes
 * readable. 0 with *result and *is_error set (a program that cannot be
 * started or fails is an error result); -ECANCELED or -ENOMEM with both
 * unchanged.
 */
int toolkit_command_run(const struct toolkit_command *cmd, const char *tool,
                        const char *input, int cancel_fd, char **result,
                        bool *is_error) RX_WUR;

#endif
