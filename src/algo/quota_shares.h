// Quota shares (sluice/quota.h): one rate shared among the clients of a bucket in
// proportion to their demand, the sum of the recorded grants never above the rate. The
// script contract of src/algo/quota_shares.lua and its in-memory twin: the twin takes the
// same arguments and returns the same reply on an explicit state; the differential test
// holds both to identical replies and identical stored state (the clients, the sums and
// the expiry index).
//
// Rates are integers in milli-requests per second. The sums the rule keeps are of at most
// kMaxQuotaBucketBytes / 162 clients, each demand recorded as at most
// kMaxQuotaRecordedDemandMilli and the grants summing to at most kMaxQuotaRateMilli: below
// 2^53, so exact in a double whatever order the updates come in; the rule's products and
// quotients are taken in doubles in the same order on both sides, so the floored grant is
// bit-identical.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include "sluice/status.h"

namespace sluice::internal {

// The largest rate and demand: 10^9 requests per second.
inline constexpr int64_t kMaxQuotaRateMilli = 1'000'000'000'000;
// A demand above this (10^7 requests per second from one client) is recorded as this.
inline constexpr int64_t kMaxQuotaRecordedDemandMilli = 10'000'000'000;
// A bucket's budget: its recorded clients count QuotaClientCost bytes each (about what
// Redis holds for one: its hash field and its entry in the expiry index); a new client
// that does not fit is refused (grant 0, not recorded, QuotaShareReply::full).
inline constexpr int64_t kMaxQuotaBucketBytes = int64_t{32} << 20;
inline int64_t QuotaClientCost(std::string_view client) {
  return 160 + 2 * static_cast<int64_t>(client.size());
}
// The reserve kept for clients that hold nothing: rate / kQuotaReservePart.
inline constexpr int64_t kQuotaReservePart = 64;
// Clients whose hold ran out folded out per call (each call adds at most one client, so
// a backlog of expired ones shrinks by at least 7 per call).
inline constexpr int kQuotaFold = 8;
inline constexpr std::size_t kMaxQuotaClientBytes = 64;
inline constexpr int64_t kMinQuotaHeadroomPercent = 100;
inline constexpr int64_t kMaxQuotaHeadroomPercent = 10'000;
inline constexpr int64_t kMaxQuotaHoldMs = int64_t{366} * 24 * 3600 * 1000;
// Expiries get this grace under a model clock, as in every script (src/algo/clock.lua).
inline constexpr int64_t kModelClockGraceMs = 60'000;

struct QuotaShareArgs {
  std::string client;              // 1 to kMaxQuotaClientBytes bytes, any bytes
  int64_t demand_milli = 0;        // 0 to kMaxQuotaRateMilli
  int64_t rate_milli = 0;          // 1 to kMaxQuotaRateMilli
  int64_t hold_ms = 0;             // 1 to kMaxQuotaHoldMs
  int64_t headroom_percent = 200;  // kMinQuotaHeadroomPercent to kMaxQuotaHeadroomPercent
  bool release = false;            // only `client` is read (and checked)
  int64_t budget_bytes = kMaxQuotaBucketBytes;  // 1 to kMaxQuotaBucketBytes (tests lower it)
};

// What the script stores per client (the hash field's value "expires demand grant").
struct QuotaClient {
  int64_t expires_ms = 0;  // live while now < expires_ms
  int64_t demand_milli = 0;
  int64_t grant_milli = 0;
  bool operator==(const QuotaClient&) const = default;
};

// One bucket: its recorded clients (client -> its entry; those whose hold ran out
// included until folded out), the sums over them and the expiry index, as the script
// keeps them (the hash, its "" field and the sorted set).
struct QuotaShareState {
  std::map<std::string, QuotaClient> clients;
  std::set<std::pair<int64_t, std::string>> by_expiry;  // (expires, client): ZSET order
  int64_t demand_milli = 0;                             // D: the sum of the recorded demands
  int64_t grant_milli = 0;                              // G: the sum of the recorded grants
  int64_t bytes = 0;                                    // the sum of QuotaClientCost
  // The latest expiry of any client: the keys' own expiry follows it.
  int64_t MaxExpiry() const { return by_expiry.empty() ? 0 : by_expiry.rbegin()->first; }
  bool empty() const { return clients.empty(); }
};

// The bucket after the call: this client's grant, the recorded clients' total demand,
// their number and the sum of their grants (a released or refused client is not among
// them); full: a new client refused because it does not fit the budget.
struct QuotaShareReply {
  int64_t grant_milli = 0;
  int64_t total_demand_milli = 0;
  int64_t clients = 0;
  int64_t assigned_milli = 0;
  bool full = false;
  bool operator==(const QuotaShareReply&) const = default;
};

// InvalidArgument naming the first argument out of range (the script checks the same).
Status ValidateQuotaShareArgs(const QuotaShareArgs& args);

// The twin of quota_shares.lua: folds out clients whose hold ran out, then releases,
// refuses or grants.
// Precondition: ValidateQuotaShareArgs(args).ok().
QuotaShareReply QuotaShareStep(QuotaShareState& state, const QuotaShareArgs& args, int64_t now_ms);

}  // namespace sluice::internal
