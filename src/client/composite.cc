// CheckComposite (docs/design.md §6): several limits on one request, in one store step
// when the store can, staged with refunds otherwise.
#include <utility>

#include <set>
#include <string>
#include <vector>

#include "client/client_core.h"
#include "core/keys.h"
#include "core/wait.h"
#include "sluice/client.h"

namespace sluice {

StatusOr<CompositeDecision> CheckComposite(std::span<const LimitCheck> checks,
                                           const CheckOptions& options) {
  if (checks.empty()) return InvalidArgumentError("CheckComposite needs at least one limit");
  for (const LimitCheck& c : checks) {
    if (c.limiter == nullptr)
      return InvalidArgumentError("CheckComposite: a LimitCheck has no limiter");
  }
  CheckOptions each = options;
  each.limit.reset();
  each.counted_by = DecisionSource::kStore;
  CompositeDecision result;
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
  const std::shared_ptr<internal::ClientCore>& core = checks[0].limiter->core_;
  bool one_step =
      checks.size() <= internal::kMaxCompositeCalls && core->store->ChecksCompositeAtOnce();
  for (const LimitCheck& c : checks) {
    one_step = one_step && c.limiter->core_ == core && !c.limiter->options_.shadow;
  }
  if (one_step) {
    internal::CompositeCall many;
    many.calls.resize(checks.size());
    for (std::size_t i = 0; i < checks.size(); ++i) {
      const internal::Op consume = internal::Op::kConsume;
      if (Status s = checks[i].limiter->MakeCall(consume, checks[i].id, each, many.calls[i]);
          !s.ok()) {
        return s;
      }
      // One time and one deadline for the whole step.
      many.calls[i].now_ms = many.calls[0].now_ms;
      many.calls[i].deadline = many.calls[0].deadline;
      many.calls[i].cache_denials = many.calls[i].cache_denials && !repeats;
    }
    // Keeps the store alive until CheckComposite returns (as in Limiter::Execute).
    const std::shared_ptr<internal::ClientCore> keep = core;
    StatusOr<internal::CompositeOutcome> decided =
        internal::WaitFor<StatusOr<internal::CompositeOutcome>>(
            [&](std::function<void(StatusOr<internal::CompositeOutcome>)> done) {
              keep->store->CheckComposite(std::move(many), std::move(done));
            });
    if (!decided.ok()) return decided.status();
    if (decided->refused_by) {
      result.decision = decided->decisions.at(0);
      result.decided_by = *decided->refused_by;
      return result;
    }
    for (std::size_t i = 0; i < decided->decisions.size(); ++i) {
      if (i == 0 || decided->decisions[i].remaining < result.decision.remaining) {
        result.decision = decided->decisions[i];
        result.decided_by = i;
      }
    }
    return result;
  }
  std::vector<Decision> admitted;  // per limit checked so far
  for (std::size_t i = 0; i < checks.size(); ++i) {
    internal::CheckCall call;
    const internal::Op consume = internal::Op::kConsume;
    if (Status s = checks[i].limiter->MakeCall(consume, checks[i].id, each, call); !s.ok()) {
      return s;
    }
    call.cache_denials = call.cache_denials && !repeats;
    const Limiter* limiter = checks[i].limiter;
    StatusOr<Decision> d = internal::WaitFor<StatusOr<Decision>>(
        [&](DecisionCallback done) { limiter->ExecuteCall(std::move(call), std::move(done)); });
    if (!d.ok() || !d->allowed) {
      // Give back what the earlier limits counted, newest first, where they counted it.
      for (std::size_t j = i; j-- > 0;) {
        if (admitted[j].shadow_refused) continue;  // a shadow refusal counted nothing
        (void)checks[j].limiter->Refund(
            checks[j].id, each.cost, {.deadline = each.deadline, .counted_by = admitted[j].source});
      }
      if (!d.ok()) return d.status();
      result.decision = *d;
      result.decided_by = i;
      return result;
    }
    if (admitted.empty() || d->remaining < result.decision.remaining) {
      result.decision = *d;
      result.decided_by = i;
    }
    admitted.push_back(*d);
  }
  return result;
}

}  // namespace sluice
