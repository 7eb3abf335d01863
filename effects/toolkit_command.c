/*
 * toolkit_command - command tools: spawn, feed, read, time out, kill.
 * See toolkit_command.h.
 */
#include "effects/toolkit_command.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "effects/now.h"
#include "effects/toolkit_result.h"
#include "state_machine/rx_buf.h"

/* Largest read from a child's pipe at a time. */
#define READ_CHUNK 16384
/* Longest wait between checks of a child that closed its pipes but lives on. */
#define REAP_POLL_MAX_MS 50

static const char *errno_text(int e, char *buf, size_t size)
{
    /* _GNU_SOURCE gives the GNU strerror_r, which may ignore buf. */
    return strerror_r(e, buf, size);
}

void toolkit_command_release(struct toolkit_command *cmd)
{
    if (cmd->argv) {
        for (char **a = cmd->argv; *a; a++)
            free(*a);
        free(cmd->argv);
    }
    memset(cmd, 0, sizeof(*cmd));
}

static bool fd_is_readable(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};

    return fd >= 0 && poll(&p, 1, 0) > 0;
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* Kill the child's whole group (it may have children of its own) and reap it. */
static void kill_and_reap(pid_t pid)
{
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL); /* in case it left its group */
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
}

/* The running child and our ends of its pipes. */
struct child {
    pid_t pid;
    int in, out, err; /* -1 once closed */
    const char *input;
    size_t input_len, written;
    struct rx_buf stdout_buf;
    char stderr_head[TOOLKIT_COMMAND_STDERR_MAX];
    size_t stderr_len;
    bool overflow;
};

/*
 * Find the program ourselves rather than trusting posix_spawnp to report a
 * failed exec: some spawn implementations (and valgrind) only show it as
 * exit status 127. 0 and a path in buf, or a positive errno.
 */
static int resolve_program(const char *prog, char *buf, size_t size)
{
    const char *dirs = getenv("PATH"), *end;
    int e = ENOENT;

    if (strchr(prog, '/')) {
        if (access(prog, X_OK))
            return errno;
        snprintf(buf, size, "%s", prog);
        return 0;
    }
    for (dirs = dirs ? dirs : "/usr/local/bin:/usr/bin:/bin"; *dirs; dirs = end) {
        size_t n;

        end = strchr(dirs, ':');
        end = end ? end : dirs + strlen(dirs);
        n = (size_t)(end - dirs);
        if (*end)
            end++;
        if (n + 1 + strlen(prog) >= size)
            continue;
        snprintf(buf, size, "%.*s%s%s", (int)n, dirs, n ? "/" : "", prog);
        if (!access(buf, X_OK))
            return 0;
        if (errno == EACCES)
            e = EACCES;
    }
    return e;
}

static int spawn_child(const struct toolkit_command *cmd, const char *path,
                       struct child *c, int *spawn_errno)
{
    static const int defaulted[] = {SIGPIPE, SIGINT,  SIGTERM, SIGHUP,  SIGQUIT,
                                    SIGCHLD, SIGUSR1, SIGUSR2, SIGALRM, SIGTSTP};
    int sv[2] = {-1, -1}, outp[2] = {-1, -1}, errp[2] = {-1, -1};
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    sigset_t none, dflt;
    int rc = -ENOMEM;

    /*
     * stdin is a socket, not a pipe, so that writing to a child that exits
     * early can use MSG_NOSIGNAL instead of raising SIGPIPE in the server.
     * Everything is close-on-exec: concurrent spawns must not inherit it.
     */
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) ||
        pipe2(outp, O_CLOEXEC) || pipe2(errp, O_CLOEXEC)) {
        /* Out of descriptors is the tool's failure to report, not ours. */
        *spawn_errno = errno;
        rc = 0;
        goto out_close_fds;
    }
    if (posix_spawn_file_actions_init(&fa))
        goto out_close_fds;
    if (posix_spawnattr_init(&attr))
        goto out_destroy_actions;
    sigemptyset(&none);
    sigemptyset(&dflt);
    for (size_t i = 0; i < sizeof(defaulted) / sizeof(defaulted[0]); i++)
        sigaddset(&dflt, defaulted[i]);
    /* Own process group (so a kill reaches grandchildren), clean signals. */
    if (posix_spawn_file_actions_adddup2(&fa, sv[1], 0) ||
        posix_spawn_file_actions_adddup2(&fa, outp[1], 1) ||
        posix_spawn_file_actions_adddup2(&fa, errp[1], 2) ||
        posix_spawnattr_setpgroup(&attr, 0) || posix_spawnattr_setsigmask(&attr, &none) ||
        posix_spawnattr_setsigdefault(&attr, &dflt) ||
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                            POSIX_SPAWN_SETSIGDEF))
        goto out_destroy_attr;
    *spawn_errno = posix_spawn(&c->pid, path, &fa, &attr, cmd->argv, environ);
    rc = 0;
    if (*spawn_errno)
        goto out_destroy_attr;
    c->in = sv[0], c->out = outp[0], c->err = errp[0];
    sv[0] = outp[0] = errp[0] = -1;
    fcntl(c->in, F_SETFL, O_NONBLOCK);
    fcntl(c->out, F_SETFL, O_NONBLOCK);
    fcntl(c->err, F_SETFL, O_NONBLOCK);

out_destroy_attr:
    posix_spawnattr_destroy(&attr);
out_destroy_actions:
    posix_spawn_file_actions_destroy(&fa);
out_close_fds:
    /* The child's ends always close here: EOF must reach us once it exits. */
    close_fd(&sv[0]), close_fd(&sv[1]);
    close_fd(&outp[0]), close_fd(&outp[1]);
    close_fd(&errp[0]), close_fd(&errp[1]);
    return rc;
}

static void feed_stdin(struct child *c)
{
    while (c->written < c->input_len) {
        ssize_t n = send(c->in, c->input + c->written, c->input_len - c->written,
                         MSG_NOSIGNAL | MSG_DONTWAIT);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n < 0) {
            /* The program does not read its input (EPIPE): its choice. */
            close_fd(&c->in);
            return;
        }
        c->written += (size_t)n;
    }
    close_fd(&c->in); /* EOF tells the program the arguments are complete */
}

/* Read what is there. 0, or -E2BIG when stdout passed its bound. */
static int drain(struct child *c, int *fd, bool is_stdout)
{
    char buf[READ_CHUNK];

    for (;;) {
        ssize_t n = read(*fd, buf, sizeof(buf));

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return 0;
        if (n <= 0) {
            close_fd(fd);
            return 0;
        }
        if (is_stdout) {
            int rc = rx_buf_append(&c->stdout_buf, buf, (size_t)n);

            if (rc == -E2BIG)
                return -E2BIG;
            if (rc)
                return rc;
        } else if (c->stderr_len < sizeof(c->stderr_head)) {
            size_t k = sizeof(c->stderr_head) - c->stderr_len;

            k = k < (size_t)n ? k : (size_t)n;
            memcpy(c->stderr_head + c->stderr_len, buf, k);
            c->stderr_len += k;
        }
    }
}

/* The first non-empty line of stderr, trimmed to fit an error message. */
static void stderr_line(const struct child *c, char *out, size_t size)
{
    size_t start = 0, end;

    while (start < c->stderr_len &&
           (c->stderr_head[start] == '\n' || c->stderr_head[start] == '\r' ||
            c->stderr_head[start] == ' '))
        start++;
    for (end = start; end < c->stderr_len && c->stderr_head[end] != '\n' &&
                      c->stderr_head[end] != '\r';
         end++)
        ;
    if (end - start >= size)
        end = start + size - 1;
    memcpy(out, c->stderr_head + start, end - start);
    out[end - start] = '\0';
}

enum run_end { END_EXITED, END_TIMEOUT, END_CANCELLED, END_OVERFLOW, END_NOMEM };

/*
 * Pump the pipes until the child has exited and closed them, or until the
 * deadline, a cancel or too much output. The child is reaped in every case.
 */
static enum run_end supervise(struct child *c, int cancel_fd, int timeout_ms, int *status)
{
    int64_t deadline = now_mono_ms() + timeout_ms;
    int reap_wait = 1;

    for (;;) {
        struct pollfd p[4];
        int np = 0, wait_ms, rc;
        int64_t left = deadline - now_mono_ms();

        if (left <= 0) {
            kill_and_reap(c->pid);
            return END_TIMEOUT;
        }
        wait_ms = (int)left;
        if (c->out < 0 && c->err < 0) {
            pid_t r = waitpid(c->pid, status, WNOHANG);

            if (r == c->pid || (r < 0 && errno == ECHILD)) {
                if (r < 0)
                    *status = 0; /* reaped by someone else: SIGCHLD ignored */
                return END_EXITED;
            }
            /* Pipes closed but still running: look again soon, growing. */
            wait_ms = wait_ms < reap_wait ? wait_ms : reap_wait;
            reap_wait =
                reap_wait * 2 < REAP_POLL_MAX_MS ? reap_wait * 2 : REAP_POLL_MAX_MS;
        }
        if (c->in >= 0)
            p[np++] = (struct pollfd){.fd = c->in, .events = POLLOUT};
        if (c->out >= 0)
            p[np++] = (struct pollfd){.fd = c->out, .events = POLLIN};
        if (c->err >= 0)
            p[np++] = (struct pollfd){.fd = c->err, .events = POLLIN};
        if (cancel_fd >= 0)
            p[np++] = (struct pollfd){.fd = cancel_fd, .events = POLLIN};
        rc = poll(p, (nfds_t)np, wait_ms);
        if (rc < 0 && errno != EINTR) {
            kill_and_reap(c->pid);
            return END_NOMEM;
        }
        if (fd_is_readable(cancel_fd)) {
            kill_and_reap(c->pid);
            return END_CANCELLED;
        }
        if (c->in >= 0)
            feed_stdin(c);
        if (c->out >= 0) {
            rc = drain(c, &c->out, true);
            if (rc) {
                kill_and_reap(c->pid);
                return rc == -E2BIG ? END_OVERFLOW : END_NOMEM;
            }
        }
        if (c->err >= 0)
            (void)drain(c, &c->err, false);
    }
}

int toolkit_command_run(const struct toolkit_command *cmd, const char *tool,
                        const char *input, int cancel_fd, char **result, bool *is_error)
{
    struct child c = {.pid = -1, .in = -1, .out = -1, .err = -1};
    char ebuf[128], line[200], path[4096];
    int spawn_errno = 0, status = 0, rc;
    enum run_end end;
    size_t len;

    c.input = input;
    c.input_len = strlen(input);
    rx_buf_init(&c.stdout_buf, cmd->output_max);
    spawn_errno = resolve_program(cmd->argv[0], path, sizeof(path));
    rc = spawn_errno ? 0 : spawn_child(cmd, path, &c, &spawn_errno);
    if (rc)
        goto out_free;
    if (spawn_errno) {
        rc = toolkit_result_errorf(result, is_error, "cannot run '%s' for tool '%s': %s",
                                   cmd->argv[0], tool,
                                   errno_text(spawn_errno, ebuf, sizeof(ebuf)));
        goto out_free;
    }
    end = supervise(&c, cancel_fd, cmd->timeout_ms, &status);
    close_fd(&c.in), close_fd(&c.out), close_fd(&c.err);
    stderr_line(&c, line, sizeof(line));
    switch (end) {
    case END_CANCELLED:
        rc = -ECANCELED;
        break;
    case END_NOMEM:
        rc = -ENOMEM;
        break;
    case END_TIMEOUT:
        rc = toolkit_result_errorf(result, is_error, "tool '%s' timed out after %d ms",
                                   tool, cmd->timeout_ms);
        break;
    case END_OVERFLOW:
        rc = toolkit_result_errorf(result, is_error,
                                   "tool '%s' printed more than %zu bytes", tool,
                                   cmd->output_max);
        break;
    case END_EXITED:
        if (WIFSIGNALED(status)) {
            const char *sig = sigabbrev_np(WTERMSIG(status));

            rc = toolkit_result_errorf(result, is_error,
                                       "tool '%s' was killed by signal %d (SIG%s)", tool,
                                       WTERMSIG(status), sig ? sig : "?");
        } else if (WEXITSTATUS(status)) {
            rc = toolkit_result_errorf(result, is_error,
                                       "tool '%s' exited with status %d%s%s", tool,
                                       WEXITSTATUS(status), *line ? ": " : "", line);
        } else {
            /* One trailing newline is how programs end output, not content. */
            len = c.stdout_buf.len;
            if (len && c.stdout_buf.data[len - 1] == '\n')
                len--;
            if (len && c.stdout_buf.data[len - 1] == '\r')
                len--;
            rc = toolkit_result_set(result, is_error, false, len ? c.stdout_buf.data : "",
                                    len);
        }
        break;
    }

out_free:
    rx_buf_release(&c.stdout_buf);
    return rc;
}
