// Reading Redis's INFO replies ("field:value" lines, "# Section" headers), and what a
// maxmemory-policy means for sluice's keys.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace sluice::internal {

// The value of `field` in an INFO reply, if present.
std::optional<std::string> InfoField(std::string_view info, std::string_view field);
// Whether a maxmemory-policy can evict keys that carry an expiry: every policy but
// noeviction (the volatile-* ones evict exactly such keys, and every sluice key has one).
bool PolicyCanEvict(std::string_view policy);

}  // namespace sluice::internal
