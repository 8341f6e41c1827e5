// sluiced — the rate limit service: Envoy RLS v3 over gRPC, HTTP/JSON, a metrics
// listener and an admin listener, on libsluice's public API.
#include <signal.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "service/config.h"
#include "service/engine.h"
#include "service/grpc_service.h"
#include "service/http_server.h"
#include "service/routes.h"
#include "sluice/asio.h"

namespace {

using namespace sluiced;

struct HostPort {
  std::string host;
  uint16_t port = 0;
};

bool SplitHostPort(const std::string& s, HostPort& out) {
  const auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  out.host = s.substr(0, colon);
  if (out.host.size() > 2 && out.host.front() == '[' && out.host.back() == ']')
    out.host = out.host.substr(1, out.host.size() - 2);
  const std::string port = s.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos)
    return false;
  const int p = std::stoi(port);
  if (p > 65535) return false;
  out.port = static_cast<uint16_t>(p);
  return true;
}

// A fingerprint of the config files (names, sizes, mtimes) for change detection.
std::string Fingerprint(const std::string& path) {
  namespace fs = std::filesystem;
  std::string out;
  std::error_code ec;
  auto add = [&out](const fs::path& p) {
    struct stat st {};
    if (::stat(p.c_str(), &st) == 0) {
      out += p.string() + ":" + std::to_string(st.st_size) + ":" +
             std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + ";";
    }
  };
  if (fs::is_directory(path, ec)) {
    for (const auto& e : fs::directory_iterator(path, ec)) add(e.path());
  } else {
    add(path);
  }
  return out;
}

// What the signal handler leaves for the main loop: a stop is sticky (a SIGHUP that
// follows a SIGTERM must not overwrite it), a reload is a flag of its own. Lock-free
// atomics only (async-signal-safe).
std::atomic<int> g_stops{0};        // SIGTERM and SIGINT received
std::atomic<int> g_stop_signal{0};  // the first of them
std::atomic<bool> g_reload{false};  // SIGHUP received, not yet handled
void OnSignal(int sig) {
  if (sig == SIGHUP) {
    g_reload.store(true);
    return;
  }
  int none = 0;
  g_stop_signal.compare_exchange_strong(none, sig);
  g_stops.fetch_add(1);
}

// --check-config: loads the config and builds every limiter of it as a start-up does, on
// the embedded store (no Redis, no listener), then prints one line per domain.
int CheckConfig(const std::string& path, sluice::FailurePolicy default_policy) {
  auto config = LoadConfig(path);
  sluice::Status built = config.ok() ? sluice::Status::Ok() : config.status();
  if (built.ok()) {
    EngineOptions options;
    options.client.url = "memory://";
    options.client.on_failure = default_policy;
    options.blocking_threads = 1;
    auto engine = Engine::Create(options, *config);
    if (!engine.ok()) built = engine.status();
  }
  if (!built.ok()) {
    std::fprintf(stderr, "%s\n", std::string(built.message()).c_str());
    return 1;
  }
  for (const auto& domain : (*config)->domains) {
    std::set<std::string> algorithms, modes;
    std::size_t limits = 0;
    for (const auto& rule : (*config)->rules) {
      if (rule->domain != domain.domain) continue;
      ++limits;
      algorithms.insert(rule->unlimited ? std::string("unlimited")
                                        : std::string(RuleKindName(rule->kind)));
      const auto mode = rule->failure_mode == sluice::FailurePolicy::kDefault ? default_policy
                                                                              : rule->failure_mode;
      modes.insert(std::string(sluice::FailurePolicyName(mode)));
    }
    auto join = [](const std::set<std::string>& items) {
      std::string out;
      for (const auto& i : items) out += (out.empty() ? "" : ",") + i;
      return out.empty() ? std::string("-") : out;
    };
    std::printf("%s: %zu limit(s), algorithms %s, failure modes %s (%s)\n", domain.domain.c_str(),
                limits, join(algorithms).c_str(), join(modes).c_str(), domain.file.c_str());
  }
  return 0;
}

// Every flag of sluiced, with its default.
struct Settings {
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

// The RLQS flags (docs/rlqs.md), into `s`.
void AddRlqsFlags(CLI::App& app, Settings& s) {
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
CLI::Option* AddFlags(CLI::App& app, Settings& s) {
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

// Where each listener binds, from its flag; false (logged) when one is not HOST:PORT.
struct Addresses {
  HostPort http, grpc, admin, metrics;
};
bool ParseAddresses(const Settings& s, Addresses& at) {
  for (auto [flag, value, out] : {std::tuple{"--http-listen", &s.http_listen, &at.http},
                                  std::tuple{"--grpc-listen", &s.grpc_listen, &at.grpc},
                                  std::tuple{"--admin-listen", &s.admin_listen, &at.admin},
                                  std::tuple{"--metrics-listen", &s.metrics_listen, &at.metrics}}) {
    if (!SplitHostPort(*value, *out)) {
      spdlog::error("{}: expected HOST:PORT, not '{}'", flag, *value);
      return false;
    }
  }
  return true;
}

// The engine on its store. The connection is made in the background: give it
// --connect-wait-ms so the first requests are decided by the store, then serve either
// way (by the failure policies until it is up).
sluice::StatusOr<std::unique_ptr<Engine>> StartEngine(const Settings& s,
                                                      sluice::FailurePolicy policy,
                                                      std::shared_ptr<const Config> config) {
  EngineOptions options;
  options.client.url = s.redis;
  options.client.prefix = s.prefix;
  options.client.deadline = std::chrono::milliseconds(s.deadline_ms);
  options.client.io_threads = s.io_threads;
  options.client.on_failure = policy;
  // What the library has to say about the store (a memory policy that can evict limits).
  options.client.on_warning = [](const std::string& warning) {
    spdlog::warn("store: {}", warning);
  };
  options.blocking_threads = s.blocking_threads;
  options.audit_log = s.audit_log;
  auto engine = Engine::Create(options, std::move(config));
  if (!engine.ok()) return engine;
  const auto wait_until =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(s.connect_wait_ms);
  while (!(*engine)->client().Health().connected && std::chrono::steady_clock::now() < wait_until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!(*engine)->client().Health().connected) {
    spdlog::warn(
        "store {} not reachable yet: serving, every limit answering by its failure policy until it "
        "is",
        sluice::RedactUrl(s.redis));
  }
  return engine;
}

struct Listeners {
  std::unique_ptr<HttpServer> http, admin, metrics;
  std::unique_ptr<GrpcServer> grpc;

  int InFlight() const {
    return http->requests_in_flight() + admin->requests_in_flight() + metrics->requests_in_flight();
  }
};

// Every listener, or the first error (logged).
bool StartListeners(Engine& engine, const Settings& s, const Addresses& at, Listeners& out) {
  const auto read_timeout = std::chrono::milliseconds(s.read_timeout_ms);
  const bool metrics_loopback =
      at.metrics.host == "127.0.0.1" || at.metrics.host == "::1" || at.metrics.host == "localhost";
  if (s.metrics_token.empty() && !metrics_loopback)
    spdlog::warn(
        "metrics listener on {} without --metrics-token (SLUICED_METRICS_TOKEN): every caller "
        "that reaches it reads descriptor values (lease ids, detailed_metric)",
        s.metrics_listen);
  // Threads of its own: a scrape never waits behind checks, nor checks behind a scrape
  // (the page itself is formatted on the engine's blocking pool).
  auto metrics = HttpServer::Start({.host = at.metrics.host,
                                    .port = at.metrics.port,
                                    .threads = 1,
                                    .read_timeout = read_timeout},
                                   MetricsRoutes(engine, s.metrics_token));
  if (!metrics.ok()) {
    spdlog::error("{}", metrics.status().message());
    return false;
  }
  out.metrics = std::move(*metrics);
  // The address the public listener's 404 for /metrics names (the port bound, for port 0).
  const std::string metrics_shown =
      (at.metrics.host.find(':') != std::string::npos ? "[" + at.metrics.host + "]"
                                                      : at.metrics.host) +
      ":" + std::to_string(out.metrics->port());
  const auto on_io = [&engine](int threads) {
    return threads == 0 ? std::optional(sluice::IoExecutor(engine.client())) : std::nullopt;
  };
  auto http = HttpServer::Start({.host = at.http.host,
                                 .port = at.http.port,
                                 .threads = s.http_threads,
                                 .executor = on_io(s.http_threads),
                                 .read_timeout = read_timeout},
                                PublicRoutes(engine, metrics_shown));
  if (!http.ok()) {
    spdlog::error("{}", http.status().message());
    return false;
  }
  out.http = std::move(*http);
  if (s.admin_token.empty())
    spdlog::warn("no --admin-token (SLUICED_ADMIN_TOKEN): every admin call answers 401");
  auto admin = HttpServer::Start(
      {.host = at.admin.host, .port = at.admin.port, .threads = 1, .read_timeout = read_timeout},
      AdminRoutes(engine, s.admin_token));
  if (!admin.ok()) {
    spdlog::error("{}", admin.status().message());
    return false;
  }
  out.admin = std::move(*admin);
  RlqsOptions rlqs{.report_interval = std::chrono::milliseconds(s.rlqs_report_interval_ms),
                   .idle_reports = s.rlqs_idle_reports};
  ParseRlqsUnmatched(s.rlqs_unmatched, rlqs.unmatched);  // checked by its flag
  auto grpc = GrpcServer::Start(
      engine, s.grpc_listen,
      {.threads = s.grpc_threads,
       .executor = on_io(s.grpc_threads),
       .max_server_buffer_bytes = static_cast<std::size_t>(s.grpc_max_buffered_mib) << 20},
      rlqs);
  if (!grpc.ok()) {
    spdlog::error("{}", grpc.status().message());
    return false;
  }
  out.grpc = std::move(*grpc);
  return true;
}

// The breakers' state as the log shows it: the worst domain's state, and which domains
// are open ("open (1 of 3 domains open: 10.0.0.7:6379)"), so that a change of which
// primary is open is logged too.
std::string BreakerShown(Engine& engine) {
  const sluice::StoreHealth h = engine.client().Health();
  if (h.open_domains == 0) return h.breaker;
  std::string names;
  for (const std::string& name : engine.OpenDomainsShown(h))
    names += (names.empty() ? "" : ", ") + name;
  return h.breaker + " (" + std::to_string(h.open_domains) + " of " +
         std::to_string(h.breaker_domains) + " domains open: " + names + ")";
}

// Serves until SIGTERM or SIGINT: reloads on SIGHUP and when the config's files change,
// logs the breaker's changes.
void ServeUntilStopped(Engine& engine, const Settings& s) {
  std::string fingerprint = Fingerprint(s.config_path);
  std::string last_breaker = BreakerShown(engine);
  auto reload = [&](const char* why) {
    auto next = LoadConfig(s.config_path);
    sluice::Status status = next.ok() ? engine.Reload(*next) : next.status();
    if (!status.ok()) {
      if (!next.ok()) engine.metrics().ConfigLoad(false);
      spdlog::error("config reload ({}) refused, keeping the previous config: {}", why,
                    status.message());
      return;
    }
    spdlog::info("config reloaded ({}): {} file(s), {} domain(s), {} limit(s)", why,
                 (*next)->files.size(), (*next)->domains.size(), (*next)->rules.size());
  };
  auto last_watch = std::chrono::steady_clock::now();
  while (true) {
    for (int i = 0; i < 10 && g_stops.load() == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (g_stops.load() > 0) return;
    if (g_reload.exchange(false)) {
      fingerprint = Fingerprint(s.config_path);
      reload("SIGHUP");
    }
    const auto now = std::chrono::steady_clock::now();
    if (s.watch_ms > 0 && now - last_watch >= std::chrono::milliseconds(s.watch_ms)) {
      last_watch = now;
      std::string f = Fingerprint(s.config_path);
      if (f != fingerprint) {
        fingerprint = std::move(f);
        reload("file change");
      }
    }
    const std::string breaker = BreakerShown(engine);
    if (breaker != last_breaker) {
      spdlog::warn("store breaker {} -> {}", last_breaker, breaker);
      last_breaker = breaker;
    }
  }
}

// A graceful stop: /readyz answers 503 from now on, the listeners stop accepting, gRPC
// connections get GOAWAY and HTTP responses `Connection: close`; the calls in flight
// finish, until none is left, the drain timeout passes or a second signal comes.
void Drain(Engine& engine, Listeners& l, const Settings& s) {
  engine.StartDraining();
  l.http->Drain();
  l.admin->Drain();
  l.metrics->Drain();
  l.grpc->Drain();
  spdlog::info("stopping on signal {}: draining (at most {} ms)", g_stop_signal.load(),
               s.drain_timeout_ms);
  const auto drain_start = std::chrono::steady_clock::now();
  const auto drain_until = drain_start + std::chrono::milliseconds(s.drain_timeout_ms);
  while (true) {
    const int in_flight = l.InFlight();
    const std::size_t grpc_open = l.grpc->open_connections();
    const auto now = std::chrono::steady_clock::now();
    if (in_flight == 0 && grpc_open == 0) {
      spdlog::info(
          "drained in {} ms",
          std::chrono::duration_cast<std::chrono::milliseconds>(now - drain_start).count());
      return;
    }
    if (g_stops.load() > 1 || now >= drain_until) {
      spdlog::warn(
          "stopping {}: {} HTTP request(s) and {} gRPC connection(s) still open are dropped",
          g_stops.load() > 1 ? "on a second signal" : "at the drain timeout", in_flight, grpc_open);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sluiced: distributed rate limits over HTTP/JSON and Envoy's RLS v3 gRPC"};
  Settings s;
  CLI::Option* config_opt = AddFlags(app, s);
  CLI11_PARSE(app, argc, argv);

  spdlog::set_level(spdlog::level::from_str(s.log_level));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e%z %l %v");

  auto policy = sluice::ParseFailurePolicy(s.default_policy);
  if (!policy.ok() || *policy == sluice::FailurePolicy::kDefault) {
    spdlog::error("--default-failure-mode: expected open, closed or local, not '{}'",
                  s.default_policy);
    return 2;
  }
  if (!s.check_config.empty()) return CheckConfig(s.check_config, *policy);
  if (config_opt->count() == 0) return app.exit(CLI::RequiredError("--config"));
  Addresses at;
  if (!ParseAddresses(s, at)) return 2;

  auto config = LoadConfig(s.config_path);
  if (!config.ok()) {
    spdlog::error("config refused, not starting: {}", config.status().message());
    return 1;
  }
  spdlog::info("config loaded: {} file(s), {} domain(s), {} limit(s) from {}",
               (*config)->files.size(), (*config)->domains.size(), (*config)->rules.size(),
               s.config_path);
  auto engine = StartEngine(s, *policy, *config);
  if (!engine.ok()) {
    spdlog::error("cannot start: {}", engine.status().ToString());
    return 1;
  }
  Listeners listeners;
  if (!StartListeners(**engine, s, at, listeners)) return 1;
  // One line tests and scripts wait for: every listener is up.
  spdlog::info("serving http={}:{} grpc={}:{} admin={}:{} metrics={}:{} store={}", at.http.host,
               listeners.http->port(), at.grpc.host, listeners.grpc->port(), at.admin.host,
               listeners.admin->port(), at.metrics.host, listeners.metrics->port(),
               sluice::RedactUrl(s.redis));

  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGHUP, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  ServeUntilStopped(**engine, s);
  Drain(**engine, listeners, s);
  listeners.http->Stop();
  listeners.admin->Stop();
  listeners.metrics->Stop();
  listeners.grpc->Stop();
  // The servers go before the engine: the HTTP and gRPC listeners run on the store
  // client's io_context, and an acceptor or timer must not outlive it (ASan: a
  // use-after-free when the gRPC listener was released after it). What their handlers
  // still hold (a listener, connections) is released as the client's io_context shuts
  // down, with the engine; a check's callback still out holds what it answers to.
  listeners = Listeners();
  engine->reset();
  return 0;
}
