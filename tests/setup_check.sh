#!/usr/bin/env bash
# Setup.BuildSetBuildsThePackagesWithoutTheTestToolchain: `make package` installs
# `scripts/setup.sh --build`'s packages only. Checks that
#   - the Makefile's package target runs setup.sh --build (and not the full setup);
#   - every file the package build's configuration found (compilers, tools, CMake packages,
#     libraries: the /usr paths in its CMakeCache.txt) belongs to a package of that set or
#     one they depend on, so a machine with the set alone configures and builds;
#   - none of the test toolchain is in the set or pulled in by it;
#   - the full set (setup.sh) contains the build set.
set -euo pipefail
src=${1:?usage: setup_check.sh <source root>}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bad=0

package_recipe=$(make -s -n -C "$src" package 2>/dev/null)
grep -qx './scripts/setup.sh --build' <<<"$package_recipe" ||
  { echo "make package does not run ./scripts/setup.sh --build:"; echo "$package_recipe" | head -3; bad=1; }

"$src/scripts/setup.sh" --build --list >"$work/build_set"
"$src/scripts/setup.sh" --list >"$work/full_set"
missing=$(grep -vxFf "$work/full_set" "$work/build_set" || true)
[ -z "$missing" ] || { echo "in the build set but not the full one: $missing"; bad=1; }

# The build set and everything it depends on (installed or not).
# shellcheck disable=SC2046  # package names are words
apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
  --no-replaces --no-enhances $(cat "$work/build_set") 2>/dev/null |
  grep -v '^ ' | sed 's/:any$//; s/:amd64$//' | sort -u >"$work/closure"
for tool in libgtest-dev googletest libbenchmark-dev lintian redis-server prometheus wrk haproxy clang-14 clang-format; do
  if grep -qx "$tool" "$work/closure"; then echo "the build set installs $tool"; bad=1; fi
done

# The package build's configuration, as the Makefile's package target makes it.
cmake -S "$src" -B "$work/tree" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSLUICE_BUILD_TESTS=OFF -DCMAKE_INSTALL_PREFIX=/usr >"$work/configure.log" 2>&1 ||
  { cat "$work/configure.log"; exit 1; }
# The packages that own a path: as named, or (a symbolic link, /usr-merged /lib) resolved.
owners_of() {
  local real
  real=$(readlink -f "$1")
  for candidate in "$1" "$real" "${real#/usr}"; do
    if dpkg -S "$candidate" >"$work/owner" 2>/dev/null; then
      cut -d: -f1 "$work/owner" | tr ',' '\n' | tr -d ' ' | sort -u
      return
    fi
  done
}
checked=0
while read -r path; do
  case $path in /usr/include | /usr/lib | /usr/lib/x86_64-linux-gnu | /usr/bin/uname) continue ;; esac
  owners=$(owners_of "$path")
  [ -n "$owners" ] || { echo "no package owns $path"; bad=1; continue; }
  grep -qxFf "$work/closure" <<<"$owners" ||
    { echo "$path (package $(tr '\n' ' ' <<<"$owners")) is not in the build set or its dependencies"; bad=1; }
  checked=$((checked + 1))
done < <(grep -oE '=/usr/[^;]*' "$work/tree/CMakeCache.txt" | sed 's/^=//' | sort -u)
[ "$checked" -gt 20 ] || { echo "only $checked paths checked: the cache is not what this test expects"; bad=1; }
[ "$bad" -eq 0 ] && echo "setup.sh --build: $(wc -l <"$work/build_set") packages; $checked configured paths covered; no test tool"
exit "$bad"
