// Limiter: one limit's checks, peeks, refunds and resets, sent to the client's store.
#include <utility>

#include <set>
#include <string>
#include <vector>

#include "client/client_core.h"
#include "client/local_budget.h"
#include "client/synced_counts.h"
#include "core/keys.h"
#include "core/wait.h"
#include "sluice/client.h"

namespace sluice {

Limiter::Limiter(std::shared_ptr<internal::ClientCore> core, std::string name, Limit limit,
                 LimiterOptions options)
    : core_(std::move(core)),
      name_(std::move(name)),
      limit_(limit),
      options_(options),
      key_head_(internal::KeyHead(core_->options.prefix, name_)) {
  if (options_.local_budget.enabled) {
    budgets_ = std::make_shared<internal::LocalBudgets>(options_.local_budget, limit_);
  }
  if (options_.sync.enabled) {
    synced_ = internal::SyncedCounts::Make(core_, key_head_, limit_, options_);
  }
}

int64_t Limiter::BudgetNowMs() const {
  // The model clock when there is one (tests, `sluice simulate`): the scripts decide on
  // its time, so slices must end on it too. Otherwise a monotonic clock.
  if (core_->options.model_clock) return core_->options.model_clock->NowMs();
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Limiter::GiveBackLeftover(std::string_view id, int64_t units, int64_t window_end_ms) const {
  // Fire and forget: a give-back that fails leaves those units counted (stricter).
  internal::CheckCall call;
  if (!MakeCall(internal::Op::kGiveBack, id, {.cost = units}, call).ok()) return;
  call.limit.refill = window_end_ms;  // the window that counted them (ARGV[6])
  ExecuteCall(std::move(call), [](const StatusOr<Decision>&) {});
}

void Limiter::ExecuteBudgeted(internal::CheckCall call, std::string id,
                              DecisionCallback done) const {
  const int64_t cost = call.cost;
  const int64_t sent = BudgetNowMs();
  internal::LocalBudgets::Leftover leftover;
  std::optional<Decision> local = budgets_->TrySpend(id, cost, sent, &leftover);
  if (leftover.units > 0) GiveBackLeftover(id, leftover.units, leftover.window_end_ms);
  if (local) {
    done(*local);
    return;
  }
  const int64_t want = budgets_->Want(id, cost, sent);
  if (want <= cost) {
    ExecuteCall(std::move(call), std::move(done));
    return;
  }
  // One atomic step takes the request's cost and the slice; refused (what is left is
  // less than both), the request is asked for alone.
  internal::CheckCall alone = call;
  call.cost = want;
  call.request_cost = cost;    // the store failing, the policy decides the request alone
  call.cache_denials = false;  // a refusal of cost + slice says nothing about cost alone
  // sliding_window: a take, whose reply names the window (for giving units back).
  const bool take = call.limit.algorithm == Algorithm::kSlidingWindow;
  if (take) call.op = internal::Op::kTake;
  const std::shared_ptr<internal::LocalBudgets> budgets = budgets_;
  const Limiter self = *this;
  ExecuteCall(std::move(call), [self, budgets, alone = std::move(alone), id = std::move(id), cost,
                                want, sent, take,
                                done = std::move(done)](StatusOr<Decision> result) mutable {
    int64_t window_end = 0;
    if (take && result.ok() && result->allowed) {
      window_end = result->retry_after.count();  // a take's: the window's end
      result->retry_after = std::chrono::milliseconds(0);
    }
    if (result.ok() && result->source == DecisionSource::kStore && result->allowed) {
      // The slice is this id's to spend, here (nothing when its life is over before
      // it begins: a bucket that was nearly full, see LocalBudgets::SliceLifeMs).
      internal::LocalBudgets::Leftover replaced;
      result->remaining +=
          budgets->Fill(id, want - cost, sent, result->reset_after.count(), window_end, &replaced);
      if (replaced.units > 0) self.GiveBackLeftover(id, replaced.units, replaced.window_end_ms);
      done(std::move(result));
      return;
    }
    if (result.ok() && result->source == DecisionSource::kStore) {
      if (result->remaining >= cost) {
        // Less left than cost + slice, enough for the cost: asked for alone.
        self.ExecuteCall(std::move(alone), std::move(done));
        return;
      }
      // Not even the cost is left: this refusal is the answer the cost alone would
      // get (nothing frees units before its retry_after), and until then this id
      // takes the plain path, where the denial cache answers.
      budgets->Exhausted(id, sent + result->retry_after.count());
    }
    done(std::move(result));  // a failure policy decided, or an error: as without slices
  });
}

std::string Limiter::KeyOf(std::string_view id, Algorithm algorithm) const {
  if (options_.colocate) {
    return internal::MakeColocatedKey(core_->options.prefix, name_, options_.colocate->separator,
                                      id, internal::AlgorithmSuffix(algorithm));
  }
  return internal::MakeKey(key_head_, id, algorithm);
}

StatusOr<std::string> Limiter::KeyFor(std::string_view id) const {
  if (id.empty()) return InvalidArgumentError("id is empty");
  return KeyOf(id, limit_.algorithm);
}

Status Limiter::MakeCall(internal::Op op, std::string_view id, const CheckOptions& options,
                         internal::CheckCall& call) const {
  if (id.empty()) return InvalidArgumentError("id is empty");
  const Limit& limit = options.limit ? *options.limit : limit_;
  if (options.limit) {
    if (Status s = limit.Validate(); !s.ok()) return s;
  }
  if (options.cost < 1 || options.cost > kMaxLimit) {
    return InvalidArgumentError(std::string(op == internal::Op::kRefund ? "amount" : "cost") +
                                " must be between 1 and " + std::to_string(kMaxLimit) + ", got " +
                                std::to_string(options.cost));
  }
  const auto deadline = options.deadline.value_or(core_->options.deadline);
  if (deadline.count() <= 0) return InvalidArgumentError("deadline must be > 0 ms");
  call.op = op;
  call.key = KeyOf(id, limit.algorithm);
  call.limit = limit;
  call.cost = options.cost;
  if (core_->options.model_clock) call.now_ms = core_->options.model_clock->NowMs();
  call.deadline = std::chrono::steady_clock::now() + deadline;
  call.on_failure = options_.on_failure == FailurePolicy::kDefault ? core_->options.on_failure
                                                                   : options_.on_failure;
  call.servers = options_.servers > 0 ? options_.servers : core_->options.servers;
  call.cache_denials = options_.cache_denials;
  call.block_ms = options_.block_for.count();
  call.refuse_evicting = options_.refuse_evicting_store;
  call.counted_by = options.counted_by;
  return Status::Ok();
}

void Limiter::Execute(internal::Op op, std::string_view id, const CheckOptions& options,
                      DecisionCallback done) const {
  internal::CheckCall call;
  if (Status s = MakeCall(op, id, options, call); !s.ok()) {
    done(std::move(s));
    return;
  }
  if (budgets_ && op == internal::Op::kConsume && !options.limit && !options_.shadow) {
    ExecuteBudgeted(std::move(call), std::string(id), std::move(done));
    return;
  }
  if (synced_ && op == internal::Op::kConsume && !options.limit && !options_.shadow &&
      synced_->Check(id, call, done)) {
    return;
  }
  ExecuteCall(std::move(call), std::move(done));
}

void Limiter::ExecuteCall(internal::CheckCall call, DecisionCallback done) const {
  if (options_.shadow && call.op == internal::Op::kConsume) {
    done = [policy = core_->policy, done = std::move(done)](StatusOr<Decision> result) {
      if (result.ok() && !result->allowed) {
        result->allowed = true;
        result->shadow_refused = true;
        policy->CountShadowRefusal();
      }
      done(std::move(result));
    };
  }
  // Keeps the store alive until Check returns: `done` may run on an I/O thread before
  // that and drop the last reference to this limiter and its client.
  const std::shared_ptr<internal::ClientCore> core = core_;
  core->store->Check(std::move(call), std::move(done));
}

StatusOr<Decision> Limiter::ExecuteSync(internal::Op op, std::string_view id,
                                        const CheckOptions& options) const {
  return internal::WaitFor<StatusOr<Decision>>(
      [&](DecisionCallback done) { Execute(op, id, options, std::move(done)); });
}

void Limiter::CheckAsync(std::string_view id, const CheckOptions& options,
                         DecisionCallback done) const {
  // A result known at once (embedded store, open breaker, cached denial, bad input) is
  // delivered on an I/O thread, never inline: a callback that checks again must not
  // recurse without bound.
  internal::CallNeverInline<StatusOr<Decision>>(core_, std::move(done), [&](DecisionCallback then) {
    Execute(internal::Op::kConsume, id, options, std::move(then));
  });
}

StatusOr<Decision> Limiter::Check(std::string_view id, const CheckOptions& options) const {
  return ExecuteSync(internal::Op::kConsume, id, options);
}

StatusOr<Decision> Limiter::Peek(std::string_view id, const CheckOptions& options) const {
  return ExecuteSync(internal::Op::kPeek, id, options);
}

StatusOr<Decision> Limiter::Refund(std::string_view id, int64_t amount,
                                   const CheckOptions& options) const {
  CheckOptions with = options;
  with.cost = amount;
  if (options.counted_by == DecisionSource::kLocalBudget) {
    // Units from a slice go back to it while it lasts; after, they would be spent past
    // the slice's end (docs/design.md §7), so nothing is given back.
    if (id.empty()) return InvalidArgumentError("id is empty");
    if (amount < 1 || amount > kMaxLimit) {
      return InvalidArgumentError("amount must be between 1 and " + std::to_string(kMaxLimit) +
                                  ", got " + std::to_string(amount));
    }
    if (budgets_) budgets_->GiveBack(id, amount, BudgetNowMs());
    Decision d;
    d.allowed = true;
    d.limit = limit_.limit;
    d.source = DecisionSource::kLocalBudget;
    return d;
  }
  return ExecuteSync(internal::Op::kRefund, id, with);
}

StatusOr<Decision> Limiter::Debit(std::string_view id, int64_t cost,
                                  const CheckOptions& options) const {
  CheckOptions with = options;
  with.cost = cost;
  DropSliceForDebit(id);
  return ExecuteSync(internal::Op::kDebit, id, with);
}

void Limiter::DropSliceForDebit(std::string_view id) const {
  // A slice this process holds would go on admitting an id the debit may put in debt:
  // dropped, its units left counted in the store (stricter), so the next check asks the
  // store. (A periodic sync's local counts are the id's spending: kept, and pushed.)
  if (budgets_ && !id.empty()) budgets_->Drop(id, BudgetNowMs());
}

void Limiter::DebitAsync(std::string_view id, int64_t cost, const CheckOptions& options,
                         DecisionCallback done) const {
  CheckOptions with = options;
  with.cost = cost;
  DropSliceForDebit(id);
  internal::CallNeverInline<StatusOr<Decision>>(core_, std::move(done), [&](DecisionCallback then) {
    Execute(internal::Op::kDebit, id, with, std::move(then));
  });
}

StatusOr<Decision> Limiter::Reset(std::string_view id, const CheckOptions& options) const {
  CheckOptions with = options;
  with.cost = 1;
  if (!id.empty()) {
    // What this process holds of the id's count goes with it (before the reset is sent:
    // nothing held now may be spent after the store forgot it).
    if (budgets_) budgets_->Drop(id, BudgetNowMs());
    if (synced_) synced_->Drop(id);
  }
  return ExecuteSync(internal::Op::kReset, id, with);
}

}  // namespace sluice
