#include "service/flags.h"

#include <CLI/CLI.hpp>

namespace sluiced {
namespace {

// The RLQS flags (docs/rlqs.md), into `s`.
void AddRlqsFlags(CLI::App& app, Flags& s) {
  app.add_option("--rlqs-report-interval-ms", s.rlqs_report_interval_ms,
                 "How often RLQS clients report (Envoy's rate_limit_quota filter: every 5 s); "
                 "assignments live twice that, in whole seconds")
      ->check(CLI::Range(int64_t{100}, int64_t{3600000}))
      ->envname("SLUICED_RLQS_REPORT_INTERVAL_MS")
      ->capture_default_str();
  app.add_option("--rlqs-unmatched", s.rlqs_unmatched,
                 "What an RLQS bucket that matches no rate limit gets (an unknown domain too)")
      ->check(CLI::IsMember({"allow_all", "deny_all", "abandon"}))
      ->envname("SLUICED_RLQS_UNMATCHED")
      ->capture_default_str();
  app.add_option("--rlqs-idle-reports", s.rlqs_idle_reports,
                 "An RLQS bucket reported idle this many times in a row is abandoned (its "
                 "share given back)")
      ->check(CLI::Range(1, 1000))
      ->envname("SLUICED_RLQS_IDLE_REPORTS")
      ->capture_default_str();
}

// The flags (each also an environment variable), into `s`. Returns --config's option,
// which is required unless --check-config is given.
CLI::Option* AddFlags(CLI::App& app, Flags& s) {
  app.set_version_flag("--version", std::string("sluiced ") + SLUICE_VERSION);
  auto* config_opt = app.add_option("--config", s.config_path,
                                    "YAML file, or directory of *.yaml (one domain each)")
                         ->envname("SLUICED_CONFIG");
  app.add_option(
      "--check-config", s.check_config,
      "Validate this config (file or directory) as sluiced would load it, print a line "
      "per domain and exit: 0 valid, 1 refused (file:line:column); no store, no listener");
  app.add_option(
         "--redis", s.redis,
         "Store URL: redis://, rediss:// (TLS), redis+sentinel://, redis+cluster://, unix:// or "
         "memory://")
      ->envname("SLUICED_REDIS")
      ->capture_default_str();
  app.add_option("--http-listen", s.http_listen, "HTTP/JSON listener")
      ->envname("SLUICED_HTTP_LISTEN")
      ->capture_default_str();
  app.add_option("--grpc-listen", s.grpc_listen, "Envoy RLS v3 gRPC listener")
      ->envname("SLUICED_GRPC_LISTEN")
      ->capture_default_str();
  app.add_option("--admin-listen", s.admin_listen, "Admin listener (bearer token)")
      ->envname("SLUICED_ADMIN_LISTEN")
      ->capture_default_str();
  app.add_option("--metrics-listen", s.metrics_listen,
                 "Prometheus metrics listener (GET /metrics; the page names descriptor values, "
                 "so keep it off the public network or set --metrics-token)")
      ->envname("SLUICED_METRICS_LISTEN")
      ->capture_default_str();
  app.add_option("--metrics-token", s.metrics_token,
                 "Bearer token every scrape must send (empty: none asked)")
      ->envname("SLUICED_METRICS_TOKEN");
  app.add_option("--admin-token", s.admin_token,
                 "Admin bearer token (empty: admin calls all answer 401)")
      ->envname("SLUICED_ADMIN_TOKEN");
  app.add_option("--audit-log", s.audit_log, "Audit log of admin releases (JSON lines)")
      ->envname("SLUICED_AUDIT_LOG")
      ->capture_default_str();
  app.add_option("--prefix", s.prefix, "Key prefix in Redis")
      ->envname("SLUICED_PREFIX")
      ->capture_default_str();
  app.add_option("--default-failure-mode", s.default_policy,
                 "Policy of limits naming none: open, closed, local")
      ->envname("SLUICED_DEFAULT_FAILURE_MODE")
      ->capture_default_str();
  app.add_option("--deadline-ms", s.deadline_ms, "Deadline of each store call")
      ->envname("SLUICED_DEADLINE_MS")
      ->capture_default_str();
  app.add_option("--http-threads", s.http_threads,
                 "HTTP threads of their own; 0: serve HTTP on the store client's I/O threads "
                 "(no hand-off between threads per check)")
      ->check(CLI::NonNegativeNumber)
      ->envname("SLUICED_HTTP_THREADS")
      ->capture_default_str();
  app.add_option("--grpc-threads", s.grpc_threads,
                 "gRPC threads of their own; 0: serve gRPC on the store client's I/O threads "
                 "(no hand-off between threads per check)")
      ->check(CLI::NonNegativeNumber)
      ->envname("SLUICED_GRPC_THREADS")
      ->capture_default_str();
  app.add_option("--grpc-max-buffered-mib", s.grpc_max_buffered_mib,
                 "Request bytes all gRPC connections together may hold, in MiB (each one 8 MiB "
                 "at most); a call that would go over is answered RESOURCE_EXHAUSTED")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->envname("SLUICED_GRPC_MAX_BUFFERED_MIB")
      ->capture_default_str();
  app.add_option("--io-threads", s.io_threads, "Store client I/O threads")
      ->envname("SLUICED_IO_THREADS")
      ->capture_default_str();
  app.add_option("--blocking-threads", s.blocking_threads,
                 "Threads for peeks (hits 0), readiness probes, metrics pages and admin calls")
      ->envname("SLUICED_BLOCKING_THREADS")
      ->capture_default_str();
  app.add_option("--read-timeout-ms", s.read_timeout_ms,
                 "Time to read one HTTP request (slow clients are cut off)")
      ->envname("SLUICED_READ_TIMEOUT_MS")
      ->capture_default_str();
  app.add_option("--watch-ms", s.watch_ms,
                 "How often config files are checked for changes (0: only SIGHUP)")
      ->envname("SLUICED_WATCH_MS")
      ->capture_default_str();
  app.add_option("--connect-wait-ms", s.connect_wait_ms,
                 "At start, wait this long for the store before serving anyway")
      ->envname("SLUICED_CONNECT_WAIT_MS")
      ->capture_default_str();
  app.add_option("--drain-timeout-ms", s.drain_timeout_ms,
                 "On SIGTERM or SIGINT, how long calls in flight may take to finish before "
                 "sluiced exits anyway (a second signal exits at once)")
      ->check(CLI::NonNegativeNumber)
      ->envname("SLUICED_DRAIN_TIMEOUT_MS")
      ->capture_default_str();
  AddRlqsFlags(app, s);
  app.add_option("--log-level", s.log_level, "trace, debug, info, warn, error")
      ->envname("SLUICED_LOG_LEVEL")
      ->capture_default_str();
  return config_opt;
}

}  // namespace

std::optional<int> ParseFlags(int argc, char** argv, Flags& out) {
  CLI::App app{"sluiced: distributed rate limits over HTTP/JSON and Envoy's RLS v3 gRPC"};
  CLI::Option* config = AddFlags(app, out);
  try {
    app.parse(argc, argv);
    // --config is required unless --check-config names what to check.
    if (out.check_config.empty() && config->count() == 0)
      throw CLI::RequiredError("--config (or SLUICED_CONFIG): the config file or directory");
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // CLI11 prints the error and "Run with --help for more information." on stderr; its
    // own codes (105 for a value out of range, 106 for a missing flag, ...) are not
    // sluiced's: every refused command line exits kExitUsage.
    (void)app.exit(e);
    return kExitUsage;
  }
  return std::nullopt;
}

}  // namespace sluiced
