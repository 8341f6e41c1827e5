#!/usr/bin/env bash
# Quota shares at fleet scale, on one private redis-server on this machine
# (bench/quota_scale.cc; figures in docs/benchmarks.md and docs/rlqs.md):
#  1. Redis's CPU per quota call (INFO commandstats: EVALSHA's usec_per_call) on one bucket
#     of 10, 100, 1,000 and 10,000 clients, median of RUNS runs each; with BEFORE=<git
#     revision>, that revision's quota_shares.lua too (the same calls, its argument
#     format), for a before/after table.
#  2. FLEET runs (default 3) of 10,000 clients on one bucket through the library, spread over
#     three sluice::Client (what three sluiced would call), reports every 5 s, and a wave
#     of 1,000 new clients within one second at 40 s: each run's JSON line.
# Builds nothing (make build, or cmake --build --preset release --target quota_scale);
# stops what it started, by pid.
#
#   bench/rlqs_scale.sh
# Env: RUNS (3), FLEET (3: fleet runs; 0 for none), SIZES ("10 100 1000 10000"),
#      BEFORE (a git revision: measure its script too), BIN (./build/bin),
#      FLEET_ARGS (passed to `quota_scale fleet <port>`: clients seconds rate wave
#      interval_ms instances deadline_ms; default "10000 70 10000 1000 5000 3 5").
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-./build/bin}
RUNS=${RUNS:-3} FLEET=${FLEET:-3} SIZES=${SIZES:-"10 100 1000 10000"}
FLEET_ARGS=${FLEET_ARGS:-"10000 70 10000 1000 5000 3 5"}
TOOL=$BIN/quota_scale
for tool in redis-server redis-cli python3 "$TOOL"; do
  command -v "$tool" >/dev/null || { echo "missing $tool (make build; scripts/setup.sh)" >&2; exit 1; }
done
source bench/lib.sh
start_private_redis
WORK=$(mktemp -d /tmp/rlqs_scale.XXXXXX)
trap 'kill "$redis_pid" 2>/dev/null; wait "$redis_pid" 2>/dev/null; rm -rf "$redis_dir" "$WORK"' EXIT

embedded_script kQuotaSharesLua >"$WORK/after.lua"
scripts="after"
if [ -n "${BEFORE:-}" ]; then
  { git show "$BEFORE:src/algo/clock.lua"; git show "$BEFORE:src/algo/quota_shares.lua"; } \
    >"$WORK/before.lua"
  scripts="before after"
fi

median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

echo "Redis CPU per quota call (EVALSHA usec_per_call, median of $RUNS runs; $(date -u +%F), $(nproc) cores)"
printf '%-8s %10s %10s %10s\n' script clients recorded usec/call
for s in $scripts; do
  keys=2
  [ "$s" = before ] && keys=1
  for n in $SIZES; do
    : >"$WORK/runs"
    for _ in $(seq 1 "$RUNS"); do
      "$TOOL" cost "$port" "$WORK/$s.lua" "$keys" "$n" >>"$WORK/runs"
    done
    usec=$(sed -n 's/.*"usec_per_call":\([0-9.]*\).*/\1/p' "$WORK/runs" | median)
    recorded=$(sed -n 's/.*"recorded":\([0-9]*\).*/\1/p' "$WORK/runs" | tail -1)
    printf '%-8s %10s %10s %10s\n' "$s" "$n" "$recorded" "$usec"
  done
done

for i in $(seq 1 "$FLEET"); do
  # shellcheck disable=SC2086 # FLEET_ARGS is a list of arguments
  echo "fleet run $i: $("$TOOL" fleet "$port" $FLEET_ARGS)"
done
