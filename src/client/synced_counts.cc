#include "client/synced_counts.h"

#include <algorithm>
#include <chrono>
#include <iterator>
#include <optional>
#include <utility>

#include "client/client_core.h"
#include "core/keys.h"

namespace sluice::internal {

std::shared_ptr<SyncedCounts> SyncedCounts::Make(std::shared_ptr<ClientCore> core,
                                                 std::string key_head, const Limit& limit,
                                                 const LimiterOptions& options) {
  std::shared_ptr<SyncedCounts> made(
      new SyncedCounts(std::move(core), std::move(key_head), limit, options));
  if (!made->model_clock_) made->thread_ = std::thread([raw = made.get()] { raw->Run(); });
  return made;
}

SyncedCounts::SyncedCounts(std::shared_ptr<ClientCore> core, std::string key_head,
                           const Limit& limit, const LimiterOptions& options)
    : core_(std::move(core)),
      key_head_(std::move(key_head)),
      limit_(limit),
      hot_(std::max<int64_t>(1, options.sync.hot_checks_per_second)),
      interval_ms_(std::max<int64_t>(1, options.sync.sync_interval.count())),
      servers_(std::max<int64_t>(1, options.sync.servers > 0 ? options.sync.servers
                                    : options.servers > 0    ? options.servers
                                                             : core_->options.servers)),
      model_clock_(core_->options.model_clock != nullptr),
      timer_(core_->io) {}

SyncedCounts::~SyncedCounts() {
  {
    MutexLock lock(stop_mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // What was admitted here and not pushed yet is pushed once more, best effort (nobody
  // waits for the answer; no check waits either: a sync in flight holds this object).
  std::vector<CheckCall> last;
  {
    MutexLock lock(mu_);
    for (auto& [id, e] : entries_) {
      if (e.unsynced <= 0 || e.window_end == 0) continue;  // (a cooled id's too)
      CheckCall call;
      call.op = Op::kSync;
      call.key = MakeKey(key_head_, id, limit_.algorithm);
      call.limit = limit_;
      call.limit.refill = e.window_end;
      call.cost = e.unsynced;
      if (model_clock_) call.now_ms = core_->options.model_clock->NowMs();
      call.deadline = std::chrono::steady_clock::now() + core_->options.deadline;
      last.push_back(std::move(call));
    }
  }
  for (CheckCall& call : last) core_->store->Check(std::move(call), [](StatusOr<Decision>) {});
}

int64_t SyncedCounts::NowMs() const {
  if (model_clock_) return core_->options.model_clock->NowMs();
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void SyncedCounts::Run() {
  const auto period = std::chrono::milliseconds(std::max<int64_t>(1, interval_ms_ / 4));
  for (;;) {
    {
      MutexLock lock(stop_mu_);
      stop_cv_.wait_for(stop_mu_, period, [this]() SLUICE_REQUIRES(stop_mu_) { return stopping_; });
      if (stopping_) return;
    }
    // On an I/O thread: the embedded store answers inline, and callbacks of checks that
    // wait for a sync must run on the client's threads.
    core_->Post([weak = weak_from_this()] {
      if (auto self = weak.lock()) self->Tick();
    });
  }
}

int64_t SyncedCounts::Rate(const Entry& e, int64_t now_ms) {
  const int64_t elapsed = now_ms - e.rate.second_ms;
  if (elapsed >= 2000) return 0;
  if (elapsed >= 1000) return e.rate.calls;  // that second is over: it is the last full one
  return std::max(e.rate.last_calls, e.rate.calls * 1000 / std::max<int64_t>(elapsed, 100));
}

SyncedCounts::Entry& SyncedCounts::Touch(std::string_view id, int64_t now_ms) {
  auto it = entries_.find(std::string(id));
  if (it == entries_.end()) {
    if (entries_.size() >= sweep_at_) {
      // Forget cold ids not called in the last two seconds (amortized O(1) a call).
      std::erase_if(entries_, [now_ms](const auto& kv) {
        const Entry& e = kv.second;
        return !e.hot && !e.syncing && e.unsynced == 0 && now_ms - e.rate.second_ms >= 2000;
      });
      sweep_at_ = std::max<std::size_t>(4096, 2 * entries_.size());
    }
    it = entries_.emplace(std::string(id), Entry{.rate = {.second_ms = now_ms}}).first;
  }
  Entry& e = it->second;
  e.rate.Count(now_ms);
  return e;
}

SyncedCounts::Push SyncedCounts::StartSync(const std::string& id, Entry& e, int64_t now_ms) {
  Push push{id, e.unsynced, e.known ? e.window_end : 0, now_ms};
  e.in_flight = e.unsynced;
  e.unsynced = 0;
  e.syncing = true;
  e.last_sync_ms = now_ms;
  return push;
}

Decision SyncedCounts::Admit(Entry& e, int64_t cost, int64_t now_ms) {
  e.share -= cost;
  e.unsynced += cost;
  Decision d;
  d.allowed = true;
  d.limit = limit_.limit;
  d.remaining = e.share;  // what this process may still admit before its next sync
  d.reset_after = std::chrono::milliseconds(e.local_end - now_ms);
  d.source = DecisionSource::kLocalSync;
  return d;
}

Decision SyncedCounts::Refuse(const Entry& e, int64_t now_ms) const {
  Decision d;
  d.allowed = false;
  d.limit = limit_.limit;
  d.remaining = e.share;
  d.reset_after = std::chrono::milliseconds(std::max<int64_t>(0, e.local_end - now_ms));
  // Until the next sync may give a share (or the window ends, whichever is first).
  const int64_t retry = std::min(e.local_end, e.last_sync_ms + interval_ms_) - now_ms;
  d.retry_after = std::chrono::milliseconds(std::max<int64_t>(1, retry));
  d.reason = RefusalReason::kOverLimit;
  d.source = DecisionSource::kLocalSync;
  return d;
}

bool SyncedCounts::Check(std::string_view id, CheckCall& call, DecisionCallback& done) {
  const int64_t now = NowMs();
  std::optional<Decision> decided;
  std::optional<Push> push;
  bool tick = false, handled = true;
  {
    MutexLock lock(mu_);
    if (now >= next_tick_ms_) {
      next_tick_ms_ = now + std::max<int64_t>(1, interval_ms_ / 4);
      tick = true;
    }
    Entry& e = Touch(id, now);
    if (!e.hot && Rate(e, now) >= hot_) {
      e.hot = true;
      hot_ids_.emplace(id);
    }
    if (!e.hot || call.cost > limit_.limit / servers_) {
      // Cold here, or a cost larger than any share can be (remaining / servers): it
      // could never pass here, so the store decides it exactly (and says why).
      handled = false;
    } else if (e.known && now < e.local_end && e.share >= call.cost) {
      decided = Admit(e, call.cost, now);
    } else if (e.syncing) {
      Wait(e, call, done);
    } else if (!e.known || now >= e.local_end || e.granted > 0) {
      // No window known, its window is over, or a share spent: sync now.
      Wait(e, call, done);
      push = StartSync(std::string(id), e, now);
    } else {
      decided = Refuse(e, now);  // the last sync gave nothing: wait for the next interval
    }
  }
  if (push) Send({*std::move(push)});
  if (tick) Tick();
  if (decided) done(*std::move(decided));
  return handled;
}

void SyncedCounts::Wait(Entry& e, CheckCall& call, DecisionCallback& done) {
  const Deadline deadline = call.deadline;
  e.waiters.push_back({std::move(call), std::move(done)});
  if (!timer_armed_ || deadline < armed_at_) Arm(deadline);
}

void SyncedCounts::Arm(Deadline at) {
  timer_armed_ = true;
  armed_at_ = at;
  timer_.expires_at(at);  // cancels the wait for a later deadline
  timer_.async_wait([weak = weak_from_this()](const boost::system::error_code& ec) {
    if (ec) return;  // re-armed earlier, or this object is going
    if (auto self = weak.lock()) self->OnWaitersDue();
  });
}

void SyncedCounts::OnWaitersDue() {
  const Deadline now = std::chrono::steady_clock::now();
  std::vector<Waiter> due;
  {
    MutexLock lock(mu_);
    timer_armed_ = false;
    Deadline next = Deadline::max();
    for (const std::string& id : hot_ids_) {
      Entry& e = entries_[id];
      if (e.waiters.empty()) continue;
      auto keep = std::stable_partition(e.waiters.begin(), e.waiters.end(),
                                        [now](const Waiter& w) { return w.call.deadline > now; });
      for (auto it = e.waiters.begin(); it != keep; ++it) next = std::min(next, it->call.deadline);
      std::move(keep, e.waiters.end(), std::back_inserter(due));
      e.waiters.erase(keep, e.waiters.end());
    }
    if (next != Deadline::max()) Arm(next);
  }
  // Their deadline passed before the store could decide them: the policy layer answers
  // each by its failure policy without asking the store (nor telling the breaker).
  for (Waiter& w : due) core_->store->Check(std::move(w.call), std::move(w.done));
}

void SyncedCounts::Tick() {
  const int64_t now = NowMs();
  std::vector<Push> pushes;
  {
    MutexLock lock(mu_);
    for (auto it = hot_ids_.begin(); it != hot_ids_.end();) {
      const std::string& id = *it;
      Entry& e = entries_[id];
      if (e.syncing) {
        ++it;
        continue;
      }
      if (Rate(e, now) < (hot_ + 1) / 2) {
        // Cooled down: back to the exact shared path, its last count pushed first.
        e.hot = false;
        e.share = 0;
        e.granted = 0;
        if (e.unsynced > 0 && e.known) pushes.push_back(StartSync(id, e, now));
        e.known = false;
        it = hot_ids_.erase(it);
        continue;
      }
      if (now - e.last_sync_ms >= interval_ms_) pushes.push_back(StartSync(id, e, now));
      ++it;
    }
    for (auto it = unpushed_ids_.begin(); it != unpushed_ids_.end();) {
      auto found = entries_.find(*it);
      if (found == entries_.end() || found->second.hot || found->second.unsynced == 0 ||
          now >= found->second.local_end) {
        // Gone, hot again (its syncs push them), or their window is over here: the
        // store would drop them.
        if (found != entries_.end() && !found->second.hot) found->second.unsynced = 0;
        it = unpushed_ids_.erase(it);
        continue;
      }
      Entry& e = found->second;
      if (!e.syncing && now - e.last_sync_ms >= interval_ms_) {
        Push push = StartSync(*it, e, now);
        push.window_end = e.window_end;  // the window that admitted them
        pushes.push_back(std::move(push));
      }
      ++it;
    }
  }
  if (!pushes.empty()) Send(std::move(pushes));
}

void SyncedCounts::Send(std::vector<Push> pushes) {
  // All at once: the connection writes them in one go and batches them into one script
  // call (src/algo/batch.lua) when they queue behind a write.
  for (Push& push : pushes) {
    CheckCall call;
    call.op = Op::kSync;
    call.key = MakeKey(key_head_, push.id, limit_.algorithm);
    call.limit = limit_;
    call.limit.refill = push.window_end;  // the window its units were counted in
    call.cost = push.units;
    if (model_clock_) call.now_ms = core_->options.model_clock->NowMs();
    call.deadline = std::chrono::steady_clock::now() + core_->options.deadline;
    core_->store->Check(std::move(call),
                        [self = shared_from_this(), push = std::move(push)](
                            StatusOr<Decision> reply) { self->OnSynced(push, std::move(reply)); });
  }
}

void SyncedCounts::OnSynced(const Push& push, StatusOr<Decision> reply) {
  const int64_t now = NowMs();
  std::vector<std::pair<DecisionCallback, Decision>> decided;
  std::vector<Waiter> plain;
  {
    MutexLock lock(mu_);
    auto it = entries_.find(push.id);
    if (it == entries_.end()) return;
    Entry& e = it->second;
    e.syncing = false;
    if (!reply.ok()) {
      // Not answered: push these units again next time; keep spending the share held.
      e.unsynced += e.in_flight;
      // A cooled id has no next sync of its own: Tick pushes them again.
      if (!e.hot && e.unsynced > 0) unpushed_ids_.insert(push.id);
    } else if (!e.hot) {
      unpushed_ids_.erase(push.id);  // its last count landed
    } else {
      const int64_t window_end = reply->retry_after.count();
      // Units admitted while the sync was in flight belong to the window known before;
      // when the store has moved to another one, that window is over: they are dropped.
      if (e.known && window_end != e.window_end) e.unsynced = 0;
      e.known = true;
      e.window_end = window_end;
      e.local_end = push.sent_ms + reply->reset_after.count();
      e.share = std::max<int64_t>(0, reply->remaining / servers_ - e.unsynced);
      e.granted = e.share;
    }
    e.in_flight = 0;
    for (Waiter& w : e.waiters) {
      if (e.hot && e.known && now < e.local_end && e.share >= w.call.cost) {
        decided.emplace_back(std::move(w.done), Admit(e, w.call.cost, now));
      } else if (reply.ok() && e.hot && e.known && now < e.local_end) {
        decided.emplace_back(std::move(w.done), Refuse(e, now));
      } else {
        plain.push_back(std::move(w));  // the store failed (or the id cooled): plain path
      }
    }
    e.waiters.clear();
  }
  for (auto& [done, d] : decided) done(std::move(d));
  for (Waiter& w : plain) core_->store->Check(std::move(w.call), std::move(w.done));
}

void SyncedCounts::Drop(std::string_view id) {
  MutexLock lock(mu_);
  auto it = entries_.find(std::string(id));
  if (it == entries_.end()) return;
  Entry& e = it->second;
  e.known = false;
  e.share = 0;
  e.granted = 0;
  e.unsynced = 0;
  e.in_flight = 0;  // a sync in flight ran before the reset: nothing to push again
}

int64_t SyncedCounts::Unsynced() const {
  MutexLock lock(mu_);
  int64_t n = 0;
  for (const auto& [id, e] : entries_) n += e.unsynced + e.in_flight;
  return n;
}

bool SyncedCounts::Hot(std::string_view id) const {
  MutexLock lock(mu_);
  auto it = entries_.find(std::string(id));
  return it != entries_.end() && it->second.hot;
}

}  // namespace sluice::internal
