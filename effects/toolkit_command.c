/*
 * toolkit_command - command tools: start a supervisor, feed, read, time out,
 * stop. See toolkit_command.h.
 *
 * This is the toolkit side, in the server's threads. The forked side, which
 * may call only async-signal-safe functions, is toolkit_supervisor.c.
 */
#include "effects/toolkit_command.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/now.h"
#include "effects/toolkit_result.h"
#include "effects/toolkit_supervisor.h"
#include "state_machine/rx_buf.h"

/* Largest read from a child's pipe at a time. */
#define READ_CHUNK 16384
/* Bytes of reports kept from the control socket (at most two records). */
#define REPORT_MAX 64

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

bool toolkit_command_cancelled(int fd)
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

/* The supervisor and our ends of the command's pipes and of the control socket. */
struct child {
    pid_t pid;             /* the supervisor */
    int in, out, err, ctl; /* -1 once closed */
    const char *input;
    size_t input_len, written;
    struct rx_buf stdout_buf;
    char stderr_head[TOOLKIT_COMMAND_STDERR_MAX];
    size_t stderr_len;
    char reports[REPORT_MAX];
    size_t reports_len;
};

/*
 * Find the program ourselves rather than in the child: resolving PATH needs
 * getenv and snprintf, which the forked child may not call. 0 and a path in
 * buf, or a positive errno.
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

/*
 * Fork the supervisor (toolkit_supervisor_main), which runs the command. 0, or -errno
 * when no descriptor or process is left: the tool's failure to report, not ours.
 */
static int start_supervisor(const struct toolkit_command *cmd, const char *path,
                            char *const envp[], struct child *c)
{
    int sv[2] = {-1, -1}, outp[2] = {-1, -1}, errp[2] = {-1, -1}, ctl[2] = {-1, -1};
    pid_t parent = getpid(), pid;
    int rc = 0;

    /*
     * stdin is a socket, not a pipe, so that writing to a child that exits
     * early can use MSG_NOSIGNAL instead of raising SIGPIPE in the server.
     * Everything is close-on-exec: concurrent spawns must not inherit it
     * (concurrent supervisors, which do not exec, close it themselves).
     */
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) ||
        pipe2(outp, O_CLOEXEC) || pipe2(errp, O_CLOEXEC) ||
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ctl)) {
        rc = -errno;
        goto out_close_fds;
    }
    pid = fork();
    if (pid == 0)
        toolkit_supervisor_main(path, cmd->argv, envp,
                                (const int[4]){sv[1], outp[1], errp[1], ctl[1]}, parent);
    if (pid < 0) {
        rc = -errno;
        goto out_close_fds;
    }
    c->pid = pid;
    c->in = sv[0], c->out = outp[0], c->err = errp[0], c->ctl = ctl[0];
    sv[0] = outp[0] = errp[0] = ctl[0] = -1;
    fcntl(c->in, F_SETFL, O_NONBLOCK);
    fcntl(c->out, F_SETFL, O_NONBLOCK);
    fcntl(c->err, F_SETFL, O_NONBLOCK);
    fcntl(c->ctl, F_SETFL, O_NONBLOCK);

out_close_fds:
    /* The child's ends always close here: EOF must reach us once it exits. */
    close_fd(&sv[0]), close_fd(&sv[1]);
    close_fd(&outp[0]), close_fd(&outp[1]);
    close_fd(&errp[0]), close_fd(&errp[1]);
    close_fd(&ctl[0]), close_fd(&ctl[1]);
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

/* Keep what the supervisor reports; its EOF (it exited) closes ctl. */
static void read_reports(struct child *c)
{
    for (;;) {
        char buf[REPORT_MAX];
        ssize_t n = read(c->ctl, buf, sizeof(buf));
        size_t k;

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        if (n <= 0) {
            close_fd(&c->ctl);
            return;
        }
        k = sizeof(c->reports) - c->reports_len;
        k = k < (size_t)n ? k : (size_t)n;
        memcpy(c->reports + c->reports_len, buf, k);
        c->reports_len += k;
    }
}

/* The last record of `kind` the supervisor sent, if any. */
static bool find_report(const struct child *c, int kind, int *value)
{
    bool found = false;

    for (size_t off = 0; off + sizeof(struct toolkit_supervisor_report) <= c->reports_len;
         off += sizeof(struct toolkit_supervisor_report)) {
        struct toolkit_supervisor_report r;

        memcpy(&r, c->reports + off, sizeof(r));
        if (r.kind == kind) {
            *value = r.value;
            found = true;
        }
    }
    return found;
}

/* Wait for the supervisor's end; *status is 0 if it was reaped elsewhere. */
static void reap(struct child *c, int *status)
{
    int st = 0;

    while (waitpid(c->pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (status)
        *status = st; /* ECHILD leaves 0: SIGCHLD ignored, reaped by the kernel */
}

/*
 * Order the supervisor to kill everything the command started, wait until it
 * has (its EOF on ctl), and reap it. A supervisor still busy after
 * TOOLKIT_COMMAND_STOP_GRACE_MS (a descendant stuck in the kernel) is killed
 * outright, so the server's thread is never held for long.
 */
static void stop_and_reap(struct child *c)
{
    int64_t deadline = now_mono_ms() + TOOLKIT_COMMAND_STOP_GRACE_MS;

    if (c->ctl >= 0)
        shutdown(c->ctl, SHUT_WR);
    while (c->ctl >= 0) {
        struct pollfd p = {.fd = c->ctl, .events = POLLIN};
        int64_t left = deadline - now_mono_ms();

        if (left <= 0) {
            kill(c->pid, SIGKILL);
            close_fd(&c->ctl);
            break;
        }
        if (poll(&p, 1, (int)left) > 0)
            read_reports(c);
    }
    reap(c, NULL);
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

/* The error result for a program that could not be started. 0 or -ENOMEM. */
static int cannot_run(const struct toolkit_command *cmd, const char *tool, int e,
                      char **result, bool *is_error)
{
    char ebuf[128];

    return toolkit_result_errorf(result, is_error, "cannot run '%s' for tool '%s': %s",
                                 cmd->argv[0], tool, errno_text(e, ebuf, sizeof(ebuf)));
}

enum run_end { END_EXITED, END_TIMEOUT, END_CANCELLED, END_OVERFLOW, END_NOMEM };

/*
 * Pump the pipes until the supervisor has exited (EOF on ctl: the command
 * and all its descendants are gone), or until the deadline, a cancel or too
 * much output. The supervisor is reaped in every case; *status is its own.
 */
static enum run_end pump(struct child *c, int cancel_fd, int timeout_ms, int *status)
{
    int64_t deadline = now_mono_ms() + timeout_ms;

    for (;;) {
        struct pollfd p[5];
        int np = 0, rc;
        int64_t left = deadline - now_mono_ms();

        if (c->ctl < 0) {
            /* What was written before the end is in the pipes; take it all.
               Should a descendant have escaped, do not wait for it. */
            rc = c->out >= 0 ? drain(c, &c->out, true) : 0;
            if (c->err >= 0)
                (void)drain(c, &c->err, false);
            reap(c, status);
            if (rc)
                return rc == -E2BIG ? END_OVERFLOW : END_NOMEM;
            return END_EXITED;
        }
        if (left <= 0) {
            stop_and_reap(c);
            return END_TIMEOUT;
        }
        if (c->in >= 0)
            p[np++] = (struct pollfd){.fd = c->in, .events = POLLOUT};
        if (c->out >= 0)
            p[np++] = (struct pollfd){.fd = c->out, .events = POLLIN};
        if (c->err >= 0)
            p[np++] = (struct pollfd){.fd = c->err, .events = POLLIN};
        p[np++] = (struct pollfd){.fd = c->ctl, .events = POLLIN};
        if (cancel_fd >= 0)
            p[np++] = (struct pollfd){.fd = cancel_fd, .events = POLLIN};
        rc = poll(p, (nfds_t)np, (int)left);
        if (rc < 0 && errno != EINTR) {
            stop_and_reap(c);
            return END_NOMEM;
        }
        if (toolkit_command_cancelled(cancel_fd)) {
            stop_and_reap(c);
            return END_CANCELLED;
        }
        if (c->in >= 0)
            feed_stdin(c);
        if (c->out >= 0) {
            rc = drain(c, &c->out, true);
            if (rc) {
                stop_and_reap(c);
                return rc == -E2BIG ? END_OVERFLOW : END_NOMEM;
            }
        }
        if (c->err >= 0)
            (void)drain(c, &c->err, false);
        read_reports(c);
    }
}

#define KEY_VAR "REFLEXOR_IDEMPOTENCY_KEY="

/*
 * The command's environment: the server's, with REFLEXOR_IDEMPOTENCY_KEY set
 * to `key` (dropped when NULL). Made before the fork, since the supervisor
 * may not allocate. *envp and *var are the caller's to free (not the
 * strings of environ). 0 or -ENOMEM.
 */
static int make_env(const char *key, char ***envp, char **var)
{
    size_t n = 0, k = 0;
    char **v;

    while (environ[n])
        n++;
    *var = NULL;
    if (!(v = calloc(n + 2, sizeof(*v))) ||
        (key && asprintf(var, KEY_VAR "%s", key) < 0)) {
        free(v);
        *var = NULL;
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], KEY_VAR, sizeof(KEY_VAR) - 1))
            v[k++] = environ[i];
    if (*var)
        v[k++] = *var;
    v[k] = NULL;
    *envp = v;
    return 0;
}

int toolkit_command_run(const struct toolkit_command *cmd, const char *tool,
                        const char *input, const char *key, int cancel_fd, char **result,
                        bool *is_error)
{
    struct child c = {.pid = -1, .in = -1, .out = -1, .err = -1, .ctl = -1};
    char line[200], path[4096], **envp = NULL, *var = NULL;
    int start_errno, status = 0, rc;
    enum run_end end;
    size_t len;

    if (make_env(key, &envp, &var))
        return -ENOMEM;

    c.input = input;
    c.input_len = strlen(input);
    rx_buf_init(&c.stdout_buf, cmd->output_max);
    start_errno = resolve_program(cmd->argv[0], path, sizeof(path));
    if (!start_errno)
        start_errno = -start_supervisor(cmd, path, envp, &c);
    if (start_errno) {
        rc = cannot_run(cmd, tool, start_errno, result, is_error);
        goto out_free;
    }
    end = pump(&c, cancel_fd, cmd->timeout_ms, &status);
    close_fd(&c.in), close_fd(&c.out), close_fd(&c.err), close_fd(&c.ctl);
    if (end == END_EXITED &&
        find_report(&c, TOOLKIT_SUPERVISOR_START_FAILED, &start_errno)) {
        rc = cannot_run(cmd, tool, start_errno, result, is_error);
        goto out_free;
    }
    /* The command's status; without one the supervisor itself was killed. */
    (void)find_report(&c, TOOLKIT_SUPERVISOR_STATUS, &status);
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
    free(envp);
    free(var);
    return rc;
}
