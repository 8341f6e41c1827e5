#!/usr/bin/env bash
# The fault matrix's mutation run: does the matrix fail when failure handling breaks?
#
# Each testing/mutations/<name>.patch is one deliberate defect of the library (the
# breaker never opens, heartbeats wait on the breaker, ...). This script copies the
# checkout (its committed tree plus uncommitted changes to tracked files) into a
# throwaway git worktree, builds fault_matrix_tests there once as it is and once per
# mutation (the patch applied with `git apply`, reverted after), runs a set of cells of
# the matrix each time, and prints which cells failed. The run without a mutation must
# fail no cell; every mutation must fail at least one, else the matrix does not notice
# that defect (exit 1). The product's code carries no trace of the mutations.
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
CELLS='SingleRedis/FaultMatrix\.Cell/(Check_(Latency|Stall|Blackhole|Sigstop)_(open|closed|local)|LeaseHeartbeat_(Latency|Stall|Blackhole|Sigstop)_closed|LeaseRelease_(Stall|Blackhole|Sigstop)_closed|LocalBudget_(Stall|Sigstop)_local)( |$)|Cluster/ClusterFaultMatrix\.Cell/Check_PrimaryStalled_(closed|local)( |$)'

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

# Builds the matrix as the tree is now and runs the cells; prints the failed cells'
# names, one a line.
run_cells() {
  local log="$1"
  (cd "$tree" && cmake --build --preset release --target fault_matrix_tests >"$log.build" 2>&1) ||
    { tail -30 "$log.build" >&2; echo "BUILD-FAILED"; return; }
  (cd "$tree" && ctest --preset release -L fault -R "$CELLS" -j2 --output-on-failure >"$log" 2>&1) ||
    true
  if [ -n "$keep" ]; then cp "$log" "$keep/"; fi
  # ctest's list of failed tests: "<n> - <name>  # GetParam() = ... (Failed)".
  sed -n '/The following tests FAILED/,$s/^[[:space:]]*[0-9]* - \([^ ]*\) .*(.*)$/\1/p' "$log" |
    sed 's/^[^/]*\/[A-Za-z]*FaultMatrix\.Cell\///'
}

join() { echo "$1" | paste -sd, - | sed 's/,/, /g'; }

summary() {  # how many cells ran, from ctest's last line
  sed -n 's/.*tests passed, \([0-9]*\) tests failed out of \([0-9]*\).*/\2 cells, \1 failed/p' "$1"
}

status=0
echo "cells: $CELLS"
started=$(date +%s)
baseline="$(run_cells "$work/none.log")"
echo
echo "| mutation | cells that failed |"
echo "|---|---|"
echo "| (none) | $(join "${baseline:-none}") ($(summary "$work/none.log")) |"
if [ -n "$baseline" ]; then status=1; fi
for name in "${names[@]}"; do
  (cd "$tree" && git apply "$root/testing/mutations/$name.patch")
  failed="$(run_cells "$work/$name.log")"
  (cd "$tree" && git apply -R "$root/testing/mutations/$name.patch")
  if [ -z "$failed" ]; then
    status=1
    failed="NONE: the matrix does not notice this defect"
  fi
  echo "| $name | $(join "$failed") ($(summary "$work/$name.log")) |"
done
echo
echo "took $(( $(date +%s) - started )) s"
exit "$status"
