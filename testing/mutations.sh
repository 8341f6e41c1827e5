#!/usr/bin/env bash
# The fault matrix's mutation run: does the matrix fail when failure handling breaks?
#
# Each testing/mutations/<name>.patch is one deliberate defect of the library (the
# breaker never opens, heartbeats wait on the breaker, ...). This script copies the
# checkout (its committed tree plus uncommitted changes to tracked files) into a
# throwaway git worktree, builds fault_matrix_tests there once as it is and once per
# mutation (the patch applied with `git apply`, reverted after), runs a set of cells of
# the matrix each time, runs the cells that failed once more, and prints which failed
# both times. The run without a mutation must fail no cell; every mutation must fail at
# least one twice, else the matrix does not notice that defect (exit 1). The product's
# code carries no trace of the mutations.
#
# Usage: testing/mutations.sh [--all] [--keep DIR] [name ...]
#   --all       every cell of the matrix instead of the default set (CELLS below)
#   --keep DIR  copy each run's ctest log (the failed cells' messages) to DIR
#   name        only these mutations (default: every patch in testing/mutations/)
#
# Not part of `make test`: a build and a matrix run per mutation. The throwaway worktree
# and its build are removed at the end; ccache (CCACHE_BASEDIR) shares the objects of
# the checkout's own builds, so each build recompiles only what its patch touches.
set -euo pipefail

root="$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
cd "$root"

# The default cells: checks under the faults that silence the store, under every policy;
# lease heartbeats (beside checks) and releases under them; local budgets under the
# local policy; checks on a Cluster with one primary stalled.
CELLS='SingleRedis/FaultMatrix\.Cell/(Check_(Latency|Stall|Blackhole|Sigstop)_(open|closed|local)|LeaseHeartbeat_(Latency|Stall|Blackhole|Sigstop)_closed|LeaseRelease_(Stall|Blackhole|RefuseConnections|Sigstop)_closed|LocalBudget_(Stall|Sigstop)_local)( |$)|Cluster/ClusterFaultMatrix\.Cell/Check_PrimaryStalled_(closed|local)( |$)'

all=0
keep=""
names=()
while [ $# -gt 0 ]; do
  case "$1" in
    --all) all=1 ;;
    --keep) keep="$(mkdir -p "$2" && cd "$2" && pwd)"; shift ;;
    -h | --help) sed -n '2,21p' "$0"; exit 0 ;;
    *) names+=("$1") ;;
  esac
  shift
done
if [ "$all" = 1 ]; then CELLS='FaultMatrix\.Cell/'; fi
if [ "${#names[@]}" = 0 ]; then
  for p in testing/mutations/*.patch; do names+=("$(basename "$p" .patch)"); done
fi
for name in "${names[@]}"; do
  [ -f "testing/mutations/$name.patch" ] || { echo "no testing/mutations/$name.patch" >&2; exit 2; }
done

work="$(mktemp -d "${TMPDIR:-/tmp}/sluice-mutations.XXXXXX")"
tree="$work/tree"
cleanup() {
  git -C "$root" worktree remove --force "$tree" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The checkout as it is: a commit of the uncommitted changes to tracked files (HEAD if
# there are none), without touching the checkout.
rev="$(git stash create)"
rev="${rev:-HEAD}"
git worktree add --detach "$tree" "$rev" >/dev/null 2>&1
export CCACHE_BASEDIR="$tree" CCACHE_NOHASHDIR=1
(cd "$tree" && cmake --preset release >"$work/configure.log" 2>&1) ||
  { cat "$work/configure.log"; exit 2; }

# Builds the matrix as the tree is now and runs the cells matching $1; prints the failed
# cells' ctest names, one a line.
run_cells() {
  local regex="$1" log="$2"
  (cd "$tree" && cmake --build --preset release --target fault_matrix_tests >"$log.build" 2>&1) ||
    { tail -30 "$log.build" >&2; echo "BUILD-FAILED"; return; }
  (cd "$tree" && ctest --preset release -L fault -R "$regex" -j2 --output-on-failure >"$log" 2>&1) ||
    true
  if [ -n "$keep" ]; then cp "$log" "$keep/"; fi
  # ctest's list of failed tests: "<n> - <name>  # GetParam() = ... (Failed)".
  sed -n '/The following tests FAILED/,$s/^[[:space:]]*[0-9]* - \([^ ]*\) .*(.*)$/\1/p' "$log"
}

# The cells that fail twice in a row: the cells matching $1 are run, and those that
# failed are run again. A cell that fails once only (a loaded machine can stretch a
# call past its deadline) is printed after a "once:" line.
failing_cells() {
  local name="$1" first again
  first="$(run_cells "$CELLS" "$work/$name.log")"
  if [ -z "$first" ] || [ "$first" = BUILD-FAILED ]; then echo "$first"; return; fi
  local regex
  # Each name and the space before ctest's "# GetParam() = ..." (CMake's regular
  # expressions take at most nine groups).
  regex="$(echo "$first" | sed 's/[.]/\\./g; s/^/^/; s/$/ /' | paste -sd'|' -)"
  again="$(run_cells "$regex" "$work/$name.again.log")"
  comm -12 <(echo "$first" | sort) <(echo "$again" | sort)
  local once
  once="$(comm -23 <(echo "$first" | sort) <(echo "$again" | sort))"
  if [ -n "$once" ]; then echo "once:"; echo "$once"; fi
}

# "a, b (failed once only: c)", the cells' names without their suite's.
describe() {
  local cells
  cells="$(echo "$1" | sed 's/^[^/]*\/[A-Za-z]*FaultMatrix\.Cell\///')"
  local twice once
  twice="$(echo "$cells" | sed '/^once:$/,$d' | paste -sd, - | sed 's/,/, /g')"
  once="$(echo "$cells" | sed -n '/^once:$/,${/^once:$/d;p}' | paste -sd, - | sed 's/,/, /g')"
  echo "${twice:-none}${once:+ (failed once only: $once)}"
}

summary() {  # how many cells ran, from ctest's last line
  sed -n 's/.*tests passed, \([0-9]*\) tests failed out of \([0-9]*\).*/\2 cells, \1 failed/p' "$1"
}

status=0
echo "cells: $CELLS"
started=$(date +%s)
baseline="$(failing_cells none)"
echo
echo "| mutation | cells that failed twice in a row |"
echo "|---|---|"
row="$(describe "$baseline")"
echo "| (none) | $row ($(summary "$work/none.log")) |"
if [ "${row%% *}" != none ]; then status=1; fi
if [ "$baseline" = BUILD-FAILED ]; then exit 2; fi
for name in "${names[@]}"; do
  (cd "$tree" && git apply "$root/testing/mutations/$name.patch")
  failed="$(failing_cells "$name")"
  (cd "$tree" && git apply -R "$root/testing/mutations/$name.patch")
  row="$(describe "$failed")"
  if [ "$failed" = BUILD-FAILED ]; then
    status=1
    row="the build failed"
  elif [ "${row%% *}" = none ]; then
    status=1
    row="NONE: the matrix does not notice this defect; $row"
  fi
  echo "| $name | $row ($(summary "$work/$name.log")) |"
done
echo
echo "took $(( $(date +%s) - started )) s"
exit "$status"
