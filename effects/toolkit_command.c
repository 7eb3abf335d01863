/*
 * toolkit_command - command tools: start a supervisor, feed, read, time out,
 * stop. See toolkit_command.h.
 *
 * Two halves live here. The toolkit side (toolkit_command_run and the
 * helpers above it) runs in the server's threads. The supervisor side (sv_*)
 * runs only in the forked child: the server is multi-threaded and the child
 * never calls execve itself, so everything it does, for its whole life, must
 * be async-signal-safe (no malloc, stdio, snprintf, opendir or locks).
 */
#include "effects/toolkit_command.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/now.h"
#include "effects/toolkit_result.h"
#include "state_machine/rx_buf.h"

/* Largest read from a child's pipe at a time. */
#define READ_CHUNK 16384
/* Bytes of reports kept from the control socket (at most two records). */
#define REPORT_MAX 64

/*
 * Descriptors in the supervisor and in the command: 0, 1 and 2 are the
 * command's stdin, stdout and stderr; SV_CTL_FD is the control socket, which
 * the command does not inherit.
 */
#define SV_CTL_FD 3
/* Lowest descriptor used to move the four above out of each other's way. */
#define SV_FD_PARK 10
/* Longest pause between looks for descendants still to kill. */
#define SV_RESCAN_MS 10

/*
 * What the supervisor tells the toolkit over the control socket, one
 * fixed-size record each: the command could not be started (value: errno),
 * or it ended (value: its wait status). No record means the supervisor was
 * itself killed, or it was told to stop.
 */
enum report_kind { REPORT_START_FAILED = 1, REPORT_STATUS = 2 };

struct report {
    int kind;
    int value;
};

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

/* ============================================================ supervisor */

/*
 * The supervisor's self-pipe, written by its signal handlers. Set only in the
 * forked child (its own copy of this variable); the server never uses it.
 */
static int sv_wake_fd = -1;
/* The signal that ordered the supervisor to stop, or 0. */
static volatile sig_atomic_t sv_stop_signal;

struct sv {
    pid_t self, cmd;
    int wake;   /* read end of the self-pipe */
    int status; /* the command's wait status, once reaped */
    bool cmd_reaped;
    bool proc_is_ours; /* /proc shows our pid namespace: safe to scan */
};

static void sv_on_signal(int sig)
{
    int saved = errno;
    char b = 'w';
    ssize_t n;

    if (sig != SIGCHLD)
        sv_stop_signal = sig;
    n = write(sv_wake_fd, &b, 1);
    (void)n; /* a full pipe already holds a wake-up */
    errno = saved;
}

static void sv_report(int fd, int kind, int value)
{
    struct report r = {.kind = kind, .value = value};
    ssize_t n;

    /* 8 bytes on a fresh stream socket: one write, never partial. */
    do
        n = write(fd, &r, sizeof(r));
    while (n < 0 && errno == EINTR);
}

/* Decimal digits of a positive number into buf (at least 12 bytes). */
static char *sv_utoa(char *buf, unsigned long v)
{
    char tmp[24];
    size_t n = 0, i;

    do
        tmp[n++] = (char)('0' + v % 10);
    while ((v /= 10) && n < sizeof(tmp));
    for (i = 0; i < n; i++)
        buf[i] = tmp[n - 1 - i];
    buf[n] = '\0';
    return buf + n;
}

/* A /proc entry's name as a pid, or -1 when it is not all digits. */
static long sv_parse_pid(const char *s)
{
    long v = 0;

    if (!*s)
        return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || v > (LONG_MAX - 9) / 10)
            return -1;
        v = v * 10 + (*s - '0');
    }
    return v;
}

/*
 * /proc could be another pid namespace's (a container with the host's /proc);
 * then a "ppid" there is no pid of ours and killing by it could hit a
 * stranger. Trust it only if /proc/self names our own pid.
 */
static bool sv_proc_is_ours(pid_t self)
{
    char want[24], got[24];
    ssize_t n = readlink("/proc/self", got, sizeof(got) - 1);

    if (n <= 0)
        return false;
    got[n] = '\0';
    sv_utoa(want, (unsigned long)self);
    return !strcmp(want, got);
}

/* The parent pid in /proc/<pid>/stat, or -1. */
static long sv_ppid_of(long pid)
{
    char path[48] = "/proc/", buf[512], *p;
    ssize_t n;
    long ppid = 0;
    int fd;

    strcpy(sv_utoa(path + 6, (unsigned long)pid), "/stat");
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    /* "pid (comm) S ppid ...": comm may hold spaces and ')', so take the last. */
    p = strrchr(buf, ')');
    if (!p || p[1] != ' ' || !p[2] || p[3] != ' ')
        return -1;
    for (p += 4; *p >= '0' && *p <= '9'; p++)
        ppid = ppid * 10 + (*p - '0');
    return ppid;
}

/*
 * SIGKILL every process whose parent is the supervisor. As a subreaper it
 * inherits every orphan among the command's descendants, whatever session or
 * group they moved to, so this reaches them all, a generation per pass.
 * /proc is read with getdents64 because opendir allocates. The number killed,
 * or -1 when /proc cannot be read.
 */
static int sv_kill_children(const struct sv *s)
{
    union {
        struct dirent64 align;
        char bytes[4096];
    } buf;
    int dir, killed = 0;
    ssize_t n;

    if (!s->proc_is_ours)
        return -1;
    dir = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0)
        return -1;
    while ((n = getdents64(dir, buf.bytes, sizeof(buf.bytes))) > 0) {
        for (ssize_t off = 0; off < n;) {
            const struct dirent64 *d = (const struct dirent64 *)(buf.bytes + off);
            long pid = sv_parse_pid(d->d_name);

            /* Only our own children: their pids cannot be reused until we
               reap them, so the kill cannot hit another process. */
            if (pid > 0 && pid != s->self && sv_ppid_of(pid) == s->self &&
                !kill((pid_t)pid, SIGKILL))
                killed++;
            off += d->d_reclen;
        }
    }
    close(dir);
    return n < 0 ? -1 : killed;
}

/*
 * Reap every child that has ended; false once none is left at all. Each is
 * looked at before it is reaped (WNOWAIT): when it is the command, its group
 * is killed first, while its pid, and so the group's id, cannot have been
 * reused. That reaches whatever stayed in the group even without /proc.
 */
static bool sv_reap(struct sv *s)
{
    for (;;) {
        siginfo_t si;
        int st;

        memset(&si, 0, sizeof(si));
        if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0) {
            if (errno == EINTR)
                continue;
            return false; /* ECHILD: nothing left */
        }
        if (si.si_pid == 0)
            return true; /* children, none ended yet */
        if (si.si_pid == s->cmd && !s->cmd_reaped)
            kill(-s->cmd, SIGKILL);
        while (waitpid(si.si_pid, &st, 0) < 0 && errno == EINTR)
            ;
        if (si.si_pid == s->cmd && !s->cmd_reaped) {
            s->status = st;
            s->cmd_reaped = true;
        }
    }
}

/* Sleep until a signal arrives or `ms` pass, then empty the self-pipe. */
static void sv_wait_wake(const struct sv *s, int ms)
{
    struct pollfd p = {.fd = s->wake, .events = POLLIN};
    char b[64];

    (void)poll(&p, 1, ms);
    while (read(s->wake, b, sizeof(b)) > 0)
        ;
}

/*
 * Kill the command's group, then every descendant, until the supervisor has
 * no child left. Children it cannot find (no /proc) or cannot kill (EPERM:
 * they changed uid) are waited for a bounded time, then left to init rather
 * than holding the toolkit until the tool's timeout.
 */
static void sv_kill_all(struct sv *s)
{
    int idle_ms = 0;

    /* Only while unreaped: its pid (and so its group id) is still ours. */
    if (!s->cmd_reaped) {
        kill(-s->cmd, SIGKILL);
        kill(s->cmd, SIGKILL);
    }
    while (sv_reap(s)) {
        if (sv_kill_children(s) <= 0 &&
            (idle_ms += SV_RESCAN_MS) > TOOLKIT_COMMAND_STOP_GRACE_MS / 2)
            return;
        sv_wait_wake(s, SV_RESCAN_MS);
    }
}

/*
 * Move in, out, err and ctl to 0, 1, 2 and SV_CTL_FD and close every other
 * descriptor: no exec will close the server's (listening sockets, other
 * tools' pipes), and holding another tool's pipe would keep its EOF away.
 * 0 or -errno.
 */
static int sv_arrange_fds(const int fds[4])
{
    int parked[4];

    /* Park above the targets first: a source may be one of 0..3. */
    for (int i = 0; i < 4; i++) {
        parked[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, SV_FD_PARK);
        if (parked[i] < 0)
            return -errno;
    }
    for (int i = 0; i < 4; i++)
        if (dup2(parked[i], i) < 0)
            return -errno;
    if (close_range(SV_CTL_FD + 1, ~0u, 0)) {
        /* Kernels before 5.9: close them one by one, up to the limit. */
        struct rlimit rl = {.rlim_cur = 1024};

        (void)getrlimit(RLIMIT_NOFILE, &rl);
        for (rlim_t fd = SV_CTL_FD + 1; fd < rl.rlim_cur && fd < (1u << 20); fd++)
            close((int)fd);
    }
    /* The command must not hold the control socket: only we report on it. */
    return fcntl(SV_CTL_FD, F_SETFD, FD_CLOEXEC) ? -errno : 0;
}

/* In the command's own child: a clean process, then the program. */
static _Noreturn void sv_exec(const char *path, char *const argv[])
{
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigset_t none;

    /* Handlers would be reset by execve anyway; the self-pipe is ours. */
    sigaction(SIGCHLD, &dfl, NULL);
    sigaction(SIGTERM, &dfl, NULL);
    sigaction(SIGINT, &dfl, NULL);
    sigaction(SIGHUP, &dfl, NULL);
    /* A group of its own, so the first kill reaches whatever stayed in it. */
    setpgid(0, 0);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execve(path, argv, environ);
    sv_report(SV_CTL_FD, REPORT_START_FAILED, errno);
    _exit(127);
}

/*
 * The supervisor, in the child forked by start_supervisor. It becomes a child
 * subreaper, forks and execs the command (which inherits the pipes directly:
 * nothing is relayed), and waits for either the command's exit or the order
 * to stop: EOF on the control socket (the toolkit timed out, was cancelled,
 * or died), or SIGTERM/SIGINT/SIGHUP (also its parent's death, through
 * PR_SET_PDEATHSIG). Then it kills and reaps every descendant, reports the
 * command's status if it exited, and exits.
 */
static _Noreturn void sv_main(const char *path, char *const argv[], const int fds[4],
                              pid_t parent)
{
    static const int stops[] = {SIGTERM, SIGINT, SIGHUP};
    struct sigaction on = {.sa_handler = sv_on_signal, .sa_flags = SA_RESTART};
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    struct sv s = {.cmd = -1, .wake = -1};
    bool eof = false; /* the toolkit's order to stop */
    int wake[2], rc;
    sigset_t all, none;

    /* No signal until the handlers are ours: the server's are meaningless
       here, and ignored signals (SIGPIPE) must not reach the command. */
    sigfillset(&all);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &all, NULL);
    for (int sig = 1; sig < NSIG; sig++)
        sigaction(sig, &dfl, NULL); /* fails harmlessly on KILL, STOP, glibc's */
    rc = sv_arrange_fds(fds);
    if (rc) {
        sv_report(fds[3], REPORT_START_FAILED, -rc);
        _exit(127);
    }
    if (pipe2(wake, O_CLOEXEC | O_NONBLOCK)) {
        sv_report(SV_CTL_FD, REPORT_START_FAILED, errno);
        _exit(127);
    }
    s.wake = wake[0];
    sv_wake_fd = wake[1];
    sigemptyset(&on.sa_mask);
    for (size_t i = 0; i < sizeof(stops) / sizeof(stops[0]); i++)
        sigaction(stops[i], &on, NULL);
    on.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    sigaction(SIGCHLD, &on, NULL);

    /* Orphaned descendants come to us rather than to init (Linux 3.4+). */
    (void)prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    (void)prctl(PR_SET_PDEATHSIG, SIGTERM, 0, 0, 0);
    if (getppid() != parent)
        sv_stop_signal = SIGTERM; /* it died before the prctl took */
    /* Out of the server's group: a terminal's ^C is the server's business. */
    setpgid(0, 0);
    s.self = getpid();
    s.proc_is_ours = sv_proc_is_ours(s.self);

    s.cmd = fork();
    if (s.cmd == 0)
        sv_exec(path, argv);
    if (s.cmd < 0) {
        sv_report(SV_CTL_FD, REPORT_START_FAILED, errno);
        _exit(127);
    }
    setpgid(s.cmd, s.cmd); /* also here: no window where the kill misses it */
    /* Drop our copies of the command's stdio: the pipes must reach EOF as
       soon as the command and its descendants are gone, not when we are. */
    close(0), close(1), close(2);
    sigprocmask(SIG_SETMASK, &none, NULL);

    while (!eof && !sv_stop_signal && !s.cmd_reaped) {
        struct pollfd p[2] = {{.fd = SV_CTL_FD, .events = POLLIN},
                              {.fd = s.wake, .events = POLLIN}};
        char b[64];

        if (poll(p, 2, -1) > 0 && p[0].revents) {
            ssize_t n = read(SV_CTL_FD, b, sizeof(b));

            eof = n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN);
        }
        if (p[1].revents)
            sv_wait_wake(&s, 0);
        (void)sv_reap(&s); /* orphans too, so no zombie piles up */
    }
    sv_kill_all(&s);
    if (sv_stop_signal) {
        /* Die of it, so the toolkit reports the tool killed by that signal
           rather than a success it does not have. */
        sigaction(sv_stop_signal, &dfl, NULL);
        kill(s.self, sv_stop_signal);
        _exit(128 + sv_stop_signal);
    }
    if (s.cmd_reaped && !eof)
        sv_report(SV_CTL_FD, REPORT_STATUS, s.status);
    _exit(0);
}

/* ========================================================== toolkit side */

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
 * Fork the supervisor (sv_main), which runs the command. 0, or -errno when
 * no descriptor or process is left: the tool's failure to report, not ours.
 */
static int start_supervisor(const struct toolkit_command *cmd, const char *path,
                            struct child *c)
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
        sv_main(path, cmd->argv, (const int[4]){sv[1], outp[1], errp[1], ctl[1]}, parent);
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

    for (size_t off = 0; off + sizeof(struct report) <= c->reports_len;
         off += sizeof(struct report)) {
        struct report r;

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
        if (fd_is_readable(cancel_fd)) {
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

int toolkit_command_run(const struct toolkit_command *cmd, const char *tool,
                        const char *input, int cancel_fd, char **result, bool *is_error)
{
    struct child c = {.pid = -1, .in = -1, .out = -1, .err = -1, .ctl = -1};
    char line[200], path[4096];
    int start_errno, status = 0, rc;
    enum run_end end;
    size_t len;

    c.input = input;
    c.input_len = strlen(input);
    rx_buf_init(&c.stdout_buf, cmd->output_max);
    start_errno = resolve_program(cmd->argv[0], path, sizeof(path));
    if (!start_errno)
        start_errno = -start_supervisor(cmd, path, &c);
    if (start_errno) {
        rc = cannot_run(cmd, tool, start_errno, result, is_error);
        goto out_free;
    }
    end = pump(&c, cancel_fd, cmd->timeout_ms, &status);
    close_fd(&c.in), close_fd(&c.out), close_fd(&c.err), close_fd(&c.ctl);
    if (end == END_EXITED && find_report(&c, REPORT_START_FAILED, &start_errno)) {
        rc = cannot_run(cmd, tool, start_errno, result, is_error);
        goto out_free;
    }
    /* The command's status; without one the supervisor itself was killed. */
    (void)find_report(&c, REPORT_STATUS, &status);
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
