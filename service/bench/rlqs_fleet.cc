// service/bench/rlqs_fleet.cc — the simulated Envoys of rlqs_fleet.h.
//
// One driver thread plays every client's timeline in order (requests at their scheduled
// times, report ticks, the responses that arrived, the per-second snapshots), every tick
// (FleetOptions::tick) up to the present; gRPC's threads only queue what arrives, stamped with its
// arrival time. So a client's state has one owner and each decision is taken at the
// request's scheduled time with the assignment in force then.
#include "service/bench/rlqs_fleet.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include <grpcpp/grpcpp.h>

#include "envoy/service/rate_limit_quota/v3/rlqs.grpc.pb.h"
#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"

namespace sluiced::bench {
namespace {

namespace rlqs = envoy::service::rate_limit_quota::v3;
namespace rls = envoy::service::ratelimit::v3;
using Clock = std::chrono::steady_clock;
using Reports = rlqs::RateLimitQuotaUsageReports;
using Response = rlqs::RateLimitQuotaResponse;
using BucketAction = Response::BucketAction;
using Nanos = int64_t;  // fleet time: ns since the start
constexpr Nanos kSecond = 1'000'000'000;
constexpr Nanos kNever = std::numeric_limits<Nanos>::max();
constexpr double kInfinity = std::numeric_limits<double>::infinity();

Nanos ToNanos(double seconds) {
  return seconds >= 9e9 ? kNever : static_cast<Nanos>(std::llround(seconds * 1e9));
}

Nanos Since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
}

// Open-loop arrivals of one schedule: a request is due each time the demand's integral
// grows by 1 (the first at 1/2), so requests are evenly spaced within a step and a new
// demand takes effect at its step.
class Arrivals {
 public:
  explicit Arrivals(const DemandSchedule* schedule) : schedule_(schedule) { Advance(); }
  Nanos next() const { return next_; }

  void Advance() {
    const DemandSchedule& s = *schedule_;
    while (true) {
      while (step_ + 1 < s.size() && s[step_ + 1].at_s <= t_) ++step_;
      const bool before = s.empty() || t_ < s[0].at_s;
      const double rate = before ? 0 : s[step_].rate;
      const double end = s.empty()              ? kInfinity
                         : before               ? s[0].at_s
                         : step_ + 1 < s.size() ? s[step_ + 1].at_s
                                                : kInfinity;
      if (rate > 0 && t_ + owed_ / rate <= end) {
        t_ += owed_ / rate;
        owed_ = 1;
        next_ = ToNanos(t_);
        return;
      }
      if (end == kInfinity) {
        next_ = kNever;
        return;
      }
      owed_ -= rate * (end - t_);
      t_ = end;
    }
  }

 private:
  const DemandSchedule* schedule_;
  double t_ = 0;       // seconds: where the integral has been taken to
  double owed_ = 0.5;  // requests' worth of demand until the next one
  std::size_t step_ = 0;
  Nanos next_ = kNever;
};

// A token bucket refilled continuously, as Envoy's AtomicTokenBucketImpl.
struct TokenBucket {
  double max = 0, rate = 0, tokens = 0;
  Nanos last = 0;
  void Refill(Nanos t) {
    if (t <= last) return;
    tokens = std::min(max, tokens + rate * static_cast<double>(t - last) / 1e9);
    last = t;
  }
};

// The responses a stream received, stamped with their arrival time, for the driver.
struct Inbox {
  std::mutex mu;
  std::deque<std::pair<Nanos, Response>> responses;
};

// The streams whose OnDone has not run yet: the fleet waits for none before it ends.
struct LiveStreams {
  std::mutex mu;
  std::condition_variable cv;
  int live = 0;
  void Add() {
    std::lock_guard lock(mu);
    ++live;
  }
  void Done() {
    std::lock_guard lock(mu);
    if (--live == 0) cv.notify_all();
  }
  bool WaitNone(Clock::duration within) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, within, [this] { return live == 0; });
  }
};

// One StreamRateLimitQuotas call (grpc++'s callback API). Reports are written one at a
// time in order; a read is always pending. A hold keeps OnDone back while the client may
// still start an operation: it goes once the stream has failed or been half-closed.
class QuotaStream : public grpc::ClientBidiReactor<Reports, Response> {
 public:
  static std::shared_ptr<QuotaStream> Open(rlqs::RateLimitQuotaService::Stub* stub,
                                           std::shared_ptr<Inbox> inbox,
                                           std::shared_ptr<LiveStreams> live,
                                           Clock::time_point start) {
    std::shared_ptr<QuotaStream> s(new QuotaStream(std::move(inbox), std::move(live), start));
    s->live_->Add();
    stub->async()->StreamRateLimitQuotas(&s->context_, s.get());
    s->AddHold();
    s->StartRead(&s->response_);
    s->StartCall();
    return s;
  }

  // Queues a report; false when the stream has ended (the report is dropped, as Envoy's).
  bool Send(const Reports& reports) {
    std::unique_lock lock(mu_);
    if (ended_ || !held_) return false;
    queue_.push_back(reports);
    if (queue_.size() > 1) return true;  // OnWriteDone writes it
    const Reports* front = &queue_.front();
    lock.unlock();
    StartWrite(front);
    return true;
  }

  // The stream has ended (the server closed it or it failed): the client reconnects.
  bool ended() {
    std::lock_guard lock(mu_);
    return ended_;
  }

  // Half-closes once the queued reports are written.
  void Close() {
    std::unique_lock lock(mu_);
    if (!held_) return;
    closing_ = true;
    if (!queue_.empty()) return;  // OnWriteDone half-closes
    held_ = false;
    lock.unlock();
    StartWritesDone();
    RemoveHold();
  }

  void Cancel() { context_.TryCancel(); }

  void OnWriteDone(bool ok) override {
    std::unique_lock lock(mu_);
    queue_.pop_front();
    if (!ok || ended_) {
      ended_ = true;
      queue_.clear();
      ReleaseHold(lock);
      return;
    }
    if (!queue_.empty()) {
      const Reports* front = &queue_.front();
      lock.unlock();
      StartWrite(front);
      return;
    }
    if (closing_ && held_) {
      held_ = false;
      lock.unlock();
      StartWritesDone();
      RemoveHold();
    }
  }

  void OnReadDone(bool ok) override {
    if (ok) {
      {
        std::lock_guard lock(inbox_->mu);
        inbox_->responses.emplace_back(Since(start_), std::move(response_));
      }
      response_.Clear();
      StartRead(&response_);
      return;
    }
    std::unique_lock lock(mu_);
    ended_ = true;
    if (queue_.empty()) ReleaseHold(lock);  // else the write in flight's OnWriteDone does
  }

  // The last callback: the stream is not destroyed here but by its client, on the driver
  // thread, once none is live. Its context holds a reference to the channel, and a channel
  // whose last reference goes on one of grpc++'s callback threads shuts that thread's own
  // completion queue down from inside it (grpc++ 1.51 aborts).
  void OnDone(const grpc::Status& /*status*/) override {
    {
      std::lock_guard lock(mu_);
      ended_ = true;
    }
    live_->Done();
  }

 private:
  QuotaStream(std::shared_ptr<Inbox> inbox, std::shared_ptr<LiveStreams> live,
              Clock::time_point start)
      : inbox_(std::move(inbox)), live_(std::move(live)), start_(start) {}

  void ReleaseHold(std::unique_lock<std::mutex>& lock) {
    if (!held_) return;
    held_ = false;
    lock.unlock();
    RemoveHold();
  }

  std::shared_ptr<Inbox> inbox_;
  std::shared_ptr<LiveStreams> live_;
  Clock::time_point start_;
  grpc::ClientContext context_;
  Response response_;
  std::mutex mu_;
  std::deque<Reports> queue_;  // front: the report being written
  bool held_ = true, ended_ = false, closing_ = false;
};

// The HTTP/2 connections of a run, by target and slot (client index / streams per
// connection). Only the driver thread uses it; it outlives every client and stream, so a
// channel's last reference goes on that thread (see QuotaStream::OnDone).
struct Channels {
  std::map<std::pair<std::string, std::size_t>, std::shared_ptr<grpc::Channel>> open;
};

// What every client of a run shares.
struct Fleet {
  const FleetOptions* options;
  Clock::time_point start;
  Nanos end;
  std::size_t seconds;  // per-second slots: ceil(options.seconds)
  std::shared_ptr<LiveStreams> live = std::make_shared<LiveStreams>();
  std::shared_ptr<Channels> channels = std::make_shared<Channels>();
};

// A channel of its own to `target`: a connection no other channel shares.
std::shared_ptr<grpc::Channel> OwnChannel(const std::string& target) {
  static std::atomic<int> next_id{0};
  grpc::ChannelArguments args;
  args.SetInt("grpc.channel_id", next_id.fetch_add(1));  // distinct args: a connection of its own
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

bool SameBucket(const rlqs::BucketId& id, const BucketId& mine) {
  if (static_cast<std::size_t>(id.bucket().size()) != mine.size()) return false;
  for (const auto& [k, v] : mine) {
    auto it = id.bucket().find(k);
    if (it == id.bucket().end() || it->second != v) return false;
  }
  return true;
}

// Whether Envoy takes an assignment as unchanged (its protoTokenBucketsEq): max_tokens,
// tokens_per_fill and only the nanos of fill_interval, not its seconds.
bool SameTokenBucket(const envoy::type::v3::TokenBucket& a, const envoy::type::v3::TokenBucket& b) {
  return a.max_tokens() == b.max_tokens() &&
         a.tokens_per_fill().value() == b.tokens_per_fill().value() &&
         a.fill_interval().nanos() == b.fill_interval().nanos();
}

// One simulated Envoy with one bucket, as its rate_limit_quota filter behaves. Only the
// driver thread touches it (its stream's callbacks fill the inbox).
class RlqsClient {
 public:
  RlqsClient(int index, const FleetClient& spec, const Fleet& fleet)
      : index_(index), spec_(spec), fleet_(fleet), arrivals_(&spec.demand) {
    result_.seconds.resize(fleet.seconds);
  }

  // Plays this client's timeline up to `to`: snapshots due at or before it, responses,
  // report ticks and requests due before it, in time order.
  void Advance(Nanos to) {
    std::deque<std::pair<Nanos, Response>> arrived;
    {
      std::lock_guard lock(inbox_->mu);
      while (!inbox_->responses.empty() && inbox_->responses.front().first < to) {
        arrived.push_back(std::move(inbox_->responses.front()));
        inbox_->responses.pop_front();
      }
    }
    while (true) {
      const Nanos snapshot = NextSnapshot();
      const Nanos response = arrived.empty() ? kNever : arrived.front().first;
      const Nanos tick = next_report_, request = arrivals_.next();
      const Nanos first = std::min({response, tick, request});
      if (snapshot <= to && snapshot <= first) {
        Snapshot(snapshot);
      } else if (first >= to) {
        return;
      } else if (response == first) {
        Apply(arrived.front().second, response);
        arrived.pop_front();
      } else if (tick == first) {
        Tick(tick);
      } else {
        Request(request);
        arrivals_.Advance();
      }
    }
  }

  void Close() {
    if (!stream_) return;
    if (stream_->ended()) ++result_.stream_ends;
    stream_->Close();
  }
  void Cancel() {
    if (stream_) stream_->Cancel();
  }
  ClientResult& result() { return result_; }

 private:
  SecondStats& At(Nanos t) {
    const auto s = static_cast<std::size_t>(std::max<Nanos>(t, 0) / kSecond);
    return s < result_.seconds.size() ? result_.seconds[s] : beyond_;
  }

  Nanos NextSnapshot() const {
    if (snapshots_ >= result_.seconds.size()) return kNever;
    return std::min(static_cast<Nanos>(snapshots_ + 1) * kSecond, fleet_.end);
  }

  // The assignment in force at the end of second `snapshots_`.
  void Snapshot(Nanos t) {
    Expire(t);
    SecondStats& s = result_.seconds[snapshots_++];
    s.kind = kind_;
    s.assigned_rate = kind_ == AssignmentKind::kTokenBucket ? bucket_.rate : 0;
  }

  void Request(Nanos t) {
    SecondStats& s = At(t);
    ++s.requests;
    bool allow;
    if (!active_) {
      // The bucket's first request: decided by the no-assignment behaviour, counted in the
      // report that subscribes the bucket at once (time_elapsed 0), as Envoy's createBucket.
      allow = fleet_.options->no_assignment == NoAssignment::kAllowAll;
      active_ = true;
      last_report_ = t;
      if (subscribed_at_ < 0) subscribed_at_ = t;
      (allow ? allowed_ : denied_) = 1;
      if (next_report_ == kNever) {  // the first bucket starts the stream and the timer
        next_report_ = t + fleet_.options->report_interval.count() * 1'000'000;
        OpenStream();
      }
      SendReport(t);
    } else {
      allow = Admit(t);
      ++(allow ? allowed_ : denied_);
    }
    ++(allow ? s.admitted : s.denied);
  }

  bool Admit(Nanos t) {
    Expire(t);
    switch (kind_) {
      case AssignmentKind::kNone: return fleet_.options->no_assignment == NoAssignment::kAllowAll;
      case AssignmentKind::kAllowAll: return true;
      case AssignmentKind::kDenyAll: return false;
      case AssignmentKind::kTokenBucket:
        bucket_.Refill(t);
        if (bucket_.tokens < 1) return false;
        bucket_.tokens -= 1;
        return true;
    }
    return true;
  }

  // An assignment past its TTL is dropped (token bucket included): back to the
  // no-assignment behaviour, as Envoy without a fallback action.
  void Expire(Nanos t) {
    if (kind_ != AssignmentKind::kNone && t >= expires_) kind_ = AssignmentKind::kNone;
  }

  // Every interval: a report of every bucket; a stream that ended is replaced first, on
  // the next target (Envoy restarts its stream on the report timer).
  void Tick(Nanos t) {
    next_report_ = t + fleet_.options->report_interval.count() * 1'000'000;
    if (stream_ && stream_->ended()) {
      ++result_.stream_ends;
      stream_ = nullptr;
    }
    if (!stream_) OpenStream();
    SendReport(t);
  }

  // The counts since the last report (then zeroed) and the whole seconds since it.
  void SendReport(Nanos t) {
    Reports reports;
    reports.set_domain(spec_.domain);
    if (active_) {
      auto* usage = reports.add_bucket_quota_usages();
      for (const auto& [k, v] : spec_.bucket)
        (*usage->mutable_bucket_id()->mutable_bucket())[k] = v;
      usage->mutable_time_elapsed()->set_seconds((t - last_report_) / kSecond);
      usage->set_num_requests_allowed(allowed_);
      usage->set_num_requests_denied(denied_);
      allowed_ = denied_ = 0;
      last_report_ = t;
    }
    if (stream_ && stream_->Send(reports)) ++result_.reports_sent;
  }

  void OpenStream() {
    const auto& targets = fleet_.options->targets;
    const std::string& target =
        targets[(static_cast<std::size_t>(index_) + result_.streams) % targets.size()];
    auto& stub = stubs_[target];
    if (!stub) {
      const auto per =
          static_cast<std::size_t>(std::max(1, fleet_.options->streams_per_connection));
      auto& channel = fleet_.channels->open[{target, static_cast<std::size_t>(index_) / per}];
      if (!channel) channel = OwnChannel(target);
      stub = rlqs::RateLimitQuotaService::NewStub(channel);
    }
    streams_.push_back(QuotaStream::Open(stub.get(), inbox_, fleet_.live, fleet_.start));
    stream_ = streams_.back().get();
    ++result_.streams;
  }

  void Apply(const Response& response, Nanos t) {
    ++result_.responses;
    for (const BucketAction& action : response.bucket_action()) {
      // Ids this client did not report are ignored, as Envoy ignores a bucket it lacks.
      if (!active_ || !SameBucket(action.bucket_id(), spec_.bucket)) continue;
      if (action.has_abandon_action()) {  // the bucket is erased; its next request subscribes
        active_ = false;
        kind_ = AssignmentKind::kNone;
        allowed_ = denied_ = 0;
        continue;
      }
      if (action.has_quota_assignment_action()) Assign(action.quota_assignment_action(), t);
    }
  }

  void Assign(const BucketAction::QuotaAssignmentAction& assignment, Nanos t) {
    const auto& strategy = assignment.rate_limit_strategy();
    if (strategy.has_blanket_rule()) {
      kind_ = strategy.blanket_rule() == envoy::type::v3::RateLimitStrategy::DENY_ALL
                  ? AssignmentKind::kDenyAll
                  : AssignmentKind::kAllowAll;
    } else if (strategy.has_token_bucket()) {
      AssignTokenBucket(strategy.token_bucket(), t);
    } else {
      return;  // requests_per_time_unit or nothing: Envoy does not apply it
    }
    if (kind_ != AssignmentKind::kTokenBucket) ++result_.blanket_assignments;
    if (result_.first_kind == AssignmentKind::kNone) {
      result_.first_kind = kind_;
      result_.first_rate = kind_ == AssignmentKind::kTokenBucket ? bucket_.rate : 0;
      result_.first_after_s = static_cast<double>(t - subscribed_at_) / 1e9;
    }
    expires_ = t + assignment.assignment_time_to_live().seconds() * kSecond;
    ++At(t).assignments;
  }

  // A new token bucket starts full; a changed one keeps the old one's fill ratio; an
  // identical one keeps the old bucket as it is. Rate: tokens_per_fill per fill_interval's
  // whole seconds (Envoy's; an interval under 1 s is taken as 1 s here, where Envoy would
  // divide by zero).
  void AssignTokenBucket(const envoy::type::v3::TokenBucket& assigned, Nanos t) {
    const bool had = kind_ == AssignmentKind::kTokenBucket;
    kind_ = AssignmentKind::kTokenBucket;
    if (had && SameTokenBucket(assigned, assigned_)) return;
    assigned_ = assigned;
    const double max = assigned.max_tokens();
    const double rate =
        static_cast<double>(assigned.tokens_per_fill().value()) /
        static_cast<double>(std::max<int64_t>(1, assigned.fill_interval().seconds()));
    double tokens = max;
    if (had) {
      bucket_.Refill(t);
      tokens = bucket_.max > 0 ? bucket_.tokens / bucket_.max * max : max;
    }
    At(t).tokens_created += std::max(0.0, tokens - (had ? bucket_.tokens : 0.0));
    bucket_ = TokenBucket{.max = max, .rate = rate, .tokens = tokens, .last = t};
  }

  const int index_;
  const FleetClient& spec_;
  const Fleet& fleet_;
  Arrivals arrivals_;
  ClientResult result_;
  SecondStats beyond_;  // events past the last second land here
  std::size_t snapshots_ = 0;
  std::shared_ptr<Inbox> inbox_ = std::make_shared<Inbox>();
  std::map<std::string, std::unique_ptr<rlqs::RateLimitQuotaService::Stub>> stubs_;
  // Every stream this client opened (destroyed before the stubs, whose channels they
  // use), and the current one, if any.
  std::vector<std::shared_ptr<QuotaStream>> streams_;
  QuotaStream* stream_ = nullptr;
  Nanos next_report_ = kNever;  // the report timer, started by the first bucket
  // The bucket: subscribed or not, its counts since the last report.
  bool active_ = false;
  uint64_t allowed_ = 0, denied_ = 0;
  Nanos last_report_ = 0;
  Nanos subscribed_at_ = -1;  // its first request
  // Its assignment.
  AssignmentKind kind_ = AssignmentKind::kNone;
  Nanos expires_ = kNever;
  envoy::type::v3::TokenBucket assigned_;
  TokenBucket bucket_;
};

FleetResult RunRlqs(const Fleet& fleet) {
  const FleetOptions& o = *fleet.options;
  std::vector<std::unique_ptr<RlqsClient>> clients;
  for (std::size_t i = 0; i < o.clients.size(); ++i) {
    clients.push_back(std::make_unique<RlqsClient>(static_cast<int>(i), o.clients[i], fleet));
  }
  std::this_thread::sleep_until(fleet.start);
  for (Nanos now = Since(fleet.start); now < fleet.end; now = Since(fleet.start)) {
    for (auto& c : clients) c->Advance(now);
    std::this_thread::sleep_for(o.tick);
  }
  for (auto& c : clients) c->Advance(fleet.end);
  // Half-close every stream; cancel what is still open after 2 s. The streams' callbacks
  // use what the clients own (stubs, channels): none may be left when they go.
  for (auto& c : clients) c->Close();
  if (!fleet.live->WaitNone(std::chrono::seconds(2))) {
    for (auto& c : clients) c->Cancel();
    while (!fleet.live->WaitNone(std::chrono::seconds(1))) {
    }
  }
  FleetResult result;
  for (auto& c : clients) result.clients.push_back(std::move(c->result()));
  return result;
}

// One RLS thread: its clients' requests in time order, one ShouldRateLimit each, sent at
// the scheduled time or, when the thread is behind, as soon as it can (lag is recorded).
void RunRlsThread(const Fleet& fleet, const std::vector<std::size_t>& mine,
                  std::vector<ClientResult>& results) {
  const FleetOptions& o = *fleet.options;
  std::map<std::string, std::unique_ptr<rls::RateLimitService::Stub>> stubs;
  std::vector<Arrivals> arrivals;
  std::vector<rls::RateLimitService::Stub*> stub_of;
  for (std::size_t i : mine) {
    arrivals.emplace_back(&o.clients[i].demand);
    const std::string& target = o.targets[i % o.targets.size()];
    auto& stub = stubs[target];
    if (!stub) stub = rls::RateLimitService::NewStub(OwnChannel(target));
    stub_of.push_back(stub.get());
  }
  while (!arrivals.empty()) {
    std::size_t k = 0;
    for (std::size_t j = 1; j < arrivals.size(); ++j) {
      if (arrivals[j].next() < arrivals[k].next()) k = j;
    }
    if (arrivals[k].next() >= fleet.end) return;
    const Nanos due = arrivals[k].next();
    arrivals[k].Advance();
    std::this_thread::sleep_until(fleet.start + std::chrono::nanoseconds(due));
    const Nanos sent = Since(fleet.start);
    if (sent >= fleet.end) return;
    const FleetClient& spec = o.clients[mine[k]];
    rls::RateLimitRequest request;
    request.set_domain(spec.domain);
    auto* descriptor = request.add_descriptors();
    for (const auto& [key, value] : spec.bucket) {  // std::map: sorted by key
      auto* entry = descriptor->add_entries();
      entry->set_key(key);
      entry->set_value(value);
    }
    rls::RateLimitResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
    const grpc::Status status = stub_of[k]->ShouldRateLimit(&context, request, &response);
    ClientResult& r = results[mine[k]];
    SecondStats& s = r.seconds[static_cast<std::size_t>(due / kSecond)];
    r.max_lag_s = std::max(r.max_lag_s, static_cast<double>(sent - due) / 1e9);
    ++s.requests;
    if (!status.ok()) ++r.errors;  // admitted: Envoy's ratelimit filter fails open by default
    const bool over = status.ok() && response.overall_code() == rls::RateLimitResponse::OVER_LIMIT;
    ++(over ? s.denied : s.admitted);
  }
}

FleetResult RunRls(const Fleet& fleet) {
  const FleetOptions& o = *fleet.options;
  const auto threads = static_cast<std::size_t>(std::max(1, o.rls_threads));
  std::vector<ClientResult> results(o.clients.size());
  for (auto& r : results) r.seconds.resize(fleet.seconds);
  std::vector<std::vector<std::size_t>> split(threads);
  for (std::size_t i = 0; i < o.clients.size(); ++i) split[i % threads].push_back(i);
  std::vector<std::thread> running;
  for (const auto& mine : split) {
    running.emplace_back([&fleet, &mine, &results] { RunRlsThread(fleet, mine, results); });
  }
  for (auto& t : running) t.join();
  FleetResult result;
  result.clients = std::move(results);
  return result;
}

// The fleet's per-second sums and the run's totals.
void Sum(const FleetOptions& o, FleetResult& r) {
  r.fleet.assign(r.clients.empty() ? 0 : r.clients[0].seconds.size(), FleetSecond{});
  for (std::size_t i = 0; i < r.clients.size(); ++i) {
    const ClientResult& c = r.clients[i];
    for (std::size_t s = 0; s < c.seconds.size(); ++s) {
      const SecondStats& x = c.seconds[s];
      FleetSecond& f = r.fleet[s];
      f.demand += DemandAt(o.clients[i].demand, static_cast<double>(s));
      f.requests += x.requests;
      f.admitted += x.admitted;
      f.denied += x.denied;
      f.assignments += x.assignments;
      f.tokens_created += x.tokens_created;
      f.assigned_rate += x.kind == AssignmentKind::kTokenBucket ? x.assigned_rate : 0;
      f.allow_all += x.kind == AssignmentKind::kAllowAll;
      f.deny_all += x.kind == AssignmentKind::kDenyAll;
      f.no_assignment += x.kind == AssignmentKind::kNone;
    }
    r.reports_sent += c.reports_sent;
    r.responses += c.responses;
    r.streams += c.streams;
    r.stream_ends += c.stream_ends;
    r.errors += c.errors;
    r.blanket_assignments += c.blanket_assignments;
    r.max_lag_s = std::max(r.max_lag_s, c.max_lag_s);
  }
  for (const FleetSecond& f : r.fleet) {
    r.requests += f.requests;
    r.admitted += f.admitted;
    r.denied += f.denied;
  }
}

}  // namespace

double DemandAt(const DemandSchedule& schedule, double t_s) {
  double rate = 0;
  for (const DemandStep& step : schedule) {
    if (step.at_s > t_s) break;
    rate = step.rate;
  }
  return rate;
}

std::vector<double> SkewedShares(int n, double skew) {
  std::vector<double> shares;
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    shares.push_back(std::pow(static_cast<double>(i + 1), -skew));
    sum += shares.back();
  }
  for (double& s : shares) s /= sum;
  return shares;
}

FleetResult RunFleet(const FleetOptions& options) {
  Fleet fleet{.options = &options,
              .start = options.start.value_or(Clock::now()),
              .end = ToNanos(options.seconds),
              .seconds = static_cast<std::size_t>(std::ceil(options.seconds))};
  FleetResult result = options.targets.empty() || options.clients.empty() ? FleetResult{}
                       : options.mode == FleetMode::kRlqs                 ? RunRlqs(fleet)
                                                                          : RunRls(fleet);
  Sum(options, result);
  return result;
}

}  // namespace sluiced::bench
