#!/usr/bin/env bash
# bench/cluster.sh - Reflexor on PostgreSQL, one node and three (issue 19, SPEC 6.1).
#
#   BENCH_BUILD=build/x bench/cluster.sh      (REFLEXOR=path picks another binary)
#
# A throwaway PostgreSQL (scripts/pgtmp.sh, fsync on, as SQLite's default) in a
# temp folder; every figure is the median of REPS runs of SECS seconds, the
# runs of the variants compared interleaved, all in this one run:
#   - POST user-send-message, 32 connections over 32 sessions (loadgen post),
#     one node on SQLite (a file, fsync) vs one node on PostgreSQL: with
#     --no-effects (the log alone) and with effects on (the builtin brain
#     answers every message: three inputs per POST, the answer's two from the
#     effect);
#   - token relay latency, one node: POST a message, time to the answer's
#     first text on its /messages stream (bench/cluster.mjs), SQLite vs
#     PostgreSQL;
#   - three nodes vs one through nginx (config/nginx-cluster.conf), POST
#     --no-effects over 32 sessions. On one small machine all three nodes and
#     PostgreSQL share the same cores: this shows the cluster's overhead, not
#     how it scales across machines;
#   - cross-node token relay: POST on node A, the answer's /messages read on
#     node B (and on A at once): POST to first text on B, and each chunk's
#     arrival on B minus its arrival on A, p50/p99.
# Servers, nginx and PostgreSQL are stopped by pid on success, failure or
# Ctrl-C. One table on stdout; raw lines in $OUT/raw.txt, logs in $OUT/logs/.
# Benchmarks measure; nothing here fails on a slow figure. BENCH_QUICK=1: 1
# run of 1 s, 3 relay probes. Exits 0 with a message when PostgreSQL is not
# installed.
set -u

B=${BENCH_BUILD:-build}
RX=${REFLEXOR:-$B/reflexor}
LG=$B/bench/loadgen
OUT=$B/bench/cluster
LOGS=$OUT/logs
RAW=$OUT/raw.txt
API=/api/reflexor
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [ "${BENCH_QUICK:-0}" = 1 ]; then
    SECS=1 REPS=1 PROBES=3
else
    SECS=3 REPS=3 PROBES=15
fi
CONNS=32
SESSIONS=32

for f in "$RX" "$LG"; do
    [ -x "$f" ] || { echo "cluster: $f is missing (make BUILD_ROOT=... all bench-tools)" >&2; exit 1; }
done
NGINX=$(command -v nginx || echo /usr/sbin/nginx)

rm -rf "$OUT"
mkdir -p "$OUT"
. "$(dirname "$0")/lib.sh"

PGDIR=$(mktemp -d /tmp/rx-bench-pg-XXXXXX)
"$ROOT/scripts/pgtmp.sh" start "$PGDIR" >/dev/null 2>"$LOGS/pgtmp.err"
rc=$?
if [ $rc -eq 3 ]; then
    echo "cluster: SKIP: PostgreSQL is not installed ($(cat "$LOGS/pgtmp.err"))"
    rm -rf "$PGDIR"
    exit 0
fi
[ $rc -eq 0 ] || { echo "cluster: PostgreSQL did not start: $(cat "$LOGS/pgtmp.err")" >&2; rm -rf "$PGDIR"; exit 1; }
NGX_PID=
cleanup() {
    [ -n "$NGX_PID" ] && kill "$NGX_PID" 2>/dev/null && wait "$NGX_PID" 2>/dev/null
    stop_all
    "$ROOT/scripts/pgtmp.sh" stop "$PGDIR"
    rm -rf "$PGDIR"
}
trap cleanup EXIT

pgdb() { "$ROOT/scripts/pgtmp.sh" createdb "$PGDIR" "$1"; }

# The builtin brain, quick but streamed: the relay figures need several chunks.
C_NOFX=$(conf nofx ',"cluster":{"lease_ms":2000}')
C_FX=$(conf fx ',"brain":{"builtin":{"chunk_chars":8,"chunk_delay_ms":0}},"cluster":{"lease_ms":2000}')
C_RELAY=$(conf relay ',"brain":{"builtin":{"chunk_chars":4,"chunk_delay_ms":20}},"cluster":{"lease_ms":2000}')
# conf() writes web_root /nonexistent; the cluster keys only matter on PostgreSQL.
SQL_NOFX=$(conf sql_nofx '')
SQL_FX=$(conf sql_fx ',"brain":{"builtin":{"chunk_chars":8,"chunk_delay_ms":0}}')
SQL_RELAY=$(conf sql_relay ',"brain":{"builtin":{"chunk_chars":4,"chunk_delay_ms":20}}')
FLAGS=(--listen 127.0.0.1:0 --log-level warn)

relay() { # LABEL POST_PORT SUB_PORT
    local line
    if line=$(node "$ROOT/bench/cluster.mjs" relay "http://127.0.0.1:$2$API" "http://127.0.0.1:$3$API" "$PROBES" 2>>"$LOGS/relay.err"); then
        echo "$1 $line" >>"$RAW"
    else
        echo "cluster: relay probe $1 failed (see $LOGS/relay.err)" >&2
    fi
}

# ---- one node: SQLite vs PostgreSQL -------------------------------------------
echo "cluster: one node, SQLite vs PostgreSQL ($REPS x ${SECS}s per figure)..." >&2
start sq_nofx "$RX" --config "$SQL_NOFX" --db "$OUT/nofx.db" --no-effects "${FLAGS[@]}" || exit 1
P_SQ_NOFX=$SRV_PORT
start pg_nofx "$RX" --config "$C_NOFX" --db "$(pgdb nofx)" --no-effects "${FLAGS[@]}" || exit 1
P_PG_NOFX=$SRV_PORT
start sq_fx "$RX" --config "$SQL_FX" --db "$OUT/fx.db" "${FLAGS[@]}" || exit 1
P_SQ_FX=$SRV_PORT
start pg_fx "$RX" --config "$C_FX" --db "$(pgdb fx)" "${FLAGS[@]}" || exit 1
P_PG_FX=$SRV_PORT
for rep in $(seq "$REPS"); do
    run sq_nofx post "$P_SQ_NOFX" "$CONNS" "$SECS" "$SESSIONS"
    run pg_nofx post "$P_PG_NOFX" "$CONNS" "$SECS" "$SESSIONS"
    run sq_fx post "$P_SQ_FX" "$CONNS" "$SECS" "$SESSIONS"
    sleep 1 # the answers of the last run finish
    run pg_fx post "$P_PG_FX" "$CONNS" "$SECS" "$SESSIONS"
    sleep 1
done
stop_all
rm -f "$OUT"/*.db "$OUT"/*.db-*

echo "cluster: token relay, one node ($PROBES probes each)..." >&2
start sq_relay "$RX" --config "$SQL_RELAY" --db "$OUT/relay.db" "${FLAGS[@]}" || exit 1
P_SQ_RELAY=$SRV_PORT
start pg_relay "$RX" --config "$C_RELAY" --db "$(pgdb relay1)" "${FLAGS[@]}" || exit 1
P_PG_RELAY=$SRV_PORT
relay sq_relay "$P_SQ_RELAY" "$P_SQ_RELAY"
relay pg_relay "$P_PG_RELAY" "$P_PG_RELAY"
stop_all
rm -f "$OUT"/*.db "$OUT"/*.db-*

# ---- three nodes vs one, through nginx --------------------------------------
# nginx NAME PORT... : config/nginx-cluster.conf in front of these ports; sets NGX_PORT.
nginx_front() {
    local name=$1 dir p ups=''
    shift
    mkdir -p "$OUT/$name"
    dir=$(cd "$OUT/$name" && pwd)
    for p in "$@"; do ups="$ups        server 127.0.0.1:$p max_fails=1 fail_timeout=2s;\n"; done
    NGX_PORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
    awk -v ups="$ups" '
        /server 127\.0\.0\.1:810[1-9]/ { if (!done) { printf "%s", ups; done = 1 } next }
        { print }' "$ROOT/config/nginx-cluster.conf" |
        sed -e "s/listen 127.0.0.1:8100;/listen 127.0.0.1:$NGX_PORT;/" \
            -e "s#/tmp/reflexor-cluster-nginx#$dir/ngx#g" >"$dir/nginx.conf"
    "$NGINX" -p "$dir" -c "$dir/nginx.conf" -g 'daemon off;' 2>"$LOGS/$name.nginx.err" &
    NGX_PID=$!
    for _ in $(seq 100); do
        curl -s -o /dev/null "http://127.0.0.1:$NGX_PORT/healthz" && return 0
        sleep 0.05
    done
    echo "cluster: nginx did not start (see $LOGS/$name.nginx.err)" >&2
    return 1
}
nginx_stop() { [ -n "$NGX_PID" ] && kill "$NGX_PID" 2>/dev/null && wait "$NGX_PID" 2>/dev/null; NGX_PID=; }

echo "cluster: three nodes vs one through nginx ($REPS x ${SECS}s)..." >&2
DB3=$(pgdb three)
start n1 "$RX" --config "$C_NOFX" --db "$(pgdb one)" --no-effects "${FLAGS[@]}" || exit 1
P_ONE=$SRV_PORT
start a "$RX" --config "$C_NOFX" --db "$DB3" --no-effects "${FLAGS[@]}" || exit 1
P_A=$SRV_PORT
start b "$RX" --config "$C_NOFX" --db "$DB3" --no-effects "${FLAGS[@]}" || exit 1
P_B=$SRV_PORT
start c "$RX" --config "$C_NOFX" --db "$DB3" --no-effects "${FLAGS[@]}" || exit 1
P_C=$SRV_PORT
for rep in $(seq "$REPS"); do
    nginx_front one "$P_ONE" && run ngx_one post "$NGX_PORT" "$CONNS" "$SECS" "$SESSIONS"
    nginx_stop
    nginx_front three "$P_A" "$P_B" "$P_C" && run ngx_three post "$NGX_PORT" "$CONNS" "$SECS" "$SESSIONS"
    nginx_stop
done
stop_all

echo "cluster: cross-node token relay ($PROBES probes)..." >&2
DBR=$(pgdb relay3)
start ra "$RX" --config "$C_RELAY" --db "$DBR" "${FLAGS[@]}" || exit 1
P_RA=$SRV_PORT
start rb "$RX" --config "$C_RELAY" --db "$DBR" "${FLAGS[@]}" || exit 1
P_RB=$SRV_PORT
relay x_same "$P_RA" "$P_RA"
relay x_cross "$P_RA" "$P_RB"
stop_all

# ---- the table --------------------------------------------------------------
ratio() { calc "$(med "$1" "$3") / $(med "$2" "$3")"; }
ms() { [ -n "$1" ] && calc "$1 / 1000"; }
REV=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')
PGV=$(ls -d /usr/lib/postgresql/*/ 2>/dev/null | sort -V | tail -1 | xargs basename 2>/dev/null)

echo
echo "Cluster on PostgreSQL $PGV  ($RX, rev $REV, $(nproc) CPUs, $(date -u +%Y-%m-%dT%H:%MZ); medians of $REPS interleaved runs of ${SECS}s, $CONNS conns / $SESSIONS sessions)"
printf '%-62s %14s %14s %8s\n' "figure" "SQLite | 1" "PG | 3 | B" "ratio"
row() { printf '%-62s %14s %14s %8s\n' "$1" "$2" "$3" "$4"; }
row "POST --no-effects, 1 node, req/s (SQLite | PostgreSQL)" "$(f0 "$(med sq_nofx rps)")" "$(f0 "$(med pg_nofx rps)")" "$(f2 "$(ratio pg_nofx sq_nofx rps)")x"
row "  p50 / p99 ms" "$(f1 "$(ms "$(med sq_nofx p50_us)")") / $(f1 "$(ms "$(med sq_nofx p99_us)")")" "$(f1 "$(ms "$(med pg_nofx p50_us)")") / $(f1 "$(ms "$(med pg_nofx p99_us)")")" ""
row "POST, effects on (builtin brain), 1 node, req/s" "$(f0 "$(med sq_fx rps)")" "$(f0 "$(med pg_fx rps)")" "$(f2 "$(ratio pg_fx sq_fx rps)")x"
row "  p50 / p99 ms" "$(f1 "$(ms "$(med sq_fx p50_us)")") / $(f1 "$(ms "$(med sq_fx p99_us)")")" "$(f1 "$(ms "$(med pg_fx p50_us)")") / $(f1 "$(ms "$(med pg_fx p99_us)")")" ""
row "POST to first chunk, 1 node, p50 ms" "$(f1 "$(med sq_relay first_p50_ms)")" "$(f1 "$(med pg_relay first_p50_ms)")" "$(f2 "$(ratio pg_relay sq_relay first_p50_ms)")x"
row "  p99 ms" "$(f1 "$(med sq_relay first_p99_ms)")" "$(f1 "$(med pg_relay first_p99_ms)")" ""
row "POST --no-effects via nginx, req/s (1 node | 3 nodes)" "$(f0 "$(med ngx_one rps)")" "$(f0 "$(med ngx_three rps)")" "$(f2 "$(ratio ngx_three ngx_one rps)")x"
row "  p50 / p99 ms" "$(f1 "$(ms "$(med ngx_one p50_us)")") / $(f1 "$(ms "$(med ngx_one p99_us)")")" "$(f1 "$(ms "$(med ngx_three p50_us)")") / $(f1 "$(ms "$(med ngx_three p99_us)")")" ""
row "POST on A to first chunk, p50 ms (read on A | read on B)" "$(f1 "$(med x_same first_p50_ms)")" "$(f1 "$(med x_cross first_p50_ms)")" "$(f2 "$(ratio x_cross x_same first_p50_ms)")x"
row "  p99 ms" "$(f1 "$(med x_same first_p99_ms)")" "$(f1 "$(med x_cross first_p99_ms)")" ""
row "cross-node chunk relay, arrival on B - on A, p50 / p99 ms" "" "$(f1 "$(med x_cross tok_p50_ms)") / $(f1 "$(med x_cross tok_p99_ms)")" ""
echo "  (errors, POST runs and relay probes: $(awk '{ for (i = 2; i <= NF; i++) if ($i ~ /^errors=/) { split($i, a, "="); e += a[2] } } END { print e + 0 }' "$RAW");" \
     "$(nproc) CPUs shared by every node, nginx and PostgreSQL: 3 nodes vs 1 shows the overhead, not scale)"
