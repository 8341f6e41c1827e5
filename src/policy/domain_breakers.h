// The circuit breakers of a store's fault domains (store/store.h, Store::FaultDomain):
// one per domain, so that a failing primary of a Redis Cluster short-circuits only the
// calls of the slots it serves while the other primaries keep deciding theirs.
//
// Domain 0's breaker always exists and is the only one of a store without domains (one
// server, Sentinel, the embedded store): For(0) costs nothing more than the breaker
// itself (no map, no lock). Another domain gets its breaker, closed, at its first call;
// a domain the store no longer names (a primary failed over, retired or resharded away)
// loses its breaker at the next insertion or summary, so a primary whose slots a promoted
// replica now serves under another address holds nothing open for it. At most
// kMaxDomains breakers are kept besides domain 0's: the calls of domains met past that
// bound (after dropping those the store no longer names) share one more breaker, the
// overflow's, as all of a client's calls share one on a single server.
//
// Thread-safety: thread-safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/mutex.h"
#include "policy/breaker.h"
#include "store/store.h"

namespace sluice::internal {

class DomainBreakers {
 public:
  static constexpr std::size_t kMaxDomains = 1024;

  // The breaker that gates one call; `hold` keeps a domain's breaker alive while the
  // call runs (null for domain 0's and the overflow's, which live as long as this).
  struct Gate {
    Breaker* breaker = nullptr;
    std::shared_ptr<Breaker> hold;
    Breaker* operator->() const { return breaker; }
  };

  // `live`: the domains the store names now (Store::FaultDomains), asked when a domain
  // is added and for a summary, never on a call of a known domain.
  DomainBreakers(BreakerOptions options, std::function<std::vector<FaultDomainInfo>()> live,
                 Breaker::Now now = &std::chrono::steady_clock::now);

  Gate For(uint64_t domain) SLUICE_EXCLUDES(mu_);
  // Domain 0's breaker.
  Breaker& first() { return first_; }

  // The state over the domains the store names now (and the overflow's, once used).
  struct Summary {
    Breaker::State worst = Breaker::State::kClosed;  // open > half_open > closed
    int64_t domains = 1;                             // breakers summarized
    int64_t open_domains = 0;                        // of those, open or half-open
    int64_t consecutive_failures = 0;                // the highest of a domain
    // Since this was made, over every breaker it ever held.
    int64_t opens = 0;
    int64_t short_circuited = 0;
    std::chrono::milliseconds probe_in{0};  // the soonest probe of an open domain
    std::vector<std::string> open_names;    // the open or half-open domains' names
  };
  // Also drops the breakers of domains the store no longer names.
  Summary Summarize() SLUICE_EXCLUDES(mu_);
  // Breakers held besides domain 0's and the overflow's (tests).
  std::size_t size() const SLUICE_EXCLUDES(mu_);

 private:
  // Drops the breakers of domains not in `live`, keeping their counts.
  void DropUnnamedLocked(const std::vector<FaultDomainInfo>& live) SLUICE_REQUIRES(mu_);

  const BreakerOptions options_;
  const std::function<std::vector<FaultDomainInfo>()> live_;
  const Breaker::Now now_;
  Breaker first_;
  Breaker overflow_;
  mutable Mutex mu_;
  std::unordered_map<uint64_t, std::shared_ptr<Breaker>> by_domain_ SLUICE_GUARDED_BY(mu_);
  bool overflow_used_ SLUICE_GUARDED_BY(mu_) = false;
  // Full: until when a domain met anew takes the overflow's breaker without asking the
  // store which domains it names.
  std::chrono::steady_clock::time_point next_drop_ SLUICE_GUARDED_BY(mu_){};
  // Counts of the breakers dropped, so the totals never go back.
  int64_t dropped_opens_ SLUICE_GUARDED_BY(mu_) = 0;
  int64_t dropped_short_circuited_ SLUICE_GUARDED_BY(mu_) = 0;
};

}  // namespace sluice::internal
