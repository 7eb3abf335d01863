#!/usr/bin/env bash
# bench/run.sh - the server benchmark suite (issues 8 and 13), run by `make bench`.
#
# Starts every server it needs on 127.0.0.1 (port 0, the port read from its
# first line), drives them with build/bench/loadgen, prints ONE table and
# writes the same figures to build/bench/results.json (raw generator lines in
# build/bench/raw.txt, server logs in build/bench/logs/). Every process it
# starts is stopped by pid, on success, failure or Ctrl-C.
#
# Each timed figure is the median of REPS runs (POST_REPS for POST) of SECS seconds; the runs of
# Reflexor and of its baseline (bench/bare_server, bare libmicrohttpd) are
# interleaved so a noisy shared machine hits both alike (the fan-out rate
# table interleaves its rates and modes the same way). Benchmarks measure:
# a missed goal is reported, never a failure. BENCH_QUICK=1: 1 run of 1 s.
set -u

B=${BENCH_BUILD:-build}
OUT=$B/bench
LOGS=$OUT/logs
RAW=$OUT/raw.txt
JSON=$OUT/results.json
LG=$B/bench/loadgen
if [ "${BENCH_QUICK:-0}" = 1 ]; then
    SECS=1 REPS=1 POST_REPS=1 FAN_SECS=2 RELAY_MSGS=2 GET_MSGS=20000
else
    # POST figures are ratios near their goals on a shared machine: 5 runs.
    SECS=3 REPS=3 POST_REPS=5 FAN_SECS=4 RELAY_MSGS=5 GET_MSGS=100000
fi
FAN_SUBS=1000 FAN_RATE=25 # 25 POSTs/s x 2 events x 1000 = 50 000 offered/s
FAN_RATES="25 50 75 100 150" # the rate table (POSTs/s); the first is FAN_RATE
POOL=200                  # sessions the POSTs rotate over (state stays small)
MEM_SESSIONS=10000 MEM_STREAMS=1000
QUEUE_BYTES=8388608       # limits.sse_queue_bytes, its default (config/README.md)
STUCK_KB=4096 STUCK_INPUTS=400 # one stream that never reads, on a 4 MB state
GET_REPS=5

. "$(dirname "$0")/lib.sh"








REFLEXOR=$B/reflexor
C_NOEFF=$(conf noeff ',"runtime":{"effects":false}')
C_BRAIN=$(conf brain ',"brain":{"provider":"builtin","builtin":{"chunk_chars":4,"chunk_delay_ms":0}}')
RX_FLAGS=(--listen 127.0.0.1:0 --log-level warn)

echo "bench: pure layer..." >&2
if ! "$B/bench/bench_pure" | awk '{ split($2, a, "="); $1 = "pure" a[2]; print }' >>"$RAW"; then
    echo "bench: bench_pure failed" >&2
fi

# ---- the durable store: is it there? -------------------------------------
DB=$OUT/tmp-store.db
rm -f "$DB" "$DB"-*
STORE=no
if start store-probe "$REFLEXOR" --config "$C_NOEFF" --db "$DB" "${RX_FLAGS[@]}"; then
    run probe post "$SRV_PORT" 1 1 1
    stop "$SRV_PID"
    [ -s "$DB" ] && STORE=yes
fi
rm -f "$DB" "$DB"-*

# ---- POST throughput -------------------------------------------------------
echo "bench: POST /moorex ($POST_REPS x ${SECS}s per figure)..." >&2
# The baseline runs MHD as the server does, its pool of epoll threads
# included; bare1, one MHD thread, is shown beside it for reference.
start bare "$B/bench/bare_server" 0 || exit 1
P_BARE=$SRV_PORT PID_BARE=$SRV_PID
start bare1 "$B/bench/bare_server" 0 1 || exit 1
P_BARE1=$SRV_PORT
start noeff "$REFLEXOR" --config "$C_NOEFF" --db :memory: "${RX_FLAGS[@]}" || exit 1
P_NOEFF=$SRV_PORT
start brain "$REFLEXOR" --config "$C_BRAIN" --db :memory: "${RX_FLAGS[@]}" || exit 1
P_BRAIN=$SRV_PORT
VARIANTS="bare bare1 noeff brain"
if [ $STORE = yes ]; then
    start store "$REFLEXOR" --config "$C_NOEFF" --db "$DB" "${RX_FLAGS[@]}" || exit 1
    P_STORE=$SRV_PORT
    VARIANTS="$VARIANTS store"
fi
for rep in $(seq "$POST_REPS"); do
    for c in 10 100; do
        for v in $VARIANTS; do
            case $v in
            bare) run "post_bare_$c" post "$P_BARE" "$c" "$SECS" 0 ;;
            bare1) run "post_bare1_$c" post "$P_BARE1" "$c" "$SECS" 0 ;;
            noeff) run "post_noeff_$c" post "$P_NOEFF" "$c" "$SECS" "$POOL" ;;
            brain) run "post_brain_$c" post "$P_BRAIN" "$c" "$SECS" "$POOL" ;;
            store) run "post_store_$c" post "$P_STORE" "$c" "$SECS" "$POOL" ;;
            esac
            sleep 0.3 # let the brain's effects drain before the next run
        done
    done
done
# The bare server's own memory floor: an idle keep-alive connection.
run idle idle "$P_BARE" "$PID_BARE" "$MEM_STREAMS"
stop_all
rm -f "$DB" "$DB"-*

# ---- SSE fan-out -------------------------------------------------------------
echo "bench: SSE fan-out ($FAN_SUBS subscribers, $REPS x ${FAN_SECS}s)..." >&2
# Every run on a fresh server and session, so each rate starts from the same state.
fan_run() { # fan_run LABEL RATE [QUERY]
    start fanout "$REFLEXOR" --config "$C_NOEFF" --db :memory: "${RX_FLAGS[@]}" || exit 1
    run "$1" fanout "$SRV_PORT" "$SRV_PID" "$FAN_SUBS" "$2" "$FAN_SECS" ${3:+"$3"}
    stop "$SRV_PID"
}
for rep in $(seq "$REPS"); do
    fan_run fanout "$FAN_RATE"
    fan_run fanout_patch "$FAN_RATE" "?mode=patch"
done
# The rate table: higher offered rates, interleaved the same way. A mode whose
# p99 passed a second at one rate is not driven harder (it would only queue).
echo "bench: SSE fan-out rate table (POSTs/s: $FAN_RATES)..." >&2
SAT_whole=999999 SAT_patch=999999 # the rate (POSTs/s) that saturated, in run 1
for rep in $(seq "$REPS"); do
    for r in $FAN_RATES; do
        [ "$r" = "$FAN_RATE" ] && continue
        [ "$r" -le "$SAT_whole" ] && fan_run "sweep_whole_$r" "$r"
        [ "$r" -le "$SAT_patch" ] && fan_run "sweep_patch_$r" "$r" "?mode=patch"
        if [ "$rep" = 1 ]; then
            over "$(med "sweep_whole_$r" p99_ms)" 1000 && [ "$r" -lt "$SAT_whole" ] && SAT_whole=$r
            over "$(med "sweep_patch_$r" p99_ms)" 1000 && [ "$r" -lt "$SAT_patch" ] && SAT_patch=$r
        fi
    done
done

# ---- memory ---------------------------------------------------------------
echo "bench: memory..." >&2
for rep in $(seq "$REPS"); do
    start memory "$REFLEXOR" --config "$C_NOEFF" --db :memory: "${RX_FLAGS[@]}" || exit 1
    sleep 0.2
    run memory memory "$SRV_PORT" "$SRV_PID" "$MEM_SESSIONS" "$MEM_STREAMS"
    stop "$SRV_PID"
done

# ---- bounded memory: a stream that never reads; GET of a large state --------
echo "bench: a stream that never reads ($STUCK_KB KB state); GET of a $GET_MSGS-message state..." >&2
for rep in $(seq "$REPS"); do
    start stuck "$REFLEXOR" --config "$C_NOEFF" --db :memory: "${RX_FLAGS[@]}" || exit 1
    run stuck stuck "$SRV_PORT" "$SRV_PID" "$STUCK_KB" "$STUCK_INPUTS"
    stop "$SRV_PID"
    start getstate "$REFLEXOR" --config "$C_NOEFF" --db :memory: "${RX_FLAGS[@]}" || exit 1
    SID=$("$LG" session "$SRV_PORT" 2>>"$LOGS/loadgen.err" | sed -n 's/^session id=//p')
    if [ -n "$SID" ]; then
        run getfill fill "$SRV_PORT" 8 "$GET_MSGS" "$SID"
        run getstate getstate "$SRV_PORT" "$SRV_PID" "$SID" "$GET_REPS"
    fi
    stop "$SRV_PID"
done

# ---- token relay -------------------------------------------------------------
echo "bench: token relay..." >&2
RELAY=no
if start fake_llm "$B/bench/fake_llm" 0 60 5; then
    P_LLM=$SRV_PORT
    C_OA=$(conf openai ",\"brain\":{\"provider\":\"openai\",\"openai\":{\"base_url\":\"http://127.0.0.1:$P_LLM/v1\",\"model\":\"bench\",\"retries\":0}}")
    if start relay "$REFLEXOR" --config "$C_OA" --db :memory: "${RX_FLAGS[@]}"; then
        for rep in $(seq "$REPS"); do
            run relay relay "$SRV_PORT" "$RELAY_MSGS"
            run direct direct "$P_LLM" "$RELAY_MSGS"
        done
        [ -n "$(med relay p50_us)" ] && RELAY=openai
    fi
fi
stop_all

# ---- the table --------------------------------------------------------------

REV=$(git rev-parse --short HEAD 2>/dev/null || echo '?')
echo
echo "Reflexor benchmarks  (rev $REV, $(nproc) CPUs, $(date -u +%Y-%m-%dT%H:%MZ); each timed figure: median of $REPS runs, POST figures of $POST_REPS)"
echo
echo "1. Pure layer: one input on a live state of N messages (median ns per input)"
printf '   %8s %8s %10s %10s %9s %12s %12s %9s\n' "messages" "apply" "effects_at" "encode" "patch" "total:full" "total:patch" "state KB"
for n in 10 100 1000 10000; do
    printf '   %8s %8s %10s %10s %9s %12s %12s %9s\n' "$n" "$(f0 "$(med pure$n apply_ns)")" \
        "$(f0 "$(med pure$n effects_ns)")" "$(f0 "$(med pure$n encode_ns)")" \
        "$(f0 "$(med pure$n patch_ns)")" "$(f0 "$(med pure$n total_ns)")" \
        "$(f0 "$(med pure$n patch_total_ns)")" "$(f1 "$(calc "$(med pure$n state_bytes)/1024")")"
done
r() { calc "$(med pure10000 "$1") / $(med pure10 "$1")"; }
PURE_RATIO=$(r total_ns)
PATCH_RATIO=$(r patch_total_ns)
echo "   growth 10k/10: total:full $(f1 "$PURE_RATIO")x, total:patch $(f1 "$PATCH_RATIO")x (apply $(f1 "$(r apply_ns)")x, effects_at $(f1 "$(r effects_ns)")x, encode $(f1 "$(r encode_ns)")x, patch $(f1 "$(r patch_ns)")x)"
echo "   (apply = rx_machine_apply, effects_at = rx_effects_at, encode = rx_state_encode of the whole state"
echo "    (a state-updated event), patch = rx_patch_encode (a ?mode=patch event); total:full = apply +"
echo "    effects_at + encode, total:patch = apply + effects_at + patch; inputs alternate user messages"
echo "    and assistant answers, applied in a row on a state whose records were encoded once before)"
echo
echo "2. POST /moorex, keep-alive closed loop, ${SECS}s per run (user-send-message over $POOL sessions)"
printf '   %-34s %5s %9s %9s %9s %9s\n' "server" "conns" "req/s" "p50 us" "p99 us" "x bare"
label() {
    case $1 in
    bare) echo "bare libmicrohttpd (baseline)" ;;
    bare1) echo "  the same, one MHD thread" ;;
    noeff) echo "reflexor --no-effects" ;;
    brain) echo "reflexor, builtin brain answering" ;;
    store) echo "reflexor --no-effects --db FILE" ;;
    esac
}
for c in 10 100; do
    for v in bare bare1 noeff brain store; do
        if [ $v = store ] && [ $STORE = no ]; then
            printf '   %-34s %5s %s\n' "$(label store)" "$c" "n/a (store not integrated)"
            continue
        fi
        printf '   %-34s %5s %9s %9s %9s %9s\n' "$(label $v)" "$c" \
            "$(f0 "$(med post_${v}_$c rps)")" "$(f0 "$(med post_${v}_$c p50_us)")" \
            "$(f0 "$(med post_${v}_$c p99_us)")" \
            "$(f2 "$(calc "$(med post_${v}_$c rps) / $(med post_bare_$c rps)")")"
    done
done
echo "   (errors, all runs: $(awk '$1 ~ /^post_/ { for (i = 2; i <= NF; i++) if ($i ~ /^errors=/) { split($i, a, "="); e += a[2] } } END { print e + 0 }' "$RAW"))"
echo
echo "3. SSE fan-out: $FAN_SUBS subscribers on one session, $FAN_RATE POSTs/s for ${FAN_SECS}s (--no-effects: 2 events per POST)"
printf '   %-24s %13s %10s %8s %8s %11s %8s\n' "stream" "deliveries/s" "offered/s" "p50 ms" "p99 ms" "server CPU" "dropped"
for m in fanout fanout_patch; do
    printf '   %-24s %13s %10s %8s %8s %10s%% %8s\n' \
        "$([ $m = fanout ] && echo "whole states (default)" || echo "?mode=patch")" \
        "$(f0 "$(med $m deliveries_per_s)")" "$((FAN_RATE * 2 * FAN_SUBS))" \
        "$(f2 "$(med $m p50_ms)")" "$(f2 "$(med $m p99_ms)")" \
        "$(f0 "$(med $m cpu_pct)")" "$(f0 "$(med $m dropped)")"
done
echo "   (latency: POST written -> its input-received event read by a subscriber; CPU: utime+stime / wall, 100% = 1 core)"
echo
echo "   offered rates, $FAN_SUBS subscribers (fresh session each run; whole states grow with the run: POSTs/s x ${FAN_SECS}s messages)"
printf '   %8s %10s   %13s %9s %8s   %13s %9s %8s\n' "POSTs/s" "offered/s" "whole: deliv/s" "p99 ms" "dropped" "patch: deliv/s" "p99 ms" "dropped"
# sweep LABEL-PREFIX RATE KEY : the figure of one row (rate FAN_RATE is the runs above)
sweep() {
    if [ "$2" = "$FAN_RATE" ]; then
        med "$([ "$1" = whole ] && echo fanout || echo fanout_patch)" "$3"
    else
        med "sweep_$1_$2" "$3"
    fi
}
MAX_whole="" MAX_patch=""
for r in $FAN_RATES; do
    printf '   %8s %10s   %13s %9s %8s   %13s %9s %8s\n' "$r" "$((r * 2 * FAN_SUBS))" \
        "$(f0 "$(sweep whole "$r" deliveries_per_s)")" "$(f2 "$(sweep whole "$r" p99_ms)")" \
        "$(f0 "$(sweep whole "$r" dropped)")" \
        "$(f0 "$(sweep patch "$r" deliveries_per_s)")" "$(f2 "$(sweep patch "$r" p99_ms)")" \
        "$(f0 "$(sweep patch "$r" dropped)")"
    for m in whole patch; do
        p99=$(sweep $m "$r" p99_ms) got=$(sweep $m "$r" deliveries_per_s)
        # The highest offered rate delivered in full (>= 95%) with p99 < 20 ms.
        if [ -n "$p99" ] && [ -n "$got" ] && ! over "$p99" 19.999 &&
            ! over "$((r * 2 * FAN_SUBS * 95 / 100))" "$got"; then
            eval "MAX_$m=$((r * 2 * FAN_SUBS))"
        fi
    done
done
echo "   highest offered rate kept with p99 < 20 ms: whole states $(f0 "$MAX_whole")/s, ?mode=patch $(f0 "$MAX_patch")/s"
echo "   (a mode whose p99 passed 1 s at one rate is not run at higher rates: n/a)"
echo
echo "4. Memory (VmRSS)"
printf '   %-44s %12s %12s\n' "" "reflexor" "bare MHD"
printf '   %-44s %12s %12s\n' "idle server, KB" "$(f0 "$(med memory idle_kb)")" "$(f0 "$(med idle idle_kb)")"
printf '   %-44s %12s %12s\n' "per idle session, bytes ($MEM_SESSIONS sessions)" "$(f0 "$(med memory session_bytes)")" "-"
printf '   %-44s %12s %12s\n' "per open SSE stream, bytes ($MEM_STREAMS streams)" "$(f0 "$(med memory stream_bytes)")" "$(f0 "$(med idle conn_bytes)")"
echo "   (bare MHD column: an idle keep-alive connection after one POST, the floor under a stream)"
printf '   %-44s %12s\n' "one stream that never reads ($STUCK_KB KB state):" "reflexor"
printf '   %-44s %12s\n' "  peak RSS growth over $STUCK_INPUTS inputs, KB, worst" "$(f0 "$(worst stuck peak_growth_kb)")"
printf '   %-44s %12s\n' "  the same, median of the runs" "$(f0 "$(med stuck peak_growth_kb)")"
printf '   %-44s %12s\n' "  RSS growth left after it, KB, worst" "$(f0 "$(worst stuck end_growth_kb)")"
printf '   %-44s %12s\n' "  dropped (runs)" "$(awk '$1 == "stuck" { n++; if ($0 ~ / dropped=1/) d++ } END { printf "%d of %d", d, n }' "$RAW")"
printf '   %-44s %12s\n' "  the POSTs meanwhile, p99 us" "$(f0 "$(med stuck post_p99_us)")"
echo "   (growth over a baseline taken once a reader that keeps up saw two inputs; peak = VmHWM;"
echo "    the byte bound, limits.sse_queue_bytes, is $((QUEUE_BYTES / 1024)) KB)"
printf '   %-44s %12s\n' "GET /sessions/<sid> of $GET_MSGS messages:" "reflexor"
printf '   %-44s %12s\n' "  answer, KB" "$(f0 "$(calc "$(med getstate bytes) / 1024")")"
printf '   %-44s %12s\n' "  time, ms (median of $GET_REPS in a row)" "$(f1 "$(med getstate p50_ms)")"
printf '   %-44s %12s\n' "  peak RSS growth, KB" "$(f0 "$(med getstate peak_growth_kb)")"
printf '   %-44s %12s\n' "  RSS growth left after them, KB" "$(f0 "$(med getstate end_growth_kb)")"
echo "   (after a stream's first state filled the records' cached encodings)"
echo
echo "5. Token relay: fake LLM token -> /messages/<mid> subscriber (openai brain, 60 tokens 5 ms apart)"
printf '   %-44s %10s %10s %8s\n' "" "p50 us" "p99 us" "tokens"
if [ $RELAY = openai ]; then
    printf '   %-44s %10s %10s %8s\n' "through reflexor (curl, brain, session, SSE)" \
        "$(f0 "$(med relay p50_us)")" "$(f0 "$(med relay p99_us)")" "$(f0 "$(med relay tokens)")"
    printf '   %-44s %10s %10s %8s\n' "fake LLM read directly (baseline)" \
        "$(f0 "$(med direct p50_us)")" "$(f0 "$(med direct p99_us)")" "$(f0 "$(med direct tokens)")"
else
    echo "   n/a (the openai brain did not answer; see $LOGS/relay.err)"
fi
echo
echo "6. Durable store: see the '--db FILE' rows of 2$([ $STORE = no ] && echo ' (n/a: store not integrated; --db FILE wrote no file)')"
echo

G1=$(verdict "$PURE_RATIO <= 3")
G1p=$(verdict "$PATCH_RATIO <= 3")
G2a=$(calc "$(med post_noeff_10 rps) / $(med post_bare_10 rps)")
G2b=$(calc "$(med post_noeff_100 rps) / $(med post_bare_100 rps)")
G2=$(verdict "$G2a >= 0.7 && $G2b >= 0.7")
G2c=$(calc "$(med post_noeff_10 rps) / $(med post_bare1_10 rps)")
G2d=$(calc "$(med post_noeff_100 rps) / $(med post_bare1_100 rps)")
G3=$(verdict "$(med fanout deliveries_per_s) >= 50000 && $(med fanout p99_ms) < 20")
G3p=$(verdict "$(med fanout_patch deliveries_per_s) >= 50000 && $(med fanout_patch p99_ms) < 20")
G4=$(verdict "$(med memory stream_bytes) <= 40960")
G5=$(verdict "$(med memory session_bytes) <= 1024")
G6=$(verdict "$(worst stuck peak_growth_kb) <= 2 * $QUEUE_BYTES / 1024")
G7=$(verdict "$(med getstate peak_growth_kb) * 1024 <= 3 * $(med getstate bytes)")
echo "Goals"
printf '   %-7s %-58s %s\n' "$G1" "per-input cost at 10 000 msgs <= 3x at 10 (full state)" "$(f1 "$PURE_RATIO")x"
printf '   %-7s %-58s %s\n' "$G1p" "per-input cost at 10 000 msgs <= 3x at 10 (patch events)" "$(f1 "$PATCH_RATIO")x"
printf '   %-7s %-58s %s\n' "$G2" "POST --no-effects >= 0.7x bare rate (10 / 100 conns)" "$(f2 "$G2a")x / $(f2 "$G2b")x (one MHD thread: $(f2 "$G2c")x / $(f2 "$G2d")x)"
printf '   %-7s %-58s %s\n' "$G3" "1 000 subscribers: >= 50 000 deliveries/s, p99 < 20 ms" "$(f0 "$(med fanout deliveries_per_s)")/s, p99 $(f2 "$(med fanout p99_ms)") ms"
printf '   %-7s %-58s %s\n' "$G3p" "  the same with ?mode=patch streams" "$(f0 "$(med fanout_patch deliveries_per_s)")/s, p99 $(f2 "$(med fanout_patch p99_ms)") ms"
printf '   %-7s %-58s %s\n' "$G4" "idle SSE stream <= 40 KB" "$(f0 "$(calc "$(med memory stream_bytes)/1024")") KB"
printf '   %-7s %-58s %s\n' "$G5" "idle session <= 1 KB" "$(f2 "$(calc "$(med memory session_bytes)/1024")") KB"
printf '   %-7s %-58s %s\n' "$G6" "a stream that never reads: RSS growth <= 2x sse_queue_bytes" "worst $(f1 "$(calc "$(worst stuck peak_growth_kb)/1024")") MB of $((2 * QUEUE_BYTES >> 20)) MB"
printf '   %-7s %-58s %s\n' "$G7" "GET of a large state: peak RSS growth <= 3x the answer" "$(f1 "$(calc "$(med getstate peak_growth_kb) * 1024 / $(med getstate bytes)")")x, $(f1 "$(med getstate p50_ms)") ms"
echo
echo "figures: $JSON (raw runs: $RAW)"

# ---- results.json ---------------------------------------------------------------
num() { [ -n "$1" ] && echo "$1" || echo null; }
{
    echo "{"
    echo "  \"rev\": \"$REV\", \"cpus\": $(nproc), \"reps\": $REPS, \"secs\": $SECS,"
    echo "  \"pure\": ["
    sep=""
    for n in 10 100 1000 10000; do
        printf '%s    {"messages": %s, "apply_ns": %s, "effects_ns": %s, "encode_ns": %s, "patch_ns": %s, "total_ns": %s, "patch_total_ns": %s, "state_bytes": %s}' \
            "$sep" "$n" "$(num "$(med pure$n apply_ns)")" "$(num "$(med pure$n effects_ns)")" \
            "$(num "$(med pure$n encode_ns)")" "$(num "$(med pure$n patch_ns)")" \
            "$(num "$(med pure$n total_ns)")" "$(num "$(med pure$n patch_total_ns)")" \
            "$(num "$(med pure$n state_bytes)")"
        sep=$',\n'
    done
    echo
    echo "  ],"
    echo "  \"pure_growth_10k_over_10\": $(num "$PURE_RATIO"),"
    echo "  \"pure_patch_growth_10k_over_10\": $(num "$PATCH_RATIO"),"
    echo "  \"post\": ["
    sep=""
    for c in 10 100; do
        for v in bare bare1 noeff brain store; do
            [ $v = store ] && [ $STORE = no ] && continue
            printf '%s    {"server": "%s", "conns": %s, "rps": %s, "p50_us": %s, "p99_us": %s, "x_bare": %s}' \
                "$sep" "$v" "$c" "$(num "$(med post_${v}_$c rps)")" \
                "$(num "$(med post_${v}_$c p50_us)")" "$(num "$(med post_${v}_$c p99_us)")" \
                "$(num "$(calc "$(med post_${v}_$c rps) / $(med post_bare_$c rps)")")"
            sep=$',\n'
        done
    done
    echo
    echo "  ],"
    echo "  \"store\": $([ $STORE = yes ] && echo '"integrated"' || echo '"not integrated"'),"
    for m in fanout fanout_patch; do
        printf '  "%s": {"subscribers": %s, "posts_per_s": %s, "offered_per_s": %s, "deliveries_per_s": %s, "p50_ms": %s, "p99_ms": %s, "server_cpu_pct": %s, "dropped": %s},\n' \
            "$m" "$FAN_SUBS" "$FAN_RATE" "$((FAN_RATE * 2 * FAN_SUBS))" \
            "$(num "$(med $m deliveries_per_s)")" "$(num "$(med $m p50_ms)")" \
            "$(num "$(med $m p99_ms)")" "$(num "$(med $m cpu_pct)")" "$(num "$(med $m dropped)")"
    done
    echo "  \"fanout_rates\": ["
    sep=""
    for r in $FAN_RATES; do
        printf '%s    {"posts_per_s": %s, "offered_per_s": %s, "whole": {"deliveries_per_s": %s, "p99_ms": %s, "dropped": %s}, "patch": {"deliveries_per_s": %s, "p99_ms": %s, "dropped": %s}}' \
            "$sep" "$r" "$((r * 2 * FAN_SUBS))" \
            "$(num "$(sweep whole "$r" deliveries_per_s)")" "$(num "$(sweep whole "$r" p99_ms)")" \
            "$(num "$(sweep whole "$r" dropped)")" \
            "$(num "$(sweep patch "$r" deliveries_per_s)")" "$(num "$(sweep patch "$r" p99_ms)")" \
            "$(num "$(sweep patch "$r" dropped)")"
        sep=$',\n'
    done
    echo
    echo "  ],"
    printf '  "fanout_max_offered_p99_20ms": {"whole": %s, "patch": %s},\n' "$(num "$MAX_whole")" "$(num "$MAX_patch")"
    printf '  "memory": {"idle_kb": %s, "session_bytes": %s, "stream_bytes": %s, "bare_idle_kb": %s, "bare_conn_bytes": %s},\n' \
        "$(num "$(med memory idle_kb)")" "$(num "$(med memory session_bytes)")" \
        "$(num "$(med memory stream_bytes)")" "$(num "$(med idle idle_kb)")" "$(num "$(med idle conn_bytes)")"
    printf '  "stuck_stream": {"state_kb": %s, "inputs": %s, "queue_bytes": %s, "peak_growth_kb_worst": %s, "peak_growth_kb_median": %s, "end_growth_kb_worst": %s, "post_p99_us": %s, "dropped_runs": %s},\n' \
        "$STUCK_KB" "$STUCK_INPUTS" "$QUEUE_BYTES" "$(num "$(worst stuck peak_growth_kb)")" \
        "$(num "$(med stuck peak_growth_kb)")" "$(num "$(worst stuck end_growth_kb)")" \
        "$(num "$(med stuck post_p99_us)")" \
        "$(awk '$1 == "stuck" && / dropped=1/ { d++ } END { print d + 0 }' "$RAW")"
    printf '  "get_state": {"messages": %s, "bytes": %s, "p50_ms": %s, "peak_growth_kb": %s, "end_growth_kb": %s},\n' \
        "$GET_MSGS" "$(num "$(med getstate bytes)")" "$(num "$(med getstate p50_ms)")" \
        "$(num "$(med getstate peak_growth_kb)")" "$(num "$(med getstate end_growth_kb)")"
    printf '  "relay": {"brain": "%s", "p50_us": %s, "p99_us": %s, "direct_p50_us": %s, "direct_p99_us": %s},\n' \
        "$RELAY" "$(num "$(med relay p50_us)")" "$(num "$(med relay p99_us)")" \
        "$(num "$(med direct p50_us)")" "$(num "$(med direct p99_us)")"
    printf '  "goals": {"pure_growth": "%s", "pure_patch_growth": "%s", "post_vs_bare": "%s", "fanout": "%s", "fanout_patch": "%s", "stream_memory": "%s", "session_memory": "%s", "stuck_stream_memory": "%s", "get_state_memory": "%s"}\n' \
        "$G1" "$G1p" "$G2" "$G3" "$G3p" "$G4" "$G5" "$G6" "$G7"
    echo "}"
} >"$JSON"
