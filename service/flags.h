// service/flags.h — sluiced's command line: every flag (each also an environment
// variable) with its default, parsed by CLI11. What the values mean together (a failure
// policy, the addresses to listen on) is settings.h's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace sluiced {

// Every flag of sluiced, as given (or its default).
struct Flags {
  std::string config_path = "/etc/sluiced";
  std::string redis = "redis://127.0.0.1:6379";
  std::string http_listen = "127.0.0.1:8080", grpc_listen = "127.0.0.1:8081",
              admin_listen = "127.0.0.1:8082", metrics_listen = "127.0.0.1:8083";
  std::string metrics_token;
  std::string admin_token, audit_log = "sluiced-audit.log", prefix = "sluice",
                           default_policy = "open", log_level = "info";
  int http_threads = 0, grpc_threads = 0, io_threads = 1, blocking_threads = 2;
  int64_t grpc_max_buffered_mib = 64;
  int64_t deadline_ms = 5, read_timeout_ms = 10000, watch_ms = 1000, connect_wait_ms = 2000;
  int64_t drain_timeout_ms = 10000;
  int64_t rlqs_report_interval_ms = 5000;
  int rlqs_idle_reports = 3;
  std::string rlqs_unmatched = "allow_all";
  std::string check_config;
};

// The exit code of a command line sluiced refuses: a flag unknown, malformed, out of
// range or missing (--config without --check-config), or a listen address that is not
// HOST:PORT or does not resolve.
inline constexpr int kExitUsage = 2;

// Parses argv into `out`. nullopt: go on. Otherwise the exit code, with what was printed:
// 0 for --help (on stdout) and --version; kExitUsage for any refusal, with what is wrong
// and a pointer to --help on stderr.
std::optional<int> ParseFlags(int argc, char** argv, Flags& out);

}  // namespace sluiced
