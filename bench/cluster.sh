#!/usr/bin/env bash
# Redis Cluster routing overhead: `sluice bench` against one redis-server and
# against a local 3-primary Redis Cluster (redis+cluster://), in the same run, side by
# side: decisions/s and p99 per algorithm and concurrency, and their ratios. Every server
# is a private redis-server on free loopback ports (the cluster's bus ports, port+10000,
# free too), started here and stopped by its pid at exit.
# On one small box the primaries share its cores with each other and with the client, so
# this measures what routing costs (slot hashing, one connection per primary, batches
# split per slot), not how a cluster scales: see docs/library.md (Redis Cluster).
# Usage: bench/cluster.sh [seconds per measurement, default 3] [runs, default 3]
# Env: SLUICE (default ./build/release/bin/sluice, else ./build/bin/sluice), ALGORITHMS
# (default "fixed_window"), CONCURRENCY (default "1 50 500"), KEYS (default 10000).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_RUN=${1:-3}
RUNS=${2:-3}
if [ -z "${SLUICE:-}" ]; then
  SLUICE=./build/release/bin/sluice
  [ -x "$SLUICE" ] || SLUICE=./build/bin/sluice
fi
ALGORITHMS=(${ALGORITHMS:-fixed_window})
LEVELS=(${CONCURRENCY:-1 50 500})
KEYS=${KEYS:-10000}
[ -x "$SLUICE" ] || { echo "build first: make build" >&2; exit 2; }

source bench/lib.sh
pids=()
dirs=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  for d in "${dirs[@]}"; do rm -rf "$d"; done
}
trap cleanup EXIT

port_free() { ! (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null; }
# A port below 30000 whose bus port (+10000) is free as well.
free_cluster_port() {
  for _ in $(seq 1 100); do
    local p=$((20000 + RANDOM % 10000))
    if port_free "$p" && port_free $((p + 10000)); then echo "$p"; return 0; fi
  done
  echo "no free port pair found" >&2
  exit 2
}
start_server() {  # start_server <port> [extra args...]
  local p=$1
  shift
  local d
  d=$(mktemp -d)
  dirs+=("$d")
  redis-server --port "$p" --bind 127.0.0.1 --save "" --appendonly no --dir "$d" \
    --logfile "$d/redis.log" --daemonize no "$@" &
  pids+=($!)
  for _ in $(seq 1 200); do redis-cli -p "$p" ping >/dev/null 2>&1 && return 0; sleep 0.05; done
  echo "redis-server did not start on port $p" >&2
  exit 2
}

single=$(free_cluster_port)
start_server "$single"
cluster_ports=()
for _ in 1 2 3; do
  p=$(free_cluster_port)
  start_server "$p" --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 5000
  cluster_ports+=("$p")
done
redis-cli --cluster create $(printf '127.0.0.1:%s ' "${cluster_ports[@]}") --cluster-replicas 0 \
  --cluster-yes >/dev/null
for p in "${cluster_ports[@]}"; do
  for _ in $(seq 1 200); do
    redis-cli -p "$p" CLUSTER INFO | grep -q cluster_state:ok && break
    sleep 0.05
  done
done
cluster_url="redis+cluster://127.0.0.1:${cluster_ports[0]},127.0.0.1:${cluster_ports[1]}"
# A cluster of one primary that holds every slot: the same server through the router
# (redis+cluster://) and directly (redis://, unbatched: a batch of several slots would be
# refused with CROSSSLOT) isolates what routing costs the client.
one=$(free_cluster_port)
start_server "$one" --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 5000
redis-cli -p "$one" CLUSTER ADDSLOTSRANGE 0 16383 >/dev/null
for _ in $(seq 1 200); do
  redis-cli -p "$one" CLUSTER INFO | grep -q cluster_state:ok && break
  sleep 0.05
done

echo "redis-server $(redis-server --version | sed -n 's/.*v=\([0-9.]*\).*/\1/p'), $(nproc) cores;" \
     "single node on $single, cluster of 3 primaries on ${cluster_ports[*]}," \
     "cluster of 1 primary on $one;" \
     "${SECONDS_PER_RUN}s per measurement, median of $RUNS runs, $KEYS ids"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"

median() { tr ' ' '\n' | awk 'NF' | sort -g | awk '{v[NR]=$1} END {if (NR==0) print "-"; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
# Three targets: the single node as shipped (batching on: up to 64 queued calls per
# EVALSHA), the single node with batching off (--max-batch 1: every call its own
# EVALSHA), and the cluster (the calls queued for one primary share a batch whatever
# their slots, keys undeclared: src/redis/cluster_store.h). The one-primary pair, both
# unbatched (a redis:// batch of several slots would be refused with CROSSSLOT), is the
# router's own cost per call.
declare -A rate p99
targets=(single unbatched cluster one_direct one_routed)
for run in $(seq 1 "$RUNS"); do
  for a in "${ALGORITHMS[@]}"; do
    for c in "${LEVELS[@]}"; do
      for target in "${targets[@]}"; do
        url="redis://127.0.0.1:$single"
        batch=64
        [ "$target" = unbatched ] && batch=1
        [ "$target" = cluster ] && url=$cluster_url
        [ "$target" = one_direct ] && url="redis://127.0.0.1:$one" && batch=1
        [ "$target" = one_routed ] && url="redis+cluster://127.0.0.1:$one" && batch=1
        out=$("$SLUICE" bench --redis "$url" --algorithm "$a" --max-batch "$batch" \
              --concurrency "$c" --duration "$SECONDS_PER_RUN" --keys "$KEYS" --limit 1000000000 --json)
        k="$target/$a/$c"
        rate[$k]+=" $(json "$out" decisions_per_s)"
        p99[$k]+=" $(json "$out" p99_us)"
      done
    done
  done
done

ratio() { awk -v x="$1" -v y="$2" 'BEGIN {printf "%.2f", (y > 0 ? x / y : 0)}'; }
printf '\n%-13s %4s | %9s %7s | %9s %7s | %9s %7s | %-11s | %-11s || %9s %7s | %9s %7s | %-11s\n' \
  algorithm conc "single/s" "p99 us" "unbat./s" "p99 us" "cluster/s" "p99 us" "vs single" \
  "vs unbat." "direct/s" "p99 us" "routed/s" "p99 us" "overhead"
for a in "${ALGORITHMS[@]}"; do
  for c in "${LEVELS[@]}"; do
    declare -A r=() q=()
    for target in "${targets[@]}"; do
      r[$target]=$(echo "${rate[$target/$a/$c]}" | median)
      q[$target]=$(echo "${p99[$target/$a/$c]}" | median)
    done
    printf '%-13s %4s | %9.0f %7.0f | %9.0f %7.0f | %9.0f %7.0f | %4s %-6s | %4s %-6s || %9.0f %7.0f | %9.0f %7.0f | %4s %-6s\n' \
      "$a" "$c" "${r[single]}" "${q[single]}" "${r[unbatched]}" "${q[unbatched]}" \
      "${r[cluster]}" "${q[cluster]}" "$(ratio "${r[cluster]}" "${r[single]}")" \
      "$(ratio "${q[cluster]}" "${q[single]}")x" "$(ratio "${r[cluster]}" "${r[unbatched]}")" \
      "$(ratio "${q[cluster]}" "${q[unbatched]}")x" "${r[one_direct]}" "${q[one_direct]}" \
      "${r[one_routed]}" "${q[one_routed]}" "$(ratio "${r[one_routed]}" "${r[one_direct]}")" \
      "$(ratio "${q[one_routed]}" "${q[one_direct]}")x"
  done
done
echo "(vs: the 3-primary cluster's decisions/s ratio, then its p99 ratio; overhead: the"
echo " one-primary cluster through the router against the same server directly, both unbatched)"
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "targets: decisions/s ratio >= 0.8, p99 ratio <= 1.5"
