#include "policy/domain_breakers.h"

#include <algorithm>
#include <unordered_set>

namespace sluice::internal {

DomainBreakers::DomainBreakers(BreakerOptions options,
                               std::function<std::vector<FaultDomainInfo>()> live, Breaker::Now now)
    : options_(options),
      live_(std::move(live)),
      now_(std::move(now)),
      first_(options, now_),
      overflow_(options, now_) {}

DomainBreakers::Gate DomainBreakers::For(uint64_t domain) {
  if (domain == 0) return {&first_, nullptr};
  {
    MutexLock lock(mu_);
    const auto it = by_domain_.find(domain);
    if (it != by_domain_.end()) return {it->second.get(), it->second};
    // Full, and the store's domains were looked at less than a cool-down ago: the
    // overflow's, without asking the store again on every such call.
    if (by_domain_.size() >= kMaxDomains && now_() < next_drop_) {
      overflow_used_ = true;
      return {&overflow_, nullptr};
    }
  }
  // A domain met for the first time (a primary new to this client): the store is asked
  // which domains it names before this one gets a breaker, outside mu_ (the store takes
  // its own lock).
  const std::vector<FaultDomainInfo> live = live_();
  MutexLock lock(mu_);
  const auto it = by_domain_.find(domain);
  if (it != by_domain_.end()) return {it->second.get(), it->second};
  DropUnnamedLocked(live);
  if (by_domain_.size() >= kMaxDomains) {
    next_drop_ = now_() + options_.cool_down;
    overflow_used_ = true;
    return {&overflow_, nullptr};
  }
  auto breaker = std::make_shared<Breaker>(options_, now_);
  by_domain_.emplace(domain, breaker);
  return {breaker.get(), std::move(breaker)};
}

void DomainBreakers::DropUnnamedLocked(const std::vector<FaultDomainInfo>& live) {
  std::unordered_set<uint64_t> named;
  named.reserve(live.size());
  for (const FaultDomainInfo& d : live) named.insert(d.id);
  for (auto it = by_domain_.begin(); it != by_domain_.end();) {
    if (named.count(it->first) > 0) {
      ++it;
      continue;
    }
    // A call still in flight may settle it after this; its verdict concerns a domain
    // that no longer serves anything.
    dropped_opens_ += it->second->opens();
    dropped_short_circuited_ += it->second->short_circuited();
    it = by_domain_.erase(it);
  }
}

DomainBreakers::Summary DomainBreakers::Summarize() {
  std::vector<FaultDomainInfo> live = live_();
  if (live.empty()) live.push_back(FaultDomainInfo{});
  MutexLock lock(mu_);
  DropUnnamedLocked(live);
  Summary s;
  s.domains = 0;
  s.opens = first_.opens() + overflow_.opens() + dropped_opens_;
  s.short_circuited =
      first_.short_circuited() + overflow_.short_circuited() + dropped_short_circuited_;
  for (const auto& [id, breaker] : by_domain_) {
    s.opens += breaker->opens();
    s.short_circuited += breaker->short_circuited();
  }
  const auto rank = [](Breaker::State state) {
    switch (state) {
      case Breaker::State::kClosed: return 0;
      case Breaker::State::kHalfOpen: return 1;
      case Breaker::State::kOpen: return 2;
    }
    return 0;
  };
  const auto add = [&](const Breaker& b, const std::string& name) {
    ++s.domains;
    const Breaker::State state = b.state();
    if (rank(state) > rank(s.worst)) s.worst = state;
    s.consecutive_failures = std::max(s.consecutive_failures, b.consecutive_failures());
    if (state == Breaker::State::kClosed) return;
    ++s.open_domains;
    s.open_names.push_back(name);
    if (state == Breaker::State::kOpen) {
      const auto in = b.RetryIn();
      if (s.probe_in.count() == 0 || in < s.probe_in) s.probe_in = in;
    }
  };
  for (const FaultDomainInfo& d : live) {
    if (d.id == 0) {
      add(first_, d.name.empty() ? std::string("(no primary known)") : d.name);
      continue;
    }
    const auto it = by_domain_.find(d.id);
    if (it != by_domain_.end()) {
      add(*it->second, d.name);
    } else {
      ++s.domains;  // no call met it yet: closed
    }
  }
  if (overflow_used_) add(overflow_, "(domains past " + std::to_string(kMaxDomains) + ")");
  return s;
}

std::size_t DomainBreakers::size() const {
  MutexLock lock(mu_);
  return by_domain_.size();
}

}  // namespace sluice::internal
