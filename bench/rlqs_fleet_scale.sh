#!/usr/bin/env bash
# RLQS at fleet scale through sluiced: one private redis-server and three sluiced on it, on
# free loopback ports; sluiced_rlqs_fleet drives CLIENTS simulated Envoys on one bucket (each
# one RLQS stream, STREAMS_PER_CONNECTION streams per HTTP/2 connection, spread over the
# three sluiced), starting over the first START_SPREAD seconds, reporting every 5 s, with
# skewed demand summing to twice the limit; at WAVE_AT s, WAVE new Envoys subscribe within
# one second. Each run prints:
#   - the fleet's summary (sluiced_rlqs_fleet: admitted per second, settled and at most;
#     the first assignment of the starting fleet and of the wave: token bucket or blanket);
#   - every sluiced's sluiced_rlqs_answers_total by source (store, policy_*, ...), summed;
#   - the bucket's live grants, sampled in Redis each second (the hash's clients whose hold
#     has not ended; the field "" holds the running sums and is no client): at most, in
#     percent of the limit;
#   - the CPU (utime + stime, /proc) of each sluiced, of Redis and of the driver over the run.
# Then the medians over the runs. Fresh Redis and sluiced for each run; everything started
# is stopped by pid; each run is bounded (the driver by `timeout`). Builds nothing (make
# build, or cmake --build --preset release --target sluiced sluiced_rlqs_fleet_cli).
#
#   bench/rlqs_fleet_scale.sh [runs]        (default 3)
# Env: CLIENTS (10000), WAVE (1000), WAVE_AT (40), SECONDS_PER_RUN (75), LIMIT (10000: the
#      bucket's requests/s), BURST (1000), SKEW (0.25: client i's demand ~ 1/(i+1)^SKEW, 1 to
#      10 parts over 10,000), START_SPREAD (5), STREAMS_PER_CONNECTION (100), TICK_MS (5),
#      SETTLE (25: seconds left out of the settled rate), BIN (./build/bin).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
BIN=${BIN:-./build/bin}
SLUICED=${SLUICED:-$BIN/sluiced}
FLEET=${FLEET:-$BIN/sluiced_rlqs_fleet}
CLIENTS=${CLIENTS:-10000} WAVE=${WAVE:-1000} WAVE_AT=${WAVE_AT:-40}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-75} LIMIT=${LIMIT:-10000} BURST=${BURST:-1000}
SKEW=${SKEW:-0.25} START_SPREAD=${START_SPREAD:-5} STREAMS_PER_CONNECTION=${STREAMS_PER_CONNECTION:-100}
TICK_MS=${TICK_MS:-5} SETTLE=${SETTLE:-25}
for tool in redis-server redis-cli curl timeout "$SLUICED" "$FLEET"; do
  command -v "$tool" >/dev/null || { echo "missing $tool (make build; scripts/setup.sh)" >&2; exit 1; }
done
WORK=$(mktemp -d /tmp/rlqs_fleet_scale.XXXXXX)
PIDS=()
stop_all() {
  local pid
  for pid in "${PIDS[@]}"; do
    if kill "$pid" 2>/dev/null; then wait "$pid" 2>/dev/null || true; fi
  done
  PIDS=()
}
trap 'stop_all; rm -rf "$WORK"' EXIT
HZ=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
free_port() {
  local p
  for _ in $(seq 1 50); do
    p=$((20000 + RANDOM % 40000))
    if ! (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null; then echo "$p"; return 0; fi
  done
  echo "no free loopback port found" >&2
  exit 2
}

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

# The bucket's live grants (milli-requests a second: the clients whose hold has not ended by
# Redis's clock), their count, and the running sums' field "D G n bytes". Read-only.
cat >"$WORK/live.lua" <<'LUA'
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for _, k in ipairs(redis.call('KEYS', '*')) do
  if redis.call('TYPE', k).ok == 'hash' then
    local live, n, sums = 0, 0, ''
    local h = redis.call('HGETALL', k)
    for i = 1, #h, 2 do
      if h[i] == '' then
        sums = h[i + 1]
      else
        local e, _, g = string.match(h[i + 1], '^(%S+) (%S+) (%S+)')
        if tonumber(e) > now then live = live + tonumber(g); n = n + 1 end
      end
    end
    return {live, n, sums}
  end
end
return {0, 0, ''}
LUA

# one_run N: a fresh Redis and three sluiced, the fleet, the figures; $WORK/run.N.
one_run() {
  local out=$WORK/run.$1 redis_port redis_dir i log grpc metrics targets="" fleet_pid
  mkdir "$out"
  redis_port=$(free_port)
  redis_dir=$out/redis
  mkdir "$redis_dir"
  redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$redis_dir" --logfile "$redis_dir/redis.log" --daemonize no &
  PIDS+=($!)
  local redis_pid=$!
  for _ in $(seq 1 200); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.05; done
  local sluiced_pids=() metrics_ports=()
  for i in 1 2 3; do
    log=$out/sluiced.$i.log
    "$SLUICED" --config "$WORK/config" --redis "redis://127.0.0.1:$redis_port" \
      --http-listen 127.0.0.1:0 --grpc-listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 \
      --metrics-listen 127.0.0.1:0 --rlqs-report-interval-ms 5000 >"$log" 2>&1 &
    PIDS+=($!)
    sluiced_pids+=($!)
    grpc=""
    for _ in $(seq 200); do
      grpc=$(sed -n 's/.*serving http=[^ ]* grpc=[^ ]*:\([0-9]*\) .*/\1/p' "$log" | head -1)
      [ -n "$grpc" ] && break
      sleep 0.05
    done
    [ -n "$grpc" ] || { echo "sluiced $i did not serve:" >&2; cat "$log" >&2; exit 1; }
    metrics=$(sed -n 's/.*serving .* metrics=[^ ]*:\([0-9]*\) .*/\1/p' "$log" | head -1)
    metrics_ports+=("$metrics")
    targets+="${targets:+,}127.0.0.1:$grpc"
  done
  local t0=() pid
  for pid in "${sluiced_pids[@]}" "$redis_pid"; do t0+=("$(cpu_ticks "$pid")"); done
  timeout $((SECONDS_PER_RUN + 60)) "$FLEET" --target "$targets" --clients "$CLIENTS" \
    --bucket rule=hot --skew "$SKEW" --start-spread-s "$START_SPREAD" --limit "$LIMIT" \
    --demand "0:$((2 * LIMIT))" --interval-ms 5000 --seconds "$SECONDS_PER_RUN" \
    --streams-per-connection "$STREAMS_PER_CONNECTION" --tick-ms "$TICK_MS" \
    --wave "$WAVE" --wave-at "$WAVE_AT" --settle-s "$SETTLE" --csv >"$out/fleet.out" 2>"$out/fleet.err" &
  fleet_pid=$!
  local started
  started=$(date +%s.%N)
  PIDS+=("$fleet_pid")
  # Each second while the fleet runs: the live grants, and the driver's CPU so far.
  : >"$out/live"
  local fleet_ticks=0 driver
  driver=$(pgrep -P "$fleet_pid" -x sluiced_rlqs_fl || true)  # timeout's child
  while kill -0 "$fleet_pid" 2>/dev/null; do
    # one line: seconds since the start, live n D G n bytes
    { awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f ", b - a}'
      redis-cli -p "$redis_port" --raw EVAL "$(cat "$WORK/live.lua")" 0 2>/dev/null |
        paste -sd' '; } >>"$out/live" || true
    [ -n "$driver" ] || driver=$(pgrep -P "$fleet_pid" -x sluiced_rlqs_fl || true)
    if [ -n "$driver" ] && [ -e "/proc/$driver/stat" ]; then fleet_ticks=$(cpu_ticks "$driver"); fi
    sleep 1
  done
  wait "$fleet_pid" || echo "fleet exited with $?" >>"$out/fleet.err"
  local cpu_line="" k=0
  for pid in "${sluiced_pids[@]}" "$redis_pid"; do
    cpu_line+=" $(($(cpu_ticks "$pid") - t0[k]))"
    k=$((k + 1))
  done
  # answers by source, summed over the three sluiced
  for metrics in "${metrics_ports[@]}"; do
    curl -s "http://127.0.0.1:$metrics/metrics" | grep '^sluiced_rlqs_answers_total' || true
  done | sed -E 's/.*source="([^"]*)"\} ([0-9]+)/\1 \2/' |
    awk '{n[$1] += $2}
         END {split("store policy_open policy_closed policy_local rule unmatched idle", k, " ")
              for (i = 1; i <= 7; ++i) printf "%s=%d ", k[i], n[k[i]]; print ""}' >"$out/answers"
  stop_all
  local live_max sums_max live_settled
  live_max=$(awk -v r="$LIMIT" 'NF >= 3 && $2 > m {m = $2} END {printf "%.2f", m / 10 / r}' "$out/live")
  sums_max=$(awk -v r="$LIMIT" 'NF >= 6 && $5 > m {m = $5} END {printf "%.2f", m / 10 / r}' "$out/live")
  # held once settled: the mean of the live grants' samples from SETTLE s to the wave
  live_settled=$(awk -v r="$LIMIT" -v from="$SETTLE" -v to="$WAVE_AT" \
    'NF >= 3 && $1 >= from && $1 < to {s += $2; n++} END {if (n) printf "%.2f", s / n / 10 / r; else print "-"}' "$out/live")
  # admitted per second once settled, from the CSV: from SETTLE s to the wave, and from
  # 15 s after the wave to the end (the last, partial second left out)
  local admitted
  admitted=$(awk -F, -v from="$SETTLE" -v wave="$WAVE_AT" -v end="$SECONDS_PER_RUN" \
    '/^[0-9]/ && NF == 11 { s = $1 + 0
       if (s >= from && s < wave) { a += $4; na++ }
       if (s >= wave + 15 && s < end - 1) { b += $4; nb++ } }
     END { printf "admitted_before_wave_per_s=%.1f admitted_after_wave_per_s=%.1f", na ? a / na : 0, nb ? b / nb : 0 }' \
    "$out/fleet.out")
  local fl
  fl=$(grep '^fleet ' "$out/fleet.out" || echo "fleet FAILED: $(tail -3 "$out/fleet.err")")
  echo "run $1: $fl"
  grep '^fleet_' "$out/fleet.out" | sed "s/^/run $1: /" || true
  echo "run $1: answers $(cat "$out/answers")"
  echo "run $1: $admitted"
  echo "run $1: live_grants_max_pct=$live_max recorded_grants_max_pct=$sums_max" \
    "live_grants_settled_pct=$live_settled samples=$(wc -l <"$out/live")"
  # shellcheck disable=SC2086 # cpu_line: four tick counts
  set -- $cpu_line
  awk -v a="$1" -v b="$2" -v c="$3" -v r="$4" -v f="$fleet_ticks" -v hz="$HZ" -v s="$SECONDS_PER_RUN" \
    -v run="$RUN" 'BEGIN { printf "run %s: cpu_pct sluiced1=%.1f sluiced2=%.1f sluiced3=%.1f redis=%.1f driver=%.1f (of one core, over %d s)\n",
                          run, 100*a/hz/s, 100*b/hz/s, 100*c/hz/s, 100*r/hz/s, 100*f/hz/s, s }'
}

echo "$(date -u +%F) $(nproc) cores; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$CLIENTS Envoys on one bucket of $LIMIT/s (burst $BURST), demand $((2 * LIMIT))/s (skew $SKEW)," \
  "reports every 5 s, through three sluiced on one Redis; wave of $WAVE at ${WAVE_AT} s; $SECONDS_PER_RUN s per run"
for RUN in $(seq 1 "$RUNS"); do one_run "$RUN" | tee "$WORK/summary.$RUN"; done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

# med FIELD [LINE]: the median over the runs of a key=value field of the run lines (those
# matching LINE only).
med() {
  cat "$WORK"/summary.* | grep -e "${2:-.}" | grep -o "[ ]$1=[0-9.]*" | cut -d= -f2 | sort -g |
    awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)]; else print "-"}'
}
echo
echo "medians of $RUNS runs:"
echo "  policy answers: open $(med policy_open) closed $(med policy_closed) local $(med policy_local);" \
  "store answers $(med store)"
echo "  starting fleet's first assignments: token bucket $(med first_token_bucket fleet_first)," \
  "blanket $(med first_blanket fleet_first), none $(med first_none fleet_first)"
echo "  wave's first assignments: token bucket $(med first_token_bucket fleet_wave)," \
  "blanket $(med first_blanket fleet_wave), none $(med first_none fleet_wave);" \
  "rates $(med first_rate_min fleet_wave) to $(med first_rate_max fleet_wave)/s," \
  "the latest $(med first_after_max_s fleet_wave) s after its subscription"
echo "  live grants at most $(med live_grants_max_pct) % of the limit (recorded sums $(med recorded_grants_max_pct) %)"
echo "  live grants held once settled (${SETTLE} s to the wave): $(med live_grants_settled_pct) % of the limit"
echo "  admitted per second: settled $(med steady_admitted_per_s) (from ${SETTLE} s on)," \
  "$(med admitted_before_wave_per_s) before the wave, $(med admitted_after_wave_per_s) from 15 s after it;" \
  "at most $(med max_admitted_per_s) in one second (limit $LIMIT; bound R + 3 (B + 2n):" \
  "$((LIMIT + 3 * (BURST + 2 * (CLIENTS + WAVE)))))"
echo "  CPU % of one core: sluiced $(med sluiced1) / $(med sluiced2) / $(med sluiced3), redis $(med redis)," \
  "driver $(med driver)"
