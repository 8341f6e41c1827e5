// Gauges of concurrency leases as one client sees them (docs/design.md §4: a leak shows as a
// floor that never returns to zero), per (limiter, id):
//   held     leases this client holds now (exact: counted at grant, release and loss);
//   live     leases of the id across the fleet, as the store counted them at this
//            client's latest acquire of the id (granted or refused);
//   max_1m   the highest `live` seen during the current clock minute (a minute with no
//            acquire starts from the last `live`).
// Bounded without ever hiding a lease: an id whose `held` is above 0 is never forgotten
// (a lease held for hours is exactly the leak floor the gauge is for). Ids holding
// nothing are kept up to `max_ids` in all; past that, the least recently updated of them
// is forgotten. So the table holds at most max(max_ids, ids holding leases + 1) ids, and
// the ids holding leases are bounded by the leases this client holds. O(1) per update.
//
// Thread-safety: thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/mutex.h"

namespace sluice::internal {

class LeaseGauges {
 public:
  explicit LeaseGauges(std::size_t max_ids = 1000) : max_ids_(max_ids) {}

  // The key of (limiter, encoded id): computed once per lease, so updates allocate
  // nothing (limiter names and encoded ids never contain '\n').
  static std::string KeyOf(const std::string& limiter, const std::string& encoded_id) {
    return limiter + '\n' + encoded_id;
  }
  // The store counted `live` leases of the id at `now_ms` (this process's wall clock).
  void Observe(const std::string& key, int64_t live, int64_t now_ms);
  // This client was granted a lease of the id, the store counting `live` with it: Observe
  // and Held(+1) in one step.
  void Granted(const std::string& key, int64_t live, int64_t now_ms);
  // This client's leases of the id changed by `delta` (+1 granted, -1 released or lost).
  void Held(const std::string& key, int64_t delta, int64_t now_ms);

  struct Row {
    std::string limiter;
    std::string id;  // as encoded in keys (printable ASCII)
    int64_t held = 0;
    int64_t live = 0;
    int64_t max_1m = 0;
  };
  std::vector<Row> Snapshot(int64_t now_ms) const;

 private:
  struct Entry {
    int64_t held = 0;
    int64_t live = 0;
    int64_t minute = -1;
    int64_t minute_max = 0;
    bool idle = false;                                // in idle_ (held == 0)
    std::list<const std::string*>::iterator recency;  // into idle_ when idle
  };
  using Entries = std::unordered_map<std::string, Entry>;
  Entries::iterator Touch(const std::string& key, int64_t now_ms) SLUICE_REQUIRES(mu_);
  // Moves the entry in or out of idle_ after its `held` changed.
  void Settle(Entries::iterator it) SLUICE_REQUIRES(mu_);

  const std::size_t max_ids_;
  mutable Mutex mu_;
  Entries entries_ SLUICE_GUARDED_BY(mu_);  // node-based: key addresses are stable
  // Ids holding no lease, most recently updated first: the only ones ever forgotten.
  std::list<const std::string*> idle_ SLUICE_GUARDED_BY(mu_);
};

}  // namespace sluice::internal
