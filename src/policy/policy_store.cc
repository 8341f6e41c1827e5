#include "policy/policy_store.h"

#include <algorithm>

#include "core/client_side.h"
#include "core/process.h"

namespace sluice::internal {
namespace {

// Errors that say the store did not decide. InvalidArgument is the caller's fault and
// reaches the caller; everything else is the store's.
bool IsStoreFailure(const Status& status) {
  return !status.ok() && status.code() != StatusCode::kInvalidArgument;
}

// Why the store did not decide a call that failed with `status` (a store failure).
StoreFailure FailureOf(const Status& status) {
  return status.code() == StatusCode::kDeadlineExceeded ? StoreFailure::kDeadline
                                                        : StoreFailure::kError;
}

// Store failures that the breaker counts: not the caller's fault, and not a backlog in
// this client while the store kept answering (core/client_side.h). A deadline missed
// while the store sent nothing at all (stalled, paused, partitioned) counts.
bool CountsForBreaker(const Status& status) {
  return IsStoreFailure(status) && !IsClientSide(status);
}

// What a call's result says about the store, for the breaker. Every call the breaker let
// through reports one, so that a probe always settles the state.
Breaker::Outcome OutcomeOf(const Status& status) {
  if (status.ok()) return Breaker::Outcome::kSuccess;
  return CountsForBreaker(status) ? Breaker::Outcome::kFailure : Breaker::Outcome::kNeither;
}

// A call whose deadline passed before it reached the store: it waited on this side (for
// a periodic sync in flight, or behind the first step of a local-budget check). Sending
// it cannot give an answer in time, and its expiry says nothing about the store.
Status ExpiredError() {
  return DeadlineExceededError(
      "the call's deadline passed before it could be sent to the store (it waited in this "
      "client)");
}

}  // namespace

PolicyStore::PolicyStore(std::shared_ptr<Store> inner, std::shared_ptr<const Clock> local_clock,
                         BreakerOptions breaker, std::size_t denial_cache_size)
    : inner_(std::move(inner)),
      clock_(local_clock),
      local_(std::move(local_clock)),
      domains_(inner_->HasFaultDomains()),
      breakers_(breaker, [store = inner_.get()] { return store->FaultDomains(); }),
      // The embedded store decides at once, on the caller's thread: asking it late costs
      // nothing and gives the limit's own answer.
      inner_memory_(dynamic_cast<MemoryStore*>(inner_.get())),
      fork_generation_(ForkGeneration()) {
  if (denial_cache_size > 0) denials_.emplace(denial_cache_size);
}

std::size_t PolicyStore::ReclaimStep() {
  std::size_t freed = local_.ReclaimStep();
  if (inner_memory_ != nullptr) freed += inner_memory_->ReclaimStep();
  return freed;
}

bool PolicyStore::Forked() const {
  return ForkGeneration() != fork_generation_;
}

Status PolicyStore::ForkedError() {
  return FailedPreconditionError(
      "this sluice Client was created before fork(): a child process cannot use it (its I/O "
      "threads stayed in the parent); create a new Client in the child");
}

ClientStats PolicyStore::stats() const {
  ClientStats s = inner_->stats();
  s.cached_denials = cached_denials_.load(std::memory_order_relaxed);
  s.policy_decisions = policy_decisions_.load(std::memory_order_relaxed);
  s.shadow_refusals = shadow_refusals_.load(std::memory_order_relaxed);
  s.syncs = syncs_.load(std::memory_order_relaxed);
  return s;
}

CheckCall PolicyStore::LocalCall(const CheckCall& call) {
  CheckCall local = call;
  const int64_t servers = std::max<int64_t>(1, call.servers);
  local.limit.limit = std::max<int64_t>(1, call.limit.limit / servers);
  // token_bucket and gcra: the sustained rate is `refill` per window, so it is shared too
  // (at least 1 per window). refill = 0 means "limit per window": the divided limit then.
  const bool rate =
      call.limit.algorithm == Algorithm::kTokenBucket || call.limit.algorithm == Algorithm::kGcra;
  if (rate && call.limit.refill > 0) {
    local.limit.refill = std::max<int64_t>(1, call.limit.refill / servers);
  }
  return local;
}

StatusOr<Decision> PolicyStore::Fallback(const CheckCall& call, const Breaker& breaker,
                                         StoreFailure why) {
  policy_decisions_.fetch_add(1, std::memory_order_relaxed);
  Decision d;
  d.limit = call.limit.limit;
  switch (call.on_failure) {
    case FailurePolicy::kLocal: {
      // The request's own cost: a slice asked for with it is the store's to give, and a
      // sliding_window take is a plain consume here (nothing is given back to a window).
      CheckCall local = LocalCall(call);
      if (call.request_cost > 0) local.cost = call.request_cost;
      if (local.op == Op::kTake) local.op = Op::kConsume;
      StatusOr<Decision> decided = local_.CheckNow(local);
      if (decided.ok()) {
        decided->source = DecisionSource::kLocalFallback;
        decided->store_failure = why;
      }
      return decided;
    }
    case FailurePolicy::kClosed: {
      d.allowed = false;
      d.remaining = 0;
      // Until the breaker probes again (at least a second: nobody knows better).
      d.retry_after = std::max(breaker.RetryIn(), std::chrono::milliseconds(1000));
      d.reset_after = d.retry_after;
      d.reason = RefusalReason::kStoreUnavailable;
      d.source = DecisionSource::kFailClosed;
      d.store_failure = why;
      return d;
    }
    case FailurePolicy::kDefault:
    case FailurePolicy::kOpen: break;
  }
  d.allowed = true;
  d.remaining = call.limit.limit;
  d.source = DecisionSource::kFailOpen;
  d.store_failure = why;
  return d;
}

void PolicyStore::Check(CheckCall call, DecisionCallback done) {
  if (Forked()) return done(ForkedError());
  if (call.op == Op::kRefund && call.counted_by != DecisionSource::kStore) {
    // Units a policy counted: given back where they were counted, or nowhere.
    if (call.counted_by == DecisionSource::kLocalFallback) {
      StatusOr<Decision> given = local_.CheckNow(LocalCall(call));
      if (given.ok()) given->source = DecisionSource::kLocalFallback;
      done(std::move(given));
      return;
    }
    Decision nothing;  // fail_open, fail_closed, cached denial: nothing was counted
    nothing.allowed = true;
    nothing.limit = call.limit.limit;
    nothing.remaining = call.limit.limit;
    nothing.source = call.counted_by;
    done(nothing);
    return;
  }
  const bool decision = call.op == Op::kConsume || call.op == Op::kPeek || call.op == Op::kTake;
  if (call.op == Op::kSync) syncs_.fetch_add(1, std::memory_order_relaxed);
  const bool cache = denials_ && call.cache_denials && call.op == Op::kConsume;
  // Read before the call goes out: a refund or reset of the key that begins after it
  // keeps its refusal out of the cache.
  const uint64_t generation = cache ? denials_->Generation(call.key) : 0;
  if (cache) {
    if (auto cached = denials_->Lookup(call.key, call.limit, call.cost, CacheNowMs(call))) {
      cached_denials_.fetch_add(1, std::memory_order_relaxed);
      done(*std::move(cached));
      return;
    }
  } else if (denials_ && !decision && call.op != Op::kSync) {
    denials_->Forget(call.key);  // a refund or reset: the remembered refusal may be over
  }
  DomainBreakers::Gate gate = GateOf(call.key);
  if (decision && call.refuse_evicting && Evicting()) {
    done(Fallback(call, *gate.breaker, StoreFailure::kEvicting));
    return;
  }
  if (ExpiredBeforeSending(call)) {
    // Not sent, so not a store failure: the breaker hears nothing of it.
    if (decision) {
      done(Fallback(call, *gate.breaker, StoreFailure::kDeadline));
    } else {
      done(ExpiredError());
    }
    return;
  }
  const Breaker::Pass pass = gate->Allow();
  if (!pass) {
    if (decision) {
      done(Fallback(call, *gate.breaker, StoreFailure::kBreakerOpen));
    } else {
      done(UnavailableError("the store is unavailable (circuit breaker open); retry in " +
                            std::to_string(gate->RetryIn().count()) + " ms"));
    }
    return;
  }
  if (!decision) {
    inner_->Check(std::move(call), [pass, gate = std::move(gate),
                                    done = std::move(done)](StatusOr<Decision> result) {
      gate->Settle(pass, OutcomeOf(result.status()));
      done(std::move(result));
    });
    return;
  }
  // The fallback needs the call after the store had it: keep a copy of what it reads.
  CheckCall fallback = call;
  inner_->Check(std::move(call), [this, pass, gate = std::move(gate), cache, generation,
                                  fallback = std::move(fallback),
                                  done = std::move(done)](StatusOr<Decision> result) {
    gate->Settle(pass, OutcomeOf(result.status()));
    if (result.ok()) {
      if (cache) {
        denials_->Record(fallback.key, fallback.limit, fallback.cost, *result, CacheNowMs(fallback),
                         generation);
      }
      done(std::move(result));
    } else if (IsStoreFailure(result.status())) {
      done(Fallback(fallback, *gate.breaker, FailureOf(result.status())));
    } else {
      done(std::move(result));
    }
  });
}

StatusOr<CompositeOutcome> PolicyStore::FallbackMany(const std::vector<CheckCall>& calls,
                                                     const Breaker& breaker, StoreFailure why) {
  CompositeOutcome out;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    StatusOr<Decision> d = Fallback(calls[i], breaker, why);
    if (d.ok() && d->allowed) {
      out.decisions.push_back(*d);
      continue;
    }
    // Refused: give back what the local fallback admitted for the calls before this one
    // (the local store is this process's: in-process, so the window in which others see
    // it counted is a few microseconds).
    for (std::size_t j = i; j-- > 0;) {
      if (calls[j].on_failure != FailurePolicy::kLocal) continue;
      CheckCall refund = LocalCall(calls[j]);
      refund.op = Op::kRefund;
      (void)local_.CheckNow(refund);
    }
    if (!d.ok()) return d.status();
    return CompositeOutcome{i, {*d}};
  }
  return out;
}

void PolicyStore::CheckComposite(CompositeCall call, CompositeCallback done) {
  if (Forked()) return done(ForkedError());
  std::vector<uint64_t> generations;  // of each call's key, read before the calls go out
  if (denials_) {
    generations.reserve(call.calls.size());
    for (const CheckCall& c : call.calls) generations.push_back(denials_->Generation(c.key));
    for (std::size_t i = 0; i < call.calls.size(); ++i) {
      const CheckCall& c = call.calls[i];
      if (!c.cache_denials) continue;
      if (auto cached = denials_->Lookup(c.key, c.limit, c.cost, CacheNowMs(c))) {
        cached_denials_.fetch_add(1, std::memory_order_relaxed);
        done(CompositeOutcome{i, {*std::move(cached)}});
        return;
      }
    }
  }
  // One domain for all (store/store.h): the first key's.
  DomainBreakers::Gate gate =
      call.calls.empty() ? GateOf(std::string_view()) : GateOf(call.calls.front().key);
  if (!call.calls.empty() && ExpiredBeforeSending(call.calls.front())) {
    done(FallbackMany(call.calls, *gate.breaker, StoreFailure::kDeadline));
    return;
  }
  const bool refused =
      Evicting() && std::any_of(call.calls.begin(), call.calls.end(),
                                [](const CheckCall& c) { return c.refuse_evicting; });
  const Breaker::Pass pass = refused ? Breaker::Pass() : gate->Allow();
  if (!pass) {
    done(FallbackMany(call.calls, *gate.breaker,
                      refused ? StoreFailure::kEvicting : StoreFailure::kBreakerOpen));
    return;
  }
  // The fallback and the denial cache need the calls after the store had them.
  std::vector<CheckCall> calls = call.calls;
  inner_->CheckComposite(
      std::move(call), [this, pass, gate = std::move(gate), calls = std::move(calls),
                        generations = std::move(generations),
                        done = std::move(done)](StatusOr<CompositeOutcome> result) {
        gate->Settle(pass, OutcomeOf(result.status()));
        if (result.ok()) {
          if (denials_ && result->refused_by && calls[*result->refused_by].cache_denials) {
            const CheckCall& c = calls[*result->refused_by];
            denials_->Record(c.key, c.limit, c.cost, result->decisions[0], CacheNowMs(c),
                             generations[*result->refused_by]);
          }
          done(std::move(result));
        } else if (IsStoreFailure(result.status())) {
          done(FallbackMany(calls, *gate.breaker, FailureOf(result.status())));
        } else {
          done(std::move(result));
        }
      });
}

LeaseResult PolicyStore::LeaseFallback(const LeaseCall& call, const Breaker& breaker) {
  policy_decisions_.fetch_add(1, std::memory_order_relaxed);
  switch (call.on_failure) {
    case FailurePolicy::kLocal: {
      LeaseCall local = call;
      // The local fallback does not queue: a waiting acquire is answered as an acquire.
      if (local.args.op == LeaseOp::kWait) local.args.op = LeaseOp::kAcquire;
      local.args.limit = std::max<int64_t>(1, call.args.limit / std::max<int64_t>(1, call.servers));
      LeaseResult result = local_.LeaseNow(local);
      result.source = DecisionSource::kLocalFallback;
      return result;
    }
    case FailurePolicy::kClosed: {
      LeaseResult result;
      result.reply.now_ms = NowMs(call);
      // Until the breaker probes again (at least a second), as for checks.
      result.reply.expires_at_ms =
          result.reply.now_ms +
          std::max(breaker.RetryIn(), std::chrono::milliseconds(1000)).count();
      result.source = DecisionSource::kFailClosed;
      return result;
    }
    case FailurePolicy::kDefault:
    case FailurePolicy::kOpen: break;
  }
  LeaseResult result;
  result.reply.code = 1;
  result.reply.now_ms = NowMs(call);
  result.reply.expires_at_ms = result.reply.now_ms + call.args.ttl_ms;
  result.source = DecisionSource::kFailOpen;
  return result;
}

void PolicyStore::RunLease(LeaseCall call, LeaseCallback done) {
  if (Forked()) return done(ForkedError());
  if (call.local) {
    done(local_.LeaseNow(call));
    return;
  }
  if (call.args.op != LeaseOp::kAcquire && call.args.op != LeaseOp::kWait) {
    // Heartbeats, releases, leaving a queue and the operators' calls never wait on the breaker:
    // they slow no request, and short-circuiting them loses leases (a heartbeat not sent) or keeps
    // slots taken (a release not sent) while Redis may well be answering. Their
    // successes close the breaker (the store answers); their failures are not counted
    // (the checks and acquires that the breaker protects count their own).
    DomainBreakers::Gate gate = GateOf(call.key);
    inner_->RunLease(std::move(call), [gate = std::move(gate),
                                       done = std::move(done)](StatusOr<LeaseResult> result) {
      if (result.ok()) gate->OnAnswered();
      done(std::move(result));
    });
    return;
  }
  DomainBreakers::Gate gate = GateOf(call.key);
  if (ExpiredBeforeSending(call)) {
    done(LeaseFallback(call, *gate.breaker));
    return;
  }
  const Breaker::Pass pass = call.refuse_evicting && Evicting() ? Breaker::Pass() : gate->Allow();
  if (!pass) {
    done(LeaseFallback(call, *gate.breaker));
    return;
  }
  // What the fallback needs (the key and token only for a local lease), without copying
  // strings the common policies never read.
  LeaseCall fallback;
  fallback.args.op = call.args.op;
  fallback.args.limit = call.args.limit;
  fallback.args.ttl_ms = call.args.ttl_ms;
  fallback.now_ms = call.now_ms;
  fallback.on_failure = call.on_failure;
  fallback.servers = call.servers;
  if (call.on_failure == FailurePolicy::kLocal) {
    fallback.key = call.key;
    fallback.args.token = call.args.token;
  }
  inner_->RunLease(std::move(call),
                   [this, pass, gate = std::move(gate), fallback = std::move(fallback),
                    done = std::move(done)](StatusOr<LeaseResult> result) {
                     gate->Settle(pass, OutcomeOf(result.status()));
                     if (!result.ok() && IsStoreFailure(result.status())) {
                       done(LeaseFallback(fallback, *gate.breaker));
                       return;
                     }
                     done(std::move(result));
                   });
}

}  // namespace sluice::internal
