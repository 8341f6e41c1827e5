#!/usr/bin/env bash
# `make serve`: sluiced on examples/config at the documented addresses (HTTP 127.0.0.1:8080,
# gRPC 8081, admin 8082, metrics 8083), with a private redis-server on a free loopback port
# (its files under build/serve/), in the foreground until Ctrl-C; then it stops what it
# started, by pid. The README's curl lines call it.
#
# A documented port already in use is refused before anything starts, naming the port and
# the variable that moves it: HTTP_PORT, GRPC_PORT, ADMIN_PORT, METRICS_PORT (REDIS_PORT
# picks the redis-server's; 0, the default, takes a free one).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-./build/bin}
HTTP_PORT=${HTTP_PORT:-8080}
GRPC_PORT=${GRPC_PORT:-8081}
ADMIN_PORT=${ADMIN_PORT:-8082}
METRICS_PORT=${METRICS_PORT:-8083}
REDIS_PORT=${REDIS_PORT:-0}
SERVE_DIR=${SERVE_DIR:-build/serve}
# The admin token of this local instance only (the curl lines below send it).
ADMIN_TOKEN=${ADMIN_TOKEN:-serve-token}

# free PORT: true when nothing listens on 127.0.0.1:PORT (a bind, released at once).
free() {
  python3 -c 'import socket,sys; s=socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1])))' "$1" \
    2>/dev/null
}
for var in HTTP_PORT GRPC_PORT ADMIN_PORT METRICS_PORT; do
  port=${!var}
  if ! free "$port"; then
    echo "port $port ($var) is in use on 127.0.0.1: stop what listens there, or pick another" \
      "port, e.g. make serve $var=$((port < 55536 ? port + 10000 : port - 10000))" >&2
    exit 1
  fi
done
if [ "$REDIS_PORT" = 0 ]; then
  REDIS_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
elif ! free "$REDIS_PORT"; then
  echo "port $REDIS_PORT (REDIS_PORT) is in use on 127.0.0.1: pick another, or 0 for a free one" >&2
  exit 1
fi

mkdir -p "$SERVE_DIR"
SERVE_DIR=$(cd "$SERVE_DIR" && pwd)
REDIS_PID="" SLUICED_PID=""
# stop STATUS: sluiced first (it drains), then redis-server, each by its pid.
stop() {
  trap - INT TERM EXIT
  [ -n "$SLUICED_PID" ] && kill -TERM "$SLUICED_PID" 2>/dev/null && wait "$SLUICED_PID" 2>/dev/null || true
  [ -n "$REDIS_PID" ] && kill -TERM "$REDIS_PID" 2>/dev/null && wait "$REDIS_PID" 2>/dev/null || true
  echo "stopped sluiced and redis-server" >&2
  exit "$1"
}
trap 'stop 0' INT TERM
trap 'stop $?' EXIT

redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$SERVE_DIR" \
  --logfile "$SERVE_DIR/redis.log" &
REDIS_PID=$!
for _ in $(seq 100); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.05; done

# sluiced logs to this terminal.
"$BIN/sluiced" --config examples/config --redis "redis://127.0.0.1:$REDIS_PORT" \
  --http-listen "127.0.0.1:$HTTP_PORT" --grpc-listen "127.0.0.1:$GRPC_PORT" \
  --admin-listen "127.0.0.1:$ADMIN_PORT" --metrics-listen "127.0.0.1:$METRICS_PORT" \
  --admin-token "$ADMIN_TOKEN" --audit-log "$SERVE_DIR/audit.log" &
SLUICED_PID=$!
for _ in $(seq 200); do
  curl -sf "localhost:$HTTP_PORT/healthz" >/dev/null 2>&1 && break
  kill -0 "$SLUICED_PID" 2>/dev/null || { echo "sluiced did not start" >&2; exit 1; }
  sleep 0.05
done
cat <<EOT
serving: redis-server pid $REDIS_PID on redis://127.0.0.1:$REDIS_PORT, sluiced pid $SLUICED_PID
  curl -s -XPOST localhost:$HTTP_PORT/v1/check -d '{"domain":"shop","descriptors":[{"entries":[{"key":"route","value":"sign_in"},{"key":"account","value":"alice"}]}]}'
  curl -s localhost:$METRICS_PORT/metrics
  curl -s -H 'Authorization: Bearer $ADMIN_TOKEN' localhost:$ADMIN_PORT/admin/config
  SLUICE_REDIS_URL=redis://127.0.0.1:$REDIS_PORT build/bin/sluice audit
Ctrl-C stops both.
EOT
wait "$SLUICED_PID"
