#!/usr/bin/env bash
# Audit and repair at scale (what they aim at: audit >= 200k keys/s with bounded
# memory, repair of 100k leaked keys <= 2 s), on a private redis-server on a free
# loopback port (stopped at exit, by pid):
#   1. seeds 1,000,000 keys under prefix "bench" with a server-side Lua loop (fixed-window
#      strings, 5% sliding logs, 1% concurrency sets; all with an expiry of 1 h), and
#      100,000 fixed-window keys WITHOUT an expiry under prefix "leak";
#   2. `sluice audit --json` of "bench": keys/s and the process's peak RSS;
#   3. `sluice repair --apply` of "leak": its wall time (scan + read + EXPIRE NX), then an
#      audit of "leak" that must find 0 keys without an expiry. Twice: with the 100k keys
#      alone in database 1, and among the 1M keys in database 0 (SCAN must walk all
#      1.1M keys of the database to find them: MATCH filters after visiting).
# Audit runs 3 times; every run is printed (the machine is shared: expect noise).
# Usage: bench/audit.sh [keys, default 1000000] [leaked keys, default 100000]
set -euo pipefail
cd "$(dirname "$0")/.."
KEYS=${1:-1000000}
LEAKED=${2:-100000}
SLUICE=${SLUICE:-./build/bin/sluice}
[ -x "$SLUICE" ] || { echo "build first: make build" >&2; exit 2; }

source bench/lib.sh
start_private_redis
db=0
cli() { redis-cli -p "$port" -n "$db" "$@"; }
url="redis://127.0.0.1:$port"

# KEYS[] none; ARGV: prefix, first, last, with_ttl (1/0). Key i is of the sign-in
# limiter's layout; every 20th is a sliding log, every 100th a concurrency set.
seed='
local prefix, first, last, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4] == "1"
local t = redis.call("TIME")
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local value = "1:" .. (now + 3600000)
for i = first, last do
  if i % 100 == 0 then
    local key = prefix .. ":{pool:worker:" .. i .. "}:cc"
    redis.call("ZADD", key, now + 60000, now .. ":tok" .. i)
    if ttl then redis.call("PEXPIRE", key, 3600000) end
  elseif i % 20 == 0 then
    local key = prefix .. ":{export:account:" .. i .. "}:sl"
    redis.call("ZADD", key, now, "a0")
    if ttl then redis.call("PEXPIRE", key, 3600000) end
  elseif ttl then
    redis.call("SET", prefix .. ":{signin:account:" .. i .. "}:fw", value, "PX", 3600000)
  else
    redis.call("SET", prefix .. ":{signin:account:" .. i .. "}:fw", value)
  end
end
return last - first + 1'
seed_range() {  # prefix count with_ttl
  local chunk=100000
  for ((start = 1; start <= $2; start += chunk)); do
    local end=$((start + chunk - 1)); [ $end -gt $2 ] && end=$2
    cli EVAL "$seed" 0 "$1" "$start" "$end" "$3" >/dev/null
  done
}
t0=$(date +%s.%N)
seed_range bench "$KEYS" 1
seed_range leak "$LEAKED" 0
db=1
seed_range leak "$LEAKED" 0
db=0
t1=$(date +%s.%N)
echo "redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/') on 127.0.0.1:$port, $(nproc) cores"
printf 'seeded %s keys (+%s leaked) in %.1f s; DBSIZE %s\n' "$KEYS" "$LEAKED" \
  "$(awk "BEGIN{print $t1 - $t0}")" "$(cli DBSIZE)"

for run in 1 2 3; do
  set +e
  audit=$("$SLUICE" audit --redis "$url" --prefix bench --json --quiet)
  code=$?
  set -e
  [ $code -eq 0 ] || { echo "audit of bench exited $code (expected 0)" >&2; exit 1; }
  a=$(echo "$audit" | tr -d ' \n')
  printf 'audit run %d: %s keys in %.2f s = %.0f keys/s, peak RSS %s KiB\n' "$run" \
    "$(json "$a" keys_scanned)" "$(json "$a" elapsed_s)" "$(json "$a" keys_per_s)" "$(json "$a" peak_rss_kb)"
done

# repair_leak <db> <label>
repair_leak() {
  local r0 r1 r code
  r0=$(date +%s.%N)
  r=$("$SLUICE" repair --redis "$url/$1" --prefix leak --apply --json --list 0 | tr -d ' \n')
  r1=$(date +%s.%N)
  printf 'repair (%s): %s keys given an expiry in %.2f s wall (process start to exit; expiries set as the scan goes), peak RSS %s KiB\n' \
    "$2" "$(json "$r" expiry_set)" "$(awk "BEGIN{print $r1 - $r0}")" "$(json "$r" peak_rss_kb)"
  set +e
  "$SLUICE" audit --redis "$url/$1" --prefix leak --quiet --json >/dev/null
  code=$?
  set -e
  echo "  audit of leak after repair: exit $code (0 = no key without an expiry)"
  [ $code -eq 0 ]
}
repair_leak 1 "100k leaked keys alone in db 1"
repair_leak 0 "100k leaked keys among 1M in db 0"
