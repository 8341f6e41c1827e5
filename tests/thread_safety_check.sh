#!/usr/bin/env bash
# Style.ThreadSafety: clang's thread-safety analysis over the library's sources (the
# SLUICE_GUARDED_BY / SLUICE_REQUIRES annotations of src/core/mutex.h), as errors, so
# a member read without its mutex fails `make test` even though the build uses g++.
# (`cmake --preset clang` builds everything with clang and the same analysis.)
set -euo pipefail
root=${1:?usage: thread_safety_check.sh <source root> <build dir>}
# The build directory holds the generated headers (generated/batch_manifest.h).
build=$(cd "${2:?usage: thread_safety_check.sh <source root> <build dir>}" && pwd)
cd "$root"
clang=$(command -v clang++-14 || command -v clang++ || true)
[ -n "$clang" ] || { echo "clang++ is not installed (scripts/setup.sh installs clang-14)"; exit 1; }
flags=(-fsyntax-only -std=c++20 -Wthread-safety -Werror=thread-safety -Iinclude -Isrc -I"$build" -isystem /usr/include/hiredis)

# The check must be able to fail: a guarded member written without its mutex is caught.
probe=$(mktemp --suffix=.cc)
trap 'rm -f "$probe"' EXIT
cat >"$probe" <<'PROBE'
#include "core/mutex.h"
struct Probe {
  sluice::internal::Mutex mu;
  int n SLUICE_GUARDED_BY(mu) = 0;
  void Bad() { n = 1; }
};
PROBE
if "$clang" "${flags[@]}" "$probe" >/dev/null 2>&1; then
  echo "the thread-safety analysis did not flag an unguarded write"; exit 1
fi

# The test fixtures' locks too: their .cc files, and their headers through one unit.
headers=$(mktemp --suffix=.cc)
trap 'rm -f "$probe" "$headers"' EXIT
for h in testing/*.h; do echo "#include \"$h\""; done >"$headers"
mapfile -t files < <(find src -name '*.cc' ! -name '*_test.cc' | sort; ls testing/*.cc)
printf '%s\n' "${files[@]}" "$headers" | xargs -P 2 -I{} "$clang" "${flags[@]}" -I. {}
echo "thread-safety analysis: ${#files[@]} files and testing/*.h, no finding"
