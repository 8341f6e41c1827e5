#include "sluice/boost_first.h"  // before any Boost header

#include <atomic>
#include <future>
#include <set>
#include <string>
#include <vector>

#include <boost/asio/post.hpp>

#include "client/client_core.h"
#include "core/keys.h"
#include "core/process.h"
#include "core/wait.h"
#include "memory/memory_store.h"
#include "redis/cluster_store.h"
#include "redis/connection.h"
#include "redis/endpoint.h"
#include "redis/redis_store.h"
#include "sluice/asio.h"
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

bool ClientCore::Forked() const {
  return ForkGeneration() != fork_generation_;
}

void ClientCore::Keep(std::shared_ptr<HeartbeatScheduler::Target> target) {
  MutexLock lock(kept_mu_);
  const HeartbeatScheduler::Target* at = target.get();
  kept_.emplace(at, std::move(target));
}

void ClientCore::Drop(const HeartbeatScheduler::Target* target) {
  std::shared_ptr<HeartbeatScheduler::Target> dropped;  // destroyed outside the lock
  MutexLock lock(kept_mu_);
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

int64_t ClientCore::WallMs() const {
  if (options.model_clock) return options.model_clock->NowMs();
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool ClientCore::OnIoThread() const {
  for (const std::thread& t : threads_) {
    if (t.get_id() == std::this_thread::get_id()) return true;
  }
  return false;
}

class ClientCore::Reclaimer final : public HeartbeatScheduler::Target,
                                    public std::enable_shared_from_this<Reclaimer> {
 public:
  Reclaimer(HeartbeatScheduler& scheduler, PolicyStore& policy)
      : scheduler_(scheduler), policy_(policy) {}
  void Due() override {
    policy_.ReclaimStep();
    Schedule();
  }
  void Schedule() {
    scheduler_.Schedule(HeartbeatScheduler::Clock::now() + MemoryStore::kStepPeriod,
                        weak_from_this());
  }

 private:
  // Both the core's: the scheduler is shut down, and no step runs, before the policy
  // store goes.
  HeartbeatScheduler& scheduler_;
  PolicyStore& policy_;
};

void ClientCore::UseStore(std::shared_ptr<Store> real) {
  std::shared_ptr<const Clock> clock = options.model_clock;
  if (!clock) clock = std::make_shared<SystemClock>();
  policy = std::make_shared<PolicyStore>(
      std::move(real), std::move(clock),
      BreakerOptions{options.breaker_failures, options.breaker_cool_down},
      options.denial_cache_size);
  store = policy;
  reclaimer_ = std::make_shared<Reclaimer>(heartbeats, *policy);
  reclaimer_->Schedule();
}

ClientCore::~ClientCore() {
  if (store) store->Shutdown();
  heartbeats.Shutdown();
  eviction.Shutdown();
  work_.reset();
  for (std::thread& t : threads_) t.join();
  MutexLock lock(kept_mu_);
  kept_.clear();
}

}  // namespace internal

namespace {
Status ValidateOptions(const ClientOptions& o);
}  // namespace

StatusOr<std::shared_ptr<Client>> internal::ClientFactory::WithStore(ClientOptions options,
                                                                     std::shared_ptr<Store> store) {
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
  for (auto [name, value] :
       {std::pair{"deadline", o.deadline}, std::pair{"connect_timeout", o.connect_timeout},
        std::pair{"stall_timeout", o.stall_timeout},
        std::pair{"reconnect_min_backoff", o.reconnect_min_backoff},
        std::pair{"reconnect_max_backoff", o.reconnect_max_backoff}}) {
    if (Status s = positive(name, value); !s.ok()) return s;
  }
  if (o.io_threads < 1 || o.io_threads > 64) {
    return InvalidArgumentError("io_threads must be 1-64, got " + std::to_string(o.io_threads));
  }
  if (o.max_in_flight < 1) return InvalidArgumentError("max_in_flight must be >= 1");
  if (o.max_batch < 1 || o.max_batch > internal::Connection::kMaxBatchCalls) {
    return InvalidArgumentError("max_batch must be 1 to " +
                                std::to_string(internal::Connection::kMaxBatchCalls));
  }
  if (o.on_failure == FailurePolicy::kDefault) {
    return InvalidArgumentError("on_failure must name a policy (open, closed or local)");
  }
  if (o.servers < 1) return InvalidArgumentError("servers must be >= 1");
  if (o.breaker_failures < 1) return InvalidArgumentError("breaker_failures must be >= 1");
  if (o.breaker_cool_down.count() < 1)
    return InvalidArgumentError("breaker_cool_down must be > 0 ms");
  if (o.eviction_check_interval.count() < 0)
    return InvalidArgumentError("eviction_check_interval must be >= 0 ms (0: never)");
  return Status::Ok();
}

// Starts reading the store's memory policy; unless the client connects in the
// background, waits (up to connect_timeout) for the first reading, so that a limiter
// made right after Create already knows whether the store can evict its keys.
void WatchEviction(internal::ClientCore& core) {
  const ClientOptions& o = core.options;
  if (o.eviction_check_interval.count() == 0) return;
  internal::PolicyStore* policy = core.policy.get();
  std::future<void> first = core.eviction.Start(
      core.store, {.interval = o.eviction_check_interval,
                   .deadline = o.connect_timeout,
                   .on_warning = o.on_warning,
                   .on_reading = [policy](bool can_evict) { policy->SetEvicting(can_evict); }});
  if (!o.connect_in_background) first.wait_for(o.connect_timeout);
}

// MakeLimiter's and MakeConcurrencyLimiter's refusal of an evicting store.
Status RefuseEvictingStore(const internal::ClientCore& core, std::string_view name) {
  const internal::EvictionWatch::Reading r = core.eviction.reading();
  if (!r.known || !r.can_evict) return Status::Ok();
  return FailedPreconditionError("limiter " + std::string(name) +
                                 " refuses to run on this store (refuse_evicting_store): its "
                                 "maxmemory-policy is " +
                                 r.policy +
                                 ", which can evict rate-limit state; give it a Redis "
                                 "with maxmemory-policy noeviction");
}

}  // namespace

std::string RedactUrl(std::string_view url) {
  return internal::RedactUrl(url);
}

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
  StatusOr<std::vector<internal::Endpoint>> seeds = std::vector<internal::Endpoint>{};
  StatusOr<internal::Endpoint> endpoint = internal::Endpoint{};
  if (internal::IsClusterUrl(o.url)) {
    seeds = internal::ParseClusterUrl(o.url);
    if (!seeds.ok()) return seeds.status();
  } else {
    endpoint = internal::ParseRedisUrl(o.url);
    if (!endpoint.ok()) return endpoint.status();
  }
  core->StartThreads();
  internal::ConnectionOptions copts;
  copts.connect_timeout = o.connect_timeout;
  copts.stall_timeout = o.stall_timeout;
  copts.reconnect_min_backoff = o.reconnect_min_backoff;
  copts.reconnect_max_backoff = o.reconnect_max_backoff;
  copts.max_in_flight = o.max_in_flight;
  copts.max_batch = o.max_batch;
  if (internal::IsClusterUrl(o.url)) {
    auto cluster = internal::ClusterStore::Connect(core->io.get_executor(), std::move(*seeds),
                                                   copts, o.connect_in_background);
    if (!cluster.ok()) return cluster.status();
    core->UseStore(std::move(*cluster));
    WatchEviction(*core);
    return std::shared_ptr<Client>(new Client(std::move(core)));
  }
  auto store = internal::RedisStore::Connect(core->io.get_executor(), std::move(*endpoint), copts,
                                             o.connect_in_background);
  if (!store.ok()) return store.status();
  core->UseStore(std::move(*store));
  WatchEviction(*core);
  return std::shared_ptr<Client>(new Client(std::move(core)));
}

Client::~Client() = default;

const ClientOptions& Client::options() const {
  return core_->options;
}

ClientStats Client::stats() const {
  return core_->store->stats();
}

StatusOr<std::string> Client::ServerInfo(std::string_view section,
                                         std::chrono::milliseconds deadline) const {
  auto promise = std::make_shared<std::promise<StatusOr<std::string>>>();
  auto result = promise->get_future();
  core_->store->Info(
      section, std::chrono::steady_clock::now() + deadline,
      [promise](StatusOr<std::string> info) { promise->set_value(std::move(info)); });
  return result.get();
}

StatusOr<Limiter> Client::MakeLimiter(std::string_view name, const Limit& limit,
                                      const LimiterOptions& options) const {
  if (Status s = internal::ValidateName("limiter name", name); !s.ok()) return s;
  if (Status s = limit.Validate(); !s.ok()) return s;
  if (options.refuse_evicting_store) {
    if (Status s = RefuseEvictingStore(*core_, name); !s.ok()) return s;
  }
  if (options.servers < 0) return InvalidArgumentError("servers must be >= 0 (0: the client's)");
  if (options.colocate &&
      !internal::IsSlotTagSeparator(static_cast<unsigned char>(options.colocate->separator))) {
    return InvalidArgumentError(
        "colocate.separator must be printable ASCII other than a letter, digit or space");
  }
  if (options.block_for.count() < 0 || options.block_for > kMaxWindow) {
    return InvalidArgumentError("block_for must be between 0 (no block) and 366 days, got " +
                                std::to_string(options.block_for.count()) + " ms");
  }
  if (options.block_for.count() > 0 && (options.local_budget.enabled || options.sync.enabled)) {
    // A slice or a synced share admits without asking the store: a block started by
    // another process would not be seen until it is spent.
    return InvalidArgumentError(
        "block_for cannot be used with local_budget or sync (they admit without asking the "
        "store, which holds the block)");
  }
  if (options.local_budget.enabled) {
    const LimiterOptions::LocalBudget& b = options.local_budget;
    if (limit.algorithm != Algorithm::kFixedWindow &&
        limit.algorithm != Algorithm::kSlidingWindow &&
        limit.algorithm != Algorithm::kTokenBucket && limit.algorithm != Algorithm::kGcra) {
      return InvalidArgumentError(
          "local_budget is built for fixed_window, sliding_window, token_bucket and gcra "
          "(a slice must know when its units stop counting), not " +
          std::string(AlgorithmName(limit.algorithm)));
    }
    if (b.hot_checks_per_second < 1 || b.slice_period.count() < 1 || b.max_slice < 0) {
      return InvalidArgumentError(
          "local_budget: hot_checks_per_second and slice_period must be >= 1, max_slice >= 0");
    }
  }
  if (options.sync.enabled) {
    const LimiterOptions::Sync& y = options.sync;
    if (limit.algorithm != Algorithm::kFixedWindow) {
      return InvalidArgumentError(
          "sync is built for fixed_window only (a pushed count must land in the window that "
          "admitted it), not " +
          std::string(AlgorithmName(limit.algorithm)));
    }
    if (options.local_budget.enabled) {
      return InvalidArgumentError("sync and local_budget cannot both be on for one limiter");
    }
    if (y.hot_checks_per_second < 1 || y.sync_interval.count() < 1 || y.servers < 0) {
      return InvalidArgumentError(
          "sync: hot_checks_per_second and sync_interval must be >= 1, servers >= 0");
    }
  }
  return Limiter(core_, std::string(name), limit, options);
}

StatusOr<ConcurrencyLimiter> Client::MakeConcurrencyLimiter(
    std::string_view name, const ConcurrencyOptions& options) const {
  if (Status s = internal::ValidateName("limiter name", name); !s.ok()) return s;
  if (options.refuse_evicting_store) {
    if (Status s = RefuseEvictingStore(*core_, name); !s.ok()) return s;
  }
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
    return InvalidArgumentError(
        "heartbeat_interval must be >= 0 (0: lease_ttl / 6) and shorter "
        "than lease_ttl, got " +
        std::to_string(options.heartbeat_interval.count()) + " ms");
  }
  if (options.servers < 0) return InvalidArgumentError("servers must be >= 0 (0: the client's)");
  return ConcurrencyLimiter(core_, std::string(name), options);
}

StoreHealth Client::Health() const {
  internal::DomainBreakers::Summary b = core_->policy->breakers().Summarize();
  StoreHealth health{core_->store->connected(), std::string(internal::BreakerStateName(b.worst)),
                     b.consecutive_failures,    b.opens,
                     b.short_circuited,         b.probe_in};
  health.breaker_domains = b.domains;
  health.open_domains = b.open_domains;
  health.open_domain_names = std::move(b.open_names);
  internal::EvictionWatch::Reading r = core_->eviction.reading();
  if (r.known) {
    health.memory_policy = std::move(r.policy);
    health.evicting = r.can_evict;
    health.evicted_keys = r.evicted_keys;
  }
  health.memory_policy_error = std::move(r.error);
  if (!health.connected) {
    const Status why = core_->store->connection_error();
    health.connection_error = why.ok() ? "connecting" : std::string(why.message());
  }
  return health;
}

boost::asio::io_context::executor_type IoExecutor(const Client& client) {
  return internal::ClientFactory::CoreOf(client).io.get_executor();
}

}  // namespace sluice
