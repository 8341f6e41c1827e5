#!/usr/bin/env bash
# Redis's instructions per decision (callgrind, whole server), steadier than timings on a
# shared machine: a redis-server under valgrind --tool=callgrind on a free loopback port
# runs the same command N1 and then N2 times (two servers, by pid); the difference of
# their instruction totals over N2 - N1 is one command's cost, start-up cancelled out.
# Per row: INCR (the floor of one write), each algorithm's script alone by EVALSHA as of
# BEFORE (a git revision to compare with; default 6e33174, the last one without batch
# scripts) and as built now, and the
# batch script (src/algo/batch.lua) deciding 50 calls per EVALSHA, each call with its own
# arguments and (as one limiter's calls go) the 49 after the first sharing its arguments. Every call admitted
# (limit 1e9 per 60 s) over 10k ids, Redis TIME.
# Usage: bench/script_instructions.sh [algorithm ...]   (default: all five)
# Env: BEFORE (git revision for the "before" scripts), GENERATED (the generated scripts of
# another build directory, to compare two builds), N (calls per measurement, default
# 10000), BLOCK_MS (the block of the rows "with a block", default 900000).
set -euo pipefail
cd "$(dirname "$0")/.."
ALGORITHMS=("$@")
[ ${#ALGORITHMS[@]} -gt 0 ] || ALGORITHMS=(fixed_window sliding_window sliding_log token_bucket gcra)
BEFORE=${BEFORE:-6e33174}
N=${N:-10000}
BLOCK_MS=${BLOCK_MS:-900000}  # the block of the "with a block" rows
GENERATED=${GENERATED:-build/release/generated/lua_scripts.cc}  # another build's, to compare
[ -f "$GENERATED" ] || { echo "build first: make build" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "valgrind not found" >&2; exit 2; }
source bench/lib.sh

work=$(mktemp -d)
vg_pid=""
trap '[ -n "$vg_pid" ] && kill "$vg_pid" 2>/dev/null; rm -rf "$work"' EXIT
before_script() {
  # src/algo/clock.lua in front of the scripts that read "now" with it, where BEFORE has it.
  case $1 in
    fixed_window) ;;
    *) git show "$BEFORE:src/algo/clock.lua" 2>/dev/null || true ;;
  esac
  case $1 in
    token_bucket|gcra) git show "$BEFORE:src/algo/bucket_prelude.lua"; git show "$BEFORE:src/algo/$1.lua" ;;
    *) git show "$BEFORE:src/algo/$1.lua" ;;
  esac
}

# total <script file or -> <requests> <command...>: instructions of a whole server run.
total() {
  local script=$1 n=$2; shift 2
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
  local sha=""
  [ "$script" != - ] && sha=$(redis-cli -p "$p" SCRIPT LOAD "$(cat "$script")")
  local args=("$@")
  args=("${args[@]/@SHA@/$sha}")
  redis-benchmark -p "$p" -c 4 -P 16 -n "$n" -r 10000 "${args[@]}" >/dev/null 2>&1
  redis-cli -p "$p" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
  wait "$vg_pid" 2>/dev/null || true
  vg_pid=""
  sed -n 's/^summary: \([0-9]*\).*/\1/p' "$work/cg.out"
}
# per_call <label> <calls per command> <script or -> <command...>
per_call() {
  local label=$1 per=$2 script=$3; shift 3
  local n1=$((N / per / 5)) n2=$((N / per))
  local t1 t2
  t1=$(total "$script" "$n1" "$@")
  t2=$(total "$script" "$n2" "$@")
  awk -v a="$t1" -v b="$t2" -v n=$(((n2 - n1) * per)) -v l="$label" \
    'BEGIN{printf "%-40s %10.0f\n", l, (b-a)/n}'
}

echo "instructions per decision in redis-server (callgrind, whole server), $N calls per measurement"
printf '%-40s %10s\n' "" "instr/call"
per_call "INCR (floor)" 1 - INCR 'floor:__rand_int__'
# The floor of any Lua design: a batch script of 50 calls that does nothing per call but
# one INCRBY (the least a counting decision writes), or INCRBY + PTTL (a count and the
# window's end from the key's own expiry, the leanest two-command stored format), each
# call's reply a 4-number table like a decision's. FLOOR=0 skips these rows.
if [ "${FLOOR:-1}" != 0 ]; then
  cat >"$work/floor1.lua" <<'LUA'
local out = {}
for i = 1, #KEYS do
  local c = redis.call('INCRBY', KEYS[i], 1)
  out[i] = {1, c, 0, 0}
end
return out
LUA
  cat >"$work/floor2.lua" <<'LUA'
local out = {}
for i = 1, #KEYS do
  local c = redis.call('INCRBY', KEYS[i], 1)
  local t = redis.call('PTTL', KEYS[i])
  out[i] = {1, c, t, 0}
end
return out
LUA
  floor=(EVALSHA @SHA@ 50)
  for i in $(seq 1 50); do floor+=("floor:{x:__rand_int__}"); done
  per_call "Lua floor: INCRBY per call, batches of 50" 50 "$work/floor1.lua" "${floor[@]}"
  per_call "Lua floor: INCRBY+PTTL, batches of 50" 50 "$work/floor2.lua" "${floor[@]}"
fi
for a in "${ALGORITHMS[@]}"; do
  s=$(suffix "$a")
  before_script "$a" >"$work/before.lua"
  lua_script "$a" >"$work/now.lua"
  embedded_script kBatchLua >"$work/batch.lua"
  # Seven arguments for the scripts before blocks; now an eighth, the block: "0" (none)
  # or BLOCK_MS (a check of a limiter with a block, every call admitted: the gate reads
  # the block key, finds none, and the algorithm decides).
  single=(EVALSHA @SHA@ 1 "sluicebench:{bench:user:__rand_int__}:$s" 0 "" 1 1000000000 60000 0 0)
  per_call "$a alone, before ($BEFORE)" 1 "$work/before.lua" "${single[@]}"
  per_call "$a alone, now" 1 "$work/now.lua" "${single[@]}" 0
  per_call "$a alone, now, with a block" 1 "$work/now.lua" "${single[@]}" "$BLOCK_MS"
  batch=(EVALSHA @SHA@ 50)
  fn=$(case $a in fixed_window) echo 0;; sliding_window) echo 1;; sliding_log) echo 2;;
                  token_bucket) echo 3;; gcra) echo 4;; esac)
  for i in $(seq 1 50); do batch+=("sluicebench:{bench:user:__rand_int__}:$s"); done
  own=("${batch[@]}")
  for i in $(seq 1 50); do own+=("$fn" 0 "" 1 1000000000 60000 0 0 0); done
  per_call "$a in batches of 50, own arguments" 50 "$work/batch.lua" "${own[@]}"
  # As a limiter's calls of one cost go: the first sends the arguments, the rest share them.
  shared=("${batch[@]}" "$fn" 0 "" 1 1000000000 60000 0 0 0)
  for i in $(seq 2 50); do shared+=("$fn/"); done  # "the arguments of function fn's last call"
  per_call "$a in batches of 50, shared" 50 "$work/batch.lua" "${shared[@]}"
  blocked=("${batch[@]}" "$fn" 0 "" 1 1000000000 60000 0 0 "$BLOCK_MS")
  for i in $(seq 2 50); do blocked+=("$fn/"); done
  per_call "$a in batches of 50, shared, with a block" 50 "$work/batch.lua" "${blocked[@]}"
done
