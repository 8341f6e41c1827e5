#!/usr/bin/env bash
# Package.DebInstallRunPurge: packages a built tree with CPack's DEB generator (no
# compiling: the tree must be built already, as `make test` leaves it), then, as root,
# does with the three packages what an operator does: lintian on each, install them,
# run the installed sluiced the way its unit does (as the sluiced user, the unit's
# ExecStart with /etc/default/sluiced) against a private redis-server, reload and stop
# it, build a consumer with pkg-config, remove, purge. Exit 77 (CTest's skip) when not
# root or when one of the packages is already installed here (it would be replaced).
set -euo pipefail
src=${1:?usage: deb_test.sh <source root> <build dir>}
build=${2:?usage: deb_test.sh <source root> <build dir>}
SKIP=77
PACKAGES=(sluiced sluice-tools libsluice-dev)
UNIT=/lib/systemd/system/sluiced.service

if [ "$(id -u)" -ne 0 ]; then
  echo "skipped: installing packages needs root (make test runs as root)"
  exit $SKIP
fi
installed() { dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null | grep -qv '^not-installed$'; }
for p in "${PACKAGES[@]}"; do
  if installed "$p"; then
    echo "skipped: $p is installed on this machine; the test would replace and purge it"
    exit $SKIP
  fi
done
for tool in cpack lintian systemd-analyze setpriv redis-server curl pkg-config readelf; do
  command -v "$tool" >/dev/null || { echo "FAIL: $tool is missing (scripts/setup.sh installs it)"; exit 1; }
done

fail() {
  echo "FAIL: $*"
  exit 1
}
step() { printf '%4ss  %s\n' "$SECONDS" "$*"; }

work=$(mktemp -d /tmp/sluice_deb.XXXXXX)
chmod 755 "$work"  # apt reads the .deb files as its own unprivileged user
REDIS_PID="" SLUICED_PID="" MADE_POLICY="" USER_BEFORE=""
getent passwd sluiced >/dev/null && USER_BEFORE=yes
cleanup() {
  local status=$?
  if [ -n "$SLUICED_PID" ]; then kill -9 "$SLUICED_PID" 2>/dev/null && wait "$SLUICED_PID" 2>/dev/null || true; fi
  if [ -n "$REDIS_PID" ]; then kill "$REDIS_PID" 2>/dev/null && wait "$REDIS_PID" 2>/dev/null || true; fi
  rm -f /etc/sluiced/pkgtest.yaml
  for p in "${PACKAGES[@]}"; do
    if installed "$p"; then dpkg --purge "$p" >/dev/null 2>&1 || echo "could not purge $p"; fi
  done
  if [ -n "$MADE_POLICY" ]; then rm -f /usr/sbin/policy-rc.d; fi
  # The package leaves its system user on purge (packaging/debian/postrm); the test
  # leaves the machine as it found it.
  if [ -z "$USER_BEFORE" ] && getent passwd sluiced >/dev/null; then
    userdel sluiced 2>/dev/null || true
    getent group sluiced >/dev/null && groupdel sluiced 2>/dev/null || true
  fi
  rm -rf "$work"
  exit $status
}
trap cleanup EXIT

# --- Package the tree. cpack builds `preinstall` (all targets) first: nothing may be
# left to compile.
pending=$(cmake --build "$build" -- -n 2>&1 | tail -1)
[ "$pending" = "ninja: no work to do." ] ||
  fail "$build is not fully built ($pending): build it first (make test does)"
step "cpack"
cpack --config "$build/CPackConfig.cmake" -B "$work/debs" >"$work/cpack.log" 2>&1 ||
  { cat "$work/cpack.log"; fail "cpack"; }
version=$(sed -n 's/^set(CPACK_PACKAGE_VERSION "\(.*\)")$/\1/p' "$build/CPackConfig.cmake")
release=$(sed -n 's/^set(CPACK_DEBIAN_PACKAGE_RELEASE "\(.*\)")$/\1/p' "$build/CPackConfig.cmake")
arch=$(dpkg --print-architecture)
debs=()
for p in "${PACKAGES[@]}"; do
  deb="$work/debs/${p}_${version}-${release}_${arch}.deb"
  [ -f "$deb" ] || fail "no $deb (cpack made: $(ls "$work/debs"))"
  debs+=("$deb")
done
dpkg-deb -f "${debs[0]}" Depends | tee "$work/depends"
grep -q 'libc6' "$work/depends" || fail "sluiced's Depends has no shared library (shlibdeps)"
grep -q 'adduser' "$work/depends" || fail "sluiced's Depends lacks adduser (its postinst runs it)"

# --- lintian: no error on any package. The tags left are warnings, listed with their
# reasons in docs/development.md (The package test).
step "lintian"
lintian --tag-display-limit 0 "${debs[@]}" >"$work/lintian.log" 2>&1 || true
cat "$work/lintian.log"
grep -q '^E: ' "$work/lintian.log" && fail "lintian reports errors"

# --- Install as an operator does (every dependency is on a machine set up by
# scripts/setup.sh: nothing is downloaded). Where systemd runs, the postinst would start
# the service on its default ports: policy-rc.d keeps deb-systemd-invoke from it.
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
  chmod 755 /usr/sbin/policy-rc.d
  MADE_POLICY=yes
fi
step "apt-get install ./*.deb"
# apt-get's --no-download refuses local files: a dry run first shows that apt would
# install these three and nothing else.
apt-get install -s --no-install-recommends "${debs[@]}" >"$work/apt.log" 2>&1 ||
  { cat "$work/apt.log"; fail "apt-get install -s"; }
others=$(awk '$1 == "Inst" {print $2}' "$work/apt.log" | grep -vxE 'sluiced|sluice-tools|libsluice-dev' || true)
[ -z "$others" ] || fail "the packages need more than this machine has (scripts/setup.sh): $others"
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
  "${debs[@]}" >"$work/apt.log" 2>&1 || { cat "$work/apt.log"; fail "apt-get install"; }
for p in "${PACKAGES[@]}"; do
  dpkg -L "$p" >>"$work/files"
  [ -f "/usr/share/doc/$p/copyright" ] || fail "$p has no /usr/share/doc/$p/copyright"
  # Machine-readable (DEP-5), the licence by its SPDX name.
  head -1 "/usr/share/doc/$p/copyright" | grep -q '^Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/' ||
    fail "$p's copyright file is not in the machine-readable format"
  grep -qx 'License: Apache-2.0' "/usr/share/doc/$p/copyright" || fail "$p's copyright names no Apache-2.0"
  [ -f "/usr/share/doc/$p/changelog.Debian.gz" ] || fail "$p has no changelog.Debian.gz"
done
conffiles=$(dpkg-query -W -f='${Conffiles}\n' sluiced | awk 'NF {print $1}')
[ "$(sort <<<"$conffiles" | tr '\n' ' ')" = "/etc/default/sluiced /etc/sluiced/example.yaml " ] ||
  fail "sluiced's conffiles are: $conffiles"
# The environment file is where the admin token goes: root's alone.
[ "$(stat -c '%a %U' /etc/default/sluiced)" = "600 root" ] ||
  fail "/etc/default/sluiced is $(stat -c '%a %U' /etc/default/sluiced), not 600 root"

# The installed binaries are this tree's, stripped.
bin_dir=$(sed -n 's/^SLUICE_BIN_DIR:[A-Z]*=//p' "$build/CMakeCache.txt")
build_id() { readelf -n "$1" | awk '/Build ID/ {print $3}'; }
for pair in "/usr/bin/sluiced $bin_dir/sluiced" "/usr/bin/sluice $bin_dir/sluice"; do
  set -- $pair
  [ "$(build_id "$1")" = "$(build_id "$2")" ] || fail "$1 is not $2 (build ids differ)"
  readelf -S "$1" | grep -qE '\.symtab|\.debug_' && fail "$1 is not stripped"
done
[ "$(sluiced --version)" = "sluiced $version" ] || fail "sluiced --version: $(sluiced --version)"
[ "$(sluice --version)" = "sluice $version" ] || fail "sluice --version: $(sluice --version)"

# The system user and its state directory.
uid=$(id -u sluiced) || fail "postinst made no sluiced user"
[ "$uid" -lt 1000 ] || fail "sluiced's uid $uid is not a system uid"
[ "$(stat -c '%U:%G %a' /var/lib/sluiced)" = "sluiced:sluiced 750" ] ||
  fail "/var/lib/sluiced: $(stat -c '%U:%G %a' /var/lib/sluiced)"

step "systemd-analyze verify $UNIT"
systemd-analyze verify "$UNIT" >"$work/verify.log" 2>&1 || { cat "$work/verify.log"; fail "systemd-analyze verify"; }
grep -q 'sluiced' "$work/verify.log" && { cat "$work/verify.log"; fail "systemd-analyze verify warns about the unit"; }

# --- --check-config on the shipped config, and on a broken copy of it.
out=$(sluiced --check-config /etc/sluiced) || fail "--check-config /etc/sluiced: $out"
grep -q '^example: 0 limit(s)' <<<"$out" || fail "--check-config /etc/sluiced: $out"
cp -r /etc/sluiced "$work/broken"
printf 'descriptors: 5\n' >>"$work/broken/example.yaml"
set +e
out=$(sluiced --check-config "$work/broken" 2>&1)
code=$?
set -e
[ "$code" -eq 1 ] || fail "--check-config on a broken file exited $code: $out"
grep -qE "^$work/broken/example.yaml:[0-9]+:[0-9]+: " <<<"$out" ||
  fail "--check-config on a broken file does not say file:line:column: $out"
echo "broken config: $out"

. "$src/tests/package/deb_service.sh"
run_service
run_documented_command

# --- A consumer built with pkg-config only, against the installed libsluice-dev.
step "pkg-config consumer"
[ "$(pkg-config --modversion sluice)" = "$version" ] || fail "pkg-config --modversion sluice"
[ "$(pkg-config --variable=prefix sluice)" = /usr ] || fail "sluice.pc's prefix is not /usr"
flags=$(pkg-config --cflags --libs sluice)
echo "pkg-config --cflags --libs sluice: $flags"
# shellcheck disable=SC2086  # the flags are words
g++ -o "$work/consumer" "$src/tests/package/main.cc" $flags ||
  fail "the consumer does not build with sluice.pc's flags"
"$work/consumer" || fail "the consumer failed"

# --- Remove: only the conffiles stay (and the state, /var/lib/sluiced, until purge).
step "apt-get remove"
DEBIAN_FRONTEND=noninteractive apt-get remove -y -q "${PACKAGES[@]}" >"$work/apt.log" 2>&1 ||
  { cat "$work/apt.log"; fail "apt-get remove"; }
while read -r f; do
  if [ -f "$f" ] && ! grep -qx "$f" <<<"$conffiles"; then fail "$f is left after remove"; fi
done <"$work/files"
for f in $conffiles; do [ -f "$f" ] || fail "conffile $f went with remove"; done
[ "$(dpkg-query -W -f='${db:Status-Status}' sluiced)" = config-files ] || fail "sluiced is not in config-files state"

# --- Purge: the configuration, the state and the unit's enablement go.
step "apt-get purge"
DEBIAN_FRONTEND=noninteractive apt-get purge -y -q sluiced >"$work/apt.log" 2>&1 ||
  { cat "$work/apt.log"; fail "apt-get purge"; }
for d in /etc/sluiced /etc/default/sluiced /var/lib/sluiced; do
  [ ! -e "$d" ] || fail "$d is left after purge"
done
left=$(find /etc/systemd/system -name 'sluiced.service' 2>/dev/null)
[ -z "$left" ] || fail "left after purge: $left"
for p in "${PACKAGES[@]}"; do installed "$p" && fail "$p is still known to dpkg after purge"; done
step "done: packaged, checked, installed, served, removed and purged"
