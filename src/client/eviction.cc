#include "client/eviction.h"

#include <utility>

namespace sluice::internal {

std::future<void> EvictionWatch::Start(std::shared_ptr<Store> store, Options options) {
  std::future<void> first;
  {
    MutexLock lock(mu_);
    first_.emplace();
    first = first_->get_future();
    if (stopped_) {
      first_->set_value();
      first_.reset();
      return first;
    }
    store_ = std::move(store);
    options_ = std::move(options);
  }
  ReadNow();
  return first;
}

void EvictionWatch::Shutdown() {
  MutexLock lock(mu_);
  stopped_ = true;
  timer_.cancel();
  store_.reset();
  if (first_) {
    first_->set_value();
    first_.reset();
  }
}

EvictionWatch::Reading EvictionWatch::reading() const {
  MutexLock lock(mu_);
  return reading_;
}

void EvictionWatch::Arm(std::chrono::milliseconds in) {
  MutexLock lock(mu_);
  if (stopped_) return;
  timer_.expires_after(in);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) ReadNow();
  });
}

void EvictionWatch::ReadNow() {
  std::shared_ptr<Store> store;
  Deadline deadline;
  {
    MutexLock lock(mu_);
    if (stopped_) return;
    store = store_;
    deadline = Deadline::clock::now() + options_.deadline;
  }
  // Two sections, one after the other: INFO takes one section per call on Redis < 7.
  store->Info("memory", deadline, [this, store, deadline](StatusOr<std::string> memory) {
    if (!memory.ok()) return Record(std::move(memory), std::string());
    store->Info("stats", deadline, [this, memory = std::move(memory)](StatusOr<std::string> stats) {
      Record(std::move(memory), std::move(stats));
    });
  });
}

void EvictionWatch::Record(StatusOr<std::string> memory, StatusOr<std::string> stats) {
  std::string warning;
  std::function<void(const std::string&)> on_warning;
  std::function<void(bool)> on_reading;
  std::optional<bool> can_evict;
  std::chrono::milliseconds next;
  {
    MutexLock lock(mu_);
    if (stopped_) return;
    next = options_.interval;
    std::optional<std::string> policy;
    if (memory.ok()) policy = InfoField(*memory, "maxmemory_policy");
    if (!memory.ok() || !stats.ok()) {
      reading_.error = (memory.ok() ? stats.status() : memory.status()).message();
    } else if (!policy) {
      reading_.error = "INFO memory has no maxmemory_policy field";
    } else {
      const bool was_evicting = reading_.known && reading_.can_evict;
      const int64_t before = reading_.known ? reading_.evicted_keys : 0;
      reading_.known = true;
      reading_.error.clear();
      reading_.policy = *policy;
      reading_.can_evict = PolicyCanEvict(*policy);
      if (auto evicted = InfoField(*stats, "evicted_keys")) {
        try {
          reading_.evicted_keys = std::stoll(*evicted);
        } catch (const std::exception&) {
          // A value that is not a number: keep the last one.
        }
      }
      if (!reading_.can_evict) {
        warned_policy_ = warned_evictions_ = false;
      } else if (!warned_policy_) {
        warned_policy_ = true;
        warning = "the store's maxmemory-policy is " + *policy +
                  ": when its memory is full it can evict rate-limit state (every sluice key "
                  "has an expiry), and an evicted id starts over with its whole limit; run "
                  "limits on a Redis of their own with maxmemory-policy noeviction";
        if (reading_.evicted_keys > 0) {
          warning += " (the server has evicted " + std::to_string(reading_.evicted_keys) +
                     " keys since it started)";
        }
      } else if (was_evicting && reading_.evicted_keys > before && !warned_evictions_) {
        warned_evictions_ = true;
        warning = "the store evicted " + std::to_string(reading_.evicted_keys - before) +
                  " keys in the last " + std::to_string(options_.interval.count()) +
                  " ms (maxmemory-policy " + *policy +
                  "): limits may have been reset (sluice_store_evicted_keys counts them on)";
      }
      can_evict = reading_.can_evict;
    }
    on_warning = options_.on_warning;
    on_reading = options_.on_reading;
    // Until a first reading succeeds (the store not reachable yet), try again sooner.
    if (!reading_.known) next = std::min(next, std::chrono::milliseconds(1000));
  }
  if (can_evict && on_reading) on_reading(*can_evict);
  if (!warning.empty() && on_warning) on_warning(warning);
  std::optional<std::promise<void>> first;
  {
    MutexLock lock(mu_);
    first.swap(first_);
  }
  if (first) first->set_value();
  Arm(next);
}

}  // namespace sluice::internal
