// Runtime overrides through sluiced (service/engine.h): each matched rule's limiter takes
// the library's audited calls (sluice/admin.h).
#include <algorithm>
#include <map>

#include "service/engine.h"

namespace sluiced {

namespace {

sluice::Status NoCounter(const Rule& rule) {
  return sluice::InvalidArgumentError("'" + rule.DisplayName() +
                                      "' keeps no counter (unlimited, or 0 requests per unit): "
                                      "it has no limit to override");
}

}  // namespace

sluice::StatusOr<sluice::OverrideResult> Engine::SetOverride(const Match& match,
                                                             const sluice::OverrideSpec& spec,
                                                             const sluice::AdminAction& action) {
  auto gen = current();
  const auto built = gen->rules.find(match.rule.get());
  if (built == gen->rules.end())
    return sluice::NotFoundError("the configuration was reloaded meanwhile: try again");
  const sluice::AuditOptions audit{.log_path = options_.audit_log};
  if (built->second.concurrency) {
    return sluice::SetOverride(*built->second.concurrency, match.id, spec, action, audit);
  }
  if (!built->second.limiter) return NoCounter(*match.rule);
  return sluice::SetOverride(*built->second.limiter, match.id, spec, action, audit);
}

sluice::StatusOr<sluice::OverrideResult> Engine::ClearOverride(const Match& match,
                                                               const sluice::AdminAction& action) {
  auto gen = current();
  const auto built = gen->rules.find(match.rule.get());
  if (built == gen->rules.end())
    return sluice::NotFoundError("the configuration was reloaded meanwhile: try again");
  const sluice::AuditOptions audit{.log_path = options_.audit_log};
  if (built->second.concurrency) {
    return sluice::ClearOverride(*built->second.concurrency, match.id, action, audit);
  }
  if (!built->second.limiter) return NoCounter(*match.rule);
  return sluice::ClearOverride(*built->second.limiter, match.id, action, audit);
}

sluice::StatusOr<std::vector<Engine::ShownOverride>> Engine::ListOverrides(bool& truncated) {
  auto gen = current();
  // Every limiter of the configuration, with its domain and its own window.
  struct Own {
    std::string domain;
    std::chrono::milliseconds window{0};
  };
  std::map<std::string, Own> limiters;
  for (const auto& [rule, built] : gen->rules) {
    if (built.limiter) {
      limiters[built.limiter->name()] = {rule->domain, built.limiter->limit().window};
    } else if (built.concurrency) {
      limiters[built.concurrency->name()] = {rule->domain, std::chrono::milliseconds(0)};
    }
  }
  std::vector<std::string> names;
  for (const auto& [name, own] : limiters) names.push_back(name);
  auto listed = sluice::ListOverrides(*client_, names);
  if (!listed.ok()) return listed.status();
  truncated = listed->size() > kMaxOverridesShown;
  std::vector<ShownOverride> out;
  out.reserve(std::min(listed->size(), kMaxOverridesShown));
  for (auto& o : *listed) {
    if (out.size() == kMaxOverridesShown) break;
    const Own& own = limiters.at(o.limiter);
    if (o.window.count() == 0) o.window = own.window;
    out.push_back({own.domain, std::move(o)});
  }
  return out;
}

}  // namespace sluiced
