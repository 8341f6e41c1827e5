#!/usr/bin/env bash
# A Redis that is slow is worse than one that is down: this measures what checks cost
# while Redis stops answering. A private redis-server; `sluice bench` at concurrency 50
# with a 5 ms deadline runs for 6 s, and 2 s into the run Redis is paused for 2 s
# (CLIENT PAUSE 2000 ALL). The JSON line shows p50/p99/p999 over the whole run, and
# phase_* the same for the calls started during the pause (2.0-4.0 s into the measured
# period) with how many of them the failure policy decided; a first run without the
# pause is the reference measured alongside.
# Usage: bench/slow_redis.sh [open|closed|local]
set -euo pipefail
cd "$(dirname "$0")/.."
POLICY=${1:-open}
SLUICE=${SLUICE:-./build/bin/sluice}
[ -x "$SLUICE" ] || { echo "build first: make build" >&2; exit 2; }
source bench/lib.sh
start_private_redis
run() {
  "$SLUICE" bench --redis "redis://127.0.0.1:$port" --concurrency 50 --duration 6 --warmup 0.5 \
    --deadline-ms 5 --on-failure "$POLICY" --phase-start 2 --phase-length 2 --json
}
echo "reference (no pause):"
run
echo "with CLIENT PAUSE 2000 ALL two seconds in:"
( sleep 2.5; redis-cli -p "$port" CLIENT PAUSE 2000 ALL >/dev/null ) &
pauser=$!
run
wait "$pauser"  # not a bare `wait`: the private redis-server is a background job too
