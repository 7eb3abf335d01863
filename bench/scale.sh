#!/usr/bin/env bash
# bench/scale.sh - sessions beyond memory (SPEC 6.2, issue 29), run by
# `make bench-scale` and `make bench`.
#
# For each N of SCALE_NS (default "10000 100000 1000000"): a SQLite store of N
# finished chats of about 20 messages (build/bench/scale_fill: through the
# store API, fsync off, one chat in 1000 holding the word "zephyrquartz"),
# then the real server on it (fsync off, limits.resident_sessions 1000,
# limits.resident_bytes 64 MiB, the builtin brain with the shipped pacing),
# measured with build/bench/scale_probe on one keep-alive connection:
#   listen      exec to the "listening" line (polled every 5 ms)
#   idle RSS    VmRSS 1 s after that, nothing asked yet
#   touch       GET /sessions/<id> of TOUCH random sessions, each once (cold)
#   list        GET /sessions?limit=50, 20 times (first and median)
#   search      GET /sessions?q=zephyrquartz&limit=50, 20 times
#   sweep       min(N, SWEEP) touches one after another over consecutive
#               sessions, the server's VmRSS sampled every 256
#   hot loop    bench-loop's figure (loadgen postto, 10 connections, one
#               fresh session, the full loop) on this server, against the same
#               on a server with the same config on an empty store (the goal:
#               what N stored sessions cost the hot path) and on bench-loop's
#               own server (--db :memory:: that ratio also holds what the
#               store costs every input), both started once here; medians of
#               REPS interleaved runs
# Goals (SPEC 6.2), judged at the largest N: listen <= 1 s; idle RSS <= 64
# MB; touch p50 <= 2 ms, p99 <= 20 ms; list <= 5 ms and search <= 50 ms
# (median); sweep peak RSS <= resident_bytes + 64 MB; hot loop >= 0.95 of
# the empty store's. A missed goal is reported, never a failure. Figures in
# $B/bench/scale.json, raw lines in scale-raw.txt, one table on stdout.
#
# The stores go to SCALE_DIR (default $B/bench/scale; about 17 KB a chat on
# disk, so 1 000 000 take some 17 GB: an N the disk cannot hold is skipped,
# saying so) and are removed afterwards unless SCALE_KEEP=1; SCALE_REUSE=1
# serves a store left by an earlier SCALE_KEEP=1 run instead of filling
# again (its figures then include what that run wrote). SCALE_BEFORE=1 starts
# the server without the resident limits (and limits.max_sessions raised), so
# a binary from before issue 29 can be measured the same way. BENCH_QUICK=1:
# SCALE_NS 10000, 200 touches, a sweep of 5000, one 1 s hot run. Every
# process it starts is stopped by pid, on success, failure or Ctrl-C.
set -u

B=${BENCH_BUILD:-build}
OUT=$B/bench
LOGS=$OUT/logs
RAW=$OUT/scale-raw.txt
JSON=$OUT/scale.json
LG=$B/bench/loadgen
FILL=$B/bench/scale_fill
PROBE=$B/bench/scale_probe
REFLEXOR=$B/reflexor
DIR=${SCALE_DIR:-$OUT/scale}
if [ "${BENCH_QUICK:-0}" = 1 ]; then
    NS=${SCALE_NS:-10000} TOUCH=200 SWEEP=5000 SECS=1 REPS=1
else
    NS=${SCALE_NS:-"10000 100000 1000000"} TOUCH=${TOUCH:-1000} SWEEP=${SWEEP:-100000}
    SECS=${SECS:-3} REPS=${REPS:-3}
fi
WORD=zephyrquartz
RESIDENT=1000
RBYTES=$((64 << 20))
KB_PER_CHAT=20 # a little over what a chat takes on disk, to check room first

. "$(dirname "$0")/lib.sh"

mkdir -p "$DIR"
for bin in "$FILL" "$PROBE" "$LG" "$REFLEXOR"; do
    [ -x "$bin" ] || { echo "bench: scale: $bin is missing (make bench-scale builds it)" >&2; exit 1; }
done

# The shipped pacing of the builtin brain, as bench/loop.sh takes it.
BUILTIN=$(awk '/"builtin"[ \t]*:[ \t]*\{/ { f = 1; sub(/.*"builtin"[ \t]*:[ \t]*\{/, "") }
    f { s = s $0 } f && /\}/ { sub(/\}.*/, "", s); print s; exit }' config/reflexor.json | tr -d " \t")
SCALE_CONF=$OUT/scale-server.json
if [ "${SCALE_BEFORE:-0}" = 1 ]; then # a server from before issue 29: no resident limits
    LIMITS='"max_sessions":2000000'
else
    LIMITS=$(printf '"resident_sessions":%d,"resident_bytes":%d' "$RESIDENT" "$RBYTES")
fi
printf '{"web_root":"/nonexistent","limits":{"max_connections":4096,"session_queue_max":1024,%s},"store":{"fsync":false},"brain":{"provider":"builtin","builtin":{%s}}}\n' \
    "$LIMITS" "$BUILTIN" >"$SCALE_CONF"
LOOP_CONF=$OUT/scale-loop.json
printf '{"web_root":"/nonexistent","limits":{"max_connections":4096,"max_sessions":100000,"session_queue_max":1024},"brain":{"provider":"builtin","builtin":{%s}}}\n' \
    "$BUILTIN" >"$LOOP_CONF"

# rec LABEL CMD... : one measuring command, its key=value line kept under LABEL.
rec() {
    local label=$1 line
    shift
    if line=$("$@" 2>>"$LOGS/scale-probe.err"); then
        echo "$label $line" >>"$RAW"
        echo "  $label $line" >&2
    else
        echo "bench: scale: $* failed (see $LOGS/scale-probe.err)" >&2
    fi
}

# timed_start NAME CMD... : start as lib.sh's start, polling every 5 ms, and
# keep the time from exec to the port's line in START_MS.
timed_start() {
    local name=$1 t0 i
    shift
    t0=$(date +%s%N)
    (exec "$@" >"$LOGS/$name.out" 2>"$LOGS/$name.err") &
    SRV_PID=$!
    PIDS+=("$SRV_PID")
    SRV_PORT=
    for i in $(seq 120000); do
        SRV_PORT=$(grep -o '127\.0\.0\.1:[0-9]*' "$LOGS/$name.out" 2>/dev/null | head -1 | cut -d: -f2)
        if [ -n "$SRV_PORT" ]; then
            START_MS=$((($(date +%s%N) - t0) / 1000000))
            return 0
        fi
        kill -0 "$SRV_PID" 2>/dev/null || break
        sleep 0.005
    done
    echo "bench: $name did not start (a server without issue 29 refuses its config); see $LOGS/$name.err:" >&2
    tail -2 "$LOGS/$name.err" >&2
    return 1
}

rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null; }

start loop-base "$REFLEXOR" --config "$LOOP_CONF" --db :memory: --listen 127.0.0.1:0 --log-level warn || exit 1
P_LOOP=$SRV_PORT
EMPTY=$DIR/scale-empty.db
rm -f "$EMPTY" "$EMPTY-wal" "$EMPTY-shm"
timed_start scale-empty "$REFLEXOR" --config "$SCALE_CONF" --db "$EMPTY" --listen 127.0.0.1:0 --log-level warn || exit 1
P_EMPTY=$SRV_PORT
echo "start_0 listen_ms=$START_MS idle_rss_kb=$(rss_kb "$SRV_PID")" >>"$RAW"

DONE="" FAILED=0
for n in $NS; do
    db=$DIR/scale-$n.db ids=$DIR/scale-$n.ids
    if [ "${SCALE_REUSE:-0}" = 1 ] && [ -s "$db" ] && [ -s "$ids" ]; then
        echo "bench: scale: $n sessions: reusing $db" >&2
    else
        rm -f "$db" "$db-wal" "$db-shm" "$ids"
        free_kb=$(df -Pk "$DIR" | awk 'NR == 2 { print $4 }')
        if [ "$((n * KB_PER_CHAT))" -gt "${free_kb:-0}" ]; then
            echo "bench: scale: $n sessions skipped: $((n * KB_PER_CHAT >> 20)) GB needed, $((free_kb >> 20)) GB free in $DIR" >&2
            continue
        fi
        echo "bench: scale: filling $n sessions of 20 messages into $db..." >&2
        rec "fill_$n" "$FILL" --db "$db" --sessions "$n" --messages 20 --word "$WORD" \
            --every 1000 --ids "$ids"
        grep -q "^fill_$n " "$RAW" || { echo "bench: scale: the fill of $n failed" >&2; FAILED=1; continue; }
    fi
    # In MB: awk keeps six digits of a number, too few for the bytes of a big store.
    echo "db_$n mb=$((($(stat -c %s "$db") + $(stat -c %s "$db-wal" 2>/dev/null || echo 0)) >> 20))" >>"$RAW"

    if ! timed_start "scale-$n" "$REFLEXOR" --config "$SCALE_CONF" --db "$db" --listen 127.0.0.1:0 --log-level warn; then
        FAILED=1
        continue
    fi
    pid=$SRV_PID port=$SRV_PORT
    sleep 1
    echo "start_$n listen_ms=$START_MS idle_rss_kb=$(rss_kb "$pid")" >>"$RAW"
    echo "  start_$n listen_ms=$START_MS idle_rss_kb=$(rss_kb "$pid")" >&2
    rec "touch_$n" "$PROBE" touch "$port" "$ids" "$TOUCH" 7
    rec "list_$n" "$PROBE" get "$port" "/sessions?limit=50" 20
    rec "search_$n" "$PROBE" get "$port" "/sessions?q=$WORD&limit=50" 20
    rec "sweep_$n" "$PROBE" sweep "$port" "$pid" "$ids" "$((n < SWEEP ? n : SWEEP))" 11
    for rep in $(seq "$REPS"); do
        sid=$("$LG" session "$port" 2>>"$LOGS/scale-probe.err" | sed -n 's/^session id=//p')
        [ -n "$sid" ] && rec "hot_$n" "$LG" postto "$port" 10 "$SECS" "$sid"
        sid=$("$LG" session "$P_EMPTY" 2>>"$LOGS/scale-probe.err" | sed -n 's/^session id=//p')
        [ -n "$sid" ] && rec "empty_$n" "$LG" postto "$P_EMPTY" 10 "$SECS" "$sid"
        sid=$("$LG" session "$P_LOOP" 2>>"$LOGS/scale-probe.err" | sed -n 's/^session id=//p')
        [ -n "$sid" ] && rec "loop_$n" "$LG" postto "$P_LOOP" 10 "$SECS" "$sid"
        sleep 0.5 # the last answers end before the next figure
    done
    stop "$pid"
    [ "${SCALE_KEEP:-0}" = 1 ] || rm -f "$db" "$db-wal" "$db-shm" "$ids"
    DONE="$DONE $n"
done
stop_all
rm -f "$EMPTY" "$EMPTY-wal" "$EMPTY-shm"

# ---- the table and the figures ------------------------------------------------------
REV=$(git rev-parse --short HEAD 2>/dev/null || echo '?')
ratio() { calc "$(med "hot_$1" rps) / $(med "empty_$1" rps)"; }
ratio_loop() { calc "$(med "hot_$1" rps) / $(med "loop_$1" rps)"; }
mb() { [ -n "$1" ] && calc "$1 / 1024"; }
echo
echo "Sessions beyond memory  (rev $REV$(git diff --quiet 2>/dev/null || echo '+changes'), $(nproc) CPUs, $(date -u +%Y-%m-%dT%H:%MZ))"
echo "  SQLite, fsync off; resident_sessions $RESIDENT, resident_bytes $((RBYTES >> 20)) MiB; builtin brain {$BUILTIN}"
echo
printf '  %-10s %9s %9s %8s %8s %8s %8s %8s %9s %9s %7s %7s\n' "sessions" "fill/s" "listen ms" "idle MB" \
    "touch50" "touch99" "list ms" "srch ms" "sweep MB" "sweep/s" "hot x" "x loop"
for n in $DONE; do
    printf '  %-10s %9s %9s %8s %8s %8s %8s %8s %9s %9s %7s %7s\n' "$n" \
        "$(f0 "$(med "fill_$n" sessions_per_s)")" "$(f0 "$(med "start_$n" listen_ms)")" \
        "$(f1 "$(mb "$(med "start_$n" idle_rss_kb)")")" "$(f2 "$(med "touch_$n" p50_ms)")" \
        "$(f2 "$(med "touch_$n" p99_ms)")" "$(f2 "$(med "list_$n" p50_ms)")" \
        "$(f2 "$(med "search_$n" p50_ms)")" "$(f1 "$(mb "$(med "sweep_$n" rss_max_kb)")")" \
        "$(f0 "$(med "sweep_$n" per_s)")" "$(f2 "$(ratio "$n")")" "$(f2 "$(ratio_loop "$n")")"
done
echo "  (hot x: the hot loop's req/s over the same on an empty store; x loop: over bench-loop's"
echo "   server on --db :memory:, which pays no store. Empty store: listening in $(f0 "$(med start_0 listen_ms)") ms, $(f1 "$(mb "$(med start_0 idle_rss_kb)")") MB idle)"
L=$(echo "$DONE" | awk '{ print $NF }')
LIMIT_KB=$(((RBYTES >> 10) + 65536))
if [ -n "$L" ]; then
    G_LISTEN=$(verdict "$(med "start_$L" listen_ms) <= 1000")
    G_RSS=$(verdict "$(med "start_$L" idle_rss_kb) <= 65536")
    G_TOUCH=$(verdict "$(med "touch_$L" p50_ms) <= 2 && $(med "touch_$L" p99_ms) <= 20")
    G_LIST=$(verdict "$(med "list_$L" p50_ms) <= 5")
    G_SEARCH=$(verdict "$(med "search_$L" p50_ms) <= 50")
    G_SWEEP=$(verdict "$(med "sweep_$L" rss_max_kb) <= $LIMIT_KB")
    G_HOT=$(verdict "$(ratio "$L") >= 0.95")
    echo
    echo "Goals at $L stored sessions (SPEC 6.2)"
    printf '   %-7s %s\n' "$G_LISTEN" "start-up to listening <= 1 s: $(f0 "$(med "start_$L" listen_ms)") ms" \
        "$G_RSS" "idle RSS <= 64 MB: $(f1 "$(mb "$(med "start_$L" idle_rss_kb)")") MB" \
        "$G_TOUCH" "first touch p50 <= 2 ms, p99 <= 20 ms: $(f2 "$(med "touch_$L" p50_ms)") / $(f2 "$(med "touch_$L" p99_ms)") ms" \
        "$G_LIST" "list's first page <= 5 ms: $(f2 "$(med "list_$L" p50_ms)") ms (first asked $(f2 "$(med "list_$L" first_ms)"))" \
        "$G_SEARCH" "a search <= 50 ms: $(f2 "$(med "search_$L" p50_ms)") ms (first asked $(f2 "$(med "search_$L" first_ms)"))" \
        "$G_SWEEP" "sweep of $(med "sweep_$L" n) touches: peak RSS <= resident_bytes + 64 MB: $(f1 "$(mb "$(med "sweep_$L" rss_max_kb)")") of $((LIMIT_KB >> 10)) MB" \
        "$G_HOT" "hot loop >= 0.95x an empty store's: $(f2 "$(ratio "$L")")x ($(f0 "$(med "hot_$L" rps)") / $(f0 "$(med "empty_$L" rps)") req/s; bench-loop's :memory: $(f0 "$(med "loop_$L" rps)"), $(f2 "$(ratio_loop "$L")")x)"
fi
echo
echo "figures: $JSON (raw runs: $RAW)"

num() { [ -n "$1" ] && echo "$1" || echo null; }
{
    echo "{"
    echo "  \"rev\": \"$REV\", \"cpus\": $(nproc), \"resident_sessions\": $RESIDENT, \"resident_bytes\": $RBYTES,"
    echo "  \"touches\": $TOUCH, \"sweep\": $SWEEP, \"hot_secs\": $SECS, \"hot_reps\": $REPS,"
    echo "  \"empty_store\": {\"listen_ms\": $(num "$(med start_0 listen_ms)"), \"idle_rss_kb\": $(num "$(med start_0 idle_rss_kb)")},"
    echo "  \"runs\": ["
    sep=""
    for n in $DONE; do
        printf '%s    {"sessions": %s, "fill_seconds": %s, "fill_sessions_per_s": %s, "db_mb": %s, "listen_ms": %s, "idle_rss_kb": %s, "touch_p50_ms": %s, "touch_p99_ms": %s, "touch_max_ms": %s, "list_first_ms": %s, "list_p50_ms": %s, "search_first_ms": %s, "search_p50_ms": %s, "sweep_touches": %s, "sweep_per_s": %s, "sweep_rss_max_kb": %s, "sweep_rss_end_kb": %s, "hot_rps": %s, "empty_rps": %s, "loop_rps": %s, "hot_over_empty": %s, "hot_over_loop": %s, "errors": %s}' \
            "$sep" "$n" "$(num "$(med "fill_$n" seconds)")" "$(num "$(med "fill_$n" sessions_per_s)")" \
            "$(num "$(med "db_$n" mb)")" "$(num "$(med "start_$n" listen_ms)")" \
            "$(num "$(med "start_$n" idle_rss_kb)")" "$(num "$(med "touch_$n" p50_ms)")" \
            "$(num "$(med "touch_$n" p99_ms)")" "$(num "$(med "touch_$n" max_ms)")" \
            "$(num "$(med "list_$n" first_ms)")" "$(num "$(med "list_$n" p50_ms)")" \
            "$(num "$(med "search_$n" first_ms)")" "$(num "$(med "search_$n" p50_ms)")" \
            "$(num "$(med "sweep_$n" n)")" "$(num "$(med "sweep_$n" per_s)")" \
            "$(num "$(med "sweep_$n" rss_max_kb)")" "$(num "$(med "sweep_$n" rss_end_kb)")" \
            "$(num "$(med "hot_$n" rps)")" "$(num "$(med "empty_$n" rps)")" "$(num "$(med "loop_$n" rps)")" \
            "$(num "$(ratio "$n")")" "$(num "$(ratio_loop "$n")")" \
            "$(awk -v n="$n" '$1 ~ "_" n "$" { for (i = 2; i <= NF; i++) if ($i ~ /^errors=/) { split($i, a, "="); e += a[2] } } END { print e + 0 }' "$RAW")"
        sep=$',\n'
    done
    echo
    echo "  ],"
    printf '  "goals_at": %s, "goals": {"listen": "%s", "idle_rss": "%s", "touch": "%s", "list": "%s", "search": "%s", "sweep_rss": "%s", "hot_loop": "%s"}\n' \
        "$(num "$L")" "${G_LISTEN:-n/a}" "${G_RSS:-n/a}" "${G_TOUCH:-n/a}" "${G_LIST:-n/a}" \
        "${G_SEARCH:-n/a}" "${G_SWEEP:-n/a}" "${G_HOT:-n/a}"
    echo "}"
} >"$JSON"
# A figure never fails the run; a store not filled or a server not started does.
exit "$FAILED"
