#!/usr/bin/env bash
# Builds the sluiced container image from the Debian package (make image):
#   1. a Debian 12 base made by debootstrap (--variant=minbase) from Debian's archive, with
#      the run-time dependencies the package declares, cached as a tarball under build/image
#      (keyed on the suite, the mirror and those dependencies: a second run skips it);
#   2. that tarball imported into podman's store as localhost/sluice-base:<key>;
#   3. packaging/container/Containerfile built on it with the package: localhost/sluiced.
# Needs root (debootstrap, podman's system store) and the packages of
# `scripts/setup.sh --image`. No image registry is used.
#
# Usage: scripts/image.sh PACKAGE_DIR VERSION
#   PACKAGE_DIR holds sluiced_*.deb (make package); VERSION tags the image.
# Environment: DEBIAN_MIRROR (default: the first Debian URI apt is configured with, else
# http://deb.debian.org/debian), IMAGE (default localhost/sluiced), IMAGE_DIR (build/image).
set -euo pipefail

package_dir=${1:?usage: scripts/image.sh PACKAGE_DIR VERSION}
version=${2:?usage: scripts/image.sh PACKAGE_DIR VERSION}
here=$(cd "$(dirname "$0")/.." && pwd)
image=${IMAGE:-localhost/sluiced}
image_dir=${IMAGE_DIR:-$here/build/image}
suite=bookworm

say() { echo "image: $*"; }
die() {
  echo "image: $*" >&2
  exit 1
}

[ "$(id -u)" -eq 0 ] || die "debootstrap and podman's system store need root"
for tool in debootstrap podman dpkg-deb; do
  command -v "$tool" >/dev/null || die "$tool is missing: scripts/setup.sh --image"
done

debs=("$package_dir"/sluiced_*.deb)
if [ ${#debs[@]} -ne 1 ] || [ ! -f "${debs[0]}" ]; then
  die "want one sluiced_*.deb in $package_dir (make package), found: ${debs[*]}"
fi
deb=${debs[0]}

# The mirror apt already uses (deb822 or one-line sources), so that a machine behind a
# local mirror builds from it.
default_mirror() {
  local uri
  uri=$(sed -n 's/^URIs:[[:space:]]*\(\S*\/debian\)\/\?$/\1/p' /etc/apt/sources.list.d/*.sources \
    2>/dev/null | head -1)
  [ -n "$uri" ] || uri=$(sed -n 's/^deb[[:space:]]\+\(\S*\/debian\)\/\?[[:space:]].*/\1/p' \
    /etc/apt/sources.list 2>/dev/null | head -1)
  echo "${uri:-http://deb.debian.org/debian}"
}
mirror=${DEBIAN_MIRROR:-$(default_mirror)}

# The package's Depends as names for debootstrap's --include (versions are the suite's;
# dpkg -i in the Containerfile checks them). Alternatives take the first; a virtual package
# (libspdlog1.10-fmt9) is named by the package that provides it, as this machine's apt
# (the same suite) knows it: debootstrap resolves real packages only.
names=$(dpkg-deb -f "$deb" Depends | tr ',' '\n' | sed 's/|.*//; s/(.*)//; s/[[:space:]]//g' |
  grep -v '^$' | sort -u)
# shellcheck disable=SC2086  # names are words
real=$(apt-cache show --no-all-versions $names 2>/dev/null | sed -n 's/^Package: //p' | sort -u)
depends=$(
  for name in $names; do
    if grep -qx "$name" <<<"$real"; then
      echo "$name"
    else
      apt-cache showpkg "$name" | sed -n '/^Reverse Provides:/,$p' | sed -n '2s/ .*//p' | grep . ||
        die "no package provides $name (a dependency of $deb)"
    fi
  done | sort -u | paste -sd, -
)
# The base's recipe: what it is made of and how (the cleaning below included).
base_recipe() {
  printf '%s\n' "$suite" "$mirror" "$depends"
  sed -n '/^make_base()/,/^}/p' "$0"
}
key=$(base_recipe | sha256sum | cut -c1-12)
base_tar=$image_dir/base-$suite-$key.tar
base_image=localhost/sluice-base:$suite-$key

# debootstrap into a scratch directory, then the tarball of it without what an image
# never reads: apt's package lists and downloaded packages (apt-get update fetches them),
# documentation but the copyright files, manual pages, translations.
make_base() {
  local rootfs=$image_dir/rootfs.tmp
  rm -rf "$rootfs"
  mkdir -p "$image_dir"
  say "debootstrap --variant=minbase $suite from $mirror, with: $depends"
  debootstrap --variant=minbase --include="$depends" "$suite" "$rootfs" "$mirror" \
    >"$image_dir/debootstrap.log" 2>&1 ||
    die "debootstrap failed (last lines of $image_dir/debootstrap.log):$(tail -5 "$image_dir/debootstrap.log")"
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/* "$rootfs"/var/cache/debconf/*-old \
    "$rootfs"/usr/share/man "$rootfs"/usr/share/info "$rootfs"/usr/share/locale/* \
    "$rootfs"/var/log/*.log "$rootfs"/var/log/apt/* "$rootfs"/tmp/*
  find "$rootfs"/usr/share/doc -mindepth 2 ! -name copyright ! -type d -delete
  find "$rootfs"/usr/share/doc -mindepth 1 -type d -empty -delete
  tar -C "$rootfs" --numeric-owner --xattrs -cf "$base_tar.tmp" .
  mv "$base_tar.tmp" "$base_tar"
  rm -rf "$rootfs"
}

start=$(date +%s)
if [ -f "$base_tar" ]; then
  say "base $base_tar (cached)"
else
  make_base
fi
if ! podman image exists "$base_image"; then
  say "podman import $base_tar as $base_image"
  podman import --quiet "$base_tar" "$base_image" >/dev/null
fi

# The build context: the Containerfile, its healthcheck, the package.
context=$image_dir/context
rm -rf "$context"
mkdir -p "$context"
cp "$here"/packaging/container/Containerfile "$here"/packaging/container/healthcheck.sh "$context"/
cp "$deb" "$context"/sluiced.deb

# runc where it is installed: crun 1.8 (Debian 12's podman default) refuses a host whose
# cgroups are mounted in hybrid mode (v1 controllers and a v2 hierarchy), which runc runs
# in. The docker format keeps the HEALTHCHECK (the OCI image format has no field for it).
runtime=()
if command -v runc >/dev/null; then runtime=(--runtime runc); fi
say "podman build $image:$version"
podman build "${runtime[@]}" --format docker --network none --build-arg BASE="$base_image" \
  --tag "$image:$version" --tag "$image:latest" --file "$context"/Containerfile "$context" \
  >"$image_dir/build.log" 2>&1 ||
  die "podman build failed (last lines of $image_dir/build.log):$(tail -5 "$image_dir/build.log")"
say "$image:$version $(podman image inspect --format '{{.Id}} {{.Size}}' "$image:$version" |
  awk '{printf "%.12s, %d MB", $1, $2 / 1000000}'), in $(($(date +%s) - start)) s"
