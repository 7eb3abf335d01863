#!/usr/bin/env bash
# bench/loop.sh - the full loop's POST rate against history and against
# --no-effects (issue 13, item 1).
#
# Two servers on 127.0.0.1 (port 0, read from their first stdout line), both
# on --db :memory: with the same config: one runs the full loop (the builtin
# brain with the default pacing of config/reflexor.json brain.builtin answers
# every message), the other --no-effects. Every POST is a user-send-message
# to ONE session (build/bench/loadgen postto), so that session's history
# grows as it would in a real conversation.
# Per repetition and per connection count (10, 100), interleaved:
#   noeff  a new session on the --no-effects server;
#   fresh  a new session on the full-loop server;
#   full   a new session on the full-loop server first filled with FILL user
#          messages through the same loop (loadgen fill: the brain answers
#          while they arrive, compresses, and so on), then measured.
# Each figure is the median of REPS runs of SECS seconds. Goals: full >= 0.8
# fresh, fresh >= 0.3 noeff, at 10 and at 100 connections. A missed goal is
# reported, never a failure. Every process it starts is stopped by pid, on
# success, failure or Ctrl-C. BENCH_QUICK=1: 1 run of 1 s, FILL 2000.
set -u

B=${BENCH_BUILD:-build}
OUT=$B/bench
LOGS=$OUT/logs
RAW=$OUT/loop-raw.txt
LG=$B/bench/loadgen
REFLEXOR=$B/reflexor
if [ "${BENCH_QUICK:-0}" = 1 ]; then
    SECS=1 REPS=1 FILL=${FILL:-2000}
else
    SECS=${SECS:-3} REPS=${REPS:-3} FILL=${FILL:-20000}
fi
CONNS="10 100"

. "$(dirname "$0")/lib.sh"


# lg LABEL ARGS... : one generator run, its line kept under LABEL (and echoed).
lg() {
    local label=$1 line
    shift
    if line=$("$LG" "$@" 2>>"$LOGS/loop-loadgen.err"); then
        echo "$label $line" >>"$RAW"
        echo "$line"
    else
        echo "bench: loadgen $* failed (see $LOGS/loop-loadgen.err)" >&2
        return 1
    fi
}

# new_session PORT : prints a new session's id.
new_session() {
    "$LG" session "$1" 2>>"$LOGS/loop-loadgen.err" | sed -n 's/^session id=//p'
}



# The default pacing, taken from the shipped config: brain.builtin's members.
BUILTIN=$(awk '/"builtin"[ \t]*:[ \t]*\{/ { f = 1; sub(/.*"builtin"[ \t]*:[ \t]*\{/, "") }
    f { s = s $0 } f && /\}/ { sub(/\}.*/, "", s); print s; exit }' config/reflexor.json | tr -d " \t")
CONF=$OUT/loop.json
# session_queue_max above 100: every connection may wait on the one session.
printf '{"web_root":"/nonexistent","limits":{"max_connections":4096,"max_sessions":100000,"session_queue_max":1024},"brain":{"provider":"builtin","builtin":{%s}}}\n' \
    "$BUILTIN" >"$CONF"
RX_FLAGS=(--config "$CONF" --db :memory: --listen 127.0.0.1:0 --log-level warn)

start loop-full "$REFLEXOR" "${RX_FLAGS[@]}" || exit 1
P_FULL=$SRV_PORT PID_FULL=$SRV_PID
start loop-noeff "$REFLEXOR" "${RX_FLAGS[@]}" --no-effects || exit 1
P_NOEFF=$SRV_PORT

echo "bench: full loop vs history (builtin {$BUILTIN}), $REPS x ${SECS}s, fill $FILL" >&2
for rep in $(seq "$REPS"); do
    for c in $CONNS; do
        sid=$(new_session "$P_NOEFF")
        echo "  rep $rep, $c conns: noeff  $(lg "noeff_$c" postto "$P_NOEFF" "$c" "$SECS" "$sid")" >&2
        sid=$(new_session "$P_FULL")
        echo "  rep $rep, $c conns: fresh  $(lg "fresh_$c" postto "$P_FULL" "$c" "$SECS" "$sid")" >&2
        sleep 0.5 # the last answers end before the next figure
        echo "  rep $rep, $c conns: fresh  $(lg "fresh_count_$c" count "$P_FULL" "$sid")" >&2
        sid=$(new_session "$P_FULL")
        echo "  rep $rep, $c conns: fill   $(lg "fill_$c" fill "$P_FULL" 10 "$FILL" "$sid")" >&2
        sleep 0.5
        echo "  rep $rep, $c conns: filled $(lg "filled_count_$c" count "$P_FULL" "$sid")" >&2
        echo "  rep $rep, $c conns: full   $(lg "full_$c" postto "$P_FULL" "$c" "$SECS" "$sid")" >&2
        sleep 0.5
        echo "  rep $rep, $c conns: full   $(lg "full_count_$c" count "$P_FULL" "$sid")" >&2
    done
done
# answers/s during a figure: assistant messages it added, over its run (0.5 s warm-up
# included) and the 0.5 s after it.
rate() { # rate LABEL_AFTER [LABEL_BEFORE]
    local a b
    a=$(med "$1" answers)
    b=${2:+$(med "$2" answers)}
    calc "(${a:-0} - ${b:-0}) / ($SECS + 1)"
}
# The full-loop server's threads at the end: a pool, not one per effect.
THREADS=$(awk '/^Threads:/ { print $2 }' "/proc/$PID_FULL/status" 2>/dev/null)
stop_all


REV=$(git rev-parse --short HEAD 2>/dev/null || echo '?')
echo
echo "Full loop vs history  (rev $REV$(git diff --quiet 2>/dev/null || echo '+changes'), $(nproc) CPUs, $(date -u +%Y-%m-%dT%H:%MZ); median of $REPS runs of ${SECS}s)"
echo "  POST user-send-message to one session; builtin brain {$BUILTIN}; --db :memory:"
echo
printf '  %-48s %12s %10s %8s\n' "figure" "value" "goal" "verdict"
for c in $CONNS; do
    NO=$(med "noeff_$c" rps) FR=$(med "fresh_$c" rps) FU=$(med "full_$c" rps)
    MSGS=$(med "fill_$c" messages)
    R1=$(calc "$FU / $FR") R2=$(calc "$FR / $NO") R3=$(calc "$FU / $NO")
    printf '  %-48s %12s %10s %8s\n' "$c conns: --no-effects, req/s" "$(f0 "$NO")" "" ""
    printf '  %-48s %12s %10s %8s\n' "$c conns: full loop, fresh session, req/s" "$(f0 "$FR")" "" ""
    printf '  %-48s %12s %10s %8s\n' "$c conns: full loop, $(f0 "$MSGS") messages in, req/s" "$(f0 "$FU")" "" ""
    printf '  %-48s %12s %10s %8s\n' "$c conns: answers/s fresh / $(f0 "$MSGS") in" \
        "$(f1 "$(rate "fresh_count_$c")") / $(f1 "$(rate "full_count_$c" "filled_count_$c")")" "" ""
    printf '  %-48s %12s %10s %8s\n' "$c conns: p99 us fresh / $(f0 "$MSGS") in" \
        "$(f0 "$(med "fresh_$c" p99_us)") / $(f0 "$(med "full_$c" p99_us)")" "" ""
    printf '  %-48s %12s %10s %8s\n' "$c conns: full loop $(f0 "$MSGS") in / fresh" "$(f2 "$R1")x" ">= 0.8x" "$(verdict "$R1 >= 0.8")"
    printf '  %-48s %12s %10s %8s\n' "$c conns: full loop fresh / --no-effects" "$(f2 "$R2")x" ">= 0.3x" "$(verdict "$R2 >= 0.3")"
    printf '  %-48s %12s %10s %8s\n' "$c conns: full loop $(f0 "$MSGS") in / --no-effects" "$(f2 "$R3")x" ">= 0.3x" "$(verdict "$R3 >= 0.3")"
done
echo "  (answers/s: assistant messages a figure's run added, per second: a message that arrives"
echo "   before the ask for the previous one has started its answer replaces that ask, SPEC 3.3;"
echo "   fill: $(f0 "$(med fill_10 rps)") req/s at 10 conns; errors, all runs: $(awk '{ for (i = 2; i <= NF; i++) if ($i ~ /^errors=/) { split($i, a, "="); e += a[2] } } END { print e + 0 }' "$RAW"); full-loop server threads at the end: ${THREADS:-n/a})"
echo "  raw runs: $RAW"
