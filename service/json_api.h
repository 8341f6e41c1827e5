// service/json_api.h — sluiced's JSON bodies: POST /v1/check (sluice's shape), POST /json
// (envoyproxy/ratelimit's shape: the proto3 JSON mapping of RateLimitRequest and
// RateLimitResponse), the leases endpoints, and the rate limit headers of a response.
//
// Parsing never throws: bad input yields a Status whose message says what is wrong.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "service/engine.h"

namespace sluiced {

// Bounds of one request (larger input is refused with InvalidArgument).
inline constexpr std::size_t kMaxDescriptors = 64;
inline constexpr std::size_t kMaxEntries = 32;
inline constexpr std::size_t kMaxFieldBytes = 1024;  // one key or value

sluice::StatusOr<CheckRequest> ParseCheckRequest(std::string_view body);
sluice::StatusOr<CheckRequest> ParseEnvoyJsonRequest(std::string_view body);
// {"domain": ..., "descriptor": {"entries": [...]}} or {"domain", "entries"}.
sluice::StatusOr<std::pair<std::string, Entries>> ParseDescriptorRequest(std::string_view body);
// POST /v1/leases: a descriptor request and "wait_ms" (an integer, 0 to `max_wait`;
// absent: 0).
struct AcquireRequest {
  std::string domain;
  Entries entries;
  std::chrono::milliseconds wait{0};
};
sluice::StatusOr<AcquireRequest> ParseAcquireRequest(std::string_view body,
                                                     std::chrono::milliseconds max_wait);

// POST /v1/check's hot shape without a JSON tree; false (nothing parsed) for anything
// else, which ParseCheckRequest then hands to the general parser (same results).
bool FastParseCheckRequest(std::string_view body, CheckRequest& out);
// The general parser alone (what FastParseCheckRequest must agree with; the tests
// compare them).
sluice::StatusOr<CheckRequest> ParseCheckRequestTree(std::string_view body);

std::string FormatCheckResponse(const CheckResult& result);
// The same body built as a JSON tree (nlohmann): what FormatCheckResponse must match
// byte for byte (the tests compare them).
std::string FormatCheckResponseTree(const CheckResult& result);
std::string FormatEnvoyJsonResponse(const CheckResult& result);
std::string FormatLeaseGrant(const LeaseGrant& grant);
std::string ErrorJson(std::string_view message);

// HTTP headers for a result: Retry-After (refused), RateLimit-Policy and RateLimit.
std::vector<std::pair<std::string, std::string>> RateLimitHeaders(const CheckResult& result);

// Envoy's enum names ("SECOND", ...) and back.
std::string_view EnvoyUnitName(Unit unit);
bool ParseEnvoyUnit(std::string_view name, Unit& unit);

}  // namespace sluiced
