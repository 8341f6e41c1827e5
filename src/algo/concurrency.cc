#include "algo/concurrency.h"

#include "core/numbers.h"

#include <algorithm>

namespace sluice::internal {

std::string LeaseMember(int64_t now_ms, const std::string& token) {
  return std::to_string(now_ms) + ":" + token;
}

int64_t LeaseSetState::LeaseMaxExpiry() const {
  int64_t latest = 0;
  for (const auto& [member, expires] : members) latest = std::max(latest, expires);
  return latest;
}

int64_t LeaseSetState::MaxExpiry() const {
  return std::max(LeaseMaxExpiry(), queue_expires_at_ms);
}

namespace {

// Drops expired tickets (expiry <= now); returns the live ones' count.
int64_t LiveTickets(LeaseSetState& state, int64_t now_ms) {
  std::erase_if(state.tickets,
                [now_ms](const auto& t) { return t.second.expires_at_ms <= now_ms; });
  if (state.tickets.empty()) state.queue_expires_at_ms = 0;
  return static_cast<int64_t>(state.tickets.size());
}

// The tickets ahead of `token`'s in the queue (arrival, then token), or nullopt when it
// holds none.
std::optional<int64_t> TicketRank(const LeaseSetState& state, const std::string& token) {
  auto it = state.tickets.find(token);
  if (it == state.tickets.end()) return std::nullopt;
  int64_t ahead = 0;
  for (const auto& [other, ticket] : state.tickets) {
    if (ticket.arrival < it->second.arrival ||
        (ticket.arrival == it->second.arrival && other < token)) {
      ++ahead;
    }
  }
  return ahead;
}

// The earliest live lease's expiry, 0 when none (call after pruning).
int64_t EarliestExpiry(const LeaseSetState& state) {
  int64_t earliest = 0;
  for (const auto& [member, expires] : state.members) {
    earliest = earliest == 0 ? expires : std::min(earliest, expires);
  }
  return earliest;
}

void DropTicket(LeaseSetState& state, const std::string& token) {
  state.tickets.erase(token);
  if (state.tickets.empty()) state.queue_expires_at_ms = 0;
}

LeaseReply Wait(LeaseSetState& state, const LeaseArgs& args, int64_t now_ms) {
  LeaseReply reply;
  reply.now_ms = now_ms;
  std::erase_if(state.members, [now_ms](const auto& m) { return m.second <= now_ms; });
  const auto count = static_cast<int64_t>(state.members.size());
  const int64_t waiting = LiveTickets(state, now_ms);
  std::optional<int64_t> rank = TicketRank(state, args.token);
  if (rank.value_or(waiting) < args.limit - count) {
    DropTicket(state, args.token);
    const int64_t expires = now_ms + args.ttl_ms;
    state.members[LeaseMember(now_ms, args.token)] = expires;
    reply.code = 1;
    reply.count = count + 1;
    reply.expires_at_ms = expires;
    return reply;
  }
  reply.expires_at_ms = EarliestExpiry(state);
  if (!rank) {
    if (waiting >= args.max_waiters) {
      reply.code = 3;
      reply.count = waiting;
      return reply;
    }
    int64_t last = 0;
    for (const auto& [other, ticket] : state.tickets) last = std::max(last, ticket.arrival);
    state.tickets[args.token].arrival = std::max(now_ms * 1024, last + 1);
    rank = waiting;
  }
  state.tickets[args.token].expires_at_ms = now_ms + args.ticket_ttl_ms;
  state.queue_expires_at_ms = std::max(state.queue_expires_at_ms, now_ms + args.ticket_ttl_ms);
  reply.code = 2;
  reply.count = *rank;
  return reply;
}

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
      // Waiters first: refused while the free slots are theirs.
      if (count < args.limit && count + LiveTickets(state, now_ms) >= args.limit) {
        reply.count = count;
        reply.expires_at_ms = EarliestExpiry(state);
        return reply;
      }
      if (count < args.limit) {
        const int64_t expires = now_ms + args.ttl_ms;
        state.members[LeaseMember(now_ms, args.token)] = expires;
        reply.code = 1;
        reply.count = count + 1;
        reply.expires_at_ms = expires;
        return reply;
      }
      reply.count = count;
      reply.expires_at_ms = EarliestExpiry(state);
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
    case LeaseOp::kWait: return Wait(state, args, now_ms);
    case LeaseOp::kLeave:
      DropTicket(state, args.token);
      reply.code = 1;
      reply.count = LiveTickets(state, now_ms);
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
