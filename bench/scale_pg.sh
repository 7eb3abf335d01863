#!/usr/bin/env bash
# bench/scale_pg.sh - sessions beyond memory on PostgreSQL (SPEC 6.1, 6.2; issue
# 29 item 4), run by `make bench-scale-pg` and `make bench`: "three nodes with
# a million stored sessions start as fast as one with none".
#
# A throwaway PostgreSQL (scripts/pgtmp.sh) under SCALE_PG_DIR (default
# /var/tmp: the million takes tens of GB, more than /tmp should hold). For each
# N of SCALE_PG_NS (default "10000 100000", some 5 minutes; SCALE_PG_NS=1000000
# on request: about 35 minutes of fill at some 500 chats a second, 21 GB):
#   fill      build/bench/scale_fill through the store API with PostgreSQL's
#             fsync off (restarted with fsync on for what follows): N chats
#             of 20 messages, every BUSY-th (default 1000) ending on a message
#             not yet answered: work in flight. Then every stored chat gets an
#             owners row naming an incarnation long gone (SCALE_PG_OWNERS=0:
#             none), as after the restart of a whole cluster whose nodes made
#             them, and VACUUM ANALYZE, as autovacuum leaves a live database.
#   baseline  one node on an empty database of the same server
#   three     three nodes started at once on the filled one
# and for each node (config: resident_sessions 1000, resident_bytes 64 MiB,
# the default lease (cluster.lease_ms 5 s), the builtin brain with the shipped
# pacing):
#   listen    exec to its "listening" line (polled every 5 ms)
#   idle RSS  VmRSS 1 s after the last of the three listens (or once the
#             chats in flight are all claimed, if that takes longer)
#   loaded    reflexor_sessions_loaded_total and reflexor_sessions_resident
#             from /metrics at that moment: what it read at start
#   in flight the owners rows of the chats that were busy: each must name one
#             of the three live nodes (a row per session: claimed once), how
#             many each node claimed, ms from the start until none was left
#             in flight without a live owner, whether each was answered
#             exactly once (its message count), and how many times a node's
#             lease lapsed meanwhile (it then comes back as a new node)
#   touch     TOUCH cold, unowned, idle chats per node (distinct), each GET
#             /sessions/<id> once through that node (scale_probe): p50/p99 ms
#   claimed   of those, how many the owners table then gives the node that
#             answered the touch
# The figure is the start-up ratio: the slowest of the three nodes over the
# empty baseline. A figure is reported, never a failure; a store not filled
# or a node not started is. Figures in $B/bench/scale-pg.json, raw lines in
# scale-pg-raw.txt, one table on stdout. BENCH_QUICK=1: SCALE_PG_NS 10000,
# 100 touches. PostgreSQL and every node are stopped by pid, the store
# removed (SCALE_PG_KEEP=1 keeps the folder and its databases), on success,
# failure or Ctrl-C. Exits 0 saying so when PostgreSQL is not installed.
set -u

B=${BENCH_BUILD:-build}
OUT=$B/bench
LOGS=$OUT/logs
RAW=$OUT/scale-pg-raw.txt
JSON=$OUT/scale-pg.json
# shellcheck disable=SC2034 # lib.sh wants it; nothing here generates load
LG=$B/bench/loadgen
FILL=$B/bench/scale_fill
PROBE=$B/bench/scale_probe
REFLEXOR=$B/reflexor
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [ "${BENCH_QUICK:-0}" = 1 ]; then
    NS=${SCALE_PG_NS:-10000} TOUCH=100
else
    NS=${SCALE_PG_NS:-"10000 100000"} TOUCH=${TOUCH:-300}
fi
BUSY=${BUSY:-1000}
RESIDENT=1000
RBYTES=$((64 << 20))
KB_PER_CHAT=40 # a little over what a chat takes in PostgreSQL, to check room first
CLAIM_WAIT_S=60
GONE=00000000-0000-4000-8000-000000000000 # the owner of every filled chat: no live node

. "$(dirname "$0")/lib.sh"

for bin in "$FILL" "$PROBE" "$REFLEXOR"; do
    [ -x "$bin" ] || { echo "bench: scale-pg: $bin is missing (make bench-scale-pg builds it)" >&2; exit 1; }
done
PSQL=$(command -v psql || ls /usr/lib/postgresql/*/bin/psql 2>/dev/null | sort -V | tail -1)

mkdir -p "${SCALE_PG_DIR:-/var/tmp}"
PGDIR=$(mktemp -d "${SCALE_PG_DIR:-/var/tmp}/rx-scale-pg-XXXXXX")
cleanup() {
    stop_all
    "$ROOT/scripts/pgtmp.sh" stop "$PGDIR"
    [ "${SCALE_PG_KEEP:-0}" = 1 ] || rm -rf "$PGDIR"
}
trap cleanup EXIT

# pg_up FSYNC : (re)start the throwaway server; 3 when PostgreSQL is missing.
pg_up() {
    "$ROOT/scripts/pgtmp.sh" stop "$PGDIR"
    PGTMP_FSYNC=$1 "$ROOT/scripts/pgtmp.sh" start "$PGDIR" >/dev/null 2>"$LOGS/scale-pg-pgtmp.err"
}
pg_up off
rc=$?
if [ $rc -eq 3 ]; then
    echo "bench: scale-pg: SKIP: PostgreSQL is not installed"
    exit 0
fi
[ $rc -eq 0 ] || { echo "bench: scale-pg: PostgreSQL did not start: $(cat "$LOGS/scale-pg-pgtmp.err")" >&2; exit 1; }
pgdb() { "$ROOT/scripts/pgtmp.sh" createdb "$PGDIR" "$1"; }
# sql URL STATEMENT : its rows, |-separated, nothing else.
sql() { "$PSQL" "$1" -qAt -v ON_ERROR_STOP=1 -c "$2" 2>>"$LOGS/scale-pg-sql.err"; }

BUILTIN=$(awk '/"builtin"[ \t]*:[ \t]*\{/ { f = 1; sub(/.*"builtin"[ \t]*:[ \t]*\{/, "") }
    f { s = s $0 } f && /\}/ { sub(/\}.*/, "", s); print s; exit }' "$ROOT/config/reflexor.json" | tr -d " \t")
CONF=$OUT/scale-pg-server.json
printf '{"web_root":"/nonexistent","limits":{"max_connections":4096,"session_queue_max":1024,"resident_sessions":%d,"resident_bytes":%d},"brain":{"provider":"builtin","builtin":{%s}}}\n' \
    "$RESIDENT" "$RBYTES" "$BUILTIN" >"$CONF"

# rec LABEL CMD... : one measuring command, its key=value line kept under LABEL.
rec() {
    local label=$1 line
    shift
    if line=$("$@" 2>>"$LOGS/scale-pg-probe.err"); then
        echo "$label $line" >>"$RAW"
        echo "  $label $line" >&2
    else
        echo "bench: scale-pg: $* failed (see $LOGS/scale-pg-probe.err)" >&2
    fi
}
note() { echo "$*" >>"$RAW"; echo "  $*" >&2; }

# nodes DB NAME... : start one node per NAME at once on DB; wait for all to
# listen. Sets PID_<name>, PORT_<name>, MS_<name> (exec to listening), T0.
nodes() {
    local db=$1 n left t
    shift
    T0=$(date +%s%N)
    for n in "$@"; do
        (exec "$REFLEXOR" --config "$CONF" --db "$db" --listen 127.0.0.1:0 --log-level info \
            >"$LOGS/scale-pg-$n.out" 2>"$LOGS/scale-pg-$n.err") &
        printf -v "PID_$n" %s "$!"
        PIDS+=("$!")
        printf -v "PORT_$n" %s ""
    done
    for _ in $(seq 24000); do # 2 minutes
        left=0
        for n in "$@"; do
            local pv="PORT_$n" kv="PID_$n"
            [ -n "${!pv}" ] && continue
            t=$(grep -o '127\.0\.0\.1:[0-9]*' "$LOGS/scale-pg-$n.out" 2>/dev/null | head -1 | cut -d: -f2)
            if [ -n "$t" ]; then
                printf -v "PORT_$n" %s "$t"
                printf -v "MS_$n" %s "$((($(date +%s%N) - T0) / 1000000))"
            elif kill -0 "${!kv}" 2>/dev/null; then
                left=1
            else
                echo "bench: scale-pg: node $n exited; see $LOGS/scale-pg-$n.err:" >&2
                tail -3 "$LOGS/scale-pg-$n.err" >&2
                return 1
            fi
        done
        [ "$left" = 0 ] && return 0
        sleep 0.005
    done
    echo "bench: scale-pg: the nodes did not all listen in 2 minutes" >&2
    return 1
}

rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null; }
# metric PORT NAME : one gauge or counter of /metrics (auth none: admin).
metric() { curl -s --max-time 5 "http://127.0.0.1:$1/metrics" | awk -v m="$2" '$1 == m { print $2 }'; }

# node_figures LABEL NAME : listen, RSS and what it loaded, as one raw line.
node_figures() {
    local pv="PID_$2" ov="PORT_$2" mv="MS_$2"
    note "$1 listen_ms=${!mv} idle_rss_kb=$(rss_kb "${!pv}") loaded=$(metric "${!ov}" reflexor_sessions_loaded_total) resident=$(metric "${!ov}" reflexor_sessions_resident)"
}

# ---- the baseline: one node, no sessions ---------------------------------------------
EMPTY=$(pgdb scale_empty)
pg_up on || { echo "bench: scale-pg: PostgreSQL did not restart" >&2; exit 1; }
nodes "$EMPTY" e || exit 1
sleep 1
node_figures start0 e
stop "${PID_e:?}" # set by nodes (printf -v)

DONE="" FAILED=0
for n in $NS; do
    ids=$PGDIR/scale-$n.ids
    free_kb=$(df -Pk "$PGDIR" | awk 'NR == 2 { print $4 }')
    if [ "$((n * KB_PER_CHAT))" -gt "${free_kb:-0}" ]; then
        echo "bench: scale-pg: $n sessions skipped: $((n * KB_PER_CHAT >> 20)) GB needed, $((free_kb >> 20)) GB free in $PGDIR" >&2
        continue
    fi
    pg_up off || { FAILED=1; break; }
    db=$(pgdb "scale_$n")
    echo "bench: scale-pg: filling $n sessions of 20 messages (one in $BUSY in flight)..." >&2
    rec "fill_$n" "$FILL" --db "$db" --sessions "$n" --messages 20 --every 1000 \
        --busy-every "$BUSY" --ids "$ids"
    grep -q "^fill_$n " "$RAW" || { echo "bench: scale-pg: the fill of $n failed" >&2; FAILED=1; continue; }
    # What the nodes will be judged by, kept before they change it: the chats in
    # flight and their message counts.
    sql "$db" "CREATE TABLE bench_busy AS SELECT id, messages FROM sessions WHERE busy" >/dev/null
    if [ "${SCALE_PG_OWNERS:-1}" = 1 ]; then
        sql "$db" "INSERT INTO owners(session_id, node, since) SELECT id, '$GONE', now() FROM sessions ON CONFLICT DO NOTHING" >/dev/null
    fi
    t=$(date +%s%N)
    sql "$db" "VACUUM ANALYZE" >/dev/null
    note "db_$n mb=$(sql "$db" "SELECT pg_database_size(current_database()) >> 20") busy=$(sql "$db" "SELECT count(*) FROM bench_busy") owners=$(sql "$db" "SELECT count(*) FROM owners") vacuum_ms=$((($(date +%s%N) - t) / 1000000))"
    pg_up on || { FAILED=1; break; }

    # ---- three nodes at once -------------------------------------------------------
    nodes "$db" a b c || { FAILED=1; stop_all; continue; }
    T1=$(date +%s%N) # the last listened: the idle figures are 1 s after
    # Every chat in flight owned by a live node: how long from exec until it is.
    claim_ms=
    for _ in $(seq $((CLAIM_WAIT_S * 10))); do
        # Still in flight and no live owner (one answered by an owner since gone
        # is nobody's work: the scan rightly leaves it).
        left=$(sql "$db" "SELECT count(*) FROM bench_busy b JOIN sessions s USING (id) WHERE s.busy AND NOT EXISTS (SELECT 1 FROM owners o JOIN nodes v ON v.id = o.node WHERE o.session_id = b.id AND v.expires_at > clock_timestamp())")
        if [ "$left" = 0 ]; then
            claim_ms=$((($(date +%s%N) - T0) / 1000000))
            break
        fi
        sleep 0.1
    done
    t=$(calc "1 - ($(date +%s%N) - $T1) / 1e9")
    over "$t" 0 && sleep "$t"
    for x in a b c; do node_figures "start_${n}_$x" "$x"; done
    # ... and answered: none busy, each with its one answer more.
    for _ in $(seq $((CLAIM_WAIT_S * 10))); do
        [ "$(sql "$db" "SELECT count(*) FROM sessions s JOIN bench_busy b USING (id) WHERE s.busy")" = 0 ] && break
        sleep 0.1
    done
    claims=""
    for x in a b c; do
        pv="PORT_$x"
        claims="$claims claimed_$x=$(sql "$db" "SELECT count(*) FROM bench_busy b JOIN owners o ON o.session_id = b.id JOIN nodes v ON v.id = o.node WHERE v.url = 'http://127.0.0.1:${!pv}' AND v.expires_at > clock_timestamp()")"
    done
    # A node whose lease lapsed comes back as a new one: its sessions are orphans.
    claims="$claims lapses=$(cat "$LOGS"/scale-pg-[abc].err | grep -c "lease lapsed")"
    note "inflight_$n busy=$(sql "$db" "SELECT count(*) FROM bench_busy")${claim_ms:+ all_claimed_ms=$claim_ms} unclaimed=${left:-}$claims answered_once=$(sql "$db" "SELECT count(*) FROM sessions s JOIN bench_busy b USING (id) WHERE NOT s.busy AND s.messages = b.messages + 1") answered_other=$(sql "$db" "SELECT count(*) FROM sessions s JOIN bench_busy b USING (id) WHERE s.busy OR s.messages <> b.messages + 1")"

    # ---- cold, unowned, idle chats touched through each node -----------------------
    # Distinct ones per node, none of those in flight (seeded: the same each run).
    awk -v b="$BUSY" 'NR % b' "$ids" |
        shuf -n $((3 * TOUCH)) --random-source=<(yes 29) >"$PGDIR/touch.ids"
    : >"$PGDIR/touch.tsv"
    k=0
    for x in a b c; do
        pv="PORT_$x"
        sed -n "$((k * TOUCH + 1)),$(((k + 1) * TOUCH))p" "$PGDIR/touch.ids" >"$PGDIR/touch-$x.ids"
        awk -v p="${!pv}" '{ print $0 "\t" p }' "$PGDIR/touch-$x.ids" >>"$PGDIR/touch.tsv"
        rec "touch_${n}_$x" "$PROBE" touch "${!pv}" "$PGDIR/touch-$x.ids" "$TOUCH" 7
        k=$((k + 1))
    done
    sleep 0.5 # a claim on a touch is made as it loads; nothing more is waited for
    "$PSQL" "$db" -qAt -v ON_ERROR_STOP=1 -c "CREATE TABLE bench_touch(id text, port int)" \
        -c "\\copy bench_touch FROM '$PGDIR/touch.tsv'" >/dev/null 2>>"$LOGS/scale-pg-sql.err"
    for x in a b c; do
        pv="PORT_$x"
        note "claim_${n}_$x touched=$(sql "$db" "SELECT count(*) FROM bench_touch WHERE port = ${!pv}") mine=$(sql "$db" "SELECT count(*) FROM bench_touch t JOIN owners o ON o.session_id = t.id JOIN nodes v ON v.id = o.node WHERE t.port = ${!pv} AND v.url = 'http://127.0.0.1:' || t.port") resident=$(metric "${!pv}" reflexor_sessions_resident) loaded=$(metric "${!pv}" reflexor_sessions_loaded_total)"
    done
    stop_all
    [ "${SCALE_PG_KEEP:-0}" = 1 ] || { sql "$("$ROOT/scripts/pgtmp.sh" url "$PGDIR")" "DROP DATABASE scale_$n" >/dev/null; rm -f "$ids"; }
    DONE="$DONE $n"
done

# ---- the table and the figures ------------------------------------------------------
REV=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')
PGV=$(ls -d /usr/lib/postgresql/*/ 2>/dev/null | sort -V | tail -1 | xargs basename 2>/dev/null)
# of3 LABEL KEY : the three nodes' KEY, a/b/c.
of3() { echo "$(med "${1}_a" "$2")/$(med "${1}_b" "$2")/$(med "${1}_c" "$2")"; }
# max3 LABEL KEY : the largest of the three.
max3() { printf '%s\n' "$(med "${1}_a" "$2")" "$(med "${1}_b" "$2")" "$(med "${1}_c" "$2")" | sort -g | tail -1; }
sum3() { calc "$(med "${1}_a" "$2") + $(med "${1}_b" "$2") + $(med "${1}_c" "$2")"; }
ratio() { calc "$(max3 "start_$1" listen_ms) / $(med start0 listen_ms)"; }
mb() { [ -n "$1" ] && calc "$1 / 1024"; }
echo
echo "Sessions beyond memory on PostgreSQL $PGV, three nodes  (rev $REV$(git -C "$ROOT" diff --quiet 2>/dev/null || echo '+changes'), $(nproc) CPUs, $(date -u +%Y-%m-%dT%H:%MZ))"
echo "  fill with fsync off, nodes with fsync on; resident_sessions $RESIDENT, resident_bytes $((RBYTES >> 20)) MiB, default lease;"
echo "  one chat in $BUSY in flight; $([ "${SCALE_PG_OWNERS:-1}" = 1 ] && echo "every chat owned by a node long gone" || echo "no owners rows"); $TOUCH cold touches per node"
echo "  one node, empty database: listening in $(f0 "$(med start0 listen_ms)") ms, $(f1 "$(mb "$(med start0 idle_rss_kb)")") MB idle, $(med start0 loaded) loaded"
echo
printf '  %-8s %7s %7s %15s %6s %15s %11s %14s %8s %13s %13s %11s\n' "sessions" "fill/s" "db MB" "listen ms a/b/c" \
    "x 1" "idle MB max" "loaded" "in flight" "all ms" "touch50 a/b/c" "touch99 a/b/c" "claimed"
for n in $DONE; do
    printf '  %-8s %7s %7s %15s %6s %15s %11s %14s %8s %13s %13s %11s\n' "$n" \
        "$(f0 "$(med "fill_$n" sessions_per_s)")" "$(med "db_$n" mb)" "$(of3 "start_$n" listen_ms)" \
        "$(f2 "$(ratio "$n")")" "$(f1 "$(mb "$(max3 "start_$n" idle_rss_kb)")")" "$(of3 "start_$n" loaded)" \
        "$(med "inflight_$n" claimed_a)/$(med "inflight_$n" claimed_b)/$(med "inflight_$n" claimed_c)=$(med "inflight_$n" busy)" \
        "$(med "inflight_$n" all_claimed_ms)" \
        "$(f1 "$(med "touch_${n}_a" p50_ms)")/$(f1 "$(med "touch_${n}_b" p50_ms)")/$(f1 "$(med "touch_${n}_c" p50_ms)")" \
        "$(f1 "$(med "touch_${n}_a" p99_ms)")/$(f1 "$(med "touch_${n}_b" p99_ms)")/$(f1 "$(med "touch_${n}_c" p99_ms)")" \
        "$(sum3 "claim_$n" mine)/$(sum3 "claim_$n" touched)"
done
echo "  (x 1: the slowest of the three to listen over the one node on an empty database;"
echo "   loaded: reflexor_sessions_loaded_total 1 s after all listen; in flight: the chats in flight"
echo "   each node owns / all of them, every one owned by exactly one live node (a row each),"
echo "   all ms: from exec until none in flight lacked a live owner; claimed: touched chats whose"
echo "   owner is the node touched)"
for n in $DONE; do
    echo "  $n: in flight answered once $(med "inflight_$n" answered_once) of $(med "inflight_$n" busy), otherwise $(med "inflight_$n" answered_other); in flight with no live owner after ${CLAIM_WAIT_S} s: $(med "inflight_$n" unclaimed); lease lapses: $(med "inflight_$n" lapses)"
done
echo
echo "figures: $JSON (raw runs: $RAW)"

num() { [ -n "$1" ] && echo "$1" || echo null; }
{
    echo "{"
    echo "  \"rev\": \"$REV\", \"cpus\": $(nproc), \"postgresql\": \"$PGV\", \"resident_sessions\": $RESIDENT,"
    echo "  \"resident_bytes\": $RBYTES, \"busy_every\": $BUSY, \"touches_per_node\": $TOUCH, \"owners_gone\": ${SCALE_PG_OWNERS:-1},"
    echo "  \"one_node_empty\": {\"listen_ms\": $(num "$(med start0 listen_ms)"), \"idle_rss_kb\": $(num "$(med start0 idle_rss_kb)"), \"loaded\": $(num "$(med start0 loaded)")},"
    echo "  \"runs\": ["
    sep=""
    for n in $DONE; do
        printf '%s    {"sessions": %s, "fill_seconds": %s, "fill_sessions_per_s": %s, "db_mb": %s, "three_over_one_empty": %s, "in_flight": %s, "all_claimed_ms": %s, "unclaimed": %s, "answered_once": %s, "answered_otherwise": %s, "lease_lapses": %s, "nodes": [' \
            "$sep" "$n" "$(num "$(med "fill_$n" seconds)")" "$(num "$(med "fill_$n" sessions_per_s)")" \
            "$(num "$(med "db_$n" mb)")" "$(num "$(ratio "$n")")" "$(num "$(med "inflight_$n" busy)")" \
            "$(num "$(med "inflight_$n" all_claimed_ms)")" "$(num "$(med "inflight_$n" unclaimed)")" \
            "$(num "$(med "inflight_$n" answered_once)")" "$(num "$(med "inflight_$n" answered_other)")" \
            "$(num "$(med "inflight_$n" lapses)")"
        s2=""
        for x in a b c; do
            printf '%s{"node": "%s", "listen_ms": %s, "idle_rss_kb": %s, "loaded_at_start": %s, "resident_at_start": %s, "in_flight_claimed": %s, "touch_p50_ms": %s, "touch_p99_ms": %s, "touched": %s, "touched_claimed": %s, "errors": %s}' \
                "$s2" "$x" "$(num "$(med "start_${n}_$x" listen_ms)")" "$(num "$(med "start_${n}_$x" idle_rss_kb)")" \
                "$(num "$(med "start_${n}_$x" loaded)")" "$(num "$(med "start_${n}_$x" resident)")" \
                "$(num "$(med "inflight_$n" "claimed_$x")")" "$(num "$(med "touch_${n}_$x" p50_ms)")" \
                "$(num "$(med "touch_${n}_$x" p99_ms)")" "$(num "$(med "claim_${n}_$x" touched)")" \
                "$(num "$(med "claim_${n}_$x" mine)")" "$(num "$(med "touch_${n}_$x" errors)")"
            s2=", "
        done
        printf ']}'
        sep=$',\n'
    done
    echo
    echo "  ]"
    echo "}"
} >"$JSON"
# A figure never fails the run; a store not filled or a node not started does.
exit "$FAILED"
