#!/usr/bin/env bash
# Hot ids: one id, several client processes (`sluice bench --processes`, each
# its own Client and connection, as separate servers would be) against one private
# redis-server, per mode: shared (every check to Redis), prefetch (local budgets) and
# sync (periodic sync, 100 ms). Two runs per mode and repetition:
#   throughput  a limit that never binds (1e9 per second): decisions/s, its ratio to the
#               shared mode of the same repetition, script calls per 1,000 decisions;
#   accuracy    a limit that binds (LIMIT per 1 s aligned window, demand far above it):
#               overshoot (admitted beyond the limit, summed over the windows wholly
#               inside the measured period, and the largest single window's),
#               under-admission (limit - admitted, summed over those windows), script
#               calls per 1,000 decisions.
# Each figure is the median of RUNS repetitions (modes alternate within a repetition).
# Usage: bench/hot_key.sh [runs, default 3] [seconds per measurement, default 3]
# Env: SLUICE (default ./build/release/bin/sluice), PROCESSES (4), CONCURRENCY (per
# process, 50), LIMIT (20000), ALGORITHM (fixed_window; or sliding_window, token_bucket,
# gcra: local budgets only, so MODES defaults to "shared prefetch", and no accuracy run:
# the bench counts admissions per aligned fixed window; the bounds of the others are
# checked by tests/hot_key_redis_test.cc). A bucket whose limit never binds stays full,
# where slices cannot live (docs/design.md §7): expect little gain there.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
find_sluice
RUNS=${1:-3}
SECONDS_PER_RUN=${2:-3}
PROCESSES=${PROCESSES:-4}
CONCURRENCY=${CONCURRENCY:-50}
LIMIT=${LIMIT:-20000}
ALGORITHM=${ALGORITHM:-fixed_window}
if [ "$ALGORITHM" = fixed_window ]; then
  MODES=(${MODES:-shared prefetch sync})
  ALIGNED=--aligned
else
  MODES=(${MODES:-shared prefetch})
  ALIGNED=
fi
start_private_redis

bench() {  # bench <mode> <limit>
  "$SLUICE" bench --redis "redis://127.0.0.1:$port" --keys 1 --processes "$PROCESSES" \
    --concurrency "$CONCURRENCY" --mode "$1" --limit "$2" --window-ms 1000 $ALIGNED \
    --algorithm "$ALGORITHM" \
    --duration "$SECONDS_PER_RUN" --warmup 1 --json
}
median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "nan"; else print a[int((NR + 1) / 2)]}'; }

declare -A figures
for run in $(seq 1 "$RUNS"); do
  for mode in "${MODES[@]}"; do
    out=$(bench "$mode" 1000000000)
    figures[$mode.rate]+="$(json "$out" decisions_per_s) "
    figures[$mode.calls]+="$(json "$out" store_calls_per_1000) "
    [ -n "$ALIGNED" ] || continue
    out=$(bench "$mode" "$LIMIT")
    figures[$mode.over]+="$(json "$out" overshoot) "
    figures[$mode.over_max]+="$(json "$out" overshoot_max) "
    figures[$mode.under]+="$(json "$out" under_admission) "
    figures[$mode.windows]+="$(json "$out" windows_measured) "
    figures[$mode.bound_calls]+="$(json "$out" store_calls_per_1000) "
  done
  shared_rate=$(echo "${figures[shared.rate]}" | awk '{print $NF}')
  for mode in "${MODES[@]}"; do
    rate=$(echo "${figures[$mode.rate]}" | awk '{print $NF}')
    figures[$mode.ratio]+="$(awk -v a="$rate" -v b="$shared_rate" 'BEGIN {printf "%.2f", a / b}') "
  done
done

med() { echo "${figures[$1]:-}" | tr ' ' '\n' | grep -v '^$' | median; }
echo "$ALGORITHM: one id, $PROCESSES client processes x $CONCURRENCY in flight, medians of $RUNS runs of" \
  "${SECONDS_PER_RUN} s; load average $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -z "$ALIGNED" ]; then
  printf "%-9s %14s %10s %16s\n" mode "decisions/s" "vs shared" "calls/1000"
  for mode in "${MODES[@]}"; do
    printf "%-9s %14.0f %9.2fx %16.2f\n" "$mode" "$(med "$mode.rate")" "$(med "$mode.ratio")" \
      "$(med "$mode.calls")"
  done
  exit 0
fi
printf "%-9s %14s %10s %16s | %-38s %16s\n" mode "decisions/s" "vs shared" "calls/1000" \
  "limit $LIMIT/s: overshoot (max window)" "under-admission"
for mode in "${MODES[@]}"; do
  printf "%-9s %14.0f %9.2fx %16.2f | %14s (%s) over %s windows %16s   calls/1000 %s\n" "$mode" \
    "$(med "$mode.rate")" "$(med "$mode.ratio")" "$(med "$mode.calls")" "$(med "$mode.over")" \
    "$(med "$mode.over_max")" "$(med "$mode.windows")" "$(med "$mode.under")" \
    "$(med "$mode.bound_calls")"
done
