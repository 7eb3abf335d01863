#!/usr/bin/env bash
# bench/durable_text.sh - what durable streamed text costs (SPEC 3.7, issue 31).
#
# Two servers on 127.0.0.1, each on a database file of its own in a fresh
# directory (durable text needs a log), with the same config (the builtin
# brain with the default pacing of config/reflexor.json): "on" as shipped,
# "off" with REFLEXOR_DURABLE_TEXT=0 (no batches of streamed text: the
# baseline, today's behaviour). Same run, interleaved, REPS times:
#   loop   the real loop: CONNS closed-loop connections POST user messages
#          round-robin over SESSIONS sessions (loadgen post), every one
#          answered by the brain, for SECS seconds; goal on/off >= 0.95;
#   bytes  on the "on" server: ANSWERS sessions asked a question whose echo
#          is ~4 KB, all at once; the streamed text handed to the store
#          (reflexor_stream_text_bytes_total and _batches_total, /metrics)
#          against the answers' length; goal <= 1.2x the text plus a fixed
#          cost per batch (a row: session id, message id, offset; ~100 bytes);
#   resume a server killed with SIGKILL mid-answer and started again on its
#          database (bench/resume_probe.py): the milliseconds from its exec to
#          listening and to the first continued token on /messages.
# A missed goal is reported, never a failure. BENCH_QUICK=1: 1 run of 1 s.
set -u

B=${BENCH_BUILD:-build}
OUT=$B/bench
LOGS=$OUT/logs
RAW=$OUT/durable-text-raw.txt
LG=$B/bench/loadgen
REFLEXOR=$B/reflexor
if [ "${BENCH_QUICK:-0}" = 1 ]; then
    SECS=1 REPS=1
else
    SECS=${SECS:-3} REPS=${REPS:-3}
fi
CONNS=${CONNS:-10} SESSIONS=${SESSIONS:-50} ANSWERS=${ANSWERS:-20}
ROW_COST=100 # bytes a batch's row costs beside its text (keys, offset, b-tree)

. "$(dirname "$0")/lib.sh"

DIR=$(mktemp -d /tmp/rx-bench-dt-XXXXXX)
trap 'stop_all; rm -rf "$DIR"' EXIT

BUILTIN=$(awk '/"builtin"[ \t]*:[ \t]*\{/ { f = 1; sub(/.*"builtin"[ \t]*:[ \t]*\{/, "") }
    f { s = s $0 } f && /\}/ { sub(/\}.*/, "", s); print s; exit }' config/reflexor.json | tr -d " \t")
CONF=$(conf durable-text ",\"brain\":{\"provider\":\"builtin\",\"builtin\":{$BUILTIN}}")

start dt-on "$REFLEXOR" --config "$CONF" --db "$DIR/on.db" --listen 127.0.0.1:0 \
    --log-level warn || exit 1
P_ON=$SRV_PORT
start dt-off env REFLEXOR_DURABLE_TEXT=0 "$REFLEXOR" --config "$CONF" --db "$DIR/off.db" \
    --listen 127.0.0.1:0 --log-level warn || exit 1
P_OFF=$SRV_PORT

echo "bench: durable text on vs off (builtin {$BUILTIN}), $REPS x ${SECS}s," \
    "$CONNS conns over $SESSIONS sessions" >&2
for rep in $(seq "$REPS"); do
    run off post "$P_OFF" "$CONNS" "$SECS" "$SESSIONS"
    sleep 0.5
    run on post "$P_ON" "$CONNS" "$SECS" "$SESSIONS"
    sleep 0.5
    echo "  rep $rep: off $(med off rps) req/s, on $(med on rps) req/s (medians so far)" >&2
done

# ---- bytes per answer ----------------------------------------------------------
metric() { # metric PORT NAME
    curl -s "http://127.0.0.1:$1/metrics" | awk -v n="$2" '$1 == n { print $2 }'
}
wchar() { # wchar PID: bytes the process wrote (write(2) and friends), /proc/PID/io
    awk '$1 == "wchar:" { print $2 }' "/proc/$1/io" 2>/dev/null
}
Q=$(awk 'BEGIN { for (i = 0; i < 500; i++) printf "word%03d ", i }')
# answers NAME PORT PID: ANSWERS sessions asked Q at once, waited for; sets
# TEXT (bytes of the answers), BYTES and BATCHES (streamed text handed to the
# store) and WROTE (what the process wrote meanwhile: the WAL, the log).
answers() {
    local port=$2 pid=$3 sid i t c len b0 n0 w0
    local sids=() asks=()
    sleep 2 # what ran before ends
    b0=$(metric "$port" reflexor_stream_text_bytes_total)
    n0=$(metric "$port" reflexor_stream_text_batches_total)
    w0=$(wchar "$pid")
    for i in $(seq "$ANSWERS"); do
        sid=$("$LG" session "$port" 2>>"$LOGS/loadgen.err" | sed -n 's/^session id=//p')
        sids+=("$sid")
        curl -s -o /dev/null -H 'Content-Type: application/json' \
            -d "{\"type\":\"user-send-message\",\"content\":\"$Q\"}" \
            "http://127.0.0.1:$port/api/reflexor/sessions/$sid/moorex" &
        asks+=($!)
    done
    wait "${asks[@]}" # not the servers: they are this shell's children too
    TEXT=0
    for sid in "${sids[@]}"; do
        for t in $(seq 1200); do # the answers stream for a while: up to 120 s
            c=$("$LG" count "$port" "$sid" 2>/dev/null | sed -n 's/.*complete=\([0-9]*\).*/\1/p')
            [ "${c:-0}" -ge 1 ] && break
            sleep 0.1
        done
        len=$(curl -s "http://127.0.0.1:$port/api/reflexor/sessions/$sid" |
            python3 -c 'import json,sys; s=json.load(sys.stdin); print(len(s["assistantMessages"][-1]["content"].encode()))')
        TEXT=$((TEXT + len))
    done
    WROTE=$(($(wchar "$pid") - w0))
    BYTES=$(($(metric "$port" reflexor_stream_text_bytes_total) - b0))
    BATCHES=$(($(metric "$port" reflexor_stream_text_batches_total) - n0))
    echo "$1 answers=$ANSWERS text=$TEXT bytes=$BYTES batches=$BATCHES wrote=$WROTE" >>"$RAW"
    echo "  $1: $ANSWERS answers, $TEXT bytes of text; $BYTES in $BATCHES batches; process wrote $WROTE" >&2
}
PID_ON=${PIDS[0]} PID_OFF=${PIDS[1]}
answers bytes_off "$P_OFF" "$PID_OFF"
W_OFF=$WROTE
answers bytes_on "$P_ON" "$PID_ON"
W_ON=$WROTE
stop_all

# ---- time from restart to the first continued token ------------------------
echo "bench: kill -9 mid-answer, restart, first continued token ($REPS runs)..." >&2
for rep in $(seq "$REPS"); do
    rm -f "$DIR/resume.db" "$DIR/resume.db"-*
    if line=$(python3 "$(dirname "$0")/resume_probe.py" "$REFLEXOR" "$CONF" "$DIR/resume.db" \
        2>>"$LOGS/resume.err"); then
        echo "resume $line" >>"$RAW"
    else
        echo "bench: resume_probe failed (see $LOGS/resume.err)" >&2
    fi
done

ON=$(med on rps) OFF=$(med off rps)
R=$(calc "$ON / $OFF")
PER=$(calc "$TEXT / $ANSWERS")
WR=$(calc "$BYTES / $TEXT")
WB=$(calc "($BYTES + $BATCHES * $ROW_COST) / $TEXT")
WD=$(calc "($W_ON - $W_OFF) / $TEXT")
WPB=$(calc "($W_ON - $W_OFF - $BYTES) / $BATCHES")
BPA=$(calc "$BATCHES / $ANSWERS")
REV=$(git rev-parse --short HEAD 2>/dev/null || echo '?')
echo
echo "Durable streamed text  (rev $REV$(git diff --quiet 2>/dev/null || echo '+changes'), $(nproc) CPUs, $(date -u +%Y-%m-%dT%H:%MZ); median of $REPS runs of ${SECS}s)"
echo "  SQLite files; builtin brain {$BUILTIN}; off: REFLEXOR_DURABLE_TEXT=0"
echo
printf '  %-52s %12s %10s %8s\n' "figure" "value" "goal" "verdict"
printf '  %-52s %12s %10s %8s\n' "real loop, durable text off, req/s" "$(f0 "$OFF")" "" ""
printf '  %-52s %12s %10s %8s\n' "real loop, durable text on, req/s" "$(f0 "$ON")" "" ""
printf '  %-52s %12s %10s %8s\n' "real loop on / off" "$(f2 "$R")x" ">= 0.95x" "$(verdict "$R >= 0.95")"
printf '  %-52s %12s %10s %8s\n' "answer length, bytes ($ANSWERS answers)" "$(f0 "$PER")" "" ""
printf '  %-52s %12s %10s %8s\n' "batches per answer" "$(f1 "$BPA")" "" ""
printf '  %-52s %12s %10s %8s\n' "text bytes handed to the store / answer bytes" "$(f2 "$WR")x" "<= 1.2x" "$(verdict "$WR <= 1.2")"
printf '  %-52s %12s %10s %8s\n' "  the same with ${ROW_COST} B a batch" "$(f2 "$WB")x" "" ""
printf '  %-52s %12s %10s %8s\n' "process writes, on minus off / answer bytes" "$(f2 "$WD")x" "" ""
printf '  %-52s %12s %10s %8s\n' "  past the text, per batch (WAL pages), bytes" "$(f0 "$WPB")" "" ""
printf '  %-52s %12s %10s %8s\n' "restart: exec to listening, ms (median)" "$(f0 "$(med resume listen_ms)")" "" ""
printf '  %-52s %12s %10s %8s\n' "restart: exec to first continued token, ms" "$(f0 "$(med resume first_token_ms)")" "" ""
echo "  (a batch is due at 4 KiB or 250 ms: the builtin brain's 4 characters every 30 ms"
echo "   make batches by time, about 33 bytes each; a fast model's are up to 4 KiB)"
echo "  raw runs: $RAW"
