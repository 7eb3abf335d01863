#!/usr/bin/env bash
# fresh-machine - run `make test` as a brand-new Debian machine would.
#
#   scripts/fresh-machine.sh [TARGET...]     (as root; default target: test)
#
# CI runs on a machine that already has every package, so a green CI cannot see
# a missing install step. This can: it makes a minimal Debian 12 root with
# debootstrap (made once, about 2.5 minutes, and cached as a tarball in
# $FRESH_DIR, /var/tmp/reflexor-fresh-machine by default), carries in only what a machine here needs to reach the package
# registries (the apt sources and settings, the CA certificates, the npm
# settings), copies a clean clone of HEAD into it, installs make and git and
# nothing else, and runs `make test` there in a chroot. /proc, /dev, /dev/pts,
# /dev/shm and /sys are mounted for the run and unmounted afterwards, also on
# failure; the root is thrown away. The log is $FRESH_DIR/log. All of it stays
# outside the tree, so nothing that walks build/ ever meets the root's /proc.
#
# FRESH_KEEP=1 keeps the root ($FRESH_DIR/root) for a look afterwards.
# FRESH_SUITE overrides the Debian release (bookworm).
set -euo pipefail
top=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
cd "$top"
[ "$(id -u)" -eq 0 ] || { echo "fresh-machine: needs root (debootstrap, chroot, mount)" >&2; exit 1; }

suite=${FRESH_SUITE:-bookworm}
work=${FRESH_DIR:-/var/tmp/reflexor-fresh-machine}
base=$work/$suite-minbase.tar
root=$work/root
log=$work/log
mkdir -p "$work"

# The Debian archive this machine already uses: the first URI of its sources.
mirror() {
  local u
  u=$(grep -hoE '^URIs:[[:space:]]*[^[:space:]]+' /etc/apt/sources.list.d/*.sources 2>/dev/null |
      awk '{ print $2 }' | grep -m1 '/debian/\?$' || true)
  [ -n "$u" ] || u=$(grep -hoE '^deb[[:space:]]+[^[:space:]]+/debian/?[[:space:]]' /etc/apt/sources.list 2>/dev/null |
                     awk '{ print $2 }' | head -1 || true)
  echo "${u:-http://deb.debian.org/debian}"
}

make_base() {
  scripts/deps.sh debootstrap
  local tmp=$work/base.tmp
  rm -rf "$tmp"
  echo "fresh-machine: debootstrap --variant=minbase $suite from $(mirror)"
  debootstrap --variant=minbase "$suite" "$tmp" "$(mirror)" >"$work/debootstrap.log" 2>&1 ||
    { tail -20 "$work/debootstrap.log" >&2; exit 1; }
  tar -C "$tmp" -cf "$base.part" . && mv "$base.part" "$base"
  rm -rf "$tmp"
}

mounted=()
unmount_all() {
  local i
  # Whatever the run left behind in the root (a server, PostgreSQL) goes first.
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/root" 2>/dev/null)" = "$root" ] && kill -9 "${p#/proc/}" 2>/dev/null || true
  done
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}" 2>/dev/null || true
  done
  mounted=()
  [ "${FRESH_KEEP:-0}" = 1 ] || rm -rf --one-file-system "$root"
}
trap unmount_all EXIT INT TERM

# mnt DIR MOUNT-ARGS...: mount at DIR inside the root, remembered for unmount_all.
mnt() { local dst=$root$1; shift; mkdir -p "$dst"; mount "$@" "$dst"; mounted+=("$dst"); }

[ -f "$base" ] || make_base
[ ! -e "$root" ] || unmount_all
mkdir -p "$root"
tar -C "$root" -xf "$base"

# What this machine needs to reach the registries, and nothing else of it.
cp /etc/resolv.conf "$root/etc/resolv.conf"
cp -a /etc/apt/sources.list.d/. "$root/etc/apt/sources.list.d/" 2>/dev/null || true
[ -f /etc/apt/sources.list ] && cp /etc/apt/sources.list "$root/etc/apt/sources.list"
# Only the Debian archive: other vendors' sources need keys the root lacks.
for f in "$root"/etc/apt/sources.list.d/*; do
  [ -f "$f" ] && ! grep -q '/debian' "$f" && rm -f "$f"
done
for f in /etc/apt/apt.conf.d/*; do                # settings that no package wrote
  dpkg -S "$f" >/dev/null 2>&1 || cp "$f" "$root/etc/apt/apt.conf.d/"
done
mkdir -p "$root/usr/local/share/ca-certificates" "$root/etc/ssl/certs" "$root/usr/etc" "$root/root"
cp -a /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/" 2>/dev/null || true
cp -aL /etc/ssl/certs/. "$root/etc/ssl/certs/" 2>/dev/null || true
for f in /etc/npmrc /usr/etc/npmrc /root/.npmrc; do
  [ -f "$f" ] && cp "$f" "$root$f"
done

# A clean clone of HEAD, as CI takes it.
git clone -q --no-hardlinks "$top" "$root/root/reflexor"
git -C "$root/root/reflexor" checkout -q --detach "$(git rev-parse HEAD)"

mnt /proc -t proc proc
mnt /sys -t sysfs sys
mnt /dev --bind /dev
mnt /dev/pts --bind /dev/pts
mnt /dev/shm --bind /dev/shm

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(test)
echo "fresh-machine: make ${targets[*]} in a new $suite root at $(git rev-parse --short HEAD) (log: $log)"
start=$(date +%s)
set +e
chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb CI=true \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  bash -c 'set -e
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends make git >/dev/null
    cd /root/reflexor
    make "$@"' fresh "${targets[@]}" >"$log" 2>&1
rc=$?
set -e
tail -5 "$log"
echo "fresh-machine: make ${targets[*]} exited $rc after $(( $(date +%s) - start )) s"
exit $rc
