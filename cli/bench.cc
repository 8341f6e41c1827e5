// sluice bench: closed-loop load on one store. `--concurrency N` calls are kept in flight
// (each completion issues the next call), spread round-robin over `--keys K` ids.
// Latency is measured from the call to its callback; decisions/s counts completed calls
// (allowed + refused + errors) in the measured period, after a warm-up.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <sys/resource.h>

#include <nlohmann/json.hpp>

#include "bench.h"
#include "commands.h"
#include "histogram.h"
#include "sluice/sluice.h"

namespace sluice::cli {
namespace {

// Shared by the in-flight calls; touched only on the client's single I/O thread except
// the atomics.
struct Run {
  explicit Run(Limiter l) : limiter(std::move(l)) {}
  Limiter limiter;
  std::vector<std::string> ids;
  std::atomic<bool> measuring{false};
  std::atomic<bool> stopping{false};
  std::atomic<int> in_flight{0};
  uint64_t next_id = 0;
  Histogram latency;
  // --phase: calls started within [phase_from, phase_to) of the measured period, apart
  // (e.g. while Redis is paused). t0_ns: when measuring began (steady clock).
  std::atomic<int64_t> t0_ns{0};
  int64_t phase_from_ns = -1, phase_to_ns = -1;
  Histogram phase_latency;
  uint64_t phase_calls = 0, phase_not_from_store = 0;
  uint64_t allowed = 0, refused = 0, errors = 0;
  uint64_t not_from_store = 0;  // decided by a failure policy or the denial cache
  // Calls handed from an I/O thread to the driver thread (see Issue), and its wake-ups.
  std::atomic<uint64_t> handoff{0}, wake{0};
  std::thread::id driver;
  std::string first_error;
};

void IssueOne(const std::shared_ptr<Run>& run);

// A check may complete inline (the embedded store, an open breaker, a cached denial): a
// trampoline turns that recursion into a loop on the thread that started it. On one of
// the client's I/O threads such a loop must not run for long — the thread has replies,
// deadlines and the bench's own INFO calls to serve — so after a few inline answers in
// a row the rest is handed to the driver thread.
void Issue(const std::shared_ptr<Run>& run) {
  static thread_local bool issuing = false;
  static thread_local uint64_t deferred = 0;
  if (issuing) {
    ++deferred;
    return;
  }
  issuing = true;
  deferred = 1;
  const bool on_driver = std::this_thread::get_id() == run->driver;
  for (int inline_runs = 0; deferred > 0; ++inline_runs) {
    if (!on_driver && inline_runs >= 64) {
      run->handoff.fetch_add(deferred, std::memory_order_relaxed);
      run->wake.fetch_add(1, std::memory_order_release);
      run->wake.notify_one();
      deferred = 0;
      break;
    }
    --deferred;
    IssueOne(run);
  }
  issuing = false;
}

void IssueOne(const std::shared_ptr<Run>& run) {
  if (run->stopping.load(std::memory_order_relaxed)) {
    run->in_flight.fetch_sub(1, std::memory_order_acq_rel);
    return;
  }
  const std::string& id = run->ids[run->next_id++ % run->ids.size()];
  const auto start = std::chrono::steady_clock::now();
  run->limiter.CheckAsync(id, {}, [run, start](StatusOr<Decision> result) {
    if (run->measuring.load(std::memory_order_relaxed)) {
      const int64_t us = std::chrono::duration_cast<std::chrono::microseconds>(
                             std::chrono::steady_clock::now() - start)
                             .count();
      run->latency.Record(us);
      const int64_t since =
          std::chrono::duration_cast<std::chrono::nanoseconds>(start.time_since_epoch()).count() -
          run->t0_ns.load(std::memory_order_relaxed);
      if (since >= run->phase_from_ns && since < run->phase_to_ns) {
        run->phase_latency.Record(us);
        ++run->phase_calls;
        if (result.ok() && result->source != DecisionSource::kStore) ++run->phase_not_from_store;
      }
      if (!result.ok()) {
        if (run->errors++ == 0) run->first_error = result.status().ToString();
      } else {
        ++(result->allowed ? run->allowed : run->refused);
        if (result->source != DecisionSource::kStore) ++run->not_from_store;
      }
    }
    Issue(run);
  });
}

}  // namespace

double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  const auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

double InfoNumber(const std::string& info, const std::string& key) {
  auto at = info.find(key);
  if (at == std::string::npos) return 0;
  return std::strtod(info.c_str() + at + key.size(), nullptr);
}

ServerSample SampleServer(const Client& client) {
  ServerSample s;
  auto stats = client.ServerInfo("commandstats");
  auto cpu = client.ServerInfo("cpu");
  if (!stats.ok() || !cpu.ok()) return s;
  s.ok = true;
  auto add = [&](const char* cmd, double& calls, double& usec) {
    auto at = stats->find(cmd);
    if (at == std::string::npos) return;
    std::string line = stats->substr(at, stats->find('\n', at) - at);
    calls += InfoNumber(line, "calls=");
    usec += InfoNumber(line, "usec=");
  };
  add("cmdstat_evalsha:", s.script_calls, s.script_usec);
  add("cmdstat_eval:", s.script_calls, s.script_usec);
  add("cmdstat_zrem:", s.zrem_calls, s.zrem_usec);
  s.cpu_s = InfoNumber(*cpu, "used_cpu_sys:") + InfoNumber(*cpu, "used_cpu_user:");
  return s;
}

namespace {

int RunBench(const BenchOptions& o) {
  const StatusOr<FailurePolicy> parsed = ParseFailurePolicy(o.on_failure);
  if (!parsed.ok()) {
    std::fprintf(stderr, "sluice bench: --on-failure: %s\n", parsed.status().ToString().c_str());
    return kExitError;
  }
  const FailurePolicy policy = *parsed;
  if (o.algorithm == "concurrency") return RunLeaseBench(o);
  auto algorithm = ParseAlgorithm(o.algorithm);
  if (!algorithm.ok()) {
    std::fprintf(stderr, "sluice bench: %s\n", algorithm.status().ToString().c_str());
    return kExitError;
  }
  if (o.concurrency < 1 || o.keys < 1 || o.duration_s <= 0 || o.warmup_s < 0) {
    std::fprintf(stderr, "sluice bench: --concurrency, --keys and --duration must be positive\n");
    return kExitError;
  }
  auto client = Client::Create({.url = o.url,
                                .prefix = "sluicebench",
                                .deadline = std::chrono::milliseconds(o.deadline_ms),
                                .max_in_flight = static_cast<size_t>(o.concurrency) + 1024,
                                .on_failure = policy});
  if (!client.ok()) {
    std::fprintf(stderr, "sluice bench: %s\n", client.status().ToString().c_str());
    return kExitError;
  }
  auto limiter =
      (*client)->MakeLimiter("bench", {.algorithm = *algorithm,
                                       .limit = o.limit,
                                       .window = std::chrono::milliseconds(o.window_ms)});
  if (!limiter.ok()) {
    std::fprintf(stderr, "sluice bench: %s\n", limiter.status().ToString().c_str());
    return kExitError;
  }
  auto run = std::make_shared<Run>(*limiter);
  run->ids.reserve(static_cast<size_t>(o.keys));
  for (int i = 0; i < o.keys; ++i) run->ids.push_back("user:" + std::to_string(i));

  run->in_flight = o.concurrency;
  // The driver starts the calls, then issues what I/O threads hand it (see Issue); with
  // an inline-answering store it keeps looping in its own trampoline until the run stops.
  std::promise<void> driver_known;
  std::thread driver([run, n = o.concurrency, known = driver_known.get_future()]() mutable {
    known.wait();
    for (int i = 0; i < n; ++i) Issue(run);
    for (;;) {
      const uint64_t seen = run->wake.load(std::memory_order_acquire);
      const uint64_t handed = run->handoff.exchange(0, std::memory_order_relaxed);
      for (uint64_t i = 0; i < handed; ++i) Issue(run);
      if (run->stopping.load(std::memory_order_relaxed) &&
          run->in_flight.load(std::memory_order_acquire) == 0) {
        return;
      }
      if (handed == 0) run->wake.wait(seen, std::memory_order_acquire);
    }
  });
  run->driver = driver.get_id();
  driver_known.set_value();
  std::this_thread::sleep_for(std::chrono::duration<double>(o.warmup_s));
  const ClientStats before = (*client)->stats();
  const ServerSample server_before = SampleServer(**client);
  const double client_cpu_before = ProcessCpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  run->t0_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t0.time_since_epoch()).count();
  if (o.phase_length_s > 0) {
    run->phase_from_ns = static_cast<int64_t>(o.phase_start_s * 1e9);
    run->phase_to_ns = static_cast<int64_t>((o.phase_start_s + o.phase_length_s) * 1e9);
  }
  run->measuring = true;
  std::this_thread::sleep_for(std::chrono::duration<double>(o.duration_s));
  run->measuring = false;
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double client_cpu_after = ProcessCpuSeconds();
  const ClientStats after = (*client)->stats();
  const ServerSample server_after = SampleServer(**client);
  run->stopping = true;
  while (run->in_flight.load(std::memory_order_acquire) > 0) {
    run->wake.fetch_add(1, std::memory_order_release);  // the driver drains its hand-offs
    run->wake.notify_one();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  run->wake.fetch_add(1, std::memory_order_release);
  run->wake.notify_one();
  driver.join();

  const uint64_t total = run->allowed + run->refused + run->errors;
  const double rate = static_cast<double>(total) / elapsed;
  const uint64_t writes = after.writes - before.writes;
  const double per_write =
      writes ? static_cast<double>(after.commands - before.commands) / static_cast<double>(writes)
             : 0;
  // Redis's own cost: time inside the script per call, and the server's whole CPU
  // (parsing, I/O, scripts) per decision. Negative when unknown (embedded store).
  double script_us = -1, server_cpu_us = -1, per_script = -1;
  if (server_before.ok && server_after.ok && total > 0) {
    const double calls = server_after.script_calls - server_before.script_calls;
    if (calls > 0) {
      script_us = (server_after.script_usec - server_before.script_usec) / calls;
      per_script = static_cast<double>(total) / calls;
    }
    server_cpu_us = (server_after.cpu_s - server_before.cpu_s) * 1e6 / static_cast<double>(total);
  }
  if (o.json) {
    nlohmann::json j = {
        {"algorithm", o.algorithm},
        {"concurrency", o.concurrency},
        {"keys", o.keys},
        {"duration_s", elapsed},
        {"decisions_per_s", rate},
        {"allowed", run->allowed},
        {"refused", run->refused},
        {"errors", run->errors},
        {"not_from_store", run->not_from_store},
        {"p50_us", run->latency.Quantile(0.50)},
        {"p99_us", run->latency.Quantile(0.99)},
        {"p999_us", run->latency.Quantile(0.999)},
        {"commands_per_write", per_write},
        {"redis_script_us_per_call", script_us},
        {"redis_cpu_us_per_decision", server_cpu_us},
        {"decisions_per_script_call", per_script},
        {"client_cpu_us_per_decision",
         total ? (client_cpu_after - client_cpu_before) * 1e6 / static_cast<double>(total) : -1}};
    if (o.phase_length_s > 0) {
      j["phase_calls"] = run->phase_calls;
      j["phase_not_from_store"] = run->phase_not_from_store;
      j["phase_p50_us"] = run->phase_latency.Quantile(0.50);
      j["phase_p99_us"] = run->phase_latency.Quantile(0.99);
      j["phase_p999_us"] = run->phase_latency.Quantile(0.999);
    }
    if (!run->first_error.empty()) j["first_error"] = run->first_error;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("sluice bench  %s  concurrency=%d keys=%d  %.1f s measured\n", o.algorithm.c_str(),
                o.concurrency, o.keys, elapsed);
    std::printf(
        "  decisions/s  %.0f   (allowed %llu, refused %llu, errors %llu; %llu not from "
        "the store)\n",
        rate, static_cast<unsigned long long>(run->allowed),
        static_cast<unsigned long long>(run->refused), static_cast<unsigned long long>(run->errors),
        static_cast<unsigned long long>(run->not_from_store));
    std::printf("  latency      p50 %lld us  p99 %lld us  p999 %lld us\n",
                static_cast<long long>(run->latency.Quantile(0.50)),
                static_cast<long long>(run->latency.Quantile(0.99)),
                static_cast<long long>(run->latency.Quantile(0.999)));
    if (o.phase_length_s > 0) {
      std::printf(
          "  phase        %llu calls started %.1f-%.1f s in (%llu not from the store): "
          "p50 %lld us  p99 %lld us  p999 %lld us\n",
          static_cast<unsigned long long>(run->phase_calls), o.phase_start_s,
          o.phase_start_s + o.phase_length_s,
          static_cast<unsigned long long>(run->phase_not_from_store),
          static_cast<long long>(run->phase_latency.Quantile(0.50)),
          static_cast<long long>(run->phase_latency.Quantile(0.99)),
          static_cast<long long>(run->phase_latency.Quantile(0.999)));
    }
    std::printf("  pipelining   %.1f commands per write\n", per_write);
    if (script_us >= 0) {
      std::printf(
          "  redis cost   %.2f us per script call (%.1f decisions each), %.2f us of server CPU "
          "per decision\n",
          script_us, per_script, server_cpu_us);
    }
    if (total > 0) {
      std::printf("  client cost  %.2f us of this process's CPU per decision\n",
                  (client_cpu_after - client_cpu_before) * 1e6 / static_cast<double>(total));
    }
    if (!run->first_error.empty()) std::printf("  first error  %s\n", run->first_error.c_str());
  }
  return kExitOk;
}

}  // namespace

void AddBench(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<BenchOptions>();
  o->url = DefaultRedisUrl();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Closed-loop load on one store: decisions/s and latency percentiles.");
  cmd->add_option("--redis", o->url,
                  "Store URL (redis://, rediss://, redis+sentinel://, redis+cluster://, unix://, "
                  "memory://); env SLUICE_REDIS_URL")
      ->capture_default_str();
  cmd->add_option("--algorithm", o->algorithm,
                  "fixed_window, sliding_window, sliding_log, token_bucket, gcra, or concurrency "
                  "(acquire + release cycles)")
      ->capture_default_str();
  cmd->add_option("--concurrency", o->concurrency, "Calls kept in flight")->capture_default_str();
  cmd->add_option("--duration", o->duration_s, "Measured seconds")->capture_default_str();
  cmd->add_option("--warmup", o->warmup_s, "Unmeasured seconds before")->capture_default_str();
  cmd->add_option("--keys", o->keys, "Distinct ids, used round-robin")->capture_default_str();
  cmd->add_option("--limit", o->limit, "Limit per window per id")->capture_default_str();
  cmd->add_option("--window-ms", o->window_ms, "Window length")->capture_default_str();
  cmd->add_option("--deadline-ms", o->deadline_ms, "Deadline per call")->capture_default_str();
  cmd->add_option("--on-failure", o->on_failure,
                  "Policy when Redis cannot answer: open, closed, local")
      ->capture_default_str();
  cmd->add_option("--phase-start", o->phase_start_s,
                  "Also report latency of the calls started this many seconds into the "
                  "measured period (with --phase-length)")
      ->capture_default_str();
  cmd->add_option("--phase-length", o->phase_length_s, "Length of that phase in seconds (0: none)")
      ->capture_default_str();
  cmd->add_option("--lease-ttl-ms", o->lease_ttl_ms, "concurrency: lease ttl")
      ->capture_default_str();
  cmd->add_option("--heartbeat-leases", o->heartbeat_leases,
                  "concurrency: instead of cycles, hold this many leases (over --keys ids) and "
                  "measure what their heartbeats cost Redis")
      ->capture_default_str();
  cmd->add_option("--heartbeat-ms", o->heartbeat_ms,
                  "concurrency: heartbeat interval with --heartbeat-leases (lease ttl = 6x)")
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "One JSON object on stdout");
  cmd->callback([o, &exit_code] { exit_code = RunBench(*o); });
}

}  // namespace sluice::cli
