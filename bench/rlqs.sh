#!/usr/bin/env bash
# RLQS against RLS on one hot bucket: N simulated Envoys (sluiced_rlqs_fleet: each holds
# one StreamRateLimitQuotas stream and decides locally on the token buckets sluiced
# assigns, as Envoy's rate_limit_quota filter) against one sluiced and one private
# redis-server on this machine; then the same demand through RLS (one ShouldRateLimit
# per request); then a demand shift over RLQS, drawn as a chart of the fleet's admitted
# rate per second against the limit. Prints, for RLQS and RLS and their ratio: Redis store
# calls (INFO commandstats: eval + evalsha) per 1,000 admitted requests, sluiced's CPU
# (utime + stime from /proc/<pid>/stat) per 1,000 admitted requests and per report or
# call, and the fleet's admitted rate once settled against the limit. Builds nothing
# (make build first); stops what it started, by pid.
#
#   bench/rlqs.sh [seconds]        (default 30 s per run)
# Env: CLIENTS (50), LIMIT (1000: the bucket's requests/s), BURST (100), DEMAND (the
#      fleet's requests/s, 2 x LIMIT), SKEW (1: client i's share ~ 1/(i+1)), INTERVAL_MS
#      (5000: Envoy's report interval, and sluiced's --rlqs-report-interval-ms),
#      RLS_THREADS (4: the RLS run's callers, each one call at a time), BIN (./build/bin),
#      SLUICED ($BIN/sluiced), FLEET ($BIN/sluiced_rlqs_fleet), ONLY (rlqs, rls or shift:
#      one run), CSV (1: the fleet's per-second CSV of each run too).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_RUN=${1:-30}
BIN=${BIN:-./build/bin}
SLUICED=${SLUICED:-$BIN/sluiced}
FLEET=${FLEET:-$BIN/sluiced_rlqs_fleet}
CLIENTS=${CLIENTS:-50} LIMIT=${LIMIT:-1000} BURST=${BURST:-100} SKEW=${SKEW:-1}
DEMAND=${DEMAND:-$((2 * LIMIT))} INTERVAL_MS=${INTERVAL_MS:-5000} RLS_THREADS=${RLS_THREADS:-4}
for tool in redis-server redis-cli "$SLUICED" "$FLEET"; do
  command -v "$tool" >/dev/null || { echo "missing $tool (make build; scripts/setup.sh)" >&2; exit 1; }
done
source bench/lib.sh
start_private_redis  # its EXIT trap is replaced below by one that stops sluiced too
REDIS_PORT=$port
WORK=$(mktemp -d /tmp/sluiced_rlqs_bench.XXXXXX)
SLUICED_PID=""
stop() {
  local pid
  for pid in $SLUICED_PID $redis_pid; do
    if kill "$pid" 2>/dev/null; then wait "$pid" 2>/dev/null || true; fi
  done
  rm -rf "$WORK" "$redis_dir"
}
trap stop EXIT
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)

mkdir "$WORK/config"
cat >"$WORK/config/fleet.yaml" <<YAML
domain: fleet
descriptors:
  - key: rule
    value: hot
    algorithm: token_bucket
    burst: $BURST
    rate_limit: {unit: second, requests_per_unit: $LIMIT}
YAML
"$SLUICED" --config "$WORK/config" --redis "redis://127.0.0.1:$REDIS_PORT" \
  --http-listen 127.0.0.1:0 --grpc-listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 \
  --metrics-listen 127.0.0.1:0 --rlqs-report-interval-ms "$INTERVAL_MS" \
  >"$WORK/sluiced.log" 2>&1 &
SLUICED_PID=$!
GRPC_PORT=""
for _ in $(seq 200); do
  GRPC_PORT=$(sed -n 's/.*serving http=[^ ]* grpc=[^ ]*:\([0-9]*\) .*/\1/p' "$WORK/sluiced.log" | head -1)
  [ -n "$GRPC_PORT" ] && break
  kill -0 "$SLUICED_PID" 2>/dev/null || break
  sleep 0.05
done
[ -n "$GRPC_PORT" ] || { echo "sluiced did not serve:" >&2; cat "$WORK/sluiced.log" >&2; exit 1; }

# eval + evalsha calls so far (every script call sluiced made).
store_calls() {
  redis-cli -p "$REDIS_PORT" INFO commandstats | tr -d '\r' |
    awk -F'[:,=]' '/^cmdstat_(eval|evalsha):/ { n += $3 } END { print n + 0 }'
}
# fleet NAME ARGS...: one run of the fleet; $WORK/NAME.{out,calls,ticks}.
fleet() {
  local name=$1; shift
  local c0 t0
  c0=$(store_calls); t0=$(cpu_ticks "$SLUICED_PID")
  "$FLEET" --target "127.0.0.1:$GRPC_PORT" --clients "$CLIENTS" --bucket rule=hot \
    --skew "$SKEW" --limit "$LIMIT" --interval-ms "$INTERVAL_MS" --seconds "$SECONDS_PER_RUN" \
    ${CSV:+--csv} "$@" >"$WORK/$name.out"
  echo $(($(store_calls) - c0)) >"$WORK/$name.calls"
  echo $(($(cpu_ticks "$SLUICED_PID") - t0)) >"$WORK/$name.ticks"
  if [ -n "${CSV:-}" ]; then echo "$name:"; grep -v '^fleet ' "$WORK/$name.out" || true; fi
}
# kv NAME FIELD: a field of run NAME's summary line.
kv() { grep '^fleet ' "$WORK/$1.out" | sed -E "s/.*[ ]$2=([^ ]+).*/\1/"; }
# row NAME LABEL PER: one line of the table; PER, the summary's count of reports or calls.
row() {
  awk -v label="$2" -v calls="$(cat "$WORK/$1.calls")" -v ticks="$(cat "$WORK/$1.ticks")" \
      -v hz="$HZ" -v admitted="$(kv "$1" admitted)" -v per="$(kv "$1" "$3")" \
      -v steady="$(kv "$1" steady_admitted_per_s)" -v limit="$LIMIT" -v lag="$(kv "$1" max_lag_s)" \
      'BEGIN { cpu = ticks / hz; store = 0; cpu_k = 0; cpu_one = 0
               if (admitted > 0) { store = 1000 * calls / admitted; cpu_k = 1000 * cpu / admitted * 1000 }
               if (per > 0) cpu_one = cpu / per * 1e6
               printf "| %-36s | %9.0f / %-6d | %14.1f | %14.2f ms | %12.1f us | %7s s |\n",
                      label, steady, limit, store, cpu_k, cpu_one, lag }'
}

echo "machine: $(nproc) cores; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$CLIENTS clients on one bucket of $LIMIT/s (burst $BURST), demand $DEMAND/s (skew $SKEW)," \
  "reports every $INTERVAL_MS ms, $SECONDS_PER_RUN s per run"
only=${ONLY:-}
runs() { [ -z "$only" ] || [ "$only" = "$1" ]; }  # runs NAME: this run is wanted
if runs rlqs; then fleet rlqs --mode rlqs --demand "0:$DEMAND"; fi
if runs rls; then fleet rls --mode rls --rls-threads "$RLS_THREADS" --demand "0:$DEMAND"; fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
if [ "$only" != shift ]; then
  printf '| %-36s | %18s | %14s | %17s | %15s | %9s |\n' "run" "admitted/s / limit" \
    "store calls" "sluiced CPU" "sluiced CPU" "max lag"
  printf '| %-36s | %18s | %14s | %17s | %15s | %9s |\n' "" "(settled)" "per 1,000 adm." \
    "per 1,000 adm." "per report/call" ""
  echo "|--------------------------------------|--------------------|----------------|-------------------|-----------------|-----------|"
  if [ -f "$WORK/rlqs.out" ]; then row rlqs "RLQS ($CLIENTS streams)" reports; fi
  if [ -f "$WORK/rls.out" ]; then row rls "RLS ShouldRateLimit ($RLS_THREADS callers)" requests; fi
  if [ -f "$WORK/rlqs.out" ] && [ -f "$WORK/rls.out" ]; then
    awk -v qc="$(cat "$WORK/rlqs.calls")" -v qt="$(cat "$WORK/rlqs.ticks")" -v qa="$(kv rlqs admitted)" \
        -v lc="$(cat "$WORK/rls.calls")" -v lt="$(cat "$WORK/rls.ticks")" -v la="$(kv rls admitted)" \
        'BEGIN { sc = 0; cpu = 0
                 if (qa > 0 && la > 0 && lc > 0) sc = (qc / qa) / (lc / la)
                 if (qa > 0 && la > 0 && lt > 0) cpu = (qt / qa) / (lt / la)
                 printf "ratio RLQS/RLS: store calls per admitted request %.4f, sluiced CPU per admitted request %.4f\n", sc, cpu }'
  fi
  # /proc counts CPU in ticks of 1/HZ s: a run of few ticks gives coarse per-report figures.
  for name in rlqs rls; do
    if [ -f "$WORK/$name.out" ]; then
      echo "$name: sluiced CPU $(cat "$WORK/$name.ticks") ticks of 1/$HZ s, $(cat "$WORK/$name.calls") store calls"
      grep '^fleet ' "$WORK/$name.out"
    fi
  done
fi
if runs shift; then
  # Half the limit, then twice it, then 1.2 times it with the shares reversed.
  third=$((SECONDS_PER_RUN / 3))
  echo
  echo "demand shift over RLQS: $((LIMIT / 2))/s, from ${third} s $((2 * LIMIT))/s," \
    "from $((2 * third)) s $((LIMIT * 6 / 5))/s with the light clients heavy"
  CSV="" fleet shift --mode rlqs --reverse-skew-at "$((2 * third))" --chart \
    --demand "0:$((LIMIT / 2)),$third:$((2 * LIMIT)),$((2 * third)):$((LIMIT * 6 / 5))"
  cat "$WORK/shift.out"
fi
