#include "service/admin_overrides.h"

#include <spdlog/spdlog.h>

#include "service/json_api.h"
#include "service/override_json.h"

namespace sluiced {
namespace {

using nlohmann::json;

void Error(const Respond& respond, http::status status, std::string_view message) {
  respond(MakeResponse(status, ErrorJson(message)));
}

// A set or clear the library refused or could not confirm: 400 for bad input, 404 for a
// limit the configuration lost meanwhile, 409 when the limiter has the most overrides in
// force already (nothing was set), 503 when the store did not answer.
http::status StatusOfChange(const sluice::Status& s) {
  switch (s.code()) {
    case sluice::StatusCode::kInvalidArgument: return http::status::bad_request;
    case sluice::StatusCode::kNotFound: return http::status::not_found;
    case sluice::StatusCode::kFailedPrecondition:
      // The log could not be written (nothing was done) or the limiter is full.
      return s.message().find("audit log") != std::string::npos ? http::status::gone
                                                                : http::status::conflict;
    default: return http::status::service_unavailable;
  }
}

json OverrideJson(const std::string& domain, const sluice::RuntimeOverride& o) {
  json j = RuntimeOverrideJson(o);
  j["domain"] = domain;
  return j;
}

std::string Dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

sluice::StatusOr<sluice::OverrideSpec> ParseOverrideSpec(const std::string& body) {
  const json j = json::parse(body, nullptr, false);
  if (!j.is_object()) return sluice::InvalidArgumentError("the body is not a JSON object");
  sluice::OverrideSpec spec;
  const auto limit = j.find("limit");
  if (limit == j.end() || !limit->is_number_integer() || limit->get<int64_t>() < 0) {
    return sluice::InvalidArgumentError(
        "`limit` must be an integer >= 0 (0 refuses every request)");
  }
  spec.limit = limit->get<int64_t>();
  const auto ttl = j.find("ttl_s");
  if (ttl == j.end() || !ttl->is_number_integer() || ttl->get<int64_t>() < 1 ||
      ttl->get<int64_t>() > sluice::kMaxOverrideTtl.count()) {
    return sluice::InvalidArgumentError(
        "`ttl_s` must be an integer from 1 to 2592000 (30 days): how long the override lasts");
  }
  spec.ttl = std::chrono::seconds(ttl->get<int64_t>());
  if (const auto w = j.find("window_ms"); w != j.end() && !w->is_null()) {
    if (!w->is_number_integer() || w->get<int64_t>() < 1 ||
        w->get<int64_t>() > sluice::kMaxWindow.count()) {
      return sluice::InvalidArgumentError(
          "`window_ms` must be an integer from 1 to 31622400000 (366 days), or absent for the "
          "rule's own window");
    }
    spec.window = std::chrono::milliseconds(w->get<int64_t>());
  }
  return spec;
}

void AdminSetOverride(Engine& engine, const Match& match, const sluice::OverrideSpec& spec,
                      const sluice::AdminAction& action, const Respond& respond) {
  auto r = engine.SetOverride(match, spec, action);
  if (!r.ok()) {
    spdlog::warn("admin override_set limiter={} id={} actor={} failed: {}",
                 match.rule->limiter_name, match.id, action.actor, r.status().ToString());
    return Error(respond, StatusOfChange(r.status()), r.status().message());
  }
  spdlog::info("admin override_set limiter={} id={} actor={} reason={} limit={} ttl_s={}",
               match.rule->limiter_name, match.id, action.actor, action.reason, spec.limit,
               spec.ttl.count());
  sluice::RuntimeOverride shown = *r->after;
  if (shown.window.count() == 0 && match.rule->kind != RuleKind::kConcurrency) {
    shown.window = UnitWindow(match.rule->unit);
  }
  json j = {{"override", OverrideJson(match.rule->domain, shown)},
            {"record", json::parse(r->record, nullptr, false)}};
  respond(MakeResponse(http::status::ok, Dump(j)));
}

void AdminClearOverride(Engine& engine, const Match& match, const sluice::AdminAction& action,
                        const Respond& respond) {
  auto r = engine.ClearOverride(match, action);
  if (!r.ok()) {
    spdlog::warn("admin override_clear limiter={} id={} actor={} failed: {}",
                 match.rule->limiter_name, match.id, action.actor, r.status().ToString());
    return Error(respond, StatusOfChange(r.status()), r.status().message());
  }
  spdlog::info("admin override_clear limiter={} id={} actor={} reason={} cleared={}",
               match.rule->limiter_name, match.id, action.actor, action.reason, r->changed);
  json j = {{"cleared", r->changed}, {"record", json::parse(r->record, nullptr, false)}};
  respond(MakeResponse(http::status::ok, Dump(j)));
}

json RuntimeOverridesJson(Engine& engine) {
  bool truncated = false;
  auto listed = engine.ListOverrides(truncated);
  if (!listed.ok()) return {{"error", listed.status().ToString()}};
  json list = json::array();
  for (const auto& o : *listed) list.push_back(OverrideJson(o.domain, o.override));
  return {{"overrides", list}, {"truncated", truncated}};
}

void AdminListOverrides(Engine& engine, const Respond& respond) {
  json j = RuntimeOverridesJson(engine);
  if (j.contains("error")) {
    spdlog::warn("admin list_overrides failed: {}", j["error"].get<std::string>());
    return Error(respond, http::status::service_unavailable, j["error"].get<std::string>());
  }
  spdlog::info("admin list_overrides overrides={}", j["overrides"].size());
  respond(MakeResponse(http::status::ok, Dump(j)));
}

}  // namespace sluiced
