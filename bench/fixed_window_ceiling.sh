#!/usr/bin/env bash
# The fixed-window figures of docs/benchmarks.md, all measured in one run on this machine:
#   1. starts a private redis-server on a free loopback port (stopped at exit, by pid);
#   2. the ceiling: redis-benchmark -c 50 -P 128 running the same fixed_window.lua by
#      EVALSHA over 10k ids (measured before and after sluice; the mean is the reference);
#   3. the round trip at concurrency 1: redis-benchmark -c 1 -P 1, same script;
#   4. sluice bench at concurrency 1, 50 and 500 over the same 10k ids;
#   5. prints each figure, its ratio to the ceiling, Redis CPU per call (INFO
#      commandstats usec_per_call) and what the client adds at p99 at concurrency 1.
# Usage: bench/fixed_window_ceiling.sh [seconds per run, default 5]
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_RUN=${1:-5}
SLUICE=${SLUICE:-./build/bin/sluice}
LUA=src/algo/fixed_window.lua
[ -x "$SLUICE" ] || { echo "build first: make build" >&2; exit 2; }

source bench/lib.sh
start_private_redis

cli() { redis-cli -p "$port" "$@"; }
sha=$(cli SCRIPT LOAD "$(cat "$LUA")")
# Same script, arguments and key space as `sluice bench` (prefix sluicebench, 10k ids,
# limit 1e9 per 60 s: every call is admitted, the write path is measured).
rb() {  # rb <clients> <pipeline> <requests>
  redis-benchmark -p "$port" -c "$1" -P "$2" -n "$3" -r 10000 --csv \
    EVALSHA "$sha" 1 'sluicebench:{bench:user:__rand_int__}:fw' 0 "" 1 1000000000 60000 0 0 2>/dev/null |
    tail -1 | tr -d '"'
}
field() { echo "$1" | cut -d, -f"$2"; }

echo "redis-server $(redis-server --version | sed -n 's/.*v=\([0-9.]*\).*/\1/p') on 127.0.0.1:$port, $(nproc) cores; ${SECONDS_PER_RUN}s per run"

cli CONFIG RESETSTAT >/dev/null
ceiling1=$(rb 50 128 $((150000 * SECONDS_PER_RUN)))
c1_cpu=$(usec_per_call)
cli CONFIG RESETSTAT >/dev/null
rtt=$(rb 1 1 $((15000 * SECONDS_PER_RUN)))

declare -A rate p50 p99 p999 cpu
for c in 1 50 500; do
  cli CONFIG RESETSTAT >/dev/null
  out=$("$SLUICE" bench --redis "redis://127.0.0.1:$port" --algorithm fixed_window \
        --concurrency "$c" --duration "$SECONDS_PER_RUN" --keys 10000 --json)
  rate[$c]=$(json "$out" decisions_per_s); p50[$c]=$(json "$out" p50_us)
  p99[$c]=$(json "$out" p99_us); p999[$c]=$(json "$out" p999_us); cpu[$c]=$(usec_per_call)
  errors=$(json "$out" errors)
  [ "$errors" = "0" ] || echo "warning: sluice bench at concurrency $c saw $errors errors" >&2
done
cli CONFIG RESETSTAT >/dev/null
ceiling2=$(rb 50 128 $((150000 * SECONDS_PER_RUN)))

ceil=$(awk -v a="$(field "$ceiling1" 2)" -v b="$(field "$ceiling2" 2)" 'BEGIN{printf "%.0f", (a+b)/2}')
printf '\n%-44s %12s %9s %9s %9s %9s %12s\n' "run" "calls/s" "ratio" "p50 us" "p99 us" "p999 us" "redis us/call"
printf '%-44s %12.0f %9s %9s %9s %9s %12s\n' "redis-benchmark -c 50 -P 128 (ceiling, before)" "$(field "$ceiling1" 2)" "" "" "" "" "$c1_cpu"
printf '%-44s %12.0f %9s %9s %9s %9s %12s\n' "redis-benchmark -c 50 -P 128 (ceiling, after)" "$(field "$ceiling2" 2)" "" "" "" "" ""
printf '%-44s %12.0f %9s %9.0f %9.0f %9s %12s\n' "redis-benchmark -c 1 -P 1 (round trip)" "$(field "$rtt" 2)" "" \
  "$(awk -v v="$(field "$rtt" 5)" 'BEGIN{print v*1000}')" "$(awk -v v="$(field "$rtt" 7)" 'BEGIN{print v*1000}')" "" ""
for c in 1 50 500; do
  printf '%-44s %12.0f %9.2f %9s %9s %9s %12s\n' "sluice bench --concurrency $c" "${rate[$c]}" \
    "$(awk -v r="${rate[$c]}" -v c="$ceil" 'BEGIN{print r/c}')" "${p50[$c]}" "${p99[$c]}" "${p999[$c]}" "${cpu[$c]}"
done
added=$(awk -v s="${p99[1]}" -v r="$(field "$rtt" 7)" 'BEGIN{printf "%.0f", s - r*1000}')
echo
echo "ceiling (mean of before/after): $ceil calls/s"
echo "client's addition to the round trip at concurrency 1, p99: ${added} us (sluice p99 ${p99[1]} us - redis-benchmark p99)"
