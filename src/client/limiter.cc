// Limiter: one limit's checks, peeks, refunds and resets, sent to the client's store.
#include <utility>

#include <set>
#include <string>
#include <vector>

#include "client/client_core.h"
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
      key_head_(internal::KeyHead(core_->options.prefix, name_)) {}

StatusOr<std::string> Limiter::KeyFor(std::string_view id) const {
  if (id.empty()) return InvalidArgumentError("id is empty");
  return internal::MakeKey(key_head_, id, limit_.algorithm);
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
  call.key = internal::MakeKey(key_head_, id, limit.algorithm);
  call.limit = limit;
  call.cost = options.cost;
  if (core_->options.model_clock) call.now_ms = core_->options.model_clock->NowMs();
  call.deadline = std::chrono::steady_clock::now() + deadline;
  call.on_failure = options_.on_failure == FailurePolicy::kDefault ? core_->options.on_failure
                                                                   : options_.on_failure;
  call.servers = options_.servers > 0 ? options_.servers : core_->options.servers;
  call.cache_denials = options_.cache_denials;
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
  auto returned = std::make_shared<std::atomic<bool>>(false);
  Execute(internal::Op::kConsume, id, options,
          [returned, core = core_, done = std::move(done)](StatusOr<Decision> result) mutable {
            if (returned->load(std::memory_order_acquire)) {
              done(std::move(result));
              return;
            }
            core->Post([done = std::move(done), result = std::move(result)]() mutable {
              done(std::move(result));
            });
          });
  returned->store(true, std::memory_order_release);
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
  return ExecuteSync(internal::Op::kRefund, id, with);
}

StatusOr<Decision> Limiter::Reset(std::string_view id, const CheckOptions& options) const {
  CheckOptions with = options;
  with.cost = 1;
  return ExecuteSync(internal::Op::kReset, id, with);
}

}  // namespace sluice
