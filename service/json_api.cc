#include "service/json_api.h"

#include <algorithm>
#include <cctype>

#include <nlohmann/json.hpp>

namespace sluiced {
namespace {

using nlohmann::json;
using sluice::InvalidArgumentError;
using sluice::StatusOr;

StatusOr<json> Parse(std::string_view body) {
  json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    // Parse again for the position of the error (only on the error path).
    try {
      json again = json::parse(body.begin(), body.end());
      static_cast<void>(again);
    } catch (const json::parse_error& e) {
      return InvalidArgumentError(std::string("malformed JSON: ") + e.what());
    } catch (...) {
    }
    return InvalidArgumentError("malformed JSON");
  }
  if (!j.is_object()) return InvalidArgumentError("the body must be a JSON object");
  return j;
}

const json* Field(const json& obj, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    auto it = obj.find(n);
    if (it != obj.end() && !it->is_null()) return &*it;
  }
  return nullptr;
}

sluice::Status Text(const json& v, std::string_view what, std::string& out) {
  if (!v.is_string()) return InvalidArgumentError(std::string(what) + " must be a string");
  out = v.get<std::string>();
  if (out.size() > kMaxFieldBytes)
    return InvalidArgumentError(std::string(what) + " is longer than " +
                                std::to_string(kMaxFieldBytes) + " bytes");
  return sluice::Status::Ok();
}

// A non-negative integer; proto3 JSON also writes 64-bit integers as strings.
sluice::Status Count(const json& v, std::string_view what, uint64_t max, uint64_t& out) {
  if (v.is_number_unsigned()) {
    out = v.get<uint64_t>();
  } else if (v.is_number_integer()) {
    return InvalidArgumentError(std::string(what) + " must not be negative");
  } else if (v.is_string()) {
    const auto s = v.get<std::string>();
    if (s.empty() || s.size() > 19 ||
        !std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); }))
      return InvalidArgumentError(std::string(what) + " must be a whole number");
    out = std::stoull(s);
  } else {
    return InvalidArgumentError(std::string(what) + " must be a whole number");
  }
  if (out > max)
    return InvalidArgumentError(std::string(what) + " must be at most " + std::to_string(max));
  return sluice::Status::Ok();
}

sluice::Status ParseEntries(const json& v, Entries& entries) {
  if (!v.is_array()) return InvalidArgumentError("entries must be a list of {\"key\", \"value\"}");
  if (v.empty()) return InvalidArgumentError("a descriptor needs at least one entry");
  if (v.size() > kMaxEntries)
    return InvalidArgumentError("a descriptor has at most " + std::to_string(kMaxEntries) +
                                " entries");
  for (const auto& e : v) {
    if (!e.is_object())
      return InvalidArgumentError("each entry must be an object {\"key\", \"value\"}");
    std::pair<std::string, std::string> kv;
    const json* key = Field(e, {"key"});
    if (!key) return InvalidArgumentError("an entry has no key");
    if (auto s = Text(*key, "an entry's key", kv.first); !s.ok()) return s;
    if (kv.first.empty()) return InvalidArgumentError("an entry's key must not be empty");
    if (const json* value = Field(e, {"value"})) {
      if (auto s = Text(*value, "an entry's value", kv.second); !s.ok()) return s;
    }
    entries.push_back(std::move(kv));
  }
  return sluice::Status::Ok();
}

StatusOr<CheckRequest> ParseRequest(std::string_view body, bool envoy) {
  auto parsed = Parse(body);
  if (!parsed.ok()) return parsed.status();
  const json& j = *parsed;
  CheckRequest request;
  const json* domain = Field(j, {"domain"});
  if (!domain) return InvalidArgumentError("missing domain");
  if (auto s = Text(*domain, "domain", request.domain); !s.ok()) return s;
  if (request.domain.empty()) return InvalidArgumentError("domain must not be empty");
  const json* hits =
      envoy ? Field(j, {"hitsAddend", "hits_addend"}) : Field(j, {"hits", "hits_addend"});
  if (hits) {
    if (auto s = Count(*hits, "hits", UINT32_MAX, request.hits); !s.ok()) return s;
  }
  const json* descriptors = Field(j, {"descriptors"});
  if (!descriptors) return InvalidArgumentError("missing descriptors");
  if (!descriptors->is_array()) return InvalidArgumentError("descriptors must be a list");
  if (descriptors->size() > kMaxDescriptors)
    return InvalidArgumentError("at most " + std::to_string(kMaxDescriptors) +
                                " descriptors per request");
  for (const auto& d : *descriptors) {
    if (!d.is_object())
      return InvalidArgumentError("each descriptor must be an object with entries");
    RequestDescriptor rd;
    const json* entries = Field(d, {"entries"});
    if (!entries) return InvalidArgumentError("a descriptor has no entries");
    if (auto s = ParseEntries(*entries, rd.entries); !s.ok()) return s;
    if (const json* h =
            envoy ? Field(d, {"hitsAddend", "hits_addend"}) : Field(d, {"hits", "hits_addend"})) {
      uint64_t v = 0;
      if (auto s = Count(*h, "a descriptor's hits", uint64_t{1} << 40, v); !s.ok()) return s;
      rd.hits = v;
    }
    if (const json* limit = Field(d, {"limit"})) {
      if (!limit->is_object())
        return InvalidArgumentError("limit must be {\"requests_per_unit\", \"unit\"}");
      LimitOverride o;
      uint64_t rpu = 0;
      const json* r = Field(*limit, {"requestsPerUnit", "requests_per_unit"});
      if (r) {
        if (auto s = Count(*r, "limit.requests_per_unit", UINT32_MAX, rpu); !s.ok()) return s;
      }
      o.requests_per_unit = static_cast<int64_t>(rpu);
      const json* u = Field(*limit, {"unit"});
      std::string unit;
      if (!u || !u->is_string())
        return InvalidArgumentError("limit.unit must be SECOND, MINUTE, HOUR, DAY, MONTH or YEAR");
      unit = u->get<std::string>();
      if (!ParseEnvoyUnit(unit, o.unit))
        return InvalidArgumentError("limit.unit must be SECOND, MINUTE, HOUR, DAY, MONTH or YEAR");
      rd.limit = o;
    }
    request.descriptors.push_back(std::move(rd));
  }
  return request;
}

// A structured-field string: printable ASCII, '"' and '\\' escaped.
std::string SfString(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += (c >= 0x20 && c < 0x7f) ? c : '_';
  }
  return out + "\"";
}

int64_t CeilSeconds(std::chrono::milliseconds ms) {
  return (ms.count() + 999) / 1000;
}

json DecisionJson(const DescriptorResult& s) {
  json d;
  d["code"] = CodeName(s.code);
  if (s.rule) {
    d["limit"] = {{"name", s.rule->DisplayName()},  {"requests_per_unit", s.limit},
                  {"unit", UnitName(s.unit)},       {"algorithm", RuleKindName(s.rule->kind)},
                  {"unlimited", s.rule->unlimited}, {"shadow_mode", s.rule->shadow_mode}};
  } else {
    d["limit"] = nullptr;
  }
  if (s.decision) {
    const auto& dec = *s.decision;
    d["allowed"] = dec.allowed;
    d["remaining"] = dec.remaining;
    d["reset_after_ms"] = dec.reset_after.count();
    d["retry_after_ms"] = dec.retry_after.count();
    d["source"] = sluice::DecisionSourceName(dec.source);
    d["reason"] = sluice::RefusalReasonName(dec.reason);
    d["shadow_refused"] = dec.shadow_refused;
  } else {
    d["allowed"] = s.code == Code::kOk;
  }
  if (!s.error.empty()) d["error"] = s.error;
  return d;
}

}  // namespace

std::string_view EnvoyUnitName(Unit unit) {
  switch (unit) {
    case Unit::kSecond: return "SECOND";
    case Unit::kMinute: return "MINUTE";
    case Unit::kHour: return "HOUR";
    case Unit::kDay: return "DAY";
    case Unit::kWeek: return "WEEK";
    case Unit::kMonth: return "MONTH";
    case Unit::kYear: return "YEAR";
  }
  return "UNKNOWN";
}

bool ParseEnvoyUnit(std::string_view name, Unit& unit) {
  for (Unit u : {Unit::kSecond, Unit::kMinute, Unit::kHour, Unit::kDay, Unit::kWeek, Unit::kMonth,
                 Unit::kYear}) {
    if (name == EnvoyUnitName(u)) {
      unit = u;
      return true;
    }
  }
  return false;
}

StatusOr<CheckRequest> ParseCheckRequest(std::string_view body) {
  return ParseRequest(body, false);
}
StatusOr<CheckRequest> ParseEnvoyJsonRequest(std::string_view body) {
  return ParseRequest(body, true);
}

StatusOr<std::pair<std::string, Entries>> ParseDescriptorRequest(std::string_view body) {
  auto parsed = Parse(body);
  if (!parsed.ok()) return parsed.status();
  const json& j = *parsed;
  std::pair<std::string, Entries> out;
  const json* domain = Field(j, {"domain"});
  if (!domain) return InvalidArgumentError("missing domain");
  if (auto s = Text(*domain, "domain", out.first); !s.ok()) return s;
  const json* entries = Field(j, {"entries"});
  if (!entries) {
    if (const json* d = Field(j, {"descriptor"}); d && d->is_object())
      entries = Field(*d, {"entries"});
  }
  if (!entries) return InvalidArgumentError("missing entries (or descriptor.entries)");
  if (auto s = ParseEntries(*entries, out.second); !s.ok()) return s;
  return out;
}

std::string FormatCheckResponse(const CheckResult& result) {
  json j;
  j["allowed"] = result.overall == Code::kOk;
  j["code"] = CodeName(result.overall);
  json list = json::array();
  for (const auto& s : result.statuses) list.push_back(DecisionJson(s));
  j["descriptors"] = std::move(list);
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string FormatEnvoyJsonResponse(const CheckResult& result) {
  json j;
  j["overallCode"] = result.overall == Code::kOk ? "OK" : "OVER_LIMIT";
  json list = json::array();
  for (const auto& s : result.statuses) {
    json st;
    st["code"] = s.code == Code::kOk ? "OK" : "OVER_LIMIT";
    if (s.rule && !s.rule->unlimited && s.rule->kind != RuleKind::kConcurrency) {
      json limit = {{"requestsPerUnit", s.limit}, {"unit", EnvoyUnitName(s.unit)}};
      if (!s.rule->name.empty()) limit["name"] = s.rule->name;
      st["currentLimit"] = std::move(limit);
    }
    if (s.decision) {
      st["limitRemaining"] = s.decision->remaining;
      st["durationUntilReset"] = std::to_string(CeilSeconds(s.decision->reset_after)) + "s";
    }
    list.push_back(std::move(st));
  }
  j["statuses"] = std::move(list);
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string FormatLeaseGrant(const LeaseGrant& g) {
  json j;
  j["acquired"] = g.granted;
  if (g.granted) j["lease"] = g.handle;
  j["limit"] = g.limit;
  j["live"] = g.live;
  j["lease_ttl_ms"] = g.ttl.count();
  j["retry_after_ms"] = g.retry_after.count();
  j["source"] = sluice::DecisionSourceName(g.source);
  j["reason"] = sluice::RefusalReasonName(g.reason);
  if (g.rule) j["name"] = g.rule->DisplayName();
  if (!g.error.empty()) j["error"] = g.error;
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string ErrorJson(std::string_view message) {
  json j;
  j["error"] = std::string(message);
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::vector<std::pair<std::string, std::string>> RateLimitHeaders(const CheckResult& result) {
  std::vector<std::pair<std::string, std::string>> headers;
  if (result.headline < 0) return headers;
  const DescriptorResult& s = result.statuses[static_cast<std::size_t>(result.headline)];
  if (!s.decision || !s.rule) return headers;
  const auto& d = *s.decision;
  const std::string name = SfString(s.rule->DisplayName());
  const int64_t window =
      CeilSeconds(std::chrono::duration_cast<std::chrono::milliseconds>(UnitWindow(s.unit)));
  if (d.limit > 0 || s.limit > 0) {
    headers.emplace_back("RateLimit-Policy",
                         name + ";q=" + std::to_string(d.limit > 0 ? d.limit : s.limit) +
                             ";w=" + std::to_string(window));
  }
  headers.emplace_back("RateLimit", name + ";r=" + std::to_string(d.remaining) +
                                        ";t=" + std::to_string(CeilSeconds(d.reset_after)));
  if (result.overall != Code::kOk) {
    headers.emplace_back("Retry-After",
                         std::to_string(std::max<int64_t>(1, d.RetryAfterSeconds())));
  }
  return headers;
}

}  // namespace sluiced
