/*
 * mcp_stdio - an MCP server as a child process on pipes. See mcp_stdio.h.
 */
#include "effects/mcp_stdio.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/now.h"
#include "state_machine/rx_buf.h"

extern char **environ;

/* How long one read waits: bounds how late a stop is noticed without stop_fd,
   and a death without a pidfd. */
#define READ_SLICE_MS 1000
/* After the program died, how long the reader goes on taking what is left
   in the pipe before it says so (a descendant may write on forever). */
#define DEATH_DRAIN_MS 1000
/* How often mcp_stdio_try_send asks again for a lock held by a writer that
   is not waiting for room (a write in progress takes microseconds). */
#define TRY_SPINS 1000

void mcp_stdio_init(struct mcp_stdio *io)
{
    memset(io, 0, sizeof(*io));
    io->in_fd = io->out_fd = io->err_fd = -1;
    /* -1 when out of descriptors: writers then wait out their timeout. */
    io->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    pthread_mutex_init(&io->write_lock, NULL);
}

void mcp_stdio_release(struct mcp_stdio *io)
{
    if (io->wake_fd >= 0)
        close(io->wake_fd);
    io->wake_fd = -1;
    pthread_mutex_destroy(&io->write_lock);
}

/* Our environment with `env` laid over it: a malloc'd array of borrowed
   strings (the caller frees the array only), or NULL. */
static char **merged_env(char *const env[])
{
    size_t n = 0, m = 0, k = 0;
    char **out;

    while (environ && environ[n])
        n++;
    while (env && env[m])
        m++;
    out = calloc(n + m + 1, sizeof(*out));
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        size_t len = strcspn(environ[i], "=");
        bool replaced = false;

        for (size_t j = 0; j < m && !replaced; j++)
            replaced = !strncmp(env[j], environ[i], len) && env[j][len] == '=';
        if (!replaced)
            out[k++] = environ[i];
    }
    for (size_t j = 0; j < m; j++)
        out[k++] = env[j];
    return out;
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* Attributes of the child: own process group, default signals, empty mask. */
static int spawn_attrs(posix_spawnattr_t *attr)
{
    static const int reset[] = {SIGPIPE, SIGHUP,  SIGINT,  SIGTERM,
                                SIGUSR1, SIGUSR2, SIGALRM, SIGCHLD};
    sigset_t none, def;

    sigemptyset(&none);
    sigemptyset(&def);
    for (size_t i = 0; i < sizeof(reset) / sizeof(reset[0]); i++)
        sigaddset(&def, reset[i]);
    return posix_spawnattr_init(attr) ||
           posix_spawnattr_setflags(attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                              POSIX_SPAWN_SETSIGDEF) ||
           posix_spawnattr_setpgroup(attr, 0) ||
           posix_spawnattr_setsigmask(attr, &none) ||
           posix_spawnattr_setsigdefault(attr, &def);
}

int mcp_stdio_spawn(struct mcp_stdio *io, char *const argv[], char *const env[],
                    struct rx_error *err)
{
    int in[2] = {-1, -1}, out[2] = {-1, -1}, errp[2] = {-1, -1}, rc;
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    char **envp = merged_env(env);
    pid_t pid;

    if (!envp)
        return rx_error_set(err, -ENOMEM, "out of memory");
    if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC) || pipe2(errp, O_CLOEXEC)) {
        rc = rx_error_set(err, -errno, "cannot make pipes: %s", strerror(errno));
        goto out_close;
    }
    if (posix_spawn_file_actions_init(&fa)) {
        rc = rx_error_set(err, -ENOMEM, "out of memory");
        goto out_close;
    }
    if (spawn_attrs(&attr) || posix_spawn_file_actions_adddup2(&fa, in[0], 0) ||
        posix_spawn_file_actions_adddup2(&fa, out[1], 1) ||
        posix_spawn_file_actions_adddup2(&fa, errp[1], 2)) {
        rc = rx_error_set(err, -ENOMEM, "out of memory");
        goto out_actions;
    }
    rc = posix_spawnp(&pid, argv[0], &fa, &attr, argv, envp);
    if (rc) {
        rc = rx_error_set(err, -rc, "cannot start '%s': %s", argv[0], strerror(rc));
        goto out_attr;
    }
    io->pid = pid;
    __atomic_store_n(&io->closing, false, __ATOMIC_RELEASE);
    if (io->wake_fd >= 0) { /* a kill of the last program woke it */
        eventfd_t v;

        eventfd_read(io->wake_fd, &v);
    }
    io->in_fd = in[1], in[1] = -1;
    io->out_fd = out[0], out[0] = -1;
    io->err_fd = errp[0], errp[0] = -1;
    /* A program that stops reading must not block a writer forever. */
    fcntl(io->in_fd, F_SETFL, fcntl(io->in_fd, F_GETFL) | O_NONBLOCK);

out_attr:
    posix_spawnattr_destroy(&attr);
out_actions:
    posix_spawn_file_actions_destroy(&fa);
out_close:
    for (int i = 0; i < 2; i++) {
        close_fd(&in[i]);
        close_fd(&out[i]);
        close_fd(&errp[i]);
    }
    free(envp);
    return rc;
}

/*
 * Lock held. Write all of p, waiting for room until `deadline`, until
 * mcp_stdio_kill wakes us (a kill never waits for a writer's timeout) or
 * until `cancel_fd` is readable (the caller gave up: a cancelled call, a stop).
 */
static int write_all(struct mcp_stdio *io, const char *p, size_t n, int64_t deadline,
                     int cancel_fd)
{
    int rc;

    while (n) {
        ssize_t w;

        if (__atomic_load_n(&io->closing, __ATOMIC_ACQUIRE))
            return -EPIPE;
        w = write(io->in_fd, p, n);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN) {
            struct pollfd pfd[3] = {{.fd = io->in_fd, .events = POLLOUT},
                                    {.fd = io->wake_fd, .events = POLLIN},
                                    {.fd = cancel_fd, .events = POLLIN}};
            int64_t left = deadline - now_mono_ms();

            if (left <= 0)
                return -ETIMEDOUT;
            __atomic_store_n(&io->waiting, true, __ATOMIC_RELEASE);
            rc = poll(pfd, 3, (int)left) < 0 && errno != EINTR ? -errno : 0;
            __atomic_store_n(&io->waiting, false, __ATOMIC_RELEASE);
            if (rc)
                return rc;
            if (pfd[2].revents)
                return -ECANCELED;
            continue;
        }
        return -EPIPE;
    }
    return 0;
}

int mcp_stdio_send(struct mcp_stdio *io, const char *msg, size_t n, int timeout_ms,
                   int cancel_fd)
{
    int64_t deadline = now_mono_ms() + timeout_ms;
    int rc = -EPIPE;

    pthread_mutex_lock(&io->write_lock);
    if (io->in_fd >= 0) {
        rc = write_all(io, msg, n, deadline, cancel_fd);
        if (!rc)
            rc = write_all(io, "\n", 1, deadline, cancel_fd);
    }
    pthread_mutex_unlock(&io->write_lock);
    return rc;
}

int mcp_stdio_try_send(struct mcp_stdio *io, const char *msg, size_t n)
{
    char line[PIPE_BUF];
    ssize_t w;
    int rc;

    /* Up to PIPE_BUF bytes go into a pipe whole or not at all (POSIX), so a
       refused line leaves nothing half-written behind. */
    if (n + 1 > sizeof(line))
        return -EMSGSIZE;
    memcpy(line, msg, n);
    line[n] = '\n';
    /* A writer that waits for room would make us wait too: give up then; a
       writer in the middle of a write is done in a moment. */
    for (int i = 0; pthread_mutex_trylock(&io->write_lock); i++) {
        if (__atomic_load_n(&io->waiting, __ATOMIC_ACQUIRE) || i == TRY_SPINS)
            return -EAGAIN;
        sched_yield();
    }
    rc = -EPIPE;
    if (io->in_fd >= 0 && !__atomic_load_n(&io->closing, __ATOMIC_ACQUIRE)) {
        do
            w = write(io->in_fd, line, n + 1);
        while (w < 0 && errno == EINTR);
        rc = w == (ssize_t)(n + 1) ? 0 : w < 0 && errno == EAGAIN ? -EAGAIN : -EPIPE;
    }
    pthread_mutex_unlock(&io->write_lock);
    return rc;
}

/* The line reader of one stream: whole lines out, overlong ones dropped. */
struct line_reader {
    struct rx_buf buf;
    size_t max;
    size_t dropped; /* bytes of an overlong line skipped so far; 0: none */
    bool is_stderr;
};

static void hand_over(const struct mcp_stdio_reader *rd, struct line_reader *lr,
                      const char *p, size_t n)
{
    if (lr->is_stderr)
        rd->on_stderr(rd->ctx, p, n);
    else
        rd->on_line(rd->ctx, p, n);
}

/* Feed n bytes: each complete line goes to rd. 0 or -ENOMEM. */
static int lines_feed(struct line_reader *lr, const struct mcp_stdio_reader *rd,
                      const char *p, size_t n)
{
    while (n) {
        const char *nl = memchr(p, '\n', n);
        size_t take = nl ? (size_t)(nl - p) : n;

        if (lr->dropped) {
            lr->dropped += take;
        } else if (lr->buf.len + take > lr->max) {
            if (lr->is_stderr) { /* keep the start of a long stderr line */
                size_t room = lr->max - lr->buf.len;

                if (rx_buf_append(&lr->buf, p, room))
                    return -ENOMEM;
                hand_over(rd, lr, lr->buf.data, lr->buf.len);
            }
            lr->dropped = lr->buf.len + take;
            lr->buf.len = 0;
        } else if (rx_buf_append(&lr->buf, p, take)) {
            return -ENOMEM;
        }
        if (!nl)
            return 0;
        if (lr->dropped) {
            if (!lr->is_stderr)
                rd->on_line(rd->ctx, NULL, lr->dropped);
            lr->dropped = 0;
        } else {
            size_t len = lr->buf.len;

            if (len && lr->buf.data[len - 1] == '\r')
                len--;
            if (rx_buf_append(&lr->buf, "", 1))
                return -ENOMEM;
            hand_over(rd, lr, lr->buf.data, len);
        }
        lr->buf.len = 0;
        p = nl + 1;
        n -= take + 1;
    }
    return 0;
}

/* Whether the program (not reaped: WNOWAIT leaves that to mcp_stdio_kill) has
   ended. `pidfd` readable says so; without one, ask the kernel. */
static bool has_died(pid_t pid, int pidfd, const struct pollfd *pfd)
{
    siginfo_t si = {0};

    if (pidfd >= 0)
        return pfd->revents != 0;
    return pid > 0 && !waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) &&
           si.si_pid == pid;
}

int mcp_stdio_read(struct mcp_stdio *io, const struct mcp_stdio_reader *rd, int stop_fd)
{
    struct line_reader out = {.max = MCP_STDIO_LINE_MAX};
    struct line_reader errl = {.max = MCP_STDIO_STDERR_LINE_MAX, .is_stderr = true};
    /* The end of the program, seen even when a descendant keeps its stdout
       open (EOF alone would never come). */
    pid_t pid = io->pid; /* read once: mcp_stdio_kill clears it meanwhile */
    int pidfd = pid > 0 ? (int)syscall(SYS_pidfd_open, pid, 0) : -1;
    int64_t died = 0, checked = now_mono_ms();
    char chunk[65536];
    int rc = 0;

    rx_buf_init(&out.buf, MCP_STDIO_LINE_MAX + 1);
    rx_buf_init(&errl.buf, MCP_STDIO_STDERR_LINE_MAX + 1);
    while (io->out_fd >= 0) {
        struct pollfd p[4] = {{.fd = io->out_fd, .events = POLLIN},
                              {.fd = io->err_fd, .events = POLLIN},
                              {.fd = stop_fd, .events = POLLIN},
                              {.fd = died ? -1 : pidfd, .events = POLLIN}};
        int64_t now;

        if (poll(p, 4, READ_SLICE_MS) < 0) {
            if (errno == EINTR)
                continue;
            rc = -errno;
            break;
        }
        if (p[2].revents) {
            rc = -EINTR;
            break;
        }
        now = now_mono_ms();
        if (!died && (pidfd >= 0 || now - checked >= READ_SLICE_MS)) {
            checked = now;
            if (has_died(pid, pidfd, &p[3]))
                died = now;
        }
        /* Dead: what it wrote before it died is still read; then stop. */
        if (died && (!p[0].revents || now - died > DEATH_DRAIN_MS)) {
            rc = -ECHILD;
            break;
        }
        for (int i = 1; i >= 0 && !rc; i--) { /* stderr first: it often explains */
            struct line_reader *lr = i ? &errl : &out;
            ssize_t got;

            if (!p[i].revents)
                continue;
            got = read(p[i].fd, chunk, sizeof(chunk));
            if (got > 0) {
                rc = lines_feed(lr, rd, chunk, (size_t)got);
            } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
                if (i)
                    close_fd(&io->err_fd); /* poll skips negative fds */
                else
                    goto out_release; /* stdout closed: the stream ended */
            }
        }
        if (rc)
            break;
    }

out_release:
    if (pidfd >= 0)
        close(pidfd);
    rx_buf_release(&out.buf);
    rx_buf_release(&errl.buf);
    return rc;
}

static void describe_status(int status, char *how, size_t size)
{
    if (!how)
        return;
    if (WIFEXITED(status))
        snprintf(how, size, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(how, size, "killed by signal %d", WTERMSIG(status));
    else
        snprintf(how, size, "ended");
}

void mcp_stdio_kill(struct mcp_stdio *io, int grace_ms, char *how, size_t size)
{
    int64_t deadline = now_mono_ms() + grace_ms;
    int status = 0;
    pid_t got = 0;

    /* A writer waiting for a program that does not read lets go at once. */
    __atomic_store_n(&io->closing, true, __ATOMIC_RELEASE);
    if (io->wake_fd >= 0)
        eventfd_write(io->wake_fd, 1);
    pthread_mutex_lock(&io->write_lock);
    close_fd(&io->in_fd); /* EOF first: many servers exit on it */
    pthread_mutex_unlock(&io->write_lock);
    if (io->pid > 0) {
        got = waitpid(io->pid, &status, WNOHANG);
        if (got == 0)
            kill(-io->pid, SIGTERM);
        while (got == 0 && now_mono_ms() < deadline) {
            usleep(10000);
            got = waitpid(io->pid, &status, WNOHANG);
        }
        /* The group too: what the program started dies with it. */
        kill(-io->pid, SIGKILL);
        if (got == 0)
            got = waitpid(io->pid, &status, 0);
        if (got == io->pid)
            describe_status(status, how, size);
        else if (how)
            snprintf(how, size, "ended");
    }
    io->pid = 0;
}

void mcp_stdio_close(struct mcp_stdio *io)
{
    close_fd(&io->out_fd);
    close_fd(&io->err_fd);
}
