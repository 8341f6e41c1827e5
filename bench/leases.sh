#!/usr/bin/env bash
# Concurrency leases against the peer, in one run on one private redis-server:
#   ceiling    redis-benchmark -c 50 -P 128 on the acquire script alone (EVALSHA, 10k ids,
#              random tokens, lease ttl 1 ms: each acquire finds at most its last, expired
#              lease, and prunes it) and on ZREM alone (of absent members: nearly free, so
#              their combination is only an upper bound); then the like-for-like cycle
#              ceiling: build/.../lease_ceiling, an ideal hiredis client (4 connections,
#              batches of 64 acquires, then the 64 releases of the members they granted)
#   sluice     sluice bench --algorithm concurrency --concurrency 50: acquire + release
#              cycles/s, its ratio to the cycle ceiling, Redis CPU per cycle
#   peer       redis-semaphore (Node) tryAcquire + release at 50 in flight, same Redis
#              (needs PEERS=<dir with node_modules>; skipped with a note otherwise)
#   heartbeats sluice holding 10k and 100k leases with a heartbeat every HB_MS (20 s):
#              heartbeats/s and the Redis CPU they cost
# Usage: PEERS=/tmp/peers bench/leases.sh [seconds per run, default 5]
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-5}
HB_MS=${HB_MS:-20000}
SLUICE=${SLUICE:-./build/bin/sluice}
[ -x "$SLUICE" ] || { echo "build first: make build" >&2; exit 2; }
CEILING=${CEILING:-$(dirname "$SLUICE")/lease_ceiling}
[ -x "$CEILING" ] || { echo "no $CEILING: build the lease_ceiling target" >&2; exit 2; }
source bench/lib.sh
start_private_redis
cli() { redis-cli -p "$port" "$@"; }
url="redis://127.0.0.1:$port"
echo "redis-server $(redis-server --version | sed -n 's/.*v=\([0-9.]*\).*/\1/p') on 127.0.0.1:$port, $(nproc) cores; ${SECS}s per run"

sha=$(cli SCRIPT LOAD "$(cat src/algo/concurrency.lua)")
n=$((100000 * SECS))
bench_rps() { redis-benchmark -p "$port" -c 50 -P 128 -n "$n" -r 10000 --csv "$@" 2>/dev/null | tail -1 | tr -d '"' | cut -d, -f2; }
cli CONFIG RESETSTAT >/dev/null
acq=$(bench_rps EVALSHA "$sha" 1 "sluicebench:{bench:user:__rand_int__}:cc" 0 "" __rand_int__ 1000000000 1)
acq_us=$(usec_per_call)
cli CONFIG RESETSTAT >/dev/null
rel=$(bench_rps ZREM "sluicebench:{bench:user:__rand_int__}:cc" "1:__rand_int__")
rel_us=$(cli INFO commandstats | tr -d '\r' | sed -n 's/^cmdstat_zrem:.*usec_per_call=\([0-9.]*\).*/\1/p')
bound=$(awk -v a="$acq" -v r="$rel" 'BEGIN{printf "%.0f", 1/(1/a+1/r)}')
printf '\nscripts     acquire %.0f/s (%s us/call)  release %.0f/s (%s us/call)  upper bound %s cycles/s\n' "$acq" "$acq_us" "$rel" "$rel_us" "$bound"
cli FLUSHALL >/dev/null
ceil=$(json "$("$CEILING" "$port" "$sha" "$SECS" 4 64)" cycles_per_s)
printf 'ceiling     %s cycles/s (lease_ceiling: ideal pipelined client, same script and ZREM)\n' "$ceil"
cli FLUSHALL >/dev/null

out=$("$SLUICE" bench --redis "$url" --algorithm concurrency --concurrency 50 --duration "$SECS" --keys 10000 --json)
rate=$(json "$out" decisions_per_s)
printf 'sluice      %.0f cycles/s = %.2f x ceiling; p99 %s us; Redis: acquire %.2f us/call, release %.2f us/call, %.2f us CPU per cycle; refused %s\n' \
  "$rate" "$(awk -v r="$rate" -v c="$ceil" 'BEGIN{print r/c}')" "$(json "$out" p99_us)" \
  "$(json "$out" redis_acquire_us_per_call)" "$(json "$out" redis_release_us_per_call)" \
  "$(json "$out" redis_cpu_us_per_cycle)" "$(json "$out" acquires_refused)"
cli FLUSHALL >/dev/null

if [ -n "${PEERS:-}" ] && [ -d "$PEERS/node_modules/redis-semaphore" ]; then
  peer=$(REDIS_PORT=$port REDIS_PID=$redis_pid NODE_PATH=$PEERS/node_modules node ../shared/peers/peers_bench.js sem 50 "$SECS")
  prate=$(json "$peer" ops_per_s)
  printf 'peer        redis-semaphore %s cycles/s (p99 %s ms, redis CPU %s%%); sluice / peer = %.2f\n' \
    "$prate" "$(json "$peer" p99_ms)" "$(json "$peer" server_cpu_pct)" "$(awk -v s="$rate" -v p="$prate" 'BEGIN{print s/p}')"
  cli FLUSHALL >/dev/null
else
  echo "peer        skipped: set PEERS to a directory where 'npm install ioredis redis-semaphore rate-limiter-flexible' ran"
fi

for leases in 10000 100000; do
  out=$("$SLUICE" bench --redis "$url" --algorithm concurrency --concurrency 500 --keys "$leases" \
        --heartbeat-leases "$leases" --heartbeat-ms "$HB_MS" --duration 1 --json)
  printf 'heartbeats  %6d leases every %d ms: %.0f heartbeats/s, %.1f us/call in the script, %.1f us server CPU each, %.1f%% of a core (held at end %s)\n' \
    "$leases" "$HB_MS" "$(json "$out" heartbeats_per_s)" "$(json "$out" redis_heartbeat_us_per_call)" \
    "$(json "$out" redis_cpu_us_per_heartbeat)" "$(json "$out" redis_cpu_percent)" "$(json "$out" leases_held_at_end)"
  cli FLUSHALL >/dev/null
done
