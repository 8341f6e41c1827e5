// What `sluice bench` modes share: the options, and what the bench reads from the
// server around the measured period.
#pragma once

#include <cstdint>
#include <string>

#include "sluice/sluice.h"

namespace sluice::cli {

struct BenchOptions {
  std::string url;
  std::string algorithm = "fixed_window";
  int concurrency = 50;
  double duration_s = 5;
  double warmup_s = 1;
  int keys = 10'000;
  int64_t limit = 1'000'000'000;
  int64_t window_ms = 60'000;
  int64_t deadline_ms = 200;
  int64_t max_batch = 64;  // ClientOptions::max_batch (1: every call alone)
  std::string on_failure = "open";
  double phase_start_s = 0;
  double phase_length_s = 0;
  int64_t lease_ttl_ms = 120'000;
  int64_t heartbeat_leases = 0;
  int64_t heartbeat_ms = 20'000;
  bool json = false;
  // Hot ids (docs/design.md §7): forked client processes, each with its own Client, and
  // how each limiter decides: "shared" (every check to the store), "prefetch"
  // (LimiterOptions::local_budget) or "sync" (LimiterOptions::sync).
  int processes = 1;
  std::string mode = "shared";
  int64_t sync_interval_ms = 100;
  // Windows aligned to the clock: admitted requests are also counted per window (the
  // windows lie on the store's clock, which is this host's when Redis runs here), for
  // `overshoot` and `under_admission`.
  bool aligned = false;
};

// Script calls and their time (INFO commandstats: evalsha + eval; zrem separately) and
// the server process's CPU seconds (INFO cpu).
struct ServerSample {
  bool ok = false;
  double script_calls = 0, script_usec = 0, zrem_calls = 0, zrem_usec = 0, cpu_s = 0;
};
ServerSample SampleServer(const Client& client);
double InfoNumber(const std::string& info, const std::string& key);
// This process's user + system CPU seconds so far (getrusage).
double ProcessCpuSeconds();

// --algorithm concurrency: acquire + release cycles, or (--heartbeat-leases) the cost
// of holding many leases.
int RunLeaseBench(const BenchOptions& o);

}  // namespace sluice::cli
