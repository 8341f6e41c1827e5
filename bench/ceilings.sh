#!/usr/bin/env bash
# Every algorithm's figures in one run on this machine (docs/benchmarks.md, docs/algorithms.md):
# a private redis-server on a free loopback port (stopped at exit, by pid), then per
# algorithm:
#   ceiling   redis-benchmark -c 50 -P 128 running the algorithm's script by EVALSHA over
#             10k ids, and the script's Redis CPU per call (INFO commandstats usec_per_call)
#   sluice    sluice bench --concurrency 50 over the same ids, its ratio to the ceiling
#             and the server's whole CPU per decision
#   refused   the same ceiling with limit 10: after warm-up almost every call is refused
#   memory    MEMORY USAGE of one id's key after 10 admitted requests (limit 100 per 60 s)
# Usage: bench/ceilings.sh [seconds per run, default 5] [algorithm ...]
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_RUN=${1:-5}
shift || true
ALGORITHMS=("$@")
[ ${#ALGORITHMS[@]} -gt 0 ] || ALGORITHMS=(fixed_window sliding_window sliding_log token_bucket gcra)
SLUICE=${SLUICE:-./build/bin/sluice}
[ -x "$SLUICE" ] || { echo "build first: make build" >&2; exit 2; }

source bench/lib.sh
start_private_redis
cli() { redis-cli -p "$port" "$@"; }
lua_script fixed_window >/dev/null || exit 2  # the scripts are read from the build
# ceiling <sha> <suffix> <limit>: "rps usec_per_call"
ceiling() {
  cli CONFIG RESETSTAT >/dev/null
  local rps
  rps=$(redis-benchmark -p "$port" -c 50 -P 128 -n $((120000 * SECONDS_PER_RUN)) -r 10000 --csv \
        EVALSHA "$1" 1 "sluicebench:{bench:user:__rand_int__}:$2" 0 "" 1 "$3" 60000 0 0 2>/dev/null |
        tail -1 | tr -d '"' | cut -d, -f2)
  echo "$rps $(usec_per_call)"
}

echo "redis-server $(redis-server --version | sed -n 's/.*v=\([0-9.]*\).*/\1/p') on 127.0.0.1:$port, $(nproc) cores; ${SECONDS_PER_RUN}s per run"
printf '\n%-15s %10s %9s %12s %7s %11s %10s %9s %8s\n' algorithm ceiling "us/call" "sluice c=50" ratio "cpu us/dec" "refused/s" "us/call" "bytes/id"
for a in "${ALGORITHMS[@]}"; do
  s=$(suffix "$a")
  sha=$(cli SCRIPT LOAD "$(lua_script "$a")")
  cli FLUSHALL >/dev/null
  read -r ceil ceil_us <<<"$(ceiling "$sha" "$s" 1000000000)"
  cli FLUSHALL >/dev/null
  out=$("$SLUICE" bench --redis "redis://127.0.0.1:$port" --algorithm "$a" --concurrency 50 \
        --duration "$SECONDS_PER_RUN" --keys 10000 --json)
  rate=$(json "$out" decisions_per_s); cpu=$(json "$out" redis_cpu_us_per_decision)
  cli FLUSHALL >/dev/null
  read -r ref ref_us <<<"$(ceiling "$sha" "$s" 10)"
  cli FLUSHALL >/dev/null
  for _ in $(seq 1 10); do
    cli EVALSHA "$sha" 1 "sluicebench:{bench:user:mem}:$s" 0 "" 1 100 60000 0 0 >/dev/null
  done
  mem=$(cli MEMORY USAGE "sluicebench:{bench:user:mem}:$s")
  printf '%-15s %10.0f %9s %12.0f %7.2f %11.2f %10.0f %9s %8s\n' "$a" "$ceil" "$ceil_us" "$rate" \
    "$(awk -v r="$rate" -v c="$ceil" 'BEGIN{print r/c}')" "$cpu" "$ref" "$ref_us" "$mem"
done
echo
echo "ceiling: redis-benchmark -c 50 -P 128 on the script, all admitted (limit 1e9 per 60 s);"
echo "us/call: Redis time inside the script (INFO commandstats); cpu us/dec: the server's"
echo "whole CPU per sluice decision; refused/s: the ceiling at limit 10 (nearly all refused)."
