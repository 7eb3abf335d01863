/*
 * toolkit_supervisor - the supervisor of one command tool, in the forked
 * child. See toolkit_supervisor.h and, for the design, toolkit_command.h.
 *
 * The server is multi-threaded and this child never calls execve itself, so
 * everything here, for its whole life, must be async-signal-safe: no malloc,
 * stdio, snprintf, opendir or locks (signal-safe-check reads nm -u of this
 * object). Static functions are sv_*.
 */
#include "effects/toolkit_supervisor.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "effects/toolkit_command.h"

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
    struct toolkit_supervisor_report r = {.kind = kind, .value = value};
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
static _Noreturn void sv_exec(const char *path, char *const argv[], char *const envp[])
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
    execve(path, argv, envp);
    sv_report(SV_CTL_FD, TOOLKIT_SUPERVISOR_START_FAILED, errno);
    _exit(127);
}

/*
 * The supervisor, in the child forked by toolkit_command.c's start_supervisor. It becomes
 * a child subreaper, forks and execs the command (which inherits the pipes directly:
 * nothing is relayed), and waits for either the command's exit or the order
 * to stop: EOF on the control socket (the toolkit timed out, was cancelled,
 * or died), or SIGTERM/SIGINT/SIGHUP (also its parent's death, through
 * PR_SET_PDEATHSIG). Then it kills and reaps every descendant, reports the
 * command's status if it exited, and exits.
 */
_Noreturn void toolkit_supervisor_main(const char *path, char *const argv[],
                                       char *const envp[], const int fds[4], pid_t parent)
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
        sv_report(fds[3], TOOLKIT_SUPERVISOR_START_FAILED, -rc);
        _exit(127);
    }
    if (pipe2(wake, O_CLOEXEC | O_NONBLOCK)) {
        sv_report(SV_CTL_FD, TOOLKIT_SUPERVISOR_START_FAILED, errno);
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
        sv_exec(path, argv, envp);
    if (s.cmd < 0) {
        sv_report(SV_CTL_FD, TOOLKIT_SUPERVISOR_START_FAILED, errno);
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
        sv_report(SV_CTL_FD, TOOLKIT_SUPERVISOR_STATUS, s.status);
    _exit(0);
}
