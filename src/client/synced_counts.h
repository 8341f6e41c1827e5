// Periodic sync for hot ids (LimiterOptions::sync, docs/design.md §7): a process counts
// a hot id's admissions locally and, every sync interval, adds them to the store and
// learns the shared count in the same script call (fixed_window.lua, op 4 "sync").
//
// Per hot id this process holds: the window it last learned (its end on the store's
// clock, and until when it lasts on this host's clock: sent + reset_after, no later than
// the store's end), a share, and the units it admitted and has not pushed yet. At each
// sync the share becomes floor(remaining / servers) minus what was admitted while the
// sync was in flight; the process admits from the share only, until the next sync. A
// share spent before the interval is up is synced at once (checks wait for the reply),
// unless the last sync gave no share: then checks are refused here until the next
// interval. Pushed units land only in the window that admitted them (the store drops
// units of a window that is over). The overshoot this allows is derived in
// docs/design.md §7.
//
// Hot and cool: an id enters this mode once this process sees it called at least
// `hot_checks_per_second` (over the last full second, or this second so far), and
// leaves it, its last count pushed first, when the rate falls below half of that: cold
// ids take the exact shared path.
//
// Failure: a sync the store does not answer keeps the share (and the window end) held,
// and its units are pushed again with the next sync (the last push of an id that cooled
// is pushed again every interval, until it lands or its window is over) (a push that did run is
// then counted twice: an over-count, never an under-count); checks past the share go to the plain
// path, i.e. to the failure policy while the store is down. A check waiting for a sync
// is answered at its own deadline even when the sync is held longer (it has the client's
// deadline): then by its failure policy, as any call the store did not answer in time
// (such an expiry is not a store failure for the breaker: the sync's own counts).
//
// Timing: with a model clock (tests, `sluice simulate`) syncs are due on the model clock
// and run from checks only (deterministic, no thread); otherwise a thread wakes every
// quarter interval and runs the due syncs on the client's I/O thread.
//
// Thread-safe.
#pragma once

#include "sluice/boost_first.h"  // before any Boost header

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <boost/asio/steady_timer.hpp>

#include "client/call_rate.h"
#include "core/mutex.h"
#include "sluice/client.h"
#include "sluice/decision.h"
#include "store/store.h"

namespace sluice::internal {

class ClientCore;

class SyncedCounts : public std::enable_shared_from_this<SyncedCounts> {
 public:
  // `key_head`, `limit` and the failure policy are the limiter's.
  static std::shared_ptr<SyncedCounts> Make(std::shared_ptr<ClientCore> core, std::string key_head,
                                            const Limit& limit, const LimiterOptions& options);
  ~SyncedCounts();
  SyncedCounts(const SyncedCounts&) = delete;
  SyncedCounts& operator=(const SyncedCounts&) = delete;

  // Decides a consume (`call`, of `id`) when `id` is hot here: `done` is then taken and
  // called once (at once, or when the id's sync answers). False when the id is cold here
  // (or the cost exceeds limit / servers, more than any share): the caller takes the
  // plain path with `done`.
  bool Check(std::string_view id, CheckCall& call, DecisionCallback& done);

  // `id` was reset (Limiter::Reset): what this process admitted and has not pushed is
  // forgotten with the store's count, and its share too; the next check syncs anew.
  void Drop(std::string_view id);

  // Sends the syncs that are due now (the thread and checks call it).
  void Tick();

  // For tests: units admitted here and not yet pushed, over all ids; whether `id` is
  // counted locally now.
  int64_t Unsynced() const;
  bool Hot(std::string_view id) const;

 private:
  struct Waiter {
    CheckCall call;
    DecisionCallback done;
  };
  struct Push {
    std::string id;
    int64_t units = 0;
    int64_t window_end = 0;  // store clock; 0: none known
    int64_t sent_ms = 0;     // local clock
  };
  struct Entry {
    CallRate rate;  // its calls per second
    bool hot = false;
    bool known = false;      // a sync answered: window_end, local_end and share are set
    int64_t window_end = 0;  // the window's end on the store's clock
    int64_t local_end = 0;   // the share is spent only while now < local_end
    int64_t share = 0;       // what this process may still admit before its next sync
    int64_t granted = 0;     // the share the last sync gave (0: no early sync)
    int64_t unsynced = 0;    // admitted here, not pushed yet
    int64_t in_flight = 0;   // pushed, not answered yet
    bool syncing = false;
    int64_t last_sync_ms = 0;
    std::vector<Waiter> waiters;
  };

  SyncedCounts(std::shared_ptr<ClientCore> core, std::string key_head, const Limit& limit,
               const LimiterOptions& options);
  int64_t NowMs() const;
  // The id's rate: checks in the last full second, or this second's when it has more.
  static int64_t Rate(const Entry& e, int64_t now_ms);
  Entry& Touch(std::string_view id, int64_t now_ms) SLUICE_REQUIRES(mu_);
  Push StartSync(const std::string& id, Entry& e, int64_t now_ms) SLUICE_REQUIRES(mu_);
  void Send(std::vector<Push> pushes);
  void OnSynced(const Push& push, StatusOr<Decision> reply);
  // Queues a check behind the id's sync in flight, and arms the timer for its deadline.
  void Wait(Entry& e, CheckCall& call, DecisionCallback& done) SLUICE_REQUIRES(mu_);
  void Arm(Deadline at) SLUICE_REQUIRES(mu_);
  // The timer: answers the waiting checks whose deadline has come, by their policy.
  void OnWaitersDue();
  Decision Admit(Entry& e, int64_t cost, int64_t now_ms) SLUICE_REQUIRES(mu_);
  Decision Refuse(const Entry& e, int64_t now_ms) const SLUICE_REQUIRES(mu_);
  void Run();  // the thread

  const std::shared_ptr<ClientCore> core_;
  const std::string key_head_;
  const Limit limit_;
  const int64_t hot_;
  const int64_t interval_ms_;
  const int64_t servers_;
  const bool model_clock_;

  mutable Mutex mu_;
  std::unordered_map<std::string, Entry> entries_ SLUICE_GUARDED_BY(mu_);
  std::unordered_set<std::string> hot_ids_ SLUICE_GUARDED_BY(mu_);  // entries_ with hot set
  // Cooled ids whose last push failed: pushed again every interval until one lands or
  // their window is over here (the store would drop the units then).
  std::unordered_set<std::string> unpushed_ids_ SLUICE_GUARDED_BY(mu_);
  int64_t next_tick_ms_ SLUICE_GUARDED_BY(mu_) = 0;
  std::size_t sweep_at_ SLUICE_GUARDED_BY(mu_) = 4096;
  // Fires at the earliest deadline of a waiting check (armed_at_), on the I/O threads.
  boost::asio::steady_timer timer_ SLUICE_GUARDED_BY(mu_);
  bool timer_armed_ SLUICE_GUARDED_BY(mu_) = false;
  Deadline armed_at_ SLUICE_GUARDED_BY(mu_);

  Mutex stop_mu_;
  std::condition_variable_any stop_cv_;
  bool stopping_ SLUICE_GUARDED_BY(stop_mu_) = false;
  std::thread thread_;
};

}  // namespace sluice::internal
