// Local budgets for hot ids (LimiterOptions::local_budget, docs/design.md §7): a
// process takes a slice of a hot id's budget from the store in the same atomic step
// that admits a request (one check of cost + slice), then admits later requests from
// the slice without a store call until the slice is spent or its life ends.
//
// Never over the limit: every unit of a slice was counted (windows) or withdrawn
// (buckets) by the store when it was taken, and a slice is spent only for as long as
// that keeps the algorithm's own bound (SliceLifeMs), measured from the moment the
// request was sent (the script ran later, so the true end is no earlier). The price is
// under-admission: units left in slices when their life ends are never spent (at most
// servers × max slice per window, or at any moment for the buckets).
//
// Thread-safe. Times are milliseconds on one monotonic scale chosen by the caller (the
// steady clock, or the client's model clock).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "client/call_rate.h"
#include "core/mutex.h"
#include "sluice/client.h"
#include "sluice/decision.h"
#include "sluice/limits.h"

namespace sluice::internal {

class LocalBudgets {
 public:
  // A slice is spent at most this long after the call that took it was sent.
  static constexpr int64_t kMaxSliceLifeMs = 1000;

  LocalBudgets(const LimiterOptions::LocalBudget& options, const Limit& limit);

  // How long after the taking call was sent a slice of `extra` units may be spent, given
  // the reply's reset_after (docs/design.md §7 derives each):
  //  - fixed_window: until its window ends, reset_after;
  //  - sliding_window: until its window ends, which is at least reset_after - window
  //    after the script ran (reset_after runs to the end of the next window, less
  //    ceil(window / count) - 1), less 1 ms for the clocks' millisecond rounding;
  //  - token_bucket, gcra: until the bucket would have been full again had the slice
  //    not been taken, reset_after - extra × window / refill, less 2 ms (reset_after is
  //    rounded up; the clocks' millisecond rounding).
  // Never more than kMaxSliceLifeMs; <= 0: the slice cannot be spent at all.
  static int64_t SliceLifeMs(const Limit& limit, int64_t extra, int64_t reset_after_ms);

  // Units a sliding_window slice did not spend, to give back to the window that counted
  // them (the store's op kGiveBack names it by its end on the store's clock).
  struct Leftover {
    int64_t units = 0;
    int64_t window_end_ms = 0;
  };

  // Spends `cost` from `id`'s slice when it holds that much and its life has not
  // ended: the Decision to return (source kLocalBudget). Counts the call toward the
  // id's rate either way. A sliding_window slice found over with units left is emptied
  // and its units put in `leftover` (when given) for the caller to give back.
  std::optional<Decision> TrySpend(std::string_view id, int64_t cost, int64_t now_ms,
                                   Leftover* leftover = nullptr);

  // What to ask the store for on a miss: `cost` for an id that is not hot, else cost +
  // a slice sized to the id's rate (never more than the limit).
  int64_t Want(std::string_view id, int64_t cost, int64_t now_ms);

  // The store admitted `cost` + `extra` for `id` in a call sent at `sent_ms` and
  // replied `reset_after_ms`: the extra is this id's slice until sent_ms +
  // SliceLifeMs(...) (units left in an older slice that has ended are dropped; a live
  // one's units join the new ones under the earlier end). Returns the units added (0
  // when the slice's life is over before it begins: those units are lost).
  // sliding_window: `window_end_ms` is the take's reply's window end (store clock); a
  // held slice of another window is emptied into `leftover` (when given) instead.
  int64_t Fill(std::string_view id, int64_t extra, int64_t sent_ms, int64_t reset_after_ms,
               int64_t window_end_ms = 0, Leftover* leftover = nullptr);

  // The store refused `id` with less left than a request costs: until `until_ms`, Want
  // asks for the cost alone (the plain path, whose refusals the denial cache answers).
  void Exhausted(std::string_view id, int64_t until_ms);

  // Gives `amount` back to `id`'s slice (a refund of a kLocalBudget decision). False
  // when the slice's life has ended (nothing to give back to).
  bool GiveBack(std::string_view id, int64_t amount, int64_t now_ms);

  // `id` was reset (Limiter::Reset, at `now_ms`): its slice is dropped (the store forgot
  // the units it counted), and so is a slice taken by a call sent before then (the store
  // ran that take before the reset), when it arrives.
  void Drop(std::string_view id, int64_t now_ms);

  // Units held in slices whose life has not ended, over all ids.
  int64_t Held(int64_t now_ms) const;

 private:
  struct Entry {
    int64_t units = 0;          // the slice
    int64_t expires_ms = 0;     // spendable while now < expires_ms
    int64_t window_end_ms = 0;  // sliding_window: the end of the window that counted it
    CallRate rate;              // its calls per second
    int64_t exhausted_until_ms = 0;
    int64_t reset_ms = INT64_MIN;  // the last Drop: takes sent by then are not filled
  };
  Entry& Touch(std::string_view id, int64_t now_ms) SLUICE_REQUIRES(mu_);
  void Sweep(int64_t now_ms) SLUICE_REQUIRES(mu_);

  const int64_t hot_;
  const int64_t period_ms_;
  const int64_t max_slice_;
  const int64_t limit_;
  const Limit whole_;  // the limiter's limit (algorithm, window, refill)
  mutable Mutex mu_;
  std::unordered_map<std::string, Entry> entries_ SLUICE_GUARDED_BY(mu_);
  std::size_t sweep_at_ SLUICE_GUARDED_BY(mu_) = 4096;
};

}  // namespace sluice::internal
