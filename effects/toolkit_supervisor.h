/*
 * toolkit_supervisor - the forked side of a command tool: the process that
 * toolkit_command_run forks, which never execs, runs the program and kills
 * and reaps everything it started (the design is in toolkit_command.h).
 *
 * It runs only in a child forked from the multi-threaded server, for its
 * whole life, so it may call only async-signal-safe functions and plain
 * system calls: no malloc, stdio, snprintf, opendir, getenv or locks.
 * `make signal-safe-check` (part of `make test`, scripts/signal_safe_check.sh)
 * fails on any other symbol its object leaves undefined (nm -u).
 * Depends on Linux (prctl, /proc, close_range, getdents64) and
 * TOOLKIT_COMMAND_STOP_GRACE_MS from toolkit_command.h; nothing else of the
 * project: it must not grow a dependency that might allocate.
 * Ownership: it owns nothing of the server's; the parent keeps its copies
 * of the descriptors and closes them.
 */
#ifndef TOOLKIT_SUPERVISOR_H
#define TOOLKIT_SUPERVISOR_H

#include <sys/types.h>

/*
 * What the supervisor tells the toolkit over the control socket, one
 * fixed-size record each: the command could not be started (value: errno),
 * or it ended (value: its wait status). No record means the supervisor was
 * itself killed, or it was told to stop.
 */
enum toolkit_supervisor_report_kind {
    TOOLKIT_SUPERVISOR_START_FAILED = 1,
    TOOLKIT_SUPERVISOR_STATUS = 2,
};

struct toolkit_supervisor_report {
    int kind;
    int value;
};

/*
 * The supervisor, in the child just forked: `fds` are its ends of the
 * command's stdin socket, stdout pipe, stderr pipe and the control socket;
 * `parent` is the server's pid (a parent already dead stops it at once).
 * Runs `path` with `argv` and environment `envp` (made before the fork: this
 * child may not allocate), and never returns.
 */
_Noreturn void toolkit_supervisor_main(const char *path, char *const argv[],
                                       char *const envp[], const int fds[4],
                                       pid_t parent);

#endif
