#!/usr/bin/env bash
# The forked supervisor of command tools calls only async-signal-safe
# functions (effects/toolkit_supervisor.h), run by `make test`.
#
#   scripts/signal_safe_check.sh OBJECT...
#
# A child forked from a multi-threaded process may find any lock of libc
# (malloc's, stdio's) held by a thread that no longer exists there, so until
# it execs or exits it may call only what POSIX lists as async-signal-safe.
# This reads the symbols each object leaves undefined (nm -u) and fails on
# any not in the allowlist below: a malloc, snprintf or opendir slipped in,
# directly or through a new helper, is caught at build time, not as a rare
# deadlock of a tool call.
set -euo pipefail

# POSIX.1-2017, XSH 2.4.3 "Signal Actions": the async-signal-safe functions.
posix='_Exit _exit abort accept access aio_error aio_return aio_suspend alarm bind
cfgetispeed cfgetospeed cfsetispeed cfsetospeed chdir chmod chown clock_gettime close
connect creat dup dup2 execl execle execv execve faccessat fchdir fchmod fchmodat
fchown fchownat fcntl fdatasync fexecve ffs fork fstat fstatat fsync ftruncate futimens
getegid geteuid getgid getgroups getpeername getpgrp getpid getppid getsockname
getsockopt getuid htonl htons kill link linkat listen longjmp lseek lstat memccpy
memchr memcmp memcpy memmove memset mkdir mkdirat mkfifo mkfifoat mknod mknodat ntohl
ntohs open openat pause pipe poll posix_trace_event pselect pthread_kill pthread_self
pthread_sigmask raise read readlink readlinkat recv recvfrom recvmsg rename renameat
rmdir select sem_post send sendmsg sendto setgid setpgid setsid setsockopt setuid
shutdown sigaction sigaddset sigdelset sigemptyset sigfillset sigismember siglongjmp
signal sigpause sigpending sigprocmask sigqueue sigset sigsuspend sleep sockatmark
socket socketpair stat stpcpy stpncpy strcat strchr strcmp strcpy strcspn strlen
strncat strncmp strncpy strnlen strpbrk strrchr strspn strstr strtok_r symlink
symlinkat tcdrain tcflow tcflush tcgetattr tcgetpgrp tcsendbreak tcsetattr tcsetpgrp
time timer_getoverrun timer_gettime timer_settime times umask uname unlink unlinkat
utime utimensat utimes wait waitpid wcpcpy wcpncpy wcscat wcschr wcscmp wcscpy wcscspn
wcslen wcsncat wcsncmp wcsncpy wcsnlen wcspbrk wcsrchr wcsspn wcsstr wcstok wmemchr
wmemcmp wmemcpy wmemmove wmemset write'

# Linux system calls that glibc wraps without a lock or an allocation: the
# supervisor's own needs (fds, /proc, subreaper), not in POSIX's list.
linux='close_range dup3 getdents64 getrlimit pipe2 prctl waitid'

# Not calls of ours: errno's address, the environment handed to execve, the
# stack protector, and a sanitizer build's instrumentation.
abi='__errno_location environ __stack_chk_fail'
instrumented='^__(asan|ubsan|sanitizer|lsan|tsan)_'

allowed=" $(echo $posix $linux $abi) "
bad=0
for obj in "$@"; do
  while IFS= read -r sym; do
    [[ "$allowed" == *" $sym "* ]] && continue
    [[ "$sym" =~ $instrumented ]] && continue
    echo "signal-safe-check: $obj calls '$sym', which is not async-signal-safe" \
         "(effects/toolkit_supervisor.h; the allowlist is in $0)" >&2
    bad=1
  done < <(nm -u "$obj" | awk '{print $2}' | sed 's/@.*//')
done
[ "$bad" -eq 0 ] && echo "signal-safe-check: only async-signal-safe calls in $*"
exit "$bad"
