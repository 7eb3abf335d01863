#!/usr/bin/env bash
# The purity check of state_machine/ (SPEC section 1) and the floor of base/,
# run by `make test`.
#
#   scripts/layer_check.sh OBJECT...
#
# Fails when a source under state_machine/ includes a header of another layer
# or a library other than the C library and jansson, or when one of the
# objects references a symbol of threads, libuuid, the clock, randomness,
# sockets, files, processes or the environment. An allowlist of headers and a
# denylist of symbols: a new impure call is caught even from a new file.
set -euo pipefail
cd "$(dirname "$0")/.."

c_headers='assert|ctype|errno|float|inttypes|iso646|limits|locale|math|setjmp|signal|stdalign|stdarg|stdatomic|stdbool|stddef|stdint|stdio|stdlib|stdnoreturn|string|tgmath|uchar|wchar|wctype'
bad=0

while IFS= read -r line; do
  echo "layer-check: $line: only state_machine/, the C library and jansson may be included" >&2
  bad=1
done < <(grep -Hn '^[[:space:]]*#[[:space:]]*include' state_machine/*.[ch] |
         grep -Ev "#[[:space:]]*include[[:space:]]*(\"state_machine/[a-z_]+\.h\"|<($c_headers)\.h>|<jansson\.h>)")

# base/ is the impure floor under graph/ and effects/: it may use threads,
# clocks and libuuid, but includes nothing from the layers above it.
while IFS= read -r line; do
  echo "layer-check: $line: base/ includes only base/, state_machine/ and libraries" >&2
  bad=1
done < <(grep -Hn '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' base/*.[ch] |
         grep -Ev '#[[:space:]]*include[[:space:]]*"(base|state_machine)/[a-z_]+\.h"')

impure='^(pthread_|uuid_|clock|time$|gettimeofday|timespec_get|rand|srand|random|srandom|drand48|getrandom|arc4random|socket|connect|bind|listen|accept|send|recv|poll|epoll_|select|open|openat|fopen|fdopen|freopen|fclose|fread|fwrite|fgets|fputs|fputc|fprintf|printf|puts|perror|read|write|close|stat|fstat|lstat|unlink|rename|mkdir|opendir|getenv|setenv|fork|exec|system|popen|kill|signal|sigaction|sleep|usleep|nanosleep|mmap|dlopen|stdout|stderr|stdin)'
for obj in "$@"; do
  while IFS= read -r sym; do
    echo "layer-check: $obj references '$sym': state_machine/ is pure (no threads, ids, clock, I/O)" >&2
    bad=1
  done < <(nm -u "$obj" | awk '{print $2}' | sed 's/@.*//' | grep -E "$impure" || true)
done

[ "$bad" -eq 0 ] && echo "layer-check: state_machine/ is pure ($# objects), base/ includes nothing above it"
exit "$bad"
