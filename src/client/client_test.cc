// The public API on the embedded store: the three call styles, option and input
// validation, per-call limits, model clock.
#include "sluice/boost_first.h"  // before any Boost header

#include <atomic>
#include <functional>
#include <future>
#include <thread>

#include <gtest/gtest.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "sluice/asio.h"
#include "sluice/sluice.h"
#include "testing/fake_clock.h"
#include "testing/status_matchers.h"

using sluice::testing::IsOk;
namespace sluice {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

std::shared_ptr<Client> MemoryClient(std::shared_ptr<testing::FakeClock> clock = nullptr) {
  auto client = Client::Create({.url = "memory://", .model_clock = std::move(clock)});
  EXPECT_TRUE(client.ok()) << client.status().ToString();
  return *client;
}

TEST(Client, RejectsBadOptions) {
  EXPECT_EQ(Client::Create({.url = "http://x"}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Client::Create({.url = "memory://", .prefix = "a{b"}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Client::Create({.url = "memory://", .prefix = ""}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Client::Create({.url = "memory://", .deadline = milliseconds(0)}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Client::Create({.url = "memory://", .io_threads = 0}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Client::Create({.url = "memory://", .max_batch = 0}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Client::Create({.url = "memory://", .max_batch = 257}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(Client::Create({.url = "memory://", .max_batch = 256}).ok());
  auto status = Client::Create({.url = "redis://127.0.0.1?ca=/etc/ssl/ca.pem"}).status();
  EXPECT_NE(status.message().find("TLS"), std::string::npos) << status.ToString();
}

TEST(Client, RejectsBadLimitsAndNames) {
  auto client = MemoryClient();
  EXPECT_EQ(client->MakeLimiter("x", {.limit = 0, .window = seconds(1)}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(client->MakeLimiter("x", {.limit = -5, .window = seconds(1)}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(client->MakeLimiter("x", {.limit = 5, .window = milliseconds(0)}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(client->MakeLimiter("x", {.limit = 5, .window = milliseconds(-1)}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(
      client->MakeLimiter("x", {.limit = kMaxLimit + 1, .window = seconds(1)}).status().code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(client->MakeLimiter("a:b", {.limit = 5, .window = seconds(1)}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(client->MakeLimiter("", {.limit = 5, .window = seconds(1)}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_THAT(client->MakeLimiter("login.v2-x_y", {.limit = 5, .window = seconds(1)}), IsOk());
}

TEST(Client, RejectsBadCallsWithoutTouchingState) {
  auto client = MemoryClient();
  auto limiter = *client->MakeLimiter("login", {.limit = 2, .window = seconds(60)});
  EXPECT_EQ(limiter.Check("").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(limiter.Check("a", {.cost = 0}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(limiter.Check("a", {.cost = -1}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(limiter.Check("a", {.limit = Limit{.limit = 0, .window = seconds(1)}}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(limiter.Check("a", {.deadline = milliseconds(0)}).status().code(),
            StatusCode::kInvalidArgument);
  // Nothing was spent by the bad calls.
  auto d = limiter.Check("a");
  ASSERT_THAT(d, IsOk());
  EXPECT_EQ(d->remaining, 1);
}

TEST(Client, CostAboveLimitIsARefusalWithReason) {
  auto client = MemoryClient();
  auto limiter = *client->MakeLimiter("upload", {.limit = 5, .window = seconds(10)});
  auto d = limiter.Check("u", {.cost = 6});
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_FALSE(d->allowed);
  EXPECT_EQ(d->reason, RefusalReason::kCostExceedsLimit);
  EXPECT_EQ(d->remaining, 5);
}

TEST(Client, SyncCallbackAndCoroutineShareOneBudget) {
  auto clock = std::make_shared<testing::FakeClock>();
  auto client = MemoryClient(clock);
  auto limiter = *client->MakeLimiter("api", {.limit = 3, .window = seconds(1)});

  auto sync = limiter.Check("k");
  ASSERT_THAT(sync, IsOk());
  EXPECT_EQ(sync->remaining, 2);

  std::promise<StatusOr<Decision>> promise;
  limiter.CheckAsync("k", {}, [&](StatusOr<Decision> d) { promise.set_value(std::move(d)); });
  auto callback = promise.get_future().get();
  ASSERT_THAT(callback, IsOk());
  EXPECT_EQ(callback->remaining, 1);

  boost::asio::io_context io;
  std::optional<StatusOr<Decision>> from_coroutine;
  boost::asio::co_spawn(
      io,
      [&]() -> boost::asio::awaitable<void> {
        from_coroutine.emplace(co_await AsyncCheck(limiter, "k", {}, boost::asio::use_awaitable));
        from_coroutine.emplace(co_await AsyncCheck(limiter, "k", {}, boost::asio::use_awaitable));
      },
      boost::asio::detached);
  io.run();
  ASSERT_TRUE(from_coroutine.has_value());
  ASSERT_TRUE(from_coroutine->ok());
  EXPECT_FALSE((*from_coroutine)->allowed);  // the fourth call of a limit of 3
  EXPECT_EQ((*from_coroutine)->retry_after, milliseconds(1000));
}

TEST(Client, PerCallLimitTakesEffectWithoutReset) {
  auto clock = std::make_shared<testing::FakeClock>();
  auto client = MemoryClient(clock);
  auto limiter = *client->MakeLimiter("plan", {.limit = 2, .window = seconds(60)});
  EXPECT_TRUE(limiter.Check("acct")->allowed);
  EXPECT_TRUE(limiter.Check("acct")->allowed);
  EXPECT_FALSE(limiter.Check("acct")->allowed);
  // Upgrade: the next call passes the new limit; the two already counted still count.
  Limit upgraded{.limit = 5, .window = seconds(60)};
  auto d = limiter.Check("acct", {.limit = upgraded});
  ASSERT_THAT(d, IsOk());
  EXPECT_TRUE(d->allowed);
  EXPECT_EQ(d->limit, 5);
  EXPECT_EQ(d->remaining, 2);
}

TEST(Client, ModelClockMovesWindows) {
  auto clock = std::make_shared<testing::FakeClock>(1'000'000);
  auto client = MemoryClient(clock);
  auto limiter = *client->MakeLimiter("w", {.limit = 1, .window = seconds(10)});
  EXPECT_TRUE(limiter.Check("x")->allowed);
  clock->Advance(milliseconds(9'999));
  auto refused = limiter.Check("x");
  EXPECT_FALSE(refused->allowed);
  EXPECT_EQ(refused->retry_after, milliseconds(1));
  EXPECT_EQ(refused->RetryAfterSeconds(), 1);
  clock->Advance(milliseconds(1));
  EXPECT_TRUE(limiter.Check("x")->allowed);
}

TEST(Client, ThreadSafeOnOneLimiter) {
  auto client = MemoryClient();
  auto limiter = *client->MakeLimiter("shared", {.limit = 1000, .window = seconds(3600)});
  std::atomic<int> allowed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 250; ++i) allowed += limiter.Check("one")->allowed ? 1 : 0;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(allowed.load(), 1000);
  EXPECT_FALSE(limiter.Check("one")->allowed);
}

// A callback that checks again, 100k times on the embedded store (which knows every
// answer at once): never called inside CheckAsync, so no recursion and no stack overflow.
TEST(Client, CallbackThatChecksAgainNeverRecurses) {
  auto client = MemoryClient();
  auto limiter = *client->MakeLimiter("again", {.limit = 1'000'000, .window = seconds(3600)});
  static thread_local bool inside_check_async = false;
  std::atomic<int> left{100'000}, inline_calls{0};
  std::promise<void> finished;
  std::function<void()> next = [&] {
    inside_check_async = true;
    limiter.CheckAsync("x", {}, [&](StatusOr<Decision> d) {
      if (inside_check_async) ++inline_calls;
      if (!d.ok() || !d->allowed || --left == 0) {
        finished.set_value();
      } else {
        next();
      }
    });
    inside_check_async = false;
  };
  next();
  finished.get_future().wait();
  EXPECT_EQ(left.load(), 0);
  EXPECT_EQ(inline_calls.load(), 0);
}

TEST(Client, LimiterOutlivesClientHandle) {
  auto client = MemoryClient();
  auto limiter = *client->MakeLimiter("keep", {.limit = 1, .window = seconds(5)});
  client.reset();
  EXPECT_TRUE(limiter.Check("x")->allowed);
}

TEST(FailurePolicyNames, ParseIsTheInverseOfTheName) {
  for (FailurePolicy p : {FailurePolicy::kDefault, FailurePolicy::kOpen, FailurePolicy::kClosed,
                          FailurePolicy::kLocal}) {
    auto parsed = ParseFailurePolicy(FailurePolicyName(p));
    ASSERT_TRUE(parsed.ok()) << FailurePolicyName(p);
    EXPECT_EQ(*parsed, p);
  }
  auto bad = ParseFailurePolicy("Closed");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("\"Closed\""), std::string::npos)
      << bad.status().ToString();
  EXPECT_FALSE(ParseFailurePolicy("").ok());
}

}  // namespace
}  // namespace sluice
