#!/usr/bin/env bash
# Decisions per Redis core: what each decision costs the one Redis core a fleet
# shares, measured in one run on this machine. A private redis-server on a free loopback
# port (stopped at exit, by pid), then:
#   floor     redis-benchmark -c 50 -P 128 INCR over 10k keys: Redis CPU per INCR (INFO
#             cpu used_cpu_user + used_cpu_sys delta / commands), the cost of one write
#   sluice    per algorithm and for lease acquire + release cycles, `sluice bench` at
#             concurrency 1, 50 and 500 over 10k ids (every call admitted): decisions/s,
#             Redis CPU µs per decision (INFO cpu delta / decisions), its ratio to the
#             floor, decisions per script call (batching), the client's own CPU µs per
#             decision (getrusage) and p50/p99 latency
#   rlf       rate-limiter-flexible's fixed window (bench/rlf/rlf_bench.js, installed with
#             npm into a scratch directory under /tmp) at the same concurrencies; skipped
#             with a note when node, npm or the registry is not there
#   unbatched fixed_window and lease cycles again with --max-batch 1 (every
#             call its own EVALSHA, as before batching; UNBATCHED=0 skips them)
#   metered   per algorithm, the Redis CPU of a check, a debit, a reserve and a settle
#             (src/algo/reservation.lua) of the same limit, each call its own EVALSHA of
#             the embedded script, sent by redis-cli --pipe (METERED=0 skips them): checks
#             and debits of 1 over 10k ids, reserves of 5 (each its own reservation key),
#             then a settle of 3 for each reservation (the refund path); the ratio of each to
#             the check. Needs the release build's generated scripts (bench/lib.sh).
# Every cell is the median of RUNS runs (each run measures every row once, in turn).
# Usage: bench/redis_core.sh [seconds per measurement, default 3] [runs, default 3]
# Env: SLUICE (the sluice binary, default ./build/bin/sluice), ALGORITHMS (space-separated
# subset of: fixed_window sliding_window sliding_log token_bucket gcra concurrency),
# CONCURRENCY (default "1 50 500"), RLF=0 to skip rate-limiter-flexible, SHAPES=0 to skip
# the shape floors (each state shape's commands alone, bench/shape_floors/*.lua, by
# redis-benchmark: what no script keeping that state can go below).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_RUN=${1:-3}
RUNS=${2:-3}
SLUICE=${SLUICE:-./build/bin/sluice}
ALGORITHMS=(${ALGORITHMS:-fixed_window sliding_window sliding_log token_bucket gcra concurrency})
LEVELS=(${CONCURRENCY:-1 50 500})
[ -x "$SLUICE" ] || { echo "build first: make build" >&2; exit 2; }

source bench/lib.sh
start_private_redis
cli() { redis-cli -p "$port" "$@"; }
redis_cpu() {  # the server's user + system CPU seconds so far
  cli INFO cpu | tr -d '\r' | awk -F: '/^used_cpu_(user|sys):/ {s += $2} END {printf "%.6f", s}'
}
median() { tr ' ' '\n' | awk 'NF' | sort -g | awk '{v[NR]=$1} END {if (NR==0) print "-"; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }

# rate-limiter-flexible, installed at bench time into a scratch directory.
rlf_dir=""
if [ "${RLF:-1}" = "1" ]; then
  if command -v node >/dev/null && command -v npm >/dev/null; then
    rlf_dir=$(mktemp -d /tmp/sluice-rlf.XXXXXX)
    trap 'kill "$redis_pid" 2>/dev/null; wait "$redis_pid" 2>/dev/null; rm -rf "$redis_dir" "$rlf_dir"' EXIT
    if ! (cd "$rlf_dir" && timeout 180 npm install --silent --no-audit --no-fund \
            rate-limiter-flexible ioredis >/dev/null 2>&1); then
      echo "note: npm install of rate-limiter-flexible failed (registry unreachable?): skipped"
      rlf_dir=""
    fi
  else
    echo "note: node or npm not found: rate-limiter-flexible skipped"
  fi
fi

echo "redis-server $(redis-server --version | sed -n 's/.*v=\([0-9.]*\).*/\1/p') on 127.0.0.1:$port," \
     "$(nproc) cores; ${SECONDS_PER_RUN}s per measurement, median of $RUNS runs"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
[ -n "$rlf_dir" ] && echo "rate-limiter-flexible $(node -p "require('$rlf_dir/node_modules/rate-limiter-flexible/package.json').version"), ioredis $(node -p "require('$rlf_dir/node_modules/ioredis/package.json').version"), node $(node --version)"

declare -A rate cpu client p50 p99 per floor_us floor_rps

# Metered operations: `pipe_cpu <file>` sends a file of RESP commands with redis-cli --pipe
# and prints the Redis CPU µs per command; `resp <n> <args…>` writes n commands, "%d" in
# an argument replaced by the command's number (0 … n-1), "%k" by that number mod 10000.
resp() {
  python3 - "$@" <<'PY'
import sys
n, args = int(sys.argv[1]), sys.argv[2:]
out = []
for i in range(n):
    out.append("*%d\r\n" % len(args))
    for a in args:
        v = a.replace("%d", str(i)).replace("%k", str(i % 10000)).replace("%e", "")
        out.append("$%d\r\n%s\r\n" % (len(v), v))
sys.stdout.write("".join(out))
PY
}
pipe_cpu() {
  local n c0 c1
  n=$(grep -c '^\*' "$1")
  c0=$(redis_cpu)
  redis-cli -p "$port" --pipe < "$1" >/dev/null
  c1=$(redis_cpu)
  awk -v a="$c0" -v b="$c1" -v n="$n" 'BEGIN{printf "%.3f", (b-a)*1e6/n}'
}
METERED_ALGORITHMS=()
for a in "${ALGORITHMS[@]}"; do [ "$a" = concurrency ] || METERED_ALGORITHMS+=("$a"); done
metered_run() {
  local n=$((20000 * SECONDS_PER_RUN)) sha rsv a i f
  rsv=$(cli SCRIPT LOAD "$(embedded_script kReservationLua)")
  f=$(mktemp /tmp/sluice-metered.XXXXXX)
  for a in "${METERED_ALGORITHMS[@]}"; do
    sha=$(cli SCRIPT LOAD "$(lua_script "$a")")
    i=$(case $a in fixed_window) echo 0;; sliding_window) echo 1;; sliding_log) echo 2;;
        token_bucket) echo 3;; gcra) echo 4;; esac)
    # "" (Redis TIME) cannot be a word of resp's argument list: %e stands for it.
    # A budget no call exhausts; buckets refill 1 token a minute, so a reservation (held
    # until its bucket would be full again) is still held when its settle comes.
    local limit=(1000000000 60000 1 0)
    resp "$n" EVALSHA "$sha" 1 "m:{$a:%k}:x" 0 %e 1 "${limit[@]}" > "$f"
    cpu[metered/$a/check]+=" $(pipe_cpu "$f")"
    resp "$n" EVALSHA "$sha" 1 "m:{$a:%k}:x" 7 %e 1 "${limit[@]}" > "$f"
    cpu[metered/$a/debit]+=" $(pipe_cpu "$f")"
    cli FLUSHALL >/dev/null
    resp "$n" EVALSHA "$rsv" 2 "m:{$a:%k}:x" "m:{$a:%k}:x:r:%d" 8 %e 5 "${limit[@]}" "$i" > "$f"
    cpu[metered/$a/reserve]+=" $(pipe_cpu "$f")"
    resp "$n" EVALSHA "$rsv" 2 "m:{$a:%k}:x" "m:{$a:%k}:x:r:%d" 9 %e 3 "${limit[@]}" "$i" > "$f"
    cpu[metered/$a/settle]+=" $(pipe_cpu "$f")"
    [ "$(cli GET "m:{$a:0}:x:r:0" | cut -c1)" = s ] || echo "warning: $a: a settle did not settle" >&2
    cli FLUSHALL >/dev/null
  done
  rm -f "$f"
}
SHAPES_LIST=(count_expiry one_value sorted_log lease_cycle)
declare -A SHAPE_LABEL=([count_expiry]="count + expiry (fw v2)" [one_value]="one value: GET+SETRANGE+PEXPIREAT"
  [sorted_log]="sorted-set log" [lease_cycle]="lease cycle (4 commands)")
declare -A SHAPE_ROWS=([count_expiry]="fixed_window" [one_value]="sliding_window token_bucket gcra"
  [sorted_log]="sliding_log" [lease_cycle]="lease acquire+release")
for run in $(seq 1 "$RUNS"); do
  # The floor: INCR, pipelined 128 deep by 50 clients.
  n=$((400000 * SECONDS_PER_RUN))
  c0=$(redis_cpu)
  rps=$(redis-benchmark -p "$port" -c 50 -P 128 -n "$n" -r 10000 --csv INCR 'floor:__rand_int__' 2>/dev/null |
        tail -1 | tr -d '"' | cut -d, -f2)
  c1=$(redis_cpu)
  floor_rps[$run]=$rps
  floor_us[$run]=$(awk -v a="$c0" -v b="$c1" -v n="$n" 'BEGIN{printf "%.3f", (b-a)*1e6/n}')
  cli FLUSHALL >/dev/null
  # Shape floors: per state shape, a script doing only that shape's commands for 50 keys
  # per call (bench/shape_floors/*.lua): the least any per-decision script keeping that
  # state costs, in the same units and the same run as the rows it bounds.
  if [ "${SHAPES:-1}" = "1" ]; then
    for shape in "${SHAPES_LIST[@]}"; do
      sha=$(cli SCRIPT LOAD "$(cat "bench/shape_floors/$shape.lua")")
      args=(EVALSHA "$sha" 50)
      for i in $(seq 1 50); do args+=("shape:{x:__rand_int__}:$shape"); done
      for i in $(seq 1 50); do args+=("m:__rand_int__"); done
      m=$((8000 * SECONDS_PER_RUN))
      c0=$(redis_cpu)
      redis-benchmark -p "$port" -c 50 -P 4 -n "$m" -r 10000 "${args[@]}" >/dev/null 2>&1
      c1=$(redis_cpu)
      cpu[shape/$shape]+=" $(awk -v a="$c0" -v b="$c1" -v n=$((m * 50)) 'BEGIN{printf "%.3f", (b-a)*1e6/n}')"
      cli FLUSHALL >/dev/null
    done
  fi
  for a in "${ALGORITHMS[@]}"; do
    for c in "${LEVELS[@]}"; do
      out=$("$SLUICE" bench --redis "redis://127.0.0.1:$port" --algorithm "$a" --concurrency "$c" \
            --duration "$SECONDS_PER_RUN" --keys 10000 --limit 1000000000 --json)
      k="$a/$c"
      rate[$k]+=" $(json "$out" decisions_per_s)"
      if [ "$a" = concurrency ]; then
        cpu[$k]+=" $(json "$out" redis_cpu_us_per_cycle)"
        client[$k]+=" $(json "$out" client_cpu_us_per_cycle)"
      else
        cpu[$k]+=" $(json "$out" redis_cpu_us_per_decision)"
        client[$k]+=" $(json "$out" client_cpu_us_per_decision)"
        per[$k]+=" $(json "$out" decisions_per_script_call)"
      fi
      p50[$k]+=" $(json "$out" p50_us)"; p99[$k]+=" $(json "$out" p99_us)"
      errors=$(json "$out" errors)
      [ "$errors" = "0" ] || echo "warning: $a at concurrency $c saw $errors errors" >&2
      cli FLUSHALL >/dev/null
    done
  done
  # The same binary with batching off (every call its own EVALSHA).
  if [ "${UNBATCHED:-1}" = "1" ]; then
    for a in fixed_window concurrency; do
      [[ " ${ALGORITHMS[*]} " == *" $a "* ]] || continue
      for c in "${LEVELS[@]}"; do
        [ "$c" = 1 ] && continue
        out=$("$SLUICE" bench --redis "redis://127.0.0.1:$port" --algorithm "$a" --max-batch 1 \
              --concurrency "$c" --duration "$SECONDS_PER_RUN" --keys 10000 --limit 1000000000 --json)
        k="unbatched-$a/$c"
        rate[$k]+=" $(json "$out" decisions_per_s)"
        if [ "$a" = concurrency ]; then
          cpu[$k]+=" $(json "$out" redis_cpu_us_per_cycle)"; client[$k]+=" $(json "$out" client_cpu_us_per_cycle)"
        else
          cpu[$k]+=" $(json "$out" redis_cpu_us_per_decision)"; client[$k]+=" $(json "$out" client_cpu_us_per_decision)"
          per[$k]+=" $(json "$out" decisions_per_script_call)"
        fi
        p50[$k]+=" $(json "$out" p50_us)"; p99[$k]+=" $(json "$out" p99_us)"
        cli FLUSHALL >/dev/null
      done
    done
  fi
  if [ "${METERED:-1}" = "1" ]; then metered_run; fi
  if [ -n "$rlf_dir" ]; then
    for c in "${LEVELS[@]}"; do
      out=$(NODE_PATH="$rlf_dir/node_modules" timeout $((SECONDS_PER_RUN + 60)) \
            node bench/rlf/rlf_bench.js "$port" "$c" "$SECONDS_PER_RUN" 10000 || true)
      k="rlf/$c"
      rate[$k]+=" $(json "$out" decisions_per_s)"; cpu[$k]+=" $(json "$out" redis_cpu_us_per_decision)"
      client[$k]+=" $(json "$out" client_cpu_us_per_decision)"
      p50[$k]+=" $(json "$out" p50_us)"; p99[$k]+=" $(json "$out" p99_us)"
      cli FLUSHALL >/dev/null
    done
  fi
done

floor=$(echo "${floor_us[@]}" | median)
printf '\nfloor: INCR by redis-benchmark -c 50 -P 128: %.0f/s, %.3f us of Redis CPU per INCR (runs: %s)\n' \
  "$(echo "${floor_rps[@]}" | median)" "$floor" "$(echo "${floor_us[@]}")"
printf '\n%-28s %5s %12s %11s %7s %9s %11s %8s %8s\n' "" "conc" "decisions/s" "redis us/d" "xfloor" \
  "d/script" "client us/d" "p50 us" "p99 us"
row() {  # row <label> <key>
  local r u d
  r=$(echo "${rate[$2]:-}" | median); u=$(echo "${cpu[$2]:-}" | median)
  d=$(echo "${per[$2]:-}" | median)
  [ "$d" = - ] || d=$(printf '%.1f' "$d")
  printf '%-28s %5s %12.0f %11.2f %7.1f %9s %11.2f %8s %8s\n' "$1" "${2#*/}" "$r" "$u" \
    "$(awk -v u="$u" -v f="$floor" 'BEGIN{print u/f}')" "$d" \
    "$(echo "${client[$2]:-}" | median)" "$(echo "${p50[$2]:-}" | median)" "$(echo "${p99[$2]:-}" | median)"
}
for a in "${ALGORITHMS[@]}"; do
  label="sluice $a"
  [ "$a" = concurrency ] && label="sluice lease acquire+release"
  for c in "${LEVELS[@]}"; do row "$label" "$a/$c"; done
done
for a in fixed_window concurrency; do
  label="$a unbatched"
  [ "$a" = concurrency ] && label="lease cycle unbatched"
  for c in "${LEVELS[@]}"; do
    [ -n "${rate[unbatched-$a/$c]:-}" ] && row "$label" "unbatched-$a/$c"
  done
done
if [ "${SHAPES:-1}" = "1" ]; then
  echo
  echo "shape floors: only the commands of each state shape, 50 keys per script call (bench/shape_floors)"
  for shape in "${SHAPES_LIST[@]}"; do
    u=$(echo "${cpu[shape/$shape]:-}" | median)
    printf '%-28s %5s %12s %11.2f %7.1f %9s   bounds %s\n' "${SHAPE_LABEL[$shape]}" - - "$u" \
      "$(awk -v u="$u" -v f="$floor" 'BEGIN{print u/f}')" 50 "${SHAPE_ROWS[$shape]}"
  done
fi
if [ -n "$rlf_dir" ]; then
  for c in "${LEVELS[@]}"; do row "rate-limiter-flexible fw" "rlf/$c"; done
  if [[ " ${ALGORITHMS[*]} " == *" fixed_window "* ]]; then
    for c in "${LEVELS[@]}"; do
      awk -v s="$(echo "${cpu[fixed_window/$c]}" | median)" -v r="$(echo "${cpu[rlf/$c]}" | median)" -v c="$c" \
        'BEGIN{printf "fixed_window Redis CPU per decision / rate-limiter-flexible'"'"'s at concurrency %s: %.2f\n", c, s/r}'
    done
  fi
fi
if [ "${METERED:-1}" = "1" ]; then
  echo
  echo "metered: Redis CPU us per call, each its own EVALSHA (redis-cli --pipe), and its ratio to the check"
  printf '%-16s %9s %9s %6s %9s %6s %9s %6s\n' "" check debit x reserve x settle x
  for a in "${METERED_ALGORITHMS[@]}"; do
    ck=$(echo "${cpu[metered/$a/check]}" | median)
    printf '%-16s %9.2f' "$a" "$ck"
    for op in debit reserve settle; do
      u=$(echo "${cpu[metered/$a/$op]}" | median)
      printf ' %9.2f %6.2f' "$u" "$(awk -v u="$u" -v c="$ck" 'BEGIN{print u/c}')"
    done
    echo
  done
fi
echo
echo "redis us/d: Redis CPU (INFO cpu user+sys) per decision (lease: per acquire+release cycle);"
echo "xfloor: that / the floor; d/script: decisions per script call (batching; - for leases);"
echo "unbatched: the same binary with --max-batch 1;"
echo "client us/d: the benchmark process's own CPU per decision (getrusage / process.cpuUsage)."
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
