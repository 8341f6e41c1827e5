#!/usr/bin/env bash
# Waiting lease acquires against a client polling every 50 ms, same run, on a private
# redis-server (docs/benchmarks.md, "Waiting acquires"): hand-overs per second when a cap
# is saturated, the time from a release to the grant that took its slot (p50, p99), and
# Redis's script calls per grant (acquires, waiters' re-checks and leaves).
# Usage: bench/lease_wait.sh [seconds=5] [workers=16] [slots=4] [hold_ms=10]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
BIN=${LEASE_WAIT:-build/bin/lease_wait}
[ -x "$BIN" ] || { echo "build first: cmake --build --preset release --target lease_wait" >&2; exit 2; }
start_private_redis
script_calls() {
  redis-cli -p "$port" INFO commandstats | tr -d '\r' |
    sed -n 's/^cmdstat_eval\(sha\)\{0,1\}:calls=\([0-9]*\).*/\2/p' | awk '{s += $1} END {print s + 0}'
}
for mode in wait poll; do
  redis-cli -p "$port" CONFIG RESETSTAT >/dev/null
  line=$("$BIN" "redis://127.0.0.1:$port" "$mode" "${1:-5}" "${2:-16}" "${3:-4}" "${4:-10}")
  grants=$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(d["handovers_per_s"]*d["seconds"])' "$line")
  echo "$line" | sed "s/}\$/,\"redis_script_calls_per_grant\":$(python3 -c "print(round($(script_calls)/max(1.0,$grants),2))")}/"
done
