#include "algo/concurrency.h"

#include "core/numbers.h"

#include <algorithm>

namespace sluice::internal {

std::string LeaseMember(int64_t now_ms, const std::string& token) {
  return std::to_string(now_ms) + ":" + token;
}

int64_t LeaseSetState::MaxExpiry() const {
  int64_t latest = 0;
  for (const auto& [member, expires] : members) latest = std::max(latest, expires);
  return latest;
}

namespace {

// Live leases ordered as ZRANGE orders them: by expiry, then member.
std::vector<LeaseRow> LiveRows(const LeaseSetState& state, int64_t now_ms) {
  std::vector<LeaseRow> rows;
  for (const auto& [member, expires] : state.members) {
    if (expires > now_ms) rows.push_back({member, expires});
  }
  std::sort(rows.begin(), rows.end(), [](const LeaseRow& a, const LeaseRow& b) {
    return a.expires_at_ms != b.expires_at_ms ? a.expires_at_ms < b.expires_at_ms
                                              : a.member < b.member;
  });
  return rows;
}

}  // namespace

LeaseReply LeaseStep(LeaseSetState& state, const LeaseArgs& args, int64_t now_ms) {
  LeaseReply reply;
  reply.now_ms = now_ms;
  switch (args.op) {
    case LeaseOp::kAcquire: {
      std::erase_if(state.members, [now_ms](const auto& m) { return m.second <= now_ms; });
      const auto count = static_cast<int64_t>(state.members.size());
      if (count < args.limit) {
        const int64_t expires = now_ms + args.ttl_ms;
        state.members[LeaseMember(now_ms, args.token)] = expires;
        reply.code = 1;
        reply.count = count + 1;
        reply.expires_at_ms = expires;
        return reply;
      }
      int64_t earliest = 0;
      for (const auto& [member, expires] : state.members) {
        earliest = earliest == 0 ? expires : std::min(earliest, expires);
      }
      reply.count = count;
      reply.expires_at_ms = earliest;
      return reply;
    }
    case LeaseOp::kHeartbeat: {
      auto it = state.members.find(args.token);
      if (it == state.members.end()) return reply;
      if (it->second <= now_ms) {
        state.members.erase(it);
        return reply;
      }
      it->second = std::max(it->second, now_ms + args.ttl_ms);
      reply.code = 1;
      reply.expires_at_ms = it->second;
      return reply;
    }
    case LeaseOp::kRelease:
      state.members.erase(args.token);
      reply.code = 1;
      return reply;
    case LeaseOp::kReleaseAll:
      reply.code = 1;
      reply.count = static_cast<int64_t>(
          std::count_if(state.members.begin(), state.members.end(),
                        [now_ms](const auto& m) { return m.second > now_ms; }));
      state.members.clear();
      return reply;
    case LeaseOp::kList:
      reply.code = 1;
      reply.rows = LiveRows(state, now_ms);
      return reply;
  }
  return reply;
}

std::optional<int64_t> LeaseAcquiredAt(std::string_view member) {
  const auto sep = member.find(':');
  if (sep == std::string_view::npos || sep + 1 == member.size()) return std::nullopt;
  return ParseDecimal(member.substr(0, sep));
}

}  // namespace sluice::internal
