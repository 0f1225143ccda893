#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Tests the Debian package in a fresh Debian 12 chroot: builds it (cpack -G DEB), installs it
# with `apt install ./ptw_*.deb`, runs `ptw --version` and headless runs of installed example
# profiles from another folder, then `apt purge`s it and checks that the file tree is as it
# was before the install (the package's dependencies are installed first, so that the
# comparison sees ptw's files only).
#
# Usage: packaging/test-package.sh [BUILD_DIR]   (default: build; configured and built)
# Needs root (chroot, mounts) and debootstrap; without them it says what is missing and exits
# 77, which CTest reports as skipped (the `package` test, `ctest -L package`).
# The debootstrapped base system is kept in BUILD_DIR/package-test/bookworm-base and copied
# for each run, so that only the first run downloads it; PTW_PACKAGE_TEST_REBOOTSTRAP=1 makes
# it again. Packages come from the Debian mirror the host's apt uses.
set -euo pipefail

src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
started=$(date +%s)
say() { printf 'test-package: %s\n' "$*"; }
fail() {
  printf 'test-package: FAIL: %s\n' "$*" >&2
  exit 1
}
skip() {
  printf 'test-package: SKIP: %s\n' "$*"
  exit 77
}

[ "$(id -u)" -eq 0 ] || skip "needs root (debootstrap, chroot and mounts); run it as root"
command -v debootstrap >/dev/null || skip "debootstrap is not installed (packaging/install-deps.sh installs it)"
command -v cpack >/dev/null || skip "cpack is not installed (it comes with cmake)"
command -v unshare >/dev/null || skip "unshare (util-linux) is not installed"

# The host's Debian mirror: the first URI of a deb source for Debian itself, and its security
# archive, from deb822 (*.sources) and one-line (*.list) source files.
source_uris() {
  cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^URIs:/ {print $2}' || true
  cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
    awk '$1 == "deb" {for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) {print $i; break}}' || true
}
mirror=$(source_uris | grep -E '/debian/?$' | head -n 1 || true)
[ -n "$mirror" ] || mirror=http://deb.debian.org/debian
security=$(source_uris | grep -E '/debian-security/?$' | head -n 1 || true)
say "mirror $mirror${security:+, security $security}"

# 1. The package, from the build as it is.
say "building the package (cpack -G DEB)"
rm -rf "$build/package"
(cd "$build" && cpack -G DEB -B "$build/package" > "$build/cpack.log" 2>&1) ||
  { cat "$build/cpack.log"; fail "cpack did not build the package"; }
deb=$(ls "$build"/package/ptw_*.deb)
[ -f "$deb" ] || fail "cpack wrote no ptw_*.deb in $build/package"
say "package: $(basename "$deb") ($(du -h "$deb" | cut -f1))"

# 2. A fresh Debian 12 system: the kept base, copied.
work="$build/package-test"
base="$work/bookworm-base"
mkdir -p "$work"
if [ -n "${PTW_PACKAGE_TEST_REBOOTSTRAP:-}" ] || [ ! -x "$base/usr/bin/apt-get" ]; then
  rm -rf "$base" "$base.tmp"
  say "debootstrap bookworm from $mirror (once; kept in $base)"
  debootstrap --variant=minbase bookworm "$base.tmp" "$mirror" > "$work/debootstrap.log" 2>&1 ||
    { tail -n 30 "$work/debootstrap.log"; fail "debootstrap failed (log: $work/debootstrap.log)"; }
  mv "$base.tmp" "$base"
fi
root="$work/root"
rm -rf "$root"
cp -a "$base" "$root"
trap 'rm -rf "$root"' EXIT
{
  echo "deb $mirror bookworm main"
  echo "deb $mirror bookworm-updates main"
  [ -z "$security" ] || echo "deb $security bookworm-security main"
} > "$root/etc/apt/sources.list"
cp /etc/resolv.conf "$root/etc/resolv.conf"
# The host's view of the mirror's validity dates (a snapshot mirror's Release files are old).
for opt in Acquire::Check-Valid-Until Acquire::Check-Date; do
  value=$(apt-config dump "$opt" 2>/dev/null | awk -v o="$opt" '$1 == o {gsub(/[";]/, "", $2); print $2}')
  [ -z "$value" ] || echo "$opt \"$value\";" >> "$root/etc/apt/apt.conf.d/99ptw-test"
done
cp "$deb" "$root/tmp/"

# 3. In the chroot, in a mount namespace of its own (its mounts go when it ends).
cat > "$root/tmp/in-chroot.sh" << 'EOF'
#!/bin/bash
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8 PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
deb=$(ls /tmp/ptw_*.deb)
say() { printf 'test-package [chroot]: %s\n' "$*"; }
fail() { printf 'test-package [chroot]: FAIL: %s\n' "$*" >&2; exit 1; }
# Every path on the system but the ones that change by themselves (caches, logs, apt's lists).
tree() {
  find / -xdev \( -path /proc -o -path /sys -o -path /dev -o -path /tmp -o -path /run -o -path /var/cache \
    -o -path /var/log -o -path /var/lib/apt/lists -o -path /root \) -prune -o -print | LC_ALL=C sort
}
say "apt-get update"
apt-get update -qq
say "installing the package's dependencies: $(dpkg-deb -f "$deb" Depends)"
apt-get satisfy -y -qq "$(dpkg-deb -f "$deb" Depends)" > /tmp/deps.log 2>&1 || { tail -n 30 /tmp/deps.log; fail "dependencies"; }
tree > /tmp/tree-before
say "apt install ./$(basename "$deb")"
(cd /tmp && apt-get install -y -qq "./$(basename "$deb")") > /tmp/install.log 2>&1 ||
  { cat /tmp/install.log; fail "apt install ./$(basename "$deb") failed"; }
grep -E "^(Setting up|Unpacking) " /tmp/install.log | sed 's/^/  /'
# The listing sees what the package installs (else the comparison after the purge proves nothing).
tree > /tmp/tree-installed
grep -qx /usr/lib/ptw/ptw-worker /tmp/tree-installed || fail "the file listing does not see the installed /usr/lib/ptw/ptw-worker"

command -v ptw >/dev/null || fail "ptw is not on PATH"
[ -x /usr/lib/ptw/ptw-worker ] || fail "/usr/lib/ptw/ptw-worker is not installed"
version=$(ptw --version)
say "ptw --version: $version"
[ "$version" = "ptw $(dpkg-query -W -f '${Version}' ptw)" ] || fail "ptw --version says '$version', the package $(dpkg-query -W -f '${Version}' ptw)"
for f in /usr/share/man/man1/ptw.1.gz /usr/share/bash-completion/completions/ptw /usr/share/doc/ptw/copyright \
         /usr/share/ptw/profiles/seed-ddp.json /usr/share/ptw/data/regression.csv; do
  [ -f "$f" ] || fail "$f is not installed"
done

# Installed examples, run from a folder that is not theirs (their data paths are relative to
# the profile): a 2-rank DDP run on CSV data, and a profile given as the only argument.
mkdir -p /tmp/elsewhere && cd /tmp/elsewhere
runs=/tmp/ptw-runs
say "ptw --headless -p /usr/share/ptw/profiles/ddp-csv-regression.json --set hyper.max_steps=30"
ptw --headless -p /usr/share/ptw/profiles/ddp-csv-regression.json --set hyper.max_steps=30 --runs-dir "$runs" \
  --expect 'final.step == 30' --summary summary.json > run1.log 2>&1 || { cat run1.log; fail "the DDP example did not run"; }
grep -q '"status": *"finished"' summary.json || { cat run1.log summary.json; fail "the DDP example did not finish"; }
say "ptw --headless /usr/share/ptw/profiles/single-mlp.json --set hyper.max_steps=30"
ptw --headless /usr/share/ptw/profiles/single-mlp.json --set hyper.max_steps=30 --runs-dir "$runs" > run2.log 2>&1 ||
  { cat run2.log; fail "the single-process example did not run"; }
ptw runs --runs-dir "$runs" | tee runs.txt | sed 's/^/  /'
[ "$(grep -c " finished .* ${version#ptw } " runs.txt)" -eq 2 ] || fail "ptw runs does not list 2 finished runs of $version"
cd /

say "apt purge ptw"
apt-get purge -y -qq ptw > /tmp/purge.log 2>&1 || { cat /tmp/purge.log; fail "apt purge ptw failed"; }
tree > /tmp/tree-after
if ! diff /tmp/tree-before /tmp/tree-after > /tmp/tree.diff; then
  cat /tmp/tree.diff
  fail "the system's files differ from before the install (< before, > after the purge)"
fi
say "purged: the file tree is as before the install ($(wc -l < /tmp/tree-after) paths compared)"
EOF
chmod +x "$root/tmp/in-chroot.sh"
say "entering the chroot"
unshare --mount --propagation private bash -c '
  set -e
  root=$1
  mount -t proc proc "$root/proc"
  mount -t sysfs -o ro sysfs "$root/sys"
  mount -t tmpfs -o mode=1777 tmpfs "$root/dev/shm"
  exec chroot "$root" /tmp/in-chroot.sh' _ "$root" || fail "the package test in the chroot failed"
say "passed in $(($(date +%s) - started)) s"
