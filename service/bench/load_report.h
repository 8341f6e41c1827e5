// service/bench/load_report.h — what both gRPC load generators share: their common
// options, and the result line they print (bench/service.sh reads it): counts, checks/s,
// latency percentiles and the generator's own CPU time.
#pragma once

#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace sluiced::bench {

struct LoadOptions {
  std::string target = "127.0.0.1:8081";
  std::string domain = "bench";
  int concurrency = 64;  // calls in flight, over all connections
  int connections = 4;
  int ids = 10000;  // distinct ids the calls spread over
  double seconds = 10;
};

inline void AddLoadOptions(CLI::App& app, LoadOptions& o) {
  app.add_option("--target", o.target);
  app.add_option("--domain", o.domain);
  app.add_option("--concurrency", o.concurrency);
  app.add_option("--connections", o.connections);
  app.add_option("--ids", o.ids);
  app.add_option("--seconds", o.seconds);
}

// This process's CPU time (user + system): what the load generator itself cost.
inline double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// "grpc checks=… ok=… over_limit=… errors=… seconds=… checks_per_s=… p50_ms=… p99_ms=…
// max_ms=… client_cpu_s=…" then `extra` (" key=value" pairs). Sorts latencies_us.
inline void PrintLoadReport(uint64_t ok, uint64_t over, uint64_t errors, double elapsed_s,
                            std::vector<double>& latencies_us, const std::string& extra = "") {
  auto& l = latencies_us;
  std::sort(l.begin(), l.end());
  auto pct = [&l](double p) {
    return l.empty() ? 0.0
                     : l[std::min(l.size() - 1,
                                  static_cast<std::size_t>(p * static_cast<double>(l.size())))];
  };
  const uint64_t total = ok + over + errors;
  std::printf(
      "grpc checks=%llu ok=%llu over_limit=%llu errors=%llu seconds=%.2f checks_per_s=%.0f "
      "p50_ms=%.3f p99_ms=%.3f max_ms=%.3f client_cpu_s=%.2f%s\n",
      static_cast<unsigned long long>(total), static_cast<unsigned long long>(ok),
      static_cast<unsigned long long>(over), static_cast<unsigned long long>(errors), elapsed_s,
      static_cast<double>(total) / elapsed_s, pct(0.5) / 1000, pct(0.99) / 1000,
      l.empty() ? 0.0 : l.back() / 1000, CpuSeconds(), extra.c_str());
}

}  // namespace sluiced::bench
