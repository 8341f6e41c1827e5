// The twin of src/algo/overrides.lua and the codec of its values.
#include "algo/overrides.h"

#include <charconv>

namespace sluice::internal {
namespace {

// Reads "<digits> " at `at`; false when there is none.
bool ReadNumber(std::string_view s, std::size_t& at, int64_t& out) {
  const char* begin = s.data() + at;
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(begin, end, out);
  if (ec != std::errc() || ptr == begin || ptr == end || *ptr != ' ' || out < 0) return false;
  at = static_cast<std::size_t>(ptr - s.data()) + 1;
  return true;
}

}  // namespace

std::string EncodeOverrideValue(const OverrideEntry& e) {
  std::string out = std::to_string(e.limit) + ' ' + std::to_string(e.window_ms) + ' ' +
                    std::to_string(e.expires_at_ms) + ' ' + std::to_string(e.set_at_ms) + ' ' +
                    std::to_string(e.actor.size()) + ' ';
  out += e.actor;
  out += e.reason;
  return out;
}

std::optional<OverrideEntry> DecodeOverrideValue(std::string_view id, std::string_view value) {
  OverrideEntry e;
  e.id = std::string(id);
  std::size_t at = 0;
  int64_t actor_bytes = 0;
  if (!ReadNumber(value, at, e.limit) || !ReadNumber(value, at, e.window_ms) ||
      !ReadNumber(value, at, e.expires_at_ms) || !ReadNumber(value, at, e.set_at_ms)) {
    return std::nullopt;
  }
  // The actor's length: the last number, which the actor's bytes follow (it may be empty).
  const char* begin = value.data() + at;
  auto [ptr, ec] = std::from_chars(begin, value.data() + value.size(), actor_bytes);
  if (ec != std::errc() || ptr == begin || ptr == value.data() + value.size() || *ptr != ' ' ||
      actor_bytes < 0) {
    return std::nullopt;
  }
  at = static_cast<std::size_t>(ptr - value.data()) + 1;
  if (static_cast<std::size_t>(actor_bytes) > value.size() - at) return std::nullopt;
  e.actor = std::string(value.substr(at, static_cast<std::size_t>(actor_bytes)));
  e.reason = std::string(value.substr(at + static_cast<std::size_t>(actor_bytes)));
  return e;
}

StatusOr<OverrideChange> OverrideStep(OverrideHashState& state, OverrideOp op,
                                      const OverrideEntry& entry, int64_t lifetime_ms, int64_t most,
                                      int64_t now_ms, int64_t grace_ms) {
  if (entry.id.empty()) return InvalidArgumentError("sluice overrides: empty id");
  if (state.expires_at_ms <= now_ms) state = OverrideHashState{};
  // prune(): expired entries go; the others but the id's are counted.
  int64_t live = 0, longest = 0;
  for (auto it = state.entries.begin(); it != state.entries.end();) {
    if (it->second.expires_at_ms <= now_ms) {
      it = state.entries.erase(it);
      continue;
    }
    if (it->first != entry.id) {
      ++live;
      longest = std::max(longest, it->second.expires_at_ms);
    }
    ++it;
  }
  OverrideChange change;
  change.now_ms = now_ms;
  const auto old = state.entries.find(entry.id);
  if (old != state.entries.end()) change.before = old->second;
  // changed(): the counter never repeats; the hash outlives its longest entry and the
  // counter's keeping time.
  auto changed = [&] {
    state.counter = std::max(now_ms, state.counter + 1);
    state.expires_at_ms = std::max(now_ms + kOverrideCounterKeepMs, longest) + grace_ms;
  };
  if (op == OverrideOp::kClear) {
    if (!change.before) return change;
    state.entries.erase(old);
    changed();
    change.done = true;
    return change;
  }
  if (entry.limit < 0 || entry.limit > (int64_t{1} << 40)) {
    return InvalidArgumentError("sluice overrides: bad limit");
  }
  if (entry.window_ms < 0 || entry.window_ms > int64_t{366} * 24 * 3600 * 1000) {
    return InvalidArgumentError("sluice overrides: bad window");
  }
  if (lifetime_ms < 1 || lifetime_ms > kMaxOverrideLifetime.count()) {
    return InvalidArgumentError("sluice overrides: bad lifetime");
  }
  if (!change.before && live >= most) {
    change.live = live;
    return change;
  }
  OverrideEntry stored = entry;
  stored.expires_at_ms = now_ms + lifetime_ms;
  stored.set_at_ms = now_ms;
  state.entries[entry.id] = stored;
  longest = std::max(longest, stored.expires_at_ms);
  changed();
  change.done = true;
  change.after = std::move(stored);
  return change;
}

OverrideHash OverrideReadOne(const OverrideHashState& state, int64_t known) {
  OverrideHash hash;
  hash.counter = state.counter;
  if (hash.counter == known) return hash;
  hash.changed = true;
  hash.entries.reserve(state.entries.size());
  for (const auto& [id, e] : state.entries) hash.entries.push_back(e);
  return hash;
}

}  // namespace sluice::internal
