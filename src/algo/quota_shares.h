// Quota shares (sluice/quota.h): one rate shared among the clients of a bucket in
// proportion to their demand, the sum of the live grants never above the rate. The script
// contract of src/algo/quota_shares.lua and its in-memory twin: the twin takes the same
// arguments and returns the same reply on an explicit state; the differential test holds
// both to identical replies and identical stored state.
//
// Rates are integers in milli-requests per second. Every sum the rule takes is of at most
// kMaxQuotaClients values of at most kMaxQuotaRateMilli, so it stays below 2^53 and is
// exact in a double, whatever order the script's hash and the twin's map add in; the rule's
// products and quotients are taken in doubles in the same order on both sides, so the
// floored grant is bit-identical.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

#include "sluice/status.h"

namespace sluice::internal {

// Live clients of one bucket; a new client beyond them gets 0 and is not recorded.
inline constexpr int64_t kMaxQuotaClients = 1024;
// The largest rate and demand: 10^9 requests per second.
inline constexpr int64_t kMaxQuotaRateMilli = 1'000'000'000'000;
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
};

// What the script stores per client (the hash field's value "expires demand grant").
struct QuotaClient {
  int64_t expires_ms = 0;  // live while now < expires_ms
  int64_t demand_milli = 0;
  int64_t grant_milli = 0;
  bool operator==(const QuotaClient&) const = default;
};

// One bucket's clients: client -> its entry.
struct QuotaShareState {
  std::map<std::string, QuotaClient> clients;
  // The latest expiry of any client: the key's own expiry follows it.
  int64_t MaxExpiry() const;
  bool empty() const { return clients.empty(); }
};

// The bucket after the call: this client's grant, the live clients' total demand, their
// number and the sum of their grants (a released or refused client is not among them).
struct QuotaShareReply {
  int64_t grant_milli = 0;
  int64_t total_demand_milli = 0;
  int64_t clients = 0;
  int64_t assigned_milli = 0;
  bool operator==(const QuotaShareReply&) const = default;
};

// InvalidArgument naming the first argument out of range (the script checks the same).
Status ValidateQuotaShareArgs(const QuotaShareArgs& args);

// The twin of quota_shares.lua: drops expired clients, then releases, refuses or grants.
// Precondition: ValidateQuotaShareArgs(args).ok().
QuotaShareReply QuotaShareStep(QuotaShareState& state, const QuotaShareArgs& args, int64_t now_ms);

}  // namespace sluice::internal
