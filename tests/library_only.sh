#!/usr/bin/env bash
# BuildOptions.LibraryAloneNeedsNoServiceOrCliPackages: configures the tree with the CLI,
# the service and the tests off, and checks that the configuration looked for none of
# their packages (gRPC++, protobuf, yaml-cpp, spdlog, nghttp2, CLI11, nlohmann-json) and
# made none of their targets; that, naming no build type, it is an optimised build
# (RelWithDebInfo, as the release preset), not CMake's flagless -O0; then that the tests
# refuse to build without the CLI.
set -euo pipefail
src=${1:?usage: library_only.sh <source root>}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake -S "$src" -B "$work/lib" -G Ninja -DSLUICE_BUILD_TESTS=OFF -DSLUICE_BUILD_CLI=OFF \
  -DSLUICE_BUILD_SERVICE=OFF >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; exit 1; }
bad=0
for package in gRPC Protobuf yaml-cpp spdlog CLI11 nlohmann_json; do
  if grep -q "^${package}_DIR:" "$work/lib/CMakeCache.txt"; then
    echo "the library-only configuration looked for ${package}"; bad=1
  fi
done
if grep -q "^NGHTTP2_FOUND:" "$work/lib/CMakeCache.txt"; then
  echo "the library-only configuration looked for nghttp2"; bad=1
fi
build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$work/lib/CMakeCache.txt")
if [ "$build_type" != RelWithDebInfo ]; then
  echo "the library-only configuration's build type is '${build_type}', not RelWithDebInfo"; bad=1
fi
targets=$(cmake --build "$work/lib" --target help)
for target in sluice_cli sluiced sluiced_lib; do
  if grep -q "^${target}:" <<<"$targets"; then echo "target ${target} was made"; bad=1; fi
done
grep -q "^sluice:" <<<"$targets" || { echo "the library target is missing"; bad=1; }
# The check must be able to fail: the default configuration does look for gRPC.
cmake -S "$src" -B "$work/all" -G Ninja -DSLUICE_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=Debug >/dev/null 2>&1
for probe in "^gRPC_DIR:" "^NGHTTP2_FOUND:" "^CLI11_DIR:" "^CMAKE_BUILD_TYPE:STRING=Debug$"; do
  grep -q "$probe" "$work/all/CMakeCache.txt" || { echo "probe: the full configuration has no ${probe#^}"; bad=1; }
done
if cmake -S "$src" -B "$work/refused" -G Ninja -DSLUICE_BUILD_CLI=OFF >/dev/null 2>&1; then
  echo "the tests were configured without the CLI"; bad=1
fi
[ "$bad" -eq 0 ] && echo "library-only configuration: RelWithDebInfo, no service or CLI package, no such target"
exit "$bad"
