#include "service/json_api.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>

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

// An explicit "hits": 0 on /v1/check's request: every descriptor without hits of its own
// is peeked (reported, nothing spent), as a per-descriptor 0 is.
void PeekUnlessCounted(CheckRequest& request) {
  for (auto& d : request.descriptors)
    if (!d.hits) d.hits = 0;
}

// The hot request shape of POST /v1/check, parsed without building a JSON tree:
// {"domain": "...", "hits": N, "descriptors": [{"entries": [{"key": "...", "value":
// "..."}], "hits": N}]}, keys in any order, whitespace anywhere JSON allows it. It
// accepts only what the general parser would accept with the same result: strings of
// printable ASCII without escapes, whole numbers in range, each key at most once, every
// bound respected; anything else (another key, an escape, null, a number as a string,
// an error) is declined and left to the general parser, whose errors are the API's.
class FastReader {
 public:
  explicit FastReader(std::string_view in) : in_(in) {}

  bool Request(CheckRequest& out) {
    bool domain = false, hits = false, descriptors = false;
    if (!Open('{')) return false;
    do {
      std::string_view key;
      if (!String(key) || !Colon()) return false;
      if (key == "domain" && !domain) {
        domain = true;
        std::string_view v;
        if (!String(v) || v.empty() || v.size() > kMaxFieldBytes) return false;
        out.domain.assign(v);
      } else if (key == "hits" && !hits) {
        hits = true;
        if (!Number(UINT32_MAX, out.hits)) return false;
      } else if (key == "descriptors" && !descriptors) {
        descriptors = true;
        if (!Descriptors(out.descriptors)) return false;
      } else {
        return false;
      }
    } while (Next('}'));
    if (!closed_ || !domain || !descriptors) return false;
    Space();
    if (pos_ != in_.size()) return false;
    if (hits && out.hits == 0) PeekUnlessCounted(out);
    return true;
  }

 private:
  bool Descriptors(std::vector<RequestDescriptor>& out) {
    if (!Open('[')) return false;
    if (Peek(']')) return Close(']');
    do {
      if (out.size() == kMaxDescriptors) return false;
      RequestDescriptor d;
      bool entries = false, hits = false;
      if (!Open('{')) return false;
      do {
        std::string_view key;
        if (!String(key) || !Colon()) return false;
        if (key == "entries" && !entries) {
          entries = true;
          if (!Entries_(d.entries)) return false;
        } else if (key == "hits" && !hits) {
          hits = true;
          uint64_t v = 0;
          if (!Number(uint64_t{1} << 40, v)) return false;
          d.hits = v;
        } else {
          return false;
        }
      } while (Next('}'));
      if (!closed_ || !entries) return false;
      out.push_back(std::move(d));
    } while (Next(']'));
    return closed_;
  }

  bool Entries_(Entries& out) {
    if (!Open('[')) return false;
    do {
      if (out.size() == kMaxEntries) return false;
      std::string_view k, v;
      bool has_key = false, has_value = false;
      if (!Open('{')) return false;
      do {
        std::string_view key;
        if (!String(key) || !Colon()) return false;
        if (key == "key" && !has_key) {
          has_key = true;
          if (!String(k) || k.empty() || k.size() > kMaxFieldBytes) return false;
        } else if (key == "value" && !has_value) {
          has_value = true;
          if (!String(v) || v.size() > kMaxFieldBytes) return false;
        } else {
          return false;
        }
      } while (Next('}'));
      if (!closed_ || !has_key) return false;
      out.emplace_back(std::string(k), std::string(v));
    } while (Next(']'));
    return closed_ && !out.empty();
  }

  void Space() {
    while (pos_ < in_.size() &&
           (in_[pos_] == ' ' || in_[pos_] == '\n' || in_[pos_] == '\r' || in_[pos_] == '\t'))
      ++pos_;
  }
  bool Peek(char c) {
    Space();
    return pos_ < in_.size() && in_[pos_] == c;
  }
  bool Open(char c) {
    if (!Peek(c)) return false;
    ++pos_;
    return true;
  }
  bool Close(char c) {
    Open(c);
    closed_ = true;
    return true;
  }
  bool Colon() { return Open(':'); }
  // After a member or element: true at ',' (another follows); false at `end` (closed_
  // set) or anything else (closed_ clear: the input is declined).
  bool Next(char end) {
    closed_ = false;
    Space();
    if (pos_ >= in_.size()) return false;
    if (in_[pos_] == ',') {
      ++pos_;
      return true;
    }
    if (in_[pos_] == end) {
      ++pos_;
      closed_ = true;
    }
    return false;
  }
  bool String(std::string_view& out) {
    if (!Open('"')) return false;
    const std::size_t start = pos_;
    while (pos_ < in_.size()) {
      const auto c = static_cast<unsigned char>(in_[pos_]);
      if (c == '"') {
        out = in_.substr(start, pos_ - start);
        ++pos_;
        return true;
      }
      if (c == '\\' || c < 0x20 || c >= 0x7f) return false;
      ++pos_;
    }
    return false;
  }
  bool Number(uint64_t max, uint64_t& out) {
    Space();
    const std::size_t start = pos_;
    uint64_t v = 0;
    while (pos_ < in_.size() && in_[pos_] >= '0' && in_[pos_] <= '9') {
      if (pos_ - start >= 18) return false;
      v = v * 10 + static_cast<uint64_t>(in_[pos_] - '0');
      ++pos_;
    }
    const std::size_t n = pos_ - start;
    if (n == 0 || (n > 1 && in_[start] == '0') || v > max) return false;
    if (pos_ < in_.size() && (in_[pos_] == '.' || in_[pos_] == 'e' || in_[pos_] == 'E'))
      return false;
    out = v;
    return true;
  }

  std::string_view in_;
  std::size_t pos_ = 0;
  bool closed_ = false;
};

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
  // envoy-ratelimit's hits_addend 0 is proto3's default (a hit of 1); /v1/check's "hits"
  // is present only when written, so 0 there asks for a peek.
  if (!envoy && hits && request.hits == 0) PeekUnlessCounted(request);
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
    // Present when a failure policy answered: why the store did not.
    if (dec.store_failure != sluice::StoreFailure::kNone)
      d["store_failure"] = sluice::StoreFailureName(dec.store_failure);
    if (s.debit) d["debt"] = dec.debt;
    // Present when the id is in its rule's block (block_duration).
    if (dec.blocked) d["blocked"] = true;
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

bool FastParseCheckRequest(std::string_view body, CheckRequest& out) {
  CheckRequest request;
  if (!FastReader(body).Request(request)) return false;
  out = std::move(request);
  return true;
}

StatusOr<CheckRequest> ParseCheckRequestTree(std::string_view body) {
  return ParseRequest(body, false);
}

StatusOr<CheckRequest> ParseCheckRequest(std::string_view body) {
  CheckRequest request;
  if (FastParseCheckRequest(body, request)) return request;
  return ParseRequest(body, false);
}
StatusOr<CheckRequest> ParseEnvoyJsonRequest(std::string_view body) {
  return ParseRequest(body, true);
}

namespace {

StatusOr<std::pair<std::string, Entries>> DescriptorOf(const json& j) {
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

}  // namespace

StatusOr<std::pair<std::string, Entries>> ParseDescriptorRequest(std::string_view body) {
  auto parsed = Parse(body);
  if (!parsed.ok()) return parsed.status();
  return DescriptorOf(*parsed);
}

StatusOr<AcquireRequest> ParseAcquireRequest(std::string_view body,
                                             std::chrono::milliseconds max_wait) {
  auto parsed = Parse(body);
  if (!parsed.ok()) return parsed.status();
  auto descriptor = DescriptorOf(*parsed);
  if (!descriptor.ok()) return descriptor.status();
  AcquireRequest out{.domain = std::move(descriptor->first),
                     .entries = std::move(descriptor->second)};
  if (const json* wait = Field(*parsed, {"wait_ms"})) {
    if (!wait->is_number_integer() || wait->get<int64_t>() < 0 ||
        wait->get<int64_t>() > max_wait.count()) {
      return InvalidArgumentError("wait_ms must be an integer from 0 to " +
                                  std::to_string(max_wait.count()));
    }
    out.wait = std::chrono::milliseconds(wait->get<int64_t>());
  }
  return out;
}

namespace {

// Appends `s` as a JSON string exactly as nlohmann's dump (error_handler replace) writes
// it: printable ASCII without '"' and '\\' verbatim, anything else through nlohmann.
void AppendJsonString(std::string& out, std::string_view s) {
  bool plain = true;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f || c == '"' || c == '\\') {
      plain = false;
      break;
    }
  }
  if (plain) {
    out += '"';
    out += s;
    out += '"';
    return;
  }
  out += json(std::string(s)).dump(-1, ' ', false, json::error_handler_t::replace);
}

void AppendInt(std::string& out, int64_t v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

void AppendBool(std::string& out, bool v) {
  out += v ? "true" : "false";
}

// One descriptor's decision, as DecisionJson's object dumped (keys in nlohmann's order).
void AppendDecision(std::string& out, const DescriptorResult& s) {
  const bool allowed = s.decision ? s.decision->allowed : s.code == Code::kOk;
  out += "{\"allowed\":";
  AppendBool(out, allowed);
  if (s.decision && s.decision->blocked) out += ",\"blocked\":true";
  out += ",\"code\":\"";
  out += CodeName(s.code);
  out += '"';
  if (s.debit && s.decision) {
    out += ",\"debt\":";
    AppendInt(out, s.decision->debt);
  }
  if (!s.error.empty()) {
    out += ",\"error\":";
    AppendJsonString(out, s.error);
  }
  out += ",\"limit\":";
  if (s.rule) {
    out += "{\"algorithm\":";
    AppendJsonString(out, RuleKindName(s.rule->kind));
    out += ",\"name\":";
    AppendJsonString(out, s.rule->DisplayName());
    out += ",\"requests_per_unit\":";
    AppendInt(out, s.limit);
    out += ",\"shadow_mode\":";
    AppendBool(out, s.rule->shadow_mode);
    out += ",\"unit\":";
    AppendJsonString(out, UnitName(s.unit));
    out += ",\"unlimited\":";
    AppendBool(out, s.rule->unlimited);
    out += '}';
  } else {
    out += "null";
  }
  if (s.decision) {
    const auto& d = *s.decision;
    out += ",\"reason\":";
    AppendJsonString(out, sluice::RefusalReasonName(d.reason));
    out += ",\"remaining\":";
    AppendInt(out, d.remaining);
    out += ",\"reset_after_ms\":";
    AppendInt(out, d.reset_after.count());
    out += ",\"retry_after_ms\":";
    AppendInt(out, d.retry_after.count());
    out += ",\"shadow_refused\":";
    AppendBool(out, d.shadow_refused);
    out += ",\"source\":";
    AppendJsonString(out, sluice::DecisionSourceName(d.source));
    if (d.store_failure != sluice::StoreFailure::kNone) {
      out += ",\"store_failure\":";
      AppendJsonString(out, sluice::StoreFailureName(d.store_failure));
    }
  }
  out += '}';
}

}  // namespace

std::string FormatCheckResponse(const CheckResult& result) {
  std::string out;
  out.reserve(64 + 320 * result.statuses.size());
  out += "{\"allowed\":";
  AppendBool(out, result.overall == Code::kOk);
  out += ",\"code\":\"";
  out += CodeName(result.overall);
  out += "\",\"descriptors\":[";
  for (std::size_t i = 0; i < result.statuses.size(); ++i) {
    if (i > 0) out += ',';
    AppendDecision(out, result.statuses[i]);
  }
  out += "]}";
  return out;
}

std::string FormatCheckResponseTree(const CheckResult& result) {
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
  if (!s.decision || !s.rule || s.rule->shadow_mode) return headers;
  const auto& d = *s.decision;
  const std::string name = SfString(s.rule->DisplayName());
  const int64_t quota = d.limit > 0 ? d.limit : s.limit;
  const auto unit_ms = std::chrono::duration_cast<std::chrono::milliseconds>(UnitWindow(s.unit));
  int64_t window = CeilSeconds(unit_ms);
  const bool bucket = s.rule->kind == RuleKind::kTokenBucket || s.rule->kind == RuleKind::kGcra;
  if (bucket && s.limit > 0 && quota > 0) {
    // A bucket admits its capacity at once and refills requests_per_unit per unit: the
    // policy is its capacity per the time the refill takes to fill it (burst 10 at 1/s:
    // q=10;w=10), which is both the burst and the long-run rate.
    const long double ms = static_cast<long double>(quota) *
                           static_cast<long double>(unit_ms.count()) /
                           static_cast<long double>(s.limit);
    window = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(ms / 1000.0L)));
  }
  if (quota > 0) {
    headers.emplace_back("RateLimit-Policy",
                         name + ";q=" + std::to_string(quota) + ";w=" + std::to_string(window));
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
