#!/usr/bin/env bash
# Style.ClangFormat: fails when clang-format (with the repository's .clang-format) would
# change any C++ file of the tree, naming each such file and the first lines it would
# change. Fix with: clang-format -i <file> (or every file: see docs/development.md, Layout).
set -euo pipefail
root=${1:?usage: format_check.sh <source root>}
cd "$root"
command -v clang-format >/dev/null || { echo "clang-format is not installed (scripts/setup.sh installs it)"; exit 1; }

# The check must be able to fail: a badly formatted snippet is caught.
if printf 'int  main( ){return 0;}\n' | clang-format --dry-run --Werror --assume-filename=probe.cc >/dev/null 2>&1; then
  echo "clang-format --dry-run --Werror did not flag a badly formatted snippet"; exit 1
fi

dirs=()
for d in src include cli testing tests bench service examples; do [ -d "$d" ] && dirs+=("$d"); done
mapfile -t files < <(find "${dirs[@]}" -type f \( -name '*.h' -o -name '*.cc' \) | sort)
bad=0
for f in "${files[@]}"; do
  if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then
    echo "not formatted: $f"
    clang-format "$f" | diff -u "$f" - | sed -n '3,12p' || true
    bad=$((bad + 1))
  fi
done
echo "format check: ${#files[@]} files, $bad not formatted"
[ "$bad" -eq 0 ]
