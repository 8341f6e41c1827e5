#include "admin/key_state.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "algo/concurrency.h"
#include "algo/fixed_window.h"
#include "algo/gcra.h"
#include "algo/sliding_log.h"
#include "algo/sliding_window.h"
#include "algo/token_bucket.h"
#include "core/keys.h"
#include "core/numbers.h"
#include "sluice/limits.h"

namespace sluice::internal {
namespace {

void Add(KeyState& s, std::string name, int64_t value) {
  s.fields.push_back({std::move(name), value});
}

// a + b, clamped to int64's range (values read from Redis may be anything).
int64_t SaturatingAdd(int64_t a, int64_t b) {
  int64_t sum;
  if (__builtin_add_overflow(a, b, &sum)) return b > 0 ? INT64_MAX : INT64_MIN;
  return sum;
}

// v2 (`fw2`): the count, the window's end being the key's expiry (`s.ttl_ms`, read with
// the value). A key without an expiry has a count and no known end: the next call gives
// it the end of a window opened then (fixed_window.lua).
void DescribeFixedWindowV2(std::string_view v, int64_t now, KeyState& s) {
  const auto count = DecodeFixedWindowCount(v);
  if (!count) {
    s.problem = "value is not an integer count";
    return;
  }
  Add(s, "count", *count);
  s.used_unit = "units in the window";
  if (s.ttl_ms < 0) {
    s.used = *count;
    return;
  }
  Add(s, "window_end_ms", now + s.ttl_ms);
  Add(s, "window_ends_in_ms", s.ttl_ms);
  s.used = *count;
  s.ends_at_ms = now + s.ttl_ms;
}

// v1 (`fw`, written before v2): "<count>:<window end ms>"; such keys expire on their own.
void DescribeFixedWindow(std::string_view v, int64_t now, KeyState& s) {
  const auto state = DecodeFixedWindowValue(v);
  if (!state) {
    s.problem = "value is not \"<count>:<window end ms>\"";
    return;
  }
  Add(s, "count", state->count);
  Add(s, "window_end_ms", state->ends_ms);
  Add(s, "window_ends_in_ms", state->ends_ms - now);
  s.used = state->ends_ms > now ? state->count : 0;
  s.used_unit = "units in the window";
  s.ends_at_ms = state->ends_ms;
}

void DescribeSlidingWindow(std::string_view v, KeyState& s) {
  const auto state = DecodeSlidingWindowValue(v);
  if (!state) {
    s.problem = "value is not 26 bytes (start, current, previous, window) nor 20 (no window)";
    return;
  }
  Add(s, "window_start_ms", state->start_ms);
  Add(s, "current", state->current);
  Add(s, "previous", state->previous);
  if (v.size() == 26) Add(s, "window_ms", state->window_ms);
  s.used = state->current + state->previous;
  s.used_unit = "units in this and the previous window";
}

void DescribeTokenBucket(std::string_view v, int64_t now, KeyState& s) {
  if (v.size() != 32) {
    s.problem = "value is not 32 bytes (tokens, fraction, at, full_in)";
    return;
  }
  const auto state = DecodeTokenBucketValue(v);
  if (!state) {
    s.problem = "value holds a field that is not an integer";
    return;
  }
  const int64_t full_at = state->at_ms + state->full_in_ms;
  // A negative fraction marks a deficit of more than the capacity: a debit's debt.
  const bool debt = state->fraction < 0;
  Add(s, "missing_tokens", state->tokens);
  Add(s, "missing_fraction_per_window", debt ? -1 - state->fraction : state->fraction);
  Add(s, "in_debt", debt ? 1 : 0);
  Add(s, "written_at_ms", state->at_ms);
  Add(s, "full_at_ms", full_at);
  Add(s, "full_in_ms", std::max<int64_t>(0, full_at - now));
  s.used = full_at > now ? state->tokens : 0;
  s.used_unit = "tokens missing when written";
  s.ends_at_ms = full_at;
}

void DescribeGcra(std::string_view v, int64_t now, KeyState& s) {
  const auto state = DecodeGcraValue(v);
  if (!state) {
    s.problem =
        "value is not 32 bytes (TAT, fraction, refill, window), 16 bytes (TAT, "
        "fraction) or a decimal TAT";
    return;
  }
  // A negative fraction (32-byte form) marks a TAT missing more than the capacity: a
  // debit's debt.
  const bool debt = v.size() == 32 && state->tat_fraction < 0;
  const int64_t fraction = debt ? -1 - state->tat_fraction : state->tat_fraction;
  const int64_t full_at = state->tat_ms + (fraction > 0 ? 1 : 0);
  Add(s, "tat_ms", state->tat_ms);
  Add(s, "tat_fraction", fraction);
  if (v.size() == 32) Add(s, "in_debt", debt ? 1 : 0);
  if (v.size() == 32) {
    Add(s, "refill", state->rate);
    Add(s, "window_ms", state->window_ms);
  }
  Add(s, "full_in_ms", std::max<int64_t>(0, full_at - now));
  s.used = std::max<int64_t>(0, full_at - now);
  s.used_unit = "ms until full";
  s.ends_at_ms = full_at;
}

// ZRANGE … WITHSCORES (RESP2: member, score, member, score …).
bool Pairs(const Reply& r, std::vector<std::pair<std::string, int64_t>>& out) {
  if (r.type != Reply::Type::kArray || r.elements.size() % 2 != 0) return false;
  for (size_t i = 0; i < r.elements.size(); i += 2) {
    auto score = ParseScore(r.elements[i + 1]);
    if (!score || r.elements[i].type != Reply::Type::kString) return false;
    out.emplace_back(r.elements[i].str, *score);
  }
  return true;
}

}  // namespace

std::optional<int64_t> ParseScore(const Reply& r) {
  if (r.type != Reply::Type::kString) return std::nullopt;
  if (auto v = ParseDecimal(r.str)) return v;
  char* end = nullptr;
  const double d = std::strtod(r.str.c_str(), &end);
  if (end == r.str.c_str()) return std::nullopt;
  return ExactInteger(std::floor(d));
}

namespace {

// A block (`<algorithm suffix>.blk`, src/algo/block.lua): the block's end, on the Redis
// clock; the id is refused until then.
void DescribeBlock(std::string_view v, int64_t now, KeyState& s) {
  const auto ends = ParseDecimal(v);
  if (!ends) {
    s.problem = "value is not a block's end (an integer ms)";
    return;
  }
  Add(s, "blocked_until_ms", *ends);
  Add(s, "block_ends_in_ms", std::max<int64_t>(0, *ends - now));
  s.ends_at_ms = *ends;
}

// A reservation (src/algo/reservation.lua): "r<estimate>:<window end>:<expires at>" while
// held, "s<actual>:<expires at>" once settled; it counts until `expires at` (Redis clock).
void DescribeReservation(std::string_view v, int64_t now, KeyState& s) {
  const bool held = v.starts_with('r');
  if (v.empty() || (!held && v.front() != 's')) {
    s.problem = "value is not a reservation's";
    return;
  }
  v.remove_prefix(1);
  const size_t first = v.find(':'), last = v.rfind(':');
  const auto amount = ParseDecimal(v.substr(0, first));
  const auto ends =
      first == std::string_view::npos ? std::nullopt : ParseDecimal(v.substr(last + 1));
  if (!amount || !ends || (held && first == last)) {
    s.problem = "value is not a reservation's";
    return;
  }
  Add(s, held ? "estimate_held" : "actual_settled", *amount);
  Add(s, "counts_until_ms", *ends);
  Add(s, "ends_in_ms", std::max<int64_t>(0, *ends - now));
  s.ends_at_ms = *ends;
}

}  // namespace

void DescribeStringValue(std::string_view suffix, std::string_view value, int64_t now_ms,
                         KeyState& state) {
  if (suffix.ends_with(kReservationSuffix)) return DescribeReservation(value, now_ms, state);
  if (suffix.ends_with(kBlockSuffix)) DescribeBlock(value, now_ms, state);
  if (suffix == "fw2") DescribeFixedWindowV2(value, now_ms, state);
  if (suffix == "fw") DescribeFixedWindow(value, now_ms, state);
  if (suffix == "sw") DescribeSlidingWindow(value, state);
  if (suffix == "tb") DescribeTokenBucket(value, now_ms, state);
  if (suffix == "gcra") DescribeGcra(value, now_ms, state);
}

void DescribeSlidingLog(const Reply& oldest, const Reply& newest, KeyState& s) {
  std::vector<std::pair<std::string, int64_t>> first, last;
  std::optional<SlidingLogEntry> a, b;
  if (Pairs(oldest, first) && Pairs(newest, last) && first.size() == 1 && last.size() == 1) {
    a = DecodeSlidingLogMember(first[0].first, first[0].second);
    b = DecodeSlidingLogMember(last[0].first, last[0].second);
  }
  if (!a || !b) {
    s.problem = "members are not sliding-log entries";
    return;
  }
  Add(s, "entries", s.members);
  Add(s, "units", b->end() - a->start);
  Add(s, "oldest_ms", a->at_ms);
  Add(s, "newest_ms", b->at_ms);
  s.used = b->end() - a->start;
  s.used_unit = "units in the log";
}

void DescribeLeases(const Reply& range, const Reply& newest, int64_t now, KeyState& s) {
  std::vector<std::pair<std::string, int64_t>> members, last;
  if (!Pairs(range, members) || !Pairs(newest, last)) {
    s.problem = "ZRANGE returned an unexpected reply";
    return;
  }
  int64_t live = 0, stale = 0;
  for (auto& [member, score] : members) {
    LeaseInfo lease;
    lease.acquired_at_ms = LeaseAcquiredAt(member).value_or(-1);
    lease.id = member;
    lease.expires_at_ms = score;
    (score <= now ? stale : live) += 1;
    s.leases.push_back(std::move(lease));
  }
  // Past kMaxLeasesRead the rest have later expiries: all live when the last one read is,
  // else counted by ReadKeys with a ZCOUNT.
  if (!members.empty() && members.back().second > now) {
    live += s.members - static_cast<int64_t>(members.size());
  }
  Add(s, "leases", s.members);
  Add(s, "live", live);
  Add(s, "stale", stale);
  s.used = live;
  s.used_unit = "live leases";
  if (!last.empty()) s.ends_at_ms = last[0].second;
}

void DescribeLeaseHistory(const Reply& all, int64_t now_ms, KeyState& s) {
  if (all.type != Reply::Type::kArray) return;
  const int64_t this_minute = now_ms / 60000;
  std::map<int64_t, int64_t> by_minute;
  for (size_t i = 0; i + 1 < all.elements.size(); i += 2) {
    const std::string& v = all.elements[i + 1].str;
    const size_t colon = v.find(':');
    if (colon == std::string::npos) continue;
    const auto minute = ParseDecimal(std::string_view(v).substr(0, colon));
    const auto most = ParseDecimal(std::string_view(v).substr(colon + 1));
    if (!minute || !most || *minute > this_minute || *minute <= this_minute - 60) continue;
    by_minute[*minute] = *most;
  }
  int64_t highest = 0;
  for (const auto& [minute, most] : by_minute) {
    Add(s, "max_live_at_" + std::to_string(minute * 60000), most);
    highest = std::max(highest, most);
  }
  s.used = highest;
  s.used_unit = "most live leases in a minute";
}

std::optional<int64_t> StateEndsAt(std::string_view suffix, const Reply& value, int64_t now_ms,
                                   bool& is_bound) {
  is_bound = false;
  if (value.type != Reply::Type::kString) return std::nullopt;
  const int64_t longest = kMaxWindow.count();
  if (suffix == "cc") return ParseScore(value);
  if (suffix == "sl") {
    // The newest entry counts until it leaves a window no longer than kMaxWindow.
    const auto newest = ParseScore(value);
    if (!newest) return std::nullopt;
    is_bound = true;
    return SaturatingAdd(*newest, longest);
  }
  if (suffix == "sw") {
    // The counts of the window starting at `start` and of the one before it are used up
    // when the window after the current one ends: start + 2 windows — the window the
    // value records (26 bytes), else the longest a window can be.
    const auto state = DecodeSlidingWindowValue(value.str);
    if (!state) return std::nullopt;
    const int64_t window =
        state->window_ms >= 1 && state->window_ms <= longest ? state->window_ms : longest;
    is_bound = true;
    return SaturatingAdd(state->start_ms, 2 * window);
  }
  if (suffix == "fw2") {
    // The window's end was the key's expiry, now lost: the longest window bounds it (the
    // next call moves the end to that of a window opened then, never later).
    if (!DecodeFixedWindowCount(value.str)) return std::nullopt;
    is_bound = true;
    return SaturatingAdd(now_ms, longest);
  }
  KeyState state;  // fw, tb, gcra: the value says when it is over
  DescribeStringValue(suffix, value.str, now_ms, state);
  if (!state.problem.empty() || state.ends_at_ms < 0) return std::nullopt;
  return state.ends_at_ms;
}

}  // namespace sluice::internal
