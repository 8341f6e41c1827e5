// CheckComposite (docs/design.md §6): several limits on one request, in one store step
// when the store can, staged with refunds otherwise. CheckCompositeAsync is the
// implementation; CheckComposite is it plus WaitFor.
#include <utility>

#include <atomic>
#include <set>
#include <string>
#include <vector>

#include "client/client_core.h"
#include "core/keys.h"
#include "core/wait.h"
#include "sluice/client.h"

namespace sluice {

void CheckCompositeAsync(std::span<const LimitCheck> checks, const CheckOptions& options,
                         CompositeDecisionCallback done) {
  if (checks.empty()) {
    done(InvalidArgumentError("CheckComposite needs at least one limit"));
    return;
  }
  if (checks[0].limiter == nullptr) {
    done(InvalidArgumentError("CheckComposite: a LimitCheck has no limiter"));
    return;
  }
  // `done` runs on an I/O thread of the first limiter's client, never inside this call:
  // a result known before this call returns (bad input, an open breaker, a cached
  // denial, the embedded store) is posted.
  const std::shared_ptr<internal::ClientCore> core = checks[0].limiter->core_;
  auto returned = std::make_shared<std::atomic<bool>>(false);
  CompositeDecisionCallback finish = [returned, core,
                                      done = std::move(done)](StatusOr<CompositeDecision> r) {
    if (returned->load(std::memory_order_acquire)) {
      done(std::move(r));
      return;
    }
    core->Post([done, r = std::move(r)]() mutable { done(std::move(r)); });
  };
  struct Returned {
    std::atomic<bool>& flag;
    ~Returned() { flag.store(true, std::memory_order_release); }
  } mark_returned{*returned};

  for (const LimitCheck& c : checks) {
    if (c.limiter == nullptr)
      return finish(InvalidArgumentError("CheckComposite: a LimitCheck has no limiter"));
  }
  CheckOptions each = options;
  each.limit.reset();
  each.counted_by = DecisionSource::kStore;
  // The same key listed twice: a refusal then describes a state no single check sees
  // (the other listing's spending, given back afterwards); it is not cached.
  bool repeats = false;
  {
    std::set<std::pair<const internal::ClientCore*, std::string>> keys;
    for (const LimitCheck& c : checks) {
      StatusOr<std::string> key = c.limiter->KeyFor(c.id);
      if (key.ok() && !keys.emplace(c.limiter->core_.get(), *key).second) repeats = true;
    }
  }
  // One atomic step (the composite script on Redis) when every limiter is on one client
  // whose store decides several keys at once, and none is in shadow mode (a shadow limit
  // must never make the composite refuse; the staged path applies shadow mode per limit).
  bool one_step =
      checks.size() <= internal::kMaxCompositeCalls && core->store->ChecksCompositeAtOnce();
  for (const LimitCheck& c : checks) {
    one_step = one_step && c.limiter->core_ == core && !c.limiter->options_.shadow;
  }
  // Every call is made (and so validated) before any is sent: bad input spends nothing.
  std::vector<internal::CheckCall> calls(checks.size());
  for (std::size_t i = 0; i < checks.size(); ++i) {
    if (Status s =
            checks[i].limiter->MakeCall(internal::Op::kConsume, checks[i].id, each, calls[i]);
        !s.ok()) {
      return finish(std::move(s));
    }
    calls[i].cache_denials = calls[i].cache_denials && !repeats;
  }

  if (one_step) {
    internal::CompositeCall many;
    many.calls = std::move(calls);
    for (auto& call : many.calls) {
      // One time and one deadline for the whole step.
      call.now_ms = many.calls[0].now_ms;
      call.deadline = many.calls[0].deadline;
    }
    // `core` (captured) keeps the store alive until its callback has run.
    core->store->CheckComposite(std::move(many), [core, finish = std::move(finish)](
                                                     StatusOr<internal::CompositeOutcome> decided) {
      if (!decided.ok()) return finish(decided.status());
      CompositeDecision result;
      if (decided->refused_by) {
        result.decision = decided->decisions.at(0);
        result.decided_by = *decided->refused_by;
        return finish(result);
      }
      for (std::size_t i = 0; i < decided->decisions.size(); ++i) {
        if (i == 0 || decided->decisions[i].remaining < result.decision.remaining) {
          result.decision = decided->decisions[i];
          result.decided_by = i;
        }
      }
      finish(result);
    });
    return;
  }

  // Staged: one limit after the other, most specific first; a refusal (or an error)
  // refunds the limits that admitted, newest first, where each counted the request, and
  // then answers. The state holds copies of the limiters and ids (the caller's may go).
  struct Staged {
    std::vector<Limiter> limiters;
    std::vector<std::string> ids;
    CheckOptions each;
    bool repeats = false;
    std::vector<Decision> admitted;  // per limit checked so far
    CompositeDecision result;
    std::optional<StatusOr<CompositeDecision>> answer;  // set once a limit refused or failed
    CompositeDecisionCallback finish;
    // Step i: check limit i. Refund j: give back limit j - 1 and below, then answer.
    std::function<void(const std::shared_ptr<Staged>&, std::size_t)> step, refund;
  };
  auto staged = std::make_shared<Staged>();
  staged->limiters.reserve(checks.size());
  staged->ids.reserve(checks.size());
  for (const LimitCheck& c : checks) {
    staged->limiters.push_back(*c.limiter);
    staged->ids.emplace_back(c.id);
  }
  staged->each = each;
  staged->repeats = repeats;
  staged->finish = std::move(finish);
  staged->refund = [](const std::shared_ptr<Staged>& st, std::size_t j) {
    while (j > 0 && st->admitted[j - 1].shadow_refused) --j;  // a shadow refusal counted nothing
    if (j == 0) {
      // Moved out first: finishing may drop the last reference to the state.
      CompositeDecisionCallback answer_with = std::move(st->finish);
      StatusOr<CompositeDecision> answer = std::move(*st->answer);
      return answer_with(std::move(answer));
    }
    const std::size_t k = j - 1;
    CheckOptions give_back{
        .cost = st->each.cost, .deadline = st->each.deadline, .counted_by = st->admitted[k].source};
    // A refund the store cannot take leaves the request counted (an over-count).
    st->limiters[k].Execute(internal::Op::kRefund, st->ids[k], give_back,
                            [st, k](StatusOr<Decision>) { st->refund(st, k); });
  };
  staged->step = [](const std::shared_ptr<Staged>& st, std::size_t i) {
    if (i == st->limiters.size()) {
      CompositeDecisionCallback answer_with = std::move(st->finish);
      CompositeDecision result = st->result;
      return answer_with(result);
    }
    internal::CheckCall call;
    if (Status s = st->limiters[i].MakeCall(internal::Op::kConsume, st->ids[i], st->each, call);
        !s.ok()) {
      st->answer = std::move(s);
      return st->refund(st, i);
    }
    call.cache_denials = call.cache_denials && !st->repeats;
    st->limiters[i].ExecuteCall(std::move(call), [st, i](StatusOr<Decision> d) {
      if (!d.ok() || !d->allowed) {
        if (d.ok()) {
          st->result.decision = *d;
          st->result.decided_by = i;
          st->answer = st->result;
        } else {
          st->answer = d.status();
        }
        return st->refund(st, i);
      }
      if (st->admitted.empty() || d->remaining < st->result.decision.remaining) {
        st->result.decision = *d;
        st->result.decided_by = i;
      }
      st->admitted.push_back(*d);
      st->step(st, i + 1);
    });
  };
  staged->step(staged, 0);
}

StatusOr<CompositeDecision> CheckComposite(std::span<const LimitCheck> checks,
                                           const CheckOptions& options) {
  return internal::WaitFor<StatusOr<CompositeDecision>>([&](CompositeDecisionCallback done) {
    CheckCompositeAsync(checks, options, std::move(done));
  });
}

}  // namespace sluice
