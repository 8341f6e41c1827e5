#include "client/lease_wait.h"

#include "sluice/boost_first.h"  // before any Boost header

#include <algorithm>
#include <optional>
#include <utility>

#include <boost/asio/steady_timer.hpp>

#include "core/mutex.h"

namespace sluice::internal {

namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

class WaitingAcquire : public std::enable_shared_from_this<WaitingAcquire> {
 public:
  explicit WaitingAcquire(WaitPlan plan) : plan_(std::move(plan)), timer_(plan_.core->io) {}

  void Start() {
    std::weak_ptr<WaitingAcquire> weak = weak_from_this();
    ClientCore* core = plan_.core.get();
    // The store's wake-up may come on any thread, under the store's locks: post.
    watch_ = plan_.core->store->WatchLeaseSet(plan_.call.key, [weak, core] {
      core->Post([weak] {
        if (auto self = weak.lock()) self->Wake();
      });
    });
    plan_.core->Post([self = shared_from_this()] { self->Attempt(); });
  }

 private:
  // The last attempt starts one call deadline before the wait ends, so that its answer
  // (or its failure policy's) comes by then.
  steady_clock::time_point LastAttemptAt() const { return plan_.wait_until - plan_.call_deadline; }

  void Attempt() {
    LeaseCall call;
    {
      MutexLock lock(mu_);
      if (done_ || in_flight_) return;
      in_flight_ = true;
      woken_ = false;
      ++generation_;  // a timer already set no longer starts an attempt
      timer_.cancel();
      const auto now = steady_clock::now();
      final_ = now >= LastAttemptAt();
      call = plan_.call;
      call.deadline = std::min(now + plan_.call_deadline, plan_.wait_until);
      if (call.deadline <= now) call.deadline = now + milliseconds(1);
    }
    if (plan_.core->options.model_clock) call.now_ms = plan_.core->options.model_clock->NowMs();
    const BootClock::time_point sent = plan_.core->boot_now();
    plan_.core->store->RunLease(std::move(call),
                                [self = shared_from_this(), sent](StatusOr<LeaseResult> result) {
                                  self->OnResult(std::move(result), sent);
                                });
  }

  void OnResult(StatusOr<LeaseResult> result, BootClock::time_point sent) {
    bool again = false;
    {
      MutexLock lock(mu_);
      in_flight_ = false;
      const bool waiting =
          result.ok() && result->source == DecisionSource::kStore && result->reply.code == 2;
      if (waiting && !final_) {
        if (woken_) {
          again = true;
        } else {
          Schedule(result->reply);
          return;
        }
      }
    }
    if (again) return Attempt();
    Finish(std::move(result), sent);
  }

  // The next attempt: at the next re-check, when the earliest lease expires, or at the
  // last attempt's time, whichever comes first.
  void Schedule(const LeaseReply& reply) SLUICE_REQUIRES(mu_) {
    const auto now = steady_clock::now();
    auto at = std::min(now + kRecheck, LastAttemptAt());
    if (reply.expires_at_ms > reply.now_ms) {
      at = std::min(at, now + milliseconds(reply.expires_at_ms - reply.now_ms + 1));
    }
    timer_.expires_at(at);
    // The handler holds the waiter: nothing else does while it sleeps.
    timer_.async_wait(
        [self = shared_from_this(), generation = generation_](const boost::system::error_code& ec) {
          if (ec) return;
          {
            MutexLock lock(self->mu_);
            if (self->generation_ != generation) return;
          }
          self->Attempt();
        });
  }

  void Wake() {
    {
      MutexLock lock(mu_);
      if (done_) return;
      if (in_flight_) {
        woken_ = true;  // asked again as soon as the answer in flight says "waiting"
        return;
      }
    }
    Attempt();
  }

  void Finish(StatusOr<LeaseResult> result, BootClock::time_point sent) {
    {
      MutexLock lock(mu_);
      done_ = true;
      ++generation_;
      timer_.cancel();
    }
    watch_.reset();
    // Still in the queue (the wait ended), or the answer is not the store's (an error, a
    // failure policy) while a ticket may be there: leave, so the waiters behind need not
    // wait for the ticket to expire. Nobody waits for its answer.
    const bool granted_or_refused =
        result.ok() && result->source == DecisionSource::kStore && result->reply.code != 2;
    if (!granted_or_refused) {
      LeaseCall leave = plan_.call;
      leave.args.op = LeaseOp::kLeave;
      leave.deadline = steady_clock::now() + plan_.call_deadline;
      if (plan_.core->options.model_clock) {
        leave.now_ms = plan_.core->options.model_clock->NowMs();
      }
      plan_.core->store->RunLease(std::move(leave), [](StatusOr<LeaseResult>) {});
    }
    plan_.finish(std::move(result), sent);
  }

  WaitPlan plan_;
  std::shared_ptr<void> watch_;
  Mutex mu_;
  boost::asio::steady_timer timer_ SLUICE_GUARDED_BY(mu_);
  bool in_flight_ SLUICE_GUARDED_BY(mu_) = false;
  bool woken_ SLUICE_GUARDED_BY(mu_) = false;
  bool final_ SLUICE_GUARDED_BY(mu_) = false;
  bool done_ SLUICE_GUARDED_BY(mu_) = false;
  uint64_t generation_ SLUICE_GUARDED_BY(mu_) = 0;
};

}  // namespace

void StartWaitingAcquire(WaitPlan plan) {
  std::make_shared<WaitingAcquire>(std::move(plan))->Start();
}

}  // namespace sluice::internal
