#!/usr/bin/env bash
# deps_check - every program the tests and scripts run comes from the one list.
#
#   scripts/deps_check.sh        (make deps-check, the second step of make test)
#
# A green CI on a machine that already has everything hides a missing install
# step, so this reads the tests instead of trusting the machine: it collects the
# words that could name a program (every word of the shell scripts, make files
# and Makefile, and of the string literals in tests/ and scripts/ .c/.mjs files),
# keeps those that are programs on this machine's PATH, and for each asks where
# it comes from. Allowed: a program named in scripts/deps.sh's list, or from a
# package on it; one from
# node_modules/.bin (package-lock.json pins it); one from a Debian package of
# priority "required" (every Debian root has those). Anything else fails,
# naming the program and the package it came from: put it on the list.
#
# A word can only be recognised on a machine that has the program, which is the
# developer's machine where the test was written; that is where this must fail.
set -euo pipefail
cd "$(dirname "$0")/.."

declare -A listed listed_pkg
while read -r prog pkg; do listed[$prog]=$pkg; done < <(scripts/deps.sh --programs)
while read -r pkg; do listed_pkg[$pkg]=1; done < <(scripts/deps.sh --packages)

# Words that are programs somewhere on PATH but are not run as programs by any
# test: each with why it appears.
declare -A not_run=(
  [createdb]="a subcommand of scripts/pgtmp.sh, which runs psql"
  [kill]="a subcommand of scripts/pgtmp.sh; elsewhere the shell's builtin"
  [nodejs]="the Debian package's name, passed to scripts/deps.sh"
  [open]="a word in messages (a stream left open)"
  [file]="a word in test names and JSON"
  [free]="a word in messages"
  [idle]="a status word"
  [look]="a word in messages"
  [patch]="the JSON Patch mode's name"
  [route]="a column of check_users' route table"
  [python]="a code block's language in the browser tests"
  [strings]="a word in messages"
  [time]="a word in messages"
  [view]="a word in messages"
  [write]="a word in messages"
)

# Not read: the list and this check, whose words are package names, and the
# symbol checks, whose words are C functions (shutdown, kill, sleep...).
files() {
  { git ls-files -- tests scripts mk Makefile 2>/dev/null || find tests scripts mk Makefile -type f; } |
    grep -vx -e scripts/deps.sh -e scripts/deps_check.sh -e scripts/layer_check.sh \
             -e scripts/signal_safe_check.sh
}

# The words that stand where a command is run: in shell and make text, the first
# word of each command (after separators, assignments and wrappers such as
# sudo, env, exec, timeout); in C and JS, the first word of each string literal
# (popen("promtool check metrics"), spawn('nginx')) and the last part of a path.
commands_of_shell() {
  sed -e 's/\(^\|[[:space:]]\)#.*$//' -e 's/\$\$/$/g' "$1" |
    sed -E 's/(\|\||&&|[|;`(){}!]|\$\(|\<(then|do|else|if|while|until|exec|sudo|env|command|nice|xargs|time)\>|\<timeout( -[a-z]+)*( [0-9.]+[smh]?)?|runuser -u [^ ]+ --|^[[:space:]]*[-@]+)/\n/g' |
    sed -E 's/^[[:space:]]*([A-Za-z_][A-Za-z0-9_]*=("[^"]*"|[^ ]*)[[:space:]]+)*//' |
    awk '{ print $1 }'
}
commands_of_source() {
  grep -oE "\"[^\"]*\"|'[^']*'" "$1" | tr -d "\"'" |
    awk '{ print $1 }' | tr '/' '\n'
}
words() {
  local f
  while IFS= read -r f; do
    case $f in
      *.sh | *.mk | Makefile) commands_of_shell "$f" ;;
      *.c | *.h | *.mjs | *.js) commands_of_source "$f" ;;
    esac
  done < <(files) | grep -E '^[a-z][a-z0-9_.+-]*[a-z0-9]$' | sort -u
}

# The Debian package that owns a file, trying both sides of the /usr merge.
owner() {
  local p=$1 c out
  for c in "$p" "${p#/usr}" "/usr$p"; do
    out=$(dpkg -S "$c" 2>/dev/null | grep -v '^diversion' | head -1 | cut -d: -f1) || true
    [ -n "$out" ] && { echo "${out%%,*}"; return 0; }
  done
  return 0
}

bad=0 seen=0
while IFS= read -r w; do
  [ -n "${listed[$w]:-}" ] && { seen=$((seen + 1)); continue; }
  [ -n "${not_run[$w]:-}" ] && continue
  [ -x "node_modules/.bin/$w" ] && continue
  path=$(type -P "$w" 2>/dev/null) || continue
  seen=$((seen + 1))
  real=$(readlink -f "$path")
  pkg=$(owner "$real")
  if [ -z "$pkg" ]; then
    echo "deps-check: '$w' ($path) is run by the tests but comes from no Debian package: add its package to scripts/deps.sh" >&2
    bad=1
    continue
  fi
  [ -n "${listed_pkg[$pkg]:-}" ] && continue
  prio=$(dpkg-query -W -f='${Priority}' "$pkg" 2>/dev/null || echo unknown)
  if [ "$prio" != required ]; then
    echo "deps-check: '$w' ($path, Debian package $pkg, priority $prio) is run by the tests but is not on the list in scripts/deps.sh" >&2
    bad=1
  fi
done < <(words)

[ $bad -eq 0 ] || exit 1
echo "deps-check: the $seen programs the tests and scripts run all come from scripts/deps.sh's list, package-lock.json or Debian's required base"
