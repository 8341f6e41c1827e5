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
  // Every call is made (and so validated) before any is sent: bad input spends nothing.
  // Stages: runs of neighbouring limits that the store decides in one atomic step (the
  // composite script: one client, one CompositeGroup — one Redis, or one cluster slot —
  // and no shadow limiter, which must never make the composite refuse; the staged path
  // applies shadow mode per limit). A single run is the one-step path.
  std::vector<std::pair<std::size_t, std::size_t>> runs;  // [begin, end) of each stage
  std::optional<uint32_t> group;  // of the last run; nullopt: a stage of its own
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const Limiter& limiter = *checks[i].limiter;
    internal::CheckCall call;
    if (Status s = limiter.MakeCall(internal::Op::kConsume, checks[i].id, each, call); !s.ok()) {
      return finish(std::move(s));
    }
    const std::optional<uint32_t> g =
        limiter.options_.shadow ? std::nullopt : limiter.core_->store->CompositeGroup(call.key);
    const bool joins = g && group && *g == *group &&
                       limiter.core_ == checks[runs.back().first].limiter->core_ &&
                       runs.back().second - runs.back().first < internal::kMaxCompositeCalls;
    if (joins) {
      ++runs.back().second;
    } else {
      runs.emplace_back(i, i + 1);
    }
    group = g;
  }

  // One stage after the other, most specific first; a refusal (or an error) refunds the
  // limits that admitted in earlier stages, newest first, where each counted the request
  // (a stage's composite counts all of its limits or none), and then answers. The state
  // holds copies of the limiters and ids (the caller's may go).
  struct Staged {
    std::vector<Limiter> limiters;
    std::vector<std::string> ids;
    std::vector<std::pair<std::size_t, std::size_t>> runs;
    CheckOptions each;
    bool repeats = false;
    std::vector<Decision> admitted;  // per limit checked so far
    CompositeDecision result;
    std::optional<StatusOr<CompositeDecision>> answer;  // set once a limit refused or failed
    CompositeDecisionCallback finish;
    // Step r: check stage r. Refund j: give back limit j - 1 and below, then answer.
    std::function<void(const std::shared_ptr<Staged>&, std::size_t)> step, refund;
    // Stage r (begin `first`) refused at limit `index` with `d`, or failed: answer so
    // after the refunds.
    void Refused(const std::shared_ptr<Staged>& st, std::size_t first, std::size_t index,
                 StatusOr<Decision> d) {
      if (d.ok()) {
        result.decision = *d;
        result.decided_by = index;
        answer = result;
      } else {
        answer = d.status();
      }
      refund(st, first);
    }
    void Admitted(std::size_t index, const Decision& d) {
      if (admitted.empty() || d.remaining < result.decision.remaining) {
        result.decision = d;
        result.decided_by = index;
      }
      admitted.push_back(d);
    }
  };
  auto staged = std::make_shared<Staged>();
  staged->limiters.reserve(checks.size());
  staged->ids.reserve(checks.size());
  for (const LimitCheck& c : checks) {
    staged->limiters.push_back(*c.limiter);
    staged->ids.emplace_back(c.id);
  }
  staged->runs = std::move(runs);
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
  staged->step = [](const std::shared_ptr<Staged>& st, std::size_t r) {
    if (r == st->runs.size()) {
      CompositeDecisionCallback answer_with = std::move(st->finish);
      CompositeDecision result = st->result;
      result.decisions = std::move(st->admitted);
      return answer_with(std::move(result));
    }
    // Plain names (not a structured binding): the callback below captures `first`.
    const std::size_t first = st->runs[r].first, end = st->runs[r].second;
    std::vector<internal::CheckCall> calls(end - first);
    for (std::size_t i = first; i < end; ++i) {
      internal::CheckCall& call = calls[i - first];
      if (Status s = st->limiters[i].MakeCall(internal::Op::kConsume, st->ids[i], st->each, call);
          !s.ok()) {
        return st->Refused(st, first, i, std::move(s));
      }
      call.cache_denials = call.cache_denials && !st->repeats;
    }
    if (calls.size() == 1) {
      st->limiters[first].ExecuteCall(std::move(calls[0]), [st, r, first](StatusOr<Decision> d) {
        if (!d.ok() || !d->allowed) return st->Refused(st, first, first, std::move(d));
        st->Admitted(first, *d);
        st->step(st, r + 1);
      });
      return;
    }
    internal::CompositeCall many;
    many.calls = std::move(calls);
    for (auto& call : many.calls) {
      // One time and one deadline for the whole step.
      call.now_ms = many.calls[0].now_ms;
      call.deadline = many.calls[0].deadline;
    }
    // `stage_core` (captured) keeps the store alive until its callback has run.
    std::shared_ptr<internal::ClientCore> stage_core = st->limiters[first].core_;
    stage_core->store->CheckComposite(
        std::move(many), [st, r, first, stage_core](StatusOr<internal::CompositeOutcome> decided) {
          if (!decided.ok()) return st->Refused(st, first, first, decided.status());
          if (decided->refused_by) {
            return st->Refused(st, first, first + *decided->refused_by, decided->decisions.at(0));
          }
          for (std::size_t i = 0; i < decided->decisions.size(); ++i) {
            st->Admitted(first + i, decided->decisions[i]);
          }
          st->step(st, r + 1);
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
