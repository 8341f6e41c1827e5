#include "service/runner.h"

#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "sluice/boost_first.h"  // before any Boost header

#include <spdlog/spdlog.h>
#include <boost/asio/ip/address.hpp>

#include "service/config.h"
#include "service/console.h"
#include "service/engine.h"
#include "service/grpc_service.h"
#include "service/http_server.h"
#include "service/routes.h"
#include "sluice/asio.h"

namespace sluiced {

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

namespace {

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

// The engine on its store. The connection is made in the background: give it
// --connect-wait-ms so the first requests are decided by the store, then serve either
// way (by the failure policies until it is up). Null when a stop signal came while
// waiting (start-up ends there, without serving).
sluice::StatusOr<std::unique_ptr<Engine>> StartEngine(const Settings& settings,
                                                      std::shared_ptr<const Config> config,
                                                      SignalWatcher& signals) {
  const Flags& s = settings.flags;
  EngineOptions options;
  options.client.url = s.redis;
  options.client.prefix = s.prefix;
  options.client.deadline = std::chrono::milliseconds(s.deadline_ms);
  options.quota_deadline = RlqsStoreDeadline(std::chrono::milliseconds(s.rlqs_report_interval_ms),
                                             options.client.deadline);
  options.client.io_threads = s.io_threads;
  options.client.on_failure = settings.default_policy;
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
  const auto connected = [&engine] {
    return (*engine)->client().Health().connected && (*engine)->quota_client().Health().connected;
  };
  while (!connected() && std::chrono::steady_clock::now() < wait_until) {
    if (signals.WaitForStop(std::chrono::milliseconds(5))) return std::unique_ptr<Engine>();
  }
  const sluice::StoreHealth health = (*engine)->client().Health();
  if (!health.connected) {
    // The library's words never hold the password; the URL is shown redacted.
    spdlog::warn(
        "store {} not reachable yet ({}): serving, every limit answering by its failure policy "
        "until it is",
        sluice::RedactUrl(s.redis), health.connection_error);
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

// Logs why `address`'s listener did not start: "--http-listen: cannot listen on
// 127.0.0.1:8080: Address already in use" (a name given is named, with what it resolved
// to). Returns false.
bool ListenFailed(const ListenAddress& address, const sluice::Status& status) {
  if (address.given == address.Bound())
    spdlog::error("{}: {}", address.flag, status.message());
  else
    spdlog::error("{} {}: {}", address.flag, address.Shown(), status.message());
  return false;
}

// Every listener, or false after the first that cannot start (logged).
bool StartListeners(Engine& engine, const Settings& settings, Listeners& out) {
  const Flags& s = settings.flags;
  const auto read_timeout = std::chrono::milliseconds(s.read_timeout_ms);
  const ListenAddress& at_metrics = settings.metrics;
  boost::system::error_code ec;
  const auto metrics_ip = boost::asio::ip::make_address(at_metrics.host, ec);
  if (s.metrics_token.empty() && !(!ec && metrics_ip.is_loopback()))
    spdlog::warn(
        "metrics listener on {} without --metrics-token (SLUICED_METRICS_TOKEN): every caller "
        "that reaches it reads descriptor values (lease ids, detailed_metric)",
        at_metrics.Shown());
  // Threads of its own: a scrape never waits behind checks, nor checks behind a scrape
  // (the page itself is formatted on the engine's blocking pool).
  auto metrics = HttpServer::Start({.host = at_metrics.host,
                                    .port = at_metrics.port,
                                    .threads = 1,
                                    .read_timeout = read_timeout},
                                   MetricsRoutes(engine, s.metrics_token));
  if (!metrics.ok()) return ListenFailed(at_metrics, metrics.status());
  out.metrics = std::move(*metrics);
  // The address the public listener's 404 for /metrics names (the port bound, for port 0).
  const std::string metrics_shown =
      ListenAddress{.host = at_metrics.host, .port = out.metrics->port()}.Bound();
  const auto on_io = [&engine](int threads) {
    return threads == 0 ? std::optional(sluice::IoExecutor(engine.client())) : std::nullopt;
  };
  auto http = HttpServer::Start({.host = settings.http.host,
                                 .port = settings.http.port,
                                 .threads = s.http_threads,
                                 .executor = on_io(s.http_threads),
                                 .read_timeout = read_timeout},
                                PublicRoutes(engine, metrics_shown));
  if (!http.ok()) return ListenFailed(settings.http, http.status());
  out.http = std::move(*http);
  if (s.admin_token.empty())
    spdlog::warn("no --admin-token (SLUICED_ADMIN_TOKEN): every admin call answers 401");
  auto admin = HttpServer::Start({.host = settings.admin.host,
                                  .port = settings.admin.port,
                                  .threads = 1,
                                  .read_timeout = read_timeout},
                                 AdminListenerRoutes(engine, s.admin_token));
  if (!admin.ok()) return ListenFailed(settings.admin, admin.status());
  out.admin = std::move(*admin);
  RlqsOptions rlqs{.report_interval = std::chrono::milliseconds(s.rlqs_report_interval_ms),
                   .idle_reports = s.rlqs_idle_reports};
  ParseRlqsUnmatched(s.rlqs_unmatched, rlqs.unmatched);  // checked by its flag
  auto grpc = GrpcServer::Start(
      engine, settings.grpc.Bound(),
      {.threads = s.grpc_threads,
       .executor = on_io(s.grpc_threads),
       .max_server_buffer_bytes = static_cast<std::size_t>(s.grpc_max_buffered_mib) << 20},
      rlqs);
  if (!grpc.ok()) return ListenFailed(settings.grpc, grpc.status());
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
void ServeUntilStopped(Engine& engine, const Flags& s, SignalWatcher& signals) {
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
    if (signals.WaitForStop(std::chrono::milliseconds(100))) return;
    if (signals.TakeReload()) {
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
void Drain(Engine& engine, Listeners& l, const Flags& s, const SignalWatcher& signals) {
  engine.StartDraining();
  l.http->Drain();
  l.admin->Drain();
  l.metrics->Drain();
  l.grpc->Drain();
  spdlog::info("stopping on signal {}: draining (at most {} ms)", signals.stop_signal(),
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
    if (signals.stops() > 1 || now >= drain_until) {
      spdlog::warn(
          "stopping {}: {} HTTP request(s) and {} gRPC connection(s) still open are dropped",
          signals.stops() > 1 ? "on a second signal" : "at the drain timeout", in_flight,
          grpc_open);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

int Run(const Settings& settings, SignalWatcher& signals) {
  const Flags& s = settings.flags;
  // A SIGHUP that came before the config is read asks for what this read does: it is
  // taken here and not acted on again. One that comes after (while the store is waited
  // for, the listeners start) reloads once serving: the files may have changed since.
  if (signals.TakeReload())
    spdlog::info("SIGHUP before the config was read: the config read now is its reload");
  auto config = LoadConfig(s.config_path);
  if (!config.ok()) {
    spdlog::error("config refused, not starting: {}", config.status().message());
    return kExitStartFailed;
  }
  spdlog::info("config loaded: {} file(s), {} domain(s), {} limit(s) from {}",
               (*config)->files.size(), (*config)->domains.size(), (*config)->rules.size(),
               s.config_path);
  const auto stopped_starting = [&signals] {
    spdlog::info("stopping on signal {} during start-up: not serving", signals.stop_signal());
    return 0;
  };
  if (signals.stops() > 0) return stopped_starting();
  auto engine = StartEngine(settings, *config, signals);
  if (!engine.ok()) {
    spdlog::error("cannot start: {}", engine.status().ToString());
    return kExitStartFailed;
  }
  if (*engine == nullptr || signals.stops() > 0) return stopped_starting();
  Listeners listeners;
  if (!StartListeners(**engine, settings, listeners)) return kExitStartFailed;
  // One line tests and scripts wait for: every listener is up.
  const auto bound = [](const ListenAddress& at, uint16_t port) {
    return ListenAddress{.host = at.host, .port = port}.Bound();
  };
  spdlog::info("serving http={} grpc={} admin={} metrics={} store={}",
               bound(settings.http, listeners.http->port()),
               bound(settings.grpc, listeners.grpc->port()),
               bound(settings.admin, listeners.admin->port()),
               bound(settings.metrics, listeners.metrics->port()), sluice::RedactUrl(s.redis));

  ServeUntilStopped(**engine, s, signals);
  Drain(**engine, listeners, s, signals);
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

}  // namespace sluiced
