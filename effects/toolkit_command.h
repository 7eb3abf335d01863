/*
 * toolkit_command - command tools (SPEC 5): a program from the config run
 * with no shell, with the arguments JSON on its stdin; its stdout, less one
 * trailing newline, is the result. A non-zero exit, a signal, a timeout or
 * output past the bound is an error result naming the cause (with the first
 * line of stderr when there is one). A program that does not read its input
 * is not an error (the writes stop; no SIGPIPE reaches the server).
 *
 * Every process a tool starts ends with it. The tool ends when its program
 * exits, times out, prints too much or is cancelled; by the time
 * toolkit_command_run returns, the program and all its descendants are
 * killed and reaped, including those that left its process group or session
 * (setsid, setpgid, a daemon's double fork), and every descriptor is closed.
 * A descendant still holding stdout does not keep the call waiting.
 *
 * How: each run forks a supervisor (toolkit_supervisor.c), a small process
 * that does not exec. It
 * makes itself a child subreaper (PR_SET_CHILD_SUBREAPER), so every orphaned
 * descendant is re-parented to it rather than to init, then forks and execs
 * the program in a process group of its own, with the pipes as its stdio
 * (nothing is relayed). When the program exits, or when the toolkit closes
 * its end of a control socket (timeout, cancel, overflow, or the server's
 * death), the supervisor SIGKILLs the program's group and then, pass after
 * pass, every process whose parent it is (found in /proc/<pid>/stat), reaping
 * until it has no child left. It reports the program's wait status on the
 * control socket and exits; that EOF tells the toolkit all is gone.
 * SIGTERM/SIGINT/SIGHUP to the supervisor (also sent by PR_SET_PDEATHSIG
 * when its parent dies) stop it the same way, and the tool is then reported
 * killed by that signal. The server itself is never a subreaper: a
 * long-lived, multi-threaded process would collect every tool's orphans.
 *
 * Limits: a descendant is only found once its parent is dead, so each pass
 * reaches one more generation; a process that forks faster than it is
 * killed needs as many passes. The scan needs /proc of our pid namespace
 * (checked through /proc/self); without it, only the program's group is
 * killed, and orphans are waited for a bounded time, then left to init. A
 * descendant stuck in the kernel (state D) delays the end: after
 * TOOLKIT_COMMAND_STOP_GRACE_MS a stopping supervisor is killed and the call
 * returns anyway. A process that changes its uid may be invisible in /proc
 * (hidepid) or immune to our kill. Containment that nothing escapes needs a
 * cgroup, which a tool runner without privileges cannot count on.
 *
 * Cost: a fork of the server per call (its page tables, not its memory);
 * under valgrind each supervisor, as a fork that never execs, reports the
 * server's heap at its exit: run with --child-silent-after-fork=yes.
 *
 * Depends on Linux, base/now (deadlines), effects/toolkit_result and
 * effects/toolkit_supervisor (the forked side); nothing from server/ or
 * state_machine/ but rx_buf and rx_common.
 * Threads: any number of runs may go on at once. The parent's descriptors
 * are close-on-exec; a supervisor, which inherits every descriptor of the
 * server, closes all but its own at once. Between fork and exit the
 * supervisor calls only async-signal-safe functions and plain system calls
 * (make signal-safe-check reads its object's undefined symbols).
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
/* Longest wait for a stopping supervisor before it is killed outright. */
#define TOOLKIT_COMMAND_STOP_GRACE_MS 2000

struct toolkit_command {
    char **argv;       /* NULL-terminated; argv[0] is a path or a name found in PATH */
    int timeout_ms;    /* > 0 */
    size_t output_max; /* stdout bound, bytes */
    bool idempotent;   /* "idempotent": true: safe to run again after a crash */
};

/* Free argv and its strings, and zero the struct. */
void toolkit_command_release(struct toolkit_command *cmd);

/* Whether `fd` (a cancel eventfd; -1: none) is readable now: the call was
   cancelled. Never blocks. */
bool toolkit_command_cancelled(int fd);
/*
 * Run `cmd` for tool `tool` (named in messages) with `input` (NUL-terminated)
 * on its stdin and `key` (or NULL) as REFLEXOR_IDEMPOTENCY_KEY in its
 * environment, until it ends, times out, or `cancel_fd` (or -1) becomes
 * readable. 0 with *result and *is_error set (a program that cannot be
 * started or fails is an error result); -ECANCELED or -ENOMEM with both
 * unchanged.
 */
int toolkit_command_run(const struct toolkit_command *cmd, const char *tool,
                        const char *input, const char *key, int cancel_fd, char **result,
                        bool *is_error) RX_WUR;

#endif
