#include "algo/sliding_log.h"

#include "core/numbers.h"

#include <algorithm>

namespace sluice::internal {

namespace {

// Logs `cost` units admitted now at the end of the (pruned) log; returns the entry's time.
int64_t Append(std::optional<SlidingLogState>& state, int64_t cost, int64_t now) {
  int64_t at = now;
  int64_t start = 0;
  if (state) {
    std::deque<SlidingLogEntry>& log = state->entries;
    at = std::max(now, log.back().at_ms);  // a clock that steps back cannot reorder the log
    start = log.back().end();
    if (start + cost > kSlidingLogRebaseAbove) {
      const int64_t base = log.front().start;
      for (SlidingLogEntry& e : log) e.start -= base;
      start -= base;
    }
  } else {
    state.emplace();
  }
  state->entries.push_back({at, start, cost});
  return at;
}

}  // namespace

AlgoReply SlidingLogStep(std::optional<SlidingLogState>& state, const AlgoArgs& a, int64_t now,
                         int64_t& expires_at_ms) {
  if (a.op == Op::kReset) {
    state.reset();
    return {1, a.limit, 0, 0};
  }
  const int64_t window = a.window_ms;
  const int64_t horizon = now - window;  // entries at or before it have left the window
  // A log whose newest entry has left the window is deleted; entries that have left it
  // are pruned: stale state goes on the call that reads it.
  if (state && (state->entries.empty() || state->entries.back().at_ms <= horizon)) state.reset();
  if (state) {
    while (state->entries.front().at_ms <= horizon) state->entries.pop_front();
  }
  const bool live = state.has_value();

  if (a.op == Op::kRefund) {
    if (!live) return {1, a.limit, 0, 0};
    std::deque<SlidingLogEntry>& log = state->entries;
    const int64_t target = log.back().end() - a.cost;  // units from `target` on go back
    if (target <= log.front().start) {
      state.reset();
      return {1, a.limit, 0, 0};
    }
    log.erase(std::partition_point(log.begin() + 1, log.end(),
                                   [target](const SlidingLogEntry& e) { return e.start < target; }),
              log.end());
    SlidingLogEntry& kept = log.back();
    if (kept.end() > target) kept.cost = target - kept.start;
    expires_at_ms = kept.at_ms + window;
    return {1, a.limit - (target - log.front().start), kept.at_ms + window - now, 0};
  }

  const int64_t used = live ? state->entries.back().end() - state->entries.front().start : 0;
  const int64_t reset_at = live ? state->entries.back().at_ms + window : 0;
  if (a.op == Op::kDebit) {
    // Logged as an admission whether it fits or not, `used` never above twice the limit;
    // then answered as a peek of one unit.
    const int64_t add = std::min(a.cost, 2 * a.limit - used);
    if (add > 0) Append(state, add, now);
    AlgoArgs peek = a;
    peek.op = Op::kPeek;
    peek.cost = 1;
    return SlidingLogStep(state, peek, now, expires_at_ms);
  }
  if (a.cost > a.limit) {
    if (!live) return {2, a.limit, 0, 0};
    expires_at_ms = reset_at;
    return {2, a.limit - used, reset_at - now, reset_at - now};
  }

  if (used + a.cost <= a.limit) {
    if (a.op == Op::kPeek) {
      if (!live) return {1, a.limit, 0, 0};
      expires_at_ms = reset_at;
      return {1, a.limit - used, reset_at - now, 0};
    }
    const int64_t at = Append(state, a.cost, now);
    expires_at_ms = at + window;
    return {1, a.limit - used - a.cost, at + window - now, 0};
  }

  // Refused (live: cost <= limit < used + cost). The request fits once the oldest entries
  // holding `need` units have left: up to the first entry ending at or past `target`.
  const std::deque<SlidingLogEntry>& log = state->entries;
  const int64_t target = log.front().start + (used + a.cost - a.limit);
  const auto last_to_leave = std::partition_point(
      log.begin(), log.end(), [target](const SlidingLogEntry& e) { return e.end() < target; });
  expires_at_ms = reset_at;
  return {0, a.limit - used, reset_at - now, last_to_leave->at_ms + window - now};
}

std::optional<SlidingLogEntry> DecodeSlidingLogMember(std::string_view member, int64_t score_ms) {
  if (member.empty() || member[0] < 'a' || member[0] > 'p') return std::nullopt;
  const std::size_t digits = static_cast<std::size_t>(member[0] - 'a' + 1);
  if (member.size() < 1 + digits) return std::nullopt;
  const auto start = ParseDecimal(member.substr(1, digits));
  if (!start || *start < 0) return std::nullopt;
  int64_t cost = 1;
  if (member.size() > 1 + digits) {
    if (member[1 + digits] != ':') return std::nullopt;
    const auto c = ParseDecimal(member.substr(2 + digits));
    if (!c || *c < 1) return std::nullopt;
    cost = *c;
  }
  return SlidingLogEntry{score_ms, *start, cost};
}

}  // namespace sluice::internal
