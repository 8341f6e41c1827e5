// sluice bench --algorithm concurrency.
//
// Cycles (default): `--concurrency N` acquire → release cycles kept in flight over
// `--keys K` ids; a cycle ends when the release is answered (or at once when the acquire
// was refused). cycles/s is reported as decisions_per_s, refusals as acquires_refused,
// and Redis's CPU per cycle.
//
// Heartbeats (`--heartbeat-leases L`): holds L leases spread over the ids with a
// heartbeat every `--heartbeat-ms` (lease ttl 6x that), measures over one whole
// interval (or --duration if longer) how many heartbeats Redis served and what they
// cost it: the price of keeping long-lived leases alive.
#include <utility>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench.h"
#include "commands.h"
#include "histogram.h"

namespace sluice::cli {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

struct CycleRun {
  explicit CycleRun(ConcurrencyLimiter l) : limiter(std::move(l)) {}
  ConcurrencyLimiter limiter;
  std::vector<std::string> ids;
  std::atomic<uint64_t> next_id{0};
  std::atomic<bool> measuring{false}, stopping{false};
  std::atomic<int> in_flight{0};
  std::mutex mu;  // the counters below: completions run on any I/O thread
  Histogram latency;
  uint64_t cycles = 0, refused = 0, errors = 0, not_from_store = 0;
  std::string first_error;
};

void Cycle(const std::shared_ptr<CycleRun>& run);

void Done(const std::shared_ptr<CycleRun>& run, steady_clock::time_point start, int outcome,
          const Status& error, bool from_store) {
  if (run->measuring.load(std::memory_order_relaxed)) {
    std::lock_guard lock(run->mu);
    run->latency.Record(
        std::chrono::duration_cast<std::chrono::microseconds>(steady_clock::now() - start).count());
    ++run->cycles;
    if (outcome == 1) ++run->refused;
    if (outcome == 2 && run->errors++ == 0) run->first_error = error.ToString();
    if (!from_store) ++run->not_from_store;
  }
  Cycle(run);
}

void Cycle(const std::shared_ptr<CycleRun>& run) {
  if (run->stopping.load(std::memory_order_relaxed)) {
    run->in_flight.fetch_sub(1, std::memory_order_acq_rel);
    return;
  }
  const std::string& id =
      run->ids[run->next_id.fetch_add(1, std::memory_order_relaxed) % run->ids.size()];
  const auto start = steady_clock::now();
  run->limiter.AcquireAsync(id, {}, [run, start](StatusOr<Acquisition> a) {
    if (!a.ok()) return Done(run, start, 2, a.status(), true);
    const bool from_store = a->source == DecisionSource::kStore;
    if (!a->acquired) return Done(run, start, 1, {}, from_store);
    // The Lease is released explicitly; its handle can go (release is in flight).
    Lease lease = std::move(a->lease);
    lease.ReleaseAsync([run, start, from_store](Status released) {
      Done(run, start, released.ok() ? 0 : 2, released, from_store);
    });
  });
}

int RunCycles(const BenchOptions& o, Client& client, const ConcurrencyLimiter& limiter) {
  auto run = std::make_shared<CycleRun>(limiter);
  for (int i = 0; i < o.keys; ++i) run->ids.push_back("user:" + std::to_string(i));
  run->in_flight = o.concurrency;
  for (int i = 0; i < o.concurrency; ++i) Cycle(run);
  std::this_thread::sleep_for(std::chrono::duration<double>(o.warmup_s));
  const ClientStats before = client.stats();
  const ServerSample server_before = SampleServer(client);
  const double client_cpu_before = ProcessCpuSeconds();
  run->measuring = true;
  const auto t0 = steady_clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(o.duration_s));
  run->measuring = false;
  const double elapsed = std::chrono::duration<double>(steady_clock::now() - t0).count();
  const double client_cpu_s = ProcessCpuSeconds() - client_cpu_before;
  const ClientStats after = client.stats();
  const ServerSample server_after = SampleServer(client);
  run->stopping = true;
  while (run->in_flight.load(std::memory_order_acquire) > 0) {
    std::this_thread::sleep_for(milliseconds(1));
  }
  std::lock_guard lock(run->mu);
  const double rate = static_cast<double>(run->cycles) / elapsed;
  const double client_cpu_us =
      run->cycles > 0 ? client_cpu_s * 1e6 / static_cast<double>(run->cycles) : -1;
  const uint64_t writes = after.writes - before.writes;
  const double per_write =
      writes ? static_cast<double>(after.commands - before.commands) / static_cast<double>(writes)
             : 0;
  double acquire_us = -1, release_us = -1, cpu_us = -1;
  if (server_before.ok && server_after.ok && run->cycles > 0) {
    const double calls = server_after.script_calls - server_before.script_calls;
    if (calls > 0) acquire_us = (server_after.script_usec - server_before.script_usec) / calls;
    const double zrems = server_after.zrem_calls - server_before.zrem_calls;
    if (zrems > 0) release_us = (server_after.zrem_usec - server_before.zrem_usec) / zrems;
    cpu_us = (server_after.cpu_s - server_before.cpu_s) * 1e6 / static_cast<double>(run->cycles);
  }
  if (o.json) {
    nlohmann::json j = {{"algorithm", "concurrency"},
                        {"concurrency", o.concurrency},
                        {"keys", o.keys},
                        {"duration_s", elapsed},
                        {"decisions_per_s", rate},
                        {"cycles", run->cycles},
                        {"acquires_refused", run->refused},
                        {"errors", run->errors},
                        {"not_from_store", run->not_from_store},
                        {"p50_us", run->latency.Quantile(0.50)},
                        {"p99_us", run->latency.Quantile(0.99)},
                        {"p999_us", run->latency.Quantile(0.999)},
                        {"commands_per_write", per_write},
                        {"redis_acquire_us_per_call", acquire_us},
                        {"redis_release_us_per_call", release_us},
                        {"redis_cpu_us_per_cycle", cpu_us},
                        {"client_cpu_us_per_cycle", client_cpu_us}};
    if (!run->first_error.empty()) j["first_error"] = run->first_error;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("sluice bench  concurrency  in flight=%d keys=%d  %.1f s measured\n", o.concurrency,
                o.keys, elapsed);
    std::printf(
        "  cycles/s     %.0f   (acquire + release; %llu acquires refused, %llu errors, "
        "%llu not from the store)\n",
        rate, static_cast<unsigned long long>(run->refused),
        static_cast<unsigned long long>(run->errors),
        static_cast<unsigned long long>(run->not_from_store));
    std::printf("  cycle time   p50 %lld us  p99 %lld us  p999 %lld us\n",
                static_cast<long long>(run->latency.Quantile(0.50)),
                static_cast<long long>(run->latency.Quantile(0.99)),
                static_cast<long long>(run->latency.Quantile(0.999)));
    std::printf("  pipelining   %.1f commands per write\n", per_write);
    if (cpu_us >= 0) {
      std::printf(
          "  redis cost   acquire %.2f us, release %.2f us per call; %.2f us of server "
          "CPU per cycle\n",
          acquire_us, release_us, cpu_us);
    }
    std::printf("  client cost  %.2f us of this process's CPU per cycle\n", client_cpu_us);
    if (!run->first_error.empty()) std::printf("  first error  %s\n", run->first_error.c_str());
  }
  return kExitOk;
}

int RunHeartbeats(const BenchOptions& o, Client& client, const ConcurrencyLimiter& limiter) {
  // Acquire in waves of `concurrency` asynchronous calls.
  std::vector<Lease> leases;
  leases.reserve(static_cast<size_t>(o.heartbeat_leases));
  std::mutex mu;
  int64_t failed = 0;
  const auto t_acquire = steady_clock::now();
  for (int64_t done = 0; done < o.heartbeat_leases;) {
    const int64_t wave = std::min<int64_t>(o.concurrency, o.heartbeat_leases - done);
    std::atomic<int64_t> pending{wave};
    for (int64_t i = 0; i < wave; ++i) {
      const std::string id = "user:" + std::to_string((done + i) % o.keys);
      limiter.AcquireAsync(id, {}, [&](StatusOr<Acquisition> a) {
        {
          std::lock_guard lock(mu);
          if (a.ok() && a->acquired) {
            leases.push_back(std::move(a->lease));
          } else {
            ++failed;
          }
        }
        if (pending.fetch_sub(1) == 1) pending.notify_one();
      });
    }
    for (int64_t p = pending.load(); p != 0; p = pending.load()) pending.wait(p);
    done += wave;
  }
  const double acquire_s = std::chrono::duration<double>(steady_clock::now() - t_acquire).count();
  const double measure_s = std::max(o.duration_s, static_cast<double>(o.heartbeat_ms) / 1000.0);
  const ServerSample before = SampleServer(client);
  const auto t0 = steady_clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(measure_s));
  const double elapsed = std::chrono::duration<double>(steady_clock::now() - t0).count();
  const ServerSample after = SampleServer(client);
  int64_t held = 0;
  {
    std::lock_guard lock(mu);
    for (const Lease& l : leases) held += l.held();
  }
  const double heartbeats = after.script_calls - before.script_calls;
  const double per_s = heartbeats / elapsed;
  const double us_per = heartbeats > 0 ? (after.script_usec - before.script_usec) / heartbeats : -1;
  const double cpu_pct = (after.cpu_s - before.cpu_s) / elapsed * 100.0;
  const double cpu_us_per = heartbeats > 0 ? (after.cpu_s - before.cpu_s) * 1e6 / heartbeats : -1;
  if (o.json) {
    nlohmann::json j = {{"algorithm", "concurrency"},
                        {"mode", "heartbeats"},
                        {"leases", o.heartbeat_leases},
                        {"leases_held_at_end", held},
                        {"acquire_failures", failed},
                        {"acquire_s", acquire_s},
                        {"heartbeat_ms", o.heartbeat_ms},
                        {"duration_s", elapsed},
                        {"heartbeats_per_s", per_s},
                        {"redis_heartbeat_us_per_call", us_per},
                        {"redis_cpu_us_per_heartbeat", cpu_us_per},
                        {"redis_cpu_percent", cpu_pct}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf(
        "sluice bench  concurrency heartbeats  %lld leases, heartbeat every %lld ms, "
        "%.1f s measured\n",
        static_cast<long long>(o.heartbeat_leases), static_cast<long long>(o.heartbeat_ms),
        elapsed);
    std::printf("  acquired     in %.2f s (%lld failed); %lld held at the end\n", acquire_s,
                static_cast<long long>(failed), static_cast<long long>(held));
    std::printf("  heartbeats   %.0f/s, %.2f us each in the script, %.2f us of server CPU each\n",
                per_s, us_per, cpu_us_per);
    std::printf("  redis CPU    %.1f%% of one core for heartbeats (and nothing else)\n", cpu_pct);
  }
  std::lock_guard lock(mu);
  leases.clear();  // released (asynchronously) before the client goes
  std::this_thread::sleep_for(milliseconds(200));
  return kExitOk;
}

}  // namespace

int RunLeaseBench(const BenchOptions& o) {
  if (o.concurrency < 1 || o.keys < 1 || o.duration_s <= 0 || o.warmup_s < 0 ||
      o.heartbeat_leases < 0 || o.heartbeat_ms < 2) {
    std::fprintf(stderr,
                 "sluice bench: --concurrency, --keys, --duration and --heartbeat-ms must "
                 "be positive\n");
    return kExitError;
  }
  const FailurePolicy policy = *ParseFailurePolicy(o.on_failure);  // RunBench checked it
  auto client = Client::Create({.url = o.url,
                                .prefix = "sluicebench",
                                .deadline = milliseconds(o.deadline_ms),
                                .max_in_flight = static_cast<size_t>(o.concurrency) * 2 + 1024 +
                                                 static_cast<size_t>(o.heartbeat_leases),
                                .on_failure = policy});
  if (!client.ok()) {
    std::fprintf(stderr, "sluice bench: %s\n", client.status().ToString().c_str());
    return kExitError;
  }
  ConcurrencyOptions options{.limit = o.limit, .lease_ttl = milliseconds(o.lease_ttl_ms)};
  if (o.heartbeat_leases > 0) {
    options.heartbeat_interval = milliseconds(o.heartbeat_ms);
    options.lease_ttl = milliseconds(o.heartbeat_ms * 6);
  }
  auto limiter = (*client)->MakeConcurrencyLimiter("bench", options);
  if (!limiter.ok()) {
    std::fprintf(stderr, "sluice bench: %s\n", limiter.status().ToString().c_str());
    return kExitError;
  }
  return o.heartbeat_leases > 0 ? RunHeartbeats(o, **client, *limiter)
                                : RunCycles(o, **client, *limiter);
}

}  // namespace sluice::cli
