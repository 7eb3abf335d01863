#!/usr/bin/env bash
# bench/protocols.sh - the client protocols' overhead over the native API
# (issue 17), run by `make bench`: one turn answered by the builtin brain
# (chunk_delay_ms 0, --db :memory:), natively (POST + SSE), through the
# OpenAI-compatible API and through the LangGraph API; bench/protocols.mjs
# makes one of each per round, so a noisy machine slows all alike. The goal:
# each protocol's median within 1.5x the native one, in the same run.
# Figures go to $B/bench/protocols.json. A missed goal is reported, never a
# failure. The server is stopped by pid, also on failure or Ctrl-C.
# BENCH_QUICK=1: 20 rounds.
set -u

B=${BENCH_BUILD:-build}
OUT=$B/bench
LOGS=$OUT/logs
RAW=$OUT/protocols-raw.txt
JSON=$OUT/protocols.json
# shellcheck disable=SC2034 # lib.sh run() reads it; not used here
LG=$B/bench/loadgen
REFLEXOR=$B/reflexor
if [ "${BENCH_QUICK:-0}" = 1 ]; then
    N=20 WARMUP=3
else
    N=${PROTOCOL_ROUNDS:-200} WARMUP=10
fi
GOAL=1.5

. "$(dirname "$0")/lib.sh"

NODE=$(command -v node) || { echo "bench: protocols: node is missing (scripts/deps.sh nodejs npm)" >&2; exit 1; }
C=$(conf protocols ',"brain":{"provider":"builtin","builtin":{"chunk_delay_ms":0}}')
start protocols "$REFLEXOR" --config "$C" --db :memory: --listen 127.0.0.1:0 --log-level warn || exit 1
PORT=$SRV_PORT

echo "bench: protocols, $N rounds (+$WARMUP warm-up) of native / openai / langgraph..." >&2
if ! "$NODE" bench/protocols.mjs --port "$PORT" --n "$N" --warmup "$WARMUP" \
    >>"$RAW" 2>>"$LOGS/protocols-node.err"; then
    echo "bench: protocols: bench/protocols.mjs failed:" >&2
    tail -5 "$LOGS/protocols-node.err" >&2
    exit 1
fi
stop_all

ms() { [ -n "$1" ] && calc "$1 / 1000"; }
N50=$(ms "$(med native p50_us)") N95=$(ms "$(med native p95_us)")
T50=$(ms "$(med native_turn p50_us)") T95=$(ms "$(med native_turn p95_us)")
O50=$(ms "$(med openai p50_us)") O95=$(ms "$(med openai p95_us)")
L50=$(ms "$(med langgraph p50_us)") L95=$(ms "$(med langgraph p95_us)")
XO=$(calc "$O50 / $N50") XL=$(calc "$L50 / $N50")
YO=$(calc "$O50 / $T50") YL=$(calc "$L50 / $T50")
GO=$(verdict "$XO <= $GOAL") GL=$(verdict "$XL <= $GOAL")
REV=$(git rev-parse --short HEAD 2>/dev/null || echo '?')

echo
echo "Client protocols  ($REFLEXOR, rev $REV$(git diff --quiet 2>/dev/null || echo '+changes'), $(nproc) CPUs, $(date -u +%Y-%m-%dT%H:%MZ); $N rounds, interleaved)"
echo "  one turn on a fresh conversation, the builtin brain (chunk_delay_ms 0), --db :memory:"
echo
row() { printf '  %-52s %9s %9s %10s %8s\n' "$1" "$2" "$3" "$4" "$5"; }
row "figure, ms" "median" "p95" "goal" "verdict"
row "native: POST /sessions + SSE + POST input" "$(f2 "$N50")" "$(f2 "$N95")" "" ""
row "native turn alone: POST input -> answer complete" "$(f2 "$T50")" "$(f2 "$T95")" "" ""
row "OpenAI: POST /v1/chat/completions (stream)" "$(f2 "$O50")" "$(f2 "$O95")" "" ""
row "  ratio to native" "$(f2 "$XO")x" "" "<= ${GOAL}x" "$GO"
row "  ratio to the native turn alone" "$(f2 "$YO")x" "" "" ""
row "LangGraph: POST /threads + runs/stream" "$(f2 "$L50")" "$(f2 "$L95")" "" ""
row "  ratio to native" "$(f2 "$XL")x" "" "<= ${GOAL}x" "$GL"
row "  ratio to the native turn alone" "$(f2 "$YL")x" "" "" ""
echo "  (native: the three requests a client makes for a turn on a new session; the turn alone:"
echo "   from the POST of the input, its session made and its stream open. OpenAI makes its"
echo "   session inside its one request, LangGraph in POST /threads: the same work, fewer trips)"


num() { [ -n "$1" ] && printf '%s' "$1" || printf 'null'; }
{
    echo "{"
    printf '  "rev": "%s", "cpus": %s, "rounds": %s, "warmup": %s,\n' "$REV" "$(nproc)" "$N" "$WARMUP"
    printf '  "native": {"p50_ms": %s, "p95_ms": %s, "turn_p50_ms": %s, "turn_p95_ms": %s},\n' "$(num "$N50")" "$(num "$N95")" "$(num "$T50")" "$(num "$T95")"
    printf '  "openai": {"p50_ms": %s, "p95_ms": %s, "ratio": %s, "ratio_turn": %s},\n' "$(num "$O50")" "$(num "$O95")" "$(num "$XO")" "$(num "$YO")"
    printf '  "langgraph": {"p50_ms": %s, "p95_ms": %s, "ratio": %s, "ratio_turn": %s},\n' "$(num "$L50")" "$(num "$L95")" "$(num "$XL")" "$(num "$YL")"
    printf '  "goals": {"openai_le_%sx": "%s", "langgraph_le_%sx": "%s"}\n' "$GOAL" "$GO" "$GOAL" "$GL"
    echo "}"
} >"$JSON"
