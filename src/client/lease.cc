// Concurrency limiters and the Lease object (sluice/lease.h).
//
// A Lease's state lives in a LeaseState shared by the owner's handle, its scheduled
// heartbeat and the store calls in flight. The scheduler holds it weakly: a dropped handle stops
// the heartbeats; the release that the handle's destructor sends keeps the state until
// the store answers. Heartbeats are scheduled on the client's HeartbeatScheduler (one
// timer for all leases). A release that fails is handed to a ReleaseRetry, which the
// client keeps (not the lease) until it lands or the lease has expired.
#include "sluice/boost_first.h"  // before any Boost header

#include "sluice/lease.h"

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <boost/asio/post.hpp>

#include "algo/concurrency.h"
#include "client/client_core.h"
#include "client/gauges.h"
#include "client/lease_wait.h"
#include "core/keys.h"
#include "core/mutex.h"
#include "core/process.h"
#include "core/wait.h"

namespace sluice {
namespace internal {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

namespace {

// 128 random bits from the kernel's CSPRNG as 22 base64url characters. Bytes are drawn
// 4 KiB at a time per thread, so an acquire costs no system call on average; a pool
// drawn before a fork() is thrown away in the child.
std::string NewToken() {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  thread_local std::array<unsigned char, 4096> pool;
  thread_local std::size_t used = pool.size();
  thread_local uint64_t drawn_at_fork = 0;
  // A child must not hand out the random bytes its parent drew before forking (two
  // processes, one lease id, one slot for two holders).
  const uint64_t forks = ForkGeneration();
  if (used + 16 > pool.size() || drawn_at_fork != forks) {
    drawn_at_fork = forks;
    std::size_t filled = 0;
    while (filled < pool.size()) {
      ssize_t n = getrandom(pool.data() + filled, pool.size() - filled, 0);
      if (n > 0) filled += static_cast<std::size_t>(n);
      // EINTR: try again. getrandom blocks only before the pool is initialized at boot.
    }
    used = 0;
  }
  const unsigned char* b = pool.data() + used;
  used += 16;
  std::string token;
  token.reserve(22);
  uint32_t acc = 0;
  int bits = 0;
  for (int i = 0; i < 16; ++i) {
    acc = (acc << 8) | b[i];
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      token.push_back(kAlphabet[(acc >> bits) & 63]);
    }
  }
  if (bits > 0) token.push_back(kAlphabet[(acc << (6 - bits)) & 63]);
  return token;
}

}  // namespace

// Raised while this thread runs an on_lost callback.
thread_local int t_in_on_lost = 0;

// Raised while this thread is inside AcquireAsync's store call: an answer that arrives
// then came inline and must be posted.
thread_local int g_acquiring = 0;

namespace {

int64_t AcquiredAt(std::string_view member) {
  int64_t at = 0;
  for (char c : member) {
    if (c < '0' || c > '9') break;
    at = at * 10 + (c - '0');
  }
  return at;
}

}  // namespace

// A release that did not land (the store was unreachable), sent again in the background
// until it lands or the lease has expired by itself, whether or not its Lease still
// exists. Kept alive by the client (ClientCore::Keep), not by the lease, so a client
// dropped meanwhile is torn down as usual (the lease then expires within lease_ttl).
struct ReleaseRetry : HeartbeatScheduler::Target, std::enable_shared_from_this<ReleaseRetry> {
  ReleaseRetry(ClientCore* c, LeaseCall call_in, BootClock::time_point until_in,
               milliseconds every_in)
      : core(c), call(std::move(call_in)), until(until_in), every(every_in) {}
  void Due() override { Send(); }

  void Send() {
    call.deadline = steady_clock::now() + core->options.deadline;
    core->store->RunLease(call, [self = shared_from_this()](StatusOr<LeaseResult> r) {
      self->OnResult(r.ok() ? Status() : r.status());
    });
  }
  void OnResult(const Status& status) {
    if (!status.ok() && status.code() != StatusCode::kInvalidArgument &&
        status.code() != StatusCode::kFailedPrecondition && core->boot_now() < until) {
      core->heartbeats.Schedule(steady_clock::now() + every,
                                std::weak_ptr<HeartbeatScheduler::Target>(weak_from_this()));
      return;
    }
    core->Drop(this);  // landed, or the lease has expired in the store by now
  }

  ClientCore* const core;  // the client outlives what it keeps
  LeaseCall call;
  const BootClock::time_point until;
  const milliseconds every;
};

struct LeaseState : HeartbeatScheduler::Target, std::enable_shared_from_this<LeaseState> {
  explicit LeaseState(std::shared_ptr<ClientCore> c) : core(std::move(c)) {}
  void Due() override { Tick(); }

  std::shared_ptr<ClientCore> core;
  std::string gauge_key;  // LeaseGauges::KeyOf(limiter, encoded id)
  std::string key;
  std::string member;
  DecisionSource source = DecisionSource::kStore;
  int64_t acquired_at_ms = 0;
  milliseconds ttl{0};
  milliseconds interval{0};

  mutable Mutex mu;
  std::condition_variable_any notified;  // a running on_lost returned
  std::function<void(LeaseLoss)> on_lost SLUICE_GUARDED_BY(mu);
  // The thread running on_lost.
  std::optional<std::thread::id> notifying SLUICE_GUARDED_BY(mu);
  std::optional<HeartbeatScheduler::Key> next SLUICE_GUARDED_BY(mu);  // the scheduled heartbeat
  BootClock::time_point believable_until SLUICE_GUARDED_BY(mu);
  bool released SLUICE_GUARDED_BY(mu) = false;         // the owner let go
  bool release_pending SLUICE_GUARDED_BY(mu) = false;  // its release has not landed
  bool release_retried SLUICE_GUARDED_BY(mu) = false;  // a ReleaseRetry was started
  // A release is on its way to the store: a second Release() (the handle's destructor
  // after ReleaseAsync, the common pattern) waits for its answer instead of sending the
  // same ZREM again.
  bool release_in_flight SLUICE_GUARDED_BY(mu) = false;
  std::vector<std::function<void(Status)>> release_waiters SLUICE_GUARDED_BY(mu);
  bool counted SLUICE_GUARDED_BY(mu) = true;  // still in the `held` gauge
  LeaseLoss loss SLUICE_GUARDED_BY(mu) = LeaseLoss::kNone;

  bool Heartbeats() const { return source != DecisionSource::kFailOpen; }

  LeaseCall Call(LeaseOp op, milliseconds deadline) const {
    LeaseCall call;
    call.args.op = op;
    call.args.token = member;
    call.args.ttl_ms = ttl.count();
    call.key = key;
    if (core->options.model_clock) call.now_ms = core->options.model_clock->NowMs();
    call.deadline = steady_clock::now() + deadline;
    call.local = source == DecisionSource::kLocalFallback;
    return call;
  }

  // Leaves the `held` gauge once.
  void Uncount() SLUICE_REQUIRES(mu) {
    if (!counted) return;
    counted = false;
    core->lease_gauges.Held(gauge_key, -1, core->WallMs());
  }

  // No heartbeat scheduled any more.
  void Unschedule() SLUICE_REQUIRES(mu) {
    if (next) core->heartbeats.Cancel(*next);
    next.reset();
  }

  // Marks the lease lost (once) and tells its owner, always from an I/O thread (never
  // inside the owner's own call, e.g. a Heartbeat() that the embedded store answers
  // inline).
  void Lose(LeaseLoss why) {
    {
      MutexLock lock(mu);
      if (released || loss != LeaseLoss::kNone) return;
      loss = why;
      Unschedule();
      Uncount();
      if (!on_lost) return;
    }
    // On an I/O thread already (a heartbeat's answer, the scheduler's tick): run it now.
    // Elsewhere (an answer inline in the owner's own Heartbeat()): post it.
    if (OnIoThread()) {
      Notify(why);
    } else {
      core->Post([self = shared_from_this(), why] { self->Notify(why); });
    }
  }

  // Runs on_lost unless the owner let go first. Release() waits for it to return.
  void Notify(LeaseLoss why) {
    std::function<void(LeaseLoss)> notify;
    {
      MutexLock lock(mu);
      if (released || !on_lost) return;
      notify = std::move(on_lost);
      on_lost = nullptr;
      notifying = std::this_thread::get_id();
    }
    ++t_in_on_lost;
    notify(why);
    notify = nullptr;  // what it captured goes before the owner is told it returned
    --t_in_on_lost;
    {
      MutexLock lock(mu);
      notifying.reset();
    }
    notified.notify_all();
  }

  // The next heartbeat after `delay`, or at the lease's believable end if that comes
  // first (the tick then finds it expired).
  void Schedule(milliseconds delay) SLUICE_REQUIRES(mu) {
    Unschedule();
    // The scheduler's timers run on steady_clock; the believable end is on BootClock.
    const BootClock::duration left =
        std::max(BootClock::duration::zero(), believable_until - core->boot_now());
    const BootClock::duration wait = std::min<BootClock::duration>(delay, left);
    const auto at = steady_clock::now() + std::chrono::duration_cast<steady_clock::duration>(wait);
    next =
        core->heartbeats.Schedule(at, std::weak_ptr<HeartbeatScheduler::Target>(weak_from_this()));
  }

  void Tick() {
    bool expired;
    {
      MutexLock lock(mu);
      next.reset();  // the scheduler dropped it when it called
      if (released || loss != LeaseLoss::kNone) return;
      expired = core->boot_now() >= believable_until;
    }
    if (expired) {
      Lose(LeaseLoss::kExpired);
    } else {
      SendHeartbeat(nullptr);
    }
  }

  // Not under mu (the store may answer inline). `done` (optional) gets the outcome: OK
  // extended, or why not.
  void SendHeartbeat(std::function<void(Status)> done) {
    BootClock::time_point until;
    {
      MutexLock lock(mu);
      until = believable_until;
    }
    const auto sent = core->boot_now();
    const auto left = std::chrono::duration_cast<milliseconds>(until - sent);
    const milliseconds deadline =
        std::max(milliseconds(1), std::min(left, std::max(interval, core->options.deadline)));
    core->store->RunLease(
        Call(LeaseOp::kHeartbeat, deadline),
        [self = shared_from_this(), sent, done = std::move(done)](StatusOr<LeaseResult> r) {
          self->OnHeartbeat(sent, std::move(r), done);
        });
  }

  void OnHeartbeat(BootClock::time_point sent, StatusOr<LeaseResult> result,
                   const std::function<void(Status)>& done) {
    Status status;
    if (result.ok() && result->reply.code == 1) {
      MutexLock lock(mu);
      if (!released && loss == LeaseLoss::kNone) {
        // The store extended it from a moment after `sent`: believable until sent + ttl.
        believable_until = std::max(believable_until, sent + ttl);
        Schedule(interval);
      }
    } else if (result.ok()) {
      status = NotFoundError("the lease is gone from the store");
      Lose(LeaseLoss::kGone);
    } else {
      status = result.status();
      MutexLock lock(mu);
      if (!released && loss == LeaseLoss::kNone) {
        // Try again soon; the tick declares the lease expired if none gets through.
        Schedule(std::max(milliseconds(10), interval / 4));
      }
    }
    if (done) done(std::move(status));
  }

  // Stops heartbeating and removes the lease from its store. Waits for an on_lost that
  // is running on another thread; after it returns, on_lost never runs. A release that
  // did not land is sent again by the next call, and in the background until it lands
  // or the lease has expired.
  void Release(std::function<void(Status)> done) {
    if (core->Forked()) {
      // The parent holds the lease; nothing of its machinery is usable here.
      if (done)
        done(FailedPreconditionError("this Lease was acquired before fork(), by the parent"));
      return;
    }
    bool send;
    {
      MutexLock lock(mu);
      on_lost = nullptr;
      // Not from inside an on_lost (its own, or another lease's: two on_lost releasing
      // each other's leases on two threads would wait for each other for ever).
      if (notifying && *notifying != std::this_thread::get_id() && t_in_on_lost == 0) {
        // wait() unlocks and relocks `mu` itself (Mutex is BasicLockable); `lock` holds
        // it again when wait returns.
        notified.wait(mu, [this]() SLUICE_REQUIRES(mu) { return !notifying; });
      }
      if (!released) {
        released = true;
        Unschedule();
        Uncount();
        release_pending = Heartbeats() && loss != LeaseLoss::kGone;
      }
      if (release_pending && release_in_flight) {
        // The release on its way answers this call too.
        if (done) release_waiters.push_back(std::move(done));
        return;
      }
      send = release_pending;
      if (send) release_in_flight = true;
    }
    if (!send) {
      if (done) core->Post([done] { done(Status()); });
      return;
    }
    core->store->RunLease(
        Call(LeaseOp::kRelease, core->options.deadline),
        [self = shared_from_this(), done = std::move(done)](StatusOr<LeaseResult> r) mutable {
          Status status = r.ok() ? Status() : r.status();
          std::vector<std::function<void(Status)>> waiters = self->OnReleased(status);
          if (done) waiters.insert(waiters.begin(), std::move(done));  // the first caller first
          if (waiters.empty()) return;
          self->core->Post([waiters = std::move(waiters), status] {
            for (const auto& w : waiters) w(status);
          });
        });
  }

  // Lets go of the lease without releasing it (Lease::Detach): no more heartbeats, no
  // release, no on_lost. Returns false when there was nothing to hand over.
  bool Detach() {
    MutexLock lock(mu);
    on_lost = nullptr;
    if (notifying && *notifying != std::this_thread::get_id() && t_in_on_lost == 0) {
      notified.wait(mu, [this]() SLUICE_REQUIRES(mu) { return !notifying; });
    }
    if (released || loss != LeaseLoss::kNone) return false;
    released = true;
    Unschedule();
    Uncount();
    return Heartbeats() ? core->boot_now() < believable_until : true;
  }

  // The release's answer; returns the callers that waited for it.
  std::vector<std::function<void(Status)>> OnReleased(const Status& status) {
    BootClock::time_point until;
    std::vector<std::function<void(Status)>> waiters;
    {
      MutexLock lock(mu);
      release_in_flight = false;
      waiters.swap(release_waiters);
      if (status.ok()) {
        release_pending = false;
        return waiters;
      }
      until = believable_until;
      if (release_retried) return waiters;  // one background retry per lease is enough
      if (status.code() == StatusCode::kInvalidArgument || core->boot_now() >= until) {
        return waiters;
      }
      release_retried = true;
    }
    auto retry = std::make_shared<ReleaseRetry>(
        core.get(), Call(LeaseOp::kRelease, milliseconds(0)), until,
        std::clamp(interval / 4, milliseconds(10), milliseconds(1000)));
    core->Keep(retry);
    retry->OnResult(status);  // schedules the first retry
    return waiters;
  }
};

}  // namespace internal

using internal::LeaseState;
using std::chrono::milliseconds;

std::string_view LeaseLossName(LeaseLoss loss) {
  switch (loss) {
    case LeaseLoss::kNone: return "none";
    case LeaseLoss::kGone: return "gone";
    case LeaseLoss::kExpired: return "expired";
  }
  return "unknown";
}

Lease::Lease(Lease&& other) noexcept = default;

Lease& Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    if (state_) state_->Release(nullptr);
    state_ = std::move(other.state_);
  }
  return *this;
}

Lease::~Lease() {
  if (state_) state_->Release(nullptr);
}

bool Lease::held() const {
  if (!state_) return false;
  internal::MutexLock lock(state_->mu);
  if (state_->released || state_->loss != LeaseLoss::kNone) return false;
  return !state_->Heartbeats() || state_->core->boot_now() < state_->believable_until;
}

LeaseLoss Lease::loss() const {
  if (!state_) return LeaseLoss::kNone;
  internal::MutexLock lock(state_->mu);
  return state_->loss;
}

const std::string& Lease::id() const {
  static const std::string kEmpty;
  return state_ ? state_->member : kEmpty;
}

DecisionSource Lease::source() const {
  return state_ ? state_->source : DecisionSource::kStore;
}

int64_t Lease::acquired_at_ms() const {
  return state_ ? state_->acquired_at_ms : 0;
}

Status Lease::Release() {
  if (!state_) return Status();
  if (internal::OnIoThread()) {
    // Inside a callback (on_lost included) the answer cannot be waited for: released as
    // the destructor does, the release sent (and retried) without waiting.
    state_->Release(nullptr);
    return Status();
  }
  return internal::WaitFor<Status>(
      [this](std::function<void(Status)> done) { state_->Release(std::move(done)); });
}

void Lease::ReleaseAsync(std::function<void(Status)> done) {
  if (!state_) {
    // No client to post to: a thread of its own, so `done` still never runs inline.
    if (done) std::thread([done = std::move(done)] { done(Status()); }).detach();
    return;
  }
  state_->Release(std::move(done));
}

namespace {

// A detached lease's reference: "<source><member>|<encoded id>", the source 's' (the
// store), 'l' (the kLocal policy's embedded store) or 'o' (kOpen: no member, in no
// store). Members are "<ms>:<22 base64url>" (no '|'); the encoded id is last, so it may
// hold any byte EncodeId writes.
constexpr char kRefStore = 's';
constexpr char kRefLocal = 'l';
constexpr char kRefOpen = 'o';

struct LeaseRef {
  char source = kRefStore;
  std::string_view member;
  std::string_view encoded_id;
};

bool IsTokenByte(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

// Whether `m` is a member LeaseMember writes: 1-19 digits, ':', a 22-byte token.
bool IsLeaseMember(std::string_view m) {
  const std::size_t colon = m.find(':');
  if (colon == 0 || colon == std::string_view::npos || colon > 19) return false;
  if (!std::all_of(m.begin(), m.begin() + static_cast<std::ptrdiff_t>(colon),
                   [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  const std::string_view token = m.substr(colon + 1);
  return token.size() == 22 && std::all_of(token.begin(), token.end(), IsTokenByte);
}

std::optional<LeaseRef> ParseLeaseRef(std::string_view ref) {
  if (ref.size() < 3 || ref.size() > ConcurrencyLimiter::kMaxLeaseRefBytes) return std::nullopt;
  LeaseRef out;
  out.source = ref[0];
  if (out.source != kRefStore && out.source != kRefLocal && out.source != kRefOpen)
    return std::nullopt;
  const std::size_t bar = ref.find('|');
  if (bar == std::string_view::npos) return std::nullopt;
  out.member = ref.substr(1, bar - 1);
  out.encoded_id = ref.substr(bar + 1);
  if (out.source == kRefOpen ? !out.member.empty() : !IsLeaseMember(out.member))
    return std::nullopt;
  std::optional<std::string> id;
  if (out.encoded_id.empty() || !internal::DecodeId(out.encoded_id, id)) return std::nullopt;
  return out;
}

}  // namespace

std::string Lease::Detach() {
  if (!state_) return {};
  std::shared_ptr<LeaseState> state = std::move(state_);
  if (!state->Detach()) return {};
  const char source = state->source == DecisionSource::kFailOpen        ? kRefOpen
                      : state->source == DecisionSource::kLocalFallback ? kRefLocal
                                                                        : kRefStore;
  // The key is "<head><encoded id>}:cc": the encoded id is what lies between the head's
  // '{…:' and the last "}:".
  const std::size_t open = state->key.find('{');
  const std::size_t after_name = state->key.find(':', open);
  const std::size_t close = state->key.rfind("}:");
  std::string ref;
  ref.reserve(2 + state->member.size() + (close - after_name));
  ref.push_back(source);
  ref.append(state->member).push_back('|');
  ref.append(state->key, after_name + 1, close - after_name - 1);
  return ref;
}

Status Lease::Heartbeat() {
  if (!state_) return FailedPreconditionError("this Lease holds nothing");
  if (state_->core->Forked()) {
    return FailedPreconditionError("this Lease was acquired before fork(), by the parent");
  }
  if (!state_->Heartbeats()) return Status();
  {
    internal::MutexLock lock(state_->mu);
    if (state_->released) return FailedPreconditionError("the lease was released");
    if (state_->loss != LeaseLoss::kNone) {
      return NotFoundError("the lease was lost (" + std::string(LeaseLossName(state_->loss)) + ")");
    }
  }
  return internal::WaitFor<Status>(
      [this](std::function<void(Status)> done) { state_->SendHeartbeat(std::move(done)); });
}

namespace internal {
namespace {

// The Acquisition a lease call's answer makes (but its Lease, which the limiter makes): a
// grant starts the lease's heartbeats; a refusal says why and for how long. `sent`: when the call
// that made it was sent.
StatusOr<Acquisition> AcquisitionOf(const std::shared_ptr<LeaseState>& state,
                                    const std::string& token, int64_t limit,
                                    BootClock::time_point sent, StatusOr<LeaseResult> result) {
  if (!result.ok()) return result.status();
  const LeaseReply& reply = result->reply;
  Acquisition a;
  a.limit = limit;
  a.source = result->source;
  const bool from_store =
      result->source == DecisionSource::kStore || result->source == DecisionSource::kLocalFallback;
  // A waiting acquire's answer counts tickets, not leases (src/algo/concurrency.h).
  const bool queued = reply.code == 2 || reply.code == 3;
  if (from_store && !queued) a.live = reply.count;
  if (reply.code != 1) {
    if (from_store && !queued) {
      state->core->lease_gauges.Observe(state->gauge_key, reply.count, state->core->WallMs());
    }
    a.reason = result->source == DecisionSource::kFailClosed ? RefusalReason::kStoreUnavailable
               : reply.code == 3                             ? RefusalReason::kTooManyWaiters
                                                             : RefusalReason::kOverLimit;
    a.retry_after = milliseconds(std::max<int64_t>(0, reply.expires_at_ms - reply.now_ms));
    return a;
  }
  a.acquired = true;
  state->source = result->source;
  state->acquired_at_ms = reply.now_ms;
  if (state->Heartbeats()) state->member = LeaseMember(reply.now_ms, token);
  if (from_store) {
    state->core->lease_gauges.Granted(state->gauge_key, reply.count, state->core->WallMs());
  } else {
    state->core->lease_gauges.Held(state->gauge_key, +1, state->core->WallMs());
  }
  {
    MutexLock lock(state->mu);
    state->believable_until = sent + state->ttl;
    if (state->Heartbeats()) state->Schedule(state->interval);
  }
  return a;  // the caller hands it its Lease(state)
}

}  // namespace
}  // namespace internal

ConcurrencyLimiter::ConcurrencyLimiter(std::shared_ptr<internal::ClientCore> core, std::string name,
                                       ConcurrencyOptions options)
    : core_(std::move(core)),
      name_(std::move(name)),
      options_(options),
      key_head_(internal::KeyHead(core_->options.prefix, name_)) {}

StatusOr<std::string> ConcurrencyLimiter::KeyFor(std::string_view id) const {
  if (id.empty()) return InvalidArgumentError("id is empty");
  return internal::MakeLeaseKey(key_head_, id);
}

void ConcurrencyLimiter::AcquireAsync(std::string_view id, const AcquireOptions& options,
                                      AcquireCallback done) const {
  // Results known at once (bad input, embedded store, open breaker) are posted, never
  // delivered inside AcquireAsync, as for checks: a store that answers inline does so
  // while this thread's g_acquiring is raised.
  auto fail = [&](Status why) {
    core_->Post([done = std::move(done), why = std::move(why)] { done(why); });
  };
  if (id.empty()) return fail(InvalidArgumentError("id is empty"));
  const int64_t limit = options.limit.value_or(options_.limit);
  if (limit < 1 || limit > kMaxLimit) {
    return fail(InvalidArgumentError("limit must be between 1 and " + std::to_string(kMaxLimit) +
                                     ", got " + std::to_string(limit)));
  }
  const milliseconds deadline = options.deadline.value_or(core_->options.deadline);
  if (deadline.count() <= 0) return fail(InvalidArgumentError("deadline must be > 0 ms"));
  if (options.wait.count() < 0 || options.wait > AcquireOptions::kMaxWait) {
    return fail(InvalidArgumentError("wait must be between 0 and " +
                                     std::to_string(AcquireOptions::kMaxWait.count()) + " ms"));
  }
  if (options.wait.count() > 0 &&
      (options_.max_waiters < 1 || options_.max_waiters > ConcurrencyOptions::kMaxWaiters)) {
    return fail(InvalidArgumentError("max_waiters must be between 1 and " +
                                     std::to_string(ConcurrencyOptions::kMaxWaiters)));
  }
  internal::LeaseCall call;
  call.args.op = internal::LeaseOp::kAcquire;
  call.args.token = internal::NewToken();
  call.args.limit = limit;
  call.args.ttl_ms = options_.lease_ttl.count();
  std::string encoded = internal::EncodeId(id);
  call.key.reserve(key_head_.size() + encoded.size() + 2 + internal::kLeaseSuffix.size());
  call.key.append(key_head_).append(encoded).append("}:").append(internal::kLeaseSuffix);
  if (core_->options.model_clock) call.now_ms = core_->options.model_clock->NowMs();
  call.deadline = std::chrono::steady_clock::now() + deadline;
  call.on_failure = options_.on_failure == FailurePolicy::kDefault ? core_->options.on_failure
                                                                   : options_.on_failure;
  call.servers = options_.servers > 0 ? options_.servers : core_->options.servers;
  call.refuse_evicting = options_.refuse_evicting_store;
  const auto sent = core_->boot_now();
  auto state = std::make_shared<LeaseState>(core_);
  state->gauge_key = internal::LeaseGauges::KeyOf(name_, encoded);
  state->key = call.key;
  state->ttl = options_.lease_ttl;
  state->interval = options_.heartbeat_interval.count() > 0 ? options_.heartbeat_interval
                                                            : options_.lease_ttl / 6;
  {
    internal::MutexLock lock(state->mu);  // not shared yet; the analysis asks all the same
    state->on_lost = options.on_lost;
  }
  const std::string token = call.args.token;
  if (options.wait.count() > 0) {
    call.args.op = internal::LeaseOp::kWait;
    call.args.ticket_ttl_ms = internal::kTicketTtl.count();
    call.args.max_waiters = options_.max_waiters;
    internal::StartWaitingAcquire({.core = core_,
                                   .call = std::move(call),
                                   .wait_until = std::chrono::steady_clock::now() + options.wait,
                                   .call_deadline = deadline,
                                   .finish = [state, token, limit, done = std::move(done)](
                                                 StatusOr<internal::LeaseResult> result,
                                                 internal::BootClock::time_point sent_at) {
                                     StatusOr<Acquisition> answer = internal::AcquisitionOf(
                                         state, token, limit, sent_at, std::move(result));
                                     if (answer.ok() && answer->acquired)
                                       answer->lease = Lease(state);
                                     done(std::move(answer));
                                   }});
    return;
  }
  ++internal::g_acquiring;
  core_->store->RunLease(std::move(call), [state, token, limit, sent, done = std::move(done)](
                                              StatusOr<internal::LeaseResult> result) mutable {
    StatusOr<Acquisition> answer =
        internal::AcquisitionOf(state, token, limit, sent, std::move(result));
    if (answer.ok() && answer->acquired) answer->lease = Lease(state);
    if (internal::g_acquiring == 0) return done(std::move(answer));
    state->core->Post([done = std::move(done), answer = std::move(answer)]() mutable {
      done(std::move(answer));
    });
  });
  --internal::g_acquiring;
}

StatusOr<Acquisition> ConcurrencyLimiter::Acquire(std::string_view id,
                                                  const AcquireOptions& options) const {
  return internal::WaitFor<StatusOr<Acquisition>>(
      [&](AcquireCallback done) { AcquireAsync(id, options, std::move(done)); });
}

void ConcurrencyLimiter::RunDetached(std::string_view lease_ref, bool release,
                                     std::function<void(StatusOr<milliseconds>)> done) const {
  const std::optional<LeaseRef> ref = ParseLeaseRef(lease_ref);
  if (!ref) {
    return core_->Post([done = std::move(done)] {
      done(InvalidArgumentError("not a lease reference of this limiter"));
    });
  }
  if (ref->source == kRefOpen) {
    // Granted while the store could not answer: nothing holds it, nothing can lose it.
    const milliseconds left = release ? milliseconds(0) : options_.lease_ttl;
    return core_->Post([done = std::move(done), left] { done(left); });
  }
  internal::LeaseCall call;
  call.args.op = release ? internal::LeaseOp::kRelease : internal::LeaseOp::kHeartbeat;
  call.args.token = std::string(ref->member);
  call.args.ttl_ms = options_.lease_ttl.count();
  call.key.reserve(key_head_.size() + ref->encoded_id.size() + 2 + internal::kLeaseSuffix.size());
  call.key.append(key_head_).append(ref->encoded_id).append("}:").append(internal::kLeaseSuffix);
  if (core_->options.model_clock) call.now_ms = core_->options.model_clock->NowMs();
  call.deadline = std::chrono::steady_clock::now() + core_->options.deadline;
  call.local = ref->source == kRefLocal;
  // A release the store could not take is sent again in the background, as a Lease's
  // is, until it lands or lease_ttl has passed (the lease cannot outlive that: its last
  // heartbeat was before now).
  std::optional<internal::LeaseCall> retry;
  if (release) retry = call;
  const auto retry_until = core_->boot_now() + options_.lease_ttl;
  const milliseconds retry_every =
      std::clamp(options_.lease_ttl / 24, milliseconds(10), milliseconds(1000));
  // A store that answers inline (the embedded one) does so before `returned` is set.
  auto returned = std::make_shared<std::atomic<bool>>(false);
  auto answer = [core = core_, returned, release, retry = std::move(retry), retry_until,
                 retry_every, done = std::move(done)](StatusOr<internal::LeaseResult> r) mutable {
    StatusOr<milliseconds> out = milliseconds(0);
    if (!r.ok()) {
      out = r.status();
      if (retry && r.status().code() != StatusCode::kInvalidArgument) {
        auto again = std::make_shared<internal::ReleaseRetry>(core.get(), std::move(*retry),
                                                              retry_until, retry_every);
        core->Keep(again);
        again->OnResult(r.status());  // schedules the first retry
      }
    } else if (!release && r->reply.code != 1) {
      out = NotFoundError("the lease is gone (released, expired, or released by an operator)");
    } else if (!release) {
      out = milliseconds(std::max<int64_t>(0, r->reply.expires_at_ms - r->reply.now_ms));
    }
    if (returned->load()) return done(std::move(out));
    core->Post([done = std::move(done), out = std::move(out)]() mutable { done(std::move(out)); });
  };
  core_->store->RunLease(std::move(call), std::move(answer));
  returned->store(true);
}

void ConcurrencyLimiter::HeartbeatAsync(std::string_view lease_ref,
                                        std::function<void(StatusOr<milliseconds>)> done) const {
  RunDetached(lease_ref, false, std::move(done));
}

StatusOr<milliseconds> ConcurrencyLimiter::Heartbeat(std::string_view lease_ref) const {
  return internal::WaitFor<StatusOr<milliseconds>>(
      [&](std::function<void(StatusOr<milliseconds>)> done) {
        HeartbeatAsync(lease_ref, std::move(done));
      });
}

void ConcurrencyLimiter::ReleaseAsync(std::string_view lease_ref,
                                      std::function<void(Status)> done) const {
  RunDetached(lease_ref, true, [done = std::move(done)](StatusOr<milliseconds> r) {
    done(r.ok() ? Status() : r.status());
  });
}

Status ConcurrencyLimiter::Release(std::string_view lease_ref) const {
  return internal::WaitFor<Status>(
      [&](std::function<void(Status)> done) { ReleaseAsync(lease_ref, std::move(done)); });
}

StatusOr<std::vector<LeaseInfo>> ConcurrencyLimiter::List(std::string_view id,
                                                          milliseconds deadline) const {
  if (id.empty()) return InvalidArgumentError("id is empty");
  internal::LeaseCall call;
  call.args.op = internal::LeaseOp::kList;
  call.key = internal::MakeLeaseKey(key_head_, id);
  if (core_->options.model_clock) call.now_ms = core_->options.model_clock->NowMs();
  call.deadline = std::chrono::steady_clock::now() + deadline;
  auto result =
      internal::WaitFor<StatusOr<internal::LeaseResult>>([&](internal::LeaseCallback done) {
        core_->store->RunLease(std::move(call), std::move(done));
      });
  if (!result.ok()) return result.status();
  std::vector<LeaseInfo> leases;
  for (const internal::LeaseRow& row : result->reply.rows) {
    leases.push_back({row.member, internal::AcquiredAt(row.member), row.expires_at_ms});
  }
  return leases;
}

}  // namespace sluice
