// Local budgets for hot ids (LimiterOptions::local_budget, docs/design.md §7): a
// process takes a slice of a hot id's window from the store in the same atomic step
// that admits a request (one check of cost + slice), then admits later requests from
// the slice without a store call until the slice is spent or its window ends.
//
// Never over the limit: every unit of a slice was counted by the store when it was
// taken, and a slice is spent only until the end of the window that counted it, as
// seen from the moment the request was sent (the script ran later, so the window ends
// no earlier than sent + reset_after). What all processes hold plus what the store
// counted ≤ the limit. The price is under-admission: units left in slices when their
// window ends are never spent (at most servers × max slice per window).
//
// Thread-safe. Times are milliseconds on one monotonic scale chosen by the caller (the
// steady clock, or the client's model clock).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "core/mutex.h"
#include "sluice/client.h"
#include "sluice/decision.h"

namespace sluice::internal {

class LocalBudgets {
 public:
  // A slice is spent at most this long after the call that took it was sent.
  static constexpr int64_t kMaxSliceLifeMs = 1000;

  LocalBudgets(const LimiterOptions::LocalBudget& options, int64_t limit);

  // Spends `cost` from `id`'s slice when it holds that much and its window has not
  // ended: the Decision to return (source kLocalBudget). Counts the call toward the
  // id's rate either way.
  std::optional<Decision> TrySpend(std::string_view id, int64_t cost, int64_t now_ms);

  // What to ask the store for on a miss: `cost` for an id that is not hot, else cost +
  // a slice sized to the id's rate (never more than the limit).
  int64_t Want(std::string_view id, int64_t cost, int64_t now_ms);

  // The store admitted `cost` + `extra` for `id` in a call sent at `sent_ms`, in a
  // window that ends `reset_after_ms` after the script ran: the extra is this id's slice
  // until sent_ms + reset_after_ms (units left in an older slice are dropped: their
  // window is over or ends no later).
  void Fill(std::string_view id, int64_t extra, int64_t sent_ms, int64_t reset_after_ms);

  // The store refused `id` with less left than a request costs: until `until_ms`, Want
  // asks for the cost alone (the plain path, whose refusals the denial cache answers).
  void Exhausted(std::string_view id, int64_t until_ms);

  // Gives `amount` back to `id`'s slice (a refund of a kLocalBudget decision). False
  // when the slice's window has ended (nothing to give back to).
  bool GiveBack(std::string_view id, int64_t amount, int64_t now_ms);

  // Units held in slices whose window has not ended, over all ids.
  int64_t Held(int64_t now_ms) const;

 private:
  struct Entry {
    int64_t units = 0;       // the slice
    int64_t expires_ms = 0;  // spendable while now < expires_ms
    int64_t second_ms = 0;   // start of the current one-second rate bucket
    int64_t calls = 0;       // calls in that second
    int64_t last_calls = 0;  // calls in the second before
    int64_t exhausted_until_ms = 0;
  };
  Entry& Touch(std::string_view id, int64_t now_ms) SLUICE_REQUIRES(mu_);
  void Sweep(int64_t now_ms) SLUICE_REQUIRES(mu_);

  const int64_t hot_;
  const int64_t period_ms_;
  const int64_t max_slice_;
  const int64_t limit_;
  mutable Mutex mu_;
  std::unordered_map<std::string, Entry> entries_ SLUICE_GUARDED_BY(mu_);
  std::size_t sweep_at_ SLUICE_GUARDED_BY(mu_) = 4096;
};

}  // namespace sluice::internal
