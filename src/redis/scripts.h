// The Lua scripts, embedded at build time from src/algo/*.lua (each file is the only
// copy of its script). The order of AllScripts() is the index Connection::Eval takes.
#pragma once

#include <string_view>
#include <vector>

#include "redis/connection.h"

namespace sluice::internal {

// One script per Algorithm, in the enum's order: the script of algorithm `a` has
// index static_cast<int>(a).
extern const std::string_view kFixedWindowLua;
extern const std::string_view kSlidingWindowLua;
extern const std::string_view kSlidingLogLua;
extern const std::string_view kTokenBucketLua;
extern const std::string_view kGcraLua;
// After the algorithms: concurrency leases (src/lease/concurrency.lua).
extern const std::string_view kConcurrencyLua;
inline constexpr int kConcurrencyScript = 5;

// Every script, indexed by ScriptId.
std::vector<Script> AllScripts();

}  // namespace sluice::internal
