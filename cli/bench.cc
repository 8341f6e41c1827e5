// sluice bench: closed-loop load on one store. `--concurrency N` calls are kept in flight
// (each completion issues the next call), spread round-robin over `--keys K` ids.
// Latency is measured from the call to its callback; decisions/s counts completed calls
// (allowed + refused + errors) in the measured period, after a warm-up.
//
// `--processes N` forks N client processes (each its own Client and connection, as N
// servers would be) that load the same store at once; the parent samples the server
// and sums what the children report. With `--aligned`, admitted requests are also
// counted per window (see WindowOf), and the JSON gains, over the windows that lie
// wholly inside the measured period:
//   overshoot        sum over windows of max(0, admitted − limit); overshoot_max the
//                    largest single window's
//   under_admission  sum over windows whose demand (checks decided in them, allowed or
//                    refused) exceeded the limit, of max(0, limit − admitted);
//                    under_admission_max the largest
//   store_calls      script calls that reached Redis in the measured period (INFO
//                    commandstats: evalsha + eval; a batch of calls is one), and per
//                    1,000 decisions
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <map>
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
  // --aligned: admitted and decided checks per window (by its end, wall-clock ms), from
  // the first call on (warm-up included: a window's count must be whole).
  int64_t window_ms = 0;
  std::map<int64_t, std::pair<int64_t, int64_t>> windows;
};

int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The end of the aligned window a decision counted in. The store decided at some
// moment in [start, now] and its window ends reset_after later, at a multiple of the
// window; a local decision (a slice, a synced share) says when its window ends as seen
// here, no later than the store's end, by less than a call takes. So start +
// reset_after lies within a call's time before that end (or a millisecond after it:
// the wall and monotonic clocks are read apart): the nearest multiple names it, as long
// as a call takes less than half a window.
int64_t WindowOf(int64_t start_ms, int64_t reset_after_ms, int64_t window_ms) {
  const int64_t at = start_ms + reset_after_ms;
  return (at + window_ms / 2) / window_ms * window_ms;
}

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
  const int64_t start_wall = run->window_ms > 0 ? WallMs() : 0;
  run->limiter.CheckAsync(id, {}, [run, start, start_wall](StatusOr<Decision> result) {
    if (run->window_ms > 0 && result.ok() && result->reset_after.count() > 0) {
      auto& w = run->windows[WindowOf(start_wall, result->reset_after.count(), run->window_ms)];
      if (result->allowed) ++w.first;
      ++w.second;
    }
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

// What one client process measured.
struct Outcome {
  uint64_t allowed = 0, refused = 0, errors = 0, not_from_store = 0;
  Histogram latency;
  std::map<int64_t, std::pair<int64_t, int64_t>> windows;  // as Run::windows
  double client_cpu_s = 0;
  uint64_t commands = 0, writes = 0;
  std::string first_error;
  // --phase (one process only).
  Histogram phase_latency;
  uint64_t phase_calls = 0, phase_not_from_store = 0;
};

nlohmann::json ToJson(const Outcome& o) {
  nlohmann::json hist = nlohmann::json::array(), windows = nlohmann::json::array();
  for (size_t i = 0; i < o.latency.buckets().size(); ++i) {
    if (o.latency.buckets()[i] != 0) hist.push_back({i, o.latency.buckets()[i]});
  }
  for (const auto& [end, n] : o.windows) windows.push_back({end, n.first, n.second});
  return {{"allowed", o.allowed},    {"refused", o.refused},
          {"errors", o.errors},      {"not_from_store", o.not_from_store},
          {"cpu_s", o.client_cpu_s}, {"commands", o.commands},
          {"writes", o.writes},      {"first_error", o.first_error},
          {"latency", hist},         {"windows", windows}};
}

// Adds a child's report (ToJson) to `total`; false when it is not one.
bool AddJson(const std::string& text, Outcome& total) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("windows") || !j.contains("latency")) return false;
  total.allowed += j["allowed"].get<uint64_t>();
  total.refused += j["refused"].get<uint64_t>();
  total.errors += j["errors"].get<uint64_t>();
  total.not_from_store += j["not_from_store"].get<uint64_t>();
  total.client_cpu_s += j["cpu_s"].get<double>();
  total.commands += j["commands"].get<uint64_t>();
  total.writes += j["writes"].get<uint64_t>();
  if (total.first_error.empty()) total.first_error = j["first_error"].get<std::string>();
  for (const auto& b : j["latency"]) {
    total.latency.AddToBucket(b[0].get<size_t>(), b[1].get<uint64_t>());
  }
  for (const auto& w : j["windows"]) {
    auto& n = total.windows[w[0].get<int64_t>()];
    n.first += w[1].get<int64_t>();
    n.second += w[2].get<int64_t>();
  }
  return true;
}

StatusOr<LimiterOptions> OptionsForMode(const BenchOptions& o) {
  LimiterOptions options;
  if (o.mode == "shared") return options;
  if (o.mode == "prefetch") {
    options.local_budget.enabled = true;
    return options;
  }
  if (o.mode == "sync") {
    options.sync = {.enabled = true,
                    .sync_interval = std::chrono::milliseconds(o.sync_interval_ms),
                    .servers = o.processes};
    return options;
  }
  return InvalidArgumentError("--mode: want shared, prefetch or sync, got \"" + o.mode + "\"");
}

void SleepUntilWall(int64_t wall_ms) {
  const int64_t now = WallMs();
  if (wall_ms > now) std::this_thread::sleep_for(std::chrono::milliseconds(wall_ms - now));
}

// Runs one client process's closed loop from now until `t1_ms` (wall clock), measuring
// from `t0_ms`. `at_t0` and `at_t1` run at those moments with the client (the parent's
// server samples when there is no fork). Errors before the loop starts are returned.
StatusOr<Outcome> RunProcess(const BenchOptions& o, Algorithm algorithm,
                             const LimiterOptions& limiter_options, FailurePolicy policy,
                             int64_t t0_ms, int64_t t1_ms,
                             const std::function<void(const Client&)>& at_t0,
                             const std::function<void(const Client&)>& at_t1) {
  auto client = Client::Create({.url = o.url,
                                .prefix = "sluicebench",
                                .deadline = std::chrono::milliseconds(o.deadline_ms),
                                .max_in_flight = static_cast<size_t>(o.concurrency) + 1024,
                                .max_batch = static_cast<size_t>(o.max_batch),
                                .on_failure = policy});
  if (!client.ok()) return client.status();
  auto limiter = (*client)->MakeLimiter("bench",
                                        {.algorithm = algorithm,
                                         .limit = o.limit,
                                         .window = std::chrono::milliseconds(o.window_ms),
                                         .aligned = o.aligned},
                                        limiter_options);
  if (!limiter.ok()) return limiter.status();
  auto run = std::make_shared<Run>(*limiter);
  run->ids.reserve(static_cast<size_t>(o.keys));
  for (int i = 0; i < o.keys; ++i) run->ids.push_back("user:" + std::to_string(i));
  if (o.aligned) run->window_ms = o.window_ms;

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
  SleepUntilWall(t0_ms);
  if (at_t0) at_t0(**client);
  const ClientStats before = (*client)->stats();
  const double client_cpu_before = ProcessCpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  run->t0_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t0.time_since_epoch()).count();
  if (o.phase_length_s > 0) {
    run->phase_from_ns = static_cast<int64_t>(o.phase_start_s * 1e9);
    run->phase_to_ns = static_cast<int64_t>((o.phase_start_s + o.phase_length_s) * 1e9);
  }
  run->measuring = true;
  SleepUntilWall(t1_ms);
  run->measuring = false;
  const double client_cpu_after = ProcessCpuSeconds();
  const ClientStats after = (*client)->stats();
  if (at_t1) at_t1(**client);
  run->stopping = true;
  while (run->in_flight.load(std::memory_order_acquire) > 0) {
    run->wake.fetch_add(1, std::memory_order_release);  // the driver drains its hand-offs
    run->wake.notify_one();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  run->wake.fetch_add(1, std::memory_order_release);
  run->wake.notify_one();
  driver.join();

  Outcome out;
  out.allowed = run->allowed;
  out.refused = run->refused;
  out.errors = run->errors;
  out.not_from_store = run->not_from_store;
  out.latency = run->latency;
  out.windows = run->windows;
  out.client_cpu_s = client_cpu_after - client_cpu_before;
  out.commands = after.commands - before.commands;
  out.writes = after.writes - before.writes;
  out.first_error = run->first_error;
  out.phase_latency = run->phase_latency;
  out.phase_calls = run->phase_calls;
  out.phase_not_from_store = run->phase_not_from_store;
  return out;
}

// Forks `o.processes` children, each running RunProcess and writing its Outcome
// (ToJson) to a pipe; the parent samples the server at t0 and t1 with its own client.
// Errors: a child that fails or reports nothing.
StatusOr<Outcome> RunProcesses(const BenchOptions& o, Algorithm algorithm,
                               const LimiterOptions& limiter_options, FailurePolicy policy,
                               int64_t t0_ms, int64_t t1_ms, ServerSample& server_before,
                               ServerSample& server_after) {
  std::vector<std::pair<pid_t, int>> children;
  for (int p = 0; p < o.processes; ++p) {
    int fds[2];
    if (::pipe(fds) != 0) return InternalError("pipe failed");
    const pid_t pid = ::fork();
    if (pid < 0) return InternalError("fork failed");
    if (pid == 0) {
      ::close(fds[0]);
      StatusOr<Outcome> mine =
          RunProcess(o, algorithm, limiter_options, policy, t0_ms, t1_ms, nullptr, nullptr);
      const std::string text = mine.ok()
                                   ? ToJson(*mine).dump()
                                   : nlohmann::json{{"error", mine.status().ToString()}}.dump();
      size_t done = 0;
      while (done < text.size()) {
        const ssize_t w = ::write(fds[1], text.data() + done, text.size() - done);
        if (w <= 0) ::_exit(1);
        done += static_cast<size_t>(w);
      }
      ::_exit(mine.ok() ? 0 : 1);
    }
    ::close(fds[1]);
    children.emplace_back(pid, fds[0]);
  }
  // The parent's own client only reads INFO (created after the fork: a Client does not
  // survive one).
  auto sampler = Client::Create({.url = o.url, .prefix = "sluicebench"});
  SleepUntilWall(t0_ms);
  if (sampler.ok()) server_before = SampleServer(**sampler);
  SleepUntilWall(t1_ms);
  if (sampler.ok()) server_after = SampleServer(**sampler);
  Outcome total;
  std::string failure;
  for (auto [pid, fd] : children) {
    std::string text;
    char buffer[65536];
    ssize_t n = 0;
    while ((n = ::read(fd, buffer, sizeof buffer)) > 0) text.append(buffer, static_cast<size_t>(n));
    ::close(fd);
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!AddJson(text, total) && failure.empty()) {
      failure = "a client process failed: " + (text.empty() ? std::string("no report") : text);
    }
  }
  if (!failure.empty()) return UnavailableError(failure);
  return total;
}

// The figures a run's Outcome gives, derived once for both outputs.
struct Summary {
  double elapsed = 0, rate = 0, per_write = 0, client_cpu_us = -1;
  uint64_t total = 0;
  // Redis's own cost: time inside the script per call, and the server's whole CPU
  // (parsing, I/O, scripts) per decision. Negative when unknown (embedded store).
  double script_us = -1, server_cpu_us = -1, per_script = -1, store_calls = -1;
  // Per window, over the windows wholly inside the measured period (--aligned only).
  int64_t windows = 0, over_demand = 0, overshoot = 0, overshoot_max = 0, under = 0, under_max = 0;
  std::vector<int64_t> admitted_per_window;
};

Summary Summarize(const BenchOptions& o, const Outcome& r, int64_t t0_ms, int64_t t1_ms,
                  const ServerSample& server_before, const ServerSample& server_after) {
  Summary s;
  s.elapsed = static_cast<double>(t1_ms - t0_ms) / 1000.0;
  s.total = r.allowed + r.refused + r.errors;
  s.rate = static_cast<double>(s.total) / s.elapsed;
  s.per_write = r.writes ? static_cast<double>(r.commands) / static_cast<double>(r.writes) : 0;
  if (server_before.ok && server_after.ok && s.total > 0) {
    s.store_calls = server_after.script_calls - server_before.script_calls;
    if (s.store_calls > 0) {
      s.script_us = (server_after.script_usec - server_before.script_usec) / s.store_calls;
      s.per_script = static_cast<double>(s.total) / s.store_calls;
    }
    s.server_cpu_us =
        (server_after.cpu_s - server_before.cpu_s) * 1e6 / static_cast<double>(s.total);
  }
  if (o.aligned) {
    for (const auto& [end, n] : r.windows) {
      if (end - o.window_ms < t0_ms || end > t1_ms) continue;
      ++s.windows;
      s.admitted_per_window.push_back(n.first);
      const int64_t over = std::max<int64_t>(0, n.first - o.limit);
      s.overshoot += over;
      s.overshoot_max = std::max(s.overshoot_max, over);
      if (n.second > o.limit) {
        ++s.over_demand;
        const int64_t short_by = std::max<int64_t>(0, o.limit - n.first);
        s.under += short_by;
        s.under_max = std::max(s.under_max, short_by);
      }
    }
  }
  if (s.total) s.client_cpu_us = r.client_cpu_s * 1e6 / static_cast<double>(s.total);
  return s;
}

void PrintJson(const BenchOptions& o, const Outcome& r, const Summary& s) {
  nlohmann::json j = {
      {"algorithm", o.algorithm},
      {"concurrency", o.concurrency},
      {"keys", o.keys},
      {"processes", o.processes},
      {"mode", o.mode},
      {"duration_s", s.elapsed},
      {"decisions_per_s", s.rate},
      {"allowed", r.allowed},
      {"refused", r.refused},
      {"errors", r.errors},
      {"not_from_store", r.not_from_store},
      {"p50_us", r.latency.Quantile(0.50)},
      {"p99_us", r.latency.Quantile(0.99)},
      {"p999_us", r.latency.Quantile(0.999)},
      {"commands_per_write", s.per_write},
      {"redis_script_us_per_call", s.script_us},
      {"redis_cpu_us_per_decision", s.server_cpu_us},
      {"decisions_per_script_call", s.per_script},
      {"store_calls", s.store_calls},
      {"store_calls_per_1000", s.store_calls >= 0 && s.total > 0
                                   ? s.store_calls * 1000.0 / static_cast<double>(s.total)
                                   : -1.0},
      {"client_cpu_us_per_decision", s.client_cpu_us}};
  if (o.phase_length_s > 0) {
    j["phase_calls"] = r.phase_calls;
    j["phase_not_from_store"] = r.phase_not_from_store;
    j["phase_p50_us"] = r.phase_latency.Quantile(0.50);
    j["phase_p99_us"] = r.phase_latency.Quantile(0.99);
    j["phase_p999_us"] = r.phase_latency.Quantile(0.999);
  }
  if (o.aligned) {
    j["windows_measured"] = s.windows;
    j["windows_over_demand"] = s.over_demand;
    j["overshoot"] = s.overshoot;
    j["overshoot_max"] = s.overshoot_max;
    j["under_admission"] = s.under;
    j["under_admission_max"] = s.under_max;
    j["admitted_per_window"] = s.admitted_per_window;
  }
  if (!r.first_error.empty()) j["first_error"] = r.first_error;
  std::printf("%s\n", j.dump().c_str());
}

void PrintText(const BenchOptions& o, const Outcome& r, const Summary& s) {
  std::printf("sluice bench  %s  concurrency=%d keys=%d processes=%d mode=%s  %.1f s measured\n",
              o.algorithm.c_str(), o.concurrency, o.keys, o.processes, o.mode.c_str(), s.elapsed);
  std::printf(
      "  decisions/s  %.0f   (allowed %llu, refused %llu, errors %llu; %llu not from "
      "the store)\n",
      s.rate, static_cast<unsigned long long>(r.allowed),
      static_cast<unsigned long long>(r.refused), static_cast<unsigned long long>(r.errors),
      static_cast<unsigned long long>(r.not_from_store));
  std::printf("  latency      p50 %lld us  p99 %lld us  p999 %lld us\n",
              static_cast<long long>(r.latency.Quantile(0.50)),
              static_cast<long long>(r.latency.Quantile(0.99)),
              static_cast<long long>(r.latency.Quantile(0.999)));
  if (o.phase_length_s > 0) {
    std::printf(
        "  phase        %llu calls started %.1f-%.1f s in (%llu not from the store): "
        "p50 %lld us  p99 %lld us  p999 %lld us\n",
        static_cast<unsigned long long>(r.phase_calls), o.phase_start_s,
        o.phase_start_s + o.phase_length_s, static_cast<unsigned long long>(r.phase_not_from_store),
        static_cast<long long>(r.phase_latency.Quantile(0.50)),
        static_cast<long long>(r.phase_latency.Quantile(0.99)),
        static_cast<long long>(r.phase_latency.Quantile(0.999)));
  }
  std::printf("  pipelining   %.1f commands per write\n", s.per_write);
  if (s.script_us >= 0) {
    std::printf(
        "  redis cost   %.2f us per script call (%.1f decisions each), %.2f us of server CPU "
        "per decision; %.0f script calls (%.2f per 1,000 decisions)\n",
        s.script_us, s.per_script, s.server_cpu_us, s.store_calls,
        s.store_calls * 1000.0 / static_cast<double>(s.total));
  }
  if (o.aligned) {
    std::printf(
        "  windows      %lld measured, %lld with demand over the limit; overshoot %lld "
        "(max %lld in one window), under-admission %lld (max %lld)\n",
        static_cast<long long>(s.windows), static_cast<long long>(s.over_demand),
        static_cast<long long>(s.overshoot), static_cast<long long>(s.overshoot_max),
        static_cast<long long>(s.under), static_cast<long long>(s.under_max));
  }
  if (s.total > 0) {
    std::printf("  client cost  %.2f us of client CPU per decision\n", s.client_cpu_us);
  }
  if (!r.first_error.empty()) std::printf("  first error  %s\n", r.first_error.c_str());
}

int RunBench(const BenchOptions& o) {
  const auto fail = [](const std::string& what) {
    std::fprintf(stderr, "sluice bench: %s\n", what.c_str());
    return kExitError;
  };
  const StatusOr<FailurePolicy> policy = ParseFailurePolicy(o.on_failure);
  if (!policy.ok()) return fail("--on-failure: " + policy.status().ToString());
  if (o.algorithm == "concurrency") return RunLeaseBench(o);
  auto algorithm = ParseAlgorithm(o.algorithm);
  if (!algorithm.ok()) return fail(algorithm.status().ToString());
  if (o.concurrency < 1 || o.keys < 1 || o.duration_s <= 0 || o.warmup_s < 0 || o.processes < 1) {
    return fail("--concurrency, --keys, --processes and --duration must be positive");
  }
  const StatusOr<LimiterOptions> limiter_options = OptionsForMode(o);
  if (!limiter_options.ok()) return fail(limiter_options.status().ToString());
  // Client creation, then the warm-up; the children measure the same wall-clock period.
  const int64_t t0_ms =
      WallMs() + static_cast<int64_t>(o.warmup_s * 1000) + (o.processes > 1 ? 500 : 100);
  const int64_t t1_ms = t0_ms + static_cast<int64_t>(o.duration_s * 1000);
  ServerSample server_before, server_after;
  StatusOr<Outcome> outcome = o.processes == 1
                                  ? RunProcess(
                                        o, *algorithm, *limiter_options, *policy, t0_ms, t1_ms,
                                        [&](const Client& c) { server_before = SampleServer(c); },
                                        [&](const Client& c) { server_after = SampleServer(c); })
                                  : RunProcesses(o, *algorithm, *limiter_options, *policy, t0_ms,
                                                 t1_ms, server_before, server_after);
  if (!outcome.ok()) return fail(outcome.status().ToString());
  const Summary summary = Summarize(o, *outcome, t0_ms, t1_ms, server_before, server_after);
  if (o.json) {
    PrintJson(o, *outcome, summary);
  } else {
    PrintText(o, *outcome, summary);
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
                  "memory://); env SLUICE_REDIS_URL, else SLUICED_REDIS")
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
  cmd->add_option("--max-batch", o->max_batch,
                  "Calls sent to Redis as one batch at most (1: every call alone)")
      ->capture_default_str();
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
  cmd->add_option("--processes", o->processes,
                  "Client processes (forked, each its own Client and connection), all "
                  "loading the same store at once")
      ->capture_default_str();
  cmd->add_option("--mode", o->mode,
                  "How the limiter decides: shared (every check to the store), prefetch "
                  "(local budgets), sync (periodic sync)")
      ->capture_default_str();
  cmd->add_option("--sync-interval-ms", o->sync_interval_ms,
                  "--mode sync: how often each process pushes its counts (its servers: "
                  "--processes)")
      ->capture_default_str();
  cmd->add_flag("--aligned", o->aligned,
                "Windows aligned to the clock; adds per-window overshoot and "
                "under-admission to the output");
  cmd->add_flag("--json", o->json, "One JSON object on stdout");
  cmd->callback([o, &exit_code] { exit_code = RunBench(*o); });
}

}  // namespace sluice::cli
