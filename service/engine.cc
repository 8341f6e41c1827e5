#include "service/engine.h"

#include <algorithm>
#include <atomic>
#include <cstdio>

#include <boost/asio/post.hpp>

namespace sluiced {
namespace {

using sluice::Decision;
using sluice::DecisionSource;
using sluice::RefusalReason;
using sluice::Status;
using sluice::StatusOr;
using Clock = std::chrono::steady_clock;

Code CodeOf(const Decision& d) {
  if (d.allowed) return Code::kOk;
  return d.reason == RefusalReason::kStoreUnavailable ? Code::kUnavailable : Code::kOverLimit;
}

Outcome OutcomeOf(const Decision& d) {
  if (d.shadow_refused) return kShadowRefused;
  if (d.allowed) return kAllowed;
  return d.reason == RefusalReason::kStoreUnavailable ? kUnavailable : kOverLimit;
}

// The shared state of one check while its store calls are out.
// requests_per_unit: 0 refuses every request (envoy-ratelimit's way to ban a key); in
// shadow mode it refuses nobody.
Decision ZeroLimitDecision(const Rule& rule, Unit unit) {
  Decision d;
  d.allowed = rule.shadow_mode;
  d.shadow_refused = rule.shadow_mode;
  d.reason = RefusalReason::kOverLimit;
  d.reset_after = d.retry_after =
      rule.shadow_mode ? std::chrono::milliseconds(0) : UnitWindow(unit);
  return d;
}

}  // namespace

std::string_view CodeName(Code code) {
  switch (code) {
    case Code::kOk: return "OK";
    case Code::kOverLimit: return "OVER_LIMIT";
    case Code::kUnavailable: return "UNAVAILABLE";
  }
  return "OK";
}

StatusOr<std::unique_ptr<Engine>> Engine::Create(EngineOptions options,
                                                 std::shared_ptr<const Config> config) {
  // Start and serve while Redis is down: every limit answers by its failure policy
  // until the connection is up.
  options.client.connect_in_background = true;
  auto client = sluice::Client::Create(options.client);
  if (!client.ok()) return client.status();
  std::shared_ptr<sluice::Client> quota_client;
  if (options.quota_deadline && !options.client.url.starts_with("memory:")) {
    sluice::ClientOptions quota = options.client;
    quota.deadline = *options.quota_deadline;
    auto made = sluice::Client::Create(quota);
    if (!made.ok()) return made.status();
    quota_client = std::move(*made);
  }
  std::unique_ptr<Engine> engine(new Engine(std::move(options), std::move(*client)));
  engine->quota_client_ = std::move(quota_client);
  auto probe = engine->client_->MakeLimiter(
      "sluiced-readyz", {.limit = 1000000, .window = std::chrono::seconds(1)},
      {.on_failure = sluice::FailurePolicy::kOpen, .cache_denials = false});
  if (!probe.ok()) return probe.status();
  engine->probe_ = std::move(*probe);
  if (Status s = engine->Reload(std::move(config)); !s.ok()) return s;
  return engine;
}

Engine::Engine(EngineOptions options, std::shared_ptr<sluice::Client> client)
    : options_(std::move(options)), client_(std::move(client)), pool_(options_.blocking_threads) {}

Engine::~Engine() {
  pool_.join();
}

StatusOr<std::shared_ptr<const Engine::Generation>> Engine::Build(
    std::shared_ptr<const Config> config) {
  auto gen = std::make_shared<Generation>();
  for (const auto& rule : config->rules) {
    BuiltRule built;
    built.rule = rule;
    built.counters = metrics_.ForRule(rule->domain, rule->DisplayName());
    if (rule->kind == RuleKind::kConcurrency) {
      sluice::ConcurrencyOptions co{.limit = std::max<int64_t>(1, rule->requests_per_unit),
                                    .lease_ttl = rule->lease_ttl,
                                    .on_failure = rule->failure_mode,
                                    .servers = rule->local_servers,
                                    .max_waiters = rule->max_waiters};
      auto cl = client_->MakeConcurrencyLimiter(rule->limiter_name, co);
      if (!cl.ok())
        return sluice::InvalidArgumentError(rule->position.ToString() + ": " +
                                            cl.status().message());
      built.concurrency = std::move(*cl);
      gen->concurrency[rule->limiter_name] =
          &gen->rules.emplace(rule.get(), std::move(built)).first->second;
      continue;
    } else if (!rule->unlimited && rule->requests_per_unit > 0) {
      auto limiter = client_->MakeLimiter(
          rule->limiter_name, rule->ToLimit(),
          {.on_failure = rule->failure_mode,
           .servers = rule->local_servers,
           .shadow = rule->shadow_mode,
           .block_for = rule->block_duration,
           .colocate = rule->colocate
                           ? std::optional(sluice::LimiterOptions::Colocate{.separator = ','})
                           : std::nullopt});
      if (!limiter.ok())
        return sluice::InvalidArgumentError(rule->position.ToString() + ": " +
                                            limiter.status().message());
      built.limiter = std::move(*limiter);
    }
    gen->rules.emplace(rule.get(), std::move(built));
  }
  for (const auto& domain : config->domains) {
    // envoy-ratelimit applies a RateLimitOverride to any descriptor of a known domain.
    // Its limiter's name cannot be one a rule's path gives (those have no "..").
    auto rule = std::make_shared<Rule>();
    rule->domain = domain.domain;
    rule->path = domain.domain + "/(limit override)";
    rule->name = "(limit override)";  // shown instead of the limiter's hashed name
    char hex[17];
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : domain.domain) h = (h ^ c) * 1099511628211ull;
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
    rule->limiter_name = std::string("override..") + hex;
    rule->requests_per_unit = 1;  // every check passes its own limit
    BuiltRule built;
    built.rule = rule;
    built.counters = metrics_.ForRule(rule->domain, rule->DisplayName());
    auto limiter = client_->MakeLimiter(rule->limiter_name, rule->ToLimit(),
                                        {.on_failure = sluice::FailurePolicy::kDefault});
    if (!limiter.ok()) return limiter.status();
    built.limiter = std::move(*limiter);
    gen->overrides.emplace(domain.domain, std::move(built));
  }
  gen->config = std::move(config);
  return std::shared_ptr<const Generation>(std::move(gen));
}

Status Engine::Reload(std::shared_ptr<const Config> config) {
  auto gen = Build(std::move(config));
  metrics_.ConfigLoad(gen.ok());
  if (!gen.ok()) return gen.status();
  std::lock_guard lock(mu_);
  generation_ = std::move(*gen);
  return Status::Ok();
}

std::shared_ptr<const Engine::Generation> Engine::current() const {
  std::lock_guard lock(mu_);
  return generation_;
}

std::shared_ptr<const Config> Engine::config() const {
  return current()->config;
}

void Engine::Record(const BuiltRule& built, const DescriptorResult& result, Clock::duration took,
                    bool timed) {
  if (!result.decision) {
    if (!result.error.empty()) metrics_.StoreError();
    return;
  }
  const Decision& d = *result.decision;
  built.counters->decisions[OutcomeOf(d)][static_cast<int>(d.source)].fetch_add(
      1, std::memory_order_relaxed);
  if (built.rule->detailed_metric) {
    metrics_.ForDescriptor(built.rule->domain, built.rule->DisplayName(), result.id)
        ->decisions[OutcomeOf(d)]
        .fetch_add(1, std::memory_order_relaxed);
  }
  if (!timed) return;
  switch (d.source) {
    case DecisionSource::kStore: metrics_.ObserveStoreLatency(took); break;
    case DecisionSource::kFailOpen:
    case DecisionSource::kFailClosed:
    case DecisionSource::kLocalFallback: metrics_.StoreError(); break;
    case DecisionSource::kCachedDenial:
    case DecisionSource::kLocalBudget:
    case DecisionSource::kLocalSync: break;
  }
}

struct Engine::Pending {
  CheckResult result;
  CheckDone done;
  Clock::time_point start = Clock::now();
  std::atomic<int> outstanding{0};
};

// Picks the status that answers the request: the first over-limit one, else the first
// unavailable one; an admitted request's headline is the limit with the least remaining
// (a shadow limit refuses nobody: it never heads the RateLimit headers).
void Engine::Finish(const std::shared_ptr<Pending>& p) {
  CheckResult& r = p->result;
  for (std::size_t i = 0; i < r.statuses.size(); ++i) {
    const auto& s = r.statuses[i];
    if (s.code == Code::kOverLimit && r.overall != Code::kOverLimit) {
      r.overall = Code::kOverLimit;
      r.headline = static_cast<int>(i);
    } else if (s.code == Code::kUnavailable && r.overall == Code::kOk) {
      r.overall = Code::kUnavailable;
      r.headline = static_cast<int>(i);
    }
  }
  if (r.overall == Code::kOk) {
    int64_t least = INT64_MAX;
    for (std::size_t i = 0; i < r.statuses.size(); ++i) {
      const auto& s = r.statuses[i];
      if (s.decision && !(s.rule && s.rule->shadow_mode) && s.decision->remaining < least) {
        least = s.decision->remaining;
        r.headline = static_cast<int>(i);
      }
    }
  }
  p->done(std::move(r));
}

// The limits a request is checked against, one item per descriptor that a limit applies
// to; descriptors answered without the store (no rule, unlimited, concurrency,
// requests_per_unit 0) get their status here.
std::vector<Engine::Item> Engine::Plan(const Generation& gen, const DomainConfig& domain,
                                       const CheckRequest& request, CheckResult& result,
                                       bool& zero_refusal) {
  std::vector<Match> matches;
  matches.reserve(request.descriptors.size());
  std::vector<bool> debits(request.descriptors.size(), request.debit);
  for (std::size_t i = 0; i < request.descriptors.size(); ++i) {
    const Entries& entries = request.descriptors[i].entries;
    matches.push_back(MatchDescriptor(domain, entries));
    if (!matches.back().rule && entries.size() >= 2) {
      // A rule's debit_entry: its own entries and one more with that key, which no rule
      // matches as it is (Envoy's stream-done request): a debit of that rule's counter.
      Match head = MatchDescriptor(domain, Entries(entries.begin(), entries.end() - 1));
      if (head.rule && !head.rule->debit_entry.empty() &&
          head.rule->debit_entry == entries.back().first) {
        matches.back() = std::move(head);
        debits[i] = true;
      }
    }
  }
  ApplyReplaces(matches);
  std::vector<Item> items;
  const uint64_t request_hits = request.hits == 0 ? 1 : request.hits;
  for (std::size_t i = 0; i < matches.size(); ++i) {
    DescriptorResult& status = result.statuses[i];
    const auto& desc = request.descriptors[i];
    const BuiltRule* found = matches[i].rule ? &gen.rules.at(matches[i].rule.get()) : nullptr;
    if (desc.limit && (!found || !found->limiter || found->rule->shadow_mode)) {
      // The override is the limit, counted on the domain's override window (as in
      // envoy-ratelimit, an override is never in shadow mode).
      found = &gen.overrides.at(request.domain);
      if (matches[i].id.empty()) matches[i].id = DescriptorId(desc.entries);
    }
    if (!found) continue;
    const Rule& rule = *found->rule;
    status.rule = found->rule;
    status.id = std::move(matches[i].id);
    status.limit = rule.requests_per_unit;
    status.unit = rule.unit;
    status.debit = debits[i];
    if (debits[i] && rule.kind == RuleKind::kConcurrency) {
      status.bad_request = true;
      status.code = Code::kUnavailable;
      status.error = "limit '" + rule.DisplayName() +
                     "' is a concurrency limit, which takes no debits (a rate limit does)";
      continue;
    }
    if (rule.unlimited || rule.kind == RuleKind::kConcurrency) continue;
    const uint64_t hits = desc.hits.value_or(request_hits);
    const int64_t cost = static_cast<int64_t>(std::min<uint64_t>(hits, sluice::kMaxLimit));
    std::optional<sluice::Limit> limit;
    if (desc.limit) {
      status.limit = desc.limit->requests_per_unit;
      status.unit = desc.limit->unit;
      if (status.limit > 0) {
        Rule overridden = rule;
        overridden.requests_per_unit = std::min<int64_t>(status.limit, sluice::kMaxLimit);
        overridden.unit = desc.limit->unit;
        overridden.burst = 0;
        limit = overridden.ToLimit();
      }
    }
    if (status.limit == 0) {
      status.decision = ZeroLimitDecision(rule, status.unit);
      if (desc.limit) status.decision->limit_source = sluice::LimitSource::kCall;
      status.code = CodeOf(*status.decision);
      if (!status.decision->allowed) zero_refusal = true;
      Record(*found, status, {});
      continue;
    }
    items.push_back({i, found, cost, limit, debits[i]});
  }
  return items;
}

void Engine::Set(const std::shared_ptr<Pending>& p, const Item& item, StatusOr<Decision> d,
                 bool timed) {
  DescriptorResult& s = p->result.statuses[item.index];
  if (d.ok()) {
    s.decision = *d;
    s.code = CodeOf(*d);
    // An operator's runtime override is the limit in force (RLS's current_limit too).
    if (d->limit_source == sluice::LimitSource::kRuntimeOverride) s.limit = d->limit;
  } else {
    s.code = Code::kUnavailable;
    s.error = d.status().ToString();
  }
  Record(*item.built, s, Clock::now() - p->start, timed);
  // A request refused (a peek, hits 0, spends nothing and is no refusal of the id).
  if (item.cost > 0 && s.decision && OutcomeOf(*s.decision) == kOverLimit) {
    const Rule& rule = *item.built->rule;
    refused_ids_.Add(rule.domain, rule.limiter_name, s.id, RefusedIds::MinuteNow());
  }
}

// One composite check: a request refused by any limit spends none of them. Started here,
// answered from the client's I/O thread (no pool hop).
void Engine::CheckTogether(const std::shared_ptr<Pending>& pending, std::vector<Item> items) {
  std::vector<sluice::LimitCheck> checks;
  checks.reserve(items.size());
  for (const auto& it : items)
    checks.push_back({&*it.built->limiter, pending->result.statuses[it.index].id});
  const int64_t cost = items.front().cost;
  sluice::CheckCompositeAsync(
      checks, {.cost = cost},
      [this, pending,
       items = std::move(items)](sluice::StatusOr<sluice::CompositeDecision> composite) {
        if (!composite.ok()) {
          for (const auto& it : items) Set(pending, it, composite.status());
        } else {
          const std::size_t decider = composite->decided_by;
          Set(pending, items[decider], composite->decision);
          if (composite->decision.allowed && composite->decisions.size() == items.size()) {
            // Admitted: every limit reports its own state (Envoy's x-ratelimit headers
            // take the least remaining of them).
            for (std::size_t k = 0; k < items.size(); ++k) {
              if (k != decider) Set(pending, items[k], composite->decisions[k], false);
            }
          }
        }
        Finish(pending);
      });
}

// Each limit on its own (different costs, overrides, or one limit): the last answer
// finishes the request.
void Engine::CheckEach(const std::shared_ptr<Pending>& pending, const std::vector<Item>& items) {
  pending->outstanding.store(static_cast<int>(items.size()));
  for (const auto& item : items) {
    auto complete = [this, pending, item](StatusOr<Decision> d) {
      Set(pending, item, std::move(d));
      if (pending->outstanding.fetch_sub(1) == 1) Finish(pending);
    };
    sluice::CheckOptions options{.cost = std::max<int64_t>(item.cost, 1), .limit = item.limit};
    const std::string& id = pending->result.statuses[item.index].id;
    if (item.debit && item.cost > 0) {
      item.built->limiter->DebitAsync(id, item.cost, options, complete);
    } else if (item.cost == 0) {
      // hits_addend 0: report without spending (Peek has no asynchronous form).
      boost::asio::post(pool_, [item, options, complete, id]() {
        complete(item.built->limiter->Peek(id, options));
      });
    } else {
      item.built->limiter->CheckAsync(id, options, complete);
    }
  }
}

void Engine::Check(CheckRequest request, CheckDone done) {
  auto gen = current();
  auto pending = std::make_shared<Pending>();
  pending->done = std::move(done);
  pending->result.statuses.resize(request.descriptors.size());
  const DomainConfig* domain = gen->config->FindDomain(request.domain);
  if (!domain) {
    pending->result.unknown_domain = true;
    pending->done(std::move(pending->result));
    return;
  }
  bool zero_refusal = false;
  std::vector<Item> items = Plan(*gen, *domain, request, pending->result, zero_refusal);
  if (zero_refusal || items.empty()) return Finish(pending);
  // A debit a limit cannot take is refused whole: none of the request's limits is charged.
  const auto& statuses = pending->result.statuses;
  if (std::any_of(statuses.begin(), statuses.end(),
                  [](const DescriptorResult& s) { return s.bad_request; })) {
    return Finish(pending);
  }
  const bool same_cost = std::all_of(items.begin(), items.end(), [&](const Item& it) {
    return it.cost == items.front().cost && !it.limit && !it.debit;
  });
  if (items.size() > 1 && same_cost && items.front().cost > 0) {
    return CheckTogether(pending, std::move(items));
  }
  CheckEach(pending, items);
}

// One reserve while its store calls are out: the request's items in order, the
// reservations held so far and the handle once all are.
struct Engine::Reserving {
  std::shared_ptr<Pending> pending;
  std::vector<Item> items;
  std::vector<ReservedLimit> held;
  std::string handle;
};

namespace {

// Gives back reservations a refused (or failed) reserve held before: each settled with
// nothing spent. One the store cannot take stays charged until it expires (stricter).
void GiveBack(const std::vector<ReservedLimit>& held, const std::vector<sluice::Limiter>& by) {
  for (std::size_t i = 0; i < held.size(); ++i) {
    by[i].SettleAsync(held[i].reservation_ref, 0, {}, [](const StatusOr<Decision>&) {});
  }
}

}  // namespace

void Engine::ReserveFrom(const std::shared_ptr<Reserving>& r, std::size_t k) {
  const auto limiters = [r] {
    std::vector<sluice::Limiter> by;
    for (std::size_t i = 0; i < r->held.size(); ++i) by.push_back(*r->items[i].built->limiter);
    return by;
  };
  if (k == r->items.size()) {
    if (auto handle = EncodeReservationHandle(r->held)) {
      r->handle = std::move(*handle);
    } else {
      GiveBack(r->held, limiters());
      DescriptorResult& s = r->pending->result.statuses[r->items.back().index];
      s.bad_request = true;
      s.code = Code::kUnavailable;
      s.error = "these descriptors' ids are too long for a reservation handle (at most " +
                std::to_string(kMaxReservationHandleBytes) + " bytes)";
    }
    return Finish(r->pending);
  }
  const Item& item = r->items[k];
  const std::string& id = r->pending->result.statuses[item.index].id;
  item.built->limiter->ReserveAsync(
      id, std::max<int64_t>(item.cost, 1), {},
      [this, r, k, limiters](StatusOr<sluice::Reservation> reserved) {
        const Item& at = r->items[k];
        if (!reserved.ok()) {
          Set(r->pending, at, reserved.status());
        } else {
          Set(r->pending, at, reserved->decision);
          if (reserved->decision.allowed) {
            r->held.push_back({at.built->limiter->name(), reserved->ref});
            return ReserveFrom(r, k + 1);
          }
        }
        GiveBack(r->held, limiters());
        Finish(r->pending);
      });
}

void Engine::Reserve(CheckRequest request, ReserveDone done) {
  auto gen = current();
  auto r = std::make_shared<Reserving>();
  r->pending = std::make_shared<Pending>();
  // The handle is read when the pending check finishes: after every reservation.
  r->pending->done = [r_weak = std::weak_ptr<Reserving>(r), done](CheckResult result) {
    const std::shared_ptr<Reserving> held = r_weak.lock();
    done(std::move(result), held ? held->handle : std::string());
  };
  CheckResult& result = r->pending->result;
  result.statuses.resize(request.descriptors.size());
  const DomainConfig* domain = gen->config->FindDomain(request.domain);
  if (!domain) {
    result.unknown_domain = true;
    return Finish(r->pending);
  }
  request.debit = false;
  bool zero_refusal = false;
  std::vector<Item> items = Plan(*gen, *domain, request, result, zero_refusal);
  for (DescriptorResult& s : result.statuses) {
    if (s.rule && s.rule->kind == RuleKind::kConcurrency) {
      s.bad_request = true;
      s.code = Code::kUnavailable;
      s.error = "limit '" + s.rule->DisplayName() +
                "' is a concurrency limit, which takes no reservations (acquire a lease)";
    } else if (s.rule && s.rule->block_duration.count() > 0) {
      // The library refuses it too: the reservation script runs without the block's gate.
      s.bad_request = true;
      s.code = Code::kUnavailable;
      s.error =
          "limit '" + s.rule->DisplayName() + "' has a block_duration, which takes no reservations";
    }
  }
  for (const Item& it : items) {
    if (!it.limit) continue;
    DescriptorResult& s = result.statuses[it.index];
    s.bad_request = true;
    s.code = Code::kUnavailable;
    s.error = "a reservation takes no per-descriptor limit override";
  }
  // A shadow-mode limit refuses nobody: it holds nothing.
  std::erase_if(items, [](const Item& it) { return it.built->rule->shadow_mode; });
  if (items.size() > kMaxReservationLimits) {
    DescriptorResult& s = result.statuses[items.back().index];
    s.bad_request = true;
    s.code = Code::kUnavailable;
    s.error = "a reservation covers at most " + std::to_string(kMaxReservationLimits) + " limits";
  }
  const bool bad = std::any_of(result.statuses.begin(), result.statuses.end(),
                               [](const DescriptorResult& s) { return s.bad_request; });
  if (bad || zero_refusal || items.empty()) return Finish(r->pending);
  r->items = std::move(items);
  ReserveFrom(r, 0);
}

std::optional<sluice::Limiter> Engine::RateLimiter(const std::string& limiter_name,
                                                   std::shared_ptr<const Rule>& rule) const {
  auto gen = current();
  for (const auto& [_, built] : gen->rules) {
    if (built.limiter && built.limiter->name() == limiter_name) {
      rule = built.rule;
      return built.limiter;
    }
  }
  return std::nullopt;
}

void Engine::Settle(const std::string& handle, uint64_t actual,
                    std::function<void(StatusOr<SettleResult>)> done) {
  // One text for every handle that reaches nothing (garbage, another version, a limit
  // removed by a reload): the answer tells a prober nothing about which part was wrong.
  const auto no_such = [] {
    return sluice::NotFoundError(
        "no such reservation: the handle names no reservation of a configured rate limit");
  };
  const std::optional<std::vector<ReservedLimit>> limits = DecodeReservationHandle(handle);
  if (!limits) return done(no_such());
  struct Settling {
    std::vector<sluice::Limiter> limiters;
    std::vector<std::shared_ptr<const Rule>> rules;
    std::vector<StatusOr<Decision>> answers;
    std::atomic<std::size_t> outstanding{0};
    std::function<void(StatusOr<SettleResult>)> done;
  };
  auto s = std::make_shared<Settling>();
  for (const ReservedLimit& l : *limits) {
    std::shared_ptr<const Rule> rule;
    std::optional<sluice::Limiter> limiter = RateLimiter(l.limiter_name, rule);
    if (!limiter) return done(no_such());
    s->limiters.push_back(*std::move(limiter));
    s->rules.push_back(std::move(rule));
    s->answers.emplace_back(sluice::InternalError("no answer"));
  }
  s->outstanding = limits->size();
  s->done = std::move(done);
  const int64_t cost = static_cast<int64_t>(std::min<uint64_t>(actual, sluice::kMaxLimit));
  for (std::size_t i = 0; i < limits->size(); ++i) {
    const std::string& ref = (*limits)[i].reservation_ref;
    s->limiters[i].SettleAsync(ref, cost, {}, [s, i](StatusOr<Decision> answer) {
      s->answers[i] = std::move(answer);
      if (s->outstanding.fetch_sub(1) != 1) return;
      SettleResult out;
      bool settled = false, already = false;
      for (std::size_t j = 0; j < s->answers.size(); ++j) {
        if (!s->answers[j].ok()) return s->done(s->answers[j].status());
        const Decision& d = *s->answers[j];
        settled |= d.settle == sluice::SettleOutcome::kSettled;
        already |= d.settle == sluice::SettleOutcome::kAlreadySettled;
        if (d.settle != sluice::SettleOutcome::kNotHeld) out.settled_hits = d.settled_cost;
        DescriptorResult r;
        r.rule = s->rules[j];
        r.limit = r.rule->requests_per_unit;
        r.unit = r.rule->unit;
        r.decision = d;
        r.code = CodeOf(d);
        r.debit = true;  // the state after it, as a debit's: its debt shown
        if (r.code == Code::kOverLimit && out.check.overall != Code::kOverLimit) {
          out.check.overall = Code::kOverLimit;
          out.check.headline = static_cast<int>(j);
        }
        out.check.statuses.push_back(std::move(r));
      }
      out.outcome = settled   ? sluice::SettleOutcome::kSettled
                    : already ? sluice::SettleOutcome::kAlreadySettled
                              : sluice::SettleOutcome::kNotHeld;
      s->done(std::move(out));
    });
  }
}

StatusOr<Match> Engine::Resolve(const std::string& domain, const Entries& entries) const {
  auto gen = current();
  const DomainConfig* d = gen->config->FindDomain(domain);
  if (!d) return sluice::NotFoundError("unknown domain '" + domain + "'");
  Match m = MatchDescriptor(*d, entries);
  if (!m.rule)
    return sluice::NotFoundError("no rate limit of domain '" + domain +
                                 "' matches this descriptor");
  return m;
}

StatusOr<sluice::IdState> Engine::Inspect(const Match& match) {
  auto admin = sluice::Admin::Connect({.url = options_.client.url,
                                       .prefix = options_.client.prefix,
                                       .connect_timeout = std::chrono::milliseconds(500),
                                       .command_timeout = std::chrono::milliseconds(1000)});
  if (!admin.ok()) return admin.status();
  return (*admin)->Inspect(match.rule->limiter_name, match.id);
}

StatusOr<sluice::ResetResult> Engine::ResetCounter(const Match& match,
                                                   const sluice::AdminAction& action) {
  if (match.rule->kind == RuleKind::kConcurrency) {
    return sluice::InvalidArgumentError(
        "'" + match.rule->DisplayName() +
        "' is a concurrency limit: it counts live leases, not requests, so it has no counter "
        "to reset; release the id's leases instead (POST /admin/leases/release)");
  }
  auto gen = current();
  const auto built = gen->rules.find(match.rule.get());
  if (built == gen->rules.end())
    return sluice::NotFoundError("the configuration was reloaded meanwhile: try again");
  if (!built->second.limiter) {
    return sluice::InvalidArgumentError("'" + match.rule->DisplayName() +
                                        "' keeps no counter (unlimited, or 0 requests per unit)");
  }
  return sluice::ResetCounter(*built->second.limiter, match.id, action,
                              {.log_path = options_.audit_log});
}

void Engine::ProbeStore(std::function<void(StoreProbe)> done) {
  boost::asio::post(pool_, [this, done = std::move(done)]() {
    constexpr auto kDeadline = std::chrono::milliseconds(250);
    StoreProbe probe;
    auto d = probe_->Check("probe", {.deadline = kDeadline});
    if (!d.ok() || d->source != DecisionSource::kStore) {
      // A check the store did not decide is answered by the probe's failure policy, which
      // hides why. A refund returns the store's error instead (and goes to the store even
      // while the breaker is open); its script writes too (DECRBY), so a store refusing
      // writes refuses it with the same error.
      auto r = probe_->Refund("probe", 1, {.deadline = kDeadline});
      std::string error = !d.ok()   ? std::string(d.status().message())
                          : !r.ok() ? std::string(r.status().message())
                                    : std::string();
      // The store's own words, without its address ("redis HOST:PORT answered: …"):
      // /readyz is on the public listener.
      constexpr std::string_view kAnswered = " answered: ";
      if (const auto at = error.find(kAnswered); at != std::string::npos)
        error = "the store answered: " + error.substr(at + kAnswered.size());
      if (error.find("OOM ") != std::string::npos || error.find("READONLY") != std::string::npos) {
        probe.state = StoreProbe::State::kRefusingWrites;
        probe.error = error;
      } else if (!r.ok() && r.status().code() != sluice::StatusCode::kUnavailable &&
                 r.status().code() != sluice::StatusCode::kDeadlineExceeded) {
        probe.state = StoreProbe::State::kFailing;
        probe.error = error;
      } else {
        probe.state = StoreProbe::State::kUnreachable;
      }
    }
    probe.health = client_->Health();
    done(std::move(probe));
  });
}

std::vector<std::string> Engine::OpenDomainsShown(const sluice::StoreHealth& h) const {
  const std::string_view url = options_.client.url;
  if (url.starts_with("redis+cluster://") || url.starts_with("rediss+cluster://"))
    return h.open_domain_names;
  return std::vector<std::string>(h.open_domain_names.size(), store_shown());
}

std::string Engine::MetricsText() {
  std::vector<sluice::MetricSample> samples = client_->Metrics();
  if (quota_client_) {
    // The RLQS quota calls' own client: its connection, breaker and counters, as the same
    // series with client="quota" (it holds no leases, so adds no per-id series).
    for (sluice::MetricSample& s : quota_client_->Metrics()) {
      s.labels.emplace_back("client", "quota");
      samples.push_back(std::move(s));
    }
  }
  const std::size_t folded = CapLeaseSeries(samples, Metrics::kMaxLeaseIds);
  std::string out = metrics_.Format(folded);
  out += sluice::FormatPrometheus(samples);
  return out;
}

}  // namespace sluiced
