#!/usr/bin/env bash
# need - fail, naming the package, when a program a test runs is missing.
#
#   scripts/need.sh PROGRAM...
#
# The make targets call this before they run an outside program, so a missing
# one is reported as "install the Debian package X" and never as a skip or a
# bare "command not found". The package comes from scripts/deps.sh's list.
set -euo pipefail
cd "$(dirname "$0")/.."
rc=0
for prog in "$@"; do
  command -v "$prog" >/dev/null && continue
  case $prog in
    initdb | pg_ctl | postgres) ls /usr/lib/postgresql/*/bin/"$prog" >/dev/null 2>&1 && continue ;;
  esac
  pkg=$(scripts/deps.sh --programs | awk -v p="$prog" '$1 == p { print $2; exit }')
  if [ -n "$pkg" ]; then
    echo "need: $prog is missing: install the Debian package $pkg (scripts/deps.sh $pkg)" >&2
  else
    echo "need: $prog is missing and on no list: add its package to scripts/deps.sh" >&2
  fi
  rc=1
done
exit $rc
