#!/usr/bin/env bash
# bench/streams.sh - AG-UI's and A2A's streaming against the session API's own
# SSE, for the same answers (issue 32), run by `make bench-streams` and `make
# bench`: the builtin brain streams an answer of 60 words in chunks
# (chunk_delay_ms 2, --db :memory:), bench/streams.mjs times the first token
# natively and through each protocol, interleaved, and for every token of a
# protocol's run the difference to the same token on the answer's native
# /messages stream, read at the same time. The goal: each protocol within
# 0.5 ms of native at p50, first token and per token. Figures go to
# $B/bench/streams.json. A missed goal is reported, never a failure. The
# server is stopped by pid, also on failure or Ctrl-C. BENCH_QUICK=1: 8 rounds.
set -u

B=${BENCH_BUILD:-build}
OUT=$B/bench
LOGS=$OUT/logs
RAW=$OUT/streams-raw.txt
JSON=$OUT/streams.json
# shellcheck disable=SC2034 # lib.sh run() reads it; not used here
LG=$B/bench/loadgen
REFLEXOR=$B/reflexor
if [ "${BENCH_QUICK:-0}" = 1 ]; then
    N=8 WARMUP=2
else
    N=${STREAM_ROUNDS:-60} WARMUP=5
fi
GOAL_US=500
KINDS=${STREAM_KINDS:-native,agui,a2a}

. "$(dirname "$0")/lib.sh"

NODE=$(command -v node) || { echo "bench: streams: node is missing (scripts/deps.sh nodejs npm)" >&2; exit 1; }
C=$(conf streams ',"brain":{"provider":"builtin","builtin":{"chunk_delay_ms":2}}')
start streams "$REFLEXOR" --config "$C" --db :memory: --listen 127.0.0.1:0 --log-level warn || exit 1
PORT=$SRV_PORT

echo "bench: streams, $N rounds (+$WARMUP warm-up) of $KINDS..." >&2
if ! "$NODE" bench/streams.mjs --port "$PORT" --n "$N" --warmup "$WARMUP" --kinds "$KINDS" \
    >>"$RAW" 2>>"$LOGS/streams-node.err"; then
    echo "bench: streams: bench/streams.mjs failed:" >&2
    tail -5 "$LOGS/streams-node.err" >&2
    exit 1
fi
stop_all

ms() { [ -n "$1" ] && calc "$1 / 1000"; }
NT50=$(med native_ttft p50_us) NT99=$(med native_ttft p99_us)
REV=$(git rev-parse --short HEAD 2>/dev/null || echo '?')
echo
echo "Streaming through AG-UI and A2A  ($REFLEXOR, rev $REV$(git diff --quiet 2>/dev/null || echo '+changes'), $(nproc) CPUs, $(date -u +%Y-%m-%dT%H:%MZ); $N rounds, interleaved)"
echo "  an answer of 60 words from the builtin brain (chunk_delay_ms 2), --db :memory:; times in ms"
echo
row() { printf '  %-50s %9s %9s %12s %8s\n' "$1" "$2" "$3" "$4" "$5"; }
row "figure" "p50" "p99" "goal (p50)" "verdict"
row "native: first token (POST input -> /messages)" "$(f2 "$(ms "$NT50")")" "$(f2 "$(ms "$NT99")")" "" ""
json_kinds=""
for k in agui a2a; do
    T50=$(med ${k}_ttft p50_us) T99=$(med ${k}_ttft p99_us)
    R50=$(med ${k}_relay p50_us) R99=$(med ${k}_relay p99_us)
    [ -z "$T50" ] && continue
    D=$(calc "$T50 - $NT50")
    VT=$(verdict "$D <= $GOAL_US") VR=$(verdict "$R50 <= $GOAL_US")
    name=$([ "$k" = agui ] && echo "AG-UI" || echo "A2A")
    row "$name: first token (one request)" "$(f2 "$(ms "$T50")")" "$(f2 "$(ms "$T99")")" "" ""
    row "  minus native's" "$(f2 "$(ms "$D")")" "" "<= 0.5" "$VT"
    row "$name: per-token relay (its arrival - native's)" "$(f2 "$(ms "$R50")")" "$(f2 "$(ms "$R99")")" "<= 0.5" "$VR"
    json_kinds="$json_kinds, \"$k\": {\"ttft_p50_us\": $T50, \"ttft_p99_us\": $T99, \"ttft_minus_native_us\": $D, \"relay_p50_us\": $R50, \"relay_p99_us\": $R99, \"goal_ttft\": \"$VT\", \"goal_relay\": \"$VR\"}"
done
echo "  (native's first token takes a second request, GET /messages, once /moorex names the answer;"
echo "   a protocol's run streams its tokens on the request that started it)"
{
    printf '{\n  "rev": "%s", "cpus": %s, "rounds": %s, "warmup": %s,\n' "$REV" "$(nproc)" "$N" "$WARMUP"
    printf '  "native": {"ttft_p50_us": %s, "ttft_p99_us": %s}%s\n}\n' "${NT50:-null}" "${NT99:-null}" "$json_kinds"
} >"$JSON"
