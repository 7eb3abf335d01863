#!/usr/bin/env bash
# The layer checks (SPEC section 1), run by `make test`: the purity of
# state_machine/, the floor of base/, and the store (store/) as a layer of its own.
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

# store/ sits below server/: it includes state_machine/, base/ and itself, never
# server/, effects/ or graph/; a backend (store/sqlite, store/pg) never includes
# the other; and outside store/ only store/store.h is included: nobody asks
# which backend it has, nor reaches past the table.
while IFS= read -r line; do
  echo "layer-check: $line: store/ may include only store/, base/ and state_machine/" >&2
  bad=1
done < <(grep -Hn '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' store/*.[ch] store/*/*.[ch] |
         grep -Ev '#[[:space:]]*include[[:space:]]*"(store|base|state_machine)/')
while IFS= read -r line; do
  echo "layer-check: $line: one backend of the store includes the other" >&2
  bad=1
done < <(grep -Hn '#[[:space:]]*include[[:space:]]*"store/pg/' store/sqlite/*.[ch];
         grep -Hn '#[[:space:]]*include[[:space:]]*"store/sqlite/' store/pg/*.[ch])
while IFS= read -r line; do
  echo "layer-check: $line: outside store/ only store/store.h is included" >&2
  bad=1
done < <(grep -rHn --include='*.[ch]' '#[[:space:]]*include[[:space:]]*"store/' \
           server effects graph base state_machine tests bench examples |
         grep -v '"store/store\.h"')

[ "$bad" -eq 0 ] && echo "layer-check: state_machine/ is pure ($# objects), base/ includes nothing above it, store/ is one layer"
exit "$bad"
