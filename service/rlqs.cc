#include "service/rlqs.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "envoy/service/rate_limit_quota/v3/rlqs.pb.h"
#include "service/json_api.h"
#include "service/matcher.h"
#include "sluice/quota.h"

namespace sluiced {

namespace rlqs = envoy::service::rate_limit_quota::v3;
namespace etype = envoy::type::v3;
using Usage = rlqs::RateLimitQuotaUsageReports::BucketQuotaUsage;
using Action = rlqs::RateLimitQuotaResponse::BucketAction;

bool ParseRlqsUnmatched(std::string_view text, RlqsUnmatched& out) {
  if (text == "allow_all") {
    out = RlqsUnmatched::kAllowAll;
  } else if (text == "deny_all") {
    out = RlqsUnmatched::kDenyAll;
  } else if (text == "abandon") {
    out = RlqsUnmatched::kAbandon;
  } else {
    return false;
  }
  return true;
}

std::chrono::seconds RlqsTtl(std::chrono::milliseconds report_interval) {
  const int64_t ms = 2 * std::max<int64_t>(0, report_interval.count());
  return std::chrono::seconds(std::max<int64_t>(1, (ms + 999) / 1000));
}

std::chrono::milliseconds RlqsStoreDeadline(std::chrono::milliseconds report_interval,
                                            std::chrono::milliseconds request_deadline) {
  return std::max(request_deadline, report_interval / 5);
}

int64_t RlqsDemandMilli(uint64_t allowed, uint64_t denied, std::chrono::milliseconds elapsed) {
  const double requests = std::max(1.0, static_cast<double>(allowed) + static_cast<double>(denied));
  const double ms = static_cast<double>(std::max<int64_t>(1000, elapsed.count()));
  // The stores' bound (far above any real demand): a larger demand is that much.
  return static_cast<int64_t>(
      std::min(requests * 1e6 / ms, static_cast<double>(kRlqsMaxRateMilli)));
}

void RlqsStrategy(int64_t grant_milli, int64_t rate_milli, int64_t burst,
                  etype::RateLimitStrategy& out) {
  if (grant_milli <= 0 || rate_milli <= 0) {
    out.set_blanket_rule(etype::RateLimitStrategy::DENY_ALL);
    return;
  }
  constexpr int64_t kMaxTokens = std::numeric_limits<uint32_t>::max();
  // floor(grant * k) tokens every k seconds, k the interval of at most kRlqsMaxFillSeconds
  // whose rate comes closest to the grant from below (the shortest of equals): never
  // faster than the grant, and short of it by less than 1 / kRlqsMaxFillSeconds a second.
  // Envoy refills continuously at tokens_per_fill / fill_interval, so a long interval only
  // makes the rate finer. Whole tokens per second lost up to a third of a fleet's limit
  // where the grants were near one request a second (10,000 clients of 10,000/s enforced
  // 6,545/s of the 9,826/s granted).
  int64_t tokens = 0, interval_s = 1;
  if (grant_milli >= 1000 * kMaxTokens) {
    tokens = kMaxTokens;
  } else {
    for (int64_t k = 1; k <= kRlqsMaxFillSeconds; ++k) {
      const int64_t t = grant_milli * k / 1000;
      if (t * interval_s > tokens * k) tokens = t, interval_s = k;  // t / k > tokens / interval
    }
    if (tokens == 0) {  // below one request a longest interval: one token every ceil(1 / g)
      interval_s = (1000 + grant_milli - 1) / grant_milli;
      tokens = 1;
    }
    tokens = std::min(tokens, kMaxTokens);
  }
  const double share = static_cast<double>(burst) * static_cast<double>(grant_milli) /
                       static_cast<double>(rate_milli);
  // Envoy's token bucket refills continuously, so its capacity may be below one fill:
  // the capacities of a limit's grants then sum to at most its burst (plus two tokens of
  // rounding per client), whatever the rate. At least two: a bucket of one token stops
  // filling while it waits, full, for the next request, and under a steady demand above
  // the grant it then admits about a fifth less than the grant (bench/rlqs.sh measured
  // 888/s of 979/s assigned, 50 clients, before this floor).
  const int64_t capacity =
      std::max<int64_t>(2, static_cast<int64_t>(std::min(std::floor(share), 4e9)));
  auto* bucket = out.mutable_token_bucket();
  bucket->set_max_tokens(static_cast<uint32_t>(std::min(capacity, kMaxTokens)));
  bucket->mutable_tokens_per_fill()->set_value(static_cast<uint32_t>(tokens));
  bucket->mutable_fill_interval()->set_seconds(interval_s);
  bucket->mutable_fill_interval()->set_nanos(static_cast<int32_t>(interval_s));
}

struct RlqsService::State {
  State(Engine& e, RlqsOptions o) : engine(e), options(o), ttl(RlqsTtl(o.report_interval)) {}
  Engine& engine;
  RlqsOptions options;
  std::chrono::seconds ttl;
  // The store keeps a grant a second longer than the client enforces it: a client's
  // TTL starts when the answer reaches it, after the store recorded the grant.
  std::chrono::milliseconds hold() const { return ttl + std::chrono::seconds(1); }
  // The engine's quota client (Engine::quota_client), when it has one of its own (not
  // owned here: the engine outlives the service).
  sluice::Client* store_client = nullptr;
  std::optional<sluice::QuotaShares> shares;         // the store's, on store_client
  std::optional<sluice::QuotaShares> engine_shares;  // the same, on the engine's client
  // Where a quota call goes: the quota calls' own client once it has connected (it
  // connects in the background, as the engine's does: sluiced's start waits for neither),
  // the engine's until then.
  const sluice::QuotaShares& Store() const {
    if (store_client && !store_ready.load(std::memory_order_relaxed)) {
      if (!store_client->Health().connected) return *engine_shares;
      store_ready.store(true, std::memory_order_relaxed);
    }
    return *shares;
  }
  mutable std::atomic<bool> store_ready{false};
  std::shared_ptr<sluice::Client> local_client;     // an embedded store's, for `local`
  std::optional<sluice::QuotaShares> local_shares;  // what this instance sees alone
};

namespace {

// The rate of a rule in milli-requests per second (at least 1).
int64_t RateMilli(const Rule& rule) {
  const double ms = static_cast<double>(UnitWindow(rule.unit).count());
  const double milli = static_cast<double>(rule.requests_per_unit) * 1e6 / ms;
  return std::max<int64_t>(
      1, static_cast<int64_t>(std::min(milli, static_cast<double>(kRlqsMaxRateMilli))));
}

// Why a report is refused (the stream ends INVALID_ARGUMENT), or empty.
// The domain is named by a stream's first report; later ones may leave it out (the proto
// says so), or repeat it.
std::string Invalid(const rlqs::RateLimitQuotaUsageReports& report, const std::string& domain) {
  if (report.domain().empty() && domain.empty())
    return "a stream's first report must name its domain";
  if (!domain.empty() && !report.domain().empty() && report.domain() != domain)
    return "a stream reports for one domain ('" + domain + "'), not '" + report.domain() + "'";
  if (report.bucket_quota_usages_size() > static_cast<int>(kRlqsMaxBucketsPerStream))
    return "at most " + std::to_string(kRlqsMaxBucketsPerStream) + " buckets per report";
  for (const Usage& u : report.bucket_quota_usages()) {
    const auto& bucket = u.bucket_id().bucket();
    if (bucket.empty()) return "a bucket id needs at least one entry";
    if (bucket.size() > kMaxEntries)
      return "a bucket id has at most " + std::to_string(kMaxEntries) + " entries";
    for (const auto& [k, v] : bucket) {
      if (k.empty()) return "a bucket id's key must not be empty";
      if (k.size() > kMaxFieldBytes || v.size() > kMaxFieldBytes)
        return "a bucket id's key or value is longer than " + std::to_string(kMaxFieldBytes) +
               " bytes";
    }
    if (u.time_elapsed().seconds() < 0 || u.time_elapsed().nanos() < 0)
      return "time_elapsed must not be negative";
  }
  return {};
}

// The bucket's entries as a descriptor: sorted by key (a map has no order of its own).
Entries SortedEntries(const Usage& usage) {
  Entries entries(usage.bucket_id().bucket().begin(), usage.bucket_id().bucket().end());
  std::sort(entries.begin(), entries.end());
  return entries;
}

uint64_t SaturatingAdd(uint64_t a, uint64_t b) {
  return a > std::numeric_limits<uint64_t>::max() - b ? std::numeric_limits<uint64_t>::max()
                                                      : a + b;
}

// Adds `from`'s counts and elapsed time to `into` (the same bucket, reported twice).
void MergeUsage(Usage& into, const Usage& from) {
  into.set_num_requests_allowed(
      SaturatingAdd(into.num_requests_allowed(), from.num_requests_allowed()));
  into.set_num_requests_denied(
      SaturatingAdd(into.num_requests_denied(), from.num_requests_denied()));
  auto* t = into.mutable_time_elapsed();
  int64_t nanos = int64_t{t->nanos()} + from.time_elapsed().nanos();
  int64_t seconds = std::min<int64_t>(t->seconds(), 315'576'000'000) +
                    std::min<int64_t>(from.time_elapsed().seconds(), 315'576'000'000);
  seconds += nanos / 1'000'000'000;
  t->set_seconds(std::min<int64_t>(seconds, 315'576'000'000));  // Duration's maximum
  t->set_nanos(static_cast<int32_t>(nanos % 1'000'000'000));
}

void Assign(Action& action, std::chrono::seconds ttl) {
  action.mutable_quota_assignment_action()->mutable_assignment_time_to_live()->set_seconds(
      ttl.count());
}

void Blanket(Action& action, std::chrono::seconds ttl, bool allow) {
  Assign(action, ttl);
  action.mutable_quota_assignment_action()->mutable_rate_limit_strategy()->set_blanket_rule(
      allow ? etype::RateLimitStrategy::ALLOW_ALL : etype::RateLimitStrategy::DENY_ALL);
}

// One RLQS stream: one client, one domain.
class RlqsStream : public StreamCall, public std::enable_shared_from_this<RlqsStream> {
 public:
  RlqsStream(std::shared_ptr<RlqsService::State> state, StreamWriter writer)
      : state_(std::move(state)), writer_(std::move(writer)), client_(RandomHandle()) {
    state_->engine.metrics().RlqsStreams(1);
  }

  GrpcStatus OnMessage(std::string_view message) override;
  void OnHalfClose(StreamWriter& writer) override;
  void OnClose() override;

 private:
  struct Bucket {
    int idle = 0;  // reports in a row without a request
    // Its id in the stores, once it was recorded there (its demand counts in the others'
    // shares even when it was granted nothing): given back when the bucket is forgotten or
    // the stream ends. Empty: never recorded.
    std::string share_id;
    std::size_t charged = 0;  // its bytes in the state budgets
  };
  // A report being answered (or, merged from the reports received meanwhile, waiting): its
  // response, one action per bucket, filled by the calls.
  struct Report {
    rlqs::RateLimitQuotaUsageReports request;
    rlqs::RateLimitQuotaResponse response;
    std::atomic<std::size_t> remaining{0};
    std::size_t charged = 0;  // its bytes in the state budgets, until it is answered
    std::unordered_map<std::string, int> index;  // a waiting one's buckets: id -> usage
  };
  // A bucket whose answer is the stores' share.
  struct ShareJob {
    int index;
    sluice::QuotaShareRequest request;
    std::shared_ptr<const Rule> rule;
    RlqsCounters* counters;
    int64_t local_rate_milli;
    sluice::FailurePolicy policy;  // the rule's, or the client's default
  };

  GrpcStatus Merge(rlqs::RateLimitQuotaUsageReports& request, std::size_t charged);
  void ProcessFront(std::unique_lock<std::mutex>& lock);
  std::optional<ShareJob> Plan(Report& report, int index, const Config& config);
  void RunShare(const std::shared_ptr<Report>& report, ShareJob job);
  void OnShare(const std::shared_ptr<Report>& report, const ShareJob& job,
               sluice::StatusOr<sluice::QuotaShareGrant> store,
               sluice::StatusOr<sluice::QuotaShareGrant> local);
  void Done(const std::shared_ptr<Report>& report);
  void Release(const std::string& share_id);
  void Forget(const std::string& id);

  std::shared_ptr<RlqsService::State> state_;
  StreamWriter writer_;
  const std::string client_;  // the stream's id in the stores: random, per stream
  std::mutex mu_;
  std::string domain_;  // from the first report
  std::unordered_map<std::string, Bucket> buckets_;
  std::shared_ptr<Report> current_;  // being answered
  std::shared_ptr<Report> waiting_;  // the reports received since, merged
  // Store calls of this stream not answered yet. A stream that ends gives its shares back
  // once they are all answered (`give_back`), so that no grant is recorded after its
  // give-back and outlives the stream.
  std::size_t in_flight_ = 0;
  std::vector<std::string> give_back_;
  std::size_t charged_ = 0;   // in the state budgets, given back when the stream ends
  bool over_budget_ = false;  // a bucket could not be charged: the stream ends
  bool half_closed_ = false, closed_ = false;
};

// Bytes a report holds until it is answered: its request and its response (one action per
// bucket, about as large).
std::size_t ReportBytes(const rlqs::RateLimitQuotaUsageReports& request) {
  return 2 * request.ByteSizeLong() + 64;
}

GrpcStatus RlqsStream::OnMessage(std::string_view message) {
  rlqs::RateLimitQuotaUsageReports request;
  if (!request.ParseFromArray(message.data(), static_cast<int>(message.size()))) {
    state_->engine.metrics().BadRequest();
    return {GrpcCode::kInvalidArgument, "cannot parse RateLimitQuotaUsageReports"};
  }
  std::unique_lock lock(mu_);
  if (std::string why = Invalid(request, domain_); !why.empty()) {
    state_->engine.metrics().BadRequest();
    return {GrpcCode::kInvalidArgument, std::move(why)};
  }
  if (domain_.empty()) domain_ = request.domain();
  const std::size_t bytes = ReportBytes(request);
  if (!writer_.Charge(bytes))
    return {GrpcCode::kResourceExhausted, "over the RLQS state budget: " + writer_.BudgetText()};
  charged_ += bytes;
  if (current_ != nullptr) return Merge(request, bytes);
  current_ = std::make_shared<Report>();
  current_->request = std::move(request);
  current_->charged = bytes;
  ProcessFront(lock);
  return {};
}

// Adds a report received while another is answered to the one waiting: per bucket, the
// counts and the elapsed times added. With mu_ held.
GrpcStatus RlqsStream::Merge(rlqs::RateLimitQuotaUsageReports& request, std::size_t charged) {
  if (waiting_ == nullptr) waiting_ = std::make_shared<Report>();
  Report& w = *waiting_;
  w.charged += charged;
  for (Usage& u : *request.mutable_bucket_quota_usages()) {
    const std::string id = DescriptorId(SortedEntries(u));
    if (auto it = w.index.find(id); it != w.index.end()) {
      MergeUsage(*w.request.mutable_bucket_quota_usages(it->second), u);
      continue;
    }
    if (w.index.size() >= kRlqsMaxBucketsPerStream)
      return {GrpcCode::kResourceExhausted, "more than " +
                                                std::to_string(kRlqsMaxBucketsPerStream) +
                                                " buckets wait for answers on one stream"};
    w.index.emplace(id, w.request.bucket_quota_usages_size());
    *w.request.add_bucket_quota_usages() = std::move(u);
  }
  return {};
}

// The writer is never called with mu_ held: what it does may end the call (OnClose).
void RlqsStream::OnHalfClose(StreamWriter& writer) {
  bool idle = false;
  {
    std::lock_guard lock(mu_);
    half_closed_ = true;
    idle = current_ == nullptr;
  }
  if (idle) writer.Finish({});
}

void RlqsStream::OnClose() {
  std::vector<std::string> granted;
  std::size_t charged = 0;
  {
    std::lock_guard lock(mu_);
    if (closed_) return;
    closed_ = true;
    for (auto& [id, b] : buckets_)
      if (!b.share_id.empty()) granted.push_back(b.share_id);
    buckets_.clear();
    waiting_ = nullptr;
    charged = std::exchange(charged_, 0);
    // A stream this sluiced ends because it drains keeps its shares until they expire: its
    // Envoy goes on enforcing the assignments until their TTL while it reconnects, so
    // handing the shares to others at once would let the fleet enforce up to twice the
    // rate through a rolling restart. Any other end gives them back (best effort: a
    // store that does not answer lets them expire): at once, or after the last store
    // call still in flight (whose grant would otherwise be recorded after the give-back).
    if (state_->engine.draining()) granted.clear();
    if (in_flight_ > 0) give_back_ = std::exchange(granted, {});
  }
  writer_.Uncharge(charged);
  state_->engine.metrics().RlqsStreams(-1);
  for (const auto& id : granted) Release(id);
}

void RlqsStream::Release(const std::string& share_id) {
  sluice::QuotaShareRequest request{
      .id = share_id, .client = client_, .rate_milli = 1, .hold = state_->hold(), .release = true};
  auto ignore = [](const sluice::StatusOr<sluice::QuotaShareGrant>&) {};
  state_->Store().Assign(request, ignore);
  state_->local_shares->Assign(request, ignore);
}

// Forgets bucket `id` (with mu_ held): its share given back, its bytes out of the budgets.
void RlqsStream::Forget(const std::string& id) {
  auto it = buckets_.find(id);
  if (it == buckets_.end()) return;
  if (!it->second.share_id.empty()) Release(it->second.share_id);
  writer_.Uncharge(it->second.charged);
  charged_ -= it->second.charged;
  buckets_.erase(it);
}

// Answers the current report: the buckets that need no store at once, the others when the
// stores answer. Called with mu_ held; releases it while calls are made (their answers
// take it).
void RlqsStream::ProcessFront(std::unique_lock<std::mutex>& lock) {
  const std::shared_ptr<Report> report = current_;
  const std::shared_ptr<const Config> config = state_->engine.config();
  const int n = report->request.bucket_quota_usages_size();
  std::vector<ShareJob> jobs;
  for (int i = 0; i < n; ++i) {
    Action* action = report->response.add_bucket_action();
    *action->mutable_bucket_id() = report->request.bucket_quota_usages(i).bucket_id();
    if (auto job = Plan(*report, i, *config)) jobs.push_back(std::move(*job));
  }
  std::string over;
  if (buckets_.size() > kRlqsMaxBucketsPerStream)
    over = "more than " + std::to_string(kRlqsMaxBucketsPerStream) + " buckets on one stream";
  else if (over_budget_)
    over = "over the RLQS state budget: " + writer_.BudgetText();
  if (!over.empty()) {
    lock.unlock();
    writer_.Finish({GrpcCode::kResourceExhausted, std::move(over)});
    return;
  }
  report->remaining = jobs.size() + 1;  // + 1: this function's own, so none finishes early
  in_flight_ += jobs.size();
  lock.unlock();
  for (auto& job : jobs) RunShare(report, std::move(job));
  Done(report);
}

// Decides bucket `index` of `report` when no store call is needed (and returns nullopt),
// or says what to ask the stores. With mu_ held.
std::optional<RlqsStream::ShareJob> RlqsStream::Plan(Report& report, int index,
                                                     const Config& config) {
  const Usage& usage = report.request.bucket_quota_usages(index);
  Action& action = *report.response.mutable_bucket_action(index);
  const Entries entries = SortedEntries(usage);
  const std::string id = DescriptorId(entries);
  const DomainConfig* domain = config.FindDomain(domain_);
  const Match match = domain ? MatchDescriptor(*domain, entries) : Match{};
  const bool matched = match.rule && match.rule->kind != RuleKind::kConcurrency;
  RlqsCounters* counters = state_->engine.metrics().ForRlqs(
      domain ? domain_ : "_unknown", matched ? match.rule->DisplayName() : "_unmatched");
  counters->allowed.fetch_add(usage.num_requests_allowed(), std::memory_order_relaxed);
  counters->denied.fetch_add(usage.num_requests_denied(), std::memory_order_relaxed);
  auto [it, added] = buckets_.try_emplace(id);
  Bucket& bucket = it->second;
  if (added) {
    // Its id here and (at most) in its share id.
    bucket.charged = kRlqsBucketOverheadBytes + 2 * id.size() + 64;
    if (writer_.Charge(bucket.charged)) {
      charged_ += bucket.charged;
    } else {
      bucket.charged = 0;
      over_budget_ = true;
    }
  }
  const bool subscription =
      usage.time_elapsed().seconds() == 0 && usage.time_elapsed().nanos() == 0;
  if (usage.num_requests_allowed() + usage.num_requests_denied() > 0 || subscription)
    bucket.idle = 0;
  else
    ++bucket.idle;
  const auto answer = [counters](RlqsSource source) {
    counters->answers[source].fetch_add(1, std::memory_order_relaxed);
  };
  const auto forget = [&] {
    Forget(id);
    action.mutable_abandon_action();
  };
  if (bucket.idle >= state_->options.idle_reports) {
    answer(kRlqsIdle);
    forget();
    return std::nullopt;
  }
  if (!matched) {
    answer(kRlqsUnmatched);
    if (state_->options.unmatched == RlqsUnmatched::kAbandon)
      forget();
    else
      Blanket(action, state_->ttl, state_->options.unmatched == RlqsUnmatched::kAllowAll);
    return std::nullopt;
  }
  const Rule& rule = *match.rule;
  if (rule.unlimited || rule.shadow_mode || rule.requests_per_unit <= 0) {
    answer(kRlqsRule);
    // A shadow limit never refuses; an unlimited one has no rate; 0 per unit admits none.
    Blanket(action, state_->ttl, rule.unlimited || rule.shadow_mode);
    return std::nullopt;
  }
  bucket.share_id = rule.limiter_name + '/' + id;
  const int64_t rate = RateMilli(rule);
  counters->rate_milli.store(rate, std::memory_order_relaxed);
  const auto elapsed = std::chrono::seconds(usage.time_elapsed().seconds()) +
                       std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::nanoseconds(usage.time_elapsed().nanos()));
  const sluice::ClientOptions& client = state_->engine.client().options();
  const int64_t servers = rule.local_servers > 0 ? rule.local_servers : client.servers;
  const sluice::FailurePolicy policy =
      rule.failure_mode == sluice::FailurePolicy::kDefault ? client.on_failure : rule.failure_mode;
  return ShareJob{.index = index,
                  .request = {.id = bucket.share_id,
                              .client = client_,
                              .demand_milli = RlqsDemandMilli(usage.num_requests_allowed(),
                                                              usage.num_requests_denied(), elapsed),
                              .rate_milli = rate,
                              .hold = state_->hold()},
                  .rule = match.rule,
                  .counters = counters,
                  .local_rate_milli = std::max<int64_t>(1, rate / std::max<int64_t>(1, servers)),
                  .policy = policy};
}

// The embedded store's share first (what this instance sees alone: kept current on every
// report, so that it is ready when the store fails), then the store's.
void RlqsStream::RunShare(const std::shared_ptr<Report>& report, ShareJob job) {
  sluice::QuotaShareRequest local = job.request;
  local.rate_milli = job.local_rate_milli;
  auto self = shared_from_this();
  state_->local_shares->Assign(
      local, [self, report, job = std::move(job)](sluice::StatusOr<sluice::QuotaShareGrant> l) {
        self->state_->Store().Assign(
            job.request, [self, report, job,
                          l = std::move(l)](sluice::StatusOr<sluice::QuotaShareGrant> s) mutable {
              self->OnShare(report, job, std::move(s), std::move(l));
            });
      });
}

void RlqsStream::OnShare(const std::shared_ptr<Report>& report, const ShareJob& job,
                         sluice::StatusOr<sluice::QuotaShareGrant> store,
                         sluice::StatusOr<sluice::QuotaShareGrant> local) {
  Action& action = *report->response.mutable_bucket_action(job.index);
  const Rule& rule = *job.rule;
  const int64_t burst = rule.burst > 0 ? rule.burst : rule.requests_per_unit;
  auto* strategy = action.mutable_quota_assignment_action()->mutable_rate_limit_strategy();
  Assign(action, state_->ttl);
  RlqsSource source = kRlqsStore;
  if (!store.ok() && store.status().code() == sluice::StatusCode::kInvalidArgument) {
    // An argument the stores refuse (none should reach them: demands and rates are clamped
    // to their bounds) is not a store failure, and not answered by the failure policy:
    // the limit's part for this instance, as the `local` policy would size it.
    state_->engine.metrics().BadRequest();
    source = kRlqsRule;
    RlqsStrategy(job.local_rate_milli, job.request.rate_milli, burst, *strategy);
  } else if (store.ok() && store->full && local.ok()) {
    // The bucket's budget holds no more clients (docs/rlqs.md): this instance's share of
    // R / servers, as the local policy gives, rather than nothing on a limit with room.
    source = kRlqsPolicyLocal;
    RlqsStrategy(local->grant_milli, job.request.rate_milli, burst, *strategy);
  } else if (store.ok()) {
    RlqsStrategy(store->grant_milli, job.request.rate_milli, burst, *strategy);
    job.counters->clients.store(store->clients, std::memory_order_relaxed);
    job.counters->assigned_milli.store(store->assigned_milli, std::memory_order_relaxed);
  } else {
    state_->engine.metrics().RlqsStoreError();
    if (job.policy == sluice::FailurePolicy::kLocal && local.ok()) {
      source = kRlqsPolicyLocal;
      // The local share is of the limit divided among the servers: its capacity too.
      RlqsStrategy(local->grant_milli, job.request.rate_milli, burst, *strategy);
    } else {
      const bool open = job.policy == sluice::FailurePolicy::kOpen;
      source = open ? kRlqsPolicyOpen : kRlqsPolicyClosed;
      strategy->set_blanket_rule(open ? etype::RateLimitStrategy::ALLOW_ALL
                                      : etype::RateLimitStrategy::DENY_ALL);
    }
  }
  job.counters->answers[source].fetch_add(1, std::memory_order_relaxed);
  std::vector<std::string> give_back;
  {
    std::lock_guard lock(mu_);
    if (--in_flight_ == 0) give_back = std::exchange(give_back_, {});
  }
  for (const auto& id : give_back) Release(id);
  Done(report);
}

// One part of `report` is answered; the last sends the response and starts the next.
void RlqsStream::Done(const std::shared_ptr<Report>& report) {
  if (report->remaining.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  writer_.Send(report->response.SerializeAsString());
  std::unique_lock lock(mu_);
  if (closed_) return;
  writer_.Uncharge(report->charged);
  charged_ -= report->charged;
  current_ = std::exchange(waiting_, nullptr);
  if (current_ != nullptr) return ProcessFront(lock);
  const bool finish = half_closed_;
  lock.unlock();
  if (finish) writer_.Finish({});
}

}  // namespace

sluice::StatusOr<std::shared_ptr<RlqsService>> RlqsService::Create(Engine& engine,
                                                                   RlqsOptions options) {
  if (options.report_interval.count() <= 0)
    return sluice::InvalidArgumentError("the RLQS report interval must be positive");
  if (options.idle_reports < 1)
    return sluice::InvalidArgumentError("RLQS idle reports must be at least 1");
  auto state = std::make_shared<State>(engine, options);
  // The quota calls' own client (another connection to the same store, with their own
  // deadline: the runner sets EngineOptions::quota_deadline to RlqsStoreDeadline).
  if (&engine.quota_client() != &engine.client()) state->store_client = &engine.quota_client();
  auto engine_shares = engine.client().MakeQuotaShares("rlqs");
  if (!engine_shares.ok()) return engine_shares.status();
  state->engine_shares = std::move(*engine_shares);
  auto shares =
      (state->store_client ? *state->store_client : engine.client()).MakeQuotaShares("rlqs");
  if (!shares.ok()) return shares.status();
  state->shares = std::move(*shares);
  sluice::ClientOptions local;
  local.url = "memory://";
  auto local_client = sluice::Client::Create(local);
  if (!local_client.ok()) return local_client.status();
  state->local_client = std::move(*local_client);
  auto local_shares = state->local_client->MakeQuotaShares("rlqs");
  if (!local_shares.ok()) return local_shares.status();
  state->local_shares = std::move(*local_shares);
  return std::shared_ptr<RlqsService>(new RlqsService(std::move(state)));
}

const RlqsOptions& RlqsService::options() const {
  return state_->options;
}

GrpcMethod RlqsService::Method() {
  return {.path = "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas",
          .open = [state = state_](StreamWriter writer) -> std::shared_ptr<StreamCall> {
            return std::make_shared<RlqsStream>(state, std::move(writer));
          }};
}

}  // namespace sluiced
