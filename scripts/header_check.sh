#!/usr/bin/env bash
# header_check - every header says what it depends on and who owns what, and
# includes only what it says.
#
#   scripts/header_check.sh [HEADER...]     (make layer-check; default: every header)
#
# The opening comment of a header has a sentence that begins "Depends on" and
# a line that begins "Ownership:" (STYLE.md). The "Depends on" sentence, up to
# its first ';' or '.', names folders ("state_machine/"), modules
# ("effects/now", "server/sse.h") or modules of the header's own folder by
# their bare name ("mcp_rpc"). Each #include "..." of the header must be one
# of those: a header that includes a module its sentence does not name fails,
# so the sentence stays the truth as the code changes. state_machine/rx_common.h
# (RX_WUR, struct rx_error: the conventions every module shares) goes unnamed.
set -euo pipefail
cd "$(dirname "$0")/.."

[ $# -gt 0 ] || set -- $(git ls-files -- '*.h' ':!tests/' ':!bench/' ':!examples/' 2>/dev/null ||
                         find state_machine base graph effects store server -name '*.h')

bad=0
for h in "$@"; do
  [ -f "$h" ] || continue
  dir=$(dirname "$h")
  # The opening comment, on one line.
  opening=$(awk 'NR == 1 && !/^\/\*/ { exit } { print } /\*\// { exit }' "$h" |
            sed -e 's/^[[:space:]]*\/\?\*\/\?//' | tr '\n' ' ' | tr -s ' ')
  if ! grep -q 'Ownership:' <<<"$opening"; then
    echo "header-check: $h: its opening comment has no 'Ownership:' line" >&2
    bad=1
  fi
  deps=$(grep -oE 'Depends on .*' <<<"$opening" | sed -E 's/(;|\.( |$)).*//' || true)
  if [ -z "$deps" ]; then
    echo "header-check: $h: its opening comment has no 'Depends on' sentence" >&2
    bad=1
    continue
  fi
  while IFS= read -r inc; do
    [ -n "$inc" ] && [ "$inc" != state_machine/rx_common.h ] || continue
    idir=$(dirname "$inc")
    mod=$(basename "$inc" .h)
    # Allowed: the folder; the module with its folder (with or without .h);
    # a module of the header's own folder by its bare name.
    if grep -qE "(^|[^a-z_/])$idir/([^a-z_]|$)" <<<"$deps" ||
       grep -qE "(^|[^a-z_])$idir/$mod([^a-z_]|$)" <<<"$deps" ||
       { [ "$idir" = "$dir" ] && grep -qE "(^|[^a-z_/])$mod([^a-z_]|$)" <<<"$deps"; }; then
      continue
    fi
    echo "header-check: $h includes \"$inc\", which its 'Depends on' sentence does not name: $deps" >&2
    bad=1
  done < <(sed -nE 's/^[[:space:]]*#[[:space:]]*include[[:space:]]+"([^"]+)".*/\1/p' "$h")
done
[ $bad -eq 0 ] || exit 1
echo "header-check: $# headers say what they depend on and who owns what, and include only that"
