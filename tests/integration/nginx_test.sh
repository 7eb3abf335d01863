#!/usr/bin/env bash
# Stream an answer through Debian's nginx running config/nginx.conf (ports
# rewritten to free ones) in front of the real server. Prints a Check-style
# "N passed, N failed" line. Talks to 127.0.0.1 only; stops what it starts.
set -u
cd "$(dirname "$0")/../.."
server=${RX_SERVER:-build/reflexor}
nginx=$(command -v nginx || echo /usr/sbin/nginx)
work=$(mktemp -d /tmp/rx-nginx-XXXXXX)
passed=0 failed=0
spid="" npid=""

cleanup() {
  [ -n "$npid" ] && kill "$npid" 2>/dev/null && wait "$npid" 2>/dev/null
  [ -n "$spid" ] && kill "$spid" 2>/dev/null && wait "$spid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
ok()   { passed=$((passed + 1)); echo "ok: $*"; }
fail() { failed=$((failed + 1)); echo "FAIL: $*"; }
# A port nothing answers on (a refused connect); nginx then binds it.
free_port() {
  local p
  for _ in $(seq 50); do
    p=$((20000 + RANDOM % 40000))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return 0; }
  done
  return 1
}

echo '{"brain":{"builtin":{"chunk_chars":3,"chunk_delay_ms":40}}}' >"$work/rx.json"
"$server" --config "$work/rx.json" --listen 127.0.0.1:0 --db :memory: --log-level warn >"$work/out" 2>"$work/err" &
spid=$!
for _ in $(seq 100); do grep -q 'http://127.0.0.1:' "$work/out" && break; sleep 0.1; done
up=$(grep -o 'http://127.0.0.1:[0-9]*' "$work/out" | head -1 | cut -d: -f3)
[ -n "$up" ] || { fail "server did not start"; echo "0 passed, 1 failed"; exit 1; }

# A port found free may be taken before nginx binds it: then another, three times.
for attempt in 1 2 3; do
  front=$(free_port)
  sed -e "s/127.0.0.1:8080/127.0.0.1:$up/" -e "s/127.0.0.1:8081/127.0.0.1:$front/" \
      -e "s#/tmp/reflexor-nginx#$work/ngx#g" config/nginx.conf >"$work/nginx.conf"
  "$nginx" -p "$work" -c "$work/nginx.conf" -g 'daemon off;' 2>"$work/nginx.err" &
  npid=$!
  for _ in $(seq 100); do
    curl -s "http://127.0.0.1:$front/healthz" >/dev/null && break 2
    kill -0 "$npid" 2>/dev/null || break
    sleep 0.1
  done
  echo "nginx on port $front did not answer (attempt $attempt):"
  sed 's/^/  nginx: /' "$work/nginx.err"
  kill "$npid" 2>/dev/null; wait "$npid" 2>/dev/null
done
base="http://127.0.0.1:$front/api/reflexor"

sid=$(curl -s -X POST "$base/sessions" | sed 's/.*"id":"\([^"]*\)".*/\1/')
[ -n "$sid" ] && ok "session created through nginx" || fail "no session"

curl -sN "$base/sessions/$sid/moorex" >"$work/events" &
epid=$!
code=$(curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' \
  -d '{"type":"user-send-message","content":"streaming through a proxy works fine"}' \
  "$base/sessions/$sid/moorex")
[ "$code" = 200 ] && ok "input posted through nginx" || fail "post answered $code"

mid=""
for _ in $(seq 100); do
  mid=$(curl -s "$base/sessions/$sid" | grep -o '"kind":"assistant","id":"[^"]*"' | tail -1 | cut -d'"' -f8)
  [ -n "$mid" ] && break; sleep 0.05
done
[ -n "$mid" ] && ok "answer started" || fail "no assistant message"

# The message stream must arrive in pieces: record when each frame lands.
timeout 30 curl -sN -H 'Accept: text/event-stream' "$base/sessions/$sid/messages/$mid" |
  while IFS= read -r line; do
    case $line in data:*) printf '%s %s\n' "$(date +%s%N)" "$line";; esac
  done >"$work/frames"
chunks=$(grep -c '"type":"chunk"' "$work/frames")
grep -q '"type":"complete"' "$work/frames" && ok "answer completed through nginx" || fail "no complete frame"
[ "$chunks" -ge 2 ] && ok "$chunks chunk frames streamed" || fail "only $chunks chunk frames"
first=$(grep '"type":"chunk"' "$work/frames" | head -1 | cut -d' ' -f1)
last=$(grep '"type":"complete"' "$work/frames" | head -1 | cut -d' ' -f1)
# Buffered by the proxy, every frame would land at once; streamed, they spread out.
if [ -n "$first" ] && [ -n "$last" ] && [ $(( (last - first) / 1000000 )) -gt 100 ]; then
  ok "frames arrived over $(( (last - first) / 1000000 )) ms, not in one buffer"
else
  fail "frames arrived together (proxy buffering?)"
fi
kill $epid 2>/dev/null; wait $epid 2>/dev/null
grep -q '"type":"state-updated"' "$work/events" && ok "state stream through nginx" || fail "no state events"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
