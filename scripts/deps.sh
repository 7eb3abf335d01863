#!/usr/bin/env bash
# deps - the one list of what the build and the tests need, and its installer.
#
#   scripts/deps.sh              install what `make run` needs (the build)
#   scripts/deps.sh --all        install what any test needs (`make test` runs this first)
#   scripts/deps.sh PKG...       install these packages from the list
#   scripts/deps.sh --programs   print "program package" for every program the list brings
#   scripts/deps.sh --packages   print every package on the list
#   scripts/deps.sh --why PKG    print why PKG is on the list
#
# Debian packages only, installed only when missing, as root directly or through
# sudo. Every outside program a test or script runs must come from a package on
# this list (or from Debian's required base, or package-lock.json): `make
# deps-check` (scripts/deps_check.sh) greps tests/, scripts/, mk/ and the
# Makefile for the programs they run and fails on one that is not here.
set -euo pipefail

# package | programs the tests and scripts run from it | why
# A "-" in the middle column: a library or a meta-package, no program of its own.
LIST='
build-essential     | cc gcc make ar                     | C compiler and make
pkg-config          | pkg-config                        | finds the libraries below
libmicrohttpd-dev   | -                                 | the HTTP/SSE server
libjansson-dev      | -                                 | JSON
uuid-dev            | -                                 | message ids (libuuid)
libcurl4-openssl-dev | -                                | the OpenAI-compatible brain and MCP over HTTP
libsqlite3-dev      | -                                 | the durable input log
libpq-dev           | -                                 | the input log on PostgreSQL (--db postgres://...)
libsodium-dev       | -                                 | API keys of users: random keys and their salted hashes (auth.mode keys)
check               | -                                 | unit and integration tests
clang-format        | clang-format                      | make format-check, the first step of make test
valgrind            | valgrind                          | leak checks in make test (make valgrind)
clang               | clang                             | the libFuzzer target (make fuzz)
nginx               | nginx                             | the reverse-proxy and cluster tests
curl                | curl                              | nginx_test.sh talks HTTP through the proxy
prometheus          | promtool                          | promtool checks the /metrics text in the integration tests
postgresql          | initdb pg_ctl postgres psql       | the PostgreSQL store, cluster and node tests (scripts/pgtmp.sh)
chromium            | chromium                          | browser tests of the web UI (Playwright drives it)
nodejs              | node                              | runs npm once; the tests use the node of package-lock.json
npm                 | npm npx                           | fetches the web UI libraries, client SDKs, MCP servers and node
ca-certificates     | -                                 | npm reaches its registry over TLS
binutils            | nm                                | layer checks read the undefined symbols of objects
procps              | ps                                | tests look for servers left running
debootstrap         | debootstrap                       | scripts/fresh-machine.sh makes the brand-new Debian root
git                 | git                               | the checks list tracked files; fresh-machine.sh clones HEAD
'

# What `make run` needs: the build alone.
BUILD_PKGS=(build-essential pkg-config libmicrohttpd-dev libjansson-dev uuid-dev
            libcurl4-openssl-dev libsqlite3-dev libpq-dev libsodium-dev check)

rows() { printf '%s\n' "$LIST" | sed -e '/^[[:space:]]*$/d'; }
field() { awk -F'|' -v n="$1" '{ gsub(/^[ \t]+|[ \t]+$/, "", $n); print $n }'; }
all_pkgs() { rows | field 1; }

case ${1:-} in
--programs)
  rows | awk -F'|' '{ gsub(/^[ \t]+|[ \t]+$/, "", $1); n = split($2, p, " ");
                      for (i = 1; i <= n; i++) if (p[i] != "-") print p[i], $1 }'
  exit 0 ;;
--packages) all_pkgs; exit 0 ;;
--why)
  rows | awk -F'|' -v p="${2:?a package}" '{ gsub(/^[ \t]+|[ \t]+$/, "", $1) }
                      $1 == p { gsub(/^[ \t]+|[ \t]+$/, "", $3); print $3; f = 1 }
                      END { exit !f }'
  exit ;;
--all) mapfile -t want < <(all_pkgs) ;;
"") want=("${BUILD_PKGS[@]}") ;;
*)
  want=("$@")
  for p in "${want[@]}"; do
    all_pkgs | grep -qx -- "$p" || { echo "deps: $p is not on the list in $0" >&2; exit 2; }
  done ;;
esac

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

missing=()
for p in "${want[@]}"; do
  # nodejs and npm may come from elsewhere than Debian: a working command is enough.
  case $p in
    nodejs) command -v node >/dev/null && continue ;;
    npm) command -v npm >/dev/null && continue ;;
  esac
  installed "$p" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "deps: installing missing Debian packages:" >&2
for p in "${missing[@]}"; do echo "  $p - $("$0" --why "$p")" >&2; done
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "deps: not root and no sudo; install them by hand" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get -o DPkg::Lock::Timeout=600 update -qq
$sudo apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >&2
