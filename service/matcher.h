// service/matcher.h — which rule of a domain limits a request descriptor, as
// envoyproxy/ratelimit decides it: entry by entry down the tree, at each level the
// exact `key_value` first, then the wildcard values (`foo*`, `foo*bar`, `*.png`: each
// `*` matches any run of bytes, empty included; config order), then the
// bare `key` (any value); the rule applies only when the tree's depth matches the
// descriptor's (a rule at depth 1 does not limit a descriptor of 2 entries).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "service/config.h"
#include "service/limiter_names.h"

namespace sluiced {

struct Match {
  std::shared_ptr<const Rule> rule;  // null: no limit applies
  std::string id;                    // the counter of this descriptor: "k=v,k2=v2" (escaped)
};

Match MatchDescriptor(const DomainConfig& domain, const Entries& entries);

// Whether `value` matches `pattern`, in which each '*' stands for any run of bytes
// (none included) and every other byte for itself.
bool WildcardMatch(std::string_view pattern, std::string_view value);

// Drops (sets rule to null in) every match whose rule is named by another matched
// rule's `replaces`.
void ApplyReplaces(std::vector<Match>& matches);

}  // namespace sluiced
