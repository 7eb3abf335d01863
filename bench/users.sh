#!/usr/bin/env bash
# bench/users.sh - what users cost the hot path (issue 30): the POST loop
# (build/bench/loadgen post) against two servers on SQLite files with the same
# config, interleaved: `none` (auth.mode none) and `keys` (auth.mode keys, every
# request carrying a user's API key, checked through the server's key cache,
# and counted against that user's rate bucket, set too high to refuse), with
# store.fsync off on both: what a key check costs is CPU, which the disk's
# flushes would hide.
# Each figure is the median of REPS runs of SECS seconds at 10 and 100
# connections. Goal: keys >= 0.95x none. A missed goal is reported, never a
# failure. Every process it starts is stopped by pid, on success, failure or
# Ctrl-C. BENCH_QUICK=1: 1 run of 1 s.
set -u

B=${BENCH_BUILD:-build}
OUT=$B/bench
LOGS=$OUT/logs
RAW=$OUT/users-raw.txt
LG=$B/bench/loadgen
REFLEXOR=$B/reflexor
if [ "${BENCH_QUICK:-0}" = 1 ]; then
    SECS=1 REPS=1
else
    SECS=${SECS:-3} REPS=${REPS:-5}
fi
CONNS="10 100"
POOL=200 # sessions the POSTs rotate over

. "$(dirname "$0")/lib.sh"

DIR=$(mktemp -d "${TMPDIR:-/tmp}/rx-bench-users.XXXXXX")
trap 'stop_all; rm -rf "$DIR"' EXIT
conf() { # conf NAME MODE
    printf '{"web_root":"/nonexistent","auth":{"mode":"%s"},"runtime":{"effects":false},"store":{"fsync":false},"limits":{"max_connections":4096,"session_queue_max":1024,"user_rate":1000000,"user_sessions":0}}\n' \
        "$2" >"$DIR/$1.json"
    echo "$DIR/$1.json"
}
RX_FLAGS=(--listen 127.0.0.1:0 --log-level warn)

KEY=$("$REFLEXOR" --db "$DIR/keys.db" users add bench 2>>"$LOGS/users.err")
[ -n "$KEY" ] || { echo "bench: users add failed (see $LOGS/users.err)" >&2; exit 1; }
start users-none "$REFLEXOR" --config "$(conf none none)" --db "$DIR/none.db" "${RX_FLAGS[@]}" || exit 1
P_NONE=$SRV_PORT
start users-keys "$REFLEXOR" --config "$(conf keys keys)" --db "$DIR/keys.db" "${RX_FLAGS[@]}" || exit 1
P_KEYS=$SRV_PORT

echo "bench: POST /moorex, auth none vs keys, $REPS x ${SECS}s" >&2
for rep in $(seq "$REPS"); do
    for c in $CONNS; do
        # Each goes first in every other run: a drift of the machine hits both.
        if [ $((rep % 2)) = 1 ]; then
            run "none_$c" post "$P_NONE" "$c" "$SECS" "$POOL"
            LOADGEN_BEARER=$KEY run "keys_$c" post "$P_KEYS" "$c" "$SECS" "$POOL"
        else
            LOADGEN_BEARER=$KEY run "keys_$c" post "$P_KEYS" "$c" "$SECS" "$POOL"
            run "none_$c" post "$P_NONE" "$c" "$SECS" "$POOL"
        fi
    done
done
stop_all

REV=$(git rev-parse --short HEAD 2>/dev/null || echo '?')
echo
echo "Users on the hot path  (rev $REV$(git diff --quiet 2>/dev/null || echo '+changes'), $(nproc) CPUs, $(date -u +%Y-%m-%dT%H:%MZ); median of $REPS runs of ${SECS}s)"
echo "  POST user-send-message, --no-effects, SQLite (fsync off: the auth cost is CPU, not disk), $POOL sessions"
echo
printf '  %-44s %12s %10s %8s\n' "figure" "value" "goal" "verdict"
for c in $CONNS; do
    NO=$(med "none_$c" rps) KE=$(med "keys_$c" rps)
    R=$(calc "$KE / $NO")
    printf '  %-44s %12s %10s %8s\n' "$c conns: auth none, req/s" "$(f0 "$NO")" "" ""
    printf '  %-44s %12s %10s %8s\n' "$c conns: auth keys, req/s" "$(f0 "$KE")" "" ""
    printf '  %-44s %12s %10s %8s\n' "$c conns: p99 us none / keys" \
        "$(f0 "$(med "none_$c" p99_us)") / $(f0 "$(med "keys_$c" p99_us)")" "" ""
    printf '  %-44s %12s %10s %8s\n' "$c conns: keys / none" "$(f2 "$R")x" ">= 0.95x" "$(verdict "$R >= 0.95")"
done
echo "  errors, all runs: $(awk '{ for (i = 2; i <= NF; i++) if ($i ~ /^errors=/) { split($i, a, "="); e += a[2] } } END { print e + 0 }' "$RAW"); raw runs: $RAW"
