// service/limiter_names.h — how sluiced names the sluice limiter of a rule and the id of
// a descriptor, in one place: sluiced forms them (config.cc, matcher.cc) and the sluice
// CLI forms the same from --domain and --entry (docs/sluiced.md, Limiter names and ids).
// Plain functions of their arguments (the standard library only), safe from any thread.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluiced {

using Entries = std::vector<std::pair<std::string, std::string>>;

// The piece a descriptor node adds to its limiter's name: its `key`, or `key_value` when
// the config fixes the node's value (`value: v`, wildcards included).
std::string NodePiece(std::string_view key, std::string_view config_value);

// The limiter name of the node at `pieces` (domain first, then each level's NodePiece):
// the pieces joined by '.', when they hold only [A-Za-z0-9_-] and fit in 64 bytes
// ("example.client"); otherwise any other byte as '_', cut to 47 bytes, then '.' and a
// 64-bit hash (FNV-1a, 16 hex digits) of the exact pieces, so two paths never share a
// limiter.
std::string LimiterName(const std::vector<std::string>& pieces);

// The id of a descriptor's counter: `key=value` pairs in the request's order joined by
// ',', with '\\', ',' and '=' escaped by a backslash so that two descriptors never share
// an id ("export=,user=u42").
std::string DescriptorId(const Entries& entries);

}  // namespace sluiced
