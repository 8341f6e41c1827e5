#!/usr/bin/env bash
# The worked example of docs/sluiced.md (`make run`): starts a private redis-server on a free
# loopback port and sluiced on examples/config (every listener on a free port), prints a
# curl line per endpoint, walks the example routes through 200 / 429 / 503 with Redis up,
# then stopped, then back — and stops what it started, by pid. `make run` runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-./build/bin}
WORK=$(mktemp -d /tmp/sluiced_example.XXXXXX)
REDIS_PID="" SLUICED_PID=""
stop() {
  [ -n "$SLUICED_PID" ] && kill "$SLUICED_PID" 2>/dev/null && wait "$SLUICED_PID" 2>/dev/null || true
  [ -n "$REDIS_PID" ] && kill "$REDIS_PID" 2>/dev/null && wait "$REDIS_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap stop EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
start_redis() {
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$WORK" \
    --logfile "$WORK/redis.log" &
  REDIS_PID=$!
  for _ in $(seq 100); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && return; sleep 0.05; done
  echo "redis-server did not start" >&2; exit 1
}

REDIS_PORT=$(free_port)
start_redis
TOKEN=example-token
"$BIN/sluiced" --config examples/config --redis "redis://127.0.0.1:$REDIS_PORT" \
  --http-listen 127.0.0.1:0 --grpc-listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 \
  --metrics-listen 127.0.0.1:0 --admin-token "$TOKEN" --audit-log "$WORK/audit.log" --deadline-ms 50 >"$WORK/sluiced.log" 2>&1 &
SLUICED_PID=$!
for _ in $(seq 200); do grep -q "serving http=" "$WORK/sluiced.log" && break; sleep 0.05; done
line=$(grep "serving http=" "$WORK/sluiced.log") || { cat "$WORK/sluiced.log"; exit 1; }
HTTP=$(sed -E 's/.*http=([^ ]+).*/\1/' <<<"$line")
GRPC=$(sed -E 's/.*grpc=([^ ]+).*/\1/' <<<"$line")
ADMIN=$(sed -E 's/.*admin=([^ ]+).*/\1/' <<<"$line")
METRICS=$(sed -E 's/.*metrics=([^ ]+).*/\1/' <<<"$line")

cat <<EOT
sluiced is serving (redis-server pid $REDIS_PID on port $REDIS_PORT, sluiced pid $SLUICED_PID).
One curl per endpoint:
  curl -s -XPOST $HTTP/v1/check -d '{"domain":"shop","descriptors":[{"entries":[{"key":"route","value":"sign_in"},{"key":"account","value":"alice"}]}]}'
  curl -s -XPOST $HTTP/json -d '{"domain":"shop","descriptors":[{"entries":[{"key":"route","value":"checkout"},{"key":"account","value":"alice"}]}]}'
  curl -s -XPOST $HTTP/v1/leases -d '{"domain":"shop","entries":[{"key":"streams"},{"key":"account","value":"alice"}]}'
  curl -s -XPOST $HTTP/v1/leases/<lease>/heartbeat
  curl -s -XDELETE $HTTP/v1/leases/<lease>
  curl -s $METRICS/metrics
  curl -s $HTTP/healthz
  curl -s $HTTP/readyz
  curl -s -H 'Authorization: Bearer $TOKEN' $ADMIN/admin/config
  curl -s -H 'Authorization: Bearer $TOKEN' $ADMIN/admin/breaker
  curl -s -H 'Authorization: Bearer $TOKEN' -XPOST $ADMIN/admin/leases/list -d '{"domain":"shop","entries":[{"key":"streams"},{"key":"account","value":"alice"}]}'
  curl -s -H 'Authorization: Bearer $TOKEN' -XPOST $ADMIN/admin/leases/release -d '{"domain":"shop","entries":[{"key":"streams"},{"key":"account","value":"alice"}],"actor":"you","reason":"demo"}'
  curl -s -H 'Authorization: Bearer $TOKEN' -XPOST $ADMIN/admin/inspect -d '{"domain":"shop","entries":[{"key":"route","value":"sign_in"},{"key":"account","value":"alice"}]}'
  gRPC (Envoy RLS v3): envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit on $GRPC
EOT

# check NAME JSON: one POST /v1/check, printed as "status  headers  decision".
check() {
  local name=$1 body=$2
  local out
  out=$(curl -s -i -XPOST "$HTTP/v1/check" -d "$body")
  local status rl retry source
  status=$(head -1 <<<"$out" | awk '{print $2}')
  rl=$(grep -i '^RateLimit:' <<<"$out" | tr -d '\r' | cut -d' ' -f2- || true)
  retry=$(grep -i '^Retry-After:' <<<"$out" | tr -d '\r' | cut -d' ' -f2- || true)
  source=$(tail -1 <<<"$out" | python3 -c 'import json,sys; d=json.load(sys.stdin)["descriptors"]; print(",".join(x.get("source","-")+"/"+x.get("reason","-") for x in d))')
  printf '  %-34s %s  RateLimit: %-26s Retry-After: %-4s %s\n' "$name" "$status" "${rl:--}" "${retry:--}" "$source"
}
d1() { printf '{"domain":"shop","descriptors":[{"entries":[{"key":"%s","value":"%s"},{"key":"%s","value":"%s"}]}]}' "$@"; }
composite() { printf '{"domain":"shop","descriptors":[{"entries":[{"key":"tenant","value":"%s"}]},{"entries":[{"key":"api","value":"search"}]}]}' "$1"; }

echo
echo "== Redis up"
for i in 1 2 3 4; do check "sign-in alice #$i (3/min, closed)" "$(d1 route sign_in account alice)"; done
for i in 1 2 3 4 5 6; do check "seat map s1 #$i (5/min, open)" "$(d1 route seat_map session s1)"; done
check "checkout alice (10/min, default)" "$(d1 route checkout account alice)"
for i in 1 2 3 4 5; do check "search tenant acme #$i (4/min)" "$(composite acme)"; done
check "search tenant zed (global 6/min)" "$(composite zed)"
check "search tenant zed" "$(composite zed)"
check "search tenant zed (global spent)" "$(composite zed)"
echo "  streams (3 concurrent per account):"
leases=()
for i in 1 2 3 4; do
  out=$(curl -s -w ' %{http_code}' -XPOST "$HTTP/v1/leases" -d '{"domain":"shop","entries":[{"key":"streams"},{"key":"account","value":"alice"}]}')
  echo "    acquire #$i -> ${out##* } ${out% *}"
  lease=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1]).get("lease",""))' "${out% *}")
  [ -n "$lease" ] && leases+=("$lease")
done
echo "    release ${leases[0]} -> $(curl -s -o /dev/null -w '%{http_code}' -XDELETE "$HTTP/v1/leases/${leases[0]}")"
echo "  readyz: $(curl -s "$HTTP/readyz")"

echo
echo "== Redis stopped (kill $REDIS_PID)"
kill "$REDIS_PID"; wait "$REDIS_PID" 2>/dev/null || true; REDIS_PID=""
check "sign-in bob (closed)" "$(d1 route sign_in account bob)"
check "seat map s2 (open)" "$(d1 route seat_map session s2)"
check "checkout bob (default: open)" "$(d1 route checkout account bob)"
echo "  readyz: $(curl -s "$HTTP/readyz")"

echo
echo "== Redis restarted on port $REDIS_PORT (sluiced not restarted)"
start_redis
for _ in $(seq 60); do
  src=$(curl -s -XPOST "$HTTP/v1/check" -d "$(d1 route checkout account probe)" | python3 -c 'import json,sys; print(json.load(sys.stdin)["descriptors"][0].get("source"))')
  [ "$src" = store ] && break; sleep 0.1
done
check "sign-in bob (closed)" "$(d1 route sign_in account bob)"
check "seat map s2 (open)" "$(d1 route seat_map session s2)"
echo "  readyz: $(curl -s "$HTTP/readyz")"
echo
echo "metrics (excerpt):"
curl -s "$METRICS/metrics" | grep -E '^sluiced_decisions_total\{domain="shop",limit="sign_in"' | sed 's/^/  /'
echo
echo "stopping sluiced (pid $SLUICED_PID) and redis-server (pid $REDIS_PID)"
