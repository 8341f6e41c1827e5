#!/usr/bin/env bash
# What the per-minute history of live leases (the support console's chart; concurrency.lua,
# History) costs Redis per lease acquire, counted in instructions with callgrind
# (independent of the machine's load): the concurrency script as the build embeds it
# against the same script with its note_live calls taken out, on a private
# redis-server under valgrind on a free loopback port (stopped by pid). Each variant is run
# N1 and then N2 times (a fresh server each); the difference of the totals over N2 - N1 is
# one call's cost, start-up cancelled out. Two workloads:
#   acquire    acquires on 10,000 ids (redis-benchmark -r), each granted (limit 1,000,000,
#              lease ttl 60 s): nearly every call is its id's first, so it also creates
#              the id's history (HSET, PEXPIRE): the dearest case
#   heartbeat  heartbeats of one live lease on each of 100 ids, each extending it: after
#              an id's first of the minute, the history is read (HGET) and left as it is,
#              what a holder's heartbeats cost in steady state
# Usage: bench/lease_history_cost.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
command -v valgrind >/dev/null || { echo "valgrind not found" >&2; exit 2; }
with=$(lua_script concurrency) || exit 2
without=$(printf '%s' "$with" | python3 -c '
import re, sys
s = sys.stdin.read()
calls = re.findall(r"\n *note_live\(.*\)\n", s)
assert len(calls) == 3, "the concurrency script changed: update bench/lease_history_cost.sh"
for c in calls:
    s = s.replace(c, "\n")
print(s, end="")')
work=$(mktemp -d)
vg_pid=""
trap '[ -n "$vg_pid" ] && kill "$vg_pid" 2>/dev/null; rm -rf "$work"' EXIT
# instructions <script text> <calls> <acquire|heartbeat>: a whole server run's total.
instructions() {
  local p
  for _ in $(seq 1 50); do
    p=$((20000 + RANDOM % 40000))
    if ! (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null; then break; fi
  done
  valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" \
    redis-server --port "$p" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" \
    >"$work/vg.log" 2>&1 &
  vg_pid=$!
  local up=""
  for _ in $(seq 1 600); do
    redis-cli -p "$p" ping >/dev/null 2>&1 && { up=1; break; }
    kill -0 "$vg_pid" 2>/dev/null || break  # exited: the port was taken meanwhile
    sleep 0.1
  done
  if [ -z "$up" ]; then
    kill "$vg_pid" 2>/dev/null; wait "$vg_pid" 2>/dev/null || true; vg_pid=""
    starts=$((starts + 1))
    [ "$starts" -lt 5 ] || { echo "redis-server under valgrind did not start" >&2; exit 2; }
    instructions "$@"  # another port
    return
  fi
  local sha
  sha=$(redis-cli -p "$p" SCRIPT LOAD "$1")
  if [ "$3" = acquire ]; then
    redis-benchmark -p "$p" -c 4 -P 16 -n "$2" -r 10000 EVALSHA "$sha" 1 \
      "sluicebench:{bench:acct:__rand_int__}:cc" 0 "" "tok__rand_int__" 1000000 60000 \
      >/dev/null 2>&1
  else
    # One lease per id (redis-benchmark's __rand_int__ is 12 digits), live for an hour.
    python3 -c '
import time
until = int(time.time() * 1000) + 3600000
for i in range(100):
    print("ZADD sluicebench:{bench:acct:%012d}:cc %d 1:tok" % (i, until))
    print("PEXPIRE sluicebench:{bench:acct:%012d}:cc 3600000" % i)' |
      redis-cli -p "$p" --pipe >/dev/null
    redis-benchmark -p "$p" -c 4 -P 16 -n "$2" -r 100 EVALSHA "$sha" 1 \
      "sluicebench:{bench:acct:__rand_int__}:cc" 1 "" "1:tok" "" 7200000 >/dev/null 2>&1
  fi
  redis-cli -p "$p" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
  wait "$vg_pid" 2>/dev/null || true
  vg_pid=""
  sed -n 's/^summary: \([0-9]*\).*/\1/p' "$work/cg.out"
}
N1=2000 N2=12000 starts=0
echo "redis-server $(redis-server --version | sed -n 's/.*v=\([0-9.]*\).*/\1/p'), $(nproc) cores"
printf '%-26s %12s   (callgrind, whole server, per EVALSHA; %d - %d calls)\n' \
  variant "instr/call" "$N2" "$N1"
for call in acquire heartbeat; do
  for v in without with; do
    script=$without
    [ "$v" = with ] && script=$with
    a=$(instructions "$script" "$N1" "$call")
    b=$(instructions "$script" "$N2" "$call")
    printf '%-26s %12.0f\n' "$call, history $v" \
      "$(awk -v a="$a" -v b="$b" -v n=$((N2 - N1)) 'BEGIN{print (b-a)/n}')"
  done
done
