// CheckComposite (docs/design.md §6): several limits on one request, in one store step
// when the store can, staged with refunds otherwise. CheckCompositeAsync validates and
// plans the stages, then a CompositeRun checks them one after the other; CheckComposite
// is CheckCompositeAsync plus WaitFor.
#include <utility>

#include <atomic>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "client/client_core.h"
#include "core/keys.h"
#include "core/wait.h"
#include "sluice/client.h"

namespace sluice {
namespace internal {

// One composite check in flight: its stages, what each admitted, and the answer. It
// holds copies of the limiters and ids (the caller's may go), and keeps itself alive
// through the callbacks of its store calls.
class CompositeRun : public std::enable_shared_from_this<CompositeRun> {
 public:
  using Stages = std::vector<std::pair<std::size_t, std::size_t>>;  // [begin, end) of each

  // The options every limit is checked with: the request's, without a per-call limit.
  static CheckOptions EachOptions(const CheckOptions& options) {
    CheckOptions each = options;
    each.limit.reset();
    each.counted_by = DecisionSource::kStore;
    return each;
  }
  // Whether a key is listed twice: a refusal then describes a state no single check sees
  // (the other listing's spending, given back afterwards), and is not cached.
  static bool RepeatsAKey(std::span<const LimitCheck> checks);
  // The stages: runs of neighbouring limits that the store decides in one atomic step
  // (the composite script: one client, one CompositeGroup — one Redis, or one cluster
  // slot — and no shadow limiter, which must never make the composite refuse; the staged
  // path applies shadow mode per limit). A single run is the one-step path. Every call
  // is made (and so validated) here, before any is sent: bad input spends nothing.
  static StatusOr<Stages> Plan(std::span<const LimitCheck> checks, const CheckOptions& each);

  CompositeRun(std::span<const LimitCheck> checks, Stages stages, CheckOptions each, bool repeats,
               CompositeDecisionCallback finish);

  // Checks stage `r`, then the next; past the last, answers with every limit's state.
  void Step(std::size_t r);

 private:
  // Stage `first`.. refused at limit `index` with `d`, or failed: answer so after
  // refunding the earlier stages.
  void Refused(std::size_t first, std::size_t index, StatusOr<Decision> d);
  void Admitted(std::size_t index, const Decision& d);
  // Gives back limit j - 1 and below, newest first, where each counted the request (a
  // stage's composite counts all of its limits or none), then answers.
  void Refund(std::size_t j);
  // A stage of one limit: its own check.
  void CheckOne(std::size_t r, CheckCall call);
  // A stage of several: one composite store call.
  void CheckTogether(std::size_t r, std::vector<CheckCall> calls);
  void Answer(StatusOr<CompositeDecision> answer) {
    // Moved out first: answering may drop the last reference to this run.
    CompositeDecisionCallback answer_with = std::move(finish_);
    answer_with(std::move(answer));
  }

  std::vector<Limiter> limiters_;
  std::vector<std::string> ids_;
  const Stages stages_;
  const CheckOptions each_;
  const bool repeats_;
  std::vector<Decision> admitted_;  // per limit checked so far
  CompositeDecision result_;
  std::optional<StatusOr<CompositeDecision>> answer_;  // set once a limit refused or failed
  CompositeDecisionCallback finish_;
};

bool CompositeRun::RepeatsAKey(std::span<const LimitCheck> checks) {
  std::set<std::pair<const ClientCore*, std::string>> keys;
  for (const LimitCheck& c : checks) {
    StatusOr<std::string> key = c.limiter->KeyFor(c.id);
    if (key.ok() && !keys.emplace(c.limiter->core_.get(), *key).second) return true;
  }
  return false;
}

StatusOr<CompositeRun::Stages> CompositeRun::Plan(std::span<const LimitCheck> checks,
                                                  const CheckOptions& each) {
  Stages stages;
  std::optional<uint32_t> group;  // of the last stage; nullopt: a stage of its own
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const Limiter& limiter = *checks[i].limiter;
    CheckCall call;
    if (Status s = limiter.MakeCall(Op::kConsume, checks[i].id, each, call); !s.ok()) return s;
    const std::optional<uint32_t> g =
        limiter.options_.shadow ? std::nullopt : limiter.core_->store->CompositeGroup(call.key);
    const bool joins = g && group && *g == *group &&
                       limiter.core_ == checks[stages.back().first].limiter->core_ &&
                       stages.back().second - stages.back().first < kMaxCompositeCalls;
    if (joins) {
      ++stages.back().second;
    } else {
      stages.emplace_back(i, i + 1);
    }
    group = g;
  }
  return stages;
}

CompositeRun::CompositeRun(std::span<const LimitCheck> checks, Stages stages, CheckOptions each,
                           bool repeats, CompositeDecisionCallback finish)
    : stages_(std::move(stages)),
      each_(std::move(each)),
      repeats_(repeats),
      finish_(std::move(finish)) {
  limiters_.reserve(checks.size());
  ids_.reserve(checks.size());
  for (const LimitCheck& c : checks) {
    limiters_.push_back(*c.limiter);
    ids_.emplace_back(c.id);
  }
}

void CompositeRun::Refused(std::size_t first, std::size_t index, StatusOr<Decision> d) {
  if (d.ok()) {
    result_.decision = *d;
    result_.decided_by = index;
    answer_ = result_;
  } else {
    answer_ = d.status();
  }
  Refund(first);
}

void CompositeRun::Admitted(std::size_t index, const Decision& d) {
  if (admitted_.empty() || d.remaining < result_.decision.remaining) {
    result_.decision = d;
    result_.decided_by = index;
  }
  admitted_.push_back(d);
}

void CompositeRun::Refund(std::size_t j) {
  while (j > 0 && admitted_[j - 1].shadow_refused) --j;  // a shadow refusal counted nothing
  if (j == 0) return Answer(std::move(*answer_));
  const std::size_t k = j - 1;
  CheckOptions give_back{
      .cost = each_.cost, .deadline = each_.deadline, .counted_by = admitted_[k].source};
  // A refund the store cannot take leaves the request counted (an over-count).
  limiters_[k].Execute(Op::kRefund, ids_[k], give_back,
                       [self = shared_from_this(), k](StatusOr<Decision>) { self->Refund(k); });
}

void CompositeRun::Step(std::size_t r) {
  if (r == stages_.size()) {
    CompositeDecision result = result_;
    result.decisions = std::move(admitted_);
    return Answer(std::move(result));
  }
  const auto [first, end] = stages_[r];
  std::vector<CheckCall> calls(end - first);
  for (std::size_t i = first; i < end; ++i) {
    CheckCall& call = calls[i - first];
    if (Status s = limiters_[i].MakeCall(Op::kConsume, ids_[i], each_, call); !s.ok()) {
      return Refused(first, i, std::move(s));
    }
    call.cache_denials = call.cache_denials && !repeats_;
  }
  if (calls.size() == 1) return CheckOne(r, std::move(calls[0]));
  CheckTogether(r, std::move(calls));
}

void CompositeRun::CheckOne(std::size_t r, CheckCall call) {
  const std::size_t first = stages_[r].first;
  limiters_[first].ExecuteCall(std::move(call),
                               [self = shared_from_this(), r, first](StatusOr<Decision> d) {
                                 if (!d.ok() || !d->allowed)
                                   return self->Refused(first, first, std::move(d));
                                 self->Admitted(first, *d);
                                 self->Step(r + 1);
                               });
}

void CompositeRun::CheckTogether(std::size_t r, std::vector<CheckCall> calls) {
  const std::size_t first = stages_[r].first;
  CompositeCall many;
  many.calls = std::move(calls);
  for (auto& call : many.calls) {
    // One time and one deadline for the whole step.
    call.now_ms = many.calls[0].now_ms;
    call.deadline = many.calls[0].deadline;
  }
  // `core` (captured) keeps the store alive until its callback has run.
  std::shared_ptr<ClientCore> core = limiters_[first].core_;
  core->store->CheckComposite(std::move(many), [self = shared_from_this(), r, first,
                                                core](StatusOr<CompositeOutcome> decided) {
    if (!decided.ok()) return self->Refused(first, first, decided.status());
    if (decided->refused_by) {
      return self->Refused(first, first + *decided->refused_by, decided->decisions.at(0));
    }
    for (std::size_t i = 0; i < decided->decisions.size(); ++i) {
      self->Admitted(first + i, decided->decisions[i]);
    }
    self->Step(r + 1);
  });
}

}  // namespace internal

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
  const CheckOptions each = internal::CompositeRun::EachOptions(options);
  StatusOr<internal::CompositeRun::Stages> stages = internal::CompositeRun::Plan(checks, each);
  if (!stages.ok()) return finish(stages.status());
  // One stage after the other, most specific first; a refusal (or an error) refunds the
  // limits that admitted in earlier stages and then answers.
  std::make_shared<internal::CompositeRun>(checks, *std::move(stages), each,
                                           internal::CompositeRun::RepeatsAKey(checks),
                                           std::move(finish))
      ->Step(0);
}

StatusOr<CompositeDecision> CheckComposite(std::span<const LimitCheck> checks,
                                           const CheckOptions& options) {
  return internal::WaitFor<StatusOr<CompositeDecision>>([&](CompositeDecisionCallback done) {
    CheckCompositeAsync(checks, options, std::move(done));
  });
}

}  // namespace sluice
