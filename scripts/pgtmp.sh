#!/usr/bin/env bash
# pgtmp - a throwaway PostgreSQL cluster for the tests and benchmarks.
#
#   scripts/pgtmp.sh start DIR   initdb in DIR (once), start it, print its URL
#   scripts/pgtmp.sh stop DIR    stop it (fast shutdown); DIR stays
#   scripts/pgtmp.sh kill DIR    stop it at once (immediate: as if it crashed)
#   scripts/pgtmp.sh url DIR     print its URL
#   scripts/pgtmp.sh createdb DIR NAME   a fresh database NAME; prints its URL
#
# Debian's postgresql (installed by scripts/deps.sh when missing), listening on
# a Unix socket inside DIR only: no port to collide with, nothing on the
# network. As root, the server runs as the `postgres` user, which owns DIR.
# Exit 3 when PostgreSQL cannot be found (callers skip with that reason).
set -euo pipefail

cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop|kill|url|createdb DIR [NAME]" >&2; exit 2; }

bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
[ -x "$bin/pg_ctl" ] || { echo "pgtmp: PostgreSQL is not installed (no pg_ctl)" >&2; exit 3; }

as_pg() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

url() { echo "postgresql:///postgres?host=$(cd "$dir" && pwd)&user=postgres"; }

case $cmd in
start)
  mkdir -p "$dir"
  [ "$(id -u)" -eq 0 ] && chown postgres: "$dir"
  if [ ! -f "$dir/data/PG_VERSION" ]; then
    as_pg "$bin/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --no-locale \
      >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; exit 1; }
  fi
  sock=$(cd "$dir" && pwd)
  # fsync stays on unless PGTMP_FSYNC=off: the benchmarks compare durable stores.
  as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 30 \
    -o "-c listen_addresses='' -c unix_socket_directories='$sock' -c max_connections=200 \
        -c fsync=${PGTMP_FSYNC:-on} -c synchronous_commit=on" start >/dev/null \
    || { tail -20 "$dir/server.log" >&2; exit 1; }
  url
  ;;
stop) as_pg "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true ;;
kill) as_pg "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true ;;
url) url ;;
createdb)
  name=${3:?a database name}
  sock=$(cd "$dir" && pwd)
  as_pg "$bin/psql" -h "$sock" -U postgres -d postgres -qAt -v ON_ERROR_STOP=1 \
    -c "DROP DATABASE IF EXISTS \"$name\"" -c "CREATE DATABASE \"$name\"" >/dev/null 2>&1
  echo "postgresql:///$name?host=$sock&user=postgres"
  ;;
*) echo "pgtmp: unknown command $cmd" >&2; exit 2 ;;
esac
