#include "algo/quota_shares.h"

#include <algorithm>
#include <cmath>

namespace sluice::internal {

int64_t QuotaShareState::MaxExpiry() const {
  int64_t latest = 0;
  for (const auto& [client, entry] : clients) latest = std::max(latest, entry.expires_ms);
  return latest;
}

namespace {

Status OutOfRange(const char* what, int64_t value, int64_t low, int64_t high) {
  return InvalidArgumentError(std::string(what) + " must be between " + std::to_string(low) +
                              " and " + std::to_string(high) + ", got " + std::to_string(value));
}

}  // namespace

Status ValidateQuotaShareArgs(const QuotaShareArgs& args) {
  if (args.client.empty() || args.client.size() > kMaxQuotaClientBytes) {
    return InvalidArgumentError("client must be 1-" + std::to_string(kMaxQuotaClientBytes) +
                                " bytes, got " + std::to_string(args.client.size()));
  }
  if (args.release) return Status::Ok();
  if (args.demand_milli < 0 || args.demand_milli > kMaxQuotaRateMilli) {
    return OutOfRange("demand_milli", args.demand_milli, 0, kMaxQuotaRateMilli);
  }
  if (args.rate_milli < 1 || args.rate_milli > kMaxQuotaRateMilli) {
    return OutOfRange("rate_milli", args.rate_milli, 1, kMaxQuotaRateMilli);
  }
  if (args.hold_ms < 1 || args.hold_ms > kMaxQuotaHoldMs) {
    return OutOfRange("hold (ms)", args.hold_ms, 1, kMaxQuotaHoldMs);
  }
  if (args.headroom_percent < kMinQuotaHeadroomPercent ||
      args.headroom_percent > kMaxQuotaHeadroomPercent) {
    return OutOfRange("headroom_percent", args.headroom_percent, kMinQuotaHeadroomPercent,
                      kMaxQuotaHeadroomPercent);
  }
  return Status::Ok();
}

QuotaShareReply QuotaShareStep(QuotaShareState& state, const QuotaShareArgs& args, int64_t now_ms) {
  std::erase_if(state.clients, [now_ms](const auto& c) { return c.second.expires_ms <= now_ms; });
  // The others' sums: exact integers (see the header), as the script's doubles are.
  int64_t demand_others = 0, grants_others = 0;
  for (const auto& [client, entry] : state.clients) {
    if (client == args.client) continue;
    demand_others += entry.demand_milli;
    grants_others += entry.grant_milli;
  }
  const auto live = static_cast<int64_t>(state.clients.size());
  const bool known = state.clients.count(args.client) > 0;
  const int64_t others = live - (known ? 1 : 0);
  if (args.release) {
    state.clients.erase(args.client);
    return {0, demand_others, others, grants_others};
  }
  if (!known && live >= kMaxQuotaClients) return {0, demand_others, live, grants_others};
  // The rule, in the script's order of double operations.
  const int64_t total = demand_others + args.demand_milli;
  const auto rate = static_cast<double>(args.rate_milli);
  const auto demand = static_cast<double>(args.demand_milli);
  double want = total > 0 ? rate * demand / static_cast<double>(total) : 0.0;
  if (total < args.rate_milli) {
    want = std::min(want, static_cast<double>(args.headroom_percent) * demand / 100.0);
  }
  const double room = std::max(0.0, static_cast<double>(args.rate_milli - grants_others));
  const auto grant = static_cast<int64_t>(std::floor(std::min(want, room)));
  state.clients[args.client] = {now_ms + args.hold_ms, args.demand_milli, grant};
  return {grant, total, others + 1, grants_others + grant};
}

}  // namespace sluice::internal
