#include "algo/quota_shares.h"

#include <algorithm>
#include <cmath>

namespace sluice::internal {

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
  if (args.budget_bytes < 1 || args.budget_bytes > kMaxQuotaBucketBytes) {
    return OutOfRange("budget (bytes)", args.budget_bytes, 1, kMaxQuotaBucketBytes);
  }
  if (args.headroom_percent < kMinQuotaHeadroomPercent ||
      args.headroom_percent > kMaxQuotaHeadroomPercent) {
    return OutOfRange("headroom_percent", args.headroom_percent, kMinQuotaHeadroomPercent,
                      kMaxQuotaHeadroomPercent);
  }
  return Status::Ok();
}

namespace {

// Folds out at most `limit` clients whose hold ran out, earliest first (the script's
// ZRANGEBYSCORE order), taking them off the sums.
void Fold(QuotaShareState& state, int64_t now_ms, int limit) {
  for (int i = 0; i < limit && !state.by_expiry.empty(); ++i) {
    auto first = state.by_expiry.begin();
    if (first->first > now_ms) return;
    auto it = state.clients.find(first->second);
    state.demand_milli -= it->second.demand_milli;
    state.grant_milli -= it->second.grant_milli;
    state.bytes -= QuotaClientCost(it->first);
    state.clients.erase(it);
    state.by_expiry.erase(first);
  }
}

}  // namespace

QuotaShareReply QuotaShareStep(QuotaShareState& state, const QuotaShareArgs& args, int64_t now_ms) {
  Fold(state, now_ms, kQuotaFold);
  auto mine = state.clients.find(args.client);
  const bool known = mine != state.clients.end();
  const QuotaClient old = known ? mine->second : QuotaClient{};
  auto forget = [&] {
    state.by_expiry.erase({old.expires_ms, args.client});
    state.clients.erase(mine);
  };
  if (args.release) {
    if (known) {
      forget();
      state.demand_milli -= old.demand_milli;
      state.grant_milli -= old.grant_milli;
      state.bytes -= QuotaClientCost(args.client);
    }
    return {0, state.demand_milli, static_cast<int64_t>(state.clients.size()), state.grant_milli};
  }
  const int64_t cost = QuotaClientCost(args.client);
  if (!known && state.bytes + cost > args.budget_bytes) {
    return {0, state.demand_milli, static_cast<int64_t>(state.clients.size()), state.grant_milli,
            true};
  }
  // The rule, in the script's order of double operations.
  const int64_t demand = std::min(args.demand_milli, kMaxQuotaRecordedDemandMilli);
  const int64_t share = args.rate_milli - args.rate_milli / kQuotaReservePart;
  const int64_t demand_others = state.demand_milli - old.demand_milli;
  const int64_t grants_others = state.grant_milli - old.grant_milli;
  const int64_t total = demand_others + demand;
  const auto d = static_cast<double>(demand);
  double want = total > 0 ? static_cast<double>(share) * d / static_cast<double>(total) : 0.0;
  if (total < share) {
    want = std::min(want, static_cast<double>(args.headroom_percent) * d / 100.0);
  }
  // A client that holds nothing may take the reserve; the others stop short of it, but
  // keep at least half of what they held while the room allows.
  int64_t room = args.rate_milli - grants_others;
  if (old.grant_milli > 0) {
    room = std::max(share - grants_others, std::min(room, old.grant_milli / 2));
  }
  const auto grant =
      static_cast<int64_t>(std::floor(std::min(want, std::max(0.0, static_cast<double>(room)))));
  if (known) {
    forget();
  } else {
    state.bytes += cost;
  }
  const int64_t expires = now_ms + args.hold_ms;
  state.clients[args.client] = {expires, demand, grant};
  state.by_expiry.insert({expires, args.client});
  state.demand_milli = total;
  state.grant_milli = grants_others + grant;
  return {grant, total, static_cast<int64_t>(state.clients.size()), state.grant_milli};
}

}  // namespace sluice::internal
