#include "service/routes.h"

#include <algorithm>
#include <cctype>

#include <atomic>
#include <chrono>
#include <regex>

#include <spdlog/spdlog.h>
#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "service/admin_overrides.h"
#include "service/json_api.h"

namespace sluiced {
namespace {

using nlohmann::json;

std::string_view PathOf(const HttpRequest& r) {
  const auto raw = r.target();
  std::string_view target(raw.data(), raw.size());
  return target.substr(0, target.find('?'));
}

std::string_view QueryOf(const HttpRequest& r) {
  const auto raw = r.target();
  std::string_view target(raw.data(), raw.size());
  const auto q = target.find('?');
  return q == std::string_view::npos ? std::string_view{} : target.substr(q + 1);
}

void Error(const Respond& respond, http::status status, std::string_view message) {
  respond(MakeResponse(status, ErrorJson(message)));
}

// A call that cannot run in this server's state (an audit log it cannot write, a store
// too old for the command) is the server's error, 500 with the reason; a lease gone from
// the store is answered 410 where heartbeats are (HeartbeatStatusFor).
http::status StatusFor(const sluice::Status& s) {
  switch (s.code()) {
    case sluice::StatusCode::kInvalidArgument: return http::status::bad_request;
    case sluice::StatusCode::kNotFound: return http::status::not_found;
    case sluice::StatusCode::kFailedPrecondition: return http::status::internal_server_error;
    case sluice::StatusCode::kPermissionDenied: return http::status::forbidden;
    default: return http::status::service_unavailable;
  }
}

// Engine::Heartbeat answers FailedPrecondition for a lease gone from the store: 410.
http::status HeartbeatStatusFor(const sluice::Status& s) {
  return s.code() == sluice::StatusCode::kFailedPrecondition ? http::status::gone : StatusFor(s);
}

void HandleCheck(Engine& engine, const HttpRequest& request, Respond respond, bool envoy) {
  auto parsed = envoy ? ParseEnvoyJsonRequest(request.body()) : ParseCheckRequest(request.body());
  if (!parsed.ok()) {
    engine.metrics().BadRequest();
    return Error(respond, http::status::bad_request, parsed.status().message());
  }
  const std::string domain = parsed->domain;
  engine.Check(
      std::move(*parsed), [respond = std::move(respond), envoy, domain](CheckResult result) {
        if (result.unknown_domain && !envoy) {
          return Error(respond, http::status::bad_request, "unknown domain '" + domain + "'");
        }
        http::status status = http::status::ok;
        if (result.overall == Code::kOverLimit) status = http::status::too_many_requests;
        if (result.overall == Code::kUnavailable) {
          // envoy-ratelimit's /json knows only OK and OVER_LIMIT.
          status = envoy ? http::status::too_many_requests : http::status::service_unavailable;
        }
        HttpResponse response = MakeResponse(
            status, envoy ? FormatEnvoyJsonResponse(result) : FormatCheckResponse(result));
        for (auto& [k, v] : RateLimitHeaders(result)) response.set(k, v);
        respond(std::move(response));
      });
}

// POST /v1/debit: /v1/check's body, every descriptor charged whether it fits or not. The
// work is done, so nothing is refused: 200 with each limit's state after the charge (and
// Retry-After when the id's next request would be refused), 400 for a concurrency limit
// (it takes no debits), 503 when the store could not take the charge.
void HandleDebit(Engine& engine, const HttpRequest& request, Respond respond) {
  auto parsed = ParseCheckRequest(request.body());
  if (!parsed.ok()) {
    engine.metrics().BadRequest();
    return Error(respond, http::status::bad_request, parsed.status().message());
  }
  parsed->debit = true;
  const std::string domain = parsed->domain;
  engine.Check(std::move(*parsed), [respond = std::move(respond), domain](CheckResult result) {
    if (result.unknown_domain) {
      return Error(respond, http::status::bad_request, "unknown domain '" + domain + "'");
    }
    for (const DescriptorResult& s : result.statuses) {
      if (s.bad_request) return Error(respond, http::status::bad_request, s.error);
    }
    const http::status status =
        result.overall == Code::kUnavailable ? http::status::service_unavailable : http::status::ok;
    HttpResponse response = MakeResponse(status, FormatCheckResponse(result));
    for (auto& [k, v] : RateLimitHeaders(result)) response.set(k, v);
    respond(std::move(response));
  });
}

// POST /v1/reservations: /v1/check's body, each descriptor's hits its estimate, held all
// or nothing. 200 with the handle (and /v1/check's answer), 429 over a limit (nothing
// held), 400 for a concurrency limit or a limit override, 503 when the store could not
// hold it (no failure policy grants a reservation).
void HandleReserve(Engine& engine, const HttpRequest& request, Respond respond) {
  auto parsed = ParseCheckRequest(request.body());
  if (!parsed.ok()) {
    engine.metrics().BadRequest();
    return Error(respond, http::status::bad_request, parsed.status().message());
  }
  const std::string domain = parsed->domain;
  engine.Reserve(std::move(*parsed), [respond = std::move(respond), domain](CheckResult result,
                                                                            std::string handle) {
    if (result.unknown_domain) {
      return Error(respond, http::status::bad_request, "unknown domain '" + domain + "'");
    }
    for (const DescriptorResult& s : result.statuses) {
      if (s.bad_request) return Error(respond, http::status::bad_request, s.error);
    }
    http::status status = http::status::ok;
    if (result.overall == Code::kOverLimit) status = http::status::too_many_requests;
    if (result.overall == Code::kUnavailable) status = http::status::service_unavailable;
    json body = json::parse(FormatCheckResponse(result));
    // No handle when no limit applies: nothing is held, nothing to settle.
    if (!handle.empty()) body["handle"] = handle;
    HttpResponse response = MakeResponse(status, body.dump());
    for (auto& [k, v] : RateLimitHeaders(result)) response.set(k, v);
    if (!handle.empty()) response.set(http::field::location, "/v1/reservations/" + handle);
    respond(std::move(response));
  });
}

// POST /v1/reservations/{handle}/settle, body {"hits": actual} (>= 0): 200 settled now, 409
// settled before (nothing changed), 410 no longer held (expired with the estimate's
// window: nothing refunded or charged), each with every limit's state after it; 404 for a
// handle that names nothing; 503 when the store could not take it (retry: once only).
void HandleSettle(Engine& engine, const std::string& handle, const HttpRequest& request,
                  Respond respond) {
  const json body = json::parse(request.body(), nullptr, false);
  if (!body.is_object() || !body.contains("hits") || !body["hits"].is_number_unsigned()) {
    engine.metrics().BadRequest();
    return Error(respond, http::status::bad_request,
                 "a settle takes {\"hits\": <the actual cost, an integer >= 0>}");
  }
  engine.Settle(handle, body["hits"].get<uint64_t>(),
                [respond = std::move(respond)](sluice::StatusOr<SettleResult> settled) {
                  if (!settled.ok()) {
                    return Error(respond, StatusFor(settled.status()), settled.status().message());
                  }
                  http::status status = http::status::ok;
                  if (settled->outcome == sluice::SettleOutcome::kAlreadySettled) {
                    status = http::status::conflict;
                  } else if (settled->outcome == sluice::SettleOutcome::kNotHeld) {
                    status = http::status::gone;
                  }
                  json j = json::parse(FormatCheckResponse(settled->check));
                  j["outcome"] = sluice::SettleOutcomeName(settled->outcome);
                  j["settled_hits"] = settled->settled_hits;
                  HttpResponse response = MakeResponse(status, j.dump());
                  for (auto& [k, v] : RateLimitHeaders(settled->check)) response.set(k, v);
                  respond(std::move(response));
                });
}

// /v1/reservations/{handle}/settle (POST); any other path under /v1/reservations/ is 404.
void RouteSettle(Engine& engine, std::string_view path, const HttpRequest& request,
                 Respond respond) {
  constexpr std::string_view kReservations = "/v1/reservations/";
  constexpr std::string_view kSettle = "/settle";
  std::string_view rest = path.substr(kReservations.size());
  if (!rest.ends_with(kSettle) || rest.size() == kSettle.size() ||
      rest.substr(0, rest.size() - kSettle.size()).find('/') != std::string_view::npos) {
    return Error(respond, http::status::not_found, "no such path");
  }
  if (request.method() != http::verb::post) {
    return Error(respond, http::status::method_not_allowed, "use POST");
  }
  HandleSettle(engine, std::string(rest.substr(0, rest.size() - kSettle.size())), request,
               std::move(respond));
}

// /v1/leases/{handle}/heartbeat (POST) and /v1/leases/{handle} (DELETE).
void RouteLease(Engine& engine, std::string_view path, const HttpRequest& request,
                Respond respond) {
  constexpr std::string_view kLeases = "/v1/leases/";
  std::string_view rest = path.substr(kLeases.size());
  const bool heartbeat = rest.size() > 10 && rest.substr(rest.size() - 10) == "/heartbeat";
  if (heartbeat) rest.remove_suffix(10);
  if (rest.empty() || rest.find('/') != std::string_view::npos)
    return Error(respond, http::status::not_found, "no such path");
  const std::string handle(rest);
  if (heartbeat && request.method() == http::verb::post) {
    return engine.Heartbeat(
        handle, [respond = std::move(respond)](sluice::StatusOr<std::chrono::milliseconds> left) {
          if (!left.ok()) {
            return Error(respond, HeartbeatStatusFor(left.status()), left.status().message());
          }
          respond(MakeResponse(http::status::ok,
                               json{{"held", true}, {"expires_in_ms", left->count()}}.dump()));
        });
  }
  if (!heartbeat && request.method() == http::verb::delete_) {
    return engine.Release(handle, [respond = std::move(respond)](sluice::Status s) {
      if (s.code() == sluice::StatusCode::kUnavailable ||
          s.code() == sluice::StatusCode::kDeadlineExceeded) {
        // Taken, not done: the engine sends it again until it lands or lease_ttl passes.
        return respond(MakeResponse(
            http::status::accepted,
            json{{"released", false},
                 {"detail",
                  "Redis could not take the release now; it is sent again until it lands "
                  "or the lease's lease_ttl passes"}}
                .dump()));
      }
      if (!s.ok()) return Error(respond, StatusFor(s), s.message());
      respond(MakeResponse(http::status::no_content, ""));
    });
  }
  return Error(respond, http::status::method_not_allowed, "use POST .../heartbeat or DELETE");
}

// POST /v1/leases: the descriptor's body, and "wait_ms" (0 to Engine::kMaxAcquireWait) to
// wait for a slot in arrival order instead of a 429 at once; the request is held open
// meanwhile.
void HandleAcquire(Engine& engine, const HttpRequest& request, Respond respond) {
  auto parsed = ParseAcquireRequest(request.body(), Engine::kMaxAcquireWait);
  if (!parsed.ok()) {
    engine.metrics().BadRequest();
    return Error(respond, http::status::bad_request, parsed.status().message());
  }
  // A waiter whose client leaves (a client-side timeout shorter than wait_ms) must not be
  // granted a slot nobody holds.
  auto caller_gone = std::make_shared<std::atomic<bool>>(false);
  if (parsed->wait.count() > 0)
    respond.OnClientGone([caller_gone] { caller_gone->store(true, std::memory_order_relaxed); });
  engine.Acquire(std::move(parsed->domain), std::move(parsed->entries), parsed->wait,
                 std::move(caller_gone), [respond = std::move(respond)](LeaseGrant grant) {
                   if (!grant.error.empty() && !grant.rule)
                     return Error(respond, http::status::bad_request, grant.error);
                   http::status status = http::status::created;
                   if (!grant.error.empty())
                     status = http::status::service_unavailable;
                   else if (!grant.granted)
                     status = grant.reason == sluice::RefusalReason::kStoreUnavailable
                                  ? http::status::service_unavailable
                                  : http::status::too_many_requests;
                   HttpResponse response = MakeResponse(status, FormatLeaseGrant(grant));
                   if (grant.granted)
                     response.set(http::field::location, "/v1/leases/" + grant.handle);
                   else
                     response.set(http::field::retry_after,
                                  std::to_string(std::max<int64_t>(
                                      1, (grant.retry_after.count() + 999) / 1000)));
                   respond(std::move(response));
                 });
}

// Why the store is not connected (StoreHealth::connection_error) as the public listener
// shows it: the store's own words without its address, as the readiness probe shows its
// errors ("redis 10.0.0.7:6379 answered: WRONGPASS …" → "the store answered: WRONGPASS …").
// The admin listener's /admin/breaker shows the address.
std::string ConnectionErrorShown(const std::string& error) {
  static const std::regex host(R"re(redis host "[^"]*")re");
  static const std::regex address(R"re(redis (unix:\S+|\S+:\d+)( \([^)]*\))?)re");
  return std::regex_replace(std::regex_replace(error, host, "the store's host"), address,
                            "the store");
}

// /readyz's answer. Degraded (503 with strict) while the store does not decide checks:
// every limit then answers by its failure policy, so sluiced still serves. The store's
// memory policy is shown once read (as last read), with a warning when it can evict sluice's keys
// (every one has an expiry): an evicted limit starts afresh, but sluiced serves.
HttpResponse ReadinessResponse(const StoreProbe& probe, bool strict) {
  nlohmann::ordered_json j;
  const bool ready = probe.state == StoreProbe::State::kReady;
  j["status"] = ready ? "ready" : "degraded";
  switch (probe.state) {
    case StoreProbe::State::kReady: j["store"] = "reachable"; break;
    case StoreProbe::State::kUnreachable:
      j["store"] = "unreachable";
      // Why, when the connection is what is down (not a breaker open, nor a slow store).
      if (!probe.health.connection_error.empty())
        j["error"] = ConnectionErrorShown(probe.health.connection_error);
      break;
    case StoreProbe::State::kRefusingWrites:
      j["store"] = "refusing writes";
      j["error"] = probe.error;
      break;
    case StoreProbe::State::kFailing:
      j["store"] = "failing";
      j["error"] = probe.error;
      break;
  }
  if (!ready) j["answering"] = "failure policies";
  const sluice::StoreHealth& h = probe.health;
  // (Not while unreachable: the latest reading may be old.)
  if (!h.memory_policy.empty() && probe.state != StoreProbe::State::kUnreachable) {
    j["memory_policy"] = h.memory_policy;
    if (h.evicting) {
      j["evicted_keys"] = h.evicted_keys;
      j["warning"] =
          "the store's maxmemory-policy can evict sluice's keys: an evicted limit starts "
          "afresh (give limits a Redis of their own with noeviction)";
    }
  }
  return MakeResponse(ready || !strict ? http::status::ok : http::status::service_unavailable,
                      j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
}

// `Authorization: Bearer <token>`: the scheme in any case (RFC 7235 section 2.1), the
// token compared in constant time.
bool BearerMatches(const HttpRequest& request, std::string_view token) {
  const auto raw_auth = request[http::field::authorization];
  const std::string_view auth(raw_auth.data(), raw_auth.size());
  constexpr std::string_view kBearer = "bearer ";
  const std::string_view scheme = auth.substr(0, kBearer.size());
  const bool is_bearer =
      scheme.size() == kBearer.size() &&
      std::equal(scheme.begin(), scheme.end(), kBearer.begin(),
                 [](char a, char b) { return std::tolower(static_cast<unsigned char>(a)) == b; });
  return is_bearer && ConstantTimeEquals(auth.substr(kBearer.size()), token);
}

}  // namespace

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  const std::size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

HttpHandler PublicRoutes(Engine& engine, std::string metrics_listener) {
  return [&engine, metrics_listener = std::move(metrics_listener)](HttpRequest&& request,
                                                                   Respond respond) {
    engine.metrics().Request(false);
    const std::string_view path = PathOf(request);
    const auto method = request.method();
    if (path == "/v1/check" || path == "/json") {
      if (method != http::verb::post)
        return Error(respond, http::status::method_not_allowed, "use POST");
      return HandleCheck(engine, request, std::move(respond), path == "/json");
    }
    if (path == "/v1/debit") {
      if (method != http::verb::post)
        return Error(respond, http::status::method_not_allowed, "use POST");
      return HandleDebit(engine, request, std::move(respond));
    }
    if (path == "/v1/reservations") {
      if (method != http::verb::post)
        return Error(respond, http::status::method_not_allowed, "use POST");
      return HandleReserve(engine, request, std::move(respond));
    }
    if (path.starts_with("/v1/reservations/")) {
      return RouteSettle(engine, path, request, std::move(respond));
    }
    if (path == "/v1/leases") {
      if (method != http::verb::post)
        return Error(respond, http::status::method_not_allowed, "use POST");
      return HandleAcquire(engine, request, std::move(respond));
    }
    if (path.starts_with("/v1/leases/"))
      return RouteLease(engine, path, request, std::move(respond));
    // Metrics name descriptor values (lease ids, detailed_metric): never on this listener.
    if (path == "/metrics")
      return Error(respond, http::status::not_found,
                   "metrics are served on the metrics listener (--metrics-listen, " +
                       metrics_listener + "), not on this one");
    if (method != http::verb::get) {
      if (path == "/healthz" || path == "/readyz")
        return Error(respond, http::status::method_not_allowed, "use GET");
      return Error(respond, http::status::not_found, "no such path: " + std::string(path));
    }
    if (path == "/healthz") return respond(MakeResponse(http::status::ok, R"({"status":"alive"})"));
    if (path == "/readyz") {
      // Stopping gracefully: not ready, at once and whatever the store says.
      if (engine.draining())
        return respond(MakeResponse(http::status::service_unavailable,
                                    R"({"status":"draining","store":"not asked"})"));
      // `strict`, `strict=true` or `strict=1`: 503 when degraded; `strict=false` or `=0`: not.
      bool strict = false;
      std::string_view query = QueryOf(request);
      while (!query.empty()) {
        const auto amp = query.find('&');
        const std::string_view param = query.substr(0, amp);
        query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
        const auto eq = param.find('=');
        if (param.substr(0, eq) != "strict") continue;
        const std::string_view value =
            eq == std::string_view::npos ? std::string_view() : param.substr(eq + 1);
        if (value.empty() || value == "true" || value == "1") {
          strict = true;
        } else if (value == "false" || value == "0") {
          strict = false;
        } else {
          return Error(respond, http::status::bad_request, "strict must be true or false");
        }
      }
      return engine.ProbeStore([respond = std::move(respond), strict](StoreProbe probe) {
        respond(ReadinessResponse(probe, strict));
      });
    }
    return Error(respond, http::status::not_found, "no such path: " + std::string(path));
  };
}

// One log line per refused admin call, at most one a second (the others are counted and
// named in the next line): a caller guessing tokens cannot flood the log.
static void LogRefusedAdminCall(const HttpRequest& request) {
  static std::atomic<int64_t> last_ms{0};
  static std::atomic<uint64_t> suppressed{0};
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  int64_t last = last_ms.load(std::memory_order_relaxed);
  if (now - last < 1000 || !last_ms.compare_exchange_strong(last, now)) {
    suppressed.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const uint64_t more = suppressed.exchange(0, std::memory_order_relaxed);
  spdlog::warn("admin call refused (no or wrong bearer token): {} {}{}",
               std::string(request.method_string()), std::string(PathOf(request)),
               more ? " (and " + std::to_string(more) + " more refused since the last line)" : "");
}

namespace {

// GET /admin/config: every rule as loaded, and the store (its password masked).
HttpResponse AdminConfig(Engine& engine) {
  json rules = json::array();
  auto config = engine.config();
  for (const auto& r : config->rules) {
    rules.push_back({{"domain", r->domain},
                     {"path", r->path},
                     {"name", r->name},
                     {"limiter", r->limiter_name},
                     {"algorithm", RuleKindName(r->kind)},
                     {"unit", UnitName(r->unit)},
                     {"requests_per_unit", r->requests_per_unit},
                     {"unlimited", r->unlimited},
                     {"shadow_mode", r->shadow_mode},
                     {"burst", r->burst},
                     {"lease_ttl_ms", r->lease_ttl.count()},
                     {"failure_mode", sluice::FailurePolicyName(r->failure_mode)},
                     {"local_servers", r->local_servers},
                     {"replaces", r->replaces},
                     {"at", r->position.ToString()}});
  }
  // The runtime overrides in force beside the configuration's own limits (a store read:
  // this page is made on the blocking pool).
  json j = {{"store", engine.store_shown()},
            {"files", config->files},
            {"rules", rules},
            {"runtime_overrides", RuntimeOverridesJson(engine)}};
  spdlog::info("admin config rules={}", config->rules.size());
  return MakeResponse(http::status::ok, j.dump(-1, ' ', false, json::error_handler_t::replace));
}

// GET /admin/breaker: the store's health as its breakers see it. There is one breaker per
// fault domain (each primary of a Redis Cluster; the store itself otherwise): the state
// is the worst domain's, the failures the highest, the counters sums, and the open (or
// half-open) domains are named by address, never with a password. `error` says why the
// store is not connected (the library's words, with its address, never a password); empty
// while it is.
HttpResponse AdminBreaker(Engine& engine) {
  const sluice::StoreHealth h = engine.client().Health();
  const std::vector<std::string> open = engine.OpenDomainsShown(h);
  nlohmann::ordered_json j = {{"breaker", h.breaker},
                              {"store", engine.store_shown()},
                              {"connected", h.connected},
                              {"error", h.connection_error},
                              {"domains", h.breaker_domains},
                              {"open_domains", h.open_domains},
                              {"open", open},
                              {"consecutive_failures", h.consecutive_failures},
                              {"breaker_opens", h.breaker_opens},
                              {"short_circuited", h.short_circuited},
                              {"probe_in_ms", h.probe_in.count()}};
  spdlog::info("admin breaker state={} domains={} open={}", h.breaker, h.breaker_domains,
               h.open_domains);
  return MakeResponse(http::status::ok,
                      j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
}

// The actor and reason of an audited action (release, reset), or why they are refused
// (both needed; a control character is refused before anything is logged: a newline
// would forge log lines).
sluice::StatusOr<sluice::AdminAction> AuditedAction(const std::string& body_text) {
  sluice::AdminAction action;
  json body = json::parse(body_text, nullptr, false);
  if (body.is_object() && body.contains("actor") && body["actor"].is_string())
    action.actor = body["actor"];
  if (body.is_object() && body.contains("reason") && body["reason"].is_string())
    action.reason = body["reason"];
  if (action.actor.empty() || action.reason.empty())
    return sluice::InvalidArgumentError(
        "this admin call needs an actor and a reason (they go to the audit log)");
  auto has_control = [](const std::string& v) {
    return std::any_of(v.begin(), v.end(),
                       [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
  };
  if (has_control(action.actor) || has_control(action.reason))
    return sluice::InvalidArgumentError("actor and reason must not contain control characters");
  return action;
}

// POST /admin/leases/release (blocking: on the engine's pool).
void AdminRelease(Engine& engine, const Match& match, const sluice::AdminAction& action,
                  const Respond& respond) {
  auto r = engine.ReleaseAll(match, action);
  if (!r.ok()) {
    spdlog::warn("admin release_all limiter={} id={} actor={} failed: {}", match.rule->limiter_name,
                 match.id, action.actor, r.status().ToString());
    return Error(respond, StatusFor(r.status()), r.status().message());
  }
  spdlog::info("admin release_all limiter={} id={} actor={} reason={} released={}",
               match.rule->limiter_name, match.id, action.actor, action.reason, r->released);
  json j = {{"released", r->released}, {"record", json::parse(r->record, nullptr, false)}};
  respond(MakeResponse(http::status::ok, j.dump(-1, ' ', false, json::error_handler_t::replace)));
}

// POST /admin/reset (blocking: on the engine's pool).
void AdminReset(Engine& engine, const Match& match, const sluice::AdminAction& action,
                const Respond& respond) {
  auto r = engine.ResetCounter(match, action);
  if (!r.ok()) {
    spdlog::warn("admin reset limiter={} id={} actor={} failed: {}", match.rule->limiter_name,
                 match.id, action.actor, r.status().ToString());
    return Error(respond, StatusFor(r.status()), r.status().message());
  }
  spdlog::info("admin reset limiter={} id={} actor={} reason={} remaining={}",
               match.rule->limiter_name, match.id, action.actor, action.reason, r->after.remaining);
  json j = {{"reset", true},
            {"limiter", match.rule->limiter_name},
            {"id", match.id},
            {"remaining", r->after.remaining},
            {"record", json::parse(r->record, nullptr, false)}};
  respond(MakeResponse(http::status::ok, j.dump(-1, ' ', false, json::error_handler_t::replace)));
}

// POST /admin/leases/list (blocking: on the engine's pool).
void AdminListLeases(Engine& engine, const Match& match, const Respond& respond) {
  auto r = engine.ListLeases(match);
  if (!r.ok()) {
    spdlog::warn("admin list_leases limiter={} id={} failed: {}", match.rule->limiter_name,
                 match.id, r.status().ToString());
    return Error(respond, StatusFor(r.status()), r.status().message());
  }
  spdlog::info("admin list_leases limiter={} id={} leases={}", match.rule->limiter_name, match.id,
               r->size());
  json leases = json::array();
  for (const auto& l : *r)
    leases.push_back(
        {{"id", l.id}, {"acquired_at_ms", l.acquired_at_ms}, {"expires_at_ms", l.expires_at_ms}});
  json j = {{"limiter", match.rule->limiter_name}, {"id", match.id}, {"leases", leases}};
  respond(MakeResponse(http::status::ok, j.dump(-1, ' ', false, json::error_handler_t::replace)));
}

// POST /admin/inspect (blocking: on the engine's pool).
void AdminInspect(Engine& engine, const Match& match, const Respond& respond) {
  auto r = engine.Inspect(match);
  if (!r.ok()) {
    spdlog::warn("admin inspect limiter={} id={} failed: {}", match.rule->limiter_name, match.id,
                 r.status().ToString());
    return Error(respond, StatusFor(r.status()), r.status().message());
  }
  spdlog::info("admin inspect limiter={} id={} keys={}", match.rule->limiter_name, match.id,
               r->keys.size());
  json keys = json::array();
  for (const auto& k : r->keys) {
    json fields = json::object();
    for (const auto& f : k.fields) fields[f.name] = f.value;
    keys.push_back({{"key", k.key},
                    {"type", sluice::KeyTypeName(k.type)},
                    {"ttl_ms", k.ttl_ms},
                    {"fields", fields},
                    {"used", k.used},
                    {"used_unit", k.used_unit},
                    {"problem", k.problem}});
  }
  json j = {{"limiter", r->limiter}, {"id", r->id}, {"now_ms", r->now_ms}, {"keys", keys}};
  respond(MakeResponse(http::status::ok, j.dump(-1, ' ', false, json::error_handler_t::replace)));
}

}  // namespace

HttpHandler AdminRoutes(Engine& engine, std::string token) {
  return [&engine, token = std::move(token)](HttpRequest&& request, Respond respond) {
    if (token.empty() || !BearerMatches(request, token)) {
      LogRefusedAdminCall(request);
      // Without a configured token no call can pass: say so, rather than let the caller
      // hunt for a token that does not exist.
      HttpResponse r = MakeResponse(
          http::status::unauthorized,
          ErrorJson(token.empty()
                        ? "admin calls are refused: this server has no admin token configured "
                          "(start it with --admin-token or SLUICED_ADMIN_TOKEN)"
                        : "admin calls need Authorization: Bearer <token>"));
      r.set(http::field::www_authenticate, "Bearer");
      return respond(std::move(r));
    }
    const std::string path(PathOf(request));
    const auto method = request.method();
    if (path == "/admin/config" && method == http::verb::get) {
      return boost::asio::post(engine.blocking_pool(), [&engine, respond = std::move(respond)]() {
        respond(AdminConfig(engine));
      });
    }
    if (path == "/admin/overrides" && method == http::verb::get) {
      return boost::asio::post(engine.blocking_pool(), [&engine, respond = std::move(respond)]() {
        AdminListOverrides(engine, respond);
      });
    }
    if (path == "/admin/breaker" && method == http::verb::get) return respond(AdminBreaker(engine));
    // The audited actions need an actor and a reason besides the descriptor.
    const bool audited = path == "/admin/leases/release" || path == "/admin/reset" ||
                         path == "/admin/overrides" || path == "/admin/overrides/clear";
    if ((audited || path == "/admin/leases/list" || path == "/admin/inspect") &&
        method == http::verb::post) {
      auto parsed = ParseDescriptorRequest(request.body());
      if (!parsed.ok()) return Error(respond, http::status::bad_request, parsed.status().message());
      auto match = engine.Resolve(parsed->first, parsed->second);
      if (!match.ok()) return Error(respond, http::status::not_found, match.status().message());
      sluice::AdminAction action;
      if (audited) {
        auto given = AuditedAction(request.body());
        if (!given.ok()) return Error(respond, http::status::bad_request, given.status().message());
        action = *std::move(given);
      }
      sluice::OverrideSpec spec;
      if (path == "/admin/overrides") {
        auto asked = ParseOverrideSpec(request.body());
        if (!asked.ok()) return Error(respond, http::status::bad_request, asked.status().message());
        spec = *asked;
      }
      // Blocking library calls: on the engine's blocking pool, never on a server thread.
      return boost::asio::post(
          engine.blocking_pool(),
          [&engine, path, match = std::move(*match), action, spec, respond = std::move(respond)]() {
            if (path == "/admin/leases/release")
              return AdminRelease(engine, match, action, respond);
            if (path == "/admin/reset") return AdminReset(engine, match, action, respond);
            if (path == "/admin/overrides") {
              return AdminSetOverride(engine, match, spec, action, respond);
            }
            if (path == "/admin/overrides/clear") {
              return AdminClearOverride(engine, match, action, respond);
            }
            if (path == "/admin/leases/list") return AdminListLeases(engine, match, respond);
            AdminInspect(engine, match, respond);
          });
    }
    return Error(respond, http::status::not_found,
                 "no such admin call: " + std::string(request.method_string()) + " " + path);
  };
}

HttpHandler MetricsRoutes(Engine& engine, std::string token) {
  return [&engine, token = std::move(token)](HttpRequest&& request, Respond respond) {
    if (!token.empty() && !BearerMatches(request, token)) {
      HttpResponse r = MakeResponse(http::status::unauthorized,
                                    ErrorJson("metrics need Authorization: Bearer <token>"));
      r.set(http::field::www_authenticate, "Bearer");
      return respond(std::move(r));
    }
    const std::string_view path = PathOf(request);
    if (path != "/metrics")
      return Error(respond, http::status::not_found,
                   "no such path: " + std::string(path) + " (this listener serves /metrics)");
    if (request.method() != http::verb::get)
      return Error(respond, http::status::method_not_allowed, "use GET");
    // The page is formatted on the blocking pool, never on a thread that serves checks.
    boost::asio::post(engine.blocking_pool(), [&engine, respond = std::move(respond)]() {
      respond(MakeResponse(http::status::ok, engine.MetricsText(),
                           "text/plain; version=0.0.4; charset=utf-8"));
    });
  };
}

}  // namespace sluiced
