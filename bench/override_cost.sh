#!/usr/bin/env bash
# What a runtime override read costs Redis per decision, two ways (docs/benchmarks.md,
# "Runtime overrides: the cost of reading them"): a private redis-server on a free
# loopback port (stopped at exit, by pid), the fixed_window script as the build embeds it,
# redis-benchmark -c 50 -P 128 over 10k ids, all admitted, Redis's time inside the script
# per call (INFO commandstats usec_per_call):
#   plain          the script as it is (1 key)
#   read, absent   the script that first GETs the id's override key (2 keys, same hash
#                  tag), which does not exist: what every decision would pay
#   read, present  the same with every id's override key holding "limit window expires_at",
#                  parsed (string.match) into the limit in force
#   refresh        the other way: a client keeps the overrides of a limiter in memory and
#                  reads the limiter's override hash (1,000 entries, the bound) once a
#                  second: HGETALL's time per call, once per client per limiter per second
# Timings need a quiet machine; with INSTRUCTIONS=1 each variant's script is also counted
# in instructions per call under valgrind --tool=callgrind (independent of the load): a
# redis-server runs it N1 and then N2 times (two servers, by pid), and the difference of
# their totals over N2 - N1 is one call's cost, start-up cancelled out.
# Usage: [INSTRUCTIONS=1] bench/override_cost.sh [seconds per run, default 4]
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_RUN=${1:-4}
source bench/lib.sh
start_private_redis
cli() { redis-cli -p "$port" "$@"; }
plain=$(lua_script fixed_window) || exit 2
# The same script, reading KEYS[2] before it decides (the limit line is the first use).
read_absent=$(printf '%s' "$plain" | python3 -c '
import sys
s = sys.stdin.read()
line = "local limit = ARGV[4] + 0\n"
assert s.count(line) == 1, "the fixed_window script changed: update bench/override_cost.sh"
print(s.replace(line, line + """local ov = redis.call("GET", KEYS[2])
if ov then
  local l = string.match(ov, "^(%d+) %d+ %d+$")
  if l then limit = l + 0 end
end
"""), end="")')

# run <sha> <keys> <limit>: "rps usec_per_call"
run() {
  local sha=$1 nkeys=$2 keys
  if [ "$nkeys" = 1 ]; then keys=("sluicebench:{bench:user:__rand_int__}:fw2")
  else keys=("sluicebench:{bench:user:__rand_int__}:fw2" "sluicebench:{bench:user:__rand_int__}:ov"); fi
  cli CONFIG RESETSTAT >/dev/null
  local rps
  rps=$(redis-benchmark -p "$port" -c 50 -P 128 -n $((120000 * SECONDS_PER_RUN)) -r 10000 --csv \
        EVALSHA "$sha" "$nkeys" "${keys[@]}" 0 "" 1 "$3" 60000 0 0 2>/dev/null |
        tail -1 | tr -d '"' | cut -d, -f2)
  echo "$rps $(usec_per_call)"
}

echo "redis-server $(redis-server --version | sed -n 's/.*v=\([0-9.]*\).*/\1/p') on 127.0.0.1:$port, $(nproc) cores; ${SECONDS_PER_RUN}s per run; load average $(cut -d" " -f1-3 /proc/loadavg)"
sha_plain=$(cli SCRIPT LOAD "$plain")
sha_read=$(cli SCRIPT LOAD "$read_absent")
printf '\n%-16s %10s %9s\n' variant "calls/s" "us/call"
cli FLUSHALL >/dev/null
read -r r u <<<"$(run "$sha_plain" 1 1000000000)"; printf '%-16s %10.0f %9s\n' plain "$r" "$u"
cli FLUSHALL >/dev/null
read -r r u <<<"$(run "$sha_read" 2 1000000000)"; printf '%-16s %10.0f %9s\n' "read, absent" "$r" "$u"
cli FLUSHALL >/dev/null
# Every id's override key present (redis-benchmark's __rand_int__ is 12 digits wide).
python3 -c '
for i in range(10000):
    k = "sluicebench:{bench:user:%012d}:ov" % i
    print("SET %s \"1000000000 60000 99999999999999\" PX 3600000" % k)' | cli --pipe >/dev/null
read -r r u <<<"$(run "$sha_read" 2 1000000000)"; printf '%-16s %10.0f %9s\n' "read, present" "$r" "$u"
cli FLUSHALL >/dev/null
python3 -c '
print("DEL sluicebench:ov:{bench}")
for i in range(1000):
    print("HSET sluicebench:ov:{bench} tenant:%d \"500 60000 99999999999999\"" % i)
print("PEXPIRE sluicebench:ov:{bench} 3600000")' | cli --pipe >/dev/null
cli CONFIG RESETSTAT >/dev/null
redis-benchmark -p "$port" -c 4 -P 1 -n 2000 --csv HGETALL "sluicebench:ov:{bench}" >/dev/null 2>&1
hgetall=$(cli INFO commandstats | tr -d '\r' | sed -n 's/^cmdstat_hgetall:.*usec_per_call=\([0-9.]*\).*/\1/p')
printf '%-16s %10s %9s  (HGETALL of 1,000 overrides, once per client per limiter per second)\n' \
  refresh - "$hgetall"

[ "${INSTRUCTIONS:-0}" = 1 ] || exit 0
command -v valgrind >/dev/null || { echo "valgrind not found" >&2; exit 2; }
work=$(mktemp -d)
vg_pid=""
trap 'kill "$redis_pid" 2>/dev/null; [ -n "$vg_pid" ] && kill "$vg_pid" 2>/dev/null; rm -rf "$redis_dir" "$work"' EXIT
# instructions <script text> <keys: 1 or 2> <populate: 0 or 1> <calls>: a whole server run's total.
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
  for _ in $(seq 1 600); do redis-cli -p "$p" ping >/dev/null 2>&1 && break; sleep 0.1; done
  local sha keys
  sha=$(redis-cli -p "$p" SCRIPT LOAD "$1")
  if [ "$3" = 1 ]; then
    python3 -c '
for i in range(10000):
    print("SET sluicebench:{bench:user:%012d}:ov \"1000000000 60000 99999999999999\" PX 3600000" % i)' |
      redis-cli -p "$p" --pipe >/dev/null
  fi
  if [ "$2" = 1 ]; then keys=("sluicebench:{bench:user:__rand_int__}:fw2")
  else keys=("sluicebench:{bench:user:__rand_int__}:fw2" "sluicebench:{bench:user:__rand_int__}:ov"); fi
  redis-benchmark -p "$p" -c 4 -P 16 -n "$4" -r 10000 EVALSHA "$sha" "$2" "${keys[@]}" 0 "" 1 \
    1000000000 60000 0 0 >/dev/null 2>&1
  redis-cli -p "$p" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
  wait "$vg_pid" 2>/dev/null || true
  vg_pid=""
  sed -n 's/^summary: \([0-9]*\).*/\1/p' "$work/cg.out"
}
N1=2000 N2=12000
printf '\n%-16s %14s   (callgrind, whole server, per EVALSHA; %d - %d calls)\n' variant "instr/call" "$N2" "$N1"
for v in "plain 1 0" "read,absent 2 0" "read,present 2 1"; do
  read -r name nkeys populate <<<"$v"
  script=$plain
  [ "$nkeys" = 2 ] && script=$read_absent
  a=$(instructions "$script" "$nkeys" "$populate" "$N1")
  b=$(instructions "$script" "$nkeys" "$populate" "$N2")
  printf '%-16s %14.0f\n' "${name/,/, }" "$(awk -v a="$a" -v b="$b" -v n=$((N2 - N1)) 'BEGIN{print (b-a)/n}')"
done
