# bench/lib.sh - what every benchmark script shares: servers started on
# 127.0.0.1 and stopped by pid (also on failure or Ctrl-C), one generator run
# per line of $RAW, medians and verdicts. Sourced after the script sets
# B (object tree), OUT, LOGS, RAW and LG (build/bench/loadgen).
#   START_TRIES  how many 50 ms waits a server may take to print its port

mkdir -p "$LOGS"
: >"$RAW"
PIDS=()

stop_all() {
    local p
    for p in "${PIDS[@]}"; do
        kill "$p" 2>/dev/null
    done
    for p in "${PIDS[@]}"; do
        wait "$p" 2>/dev/null
    done
    PIDS=()
}
trap 'stop_all' EXIT
trap 'exit 130' INT TERM

# start NAME CMD... : sets SRV_PID and SRV_PORT (read from its output), or returns 1.
start() {
    local name=$1 i
    shift
    (exec "$@" >"$LOGS/$name.out" 2>"$LOGS/$name.err") &
    SRV_PID=$!
    PIDS+=("$SRV_PID")
    SRV_PORT=
    for i in $(seq "${START_TRIES:-600}"); do
        SRV_PORT=$(grep -o '127\.0\.0\.1:[0-9]*' "$LOGS/$name.out" 2>/dev/null |
            head -1 | cut -d: -f2)
        [ -n "$SRV_PORT" ] && return 0
        kill -0 "$SRV_PID" 2>/dev/null || break
        sleep 0.05
    done
    echo "bench: $name did not start; see $LOGS/$name.err" >&2
    return 1
}

# stop PID : stop one server and forget it.
stop() {
    kill "$1" 2>/dev/null
    wait "$1" 2>/dev/null
    local keep=() p
    for p in "${PIDS[@]}"; do
        [ "$p" != "$1" ] && keep+=("$p")
    done
    PIDS=("${keep[@]}")
}

# run LABEL ARGS... : one generator run, its line kept under LABEL.
run() {
    local label=$1 line
    shift
    if line=$("$LG" "$@" 2>>"$LOGS/loadgen.err"); then
        echo "$label $line" >>"$RAW"
    else
        echo "bench: loadgen $* failed (see $LOGS/loadgen.err)" >&2
    fi
}

# med LABEL KEY : median of KEY over the lines labelled LABEL ("" if none).
med() {
    awk -v l="$1" -v k="$2" '$1 == l {
            for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k) v[n++] = kv[2] + 0 }
        }
        END {
            if (!n) exit
            for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
            print v[int(n / 2)]
        }' "$RAW"
}

# worst LABEL KEY : the largest KEY over the lines labelled LABEL ("" if none): a
# bound is judged on its worst run, not its median.
worst() {
    awk -v l="$1" -v k="$2" '$1 == l {
            for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k && (!n++ || kv[2] + 0 > m)) m = kv[2] + 0 }
        }
        END { if (n) print m }' "$RAW"
}

# calc EXPR : awk arithmetic, "" when an operand is missing.
calc() {
    awk "BEGIN { print $1 }" 2>/dev/null
}

# over X LIMIT : X is a number above LIMIT (false when either is missing).
# The comparison stays inside parentheses: a bare `print a > b` writes a file.
over() {
    [ -n "$1" ] && [ -n "$2" ] && [ "$(calc "(($1) > ($2)) ? 1 : 0")" = 1 ]
}

# verdict AWK-CONDITION : met, MISSED, or n/a when a figure is missing.
verdict() {
    case $(calc "($1) ? 1 : 0") in 1) echo met ;; 0) echo MISSED ;; *) echo "n/a" ;; esac
}

# conf NAME JSON-FRAGMENT : a config file with the common limits; prints its path.
conf() {
    printf '{"web_root":"/nonexistent","limits":{"max_connections":4096,"max_sessions":100000,"session_queue_max":1024}%s}\n' \
        "$2" >"$OUT/$1.json"
    echo "$OUT/$1.json"
}

# f0/f1/f2 X : X with 0, 1 or 2 decimals, "n/a" when missing.
f0() { [ -n "$1" ] && printf '%.0f' "$1" || printf 'n/a'; }
f1() { [ -n "$1" ] && printf '%.1f' "$1" || printf 'n/a'; }
f2() { [ -n "$1" ] && printf '%.2f' "$1" || printf 'n/a'; }
