// fixed_window.lua on Redis's own clock: the production path, where the value is the
// plain count and the window's end is the key's expiry (the model-clock traces of
// tests/differential*.cc cannot reach it: under a model clock the script keeps the
// window end in the value). Random traces run against a real redis-server, one call per
// script and in batches of random sizes (src/algo/batch.lua, Redis TIME read once per
// batch), and against the twin (src/algo/fixed_window.cc) fed the wall clock read just
// before each call: codes and remaining must be equal, reset_after and retry_after equal
// within the milliseconds the calls took, and after every call the stored count equals
// the twin's and the key's expiry is the twin's window end. The windows are minutes to
// hours long and a trace starts only where no window boundary can fall inside it, so
// timing never flips a decision. Debits (charged whether they fit, into a debt of at
// most the limit) are among the calls. Then short windows on the real clock (windows that
// really end), lost expiries, foreign values, shortened windows, and refusals that must
// leave the count alone.
#include "sluice/boost_first.h"  // before any Boost header

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <future>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include "algo/algorithm.h"
#include "algo/fixed_window.h"
#include "redis/redis_store.h"
#include "sluice/sluice.h"
#include "testing/redis_server.h"

namespace sluice {
namespace {

using internal::AlgoArgs;
using internal::AlgoReply;
using internal::CheckCall;
using internal::FixedWindowState;
using internal::Op;
using std::chrono::milliseconds;
using testing::RedisServer;
using testing::RedisValue;

int64_t WallMs() {
  return std::chrono::duration_cast<milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A RedisStore of its own on an io thread: calls one by one (each its own script call)
// or queued on the corked connection and sent as one batch.
class TestStore {
 public:
  explicit TestStore(const RedisServer& server) : thread_([this] { io_.run(); }) {
    auto endpoint = internal::ParseRedisUrl(server.url());
    EXPECT_TRUE(endpoint.ok());
    auto connected = internal::RedisStore::Connect(io_.get_executor(), *endpoint, {});
    EXPECT_TRUE(connected.ok()) << connected.status().ToString();
    if (connected.ok()) store_ = *connected;
  }
  ~TestStore() {
    if (store_) store_->Shutdown();
    io_.stop();
    thread_.join();
  }
  bool ok() const { return store_ != nullptr; }
  internal::Connection::Stats stats() { return store_->connection().stats(); }

  // Sends `calls` (one batch when `batched`, else one script call each, in order) and
  // returns their replies; `sent_ms`/`done_ms` the wall clock before the first was sent
  // and after the last was answered.
  std::vector<StatusOr<Decision>> Run(std::vector<CheckCall> calls, bool batched, int64_t& sent_ms,
                                      int64_t& done_ms) {
    std::vector<StatusOr<Decision>> out(calls.size(), InternalError("no reply"));
    size_t answered = 0;
    std::mutex mu;
    std::condition_variable cv;
    if (batched) store_->connection().Cork();
    sent_ms = WallMs();
    for (size_t i = 0; i < calls.size(); ++i) {
      calls[i].deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      store_->Check(std::move(calls[i]), [&, i](StatusOr<Decision> d) {
        std::lock_guard lock(mu);
        out[i] = std::move(d);
        ++answered;
        cv.notify_all();
      });
      if (!batched) {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return answered == i + 1; });
      }
    }
    if (batched) store_->connection().Uncork();
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return answered == calls.size(); });
    done_ms = WallMs();
    return out;
  }

  StatusOr<Decision> One(CheckCall call) {
    int64_t sent = 0, done = 0;
    return Run({std::move(call)}, false, sent, done)[0];
  }

 private:
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_ =
      boost::asio::make_work_guard(io_);
  std::thread thread_;
  std::shared_ptr<internal::RedisStore> store_;
};

CheckCall Call(Op op, const std::string& key, const Limit& limit, int64_t cost) {
  CheckCall call;
  call.op = op;
  call.key = key;
  call.limit = limit;
  call.cost = cost;
  return call;  // no now_ms: the store reads Redis's clock
}

// The windows the traces move between (ms): every pair far apart, so a shortened window
// is shortened by minutes.
const std::vector<int64_t> kWindows = {600'000, 1'200'000, 3'600'000, 7'200'000};
constexpr int64_t kTraceMaxMs = 15'000;  // a trace must end within this
constexpr int64_t kMarginMs = 1'000;

// Whether a trace starting at `t` can meet a tie between two clocks: an aligned window's
// end reached, or equal (to the margin) to the end a window of another length opened
// during the trace would have. Either would let the few ms between the script's reading
// of the clock and the twin's change a decision.
bool TimingCanFlip(int64_t t) {
  for (int64_t w : kWindows) {
    const int64_t aligned_end = t - t % w + w;
    for (int64_t other : {int64_t{0}, kWindows[0], kWindows[1], kWindows[2], kWindows[3]}) {
      const int64_t x = aligned_end - t - other;
      if (x >= -kMarginMs && x <= kTraceMaxMs + kMarginMs) return true;
    }
  }
  return false;
}

struct TraceConfig {
  uint32_t seed = 1;
  int steps = 600;
  int batch_max = 0;  // 0: one script call per step; N: batches of 1..N calls
};

void RunRealClockTrace(const RedisServer& server, const TraceConfig& config) {
  std::cout << "real-clock trace: seed=" << config.seed << " steps=" << config.steps
            << " batch_max=" << config.batch_max << "\n";
  for (int i = 0; i < 60 && TimingCanFlip(server.NowMs()); ++i) {
    std::cout << "  a window boundary is near: waiting a second\n";
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  ASSERT_FALSE(TimingCanFlip(server.NowMs()));
  TestStore store(server);
  ASSERT_TRUE(store.ok());
  const int64_t started = WallMs();
  const std::string prefix = "rc" + std::to_string(config.seed);
  std::mt19937 rng(config.seed);
  auto pick = [&](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint32_t>(n)); };
  std::map<std::string, std::optional<FixedWindowState>> twin;  // by key
  int64_t limit = 5, window_ms = kWindows[0];
  bool aligned = pick(2) == 0;
  int64_t tolerance = 2;  // the longest a call or batch took, + 1 ms
  int counts[8] = {};
  int allowed = 0, refused = 0, moved = 0, foreign = 0, batches = 0;
  for (int step = 0; step < config.steps;) {
    if (pick(20) == 0) limit = 1 + pick(12);
    if (pick(12) == 0) window_ms = kWindows[pick(static_cast<int64_t>(kWindows.size()))];
    if (pick(15) == 0) aligned = !aligned;
    if (pick(60) == 0) {
      // A value sluice did not write (another type, the model's or v1's "count:end", a
      // word, a negative count), with an expiry; the twin forgets the id.
      const std::string key = prefix + ":{t:id" + std::to_string(pick(6)) + "}:fw2";
      server.Command({"DEL", key});
      switch (pick(4)) {
        case 0: server.Command({"HSET", key, "f", "v"}); break;
        case 1: server.Command({"SET", key, "3:99999999999999"}); break;
        case 2: server.Command({"SET", key, "foreign"}); break;
        default: server.Command({"SET", key, "-4"}); break;
      }
      server.Command({"PEXPIRE", key, "600000"});
      twin[key].reset();
      ++foreign;
    }
    const int size = config.batch_max > 0 ? 1 + static_cast<int>(pick(config.batch_max)) : 1;
    std::vector<CheckCall> calls;
    std::vector<AlgoArgs> args;
    for (int i = 0; i < size && step < config.steps; ++i, ++step) {
      const std::string key = prefix + ":{t:id" + std::to_string(pick(6)) + "}:fw2";
      const Limit l{.limit = limit, .window = milliseconds(window_ms), .aligned = aligned};
      const int64_t r = pick(100);
      Op op = r < 66   ? Op::kConsume
              : r < 78 ? Op::kPeek
              : r < 86 ? Op::kRefund
              : r < 90 ? Op::kReset
              : r < 96 ? Op::kSync
                       : Op::kDebit;
      int64_t cost = pick(10) == 0 ? limit + 1 + pick(3) : 1 + (pick(4) == 0 ? pick(4) : 0);
      if (op == Op::kDebit) cost = 1 + pick(3 * limit);  // often past the debt bound
      CheckCall call = Call(op, key, l, cost);
      if (op == Op::kRefund) call.cost = 1 + pick(3);
      if (op == Op::kReset) call.cost = 1;
      AlgoArgs twin_args = internal::ArgsFor(call.op, call.cost, call.limit);
      if (op == Op::kSync) {
        // Units admitted locally in no known window, in the live one, or in an older
        // one, each named by its end as each side knows it before this batch: the key's
        // expiry for the script, the twin's own end for the twin (not aligned, the two
        // differ by the ms between the clocks' readings).
        call.cost = pick(6);
        const auto& state = twin[key];
        const int64_t which = state ? pick(3) : 0;
        const int64_t end_on_redis = which == 0 ? 0 : server.Command({"PEXPIRETIME", key}).integer;
        const int64_t back = which == 2 ? window_ms : 0;
        call.limit.refill = which == 0 ? 0 : end_on_redis - back;
        twin_args = internal::ArgsFor(call.op, call.cost, call.limit);
        twin_args.refill = which == 0 ? 0 : state->ends_ms - back;
      } else {
        twin_args = internal::ArgsFor(call.op, call.cost, call.limit);
      }
      args.push_back(twin_args);
      calls.push_back(std::move(call));
    }
    const std::vector<CheckCall> sent_calls = calls;
    int64_t sent_ms = 0, done_ms = 0;
    auto replies = store.Run(std::move(calls), config.batch_max > 0, sent_ms, done_ms);
    ++batches;
    tolerance = std::max(tolerance, done_ms - sent_ms + 1);
    for (size_t i = 0; i < replies.size(); ++i) {
      const CheckCall& c = sent_calls[i];
      int64_t expires_at = 0;
      std::optional<FixedWindowState>& state = twin[c.key];
      // The twin's window end before this step (none: no window yet).
      const bool had_window = state.has_value();
      const int64_t stored_end = had_window ? state->ends_ms : 0;
      const AlgoReply m = internal::FixedWindowStep(state, args[i], sent_ms, expires_at);
      if (had_window && state && state->ends_ms < stored_end) ++moved;
      const Decision want = internal::MakeDecision(m, c.limit.limit, c.op);
      const std::string where =
          "seed " + std::to_string(config.seed) + " step " +
          std::to_string(step - static_cast<int>(replies.size()) + static_cast<int>(i)) + " op " +
          std::to_string(static_cast<int>(c.op)) + " key " + c.key + " cost " +
          std::to_string(c.cost) + " limit " + std::to_string(c.limit.limit) + " window " +
          std::to_string(c.limit.window.count()) + " aligned " + std::to_string(c.limit.aligned) +
          " refill " + std::to_string(c.limit.refill) + " tolerance " + std::to_string(tolerance) +
          "\n  redis: " +
          (replies[i].ok() ? replies[i]->ToString() : replies[i].status().ToString()) +
          "\n  twin:  " + want.ToString();
      ASSERT_TRUE(replies[i].ok()) << where;
      const Decision& got = *replies[i];
      ASSERT_EQ(got.allowed, want.allowed) << where;
      ASSERT_EQ(got.reason, want.reason) << where;
      ASSERT_EQ(got.remaining, want.remaining) << where;
      ASSERT_EQ(got.limit, want.limit) << where;
      ASSERT_EQ(got.debt, want.debt) << where;
      ASSERT_LE(std::abs(got.reset_after.count() - want.reset_after.count()), tolerance) << where;
      ASSERT_LE(std::abs(got.retry_after.count() - want.retry_after.count()), tolerance) << where;
      ++counts[static_cast<int>(c.op)];
      if (c.op == Op::kConsume) (got.allowed ? allowed : refused)++;
    }
    // What every touched key holds: the twin's count, and its window end as the expiry.
    for (const CheckCall& c : sent_calls) {
      const std::optional<FixedWindowState>& state = twin[c.key];
      const RedisValue v = server.Command({"GET", c.key});
      const int64_t expire_at = server.Command({"PEXPIRETIME", c.key}).integer;
      if (!state) {
        ASSERT_EQ(v.type, RedisValue::Type::kNil) << c.key << " holds " << v.str;
        continue;
      }
      ASSERT_EQ(v.type, RedisValue::Type::kString) << c.key;
      ASSERT_EQ(v.str, std::to_string(state->count)) << c.key;
      ASSERT_LE(std::abs(expire_at - state->ends_ms), tolerance) << c.key;
    }
    ASSERT_EQ(server.KeysWithoutTtl(prefix + ":*"), std::vector<std::string>{});
  }
  const int64_t took = WallMs() - started;
  std::cout << "  consumes=" << counts[0] << " (allowed=" << allowed << " refused=" << refused
            << ") peeks=" << counts[1] << " refunds=" << counts[2] << " resets=" << counts[3]
            << " syncs=" << counts[4] << " debits=" << counts[7] << " moved_ends=" << moved
            << " foreign=" << foreign << " script_calls_or_batches=" << batches
            << " tolerance_ms=" << tolerance << " took_ms=" << took << "\n";
  ASSERT_LT(took, kTraceMaxMs) << "the trace ran longer than its timing-safe span";
  EXPECT_GT(allowed, config.steps / 10);
  EXPECT_GT(refused, config.steps / 20);
  EXPECT_GT(moved, 3) << "too few shortened windows to say anything";
  EXPECT_GT(counts[4], config.steps / 30);
  EXPECT_GT(counts[7], config.steps / 50);
  if (config.batch_max > 0) {
    const internal::Connection::Stats stats = store.stats();
    EXPECT_GT(stats.batched_calls, static_cast<uint64_t>(config.steps) / 2)
        << "most calls must have gone through the batch script";
  }
}

TEST(FixedWindowRealClock, OneScriptCallPerStepMatchesTheTwin) {
  RedisServer server;
  RunRealClockTrace(server, {.seed = 1301, .steps = 800});
  RunRealClockTrace(server, {.seed = 1302, .steps = 800});
}

TEST(FixedWindowRealClock, BatchesOfRandomSizesMatchTheTwin) {
  RedisServer server;
  RunRealClockTrace(server, {.seed = 1311, .steps = 2000, .batch_max = 8});
  RunRealClockTrace(server, {.seed = 1312, .steps = 2000, .batch_max = 40});
}

class FixedWindowOnRedisClock : public ::testing::Test {
 protected:
  std::string Key(const std::string& id) { return "rk:{t:" + id + "}:fw2"; }
  int64_t Pttl(const std::string& key) { return server_.Command({"PTTL", key}).integer; }
  std::string Value(const std::string& key) { return server_.Command({"GET", key}).str; }
  Decision Do(Op op, const std::string& key, const Limit& limit, int64_t cost = 1) {
    auto d = store_.One(Call(op, key, limit, cost));
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    return d.ok() ? *d : Decision{};
  }
  void ExpectEveryKeyHasAnExpiry() {
    EXPECT_EQ(server_.KeysWithoutTtl("rk:*"), std::vector<std::string>{});
  }

  RedisServer server_;
  TestStore store_{server_};
};

// Windows that really end: the key expires with its window, and the next call opens a
// new one; aligned windows end on multiples of the window; one call per script and in a
// batch (Redis TIME read once by the batch driver).
TEST_F(FixedWindowOnRedisClock, ShortWindowsEndOnTheRealClock) {
  for (bool batched : {false, true}) {
    const std::string key = Key(batched ? "short-b" : "short");
    const Limit l{.limit = 3, .window = milliseconds(150)};
    int64_t sent = 0, done = 0;
    std::vector<CheckCall> calls;
    for (int i = 0; i < 4; ++i) calls.push_back(Call(Op::kConsume, key, l, 1));
    auto replies = store_.Run(calls, batched, sent, done);
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(replies[i].ok());
      EXPECT_TRUE(replies[i]->allowed);
      EXPECT_EQ(replies[i]->remaining, 2 - i);
      EXPECT_LE(replies[i]->reset_after.count(), 150);
    }
    ASSERT_TRUE(replies[3].ok());
    EXPECT_FALSE(replies[3]->allowed);
    EXPECT_EQ(Value(key), "3") << "the refusal was counted";
    const int64_t wait = replies[3]->retry_after.count();
    EXPECT_GT(wait, 0);
    EXPECT_LE(wait, 150);
    std::this_thread::sleep_for(milliseconds(wait + 20));
    EXPECT_EQ(server_.Command({"GET", key}).type, RedisValue::Type::kNil)
        << "the key outlived its window";
    replies = store_.Run({Call(Op::kConsume, key, l, 2)}, batched, sent, done);
    ASSERT_TRUE(replies[0].ok());
    EXPECT_TRUE(replies[0]->allowed);
    EXPECT_EQ(replies[0]->remaining, 1);
    EXPECT_EQ(Value(key), "2");
  }
  // Aligned: the expiry is the next multiple of the window, exactly.
  const std::string key = Key("aligned");
  const Limit aligned{.limit = 2, .window = milliseconds(200), .aligned = true};
  const Decision first = Do(Op::kConsume, key, aligned);
  EXPECT_TRUE(first.allowed);
  const int64_t end = server_.Command({"PEXPIRETIME", key}).integer;
  EXPECT_EQ(end % 200, 0) << end;
  EXPECT_LE(first.reset_after.count(), 200);
  EXPECT_TRUE(Do(Op::kConsume, key, aligned).allowed);
  const Decision refused = Do(Op::kConsume, key, aligned);
  EXPECT_FALSE(refused.allowed);
  std::this_thread::sleep_for(milliseconds(refused.retry_after.count() + 20));
  const Decision next = Do(Op::kConsume, key, aligned);
  EXPECT_TRUE(next.allowed);
  EXPECT_EQ(next.remaining, 1);
  EXPECT_GT(server_.Command({"PEXPIRETIME", key}).integer, end);
  ExpectEveryKeyHasAnExpiry();
}

// A key that lost its expiry (PERSIST) gets the end of a window opened at the call that
// finds it, whatever the call, its count kept (refused calls still uncounted).
TEST_F(FixedWindowOnRedisClock, ALostExpiryIsGivenBackByAnyCall) {
  const Limit l{.limit = 5, .window = milliseconds(60'000)};
  struct Case {
    const char* name;
    Op op;
    int64_t cost;
    const char* count_after;  // the value after the call (from 3)
  };
  for (const Case& c :
       {Case{"consume", Op::kConsume, 1, "4"}, Case{"refused", Op::kConsume, 3, "3"},
        Case{"too big", Op::kConsume, 6, "3"}, Case{"peek", Op::kPeek, 1, "3"},
        Case{"refund", Op::kRefund, 1, "2"}, Case{"sync", Op::kSync, 1, "4"}}) {
    const std::string key = Key(std::string("lost-") + c.name);
    ASSERT_TRUE(Do(Op::kConsume, key, l, 3).allowed);
    ASSERT_EQ(server_.Command({"PERSIST", key}).integer, 1);
    ASSERT_EQ(Pttl(key), -1);
    const int64_t before = WallMs();
    const Decision d = Do(c.op, key, l, c.cost);
    const int64_t pttl = Pttl(key);
    EXPECT_GT(pttl, 59'000) << c.name;
    EXPECT_LE(pttl, 60'000) << c.name;
    EXPECT_EQ(Value(key), c.count_after) << c.name;
    EXPECT_LE(d.reset_after.count(), 60'000) << c.name;
    EXPECT_GE(d.reset_after.count(), 60'000 - (WallMs() - before) - 1) << c.name;
  }
  ExpectEveryKeyHasAnExpiry();
}

// Values sluice did not write (another type, v1's or the model's "count:end", a word, a
// negative number), with or without an expiry: no call fails on them, none leaves them
// (or a key without an expiry) behind; a consume opens a new window.
TEST_F(FixedWindowOnRedisClock, ForeignValuesAreReplacedWithoutAnError) {
  const Limit l{.limit = 5, .window = milliseconds(60'000)};
  const std::vector<std::vector<std::string>> writers = {
      {"HSET", "", "f", "v"},     {"SET", "", "3:99999999999999"},
      {"SET", "", "not a count"}, {"SET", "", "-4"},
      {"ZADD", "", "1", "a"},     {"SET", "", "99999999999999999999999"}};
  int n = 0;
  for (const auto& writer : writers) {
    for (Op op : {Op::kConsume, Op::kPeek, Op::kRefund, Op::kSync, Op::kReset}) {
      for (bool with_ttl : {false, true}) {
        const std::string key = Key("foreign" + std::to_string(n++));
        std::vector<std::string> command = writer;
        command[1] = key;
        server_.Command(command);
        if (with_ttl) server_.Command({"PEXPIRE", key, "600000"});
        const Decision d = Do(op, key, l, 2);
        const std::string where = writer[0] + " " + writer.back() + " op " +
                                  std::to_string(static_cast<int>(op)) + " ttl " +
                                  std::to_string(with_ttl);
        EXPECT_TRUE(d.allowed) << where;
        if (op == Op::kConsume) {
          EXPECT_EQ(d.remaining, 3) << where;
          EXPECT_EQ(Value(key), "2") << where;
          EXPECT_GT(Pttl(key), 59'000) << where;
        } else if (op == Op::kSync) {
          EXPECT_EQ(d.remaining, 3) << where;  // no window known: the units open one
          EXPECT_EQ(Value(key), "2") << where;
        } else {
          EXPECT_EQ(d.remaining, 5) << where;
          EXPECT_EQ(server_.Command({"EXISTS", key}).integer, 0) << where;
        }
      }
    }
  }
  ExpectEveryKeyHasAnExpiry();
}

// Limits are arguments: a call under a shorter window moves the stored end (the key's
// expiry) to the end of a window opened now, at once, whatever the call; a longer one
// never moves it.
TEST_F(FixedWindowOnRedisClock, AShortenedWindowAppliesAtOnce) {
  const Limit hour{.limit = 5, .window = milliseconds(3'600'000)};
  const Limit short_window{.limit = 5, .window = milliseconds(300)};
  for (Op op : {Op::kConsume, Op::kPeek, Op::kRefund}) {
    const std::string key = Key("shorter" + std::to_string(static_cast<int>(op)));
    ASSERT_TRUE(Do(Op::kConsume, key, hour, 2).allowed);
    ASSERT_GT(Pttl(key), 3'500'000);
    const Decision d = Do(op, key, short_window, 1);
    EXPECT_LE(d.reset_after.count(), 300);
    EXPECT_LE(Pttl(key), 300);
    EXPECT_GT(Pttl(key), 0);
    // The count carried over.
    EXPECT_EQ(Value(key), op == Op::kConsume ? "3" : op == Op::kPeek ? "2" : "1");
    // A longer window later does not move it back.
    EXPECT_LE(Do(Op::kPeek, key, hour).reset_after.count(), 300);
    EXPECT_LE(Pttl(key), 300);
  }
  // Aligned and shorter: moved to the aligned end.
  const std::string key = Key("shorter-aligned");
  ASSERT_TRUE(Do(Op::kConsume, key, hour, 1).allowed);
  const Limit aligned{.limit = 5, .window = milliseconds(250), .aligned = true};
  EXPECT_TRUE(Do(Op::kConsume, key, aligned).allowed);
  EXPECT_EQ(server_.Command({"PEXPIRETIME", key}).integer % 250, 0);
  EXPECT_EQ(Value(key), "2");
  ExpectEveryKeyHasAnExpiry();
}

// A refusal, over the limit or of a cost above it, changes neither the count nor the
// window; a cost above the limit on no state writes nothing.
TEST_F(FixedWindowOnRedisClock, RefusalsLeaveTheCountAndTheWindowAlone) {
  const Limit l{.limit = 5, .window = milliseconds(60'000)};
  const std::string key = Key("refusals");
  ASSERT_TRUE(Do(Op::kConsume, key, l, 4).allowed);
  const int64_t end = server_.Command({"PEXPIRETIME", key}).integer;
  for (int64_t cost : {2, 5, 6, 100}) {
    const Decision d = Do(Op::kConsume, key, l, cost);
    EXPECT_FALSE(d.allowed) << cost;
    EXPECT_EQ(d.remaining, 1) << cost;
    EXPECT_EQ(Value(key), "4") << cost;
    EXPECT_EQ(server_.Command({"PEXPIRETIME", key}).integer, end) << cost;
  }
  EXPECT_TRUE(Do(Op::kConsume, key, l, 1).allowed);
  EXPECT_EQ(Value(key), "5");
  EXPECT_FALSE(Do(Op::kConsume, key, l, 1).allowed);
  EXPECT_EQ(Value(key), "5");
  const std::string fresh = Key("too-big");
  const Decision d = Do(Op::kConsume, fresh, l, 6);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, RefusalReason::kCostExceedsLimit);
  EXPECT_EQ(server_.Command({"EXISTS", fresh}).integer, 0) << "a refusal created a key";
  ExpectEveryKeyHasAnExpiry();
}

// An error that is not about the value (here NOPERM: a user without INCRBY and DECRBY)
// is the caller's: returned, never taken for a foreign value to replace (which would
// open a new window at every call and admit them all).
TEST_F(FixedWindowOnRedisClock, AnErrorThatIsNotAForeignValueIsReturned) {
  ASSERT_EQ(server_
                .Command({"ACL", "SETUSER", "noincr", "on", ">pw", "~*", "&*", "+@all", "-incrby",
                          "-decrby"})
                .str,
            "OK");
  auto client =
      Client::Create({.url = "redis://noincr:pw@127.0.0.1:" + std::to_string(server_.port()),
                      .prefix = "rk",
                      .deadline = milliseconds(2000),
                      .on_failure = FailurePolicy::kClosed});
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto limiter = (*client)->MakeLimiter("acl", {.limit = 2, .window = milliseconds(60'000)});
  ASSERT_TRUE(limiter.ok());
  for (int i = 0; i < 4; ++i) {
    auto d = limiter->Check("u");
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_FALSE(d->allowed) << d->ToString();
    EXPECT_NE(d->source, DecisionSource::kStore) << d->ToString();
  }
  EXPECT_EQ(server_.Command({"EXISTS", "rk:{acl:u}:fw2"}).integer, 0);
  EXPECT_FALSE(limiter->Refund("u", 1).ok());
}

// During a rolling deploy old servers count under `…}:fw` ("count:end") and new ones
// under `…}:fw2`: neither reads, let alone deletes, the other's key.
TEST_F(FixedWindowOnRedisClock, TheEarlierFormatsKeyIsLeftAlone) {
  auto client = Client::Create({.url = server_.url(), .prefix = "rk"});
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto limiter = (*client)->MakeLimiter("t", {.limit = 3, .window = milliseconds(60'000)});
  ASSERT_TRUE(limiter.ok());
  const std::string old_key = "rk:{t:deploy}:fw";
  const std::string far = std::to_string(WallMs() + 60'000);
  server_.Command({"SET", old_key, "3:" + far, "PX", "60000"});
  EXPECT_EQ(*limiter->KeyFor("deploy"), "rk:{t:deploy}:fw2");
  auto d = limiter->Check("deploy");
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->allowed);
  EXPECT_EQ(d->remaining, 2);
  EXPECT_EQ(Value(old_key), "3:" + far);
  ExpectEveryKeyHasAnExpiry();
}

}  // namespace
}  // namespace sluice
