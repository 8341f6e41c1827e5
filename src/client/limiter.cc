// Limiter: one limit's checks, peeks, refunds and resets, sent to the client's store.
#include <algorithm>
#include <utility>

#include <algorithm>
#include <cctype>
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
  if (core_->options.runtime_overrides) core_->overrides->Track(name_);
}

namespace {

// `limit` under a runtime override of limit >= 1: the override's limit, and its window
// when it names one; token_bucket and gcra refill in proportion (an explicit refill r of
// a limit L becomes r * L' / L, at least 1: 100 tokens at 10/s overridden to 500 is 500
// at 50/s; refill 0, "limit per window", follows the new limit by itself).
Limit Overridden(Limit limit, const internal::OverrideCopy::Applied& o) {
  const int64_t to = std::min(o.limit, kMaxLimit);
  if (limit.refill > 0 && limit.limit > 0) {
    // In doubles: the product may pass 2^63; a rate needs no more than 53 bits.
    const double scaled = static_cast<double>(limit.refill) * static_cast<double>(to) /
                          static_cast<double>(limit.limit);
    limit.refill = static_cast<int64_t>(std::clamp(scaled, 1.0, static_cast<double>(kMaxLimit)));
  }
  limit.limit = to;
  if (o.window_ms > 0) {
    limit.window = std::chrono::milliseconds(std::min(o.window_ms, kMaxWindow.count()));
  }
  return limit;
}

}  // namespace

void Limiter::ApplyOverride(std::string_view id, internal::CheckCall& call) const {
  if (!core_->options.runtime_overrides) return;
  const std::optional<internal::OverrideCopy::Applied> o = core_->overrides->Find(name_, id);
  if (!o) return;
  const bool decision = call.op == internal::Op::kConsume || call.op == internal::Op::kPeek;
  if (o->limit == 0) {
    // Refuses every request of the id; what is not a request (a refund, a debit, a
    // reset) keeps the limit it had.
    if (!decision) return;
    call.refused_by_override = std::chrono::milliseconds(o->expires_in_ms);
  } else {
    call.limit = Overridden(call.limit, *o);
  }
  call.limit_source = LimitSource::kRuntimeOverride;
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
  call.limit_source = options.limit ? LimitSource::kCall : LimitSource::kLimiter;
  ApplyOverride(id, call);
  return Status::Ok();
}

void Limiter::Execute(internal::Op op, std::string_view id, const CheckOptions& options,
                      DecisionCallback done) const {
  internal::CheckCall call;
  if (Status s = MakeCall(op, id, options, call); !s.ok()) {
    done(std::move(s));
    return;
  }
  // An id under a runtime override takes the exact path: the slices and shares of the
  // local budget and the periodic sync are of the limiter's own limit.
  const bool own_limit = call.limit_source == LimitSource::kLimiter;
  if (budgets_ && op == internal::Op::kConsume && own_limit && !options_.shadow) {
    ExecuteBudgeted(std::move(call), std::string(id), std::move(done));
    return;
  }
  if (synced_ && op == internal::Op::kConsume && own_limit && !options_.shadow &&
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

Status Limiter::MakeReservationCall(internal::Op op, std::string_view id, std::string_view token,
                                    int64_t amount, const CheckOptions& options,
                                    internal::CheckCall& call) const {
  if (amount < 0 || amount > kMaxLimit) {
    return InvalidArgumentError("actual cost must be between 0 and " + std::to_string(kMaxLimit) +
                                ", got " + std::to_string(amount));
  }
  if (op == internal::Op::kReserve && options_.block_for.count() > 0) {
    // The reservation script runs the algorithm without the block's gate: a reserve would
    // neither see a block nor start one.
    return InvalidArgumentError("limiter '" + name_ +
                                "' has a block (block_for): a reservation cannot be held on it");
  }
  CheckOptions with = options;
  with.cost = std::max<int64_t>(amount, 1);  // a settle's actual may be 0
  if (Status s = MakeCall(op, id, with, call); !s.ok()) return s;
  call.cost = amount;
  call.cache_denials = false;
  call.reservation_key = call.key;
  static_assert(internal::kTokenChars == internal::kReservationTokenChars,
                "the admin API knows a reservation's key by its token's size");
  call.reservation_key.append(internal::kReservationInfix).append(token);
  return Status::Ok();
}

void Limiter::ReserveAsync(std::string_view id, int64_t estimate, const CheckOptions& options,
                           ReservationCallback done) const {
  std::string token = internal::NewToken();
  internal::CheckCall call;
  Status s = estimate < 1
                 ? InvalidArgumentError("estimate must be >= 1, got " + std::to_string(estimate))
                 : MakeReservationCall(internal::Op::kReserve, id, token, estimate, options, call);
  auto finish = [token = std::move(token), id = std::string(id), estimate,
                 done = std::move(done)](StatusOr<Decision> d) {
    if (!d.ok()) return done(d.status());
    Reservation r;
    r.decision = *d;
    r.estimate = estimate;
    if (d->allowed) r.ref = token + id;
    done(std::move(r));
  };
  internal::CallNeverInline<StatusOr<Decision>>(core_, std::move(finish),
                                                [&](DecisionCallback then) {
                                                  if (!s.ok()) return then(std::move(s));
                                                  ExecuteCall(std::move(call), std::move(then));
                                                });
}

StatusOr<Reservation> Limiter::Reserve(std::string_view id, int64_t estimate,
                                       const CheckOptions& options) const {
  return internal::WaitFor<StatusOr<Reservation>>(
      [&](ReservationCallback done) { ReserveAsync(id, estimate, options, std::move(done)); });
}

void Limiter::SettleAsync(std::string_view ref, int64_t actual, const CheckOptions& options,
                          DecisionCallback done) const {
  internal::CheckCall call;
  Status s = Status::Ok();
  const bool token_ok =
      ref.size() > internal::kTokenChars &&
      std::all_of(ref.begin(), ref.begin() + internal::kTokenChars, [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
      });
  if (!token_ok) {
    s = InvalidArgumentError("not a reservation reference (Reservation::ref)");
  } else {
    const std::string_view id = ref.substr(internal::kTokenChars);
    s = MakeReservationCall(internal::Op::kSettle, id, ref.substr(0, internal::kTokenChars), actual,
                            options, call);
    if (s.ok() && actual > 0) DropSliceForDebit(id);  // the settle may debit
  }
  internal::CallNeverInline<StatusOr<Decision>>(core_, std::move(done), [&](DecisionCallback then) {
    if (!s.ok()) return then(std::move(s));
    ExecuteCall(std::move(call), std::move(then));
  });
}

StatusOr<Decision> Limiter::Settle(std::string_view ref, int64_t actual,
                                   const CheckOptions& options) const {
  return internal::WaitFor<StatusOr<Decision>>(
      [&](DecisionCallback done) { SettleAsync(ref, actual, options, std::move(done)); });
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
