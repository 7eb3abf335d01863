#!/usr/bin/env bash
# Install what the build and the tests need, and only what is missing.
# Called by `make run` and `make test`; safe to run again (it checks first).
# Debian packages only; as root directly, otherwise through sudo.
set -euo pipefail

# package -> why we need it
declare -A why=(
  [build-essential]="C compiler and make"
  [pkg-config]="finds the libraries below"
  [libmicrohttpd-dev]="the HTTP/SSE server"
  [libjansson-dev]="JSON"
  [uuid-dev]="message ids (libuuid)"
  [libcurl4-openssl-dev]="the OpenAI-compatible brain"
  [libsqlite3-dev]="the durable input log"
  [libpq-dev]="the input log on PostgreSQL (--db postgres://...)"
  [postgresql]="the cluster tests start a throwaway PostgreSQL"
  [check]="unit and integration tests"
  [valgrind]="leak checks in make test"
  [clang]="libFuzzer target (make fuzz)"
  [nginx]="the reverse-proxy test"
  [prometheus]="promtool checks the /metrics text in the integration tests"
  [chromium]="browser tests of the web UI"
  [nodejs]="fetches the web UI's libraries"
  [npm]="fetches the web UI's libraries"
)
want=("$@")
[ ${#want[@]} -gt 0 ] || want=(build-essential pkg-config libmicrohttpd-dev libjansson-dev uuid-dev libcurl4-openssl-dev libsqlite3-dev libpq-dev check)

missing=()
for p in "${want[@]}"; do
  # nodejs/npm may come from elsewhere than Debian: a working command is enough.
  case $p in
    nodejs) command -v node >/dev/null && continue ;;
    npm) command -v npm >/dev/null && continue ;;
    chromium) [ -x /usr/bin/chromium ] && continue ;;
  esac
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "deps: installing missing Debian packages:" >&2
for p in "${missing[@]}"; do echo "  $p - ${why[$p]:-needed by the build}" >&2; done
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "deps: not root and no sudo; install them by hand" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
