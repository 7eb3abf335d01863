#!/usr/bin/env bash
# bench/durable.sh - the durable store under load (issue 13, items 2 and 3).
#
#   BENCH_BUILD=build/x bench/durable.sh      (REFLEXOR=path picks another binary)
#
# Figures, each the median of REPS runs of SECS seconds, the runs of the
# variants interleaved so a noisy shared machine hits them alike:
#   - POST (--no-effects) at 100 connections over 100 sessions, on a file
#     with fsync at every commit (the default) and on --db :memory:: goal
#     durable >= 0.3x memory (group commit: one fsync for many sessions);
#   - the same at 10 connections on one session: goal >= 0.15x (one session's
#     inputs share commits too, and its lock is not held across the fsync);
#   - POST p99 of one session while another session's ~100 MB log is paged
#     through (GET .../history?after=&limit=1000) in a loop: goal <= 50 ms
#     (a long read does not stall other sessions' writes), beside the same
#     p99 with no reader.
# Servers start on 127.0.0.1 port 0 (the port read from their first line) and
# are stopped by pid on success, failure or Ctrl-C. One table on stdout; raw
# generator lines in $OUT/raw.txt, server logs in $OUT/logs/. Benchmarks
# measure: a missed goal is reported, never a failure. BENCH_QUICK=1: 1 run
# of 1 s and a ~20 MB log.
set -u

B=${BENCH_BUILD:-build}
RX=${REFLEXOR:-$B/reflexor}
LG=$B/bench/loadgen
OUT=$B/bench/durable
LOGS=$OUT/logs
RAW=$OUT/raw.txt
API=/api/reflexor
if [ "${BENCH_QUICK:-0}" = 1 ]; then
    SECS=1 REPS=1 LOG_INPUTS=2000
else
    SECS=3 REPS=3 LOG_INPUTS=10000
fi
INPUT_BYTES=10000 # text per logged input: LOG_INPUTS x ~10 KB = the log
PAGE=1000         # history page size (the route's default)
HIST_CONNS=4      # POST connections of the session measured beside the reader

for f in "$RX" "$LG"; do
    [ -x "$f" ] || { echo "durable: $f is missing (make BUILD_ROOT=... all bench-tools)" >&2; exit 1; }
done
command -v curl >/dev/null || { echo "durable: curl is needed" >&2; exit 1; }

rm -rf "$OUT"
. "$(dirname "$0")/lib.sh"






RX_FLAGS=(--no-effects --listen 127.0.0.1:0 --log-level warn)
C_PLAIN=$(conf plain '')

# ---- POST: group commit -----------------------------------------------------
echo "durable: POST, fsync vs :memory: ($REPS x ${SECS}s per figure)..." >&2
DB=$OUT/post.db
start mem "$RX" --config "$C_PLAIN" --db :memory: "${RX_FLAGS[@]}" || exit 1
P_MEM=$SRV_PORT
start dur "$RX" --config "$C_PLAIN" --db "$DB" "${RX_FLAGS[@]}" || exit 1
P_DUR=$SRV_PORT
for rep in $(seq "$REPS"); do
    run mem_100 post "$P_MEM" 100 "$SECS" 100
    run dur_100 post "$P_DUR" 100 "$SECS" 100
    run mem_1 post "$P_MEM" 10 "$SECS" 1
    run dur_1 post "$P_DUR" 10 "$SECS" 1
done
stop_all
rm -f "$DB" "$DB"-*

# ---- history: a long read beside another session's writes --------------------
echo "durable: filling a log of $LOG_INPUTS inputs of ${INPUT_BYTES} bytes..." >&2
DB=$OUT/history.db
# No snapshots while filling or reading: they would encode the whole ~100 MB
# state every 200 inputs, which is not what this measures.
C_FILL=$(conf fill ',"store":{"fsync":false,"snapshot_every":1000000}')
C_READ=$(conf read ',"store":{"snapshot_every":1000000}')
HSID=
if start fill "$RX" --config "$C_FILL" --db "$DB" "${RX_FLAGS[@]}"; then
    BASE=http://127.0.0.1:$SRV_PORT$API
    HSID=$(curl -s -X POST "$BASE/sessions" | sed -n 's/.*"id":"\([^"]*\)".*/\1/p')
    {
        printf '{"type":"user-send-message","content":"'
        head -c "$INPUT_BYTES" /dev/zero | tr '\0' x
        printf '"}'
    } >"$OUT/body.json"
    {
        # `next` only between transfers: one after the last is an empty
        # transfer, which fails and aborts the ones still running.
        for i in $(seq "$LOG_INPUTS"); do
            [ "$i" = 1 ] || echo next
            printf 'url = "%s/sessions/%s/moorex"\nheader = "Content-Type: application/json"\n' \
                "$BASE" "$HSID"
            printf 'data-binary = "@%s"\noutput = "/dev/null"\nwrite-out = "%%{http_code}\\n"\n' \
                "$OUT/body.json"
        done
    } >"$OUT/fill.curl"
    curl -s --parallel --parallel-max 8 -K "$OUT/fill.curl" >"$OUT/fill.codes" 2>>"$LOGS/curl.err"
    FILLED=$(grep -c '^200$' "$OUT/fill.codes")
    stop "$SRV_PID"
    [ "$FILLED" = "$LOG_INPUTS" ] || echo "durable: only $FILLED of $LOG_INPUTS inputs stored" >&2
else
    HSID=
fi
# The log's size: the inputs' text as stored (the file also holds free pages).
LOG_MB=$(calc "${FILLED:-0} * ($INPUT_BYTES + 100) / 1048576")

# reader URL SECONDS : page through the whole history again and again; prints
# "bytes=.. pages=.. passes=.. secs=.." when the time is up.
reader() {
    local url=$1 until=$(($(date +%s%N) + $2 * 1000000000)) after=0 bytes=0 pages=0 passes=0
    local t0 n got
    t0=$(date +%s%N)
    while [ "$(date +%s%N)" -lt "$until" ]; do
        got=$(curl -s -o /dev/null -w '%{http_code} %{size_download}' "$url?after=$after&limit=$PAGE")
        n=${got#* }
        [ "${got%% *}" = 200 ] || { echo "reader: HTTP ${got%% *}" >&2; break; }
        bytes=$((bytes + n)) pages=$((pages + 1))
        if [ "$n" -le 2 ]; then # "[]": the end; start again
            after=0 passes=$((passes + 1))
        else
            after=$((after + PAGE))
        fi
    done
    echo "bytes=$bytes pages=$pages passes=$passes secs=$(calc "($(date +%s%N) - $t0) / 1e9")"
}

if [ -n "$HSID" ] && start read "$RX" --config "$C_READ" --db "$DB" "${RX_FLAGS[@]}"; then
    echo "durable: POST p99 beside history reads ($REPS x ${SECS}s)..." >&2
    HURL=http://127.0.0.1:$SRV_PORT$API/sessions/$HSID/history
    for rep in $(seq "$REPS"); do
        run hist_idle post "$SRV_PORT" "$HIST_CONNS" "$SECS" 1
        reader "$HURL" $((SECS + 2)) >"$OUT/reader.$rep" &
        RPID=$!
        PIDS+=("$RPID")
        sleep 0.3 # the reader is well into the log when the timed POSTs start
        run hist_read post "$SRV_PORT" "$HIST_CONNS" "$SECS" 1
        wait "$RPID"
        stop "$RPID"
        echo "reader $(cat "$OUT/reader.$rep")" >>"$RAW"
    done
    stop_all
fi
rm -f "$DB" "$DB"-*

# ---- the table --------------------------------------------------------------
ms() { [ -n "$1" ] && calc "$1 / 1000"; }

R100=$(calc "$(med dur_100 rps) / $(med mem_100 rps)")
R1=$(calc "$(med dur_1 rps) / $(med mem_1 rps)")
P99R=$(ms "$(med hist_read p99_us)")
P99I=$(ms "$(med hist_idle p99_us)")
RMBS=$(calc "$(med reader bytes) / $(med reader secs) / 1048576")
REV=$(git rev-parse --short HEAD 2>/dev/null || echo '?')

echo
echo "Durable store  ($RX, rev $REV, $(nproc) CPUs, $(date -u +%Y-%m-%dT%H:%MZ); medians of $REPS interleaved runs of ${SECS}s)"
printf '%-58s %12s %10s %s\n' "figure" "value" "goal" "verdict"
row() { printf '%-58s %12s %10s %s\n' "$1" "$2" "$3" "$4"; }
row "POST 100 conns / 100 sessions, --db :memory:, req/s" "$(f0 "$(med mem_100 rps)")" "" ""
row "POST 100 conns / 100 sessions, --db FILE fsync, req/s" "$(f0 "$(med dur_100 rps)")" "" ""
row "  fsync / :memory:" "$(f2 "$R100")x" ">= 0.30x" "$(verdict "$R100 >= 0.3")"
row "  p99 ms :memory: / fsync" "$(f1 "$(ms "$(med mem_100 p99_us)")") / $(f1 "$(ms "$(med dur_100 p99_us)")")" "" ""
row "POST 10 conns / 1 session, --db :memory:, req/s" "$(f0 "$(med mem_1 rps)")" "" ""
row "POST 10 conns / 1 session, --db FILE fsync, req/s" "$(f0 "$(med dur_1 rps)")" "" ""
row "  fsync / :memory:" "$(f2 "$R1")x" ">= 0.15x" "$(verdict "$R1 >= 0.15")"
row "  p99 ms :memory: / fsync" "$(f1 "$(ms "$(med mem_1 p99_us)")") / $(f1 "$(ms "$(med dur_1 p99_us)")")" "" ""
row "POST p99 ms, $HIST_CONNS conns / 1 session, no reader" "$(f1 "$P99I")" "" ""
row "POST p99 ms, the same while a $(f0 "$LOG_MB") MB log is paged through" "$(f1 "$P99R")" "<= 50" "$(verdict "$P99R <= 50")"
row "  history read, MB/s (pages of $PAGE, ${INPUT_BYTES} B inputs)" "$(f0 "$RMBS")" "" ""
echo "  (errors, all POST runs: $(awk '$1 !~ /^reader/ { for (i = 2; i <= NF; i++) if ($i ~ /^errors=/) { split($i, a, "="); e += a[2] } } END { print e + 0 }' "$RAW"))"
