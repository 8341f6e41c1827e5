// The concurrency lease API (sluice/lease.h) on the embedded store: option validation,
// grants up to the limit, release by destructor and by Release(), heartbeats that keep a
// lease past its ttl, per-call limits, List, the audited ReleaseAll (and what its holders
// see), and the lease gauges in Client::Metrics() and the Prometheus text.
#include "sluice/boost_first.h"  // before any Boost header

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "client/client_core.h"
#include "client/gauges.h"
#include "sluice/asio.h"
#include "sluice/sluice.h"
#include "testing/fake_clock.h"
#include "testing/status_matchers.h"

using sluice::testing::IsOk;
namespace sluice::lease_test {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr int64_t kT0 = 1'700'000'000'123;

std::shared_ptr<Client> MemoryClient(std::shared_ptr<testing::FakeClock> clock = nullptr) {
  auto client = Client::Create({.url = "memory://", .model_clock = std::move(clock)});
  EXPECT_TRUE(client.ok()) << client.status().ToString();
  return *client;
}

ConcurrencyLimiter MakeLimiter(const std::shared_ptr<Client>& client, const std::string& name,
                               const ConcurrencyOptions& options) {
  auto limiter = client->MakeConcurrencyLimiter(name, options);
  EXPECT_TRUE(limiter.ok()) << limiter.status().ToString();
  return *std::move(limiter);
}

// Polls `done` every 2 ms until it holds or `timeout` passes.
bool WaitUntil(const std::function<bool()>& done, milliseconds timeout) {
  const auto until = steady_clock::now() + timeout;
  while (!done()) {
    if (steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(milliseconds(2));
  }
  return true;
}

int64_t WallMs() {
  return std::chrono::duration_cast<milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::optional<double> Gauge(const std::vector<MetricSample>& samples, const std::string& name,
                            const std::string& limiter, const std::string& id) {
  for (const MetricSample& s : samples) {
    if (s.name != name) continue;
    const std::vector<std::pair<std::string, std::string>> labels = {{"limiter", limiter},
                                                                     {"id", id}};
    if (s.labels != labels) continue;
    EXPECT_EQ(s.type, MetricType::kGauge) << name;
    return s.value;
  }
  return std::nullopt;
}

struct Gauges {
  std::optional<double> held, live, max_1m;
  bool operator==(const Gauges&) const = default;
};
std::ostream& operator<<(std::ostream& os, const Gauges& g) {
  auto show = [](const std::optional<double>& v) { return v ? std::to_string(*v) : "none"; };
  return os << "{held " << show(g.held) << ", live " << show(g.live) << ", max_1m "
            << show(g.max_1m) << "}";
}
Gauges Read(const Client& client, const std::string& limiter, const std::string& id) {
  const auto samples = client.Metrics();
  return {Gauge(samples, "sluice_leases_held", limiter, id),
          Gauge(samples, "sluice_leases_live", limiter, id),
          Gauge(samples, "sluice_leases_live_max_1m", limiter, id)};
}
Gauges Want(double held, double live, double max_1m) {
  return {held, live, max_1m};
}

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// ---------------------------------------------------------------------------------------
// Options

TEST(ConcurrencyLimiter, RejectsBadOptions) {
  auto client = MemoryClient();
  auto code = [&](std::string_view name, const ConcurrencyOptions& o) {
    return client->MakeConcurrencyLimiter(name, o).status().code();
  };
  constexpr auto kBad = StatusCode::kInvalidArgument;
  EXPECT_EQ(code("c", {.limit = 0}), kBad);
  EXPECT_EQ(code("c", {.limit = -1}), kBad);
  EXPECT_EQ(code("c", {.limit = kMaxLimit + 1}), kBad);
  EXPECT_EQ(code("c", {.limit = 1, .lease_ttl = milliseconds(9)}), kBad);
  EXPECT_EQ(code("c", {.limit = 1, .lease_ttl = milliseconds(0)}), kBad);
  EXPECT_EQ(
      code("c",
           {.limit = 1, .lease_ttl = milliseconds(100), .heartbeat_interval = milliseconds(100)}),
      kBad);
  EXPECT_EQ(
      code("c",
           {.limit = 1, .lease_ttl = milliseconds(100), .heartbeat_interval = milliseconds(101)}),
      kBad);
  EXPECT_EQ(code("c", {.limit = 1, .heartbeat_interval = milliseconds(-1)}), kBad);
  EXPECT_EQ(code("", {.limit = 1}), kBad);
  EXPECT_EQ(code("a:b", {.limit = 1}), kBad);
  EXPECT_EQ(code("a{b}", {.limit = 1}), kBad);
  EXPECT_EQ(code("a b", {.limit = 1}), kBad);
  EXPECT_EQ(code(std::string(65, 'x'), {.limit = 1}), kBad);
  // The edges that are allowed.
  EXPECT_EQ(
      code("c", {.limit = 1, .lease_ttl = milliseconds(10), .heartbeat_interval = milliseconds(9)}),
      StatusCode::kOk);
  EXPECT_EQ(code("c", {.limit = kMaxLimit}), StatusCode::kOk);
  EXPECT_EQ(code("A-z_0.9", {.limit = 1}), StatusCode::kOk);
  EXPECT_EQ(code(std::string(64, 'x'), {.limit = 1}), StatusCode::kOk);
  auto ok = client->MakeConcurrencyLimiter("streams", {.limit = 7});
  ASSERT_THAT(ok, IsOk());
  EXPECT_EQ(ok->name(), "streams");
  EXPECT_EQ(ok->options().limit, 7);
}

TEST(ConcurrencyLimiter, RejectsBadCalls) {
  auto client = MemoryClient();
  auto limiter = MakeLimiter(client, "c", {.limit = 1});
  EXPECT_EQ(limiter.Acquire("").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(limiter.Acquire("x", {.limit = 0}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(limiter.Acquire("x", {.deadline = milliseconds(0)}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(limiter.List("").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(limiter.KeyFor("").status().code(), StatusCode::kInvalidArgument);
  // None of them took the slot.
  auto a = limiter.Acquire("x");
  ASSERT_THAT(a, IsOk());
  EXPECT_TRUE(a->acquired);
}

// ---------------------------------------------------------------------------------------
// Acquire and release

TEST(ConcurrencyLimiter, GrantsExactlyTheLimitThenRefuses) {
  auto clock = std::make_shared<testing::FakeClock>(kT0);
  auto client = MemoryClient(clock);
  // A long ttl: no heartbeat moves an expiry during the test.
  auto limiter = MakeLimiter(client, "streams", {.limit = 3, .lease_ttl = milliseconds(60'000)});
  std::vector<Lease> held;
  for (int i = 0; i < 3; ++i) {
    auto a = limiter.Acquire("user:1");
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    ASSERT_TRUE(a->acquired) << i;
    EXPECT_EQ(a->live, i + 1);
    EXPECT_EQ(a->limit, 3);
    EXPECT_EQ(a->source, DecisionSource::kStore);
    EXPECT_EQ(a->reason, RefusalReason::kNone);
    EXPECT_EQ(a->retry_after, milliseconds(0));
    EXPECT_TRUE(a->lease.held());
    EXPECT_EQ(a->lease.loss(), LeaseLoss::kNone);
    EXPECT_EQ(a->lease.acquired_at_ms(), clock->NowMs());
    EXPECT_EQ(a->lease.id().rfind(std::to_string(clock->NowMs()) + ":", 0), 0u) << a->lease.id();
    EXPECT_GE(a->lease.id().size(), std::to_string(kT0).size() + 1 + 16) << "an unguessable token";
    held.push_back(std::move(a->lease));
    clock->Advance(milliseconds(100));
  }
  EXPECT_NE(held[0].id(), held[1].id());
  // Now kT0 + 300; the earliest lease expires at kT0 + 60'000.
  for (int i = 0; i < 3; ++i) {
    auto refused = limiter.Acquire("user:1");
    ASSERT_THAT(refused, IsOk());
    EXPECT_FALSE(refused->acquired);
    EXPECT_FALSE(refused->lease.held());
    EXPECT_EQ(refused->reason, RefusalReason::kOverLimit);
    EXPECT_EQ(refused->source, DecisionSource::kStore);
    EXPECT_EQ(refused->live, 3);
    EXPECT_EQ(refused->limit, 3);
    EXPECT_EQ(refused->retry_after, milliseconds(60'000 - 300 - 10 * i));
    clock->Advance(milliseconds(10));
  }
  // Another id has its own slots.
  auto other = limiter.Acquire("user:2");
  ASSERT_THAT(other, IsOk());
  EXPECT_TRUE(other->acquired);
  EXPECT_EQ(other->live, 1);
  // At the earliest expiry the first slot is free again.
  clock->Set(kT0 + 60'000);
  auto again = limiter.Acquire("user:1");
  ASSERT_THAT(again, IsOk());
  EXPECT_TRUE(again->acquired);
  EXPECT_EQ(again->live, 3);
}

TEST(ConcurrencyLimiter, DestructorAndReleaseFreeTheSlot) {
  auto client = MemoryClient();
  auto limiter = MakeLimiter(client, "c", {.limit = 1});
  {
    auto a = limiter.Acquire("x");
    ASSERT_THAT(a, IsOk());
    ASSERT_TRUE(a->acquired);
    auto refused = limiter.Acquire("x");
    ASSERT_THAT(refused, IsOk());
    EXPECT_FALSE(refused->acquired);
  }  // the Acquisition (and its Lease) goes away
  auto b = limiter.Acquire("x");
  ASSERT_THAT(b, IsOk());
  ASSERT_TRUE(b->acquired) << "the destructor released the slot";
  EXPECT_EQ(b->live, 1);

  EXPECT_THAT(b->lease.Release(), IsOk());
  EXPECT_FALSE(b->lease.held());
  EXPECT_EQ(b->lease.loss(), LeaseLoss::kNone) << "a release by the owner is not a loss";
  auto listed = limiter.List("x");
  ASSERT_THAT(listed, IsOk());
  EXPECT_TRUE(listed->empty());
  auto c = limiter.Acquire("x");
  ASSERT_THAT(c, IsOk());
  EXPECT_TRUE(c->acquired) << "Release() freed the slot";

  // Move-assigning over a held lease releases what it held.
  Lease moved = std::move(c->lease);
  EXPECT_TRUE(moved.held());
  moved = Lease();
  EXPECT_FALSE(moved.held());
  auto d = limiter.Acquire("x");
  ASSERT_THAT(d, IsOk());
  EXPECT_TRUE(d->acquired);
}

TEST(ConcurrencyLimiter, ReleaseIsIdempotent) {
  auto client = MemoryClient();
  auto limiter = MakeLimiter(client, "c", {.limit = 2});
  auto a = limiter.Acquire("x");
  auto b = limiter.Acquire("x");
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(a->acquired && b->acquired);
  EXPECT_THAT(a->lease.Release(), IsOk());
  EXPECT_THAT(a->lease.Release(), IsOk());
  EXPECT_THAT(a->lease.Release(), IsOk());
  EXPECT_FALSE(a->lease.held());
  EXPECT_EQ(a->lease.Heartbeat().code(), StatusCode::kFailedPrecondition);
  // The other lease was not touched by the repeated releases.
  EXPECT_TRUE(b->lease.held());
  auto listed = limiter.List("x");
  ASSERT_THAT(listed, IsOk());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].id, b->lease.id());
  EXPECT_THAT(b->lease.Heartbeat(), IsOk());
  // An empty Lease releases as a no-op.
  Lease none;
  EXPECT_THAT(none.Release(), IsOk());
  EXPECT_FALSE(none.held());
  EXPECT_EQ(none.Heartbeat().code(), StatusCode::kFailedPrecondition);
}

// The test's own clocks (the store's model clock and the leases' boot clock) move in
// steps of a quarter ttl, and the test waits for the heartbeat that follows each step,
// not for time to pass: three ttls go by in a few heartbeat intervals, and a slow
// machine cannot expire the lease between two heartbeats.
TEST(ConcurrencyLimiter, HeartbeatsKeepALeasePastItsTtl) {
  auto clock = std::make_shared<testing::FakeClock>(kT0);
  auto client = MemoryClient(clock);
  auto boot = std::make_shared<std::atomic<int64_t>>(1'000'000'000);  // ns
  internal::ClientFactory::UseBootClock(*client, [boot] {
    return internal::BootClock::time_point(std::chrono::nanoseconds(boot->load()));
  });
  auto limiter = MakeLimiter(
      client, "c",
      {.limit = 1, .lease_ttl = milliseconds(400), .heartbeat_interval = milliseconds(20)});
  auto a = limiter.Acquire("x");
  ASSERT_THAT(a, IsOk());
  ASSERT_TRUE(a->acquired);
  // The lease's expiry in the store once a heartbeat has landed at the current time.
  const auto heartbeat_landed = [&] {
    auto listed = limiter.List("x");
    return listed.ok() && listed->size() == 1 && (*listed)[0].expires_at_ms == clock->NowMs() + 400;
  };
  int refusals = 0;
  for (int step = 1; step <= 12; ++step) {
    clock->Advance(milliseconds(100));
    boot->fetch_add(100'000'000);
    ASSERT_TRUE(WaitUntil(heartbeat_landed, milliseconds(10'000)))
        << "no heartbeat moved the lease's expiry after " << step * 100 << " ms";
    ASSERT_TRUE(a->lease.held()) << "after " << step * 100 << " ms";
    auto other = limiter.Acquire("x");
    ASSERT_THAT(other, IsOk());
    ASSERT_FALSE(other->acquired) << "the slot is taken";
    EXPECT_GT(other->retry_after, milliseconds(0));
    EXPECT_LE(other->retry_after, milliseconds(400));
    ++refusals;
  }
  EXPECT_GE(refusals, 10);
  EXPECT_EQ(a->lease.loss(), LeaseLoss::kNone);
  // Three ttls later the store still has it, expiring in the future.
  auto listed = limiter.List("x");
  ASSERT_THAT(listed, IsOk());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].id, a->lease.id());
  EXPECT_GT((*listed)[0].expires_at_ms, clock->NowMs());
  EXPECT_LE((*listed)[0].expires_at_ms, clock->NowMs() + 400);
  EXPECT_GE(clock->NowMs() - (*listed)[0].acquired_at_ms, 1200);

  EXPECT_THAT(a->lease.Release(), IsOk());
  auto b = limiter.Acquire("x");
  ASSERT_THAT(b, IsOk());
  EXPECT_TRUE(b->acquired);
}

TEST(ConcurrencyLimiter, PerCallLimitTakesEffectOnThatCall) {
  auto client = MemoryClient();
  auto limiter = MakeLimiter(client, "plan", {.limit = 1});
  auto a = limiter.Acquire("t");
  ASSERT_TRUE(a.ok() && a->acquired);
  auto refused = limiter.Acquire("t");
  ASSERT_THAT(refused, IsOk());
  EXPECT_FALSE(refused->acquired);
  EXPECT_EQ(refused->limit, 1);

  auto upgraded = limiter.Acquire("t", {.limit = 2});
  ASSERT_THAT(upgraded, IsOk());
  EXPECT_TRUE(upgraded->acquired);
  EXPECT_EQ(upgraded->limit, 2);
  EXPECT_EQ(upgraded->live, 2);
  auto full = limiter.Acquire("t", {.limit = 2});
  ASSERT_THAT(full, IsOk());
  EXPECT_FALSE(full->acquired);
  EXPECT_EQ(full->live, 2);
  auto more = limiter.Acquire("t", {.limit = 3});
  ASSERT_THAT(more, IsOk());
  EXPECT_TRUE(more->acquired);
  EXPECT_EQ(more->live, 3);
  // Back to the limiter's limit: refused, counting the three live leases.
  auto down = limiter.Acquire("t");
  ASSERT_THAT(down, IsOk());
  EXPECT_FALSE(down->acquired);
  EXPECT_EQ(down->live, 3);
  EXPECT_EQ(down->limit, 1);
  EXPECT_EQ(down->reason, RefusalReason::kOverLimit);
}

TEST(ConcurrencyLimiter, ListShowsTheLiveLeasesSoonestFirst) {
  auto clock = std::make_shared<testing::FakeClock>(kT0);
  auto client = MemoryClient(clock);
  auto limiter = MakeLimiter(client, "c", {.limit = 5, .lease_ttl = milliseconds(60'000)});
  auto empty = limiter.List("x");
  ASSERT_THAT(empty, IsOk());
  EXPECT_TRUE(empty->empty());

  auto a = limiter.Acquire("x");
  clock->Advance(milliseconds(7));
  auto b = limiter.Acquire("x");
  auto c = limiter.Acquire("x");
  auto other = limiter.Acquire("y");
  ASSERT_TRUE(a.ok() && b.ok() && c.ok() && other.ok());
  ASSERT_TRUE(a->acquired && b->acquired && c->acquired && other->acquired);

  auto listed = limiter.List("x");
  ASSERT_THAT(listed, IsOk());
  ASSERT_EQ(listed->size(), 3u);
  EXPECT_EQ((*listed)[0].id, a->lease.id());
  EXPECT_EQ((*listed)[0].acquired_at_ms, kT0);
  EXPECT_EQ((*listed)[0].expires_at_ms, kT0 + 60'000);
  // b and c expire in the same ms: ordered by id.
  const auto [first, second] = std::minmax(b->lease.id(), c->lease.id());
  EXPECT_EQ((*listed)[1].id, first);
  EXPECT_EQ((*listed)[2].id, second);
  for (int i = 1; i < 3; ++i) {
    EXPECT_EQ((*listed)[i].acquired_at_ms, kT0 + 7);
    EXPECT_EQ((*listed)[i].expires_at_ms, kT0 + 60'007);
  }

  ASSERT_THAT(b->lease.Release(), IsOk());
  listed = limiter.List("x");
  ASSERT_THAT(listed, IsOk());
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].id, a->lease.id());
  EXPECT_EQ((*listed)[1].id, c->lease.id());
  // At a's expiry it is no longer listed; 1 ms before it still is.
  clock->Set(kT0 + 59'999);
  listed = limiter.List("x");
  ASSERT_THAT(listed, IsOk());
  EXPECT_EQ(listed->size(), 2u);
  clock->Set(kT0 + 60'000);
  listed = limiter.List("x");
  ASSERT_THAT(listed, IsOk());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].id, c->lease.id());
  auto y = limiter.List("y");
  ASSERT_THAT(y, IsOk());
  ASSERT_EQ(y->size(), 1u);
  EXPECT_EQ((*y)[0].id, other->lease.id());
}

// ---------------------------------------------------------------------------------------
// ReleaseAll

class ReleaseAllTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "sluice-lease-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

TEST_F(ReleaseAllTest, RefusesWithoutActorReasonOrLog) {
  auto client = MemoryClient();
  auto limiter = MakeLimiter(client, "c", {.limit = 2});
  auto a = limiter.Acquire("x");
  ASSERT_TRUE(a.ok() && a->acquired);
  const std::string log = Path("audit.jsonl");
  const AuditOptions audit{.log_path = log};
  constexpr auto kBad = StatusCode::kInvalidArgument;
  EXPECT_EQ(ReleaseAll(limiter, "x", {.actor = "", .reason = "stuck"}, audit).status().code(),
            kBad);
  EXPECT_EQ(ReleaseAll(limiter, "x", {.actor = "ops", .reason = ""}, audit).status().code(), kBad);
  EXPECT_EQ(ReleaseAll(limiter, "x", {.actor = "ops", .reason = "stuck"}, {}).status().code(),
            kBad);
  EXPECT_EQ(ReleaseAll(limiter, "x", {.actor = "o\nps", .reason = "stuck"}, audit).status().code(),
            kBad);
  EXPECT_EQ(ReleaseAll(limiter, "x", {.actor = "ops", .reason = "a\x01"}, audit).status().code(),
            kBad);
  EXPECT_EQ(ReleaseAll(limiter, "x", {.actor = "ops", .reason = "\xff\xfe"}, audit).status().code(),
            kBad);
  EXPECT_EQ(ReleaseAll(limiter, "", {.actor = "ops", .reason = "stuck"}, audit).status().code(),
            kBad);
  EXPECT_EQ(ReleaseAll(limiter, "x", {.actor = "ops", .reason = "stuck"}, audit, milliseconds(0))
                .status()
                .code(),
            kBad);
  EXPECT_FALSE(std::filesystem::exists(log)) << "no record for an action that was not done";
  // A log that cannot be opened stops the action before the store.
  auto unopenable = ReleaseAll(limiter, "x", {.actor = "ops", .reason = "stuck"},
                               {.log_path = Path("missing-dir/audit.jsonl")});
  EXPECT_FALSE(unopenable.ok());
  EXPECT_TRUE(a->lease.held());
  auto listed = limiter.List("x");
  ASSERT_THAT(listed, IsOk());
  EXPECT_EQ(listed->size(), 1u) << "nothing was released";
}

TEST_F(ReleaseAllTest, WritesOneRecordPerCallAndHoldersLoseTheirLeases) {
  // A model clock that starts at the wall clock (the records' store_ms is compared with
  // it) and moves only when the test moves it, so that the test can see a heartbeat land.
  auto clock = std::make_shared<testing::FakeClock>(WallMs());
  auto client = MemoryClient(clock);
  auto limiter = MakeLimiter(
      client, "streams",
      {.limit = 3, .lease_ttl = milliseconds(5000), .heartbeat_interval = milliseconds(20)});
  std::atomic<int> lost_a{0}, lost_b{0}, lost_other{0};
  std::atomic<int> lost_a_why{-1};
  auto a = limiter.Acquire("user 1", {.on_lost = [&](LeaseLoss why) {
                             lost_a_why = static_cast<int>(why);
                             ++lost_a;
                           }});
  auto b = limiter.Acquire("user 1", {.on_lost = [&](LeaseLoss) { ++lost_b; }});
  auto other = limiter.Acquire("user 2", {.on_lost = [&](LeaseLoss) { ++lost_other; }});
  ASSERT_TRUE(a.ok() && b.ok() && other.ok());
  ASSERT_TRUE(a->acquired && b->acquired && other->acquired);

  const std::string log = Path("audit.jsonl");
  const AdminAction action{.actor = "alice \"the op\"", .reason = "stuck streams \\ incident 7"};
  auto first = ReleaseAll(limiter, "user 1", action, {.log_path = log});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->released, 2);
  EXPECT_TRUE(first->stream_error.empty());

  // The holders learn at their next heartbeat, long before their ttl.
  ASSERT_TRUE(WaitUntil([&] { return !a->lease.held() && !b->lease.held(); }, milliseconds(2000)));
  EXPECT_EQ(a->lease.loss(), LeaseLoss::kGone);
  EXPECT_EQ(b->lease.loss(), LeaseLoss::kGone);
  ASSERT_TRUE(WaitUntil([&] { return lost_a == 1 && lost_b == 1; }, milliseconds(1000)));
  // Several more heartbeat intervals: the other id's holder, which beats on the same
  // timer, lands three more heartbeats (each seen by the expiry it moved).
  for (int beat = 0; beat < 3; ++beat) {
    clock->Advance(milliseconds(1));
    ASSERT_TRUE(WaitUntil(
        [&] {
          auto listed = limiter.List("user 2");
          return listed.ok() && listed->size() == 1 &&
                 (*listed)[0].expires_at_ms == clock->NowMs() + 5000;
        },
        milliseconds(10'000)));
  }
  EXPECT_EQ(lost_a, 1);
  EXPECT_EQ(lost_b, 1);
  EXPECT_EQ(lost_a_why, static_cast<int>(LeaseLoss::kGone));
  EXPECT_EQ(a->lease.Heartbeat().code(), StatusCode::kNotFound);
  // The other id's holder is untouched.
  EXPECT_TRUE(other->lease.held());
  EXPECT_EQ(lost_other, 0);
  // A lost lease's Release is OK and frees nothing more.
  EXPECT_THAT(a->lease.Release(), IsOk());

  // The id's slots are free again.
  auto c = limiter.Acquire("user 1");
  ASSERT_TRUE(c.ok() && c->acquired);
  EXPECT_EQ(c->live, 1);
  auto second =
      ReleaseAll(limiter, "user 1", {.actor = "bob", .reason = "again"}, {.log_path = log});
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(second->released, 1);
  auto third =
      ReleaseAll(limiter, "user 1", {.actor = "bob", .reason = "empty"}, {.log_path = log});
  ASSERT_TRUE(third.ok()) << third.status().ToString();
  EXPECT_EQ(third->released, 0);

  // One line per call, each the record returned, each valid JSON with the fields.
  const std::string text = Slurp(log);
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  const auto lines = Lines(log);
  ASSERT_EQ(lines.size(), 3u) << text;
  EXPECT_EQ(lines[0], first->record);
  EXPECT_EQ(lines[1], second->record);
  EXPECT_EQ(lines[2], third->record);
  const auto key = limiter.KeyFor("user 1");
  ASSERT_THAT(key, IsOk());
  const int64_t released[] = {2, 1, 0};
  const std::string actors[] = {action.actor, "bob", "bob"};
  const std::string reasons[] = {action.reason, "again", "empty"};
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(lines[i]);
    nlohmann::json j;
    ASSERT_NO_THROW(j = nlohmann::json::parse(lines[i]));
    ASSERT_TRUE(j.is_object());
    EXPECT_EQ(j.at("action"), "release_all");
    EXPECT_EQ(j.at("actor"), actors[i]);
    EXPECT_EQ(j.at("reason"), reasons[i]);
    EXPECT_EQ(j.at("limiter"), "streams");
    EXPECT_EQ(j.at("id"), "user%201");  // as encoded in keys
    EXPECT_EQ(j.at("key"), *key);
    EXPECT_EQ(j.at("released"), released[i]);
    ASSERT_TRUE(j.at("ts").is_string());
    const std::string ts = j.at("ts");
    EXPECT_EQ(ts.size(), 24u) << ts;  // 2026-01-02T03:04:05.678Z
    EXPECT_EQ(ts.back(), 'Z');
    ASSERT_TRUE(j.at("store_ms").is_number_integer());
    EXPECT_LE(std::abs(j.at("store_ms").get<int64_t>() - WallMs()), 10'000);
  }
  EXPECT_EQ(limiter.List("user 1")->size(), 0u);
  EXPECT_EQ(limiter.List("user 2")->size(), 1u);
}

TEST_F(ReleaseAllTest, CountsOnlyLiveLeases) {
  auto clock = std::make_shared<testing::FakeClock>(kT0);
  auto client = MemoryClient(clock);
  auto limiter = MakeLimiter(client, "c", {.limit = 5, .lease_ttl = milliseconds(60'000)});
  auto a = limiter.Acquire("x");
  clock->Advance(milliseconds(30'000));
  auto b = limiter.Acquire("x");
  ASSERT_TRUE(a.ok() && b.ok() && a->acquired && b->acquired);
  clock->Set(kT0 + 60'000);  // a expired (not pruned: no acquire since), b live
  const std::string log = Path("audit.jsonl");
  auto r = ReleaseAll(limiter, "x", {.actor = "ops", .reason = "test"}, {.log_path = log});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->released, 1);
  const auto lines = Lines(log);
  ASSERT_EQ(lines.size(), 1u);
  const auto j = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(j.at("released"), 1);
  EXPECT_EQ(j.at("store_ms"), kT0 + 60'000);
  EXPECT_TRUE(limiter.List("x")->empty());
}

// A lease believes itself held until lease_ttl after its last heartbeat was sent, on
// the client's boot clock: with a test's own clock, the end is exact to the nanosecond
// and nothing sleeps.
TEST(ConcurrencyLimiter, ALeaseIsHeldUntilTtlAfterItsLastHeartbeatOnTheBootClock) {
  auto client = MemoryClient();
  auto boot = std::make_shared<std::atomic<int64_t>>(1'000'000'000);  // ns
  internal::ClientFactory::UseBootClock(*client, [boot] {
    return internal::BootClock::time_point(std::chrono::nanoseconds(boot->load()));
  });
  auto limiter = MakeLimiter(client, "held", {.limit = 1, .lease_ttl = milliseconds(10'000)});
  auto a = limiter.Acquire("x");
  ASSERT_TRUE(a.ok() && a->acquired);
  const int64_t ttl_ns = 10'000'000'000;
  boot->fetch_add(ttl_ns - 1);
  EXPECT_TRUE(a->lease.held()) << "1 ns before its believable end";
  boot->fetch_add(1);
  EXPECT_FALSE(a->lease.held()) << "at its believable end, no heartbeat having landed";
  // A heartbeat sent now extends it to now + ttl.
  ASSERT_THAT(a->lease.Heartbeat(), IsOk());
  EXPECT_TRUE(a->lease.held());
  boot->fetch_add(ttl_ns - 1);
  EXPECT_TRUE(a->lease.held());
  boot->fetch_add(1);
  EXPECT_FALSE(a->lease.held());
}

// ---------------------------------------------------------------------------------------
// Gauges

TEST(ConcurrencyLimiter, MetricsReportLeaseGauges) {
  // A model clock: the gauges' clock minute stays put (20 s into a minute) while the
  // test runs.
  auto client = MemoryClient(std::make_shared<testing::FakeClock>(kT0));
  auto limiter = MakeLimiter(client, "streams", {.limit = 3});
  const std::string id = "user:1";
  EXPECT_EQ(Read(*client, "streams", id), Gauges{}) << "no series before any acquire";

  auto a = limiter.Acquire(id);
  ASSERT_TRUE(a.ok() && a->acquired);
  EXPECT_EQ(Read(*client, "streams", id), Want(1, 1, 1));
  auto b = limiter.Acquire(id);
  ASSERT_TRUE(b.ok() && b->acquired);
  EXPECT_EQ(Read(*client, "streams", id), Want(2, 2, 2));
  ASSERT_THAT(a->lease.Release(), IsOk());
  // `live` is what the store counted at the latest acquire: unchanged by a release.
  EXPECT_EQ(Read(*client, "streams", id), Want(1, 2, 2));
  ASSERT_THAT(a->lease.Release(), IsOk());
  EXPECT_EQ(Read(*client, "streams", id), Want(1, 2, 2)) << "a second release counts nothing";
  auto c = limiter.Acquire(id);
  auto d = limiter.Acquire(id);
  ASSERT_TRUE(c.ok() && c->acquired && d.ok() && d->acquired);
  EXPECT_EQ(Read(*client, "streams", id), Want(3, 3, 3));
  auto refused = limiter.Acquire(id);
  ASSERT_THAT(refused, IsOk());
  EXPECT_FALSE(refused->acquired);
  EXPECT_EQ(Read(*client, "streams", id), Want(3, 3, 3)) << "a refusal holds nothing";
  b->lease = Lease();
  c->lease = Lease();
  d->lease = Lease();
  EXPECT_EQ(Read(*client, "streams", id), Want(0, 3, 3));
  auto e = limiter.Acquire(id);
  ASSERT_TRUE(e.ok() && e->acquired);
  EXPECT_EQ(Read(*client, "streams", id), Want(1, 1, 3)) << "the minute's max stays";

  // Another id and another limiter have their own series.
  auto other_limiter = MakeLimiter(client, "uploads", {.limit = 2});
  auto f = other_limiter.Acquire(id);
  auto g = limiter.Acquire("user:2");
  ASSERT_TRUE(f.ok() && f->acquired && g.ok() && g->acquired);
  EXPECT_EQ(Read(*client, "uploads", id), Want(1, 1, 1));
  EXPECT_EQ(Read(*client, "streams", "user:2"), Want(1, 1, 1));
  EXPECT_EQ(Read(*client, "streams", id), Want(1, 1, 3));

  // A lost lease leaves `held` too.
  auto short_lived = MakeLimiter(
      client, "short",
      {.limit = 1, .lease_ttl = milliseconds(5000), .heartbeat_interval = milliseconds(10)});
  auto h = short_lived.Acquire("z");
  ASSERT_TRUE(h.ok() && h->acquired);
  EXPECT_EQ(Read(*client, "short", "z"), Want(1, 1, 1));
  const std::string log = (std::filesystem::temp_directory_path() /
                           ("sluice-lease-metrics-" + std::to_string(::getpid()) + ".jsonl"))
                              .string();
  auto r = ReleaseAll(short_lived, "z", {.actor = "t", .reason = "t"}, {.log_path = log});
  std::filesystem::remove(log);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(WaitUntil([&] { return h->lease.loss() == LeaseLoss::kGone; }, milliseconds(2000)));
  EXPECT_EQ(Read(*client, "short", "z"), Want(0, 1, 1));
  h->lease = Lease();
  EXPECT_EQ(Read(*client, "short", "z"), Want(0, 1, 1)) << "dropping a lost lease counts nothing";
}

TEST(ConcurrencyLimiter, PrometheusTextEscapesLabelValues) {
  auto client = MemoryClient(std::make_shared<testing::FakeClock>(kT0));
  auto limiter = MakeLimiter(client, "streams", {.limit = 2});
  const std::string id = "we\"ird\\id";  // printable: kept as is in keys and labels
  auto a = limiter.Acquire(id);
  auto b = limiter.Acquire(id);
  ASSERT_TRUE(a.ok() && a->acquired && b.ok() && b->acquired);
  const auto samples = client->Metrics();
  EXPECT_EQ(Gauge(samples, "sluice_leases_held", "streams", id), 2);
  const std::string text = FormatPrometheus(samples);
  for (const std::string want :
       {"# TYPE sluice_leases_held gauge\n", "# TYPE sluice_leases_live gauge\n",
        "# TYPE sluice_leases_live_max_1m gauge\n",
        "\nsluice_leases_held{limiter=\"streams\",id=\"we\\\"ird\\\\id\"} 2\n",
        "\nsluice_leases_live{limiter=\"streams\",id=\"we\\\"ird\\\\id\"} 2\n",
        "\nsluice_leases_live_max_1m{limiter=\"streams\",id=\"we\\\"ird\\\\id\"} 2\n"}) {
    EXPECT_NE(text.find(want), std::string::npos) << "missing " << want << " in\n" << text;
  }
  EXPECT_EQ(text.find("id=\"we\"ird"), std::string::npos) << text;
  // Each metric name has one HELP and one TYPE line.
  size_t types = 0;
  for (size_t at = text.find("# TYPE sluice_leases_held "); at != std::string::npos;
       at = text.find("# TYPE sluice_leases_held ", at + 1)) {
    ++types;
  }
  EXPECT_EQ(types, 1u);
}

// ---------------------------------------------------------------------------------------
// on_lost and callbacks: where they run, and never after their owner let go

// Makes every lease of `id` lost (an operator's release): the holders learn it at their
// next heartbeat.
void ReleaseEverything(const ConcurrencyLimiter& limiter, const std::string& id) {
  const std::string log = (std::filesystem::temp_directory_path() /
                           ("sluice-lease-lost-" + std::to_string(::getpid()) + ".jsonl"))
                              .string();
  auto r = ReleaseAll(limiter, id, {.actor = "t", .reason = "t"}, {.log_path = log});
  std::filesystem::remove(log);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
}

TEST(ConcurrencyLimiter, OnLostHasReturnedWhenTheLeaseIsDestroyed) {
  // An on_lost that captures its owner must never run after the owner's Lease is gone:
  // the destructor waits for an on_lost that is running.
  auto client = MemoryClient();
  auto limiter = MakeLimiter(
      client, "lost",
      {.limit = 1, .lease_ttl = milliseconds(5000), .heartbeat_interval = milliseconds(10)});
  std::atomic<bool> entered{false}, finished{false};
  auto a = limiter.Acquire("x", {.on_lost = [&](LeaseLoss) {
                             entered = true;
                             std::this_thread::sleep_for(milliseconds(300));
                             finished = true;
                           }});
  ASSERT_TRUE(a.ok() && a->acquired);
  ReleaseEverything(limiter, "x");
  ASSERT_TRUE(WaitUntil([&] { return entered.load(); }, milliseconds(5000)));
  a->lease = Lease();  // releases (and waits for the running on_lost)
  EXPECT_TRUE(finished.load()) << "on_lost was still running after the Lease was destroyed";
}

TEST(ConcurrencyLimiter, OnLostMayReleaseItsOwnLease) {
  // The destructor's wait must not wait for itself: Release() and the destructor called
  // from inside on_lost return at once.
  auto client = MemoryClient();
  auto limiter = MakeLimiter(
      client, "self",
      {.limit = 1, .lease_ttl = milliseconds(5000), .heartbeat_interval = milliseconds(10)});
  auto holder = std::make_shared<std::optional<Lease>>();
  std::promise<Status> released;
  auto a = limiter.Acquire("x", {.on_lost = [holder, &released](LeaseLoss) {
                             Status s = (*holder)->Release();
                             holder->reset();  // the Lease's destructor, inside its own on_lost
                             released.set_value(s);
                           }});
  ASSERT_TRUE(a.ok() && a->acquired);
  holder->emplace(std::move(a->lease));
  ReleaseEverything(limiter, "x");
  auto done = released.get_future();
  ASSERT_EQ(done.wait_for(std::chrono::seconds(10)), std::future_status::ready)
      << "Release() inside on_lost did not return";
  EXPECT_THAT(done.get(), IsOk());
}

TEST(ConcurrencyLimiter, OnLostRunsOnAnIoThreadEvenWhenTheHeartbeatAnswersInline) {
  // The embedded store answers a heartbeat inline: a Heartbeat() that finds the lease
  // gone must still not run on_lost on the caller's thread.
  auto client = MemoryClient();
  auto limiter = MakeLimiter(client, "inline", {.limit = 1, .lease_ttl = milliseconds(60000)});
  std::promise<std::thread::id> ran_on;
  auto a = limiter.Acquire(
      "x", {.on_lost = [&](LeaseLoss) { ran_on.set_value(std::this_thread::get_id()); }});
  ASSERT_TRUE(a.ok() && a->acquired);
  ReleaseEverything(limiter, "x");
  EXPECT_EQ(a->lease.Heartbeat().code(), StatusCode::kNotFound);
  auto where = ran_on.get_future();
  ASSERT_EQ(where.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_NE(where.get(), std::this_thread::get_id()) << "on_lost ran inside Heartbeat()";
  EXPECT_EQ(a->lease.loss(), LeaseLoss::kGone);
}

TEST(ConcurrencyLimiterApi, ReleaseAsyncNeverAnswersInsideTheCall) {
  auto client = MemoryClient();
  auto cap = MakeLimiter(client, "release", {.limit = 1});
  auto a = cap.Acquire("x");
  ASSERT_TRUE(a.ok() && a->acquired);
  Lease empty;
  for (Lease* lease : {&a->lease, &a->lease, &empty}) {
    std::promise<std::thread::id> answered;
    lease->ReleaseAsync([&](Status s) {
      EXPECT_TRUE(s.ok()) << s.ToString();
      answered.set_value(std::this_thread::get_id());
    });
    auto where = answered.get_future();
    ASSERT_EQ(where.wait_for(std::chrono::seconds(10)), std::future_status::ready);
    EXPECT_NE(where.get(), std::this_thread::get_id());
  }
}

// A detached lease is held by whoever heartbeats it by reference: the Lease that
// acquired it lets go without releasing it, on_lost never runs, the model clock shows it
// expiring lease_ttl after its last heartbeat, and answers by reference never arrive
// inside the call (the embedded store answers inline).
TEST(ConcurrencyLimiter, ADetachedLeaseIsHeartbeatenAndReleasedByReference) {
  auto clock = std::make_shared<testing::FakeClock>(kT0);
  auto client = MemoryClient(clock);
  auto cap = MakeLimiter(client, "handed", {.limit = 1, .lease_ttl = milliseconds(1000)});
  std::atomic<int> lost{0};
  auto a = cap.Acquire("x", {.on_lost = [&](LeaseLoss) { ++lost; }});
  ASSERT_TRUE(a.ok() && a->acquired);
  const std::string ref = a->lease.Detach();
  ASSERT_FALSE(ref.empty());
  EXPECT_FALSE(a->lease.held());
  EXPECT_EQ(a->lease.Detach(), "") << "a Lease that let go has nothing more to hand over";
  a->lease = Lease();  // no release is sent
  EXPECT_FALSE(cap.Acquire("x")->acquired);
  auto answered_on = [&](auto call) {
    std::promise<std::thread::id> answered;
    call([&] { answered.set_value(std::this_thread::get_id()); });
    auto where = answered.get_future();
    EXPECT_EQ(where.wait_for(std::chrono::seconds(10)), std::future_status::ready);
    return where.get();
  };
  for (int i = 0; i < 5; ++i) {
    clock->Advance(milliseconds(900));
    StatusOr<milliseconds> left = InternalError("not answered");
    const auto thread = answered_on([&](std::function<void()> signal) {
      cap.HeartbeatAsync(ref, [&, signal](StatusOr<milliseconds> r) {
        left = r;
        signal();
      });
    });
    EXPECT_NE(thread, std::this_thread::get_id());
    ASSERT_TRUE(left.ok()) << left.status().ToString();
    EXPECT_EQ(*left, milliseconds(1000));
  }
  EXPECT_FALSE(cap.Acquire("x")->acquired);
  Status released = InternalError("not answered");
  const auto thread = answered_on([&](std::function<void()> signal) {
    cap.ReleaseAsync(ref, [&, signal](Status s) {
      released = s;
      signal();
    });
  });
  EXPECT_NE(thread, std::this_thread::get_id());
  EXPECT_THAT(released, IsOk());
  EXPECT_EQ(cap.Heartbeat(ref).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(cap.Heartbeat("s1:short|x").status().code(), StatusCode::kInvalidArgument);
  // Not heartbeaten: gone lease_ttl later.
  auto b = cap.Acquire("x");
  ASSERT_TRUE(b->acquired);
  const std::string other = b->lease.Detach();
  clock->Advance(milliseconds(1000));
  EXPECT_EQ(cap.Heartbeat(other).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(cap.Acquire("x")->acquired);
  EXPECT_EQ(lost.load(), 0);
}

TEST(ConcurrencyLimiter, MetricsKeepALongHeldLeaseWhateverTheTrafficOnOtherIds) {
  // Through the public API: one lease held on `leaky` while leases of
  // more ids than the gauges track come and go.
  auto client = MemoryClient();
  auto limiter = MakeLimiter(client, "c", {.limit = 1});
  auto leaky = limiter.Acquire("leaky");
  ASSERT_TRUE(leaky.ok() && leaky->acquired);
  for (int i = 0; i < 1100; ++i) {
    auto a = limiter.Acquire("id" + std::to_string(i));
    ASSERT_TRUE(a.ok() && a->acquired);
  }
  EXPECT_EQ(Read(*client, "c", "leaky").held, 1.0) << "the held lease's series was forgotten";
  double held = 0;
  for (const MetricSample& s : client->Metrics()) {
    if (s.name == "sluice_leases_held") held += s.value;
  }
  EXPECT_EQ(held, 1.0);
}

TEST(LeaseGauges, NeverForgetIdsThatStillHoldLeases) {
  // The leak floor the gauge exists to show is a lease held for long: it must survive any
  // number of other ids passing through the table.
  internal::LeaseGauges gauges(/*max_ids=*/10);
  const std::string leaky = internal::LeaseGauges::KeyOf("c", "leaky");
  gauges.Held(leaky, +1, 0);
  for (int i = 0; i < 1000; ++i) {
    const std::string key = internal::LeaseGauges::KeyOf("c", "id" + std::to_string(i));
    gauges.Granted(key, 1, i);
    gauges.Held(key, -1, i);
  }
  const auto rows = gauges.Snapshot(1000);
  int64_t held = 0;
  bool found = false;
  for (const auto& row : rows) {
    held += row.held;
    if (row.id == "leaky") found = row.held == 1;
  }
  EXPECT_TRUE(found) << "the id holding a lease was forgotten";
  EXPECT_EQ(held, 1);
  EXPECT_LE(rows.size(), 11u) << "idle ids are still bounded by max_ids";
  // Ids that hold leases are never evicted, even past max_ids; once they release, they
  // are ordinary idle ids again and the table shrinks back as others come.
  std::vector<std::string> holding;
  for (int i = 0; i < 30; ++i) {
    holding.push_back(internal::LeaseGauges::KeyOf("c", "h" + std::to_string(i)));
    gauges.Granted(holding.back(), 1, 2000);
  }
  auto many = gauges.Snapshot(2000);
  int64_t holders = 0;
  for (const auto& row : many) holders += row.held;
  EXPECT_EQ(holders, 31);
  for (const auto& key : holding) gauges.Held(key, -1, 3000);
  for (int i = 0; i < 50; ++i) {
    gauges.Observe(internal::LeaseGauges::KeyOf("c", "later" + std::to_string(i)), 0, 4000);
  }
  EXPECT_LE(gauges.Snapshot(4000).size(), 11u);
}

// ---------------------------------------------------------------------------------------
// Blocking calls on an I/O thread, and callbacks that throw

TEST(ClientThreads, ABlockingCallFromACallbackFailsFastInsteadOfHanging) {
  auto client = MemoryClient();
  auto limiter = *client->MakeLimiter("cb", {.limit = 5, .window = std::chrono::seconds(60)});
  auto cap = MakeLimiter(client, "cbl", {.limit = 1});
  std::promise<std::pair<Status, Status>> inner;
  limiter.CheckAsync("x", {}, [&](StatusOr<Decision>) {
    StatusOr<Decision> d = limiter.Check("y");
    StatusOr<Acquisition> a = cap.Acquire("y");
    inner.set_value({d.ok() ? Status() : d.status(), a.ok() ? Status() : a.status()});
  });
  auto result = inner.get_future();
  if (result.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    // The I/O thread is stuck for good: leave the client behind so the test can end.
    new std::shared_ptr<Client>(client);
    FAIL() << "a blocking Check inside a callback hung";
  }
  auto [check, acquire] = result.get();
  EXPECT_EQ(check.code(), StatusCode::kFailedPrecondition) << check.ToString();
  EXPECT_NE(check.message().find("I/O thread"), std::string::npos) << check.ToString();
  EXPECT_EQ(acquire.code(), StatusCode::kFailedPrecondition) << acquire.ToString();
}

TEST(ClientThreadsDeathTest, ACallbackThatThrowsTerminatesTheProcess) {
  // Documented in client.h: callbacks must not throw; one that does ends the process
  // (std::terminate on the I/O thread) rather than leaving a call half-done.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        auto client = MemoryClient();
        auto limiter = *client->MakeLimiter("t", {.limit = 5, .window = std::chrono::seconds(60)});
        limiter.CheckAsync("x", {}, [](StatusOr<Decision>) { throw std::runtime_error("boom"); });
        std::this_thread::sleep_for(std::chrono::seconds(5));
      },
      "");
}

TEST(ConcurrencyLimiterApi, SyncCallbackAndCoroutineShareOneCap) {
  auto client = MemoryClient();
  auto cap = MakeLimiter(client, "styles", {.limit = 3});
  auto sync = cap.Acquire("k");
  ASSERT_TRUE(sync.ok() && sync->acquired);

  std::promise<StatusOr<Acquisition>> promise;
  cap.AcquireAsync("k", {}, [&](StatusOr<Acquisition> a) { promise.set_value(std::move(a)); });
  auto callback = promise.get_future().get();
  ASSERT_TRUE(callback.ok() && callback->acquired);
  EXPECT_EQ(callback->live, 2);

  boost::asio::io_context io;
  std::vector<Acquisition> from_coroutine;
  boost::asio::co_spawn(
      io,
      [&]() -> boost::asio::awaitable<void> {
        for (int i = 0; i < 2; ++i) {
          auto a = co_await AsyncAcquire(cap, "k", {}, boost::asio::use_awaitable);
          if (a.ok()) from_coroutine.push_back(std::move(a).value());
        }
      },
      boost::asio::detached);
  io.run();
  ASSERT_EQ(from_coroutine.size(), 2u);
  EXPECT_TRUE(from_coroutine[0].acquired);
  EXPECT_TRUE(from_coroutine[0].lease.held());
  EXPECT_FALSE(from_coroutine[1].acquired);  // the fourth of a cap of 3
  EXPECT_EQ(from_coroutine[1].live, 3);
}

TEST(ConcurrencyLimiterApi, AcquireAsyncNeverAnswersInsideTheCall) {
  // The embedded store answers at once; so do bad input and refusals: all are posted.
  auto client = MemoryClient();
  auto cap = MakeLimiter(client, "inline", {.limit = 1});
  std::vector<Acquisition> kept;
  for (const char* id : {"x", "x", ""}) {
    // Inline, the callback would run on this thread, inside AcquireAsync.
    std::atomic<bool> answered_here{false};
    std::promise<StatusOr<Acquisition>> answer;
    const auto caller = std::this_thread::get_id();
    cap.AcquireAsync(id, {}, [&](StatusOr<Acquisition> a) {
      answered_here = std::this_thread::get_id() == caller;
      answer.set_value(std::move(a));
    });
    auto a = answer.get_future().get();
    EXPECT_FALSE(answered_here.load()) << "id \"" << id << "\"";
    if (a.ok()) kept.push_back(std::move(a).value());
  }
  ASSERT_EQ(kept.size(), 2u);  // granted, refused; the empty id is an error
  EXPECT_TRUE(kept[0].acquired);
  EXPECT_FALSE(kept[1].acquired);
}

}  // namespace
}  // namespace sluice::lease_test
