#include "differential.h"

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <condition_variable>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "algo/algorithm.h"
#include "algo/fixed_window.h"
#include "algo/gcra.h"
#include "algo/sliding_log.h"
#include "algo/sliding_window.h"
#include "algo/token_bucket.h"
#include "redis/redis_store.h"
#include "sluice/sluice.h"
#include "testing/fake_clock.h"
#include "testing/status_matchers.h"

using sluice::testing::IsOk;
namespace sluice::testing {
namespace {

// What a peek of the state stored at `key` answers now, according to the twin, with the
// state read back by the decoder beside the algorithm (src/algo/<name>.h): the admin
// API's view of the value. Holds each decoder to what its script writes: a decoder that
// misreads a field gives another peek than Redis's own decision. nullopt (and a test
// failure) when the stored value does not decode.
std::optional<Decision> PeekDecoded(const RedisServer& server, const std::string& key,
                                    const Limit& limit, int64_t now_ms) {
  using namespace internal;
  const AlgoArgs args = ArgsFor(Op::kPeek, 1, limit);
  int64_t expires_at_ms = 0;
  AlgoReply reply;
  const auto decode = [&](auto decoder, auto step) -> bool {
    RedisValue v = server.Command({"GET", key});
    decltype(decoder(std::string_view())) state;
    if (v.type == RedisValue::Type::kString) {
      state = decoder(v.str);
      EXPECT_TRUE(state.has_value()) << "the decoder cannot read what the script wrote at " << key;
      if (!state) return false;
    }
    reply = step(state, args, now_ms, expires_at_ms);
    return true;
  };
  bool ok = false;
  switch (limit.algorithm) {
    case Algorithm::kFixedWindow: ok = decode(DecodeFixedWindowValue, FixedWindowStep); break;
    case Algorithm::kSlidingWindow: ok = decode(DecodeSlidingWindowValue, SlidingWindowStep); break;
    case Algorithm::kTokenBucket: ok = decode(DecodeTokenBucketValue, TokenBucketStep); break;
    case Algorithm::kGcra: ok = decode(DecodeGcraValue, GcraStep); break;
    case Algorithm::kSlidingLog: {
      RedisValue v = server.Command({"ZRANGE", key, "0", "-1", "WITHSCORES"});
      std::optional<SlidingLogState> state;
      ok = v.type == RedisValue::Type::kArray && v.elements.size() % 2 == 0;
      for (size_t i = 0; ok && i < v.elements.size(); i += 2) {
        if (!state) state.emplace();
        const auto entry =
            DecodeSlidingLogMember(v.elements[i].str, std::stoll(v.elements[i + 1].str));
        EXPECT_TRUE(entry.has_value()) << "the decoder cannot read " << v.elements[i].str;
        if (!entry) ok = false;
        if (entry) state->entries.push_back(*entry);
      }
      if (ok) reply = SlidingLogStep(state, args, now_ms, expires_at_ms);
      break;
    }
  }
  if (!ok) return std::nullopt;
  return MakeDecision(reply, limit.limit);
}

}  // namespace

using std::chrono::milliseconds;

void RunDifferentialTrace(const RedisServer& server, const TraceConfig& given) {
  // SLUICE_TRACE_STEPS=N runs every trace N steps long (longer runs by hand).
  TraceConfig config = given;
  if (const char* steps = std::getenv("SLUICE_TRACE_STEPS")) config.steps = std::atoi(steps);
  const std::string name(AlgorithmName(config.algorithm));
  std::cout << "differential trace " << name << ": seed=" << config.seed
            << " window_ms=" << config.window_ms << " refill=" << config.refill
            << " aligned=" << config.aligned << " steps=" << config.steps
            << " vary_parameters=" << config.vary_parameters << " block_ms=" << config.block_ms
            << "\n";
  const auto started = std::chrono::steady_clock::now();
  auto clock = std::make_shared<FakeClock>(1'700'000'000'000 + config.seed);
  const std::string prefix = "diff" + std::to_string(config.seed);
  auto redis = Client::Create({.url = server.url(),
                               .prefix = prefix,
                               .deadline = milliseconds(2000),
                               .model_clock = clock});
  auto memory = Client::Create({.url = "memory://", .prefix = prefix, .model_clock = clock});
  ASSERT_TRUE(redis.ok()) << redis.status().ToString();
  ASSERT_THAT(memory, IsOk());
  const Limit base{.algorithm = config.algorithm,
                   .limit = 5,
                   .window = milliseconds(config.window_ms),
                   .refill = config.refill,
                   .aligned = config.aligned};
  // Every call must reach the script and the twin: no denial cache in front of them.
  const LimiterOptions uncached{.cache_denials = false, .block_for = milliseconds(config.block_ms)};
  auto on_redis = (*redis)->MakeLimiter("trace", base, uncached);
  ASSERT_TRUE(on_redis.ok()) << on_redis.status().ToString();
  auto on_memory = *(*memory)->MakeLimiter("trace", base, uncached);

  std::mt19937 rng(config.seed);
  auto pick = [&](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint32_t>(n)); };
  std::map<std::string, Decision> last;  // per id: its last decision
  int64_t limit = base.limit;
  int64_t window_ms = config.window_ms;
  int64_t refill = config.refill;
  bool aligned = config.aligned;
  int allowed = 0, refused = 0, boundary_steps = 0, changes = 0, foreign = 0, ttl_checks = 0;
  int decoded_checks = 0;
  int debts = 0;                          // debits that left their id in debt
  int blocked = 0, block_ttl_checks = 0;  // blocks' refusals, and their keys' expiries checked
  // Windows a varying trace moves between: much shorter and much longer than the base
  // (up to a day), so a stored end, TAT or count from the older one would show.
  const std::vector<int64_t> windows = {config.window_ms,
                                        std::max<int64_t>(1, config.window_ms / 10),
                                        config.window_ms / 2 + 1,
                                        config.window_ms * 3,
                                        config.window_ms * 10,
                                        86'400'000,
                                        7};
  // Writers of a value of another type at an id's key (someone else's stray write); a
  // string longer than any state, which a script writing in place (SETRANGE) must not
  // leave a tail of.
  const std::vector<std::vector<std::string>> writers = {
      {"SET", "", "foreign"},      {"SET", "", std::string(48, 'f')},
      {"HSET", "", "f", "v"},      {"RPUSH", "", "a"},
      {"SADD", "", "a"},           {"ZADD", "", "1", "a"},
      {"XADD", "", "*", "f", "v"},
  };
  // Batched mode (config.batch_max > 0): the Redis store itself, on a corked connection.
  boost::asio::io_context io;
  auto work = boost::asio::make_work_guard(io);
  std::thread io_thread([&io] { io.run(); });
  struct StopIo {
    boost::asio::io_context& io;
    std::thread& thread;
    ~StopIo() {
      io.stop();
      thread.join();
    }
  } stop_io{io, io_thread};
  std::shared_ptr<internal::RedisStore> store;
  if (config.batch_max > 0) {
    auto endpoint = internal::ParseRedisUrl(server.url());
    ASSERT_TRUE(endpoint.ok());
    auto connected = internal::RedisStore::Connect(io.get_executor(), *endpoint, {});
    ASSERT_TRUE(connected.ok()) << connected.status().ToString();
    store = *connected;
    store->connection().Cork();
  }
  struct Pending {
    int step;
    std::string id;
    int64_t op;
    const char* op_name;
    CheckOptions options;
    Decision memory;
    int64_t now_ms;  // the model time of the step
    StatusOr<Decision> redis = InternalError("no reply");
  };
  std::vector<Pending> pending;  // the batch being queued (never reallocated while queued)
  pending.reserve(static_cast<size_t>(config.batch_max) + 1);
  std::mutex mu;
  std::condition_variable cv;
  size_t answered = 0;
  int batch_size = config.batch_max > 0 ? 1 + static_cast<int>(pick(config.batch_max)) : 1;
  int batches = 0;

  // Compares one step's decisions; with `check_state`, also what the step left at its key.
  const auto verify = [&](const Pending& p, const Decision& r, bool check_state) {
    const Decision& m = p.memory;
    const CheckOptions& options = p.options;
    const std::string where =
        "seed " + std::to_string(config.seed) + " step " + std::to_string(p.step) + " " +
        p.op_name + " id " + p.id + " cost " + std::to_string(options.cost) + " limit " +
        std::to_string(options.limit->limit) + " window " +
        std::to_string(options.limit->window.count()) + " refill " +
        std::to_string(options.limit->refill) + " aligned " +
        std::to_string(options.limit->aligned) + " batch_max " + std::to_string(config.batch_max) +
        "\n  redis:  " + r.ToString() + "\n  memory: " + m.ToString();
    ASSERT_EQ(r.allowed, m.allowed) << where;
    ASSERT_EQ(r.remaining, m.remaining) << where;
    ASSERT_EQ(r.limit, m.limit) << where;
    ASSERT_EQ(r.reset_after, m.reset_after) << where;
    ASSERT_EQ(r.retry_after, m.retry_after) << where;
    ASSERT_EQ(r.reason, m.reason) << where;
    ASSERT_EQ(r.debt, m.debt) << where;
    ASSERT_EQ(r.blocked, m.blocked) << where;
    if (r.debt > 0) ++debts;
    if (r.blocked) ++blocked;
    if (p.op < 80) (r.allowed ? allowed : refused)++;
    if (!check_state) return;
    if (r.blocked) {
      // A block's reply says nothing of the algorithm's state; the block key holds the
      // block until its end (plus the model clock's grace, less the real time passed).
      const int64_t pttl = server.Command({"PTTL", *on_redis->KeyFor(p.id) + ".blk"}).integer;
      const int64_t real_ms =
          std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - started)
              .count();
      // (The refusal that starts a block may wait longer, for the algorithm's own reason.)
      const int64_t block_left = std::min<int64_t>(r.retry_after.count(), config.block_ms);
      ASSERT_GE(pttl, block_left + 60'000 - real_ms - 2)
          << "the block key expires before the block ends: " << where;
      ++block_ttl_checks;
      return;
    }
    // The state the script left, read back by the algorithm's decoder, says what the
    // script's own decision said is left.
    const std::optional<Decision> decoded =
        PeekDecoded(server, *on_redis->KeyFor(p.id), *options.limit, p.now_ms);
    ASSERT_TRUE(decoded.has_value()) << where;
    ASSERT_EQ(decoded->remaining, r.remaining) << "decoded state: " << decoded->ToString() << "\n"
                                               << where;
    ASSERT_EQ(decoded->reset_after, r.reset_after)
        << "decoded state: " << decoded->ToString() << "\n"
        << where;
    ++decoded_checks;
    if (config.vary_parameters) {
      // The key's expiry covers the time until its state is full again. Expiries under a
      // model clock carry 60 s of grace and count real time, which passes while the trace
      // runs: the TTL written at any earlier step has lost at most the real time since
      // the trace started.
      const int64_t pttl = server.Command({"PTTL", *on_redis->KeyFor(p.id)}).integer;
      ASSERT_NE(pttl, -1) << "a key without an expiry: " << where;
      if (pttl != -2) {
        const int64_t real_ms =
            std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - started)
                .count();
        ASSERT_GE(pttl, r.reset_after.count() + 60'000 - real_ms - 2)
            << "the key expires before its state is full again: " << where;
        ++ttl_checks;
      }
    }
  };
  // Sends the queued batch (uncork), waits for every reply, compares them in order and
  // checks the state each id's last step in the batch left.
  const auto flush = [&]() {
    if (pending.empty()) return;
    store->connection().Uncork();
    {
      std::unique_lock lock(mu);
      ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] {
        return answered == pending.size();
      })) << "a batch was not answered";
    }
    store->connection().Cork();
    ++batches;
    for (size_t i = 0; i < pending.size(); ++i) {
      const Pending& p = pending[i];
      ASSERT_TRUE(p.redis.ok()) << "step " << p.step << ": " << p.redis.status().ToString();
      bool last_touch = true;
      for (size_t k = i + 1; k < pending.size(); ++k) {
        if (pending[k].id == p.id) last_touch = false;
      }
      verify(p, *p.redis, last_touch);
      if (::testing::Test::HasFatalFailure()) return;
    }
    pending.clear();
    answered = 0;
    batch_size = 1 + static_cast<int>(pick(config.batch_max));
  };

  for (int step = 0; step < config.steps; ++step) {
    const std::string id = "id" + std::to_string(pick(config.ids));
    // Time: stay, 1 ms, a little, exactly to (or 1 ms before) this id's reset or retry
    // moment, or a whole window.
    int64_t advance = 0;
    auto it = last.find(id);
    switch (pick(7)) {
      case 0: advance = 0; break;
      case 1: advance = 1; break;
      case 2: advance = pick(std::max<int64_t>(1, window_ms / 4)); break;
      case 3:
      case 4:
        if (it != last.end()) {
          advance = std::max<int64_t>(0, it->second.reset_after.count() - pick(2));
          ++boundary_steps;
        }
        break;
      case 5:
        if (it != last.end() && it->second.retry_after.count() > 0) {
          advance = std::max<int64_t>(0, it->second.retry_after.count() - pick(2));
          ++boundary_steps;
        }
        break;
      default: advance = window_ms + pick(3) - 1; break;
    }
    clock->Advance(milliseconds(advance));
    if (pick(50) == 0) limit = 1 + pick(12);  // a plan change mid-trace
    if (config.vary_parameters && pick(25) == 0) {
      // Any other parameter changes too.
      switch (pick(3)) {
        case 0:
          if (config.vary_window) window_ms = windows[pick(static_cast<int64_t>(windows.size()))];
          break;
        case 1: refill = pick(3) == 0 ? 0 : 1 + pick(pick(2) == 0 ? 3 : 20); break;
        default: aligned = !aligned; break;
      }
      ++changes;
    }
    if (config.vary_parameters && pick(100) == 0) {
      if (store) {
        flush();  // the write goes between two batches
        if (::testing::Test::HasFatalFailure()) return;
      }
      // A value of another Redis type replaces the id's state on Redis; the twin, which
      // cannot hold one, forgets the id (what the script must do with such a value).
      std::vector<std::string> command = writers[pick(static_cast<int64_t>(writers.size()))];
      command[1] = *on_redis->KeyFor(id);
      server.Command({"DEL", command[1]});
      server.Command({"DEL", command[1] + ".blk"});  // the twin's Reset forgets the block too
      server.Command(command);
      server.Command({"PEXPIRE", command[1], "600000"});
      ASSERT_THAT(on_memory.Reset(id), IsOk());
      ++foreign;
    }
    CheckOptions options;
    options.cost = pick(10) == 0 ? limit + 1 + pick(3) : 1 + pick(pick(4) == 0 ? 4 : 1);
    options.limit = Limit{.algorithm = base.algorithm,
                          .limit = limit,
                          .window = milliseconds(window_ms),
                          .refill = refill,
                          .aligned = aligned};
    const int64_t op = pick(100);
    const bool debit = config.debits && op >= 70 && op < 80;
    const char* op_name = debit     ? "debit"
                          : op < 80 ? "check"
                          : op < 90 ? "peek"
                          : op < 97 ? "refund"
                                    : "reset";
    StatusOr<Decision> m = InternalError("unset");
    internal::Op store_op = internal::Op::kConsume;
    if (debit) {
      options.cost = pick(10) == 0 ? 1 + pick(100 * limit) : 1 + pick(3 * limit);
      store_op = internal::Op::kDebit;
      m = on_memory.Debit(id, options.cost, options);
    } else if (op < 80) {
      m = on_memory.Check(id, options);
    } else if (op < 90) {
      store_op = internal::Op::kPeek;
      m = on_memory.Peek(id, options);
    } else if (op < 97) {
      options.cost = 1 + pick(3);
      store_op = internal::Op::kRefund;
      m = on_memory.Refund(id, options.cost, options);
    } else {
      options.cost = 1;
      store_op = internal::Op::kReset;
      m = on_memory.Reset(id, options);
    }
    ASSERT_TRUE(m.ok()) << "step " << step << ": " << m.status().ToString();
    if (!store) {
      StatusOr<Decision> r = InternalError("unset");
      if (debit) {
        r = on_redis->Debit(id, options.cost, options);
      } else if (op < 80) {
        r = on_redis->Check(id, options);
      } else if (op < 90) {
        r = on_redis->Peek(id, options);
      } else if (op < 97) {
        r = on_redis->Refund(id, options.cost, options);
      } else {
        r = on_redis->Reset(id, options);
      }
      ASSERT_TRUE(r.ok()) << "step " << step << ": " << r.status().ToString();
      last[id] = *r;
      verify({step, id, op, op_name, options, *m, clock->NowMs()}, *r, true);
      if (::testing::Test::HasFatalFailure()) return;
      continue;
    }
    // Batched: queue the step on the corked connection; the twin has decided already (the
    // next steps' times follow its decision, which the batch's must equal).
    last[id] = *m;
    pending.push_back({step, id, op, op_name, options, *m, clock->NowMs()});
    internal::CheckCall call;
    call.op = store_op;
    call.key = *on_redis->KeyFor(id);
    call.limit = *options.limit;
    call.cost = options.cost;
    call.now_ms = clock->NowMs();
    call.block_ms = config.block_ms;
    call.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    const size_t index = pending.size() - 1;
    store->Check(std::move(call), [&, index](StatusOr<Decision> result) {
      std::lock_guard lock(mu);
      pending[index].redis = std::move(result);
      ++answered;
      cv.notify_all();
    });
    if (static_cast<int>(pending.size()) >= batch_size) {
      flush();
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  if (store) {
    flush();
    if (::testing::Test::HasFatalFailure()) return;
    const internal::Connection::Stats stats = store->connection().stats();
    store->Shutdown();
    std::cout << "  batches=" << batches << " batch_script_calls=" << stats.batches
              << " calls_in_them=" << stats.batched_calls
              << " sharing_arguments=" << stats.shared_arguments << "\n";
    // Most steps went through the batch script (a batch of one is sent alone), and
    // some shared the arguments of the call before (same op, time, cost and limit).
    EXPECT_GT(stats.batched_calls, static_cast<uint64_t>(config.steps) / 2);
    EXPECT_GT(stats.shared_arguments, 0u);
  }
  std::cout << "  allowed=" << allowed << " refused=" << refused
            << " boundary_steps=" << boundary_steps << " parameter_changes=" << changes
            << " foreign_values=" << foreign << " ttl_checks=" << ttl_checks
            << " decoded_checks=" << decoded_checks << "\n";
  if (config.vary_parameters) {
    EXPECT_GT(changes, config.steps / 50);
    EXPECT_GT(foreign, config.steps / 200);
    EXPECT_GT(ttl_checks, config.batch_max > 0 ? batches / 2 : config.steps / 4);
  }
  if (config.debits) {
    std::cout << "  debits_in_debt=" << debts << "\n";
    EXPECT_GT(debts, config.steps / 100);
  }
  if (config.block_ms > 0) {
    std::cout << "  blocked=" << blocked << " block_ttl_checks=" << block_ttl_checks << "\n";
    EXPECT_GT(blocked, config.steps / 150);
    EXPECT_GT(block_ttl_checks, config.batch_max > 0 ? 0 : config.steps / 150);
  }
  if (config.batch_max > 0) {
    EXPECT_GE(decoded_checks + block_ttl_checks, batches);  // each batch's last step at least
  } else {
    EXPECT_EQ(decoded_checks + block_ttl_checks, config.steps);
  }
  EXPECT_GT(allowed, config.steps / 10);
  EXPECT_GT(refused, config.steps / 20);
  EXPECT_GT(boundary_steps, config.steps / 10);
  EXPECT_EQ(server.KeysWithoutTtl(prefix + ":*"), std::vector<std::string>{});
}

void RunParameterChangeTraces(const RedisServer& server, Algorithm algorithm, bool vary_window) {
  for (uint32_t seed : {31u, 32u, 33u}) {
    RunDifferentialTrace(server, {.algorithm = algorithm,
                                  .seed = seed,
                                  .window_ms = 10'000,
                                  .vary_parameters = true,
                                  .vary_window = vary_window});
  }
  RunDifferentialTrace(server, {.algorithm = algorithm,
                                .seed = 34,
                                .window_ms = 1'000,
                                .refill = 3,
                                .aligned = true,
                                .vary_parameters = true,
                                .vary_window = vary_window});
}

void RunBatchedTraces(const RedisServer& server, Algorithm algorithm, bool vary_window) {
  // Batches up to 8 (several calls of one id in most), and up to 150 (more than the
  // connection's max_batch: split into several script calls).
  RunDifferentialTrace(server,
                       {.algorithm = algorithm, .seed = 41, .window_ms = 10'000, .batch_max = 8});
  RunDifferentialTrace(
      server,
      {.algorithm = algorithm, .seed = 42, .window_ms = 1'000, .aligned = true, .batch_max = 150});
  RunDifferentialTrace(server, {.algorithm = algorithm,
                                .seed = 43,
                                .window_ms = 10'000,
                                .vary_parameters = true,
                                .vary_window = vary_window,
                                .batch_max = 20});
}

void RunDebitTraces(const RedisServer& server, Algorithm algorithm, bool vary_window) {
  RunDifferentialTrace(
      server,
      {.algorithm = algorithm, .seed = 51, .window_ms = 1'000, .steps = 3000, .debits = true});
  RunDifferentialTrace(server, {.algorithm = algorithm,
                                .seed = 52,
                                .window_ms = 10'000,
                                .steps = 3000,
                                .vary_parameters = true,
                                .vary_window = vary_window,
                                .debits = true});
  RunDifferentialTrace(server, {.algorithm = algorithm,
                                .seed = 53,
                                .window_ms = 1'000,
                                .aligned = true,
                                .steps = 3000,
                                .batch_max = 20,
                                .debits = true});
}

void RunBlockTraces(const RedisServer& server, Algorithm algorithm, bool vary_window) {
  RunDifferentialTrace(
      server,
      {.algorithm = algorithm, .seed = 61, .window_ms = 1'000, .steps = 1500, .block_ms = 700});
  RunDifferentialTrace(server, {.algorithm = algorithm,
                                .seed = 62,
                                .window_ms = 10'000,
                                .steps = 1500,
                                .vary_parameters = true,
                                .vary_window = vary_window,
                                .block_ms = 25'000});
  RunDifferentialTrace(server, {.algorithm = algorithm,
                                .seed = 63,
                                .window_ms = 1'000,
                                .aligned = true,
                                .steps = 1500,
                                .batch_max = 20,
                                .debits = true,
                                .block_ms = 300});
}

std::string Printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

std::string ShowReply(const RedisValue& v) {
  switch (v.type) {
    case RedisValue::Type::kNil: return "nil";
    case RedisValue::Type::kInteger: return std::to_string(v.integer);
    case RedisValue::Type::kString: return "\"" + Printable(v.str) + "\"";
    case RedisValue::Type::kStatus: return "+" + v.str;
    case RedisValue::Type::kError: return "-" + v.str;
    case RedisValue::Type::kArray: {
      std::string s = "[";
      for (const auto& e : v.elements) s += ShowReply(e) + " ";
      return s + "]";
    }
  }
  return "?";
}

}  // namespace sluice::testing
