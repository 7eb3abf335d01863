#!/usr/bin/env bash
# Users behind nginx (SPEC 4.4): Debian's nginx running config/nginx-auth.conf
# (ports and paths rewritten) signs alice and bob in with auth_basic and names
# them to the real server in X-Remote-User; the server, in trusted-header mode,
# keeps each one's chats from the other, and streams still stream. A second
# server that trusts only 10.0.0.0/8 refuses the same header from 127.0.0.1.
# Prints a Check-style "N passed, N failed" line. Talks to 127.0.0.1 only;
# stops what it starts, by pid, also when a step fails.
set -u
cd "$(dirname "$0")/../.." || exit 1
server=${RX_SERVER:-build/reflexor}
nginx=$(command -v nginx || echo /usr/sbin/nginx)
work=$(mktemp -d /tmp/rx-nginx-users-XXXXXX)
passed=0 failed=0
pids=() # everything started in the background, stopped newest first

cleanup() {
  local i
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    kill "${pids[i]}" 2>/dev/null && wait "${pids[i]}" 2>/dev/null
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM # through the EXIT trap
ok()   { passed=$((passed + 1)); echo "ok: $*"; }
fail() { failed=$((failed + 1)); echo "FAIL: $*"; }
check() { local what=$1; shift; if "$@"; then ok "$what"; else fail "$what"; fi; }
finish() { echo "$passed passed, $failed failed"; [ "$failed" -eq 0 ]; exit; }
# A port nothing answers on (a refused connect); nginx then binds it.
free_port() {
  local p
  for _ in $(seq 50); do
    p=$((20000 + RANDOM % 40000))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return 0; }
  done
  return 1
}

# start_server NAME CONFIG-JSON: the real server on a port of its choosing
# with a SQLite log in $work; sets $port.
start_server() {
  local name=$1 pid
  echo "$2" >"$work/$name.json"
  "$server" --config "$work/$name.json" --listen 127.0.0.1:0 --db "$work/$name.db" \
    --log-level warn >"$work/$name.out" 2>"$work/$name.err" &
  pid=$!
  pids+=("$pid")
  port=""
  for _ in $(seq 100); do
    port=$(grep -o 'http://127.0.0.1:[0-9]*' "$work/$name.out" | head -1 | cut -d: -f3)
    [ -n "$port" ] && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "server $name did not start:"
  sed 's/^/  server: /' "$work/$name.err"
  return 1
}

# The team's server: people are named by the proxy in front (loopback, the
# default auth.trusted_proxies); carol is an admin. The builtin brain streams slowly enough to
# see the chunks arrive apart.
start_server team '{"auth":{"mode":"trusted-header","admins":["carol"]},
  "brain":{"builtin":{"chunk_chars":3,"chunk_delay_ms":40}}}' || { fail "team server"; finish; }
up=$port

# Three users; nginx takes {PLAIN} passwords, so no htpasswd or openssl program.
# nginx's workers read the file on each request, and when we are root they
# run as another user (nobody): they may pass through $work, not list it.
printf 'alice:{PLAIN}alice-pw\nbob:{PLAIN}bob-pw\ncarol:{PLAIN}carol-pw\n' >"$work/htpasswd"
chmod 711 "$work"
chmod 644 "$work/htpasswd"

# A port found free may be taken before nginx binds it: then another, three times.
front=""
for attempt in 1 2 3; do
  port=$(free_port) || break
  sed -e "s/127.0.0.1:8080/127.0.0.1:$up/" -e "s/127.0.0.1:8082/127.0.0.1:$port/" \
      -e "s#/tmp/reflexor-nginx-auth#$work/ngx#g" -e "s#/etc/reflexor/htpasswd#$work/htpasswd#" \
      config/nginx-auth.conf >"$work/nginx.conf"
  "$nginx" -p "$work" -c "$work/nginx.conf" -g 'daemon off;' 2>"$work/nginx.err" &
  npid=$!
  pids+=("$npid")
  for _ in $(seq 100); do
    # /healthz is open without a password (nginx-auth.conf says why).
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/healthz")" = 200 ] &&
      { front=$port; break 2; }
    kill -0 "$npid" 2>/dev/null || break
    sleep 0.1
  done
  echo "nginx on port $port did not answer (attempt $attempt):"
  sed 's/^/  nginx: /' "$work/nginx.err"
  kill "$npid" 2>/dev/null; wait "$npid" 2>/dev/null
done
[ -n "$front" ] || { fail "nginx did not start"; finish; }
ok "/healthz through nginx without a password"
site="http://127.0.0.1:$front"
base="$site/api/reflexor"
direct="http://127.0.0.1:$up/api/reflexor"

# curl_as USER curl-args...: through nginx, signed in as USER (password USER-pw).
curl_as() { local u=$1; shift; curl -s -u "$u:$u-pw" "$@"; }
code() { curl -s -o /dev/null -w '%{http_code}' "$@"; }
# The id in a {"id":...} answer.
id_of() { sed -n 's/.*"id":"\([^"]*\)".*/\1/p'; }
post_json() { local u=$1 url=$2 body=$3; curl_as "$u" -H 'Content-Type: application/json' -d "$body" "$url"; }
say() { # say USER SID TEXT: one message, acknowledged
  post_json "$1" "$base/sessions/$2/moorex" \
    "{\"type\":\"user-send-message\",\"content\":\"$3\"}" | grep -q '"success":true'
}
# Whether a search by USER for WORD lists SID; the index may lag the input a
# little, so a find is waited for (a miss is only believed after the wait too).
search_finds() {
  local u=$1 word=$2 sid=$3
  for _ in $(seq 50); do
    curl_as "$u" "$base/sessions?q=$word" | grep -q "\"$sid\"" && return 0
    sleep 0.1
  done
  return 1
}

# --- nginx signs people in -------------------------------------------------
head=$(curl -s -D - -o /dev/null "$base/sessions" | tr -d '\r')
case $head in
  "HTTP/1.1 401"*) ok "no credentials: 401";;
  *) fail "no credentials: ${head%%$'\n'*}";;
esac
# The server never asks for Basic: this 401 is nginx's.
check "the 401 is nginx's, asking for Basic" grep -qi '^WWW-Authenticate: Basic' <<<"$head"
check "a wrong password: 401" test "$(code -u alice:nope "$base/sessions")" = 401
check "the page itself needs a sign-in" test "$(code "$site/")" = 401
check "alice gets the page" test "$(code -u alice:alice-pw "$site/")" = 200
check "client.json says trusted-header" \
  bash -c "curl -s -u alice:alice-pw '$site/client.json' | grep -q '\"authMode\":\"trusted-header\"'"
check "GET /me names alice" bash -c "curl -s -u alice:alice-pw '$base/me' | grep -q '\"name\":\"alice\"'"
check "GET /me names bob" bash -c "curl -s -u bob:bob-pw '$base/me' | grep -q '\"name\":\"bob\"'"
check "alice is no admin" bash -c "curl -s -u alice:alice-pw '$base/me' | grep -q '\"admin\":false'"
check "carol, in auth.admins, is an admin" bash -c "curl -s -u carol:carol-pw '$base/me' | grep -q '\"admin\":true'"

# Bob watches his chat list's stream the whole time: nothing of alice's may
# appear in it (his own new chat must, or the stream proves nothing).
curl_as bob -N "$base/events" >"$work/bob-events" &
pids+=("$!")

# --- alice's chat, and its streams through nginx ----------------------------
sid=$(post_json alice "$base/sessions" '{}' | id_of)
[ -n "$sid" ] && ok "alice created a session through nginx" || { fail "alice has no session"; finish; }

# The session stream: the first event (the state) must come while the stream
# is open, not when nginx's buffer fills or the stream ends.
t0=$(date +%s%N)
curl_as alice -N -H 'Accept-Encoding: gzip' -D "$work/sse-head" "$base/sessions/$sid/moorex" >"$work/events" &
epid=$!
pids+=("$epid")
for _ in $(seq 100); do grep -q '^data:' "$work/events" && break; sleep 0.05; done
t1=$(date +%s%N)
if grep -q '"type":"state-updated"' "$work/events" && kill -0 "$epid" 2>/dev/null; then
  ok "first event after $(( (t1 - t0) / 1000000 )) ms, the stream still open"
else
  fail "no first event through nginx within 5 s (buffered?)"
fi
check "the stream is text/event-stream" grep -qi '^Content-Type: text/event-stream' "$work/sse-head"
check "the stream is not gzipped" bash -c "! grep -qi '^Content-Encoding' '$work/sse-head'"

check "alice's message is taken" say alice "$sid" "alice likes marmalade on toast"
mid=""
for _ in $(seq 100); do
  mid=$(curl_as alice "$base/sessions/$sid" | grep -o '"kind":"assistant","id":"[^"]*"' | tail -1 | cut -d'"' -f8)
  [ -n "$mid" ] && break; sleep 0.05
done
[ -n "$mid" ] && ok "alice's answer started" || fail "no assistant message"

# The message stream must arrive in pieces: record when each frame lands.
timeout 30 curl -sN -u alice:alice-pw -H 'Accept: text/event-stream' "$base/sessions/$sid/messages/$mid" |
  while IFS= read -r line; do
    case $line in data:*) printf '%s %s\n' "$(date +%s%N)" "$line";; esac
  done >"$work/frames"
chunks=$(grep -c '"type":"chunk"' "$work/frames")
check "alice's answer completed through nginx" grep -q '"type":"complete"' "$work/frames"
first=$(grep '"type":"chunk"' "$work/frames" | head -1 | cut -d' ' -f1)
last=$(grep '"type":"complete"' "$work/frames" | head -1 | cut -d' ' -f1)
# Buffered by the proxy, every frame would land at once; streamed, they spread out.
if [ "$chunks" -ge 2 ] && [ -n "$first" ] && [ -n "$last" ] && [ $(( (last - first) / 1000000 )) -gt 100 ]; then
  ok "$chunks chunks arrived over $(( (last - first) / 1000000 )) ms, not in one buffer"
else
  fail "the answer's frames arrived together or not at all ($chunks chunks)"
fi
kill "$epid" 2>/dev/null; wait "$epid" 2>/dev/null
check "alice's stream carried her input" grep -q 'marmalade' "$work/events"

check "alice's list shows her chat" bash -c "curl -s -u alice:alice-pw '$base/sessions' | grep -q '\"$sid\"'"
check "alice's search finds her chat" search_finds alice marmalade "$sid"

# --- bob, who must not see any of it ----------------------------------------
bsid=$(post_json bob "$base/sessions" '{}' | id_of)
[ -n "$bsid" ] && ok "bob created a session" || fail "bob has no session"
check "bob's message is taken" say bob "$bsid" "bob grows tamarind"
check "bob's search finds his own chat" search_finds bob tamarind "$bsid"

list=$(curl_as bob "$base/sessions")
case $list in *"\"$bsid\""*) ok "bob's list shows his chat";; *) fail "bob's list lacks his chat: $list";; esac
case $list in *"\"$sid\""*) fail "bob's list shows alice's chat";; *) ok "bob's list does not show alice's chat";; esac
check "alice's list does not show bob's chat" \
  bash -c "! curl -s -u alice:alice-pw '$base/sessions' | grep -q '\"$bsid\"'"
check "bob's search does not find alice's words" bash -c "! curl -s -u bob:bob-pw '$base/sessions?q=marmalade' | grep -q '\"$sid\"'"
check "bob's search finds nothing for alice's words" \
  bash -c "! curl -s -u bob:bob-pw '$base/sessions?q=marmalade' | grep -q '\"id\"'"
check "alice's search does not find bob's words" \
  bash -c "! curl -s -u alice:alice-pw '$base/sessions?q=tamarind' | grep -q '\"$bsid\"'"

# Alice's id, to bob, answers exactly as an id that never existed: same status,
# same body (with the id itself put back where a message names it).
unknown=$(printf '%s' "$sid" | tr '0-9a-f' 'f0-9a-e')
[ "$unknown" != "$sid" ] || unknown="no-such-session"
same_as_unknown() { # METHOD SUFFIX [BODY]: bob on alice's id vs on $unknown
  local m=$1 suffix=$2 body=${3:-} a b args
  args=(-X "$m" --max-time 5) # a stream that should not open must not hang the test
  [ -n "$body" ] && args+=(-H 'Content-Type: application/json' -d "$body")
  a=$(curl_as bob "${args[@]}" -w ' %{http_code}' "$base/sessions/$sid$suffix")
  b=$(curl_as bob "${args[@]}" -w ' %{http_code}' "$base/sessions/$unknown$suffix")
  b=${b//"$unknown"/"$sid"}
  if [ "$a" = "$b" ] && [ "${a##* }" = 404 ]; then
    ok "bob's $m /sessions/<alice's>$suffix: 404 as for an unknown id"
  else
    fail "bob's $m /sessions/<alice's>$suffix: '$a', an unknown id: '$b'"
  fi
}
same_as_unknown GET ""
same_as_unknown GET "/moorex"
same_as_unknown GET "/history"
same_as_unknown GET "/export"
same_as_unknown GET "/messages/$mid"
same_as_unknown POST "/moorex" '{"type":"user-send-message","content":"from bob"}'
same_as_unknown POST "/fork" '{"at":1}'
same_as_unknown PATCH "" '{"title":"bob was here"}'
same_as_unknown DELETE ""
check "alice's chat is still there, untouched by bob" \
  bash -c "curl -s -u alice:alice-pw '$base/sessions/$sid' | grep -q marmalade &&
    ! curl -s -u alice:alice-pw '$base/sessions/$sid' | grep -q 'from bob'"

# A header the client sends itself is replaced by nginx: bob stays bob.
check "bob's forged X-Remote-User: alice is replaced by nginx" \
  bash -c "curl -s -u bob:bob-pw -H 'X-Remote-User: alice' '$base/me' | grep -q '\"name\":\"bob\"' &&
    ! curl -s -u bob:bob-pw -H 'X-Remote-User: alice' '$base/sessions' | grep -q '\"$sid\"'"
check "nor does /healthz pass a made-up name on" \
  test "$(code -H 'X-Remote-User: alice' "$site/healthz")" = 200

# An admin sees everyone's chats.
list=$(curl_as carol "$base/sessions")
case $list in *"\"$sid\""*"\"$bsid\""* | *"\"$bsid\""*"\"$sid\""*) ok "carol, an admin, sees both chats";;
  *) fail "carol's list lacks a chat: $list";; esac

sleep 0.3 # the feed's last events
check "bob's chat-list stream shows his chat" grep -q "$bsid" "$work/bob-events"
check "bob's chat-list stream shows nothing of alice's" bash -c "! grep -q '$sid' '$work/bob-events'"

# --- the server itself -------------------------------------------------------
# Loopback is a trusted proxy by default: a request from there without the
# header is nobody, and is refused.
check "directly, from a trusted address, no X-Remote-User: 401" test "$(code "$direct/sessions")" = 401

# A server that trusts only 10.0.0.0/8 believes no header from 127.0.0.1.
start_server strict '{"auth":{"mode":"trusted-header","trusted_proxies":["10.0.0.0/8"]}}' ||
  { fail "strict server"; finish; }
strict="http://127.0.0.1:$port/api/reflexor"
check "from an untrusted address, a forged X-Remote-User: 401" \
  test "$(code -H 'X-Remote-User: alice' "$strict/sessions")" = 401
check "from an untrusted address, /me with a forged name: 401" \
  test "$(code -H 'X-Remote-User: alice' "$strict/me")" = 401
check "from an untrusted address, creating a session: 401" \
  test "$(code -H 'X-Remote-User: alice' -H 'Content-Type: application/json' -d '{}' "$strict/sessions")" = 401

finish
