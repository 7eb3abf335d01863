#!/bin/sh
# Test fixture (check_crash_effects): a tool that acts on the world once per
# run. It appends one line "<REFLEXOR_IDEMPOTENCY_KEY> <pid>" to the ledger
# file named by its first argument, and answers "ok <key> <pid>". The
# arguments JSON may hold "pre" and "post": milliseconds (0-999) to sleep
# before and after the append, so a kill can land on either side of it.
ledger=$1
args=$(cat)
pre=$(printf '%s' "$args" | sed -n 's/.*"pre" *: *\([0-9][0-9]*\).*/\1/p')
post=$(printf '%s' "$args" | sed -n 's/.*"post" *: *\([0-9][0-9]*\).*/\1/p')
nap() {
    [ -n "$1" ] && [ "$1" -gt 0 ] && sleep "$(printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000)))"
    return 0
}
nap "$pre"
printf '%s %s\n' "$REFLEXOR_IDEMPOTENCY_KEY" "$$" >>"$ledger"
nap "$post"
printf 'ok %s %s' "$REFLEXOR_IDEMPOTENCY_KEY" "$$"
