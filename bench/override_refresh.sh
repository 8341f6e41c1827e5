#!/usr/bin/env bash
# What the runtime overrides' refresh costs Redis (docs/benchmarks.md, "Runtime overrides:
# the refresh"): each client reads its limiters' override hashes once a second, one
# EVALSHA of src/algo/overrides.lua (as the build embeds it) per 128 limiters. A private
# redis-server on a free loopback port (stopped at exit, by pid); redis-benchmark -c 4
# sends the read as a client's refresh sends it; Redis's time inside the script per call
# (INFO commandstats usec_per_call):
#   1 limiter, unchanged       the steady state: the counter held is the hash's own
#   128 limiters, unchanged    one call for a client's 128 limiters
#   128 limiters, none exists  a client whose limiters have no override at all
#   1 limiter, 1,000 changed   a change: the whole hash (the bound, 1,000 overrides) read
# Usage: bench/override_refresh.sh [calls per run, default 20000]
set -euo pipefail
cd "$(dirname "$0")/.."
CALLS=${1:-20000}
source bench/lib.sh
start_private_redis
cli() { redis-cli -p "$port" "$@"; }
script=$(lua_script overrides) || exit 2
sha=$(cli SCRIPT LOAD "$script")
counter=1700000000000
# 128 limiters' hashes of 10 overrides each, and one of 1,000.
python3 - "$counter" <<'PY' | cli --pipe >/dev/null
import sys
c = sys.argv[1]
far = 99999999999999
for l in range(128):
    k = "sluicebench:{overrides}:lim%d" % l
    for i in range(10):
        print('HSET %s tenant:%d "500 60000 %d %s 3 anabench"' % (k, i, far, c))
    print('HSET %s "" %s' % (k, c))
    print("PEXPIRE %s 3600000" % k)
k = "sluicebench:{overrides}:big"
for i in range(1000):
    print('HSET %s tenant:%d "500 60000 %d %s 3 anabench"' % (k, i, far, c))
print('HSET %s "" %s' % (k, c))
print("PEXPIRE %s 3600000" % k)
PY
# run <label> <keys...> -- <known...>
run() {
  local label=$1; shift
  local keys=() known=()
  while [ "$1" != -- ]; do keys+=("$1"); shift; done; shift
  known=("$@")
  cli CONFIG RESETSTAT >/dev/null
  redis-benchmark -p "$port" -c 4 -P 1 -n "$CALLS" --csv \
    EVALSHA "$sha" "${#keys[@]}" "${keys[@]}" r "" "${known[@]}" >/dev/null 2>&1
  printf '%-28s %9s\n' "$label" "$(usec_per_call)"
}
echo "redis-server $(redis-server --version | sed -n 's/.*v=\([0-9.]*\).*/\1/p') on 127.0.0.1:$port, $(nproc) cores; $CALLS calls per run; load average $(cut -d" " -f1-3 /proc/loadavg)"
printf '\n%-28s %9s\n' variant "us/call"
run "1 limiter, unchanged" "sluicebench:{overrides}:lim0" -- "$counter"
many=() counters=() missing=()
for l in $(seq 0 127); do
  many+=("sluicebench:{overrides}:lim$l"); counters+=("$counter")
  missing+=("sluicebench:{overrides}:none$l")
done
run "128 limiters, unchanged" "${many[@]}" -- "${counters[@]}"
run "128 limiters, none exists" "${missing[@]}" -- "${counters[@]/$counter/0}"
run "1 limiter, 1,000 changed" "sluicebench:{overrides}:big" -- -1
