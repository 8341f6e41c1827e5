#!/usr/bin/env bash
# sluiced's throughput: wrk (keep-alive, POST /v1/check via a Lua script) and a gRPC
# load generator (ShouldRateLimit, closed loop) against one sluiced and one private
# redis-server on this machine. Prints checks/s, p50, p99 and the CPU that sluiced, Redis and
# the load generator (wrk, or the gRPC one) spent per check (from /proc/<pid>/stat and the
# generators' getrusage). Stops what it started, by pid.
#
#   bench/service.sh [seconds]        (default 10 s per run)
# Env: HTTP_CONNECTIONS (64), WRK_THREADS (1), GRPC_CONCURRENCY (64), GRPC_CONNECTIONS (4),
#      HTTP_THREADS (sluiced --http-threads, 0), IO_THREADS (1), IDS (10000),
#      DEADLINE_MS (sluiced --deadline-ms, 5), SLUICED (the sluiced binary to measure,
#      $BIN/sluiced), GRPC_LOAD (h2: sluiced_h2_load, the lean one-thread HTTP/2 client,
#      the default; grpcpp: sluiced_grpc_load, grpc++'s callback client, which costs
#      several times more CPU per call on the same cores), GRPC_RATE (h2 only: calls/s on
#      a fixed schedule, open loop, latency from each call's scheduled start; default:
#      closed loop), ONLY (http or grpc: one run).
#
#   STOP_AFTER=2 bench/service.sh 6   a graceful stop under load instead of the throughput
#                                     runs: wrk and the gRPC load generator (h2) run
#                                     together for 6 s, SIGTERM goes to sluiced 2 s in;
#                                     prints the calls each load completed and failed and
#                                     how sluiced exited (--drain-timeout-ms: DRAIN_MS,
#                                     10000). Every call sent must be answered: wrk's read
#                                     and timeout errors and h2_load's errors and lost calls
#                                     are failures; wrk's connect and write errors (a
#                                     connection refused once the listener is closed shows
#                                     as a failed write) and h2_load's refused
#                                     (REFUSED_STREAM, unprocessed after the GOAWAY) are
#                                     calls never sent or never taken, safe to retry.
# A check that misses its deadline is answered by its failure policy (here: open) and a
# run of them opens the breaker: the "store" column says which share of the checks Redis
# actually decided. Figures with a low share measure the fallback, not the service.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_RUN=${1:-10}
BIN=${BIN:-./build/bin}
WORK=$(mktemp -d /tmp/sluiced_bench.XXXXXX)
REDIS_PID="" SLUICED_PID=""
stop() {
  [ -n "$SLUICED_PID" ] && kill "$SLUICED_PID" 2>/dev/null && wait "$SLUICED_PID" 2>/dev/null || true
  [ -n "$REDIS_PID" ] && kill "$REDIS_PID" 2>/dev/null && wait "$REDIS_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap stop EXIT
SLUICED=${SLUICED:-$BIN/sluiced}
case "${GRPC_LOAD:-h2}" in
  h2) GRPC_LOADER="$BIN/sluiced_h2_load" ;;
  grpcpp) GRPC_LOADER="$BIN/sluiced_grpc_load" ;;
  *) echo "GRPC_LOAD: h2 or grpcpp, not '$GRPC_LOAD'" >&2; exit 2 ;;
esac
for tool in wrk redis-server "$SLUICED" "$GRPC_LOADER"; do
  command -v "$tool" >/dev/null || { echo "missing $tool (make build; scripts/setup.sh)" >&2; exit 1; }
done

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)

REDIS_PORT=$(free_port)
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$WORK" --logfile "$WORK/redis.log" &
REDIS_PID=$!
for _ in $(seq 100); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.05; done
"$SLUICED" --config examples/bench --redis "redis://127.0.0.1:$REDIS_PORT" \
  --http-listen 127.0.0.1:0 --grpc-listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 \
  --metrics-listen 127.0.0.1:0 \
  --http-threads "${HTTP_THREADS:-0}" --io-threads "${IO_THREADS:-1}" --log-level warn \
  --deadline-ms "${DEADLINE_MS:-5}" --drain-timeout-ms "${DRAIN_MS:-10000}" \
  >"$WORK/sluiced.log" 2>&1 &
SLUICED_PID=$!
# --log-level warn hides the serving line; find the ports from the listening sockets.
for _ in $(seq 100); do
  ports=$(ss -ltnpH 2>/dev/null | grep "pid=$SLUICED_PID," | awk '{print $4}' | sed 's/.*://' | sort -n || true)
  [ "$(wc -w <<<"$ports")" -ge 4 ] && break; sleep 0.05
done
HTTP_PORT="" GRPC_PORT="" METRICS_PORT=""
for p in $ports; do
  code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$p/healthz" || true)
  if [ "$code" = 200 ]; then HTTP_PORT=$p; elif [ "$code" = 401 ]; then :;
  elif [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$p/metrics" || true)" = 200 ]; then METRICS_PORT=$p;
  else GRPC_PORT=$p; fi
done
[ -n "$HTTP_PORT" ] && [ -n "$GRPC_PORT" ] && [ -n "$METRICS_PORT" ] || { echo "could not find sluiced's ports: $ports" >&2; cat "$WORK/sluiced.log"; exit 1; }

# The requests are formatted once, in init (ids round robin): wrk's per-request Lua then
# only indexes a table, so the load generator takes less of the CPU it shares with
# sluiced and Redis on the same cores (formatting each request anew cost wrk ~2x its CPU).
cat >"$WORK/check.lua" <<LUA
local ids = ${IDS:-10000}
local requests = {}
local n = 0
init = function(args)
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
  for i = 0, ids - 1 do
    local body = '{"domain":"bench","descriptors":[{"entries":[{"key":"user","value":"u' .. i .. '"}]}]}'
    requests[i] = wrk.format(nil, "/v1/check", nil, body)
  end
end
request = function()
  n = n + 1
  return requests[n % ids]
end
LUA
# Runs a command and prints the CPU it used (its own getrusage of children) last.
CHILD_CPU='import resource, subprocess, sys
subprocess.run(sys.argv[1:])
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print("client_cpu_s=%.3f" % (r.ru_utime + r.ru_stime))'
echo "machine: $(nproc) cores; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
# warm-up (connections, scripts loaded)
wrk -t1 -c8 -d1s -s "$WORK/check.lua" "http://127.0.0.1:$HTTP_PORT" >/dev/null

# Decisions so far: "<by the store> <all>".
decisions() {
  curl -s "http://127.0.0.1:$METRICS_PORT/metrics" | awk '/^sluiced_decisions_total/ { all += $2; if ($0 ~ /source="store"/) store += $2 } END { printf "%d %d\n", store, all }'
}
run() {  # run NAME COMMAND...: the tool's output, the CPU per check, the store's share
  local name=$1; shift
  local s0 r0 s1 r1 d0 d1
  d0=$(decisions); s0=$(cpu_ticks "$SLUICED_PID"); r0=$(cpu_ticks "$REDIS_PID")
  "$@" >"$WORK/$name.out" 2>&1 || true
  s1=$(cpu_ticks "$SLUICED_PID"); r1=$(cpu_ticks "$REDIS_PID"); d1=$(decisions)
  echo "$((s1 - s0)) $((r1 - r0))" >"$WORK/$name.cpu"
  awk -v a="$d0" -v b="$d1" 'BEGIN { split(a, x, " "); split(b, y, " "); n = y[2] - x[2]; if (n > 0) printf "%.1f%%\n", 100 * (y[1] - x[1]) / n; else print "-" }' >"$WORK/$name.store"
}

# STOP_AFTER: both loads at once, SIGTERM in their middle, then what each load saw.
stop_under_load() {
  [ "${GRPC_LOAD:-h2}" = h2 ] || { echo "STOP_AFTER needs GRPC_LOAD=h2 (it counts refused and lost calls)" >&2; exit 2; }
  wrk -t"${WRK_THREADS:-1}" -c"${HTTP_CONNECTIONS:-64}" -d"${SECONDS_PER_RUN}s" -s "$WORK/check.lua" \
    "http://127.0.0.1:$HTTP_PORT" >"$WORK/http.out" 2>&1 &
  local wrk_pid=$!
  "$GRPC_LOADER" --target "127.0.0.1:$GRPC_PORT" --seconds "$SECONDS_PER_RUN" \
    --concurrency "${GRPC_CONCURRENCY:-64}" --connections "${GRPC_CONNECTIONS:-4}" --ids "${IDS:-10000}" \
    >"$WORK/grpc.out" 2>&1 &
  local grpc_pid=$!
  sleep "$STOP_AFTER"
  local t0 t1 code=0
  t0=$(date +%s%N)
  kill -TERM "$SLUICED_PID"
  wait "$SLUICED_PID" || code=$?
  t1=$(date +%s%N)
  SLUICED_PID=""
  wait "$wrk_pid" || true
  wait "$grpc_pid" || true
  echo "SIGTERM ${STOP_AFTER} s into ${SECONDS_PER_RUN} s of load: sluiced exited $code after $(((t1 - t0) / 1000000)) ms"
  grep -E 'drain|stopping' "$WORK/sluiced.log" || true
  awk '/requests in/ { done = $1 }
       /Socket errors/ { gsub(",", ""); connect = $4; read = $6; write = $8; timeout = $10 }
       /Non-2xx/ { non2xx = $5 }
       END { printf "HTTP (wrk, c=%s): completed=%d failed=%d (read %d, timeout %d) non_2xx=%d not_sent=%d (connect %d, write %d)\n",
             c, done, read + timeout, read, timeout, non2xx, connect + write, connect, write }' \
    c="${HTTP_CONNECTIONS:-64}" "$WORK/http.out"
  local line
  line=$(grep '^grpc ' "$WORK/grpc.out" || true)
  [ -n "$line" ] || { cat "$WORK/grpc.out"; exit 1; }
  kv() { sed -E "s/.*$1=([^ ]+).*/\1/" <<<"$line"; }
  echo "gRPC (h2_load, c=${GRPC_CONCURRENCY:-64} on ${GRPC_CONNECTIONS:-4} connections): completed=$(kv checks)" \
    "(ok $(kv ok), over_limit $(kv over_limit)) failed=$(($(kv errors) + $(kv lost))) (errors $(kv errors), lost $(kv lost))" \
    "refused_unprocessed=$(kv refused)"
  grep -v '^grpc ' "$WORK/grpc.out" || true
}
if [ -n "${STOP_AFTER:-}" ]; then
  stop_under_load
  exit 0
fi

http_rps=- http_p50=- http_p99=- http_total=0 http_non2xx="" http_client_cpu="" hs=0 hr=0
if [ "${ONLY:-http}" = http ] || [ -z "${ONLY:-}" ]; then
run http python3 -c "$CHILD_CPU" wrk -t"${WRK_THREADS:-1}" -c"${HTTP_CONNECTIONS:-64}" -d"${SECONDS_PER_RUN}s" --latency -s "$WORK/check.lua" "http://127.0.0.1:$HTTP_PORT"
http_rps=$(awk '/Requests\/sec/ {print $2}' "$WORK/http.out")
http_p50=$(awk '$1=="50%" {print $2}' "$WORK/http.out")
http_p99=$(awk '$1=="99%" {print $2}' "$WORK/http.out")
http_total=$(awk '/requests in/ {print $1}' "$WORK/http.out")
http_non2xx=$(awk '/Non-2xx/ {print $4}' "$WORK/http.out")
http_client_cpu=$(sed -n 's/^client_cpu_s=//p' "$WORK/http.out")
read -r hs hr <"$WORK/http.cpu"
else
  echo "-" >"$WORK/http.store"
fi

grpc_line="grpc checks=0 checks_per_s=- p50_ms=- p99_ms=- client_cpu_s=0" gs=0 gr=0
if [ "${ONLY:-grpc}" = grpc ] || [ -z "${ONLY:-}" ]; then
  run grpc "$GRPC_LOADER" --target "127.0.0.1:$GRPC_PORT" --seconds "$SECONDS_PER_RUN" \
    --concurrency "${GRPC_CONCURRENCY:-64}" --connections "${GRPC_CONNECTIONS:-4}" --ids "${IDS:-10000}" \
    ${GRPC_RATE:+--rate "$GRPC_RATE"}
  grpc_line=$(grep '^grpc ' "$WORK/grpc.out" || true)
  [ -n "$grpc_line" ] || { cat "$WORK/grpc.out"; exit 1; }
  read -r gs gr <"$WORK/grpc.cpu"
else
  echo "-" >"$WORK/grpc.store"
fi
kv() { sed -E "s/.*$1=([^ ]+).*/\1/" <<<"$grpc_line"; }

per_check() { awk -v t="$1" -v n="$2" -v hz="$HZ" 'BEGIN { if (n > 0) printf "%.1f", t / hz / n * 1e6; else print "-" }'; }
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
printf '| %-30s | %10s | %8s | %8s | %6s | %18s | %16s | %17s |\n' "run (${SECONDS_PER_RUN} s)" "checks/s" "p50" "p99" "store" "sluiced CPU/check" "Redis CPU/check" "client CPU/check"
printf '|%s|%s|%s|%s|%s|%s|%s|%s|\n' "--------------------------------" "------------" "----------" "----------" "--------" "--------------------" "------------------" "-------------------"
printf '| %-30s | %10s | %8s | %8s | %6s | %15s us | %13s us | %17s |\n' "HTTP /v1/check (wrk, c=${HTTP_CONNECTIONS:-64})" "$http_rps" "$http_p50" "$http_p99" "$(cat "$WORK/http.store")" \
  "$(per_check "$hs" "$http_total")" "$(per_check "$hr" "$http_total")" \
  "$(awk -v c="$http_client_cpu" -v n="$http_total" 'BEGIN { if (n > 0 && c != "") printf "%.1f us", c / n * 1e6; else print "-" }')"
printf '| %-30s | %10s | %6sms | %6sms | %6s | %15s us | %13s us | %14s us |\n' "gRPC ShouldRateLimit (${GRPC_LOAD:-h2}, ${GRPC_RATE:+rate=$GRPC_RATE/s }c=${GRPC_CONCURRENCY:-64})" "$(kv checks_per_s)" "$(kv p50_ms)" "$(kv p99_ms)" "$(cat "$WORK/grpc.store")" \
  "$(per_check "$gs" "$(kv checks)")" "$(per_check "$gr" "$(kv checks)")" "$(awk -v c="$(kv client_cpu_s)" -v n="$(kv checks)" 'BEGIN { if (n > 0) printf "%.1f", c / n * 1e6; else print "-" }')"
[ -z "$http_non2xx" ] || echo "HTTP non-2xx answers: $http_non2xx"
echo "gRPC: $grpc_line"
