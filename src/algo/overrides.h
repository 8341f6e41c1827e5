// Runtime overrides (sluice/admin.h, SetOverride): the script contract of
// src/algo/overrides.lua, the codec of the values it stores, and its in-memory twin (the
// embedded store's). The twin takes the same arguments and gives the same replies on an
// explicit state.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/status.h"

namespace sluice::internal {

// The bounds of SetOverride, kept by the script and the twin too.
inline constexpr int64_t kMaxOverridesPerLimiter = 1000;
inline constexpr std::chrono::milliseconds kMaxOverrideLifetime{int64_t{30} * 24 * 3600 * 1000};
// A hash keeps its change counter this long after a change, when no entry outlives it.
inline constexpr int64_t kOverrideCounterKeepMs = 10'000;
// Bytes of an override's id, actor and reason (what the copy of every client holds).
inline constexpr std::size_t kMaxOverrideIdBytes = 512;
inline constexpr std::size_t kMaxOverrideActorBytes = 256;
inline constexpr std::size_t kMaxOverrideReasonBytes = 1024;

// One entry of a limiter's hash.
struct OverrideEntry {
  std::string id;
  int64_t limit = 0;
  int64_t window_ms = 0;  // 0: the limiter's own window
  int64_t expires_at_ms = 0;
  int64_t set_at_ms = 0;
  std::string actor;
  std::string reason;
};

// "<limit> <window ms> <expires at ms> <set at ms> <#actor> <actor><reason>" (overrides.lua).
std::string EncodeOverrideValue(const OverrideEntry& e);
// The inverse; nullopt for a value overrides.lua never writes.
std::optional<OverrideEntry> DecodeOverrideValue(std::string_view id, std::string_view value);

enum class OverrideOp { kSet, kClear, kRead };

// What a set or clear answers (overrides.lua's reply, decoded).
struct OverrideChange {
  bool done = false;  // set: stored; clear: the id had a live override, now removed
  int64_t now_ms = 0;
  int64_t live = 0;  // a refused set: the live entries the hash holds
  std::optional<OverrideEntry> before;
  std::optional<OverrideEntry> after;
};

// One hash as a read found it.
struct OverrideHash {
  int64_t counter = 0;   // 0: no hash
  bool changed = false;  // the counter differs from the caller's: `entries` is the hash's
  std::vector<OverrideEntry> entries;
};

struct OverrideRead {
  int64_t now_ms = 0;
  std::vector<OverrideHash> hashes;  // one per key, in order
};

// The twin's state of one hash.
struct OverrideHashState {
  int64_t counter = 0;
  int64_t expires_at_ms = 0;  // the hash's own expiry (with the model clock's grace)
  std::map<std::string, OverrideEntry> entries;
};

// The twin of overrides.lua's set and clear on `state` at `now_ms` (grace: 60 s under a
// model clock, as the script gives). `entry`: id, limit, window_ms, actor and reason of a
// set (its lifetime in `lifetime_ms`); only the id for a clear. InvalidArgument as the
// script's error replies.
StatusOr<OverrideChange> OverrideStep(OverrideHashState& state, OverrideOp op,
                                      const OverrideEntry& entry, int64_t lifetime_ms, int64_t most,
                                      int64_t now_ms, int64_t grace_ms);
// The twin of a read of one hash: `known` is the caller's counter (-1: none).
OverrideHash OverrideReadOne(const OverrideHashState& state, int64_t known);

}  // namespace sluice::internal
