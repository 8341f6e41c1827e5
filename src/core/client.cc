#include <utility>

#include <atomic>
#include <future>
#include <set>
#include <string>
#include <vector>

#include <boost/asio/post.hpp>

#include "core/client_core.h"
#include "core/keys.h"
#include "core/process.h"
#include "core/wait.h"
#include "memory/memory_store.h"
#include "redis/redis_store.h"
#include "sluice/client.h"
#include "sluice/lease.h"

namespace sluice {
namespace internal {

ClientCore::ClientCore(ClientOptions opts)
    : options(std::move(opts)),
      io(options.io_threads),
      work_(io.get_executor()),
      fork_generation_(ForkGeneration()) {}

void ClientCore::StartThreads() {
  for (int i = 0; i < options.io_threads; ++i) {
    threads_.emplace_back([this] {
      MarkIoThread();
      // A callback that throws ends the process here (std::terminate): callbacks must
      // not throw (client.h).
      io.run();
    });
  }
}

bool ClientCore::Forked() const { return ForkGeneration() != fork_generation_; }

void ClientCore::Keep(std::shared_ptr<HeartbeatScheduler::Target> target) {
  std::lock_guard lock(kept_mu_);
  const HeartbeatScheduler::Target* at = target.get();
  kept_.emplace(at, std::move(target));
}

void ClientCore::Drop(const HeartbeatScheduler::Target* target) {
  std::shared_ptr<HeartbeatScheduler::Target> dropped;  // destroyed outside the lock
  std::lock_guard lock(kept_mu_);
  auto it = kept_.find(target);
  if (it == kept_.end()) return;
  dropped = std::move(it->second);
  kept_.erase(it);
}

std::shared_ptr<ClientCore> ClientCore::Make(ClientOptions options) {
  return std::shared_ptr<ClientCore>(new ClientCore(std::move(options)), [](ClientCore* core) {
    if (core->Forked()) {
      // A forked child: the threads, timers and connection belong to the parent (joining
      // would wait for ever, and the store's locks may be held by threads that do not
      // exist here). Leaked on purpose; the child's exit reclaims it.
      return;
    }
    if (core->OnIoThread()) {
      std::thread([core] { delete core; }).detach();
    } else {
      delete core;
    }
  });
}

bool ClientCore::OnIoThread() const {
  for (const std::thread& t : threads_) {
    if (t.get_id() == std::this_thread::get_id()) return true;
  }
  return false;
}

void ClientCore::UseStore(std::shared_ptr<Store> real) {
  std::shared_ptr<const Clock> clock = options.model_clock;
  if (!clock) clock = std::make_shared<SystemClock>();
  policy = std::make_shared<PolicyStore>(
      std::move(real), std::move(clock),
      BreakerOptions{options.breaker_failures, options.breaker_cool_down},
      options.denial_cache_size);
  store = policy;
}

ClientCore::~ClientCore() {
  if (store) store->Shutdown();
  heartbeats.Shutdown();
  work_.reset();
  for (std::thread& t : threads_) t.join();
  std::lock_guard lock(kept_mu_);
  kept_.clear();
}

}  // namespace internal

namespace {
Status ValidateOptions(const ClientOptions& o);
}  // namespace

StatusOr<std::shared_ptr<Client>> internal::ClientFactory::WithStore(
    ClientOptions options, std::shared_ptr<Store> store) {
  if (Status s = ValidateOptions(options); !s.ok()) return s;
  auto core = ClientCore::Make(std::move(options));
  core->UseStore(std::move(store));
  core->StartThreads();
  return std::shared_ptr<Client>(new Client(std::move(core)));
}

namespace {

Status ValidateOptions(const ClientOptions& o) {
  if (Status s = internal::ValidateName("prefix", o.prefix); !s.ok()) return s;
  auto positive = [](const char* name, std::chrono::milliseconds v) {
    return v.count() > 0 ? Status::Ok()
                         : InvalidArgumentError(std::string(name) + " must be > 0 ms, got " +
                                                std::to_string(v.count()));
  };
  for (auto [name, value] : {std::pair{"deadline", o.deadline},
                             std::pair{"connect_timeout", o.connect_timeout},
                             std::pair{"stall_timeout", o.stall_timeout},
                             std::pair{"reconnect_min_backoff", o.reconnect_min_backoff},
                             std::pair{"reconnect_max_backoff", o.reconnect_max_backoff}}) {
    if (Status s = positive(name, value); !s.ok()) return s;
  }
  if (o.io_threads < 1 || o.io_threads > 64) {
    return InvalidArgumentError("io_threads must be 1-64, got " + std::to_string(o.io_threads));
  }
  if (o.max_in_flight < 1) return InvalidArgumentError("max_in_flight must be >= 1");
  if (o.on_failure == FailurePolicy::kDefault) {
    return InvalidArgumentError("on_failure must name a policy (open, closed or local)");
  }
  if (o.servers < 1) return InvalidArgumentError("servers must be >= 1");
  if (o.breaker_failures < 1) return InvalidArgumentError("breaker_failures must be >= 1");
  if (o.breaker_cool_down.count() < 1) return InvalidArgumentError("breaker_cool_down must be > 0 ms");
  return Status::Ok();
}

}  // namespace

StatusOr<std::shared_ptr<Client>> Client::Create(ClientOptions options) {
  if (Status s = ValidateOptions(options); !s.ok()) return s;
  auto core = internal::ClientCore::Make(std::move(options));
  const ClientOptions& o = core->options;
  if (o.url == "memory://") {
    std::shared_ptr<const Clock> clock = o.model_clock;
    if (!clock) clock = std::make_shared<SystemClock>();
    core->UseStore(std::make_shared<internal::MemoryStore>(std::move(clock)));
    core->StartThreads();
    return std::shared_ptr<Client>(new Client(std::move(core)));
  }
  auto endpoint = internal::ParseRedisUrl(o.url);
  if (!endpoint.ok()) return endpoint.status();
  core->StartThreads();
  internal::ConnectionOptions copts;
  copts.connect_timeout = o.connect_timeout;
  copts.stall_timeout = o.stall_timeout;
  copts.reconnect_min_backoff = o.reconnect_min_backoff;
  copts.reconnect_max_backoff = o.reconnect_max_backoff;
  copts.max_in_flight = o.max_in_flight;
  auto store = internal::RedisStore::Connect(core->io.get_executor(), std::move(*endpoint), copts,
                                             o.connect_in_background);
  if (!store.ok()) return store.status();
  core->UseStore(std::move(*store));
  return std::shared_ptr<Client>(new Client(std::move(core)));
}

Client::~Client() = default;

const ClientOptions& Client::options() const { return core_->options; }

ClientStats Client::stats() const { return core_->store->stats(); }

StatusOr<std::string> Client::ServerInfo(std::string_view section,
                                         std::chrono::milliseconds deadline) const {
  auto promise = std::make_shared<std::promise<StatusOr<std::string>>>();
  auto result = promise->get_future();
  core_->store->Info(section, std::chrono::steady_clock::now() + deadline,
                     [promise](StatusOr<std::string> info) { promise->set_value(std::move(info)); });
  return result.get();
}

StatusOr<Limiter> Client::MakeLimiter(std::string_view name, const Limit& limit,
                                      const LimiterOptions& options) const {
  if (Status s = internal::ValidateName("limiter name", name); !s.ok()) return s;
  if (Status s = limit.Validate(); !s.ok()) return s;
  if (options.servers < 0) return InvalidArgumentError("servers must be >= 0 (0: the client's)");
  return Limiter(core_, std::string(name), limit, options);
}

StatusOr<ConcurrencyLimiter> Client::MakeConcurrencyLimiter(std::string_view name,
                                                            const ConcurrencyOptions& options) const {
  if (Status s = internal::ValidateName("limiter name", name); !s.ok()) return s;
  if (options.limit < 1 || options.limit > kMaxLimit) {
    return InvalidArgumentError("limit must be between 1 and " + std::to_string(kMaxLimit) +
                                ", got " + std::to_string(options.limit));
  }
  using std::chrono::milliseconds;
  if (options.lease_ttl < milliseconds(10) || options.lease_ttl > std::chrono::hours(24 * 366)) {
    return InvalidArgumentError("lease_ttl must be between 10 ms and 366 days, got " +
                                std::to_string(options.lease_ttl.count()) + " ms");
  }
  if (options.heartbeat_interval.count() < 0 || options.heartbeat_interval >= options.lease_ttl) {
    return InvalidArgumentError("heartbeat_interval must be >= 0 (0: lease_ttl / 6) and shorter "
                                "than lease_ttl, got " +
                                std::to_string(options.heartbeat_interval.count()) + " ms");
  }
  if (options.servers < 0) return InvalidArgumentError("servers must be >= 0 (0: the client's)");
  return ConcurrencyLimiter(core_, std::string(name), options);
}

StoreHealth Client::Health() const {
  const internal::Breaker& b = core_->policy->breaker();
  return {core_->store->connected(), std::string(internal::BreakerStateName(b.state())),
          b.consecutive_failures(), b.opens(), b.short_circuited(), b.RetryIn()};
}

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
    return InvalidArgumentError(
        std::string(op == internal::Op::kRefund ? "amount" : "cost") +
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

StatusOr<CompositeDecision> CheckComposite(std::span<const LimitCheck> checks,
                                     const CheckOptions& options) {
  if (checks.empty()) return InvalidArgumentError("CheckComposite needs at least one limit");
  for (const LimitCheck& c : checks) {
    if (c.limiter == nullptr) return InvalidArgumentError("CheckComposite: a LimitCheck has no limiter");
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
  bool one_step = checks.size() <= internal::kMaxCompositeCalls && core->store->ChecksCompositeAtOnce();
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
    StatusOr<internal::CompositeOutcome> decided = internal::WaitFor<StatusOr<internal::CompositeOutcome>>(
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

StatusOr<Decision> Limiter::Reset(std::string_view id, const CheckOptions& options) const {
  CheckOptions with = options;
  with.cost = 1;
  return ExecuteSync(internal::Op::kReset, id, with);
}

}  // namespace sluice
