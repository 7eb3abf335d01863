#!/usr/bin/env bash
# bench/mcp.sh - the latency of one MCP tool call, directly and through
# Reflexor, run by `make bench`.
#
# The tool is `echo` {"message":"x"} of the MCP reference server-everything
# over stdio (node_modules/@modelcontextprotocol/, from `npm ci`):
#   direct   the MCP TypeScript SDK's Client, its own server spawned and
#            initialized once, N sequential callTool calls;
#   reflexor build/reflexor --db :memory: on 127.0.0.1 (port 0), the same
#            server as mcpServers.everything (timeout_ms default), the builtin
#            brain with chunk_delay_ms 0; per call a fresh session: POST
#            "/call everything__echo {...}" to its /moorex, timed until its SSE
#            stream shows the tool record's result (state-updated), the stream
#            followed and not polled.
# bench/mcp.mjs makes both kinds of call, one of each per round, so a noisy
# machine slows both alike; it prints the figures, this script the table.
# Reflexor's own view: reflexor_effect_seconds{kind="tool"} from /metrics (a
# summary: its mean over the measured calls) and the tool records' stamps.
# Figures go to $B/bench/mcp.json (raw lines mcp-raw.txt, every call in
# mcp-samples.txt). A missed goal is reported, never a failure. Every process
# it starts is stopped by pid, on success, failure or Ctrl-C (mcp.mjs stops
# its own MCP server; Reflexor stops its own). BENCH_QUICK=1: 20 calls.
set -u

B=${BENCH_BUILD:-build}
OUT=$B/bench
LOGS=$OUT/logs
RAW=$OUT/mcp-raw.txt
JSON=$OUT/mcp.json
SAMPLES=$OUT/mcp-samples.txt
# shellcheck disable=SC2034 # lib.sh run() reads it; not used here
LG=$B/bench/loadgen
REFLEXOR=$B/reflexor
if [ "${BENCH_QUICK:-0}" = 1 ]; then
    N=20 WARMUP=3
else
    N=${MCP_CALLS:-200} WARMUP=10
fi
GOAL_MS=5 # overhead goal: Reflexor adds at most this much to a call, at the median

. "$(dirname "$0")/lib.sh"

MCPDIR=$PWD/node_modules/@modelcontextprotocol
EVERYTHING=$MCPDIR/server-everything/dist/index.js
NODE=$(command -v node) || { echo "bench: mcp: node is missing (scripts/deps.sh nodejs npm)" >&2; exit 1; }
for f in "$EVERYTHING" "$MCPDIR/sdk/package.json"; do
    [ -e "$f" ] || { echo "bench: mcp: $f is missing: run npm ci" >&2; exit 1; }
done

C_MCP=$(conf mcp "$(printf ',"brain":{"provider":"builtin","builtin":{"chunk_delay_ms":0}},"mcpServers":{"everything":{"command":"%s","args":["%s","stdio"]}}' \
    "$NODE" "$EVERYTHING")")
start mcp "$REFLEXOR" --config "$C_MCP" --db :memory: --listen 127.0.0.1:0 --log-level warn || exit 1
PORT=$SRV_PORT PID_RX=$SRV_PID

# The MCP server connects in the background: wait until it is up (start-up only).
UP=
for _ in $(seq 400); do
    if curl -s "http://127.0.0.1:$PORT/api/reflexor/tools" | grep -q '"name":"everything"[^}]*"status":"up"'; then
        UP=1
        break
    fi
    kill -0 "$PID_RX" 2>/dev/null || break
    sleep 0.05
done
if [ -z "$UP" ]; then
    echo "bench: mcp: server 'everything' not up in Reflexor; see $LOGS/mcp.err and:" >&2
    curl -s "http://127.0.0.1:$PORT/api/reflexor/tools" | grep -o '"servers":.*' >&2
    exit 1
fi

echo "bench: MCP tool call, $N calls each way (+$WARMUP warm-up), interleaved..." >&2
if ! "$NODE" bench/mcp.mjs --port "$PORT" --n "$N" --warmup "$WARMUP" --samples "$SAMPLES" \
    >>"$RAW" 2>>"$LOGS/mcp-node.err"; then
    echo "bench: mcp: bench/mcp.mjs failed:" >&2
    tail -5 "$LOGS/mcp-node.err" >&2
    exit 1
fi
THREADS=$(awk '/^Threads:/ { print $2 }' "/proc/$PID_RX/status" 2>/dev/null)
stop_all

# ---- the table --------------------------------------------------------------
# get LABEL KEY : the value of KEY on the line labelled LABEL (one line each).
get() { med "$1" "$2"; }
ms() { [ -n "$1" ] && calc "$1 / 1000"; }
D50=$(ms "$(get direct p50_us)") D95=$(ms "$(get direct p95_us)")
R50=$(ms "$(get rx p50_us)") R95=$(ms "$(get rx p95_us)")
O50=$(calc "$R50 - $D50") O95=$(calc "$R95 - $D95")
X50=$(calc "$R50 / $D50") X95=$(calc "$R95 / $D95")
G=$(verdict "$O50 <= $GOAL_MS")
REV=$(git rev-parse --short HEAD 2>/dev/null || echo '?')

echo
echo "MCP tool call  ($REFLEXOR, rev $REV$(git diff --quiet 2>/dev/null || echo '+changes'), $(nproc) CPUs, $(date -u +%Y-%m-%dT%H:%MZ); $N calls each way, interleaved)"
echo "  everything/echo {\"message\":\"x\"} over stdio; Reflexor: builtin brain, chunk_delay_ms 0, --db :memory:"
echo
row() { printf '  %-58s %9s %9s %10s %8s\n' "$1" "$2" "$3" "$4" "$5"; }
row "figure, ms" "median" "p95" "goal" "verdict"
row "direct: SDK Client.callTool" "$(f2 "$D50")" "$(f2 "$D95")" "" ""
row "through Reflexor: POST /call -> state shows the result" "$(f2 "$R50")" "$(f2 "$R95")" "" ""
row "  overhead (Reflexor - direct)" "$(f2 "$O50")" "$(f2 "$O95")" "<= $GOAL_MS" "$G"
row "  ratio (Reflexor / direct)" "$(f2 "$X50")x" "$(f2 "$X95")x" "" ""
row "  POST acknowledged" "$(f2 "$(ms "$(get rx_ack p50_us)")")" "$(f2 "$(ms "$(get rx_ack p95_us)")")" "" ""
row "  the answer complete (\"Tool '...' returned: ...\")" "$(f2 "$(ms "$(get rx_answer p50_us)")")" \
    "$(f2 "$(ms "$(get rx_answer p95_us)")")" "" ""
echo "  Reflexor's own view:"
row "  tool effect, /metrics reflexor_effect_seconds (mean)" "$(f2 "$(get rx_metrics tool_mean_ms)")" "" "" ""
row "  brain effect, the same (mean; 2 per call)" "$(f2 "$(get rx_metrics brain_mean_ms)")" "" "" ""
row "  tool record: result.receivedAt - calledAt (see below)" "$(f0 "$(get rx_record p50_ms)")" "$(f0 "$(get rx_record p95_ms)")" "" ""
echo "  (tool effects $(get rx_metrics tool_count), failed $(get rx_metrics tool_failed); MCP calls $(awk '$1 == "rx_metrics" { for (i = 2; i <= NF; i++) if ($i ~ /^mcp_calls=/) print substr($i, 11) }' "$RAW");" \
    "Reflexor threads at the end: ${THREADS:-?})"
echo "  (the records' stamps are whole ms, each input at least 1 ms after the one before: >= 1 however fast)"
echo "  (direct: initialize once, $(f0 "$(ms "$(get direct_init us)")") ms with the spawn; a fresh session per Reflexor call,"
echo "   its stream open before the POST; times from the POST written to the event read, in node)"

num() { [ -n "$1" ] && printf '%s' "$1" || printf 'null'; }
{
    echo "{"
    printf '  "rev": "%s", "cpus": %s, "calls": %s, "warmup": %s,\n' "$REV" "$(nproc)" "$N" "$WARMUP"
    printf '  "direct": {"p50_ms": %s, "p95_ms": %s, "mean_ms": %s},\n' "$(num "$D50")" "$(num "$D95")" \
        "$(num "$(ms "$(get direct mean_us)")")"
    printf '  "reflexor": {"p50_ms": %s, "p95_ms": %s, "mean_ms": %s, "ack_p50_ms": %s, "answer_p50_ms": %s, "answer_p95_ms": %s},\n' \
        "$(num "$R50")" "$(num "$R95")" "$(num "$(ms "$(get rx mean_us)")")" \
        "$(num "$(ms "$(get rx_ack p50_us)")")" "$(num "$(ms "$(get rx_answer p50_us)")")" \
        "$(num "$(ms "$(get rx_answer p95_us)")")"
    printf '  "overhead_ms": {"p50": %s, "p95": %s}, "ratio": {"p50": %s, "p95": %s},\n' \
        "$(num "$O50")" "$(num "$O95")" "$(num "$X50")" "$(num "$X95")"
    printf '  "metrics": {"tool_mean_ms": %s, "brain_mean_ms": %s, "tool_count": %s, "record_p50_ms": %s, "record_p95_ms": %s},\n' \
        "$(num "$(get rx_metrics tool_mean_ms)")" "$(num "$(get rx_metrics brain_mean_ms)")" \
        "$(num "$(get rx_metrics tool_count)")" "$(num "$(get rx_record p50_ms)")" "$(num "$(get rx_record p95_ms)")"
    printf '  "goals": {"overhead_p50_le_%sms": "%s"}\n' "$GOAL_MS" "$G"
    echo "}"
} >"$JSON"
