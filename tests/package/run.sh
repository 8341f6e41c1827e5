#!/usr/bin/env bash
# PackageConfig.ConsumerBuildsAndRuns: installs the built tree into a temporary prefix,
# then builds and runs the consumer two ways, as docs/library.md shows, neither naming a
# C++ standard of its own (g++ 12 defaults to C++17; the installed package must bring
# C++20): the CMake project beside this script (find_package(sluice), sluice::sluice),
# and plain `g++ main.cc $(pkg-config --cflags --libs sluice)`.
set -euo pipefail
build_dir=$1
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
cmake -S "$here" -B "$work/build" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/build"
"$work/build/consumer"

libdir=$(dirname "$(find "$work/prefix" -name sluice.pc -print -quit)")
flags=$(PKG_CONFIG_PATH=$libdir pkg-config --cflags --libs sluice)
echo "pkg-config --cflags --libs sluice: $flags"
# shellcheck disable=SC2086  # the flags are words
g++ -o "$work/pkgconfig_consumer" "$here/main.cc" $flags
"$work/pkgconfig_consumer"
