#!/usr/bin/env node
// rate-limiter-flexible's fixed window (RateLimiterRedis.consume) under the same load as
// `sluice bench` (bench/redis_core.sh runs both against one redis-server): `N` calls kept
// in flight (each completion issues the next), ids used round-robin, every call admitted
// (1e9 points per 60 s: the write path is measured), one ioredis connection as the
// library's documentation sets it up (no auto-pipelining, the library's default).
//
// Usage: NODE_PATH=<dir>/node_modules node bench/rlf/rlf_bench.js <port> <N> <seconds> [keys]
// Prints one JSON line: decisions_per_s, p50_us, p99_us, errors, redis_cpu_us_per_decision
// (INFO cpu used_cpu_user + used_cpu_sys over the measured period, divided by decisions)
// and client_cpu_us_per_decision (this process's user + system CPU, process.cpuUsage).
'use strict';
const Redis = require('ioredis');
const { RateLimiterRedis } = require('rate-limiter-flexible');

const port = parseInt(process.argv[2], 10);
const inFlight = parseInt(process.argv[3], 10);
const seconds = parseFloat(process.argv[4] || '5');
const keys = parseInt(process.argv[5] || '10000', 10);
const warmupMs = 1000;

function cpuSeconds(info) {
  const num = (k) => Number((info.match(new RegExp(k + ':([0-9.]+)')) || [0, 0])[1]);
  return num('used_cpu_user') + num('used_cpu_sys');
}

async function main() {
  const redis = new Redis({ port, host: '127.0.0.1', maxRetriesPerRequest: 1 });
  const admin = new Redis({ port, host: '127.0.0.1' });  // INFO, outside the measured traffic
  await redis.ping();
  const limiter = new RateLimiterRedis({
    storeClient: redis, keyPrefix: 'rlfbench', points: 1e9, duration: 60 });
  const ids = [];
  for (let i = 0; i < keys; i++) ids.push('user:' + i);

  let next = 0, measuring = false, stopping = false;
  let done = 0, errors = 0;
  const latencies = [];
  const loop = async () => {
    while (!stopping) {
      const id = ids[next++ % keys];
      const t0 = process.hrtime.bigint();
      try {
        await limiter.consume(id);
      } catch (e) {
        if (e instanceof Error && measuring) errors++;  // a refusal is not an Error
      }
      if (measuring) {
        done++;
        latencies.push(Number(process.hrtime.bigint() - t0) / 1000);
      }
    }
  };
  const loops = [];
  for (let i = 0; i < inFlight; i++) loops.push(loop());
  await new Promise((r) => setTimeout(r, warmupMs));

  const cpu0 = cpuSeconds(await admin.info('cpu'));
  const client0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  measuring = true;
  await new Promise((r) => setTimeout(r, seconds * 1000));
  measuring = false;
  const elapsed = Number(process.hrtime.bigint() - t0) / 1e9;
  const client = process.cpuUsage(client0);
  const cpu1 = cpuSeconds(await admin.info('cpu'));
  stopping = true;
  await Promise.all(loops);
  redis.disconnect();
  admin.disconnect();

  latencies.sort((a, b) => a - b);
  const q = (p) => (latencies.length ? latencies[Math.min(latencies.length - 1,
                                                          Math.floor(p * latencies.length))] : 0);
  console.log(JSON.stringify({
    decisions_per_s: done / elapsed,
    decisions: done,
    errors,
    p50_us: Math.round(q(0.5)),
    p99_us: Math.round(q(0.99)),
    redis_cpu_us_per_decision: done ? (cpu1 - cpu0) * 1e6 / done : -1,
    client_cpu_us_per_decision: done ? (client.user + client.system) / done : -1,
  }));
}
main().catch((e) => { console.error(String(e)); process.exit(1); });
