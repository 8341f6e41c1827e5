// Differential tests: the concurrency lease script (src/algo/concurrency.lua) on a real
// redis-server vs its in-memory twin (LeaseStep), on a model clock passed as ARGV[2].
// Random traces mix acquires (limits 1-5 changing mid-trace, ttls 5-2000 ms), heartbeats
// (ttls shorter and longer than what is left of the lease), releases (a plain ZREM, as
// RedisStore sends it) of live, expired-unpruned, released and unknown members,
// release-all and list, and waiting acquires (tickets taken, refreshed, granted in turn,
// refused past the bound, left, and expired); steps land exactly on lease and ticket
// expiries and 1 ms before them. After every step the replies (code, count, now, expiry,
// rows), the stored sets (the lease set and both queue sets) and the keys' expiries must
// agree. Also: a key that lost its TTL gets one back, and a key of another
// type is replaced by the acquire that finds it.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "algo/concurrency.h"
#include "differential.h"
#include "redis/scripts.h"
#include "testing/redis_server.h"

namespace sluice {
namespace {

using internal::LeaseArgs;
using internal::LeaseMember;
using internal::LeaseOp;
using internal::LeaseReply;
using internal::LeaseRow;
using internal::LeaseSetState;
using internal::LeaseStep;
using testing::Printable;
using testing::RedisValue;
using testing::ShowReply;

constexpr int64_t kGraceMs = 60'000;  // the scripts' expiry grace under a model clock

// One blocking connection for a whole trace (RedisServer::Command shares the fixture's).
class Connection {
 public:
  explicit Connection(const testing::RedisServer& server) : client_(server.Connect()) {}
  bool ok() const { return client_ != nullptr; }

  RedisValue Command(const std::vector<std::string>& args) {
    StatusOr<RedisValue> v = client_->Command(args);
    if (v.ok()) return *std::move(v);
    RedisValue error;
    error.type = RedisValue::Type::kError;
    error.str = "connection error: " + v.status().ToString();
    return error;
  }

 private:
  std::unique_ptr<internal::BlockingClient> client_;
};

std::string Show(const LeaseReply& r) {
  std::string s = "{" + std::to_string(r.code) + ", " + std::to_string(r.count) + ", " +
                  std::to_string(r.now_ms) + ", " + std::to_string(r.expires_at_ms);
  for (const LeaseRow& row : r.rows) {
    s += ", " + Printable(row.member) + "@" + std::to_string(row.expires_at_ms);
  }
  return s + "}";
}

std::string Show(const std::map<std::string, int64_t>& members) {
  std::string s = "{";
  for (const auto& [member, expires] : members) {
    s += Printable(member) + "@" + std::to_string(expires) + " ";
  }
  return s + "}";
}

std::string Show(const std::map<std::string, internal::LeaseTicket>& tickets) {
  std::string s = "{";
  for (const auto& [token, t] : tickets) {
    s += Printable(token) + "@" + std::to_string(t.arrival) + "-" +
         std::to_string(t.expires_at_ms) + " ";
  }
  return s + "}";
}

// The script by EVAL with the arguments RedisStore sends (see the script's header).
RedisValue Eval(Connection& conn, const std::string& key, LeaseOp op, const std::string& now,
                const LeaseArgs& args) {
  return conn.Command({"EVAL", std::string(internal::kConcurrencyLua), "1", key,
                       std::to_string(static_cast<int>(op)), now, args.token,
                       std::to_string(args.limit), std::to_string(args.ttl_ms),
                       std::to_string(args.ticket_ttl_ms), std::to_string(args.max_waiters)});
}

// The script's reply as RedisStore parses it; false (and `error`) when malformed.
bool Parse(LeaseOp op, const RedisValue& v, LeaseReply& out, std::string& error) {
  out = {};
  if (v.type != RedisValue::Type::kArray) {
    error = "not an array: " + ShowReply(v);
    return false;
  }
  if (op == LeaseOp::kList) {
    if (v.elements.empty() || v.elements.size() % 2 != 1 ||
        v.elements[0].type != RedisValue::Type::kInteger) {
      error = "bad list: " + ShowReply(v);
      return false;
    }
    out.code = 1;
    out.now_ms = v.elements[0].integer;
    for (size_t i = 1; i + 1 < v.elements.size(); i += 2) {
      if (v.elements[i].type != RedisValue::Type::kString ||
          v.elements[i + 1].type != RedisValue::Type::kInteger) {
        error = "bad list row: " + ShowReply(v);
        return false;
      }
      out.rows.push_back({v.elements[i].str, v.elements[i + 1].integer});
    }
    return true;
  }
  if (v.elements.size() != 4) {
    error = "not 4 fields: " + ShowReply(v);
    return false;
  }
  for (const auto& e : v.elements) {
    if (e.type != RedisValue::Type::kInteger) {
      error = "a non-integer field: " + ShowReply(v);
      return false;
    }
  }
  out.code = static_cast<int>(v.elements[0].integer);
  out.count = v.elements[1].integer;
  out.now_ms = v.elements[2].integer;
  out.expires_at_ms = v.elements[3].integer;
  return true;
}

// The stored set: member → score.
std::map<std::string, int64_t> Stored(Connection& conn, const std::string& key) {
  std::map<std::string, int64_t> members;
  RedisValue v = conn.Command({"ZRANGE", key, "0", "-1", "WITHSCORES"});
  for (size_t i = 0; i + 1 < v.elements.size(); i += 2) {
    members[v.elements[i].str] = std::stoll(v.elements[i + 1].str);
  }
  return members;
}

// ---------------------------------------------------------------------------------------
// Random traces

struct TraceConfig {
  uint32_t seed = 1;
  int steps = 3000;
  int ids = 5;
  int64_t max_ttl_ms = 2000;
  // Waiting acquires mostly, small limits, time moving in small steps: queues form,
  // drain, fill up, and meet newcomers (the outcomes then required are the queue's).
  bool queues = false;
};

void RunLeaseTrace(const testing::RedisServer& server, const TraceConfig& config) {
  std::cout << "concurrency differential trace: seed=" << config.seed << " steps=" << config.steps
            << " ids=" << config.ids << " max_ttl_ms=" << config.max_ttl_ms << "\n";
  Connection conn(server);
  ASSERT_TRUE(conn.ok()) << "cannot connect to the test redis";
  const std::string prefix = "dlease" + std::to_string(config.seed);
  std::mt19937_64 rng(config.seed);
  auto pick = [&](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };
  // Ttls log-uniform-ish over [5, max]: many short ones (steps cross expiries), some long.
  auto ttl = [&] {
    const int64_t r = pick(4);
    const int64_t span = config.max_ttl_ms - 4;  // ttls in [5, max_ttl_ms]
    if (r == 0) return 5 + pick(std::min<int64_t>(10, span));
    if (r == 1) return 5 + pick(std::min<int64_t>(100, span));
    return 5 + pick(span);
  };
  auto token = [&] {
    static const std::string kAlphabet =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    std::string t;
    const int64_t len = 1 + pick(pick(8) == 0 ? 3 : 22);
    for (int64_t i = 0; i < len; ++i) t.push_back(kAlphabet[pick(pick(4) == 0 ? 3 : 64)]);
    // A few tokens with bytes above 0x7f: ZRANGE orders members by unsigned bytes.
    if (pick(30) == 0) t += pick(2) ? "\xc3\xa9" : "\xff";
    return t;
  };

  struct Id {
    std::string key;
    LeaseSetState twin;
    std::vector<std::string> members;  // every member ever granted (live, expired, released)
    std::vector<std::string> waiters;  // every token that ever took a ticket
  };
  std::vector<Id> ids(static_cast<size_t>(config.ids));
  for (int i = 0; i < config.ids; ++i) {
    ids[static_cast<size_t>(i)].key = prefix + ":{c:id" + std::to_string(i) + "}:cc";
  }
  int64_t now = 1'700'000'000'000 + 7 * static_cast<int64_t>(config.seed);
  auto new_limit = [&] { return config.queues ? 1 + pick(2) : 1 + pick(5); };
  int64_t limit = new_limit();
  const auto start = std::chrono::steady_clock::now();

  std::map<std::string, int> seen;  // what the trace reached, by outcome
  int64_t longest_ttl = 0;          // the longest ttl asked for so far
  int64_t longest_ticket_ttl = 0;   // the longest ticket ttl asked for so far
  for (int step = 0; step < config.steps; ++step) {
    Id& id = ids[static_cast<size_t>(pick(config.ids))];
    // Time: stay, 1 ms, a little, onto (or 1 ms before) a lease's expiry, or far.
    std::string time_kind = "stay";
    switch (config.queues && pick(3) > 0 ? 9 : pick(10)) {
      case 0:
      case 1: break;
      case 2:
        now += 1;
        time_kind = "+1";
        break;
      case 3:
        now += pick(50);
        time_kind = "small";
        break;
      case 4:
      case 5:
      case 6: {
        std::vector<int64_t> ahead;
        for (const auto& [member, expires] : id.twin.members) {
          if (expires >= now + 1) ahead.push_back(expires);
        }
        for (const auto& [waiter, ticket] : id.twin.tickets) {
          if (ticket.expires_at_ms >= now + 1) ahead.push_back(ticket.expires_at_ms);
        }
        if (!ahead.empty()) {
          const int64_t target =
              ahead[static_cast<size_t>(pick(static_cast<int64_t>(ahead.size())))];
          const int64_t before = pick(2);
          now = std::max(now, target - before);
          time_kind = before == 0 && now == target ? "at expiry" : "1 ms before expiry";
        }
        break;
      }
      case 7:
        now += pick(config.max_ttl_ms);
        time_kind = "up to a ttl";
        break;
      case 8:
        now += config.max_ttl_ms + pick(3);
        time_kind = "past every ttl";
        break;
      default:
        now += pick(5);
        time_kind = "tiny";
        break;
    }
    ++seen["time: " + time_kind];
    if (pick(40) == 0) limit = new_limit();  // a plan change mid-trace

    // An existing member: live, expired-unpruned, or granted earlier and gone since.
    auto some_member = [&](std::string& kind) -> std::string {
      const int64_t r = pick(10);
      if (r < 6 && !id.twin.members.empty()) {
        auto it = id.twin.members.begin();
        std::advance(it, pick(static_cast<int64_t>(id.twin.members.size())));
        kind = it->second > now ? "live" : "expired";
        return it->first;
      }
      if (r < 9 && !id.members.empty()) {
        const std::string& m =
            id.members[static_cast<size_t>(pick(static_cast<int64_t>(id.members.size())))];
        auto it = id.twin.members.find(m);
        kind = it == id.twin.members.end() ? "gone" : it->second > now ? "live" : "expired";
        return m;
      }
      kind = "unknown";
      return pick(2) ? LeaseMember(now, token()) : "nope";
    };

    LeaseArgs args;
    std::string target_kind;
    const int64_t r =
        config.queues && pick(3) > 0 ? 100 + pick(40) : pick(config.queues ? 100 : 140);
    if (r >= 100) {
      // A waiter: one holding a ticket (or that held one), or a newcomer.
      args.op = r < 126 ? LeaseOp::kWait : LeaseOp::kLeave;
      const int64_t who = pick(10);
      if (!id.twin.tickets.empty() && who < 5) {
        auto it = id.twin.tickets.begin();
        std::advance(it, pick(static_cast<int64_t>(id.twin.tickets.size())));
        args.token = it->first;
        target_kind = it->second.expires_at_ms > now ? "ticket" : "no ticket";
      } else if (!id.waiters.empty() && who < 7) {
        args.token = id.waiters[static_cast<size_t>(pick(static_cast<int64_t>(id.waiters.size())))];
        auto it = id.twin.tickets.find(args.token);
        target_kind =
            it != id.twin.tickets.end() && it->second.expires_at_ms > now ? "ticket" : "no ticket";
      } else {
        args.token = token();
        target_kind = "new";
        if (args.op == LeaseOp::kWait) id.waiters.push_back(args.token);
      }
      args.limit = limit;
      args.ttl_ms = ttl();
      // Tickets often outlive leases, so waiters queue behind them and meet newcomers.
      args.ticket_ttl_ms = pick(3) == 0 ? ttl() : config.max_ttl_ms * (1 + pick(3));
      args.max_waiters = 1 + pick(pick(2) ? 2 : 5);
      longest_ticket_ttl = std::max(longest_ticket_ttl, args.ticket_ttl_ms);
    } else if (r < 45) {
      args = {.op = LeaseOp::kAcquire, .token = token(), .limit = limit, .ttl_ms = ttl()};
    } else if (r < 68) {
      args.op = LeaseOp::kHeartbeat;
      args.token = some_member(target_kind);
      auto it = id.twin.members.find(args.token);
      const int64_t left = it == id.twin.members.end() ? 0 : it->second - now;
      switch (pick(4)) {
        case 0:
          args.ttl_ms = std::max<int64_t>(1, left - 1 - pick(std::max<int64_t>(1, left)));
          break;
        case 1: args.ttl_ms = std::max<int64_t>(1, left); break;
        case 2: args.ttl_ms = left + 1 + pick(config.max_ttl_ms); break;
        default: args.ttl_ms = ttl(); break;
      }
    } else if (r < 80) {
      args.op = LeaseOp::kRelease;
      args.token = some_member(target_kind);
    } else if (r < 96) {
      args.op = LeaseOp::kList;
    } else {
      args.op = LeaseOp::kReleaseAll;
    }

    if (args.op != LeaseOp::kRelease && args.op != LeaseOp::kLeave && pick(60) == 0) {
      // A value of another Redis type replaces the set (someone else's stray write): the
      // script must take it for no set at all, as the twin, which forgets the id, does.
      // (Release is a plain ZREM, not a script: it answers WRONGTYPE, and is not drawn;
      // leaving a queue does not read the lease set.)
      static const std::vector<std::vector<std::string>> kWriters = {{"SET", "", "foreign"},
                                                                     {"HSET", "", "f", "v"},
                                                                     {"RPUSH", "", "a"},
                                                                     {"SADD", "", "a"},
                                                                     {"XADD", "", "*", "f", "v"}};
      std::vector<std::string> command =
          kWriters[static_cast<size_t>(pick(static_cast<int64_t>(kWriters.size())))];
      command[1] = id.key;
      conn.Command({"DEL", id.key, id.key + "w", id.key + "x"});
      conn.Command(command);
      conn.Command({"PEXPIRE", id.key, "600000"});
      id.twin = LeaseSetState{};
      ++seen["foreign value"];
    }
    if (args.op == LeaseOp::kAcquire || args.op == LeaseOp::kHeartbeat ||
        args.op == LeaseOp::kWait) {
      longest_ttl = std::max(longest_ttl, args.ttl_ms);
    }
    const std::map<std::string, internal::LeaseTicket> tickets_before = id.twin.tickets;
    const bool present = id.twin.members.count(args.token) > 0;
    const std::map<std::string, int64_t> before = id.twin.members;
    const LeaseReply want = LeaseStep(id.twin, args, now);
    if ((args.op == LeaseOp::kAcquire || args.op == LeaseOp::kWait) && want.code == 1) {
      id.members.push_back(LeaseMember(now, args.token));
    }

    LeaseReply got;
    std::string error;
    RedisValue raw;
    if (args.op == LeaseOp::kRelease) {
      raw = conn.Command({"ZREM", id.key, args.token});
      if (raw.type == RedisValue::Type::kInteger) {
        // RedisStore answers {1} for any ZREM reply; the twin says so with its time.
        got = {.code = 1, .count = 0, .now_ms = now, .expires_at_ms = 0};
      } else {
        error = "ZREM: " + ShowReply(raw);
      }
    } else if (!Parse(args.op, raw = Eval(conn, id.key, args.op, std::to_string(now), args), got,
                      error)) {
      error = "EVAL: " + error;
    }
    static const char* const kOpNames[] = {"acquire", "heartbeat", "release", "release all",
                                           "list",    "audit",     "wait",    "leave"};
    const std::string where =
        "seed " + std::to_string(config.seed) + " step " + std::to_string(step) + ": " +
        kOpNames[static_cast<int>(args.op)] + " key " + id.key + " now " + std::to_string(now) +
        " (" + time_kind + ") token/member \"" + Printable(args.token) + "\"" +
        (target_kind.empty() ? "" : " (" + target_kind + ")") + " limit " +
        std::to_string(args.limit) + " ttl " + std::to_string(args.ttl_ms) + " ticket ttl " +
        std::to_string(args.ticket_ttl_ms) + " max waiters " + std::to_string(args.max_waiters) +
        "\n  set before: " + Show(before) + "\n  queue before: " + Show(tickets_before) +
        "\n  redis raw:  " + ShowReply(raw) + "\n  redis:      " + Show(got) +
        "\n  twin:       " + Show(want);
    ASSERT_TRUE(error.empty()) << where << "\n  " << error;
    ASSERT_EQ(Show(got), Show(want)) << where;
    if (args.op == LeaseOp::kRelease) {
      ASSERT_EQ(raw.integer, present ? 1 : 0) << where;
    }

    // The stored set is the twin's, and the key's expiry covers its latest lease.
    const std::map<std::string, int64_t> stored = Stored(conn, id.key);
    ASSERT_EQ(Show(stored), Show(id.twin.members)) << where;
    const long long pttl = conn.Command({"PTTL", id.key}).integer;
    if (id.twin.members.empty()) {
      ASSERT_EQ(pttl, -2) << where << "\n  an empty set is no key";
    } else {
      const int64_t elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
                                  std::chrono::steady_clock::now() - start)
                                  .count();
      const int64_t need = id.twin.LeaseMaxExpiry() - now + kGraceMs;
      ASSERT_GT(pttl, 0) << where << "\n  the key has no expiry";
      ASSERT_GE(pttl + elapsed + 5, need) << where << "\n  the key expires before its latest lease";
      ASSERT_LE(pttl, longest_ttl + 2 + kGraceMs) << where << "\n  an expiry past every lease";
    }
    // The queue: arrivals in one set, ticket expiries in the other, both expiring no
    // sooner than the latest ticket and no later than the longest ticket ttl.
    if (tickets_before.empty() && id.twin.tickets.empty()) {
      // No queue before nor after: none in Redis either (one command instead of four).
      ASSERT_EQ(conn.Command({"EXISTS", id.key + "w", id.key + "x"}).integer, 0) << where;
    }
    std::map<std::string, int64_t> want_order, want_expiry;
    for (const auto& [t, ticket] : id.twin.tickets) {
      want_order[t] = ticket.arrival;
      want_expiry[t] = ticket.expires_at_ms;
    }
    if (!tickets_before.empty() || !id.twin.tickets.empty()) {
      ASSERT_EQ(Show(Stored(conn, id.key + "w")), Show(want_order)) << where;
      ASSERT_EQ(Show(Stored(conn, id.key + "x")), Show(want_expiry)) << where;
    }
    for (const std::string& queue_key : {id.key + "w", id.key + "x"}) {
      if (tickets_before.empty() && id.twin.tickets.empty()) break;
      const long long queue_pttl = conn.Command({"PTTL", queue_key}).integer;
      if (id.twin.tickets.empty()) {
        ASSERT_EQ(queue_pttl, -2) << where << "\n  an empty queue is no key";
        continue;
      }
      const int64_t elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
                                  std::chrono::steady_clock::now() - start)
                                  .count();
      const int64_t need = id.twin.queue_expires_at_ms - now + kGraceMs;
      ASSERT_GT(queue_pttl, 0) << where << "\n  " << queue_key << " has no expiry";
      ASSERT_GE(queue_pttl + elapsed + 5, need) << where << "\n  the queue expires too soon";
      ASSERT_LE(queue_pttl, longest_ticket_ttl + 2 + kGraceMs)
          << where << "\n  an expiry past every ticket";
    }

    // What the step reached.
    switch (args.op) {
      case LeaseOp::kAcquire: ++seen[want.code == 1 ? "acquire granted" : "acquire refused"]; break;
      case LeaseOp::kHeartbeat:
        ++seen["heartbeat " + target_kind + (want.code == 1 ? " live" : " gone")];
        if (want.code == 1) {
          ++seen[want.expires_at_ms > before.at(args.token) ? "heartbeat moved" : "heartbeat kept"];
        }
        break;
      case LeaseOp::kRelease: ++seen["release " + target_kind]; break;
      case LeaseOp::kList: ++seen[want.rows.empty() ? "list empty" : "list rows"]; break;
      case LeaseOp::kReleaseAll:
        ++seen[want.count > 0 ? "release all live" : "release all none"];
        break;
      case LeaseOp::kWait: {
        static const char* const kWaitOutcomes[] = {"?", "granted", "waiting", "queue full"};
        ++seen["wait " + target_kind + " " + kWaitOutcomes[want.code]];
        break;
      }
      case LeaseOp::kLeave: ++seen["leave " + target_kind]; break;
    }
    if (args.op == LeaseOp::kAcquire && want.code == 0 && want.count < args.limit) {
      ++seen["acquire refused for waiters"];
    }
    for (const auto& [t, ticket] : tickets_before) {
      if (ticket.expires_at_ms <= now && id.twin.tickets.count(t) == 0) ++seen["ticket expired"];
    }
    if (args.op == LeaseOp::kAcquire &&
        before.size() > id.twin.members.size() - static_cast<size_t>(want.code)) {
      ++seen["acquire pruned"];
    }
  }

  std::cout << "  reached:";
  for (const auto& [what, n] : seen) std::cout << " [" << what << "]=" << n;
  std::cout << "\n";
  // The trace must have reached every outcome and boundary, not just run.
  for (const char* what : {"acquire granted",
                           "acquire refused",
                           "acquire pruned",
                           "heartbeat live live",
                           "heartbeat expired gone",
                           "heartbeat gone gone",
                           "heartbeat unknown gone",
                           "heartbeat moved",
                           "heartbeat kept",
                           "release live",
                           "release expired",
                           "release gone",
                           "release unknown",
                           "list rows",
                           "list empty",
                           "release all live",
                           "release all none",
                           "time: at expiry",
                           "time: 1 ms before expiry",
                           "foreign value"}) {
    if (config.queues) break;
    EXPECT_GT(seen[what], 0) << "seed " << config.seed << " never reached: " << what;
  }
  for (const char* what :
       {"wait new granted", "wait new waiting", "wait new queue full", "wait ticket granted",
        "wait ticket waiting", "wait no ticket waiting", "leave ticket", "acquire granted",
        "acquire refused for waiters", "ticket expired"}) {
    if (!config.queues) break;
    EXPECT_GT(seen[what], 0) << "seed " << config.seed << " never reached: " << what;
  }
  if (!config.queues) {
    EXPECT_GT(seen["time: at expiry"] + seen["time: 1 ms before expiry"], config.steps / 20);
  }
  EXPECT_EQ(server.KeysWithoutTtl(prefix + ":*"), std::vector<std::string>{});
}

TEST(ConcurrencyDifferential, RandomTraces) {
  testing::RedisServer server;
  for (uint32_t seed : {20261201u, 2u, 33u, 404u}) {
    RunLeaseTrace(server, {.seed = seed, .steps = 4000, .ids = 4 + static_cast<int>(seed % 3)});
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(ConcurrencyDifferential, WaitersQueueInArrivalOrderAndTheirTicketsExpire) {
  testing::RedisServer server;
  for (uint32_t seed : {5u, 2026u}) {
    RunLeaseTrace(server,
                  {.seed = seed, .steps = 1500, .ids = 2, .max_ttl_ms = 300, .queues = true});
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(ConcurrencyDifferential, ShortTtlsCrossExpiriesOften) {
  testing::RedisServer server;
  for (uint32_t seed : {7u, 77u}) {
    RunLeaseTrace(server, {.seed = seed, .steps = 3000, .ids = 4, .max_ttl_ms = 40});
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// ---------------------------------------------------------------------------------------
// Expiry repair and foreign values

struct Direct {
  Connection& conn;
  std::string key;
  LeaseReply Call(LeaseOp op, int64_t now, const std::string& token, int64_t limit, int64_t ttl) {
    const LeaseArgs args{.op = op, .token = token, .limit = limit, .ttl_ms = ttl};
    LeaseReply reply;
    std::string error;
    const RedisValue raw = Eval(conn, key, op, std::to_string(now), args);
    EXPECT_TRUE(Parse(op, raw, reply, error)) << error;
    return reply;
  }
  long long Pttl() { return conn.Command({"PTTL", key}).integer; }
  void Persist() {
    conn.Command({"PERSIST", key});
    ASSERT_EQ(Pttl(), -1);
  }
};

// PTTL is `want` ms, less the real time a few commands take.
#define EXPECT_PTTL_NEAR(d, want)       \
  do {                                  \
    const long long pttl_ = (d).Pttl(); \
    EXPECT_LE(pttl_, (want));           \
    EXPECT_GT(pttl_, (want)-1000);      \
  } while (0)

TEST(ConcurrencyDifferential, AKeyThatLostItsTtlGetsOneAtItsLatestScore) {
  testing::RedisServer server;
  Connection conn(server);
  ASSERT_TRUE(conn.ok());
  Direct d{conn, "persist:{c:x}:cc"};
  const int64_t t = 1'700'000'000'000;
  ASSERT_EQ(d.Call(LeaseOp::kAcquire, t, "a", 3, 1000).code, 1);
  ASSERT_EQ(d.Call(LeaseOp::kAcquire, t, "b", 3, 3000).code, 1);
  EXPECT_PTTL_NEAR(d, 3000 + kGraceMs);

  // A granted acquire whose expiry is below the latest: PEXPIRE GT refuses on a key
  // without expiry; the script restores it at the latest score (b's).
  d.Persist();
  EXPECT_EQ(Show(d.Call(LeaseOp::kAcquire, t + 10, "c", 3, 500)),
            Show({.code = 1, .count = 3, .now_ms = t + 10, .expires_at_ms = t + 510}));
  EXPECT_PTTL_NEAR(d, t + 3000 - (t + 10) + kGraceMs);

  // A refused acquire.
  d.Persist();
  EXPECT_EQ(Show(d.Call(LeaseOp::kAcquire, t + 20, "d", 3, 500)),
            Show({.code = 0, .count = 3, .now_ms = t + 20, .expires_at_ms = t + 510}));
  EXPECT_PTTL_NEAR(d, t + 3000 - (t + 20) + kGraceMs);

  // A heartbeat that moves b's expiry forward: the expiry follows it.
  d.Persist();
  const std::string b = LeaseMember(t, "b");
  EXPECT_EQ(Show(d.Call(LeaseOp::kHeartbeat, t + 30, b, 0, 5000)),
            Show({.code = 1, .count = 0, .now_ms = t + 30, .expires_at_ms = t + 5030}));
  EXPECT_PTTL_NEAR(d, 5000 + kGraceMs);

  // A heartbeat that keeps a's expiry (shorter ttl): restored at the latest score.
  d.Persist();
  const std::string a = LeaseMember(t, "a");
  EXPECT_EQ(Show(d.Call(LeaseOp::kHeartbeat, t + 40, a, 0, 10)),
            Show({.code = 1, .count = 0, .now_ms = t + 40, .expires_at_ms = t + 1000}));
  EXPECT_PTTL_NEAR(d, t + 5030 - (t + 40) + kGraceMs);

  // A list with live leases.
  d.Persist();
  const LeaseReply listed = d.Call(LeaseOp::kList, t + 50, "", 0, 0);
  EXPECT_EQ(listed.rows.size(), 3u);
  EXPECT_PTTL_NEAR(d, t + 5030 - (t + 50) + kGraceMs);

  // A granted acquire whose expiry is the latest.
  d.Persist();
  ASSERT_EQ(d.Call(LeaseOp::kAcquire, t + 60, "e", 9, 8000).code, 1);
  EXPECT_PTTL_NEAR(d, 8000 + kGraceMs);
  EXPECT_EQ(server.KeysWithoutTtl("persist:*"), std::vector<std::string>{});
}

// Rule 1 of docs/design.md: "any script that touches a key that lost its expiry gives it one
// back". Heartbeats that answer gone (an unknown member, or an expired one the script
// removes with ZREM) and lists with no live lease return before restore_ttl, so the key
// keeps no expiry. Disabled until concurrency.lua restores the expiry on those paths too.
TEST(ConcurrencyDifferential, GoneHeartbeatsAndEmptyListsRestoreALostTtl) {
  testing::RedisServer server;
  Connection conn(server);
  ASSERT_TRUE(conn.ok());
  Direct d{conn, "gone:{c:x}:cc"};
  const int64_t t = 1'700'000'000'000;
  ASSERT_EQ(d.Call(LeaseOp::kAcquire, t, "a", 3, 100).code, 1);
  ASSERT_EQ(d.Call(LeaseOp::kAcquire, t, "b", 3, 1000).code, 1);
  d.Persist();
  EXPECT_EQ(d.Call(LeaseOp::kHeartbeat, t + 10, "1:unknown", 0, 100).code, 0);
  EXPECT_GT(d.Pttl(), 0) << "heartbeat of an unknown member";
  d.Persist();
  EXPECT_EQ(d.Call(LeaseOp::kHeartbeat, t + 100, LeaseMember(t, "a"), 0, 100).code, 0);
  EXPECT_GT(d.Pttl(), 0) << "heartbeat of an expired member (removed by the script)";
  d.Persist();
  EXPECT_TRUE(d.Call(LeaseOp::kList, t + 1000, "", 0, 0).rows.empty());
  EXPECT_GT(d.Pttl(), 0) << "list with no live lease (b expired, not pruned)";
}

TEST(ConcurrencyDifferential, AcquireReplacesAValueOfAnotherType) {
  testing::RedisServer server;
  Connection conn(server);
  ASSERT_TRUE(conn.ok());
  const int64_t t = 1'700'000'000'000;
  int n = 0;
  for (const std::vector<std::string>& seed : {std::vector<std::string>{"SET", "", "junk"},
                                               {"SET", "", "junk", "PX", "100000000"},
                                               {"RPUSH", "", "x", "y"},
                                               {"HSET", "", "f", "v"},
                                               {"SADD", "", "m"},
                                               {"XADD", "", "*", "f", "v"}}) {
    const std::string key = "wrongtype" + std::to_string(n++) + ":{c:x}:cc";
    std::vector<std::string> cmd = seed;
    cmd[1] = key;
    ASSERT_NE(conn.Command(cmd).type, RedisValue::Type::kError) << seed[0];
    SCOPED_TRACE(seed[0] + " " + key);
    Direct d{conn, key};
    LeaseSetState twin;  // the twin sees no lease set at the key
    const LeaseReply want =
        LeaseStep(twin, {.op = LeaseOp::kAcquire, .token = "tok", .limit = 2, .ttl_ms = 700}, t);
    const LeaseReply got = d.Call(LeaseOp::kAcquire, t, "tok", 2, 700);
    EXPECT_EQ(Show(got), Show(want));
    EXPECT_EQ(Show(got), Show({.code = 1, .count = 1, .now_ms = t, .expires_at_ms = t + 700}));
    EXPECT_EQ(conn.Command({"TYPE", key}).str, "zset");
    EXPECT_EQ(Show(Stored(conn, key)), Show(twin.members));
    EXPECT_PTTL_NEAR(d, 700 + kGraceMs);
    // And it is a working lease set from then on.
    EXPECT_EQ(d.Call(LeaseOp::kAcquire, t + 1, "tok2", 2, 700).count, 2);
    EXPECT_EQ(d.Call(LeaseOp::kAcquire, t + 2, "tok3", 2, 700).code, 0);
  }
  EXPECT_EQ(server.KeysWithoutTtl("wrongtype*"), std::vector<std::string>{});
}

TEST(ConcurrencyDifferential, TheRedisClockHasNoGrace) {
  testing::RedisServer server;
  Connection conn(server);
  ASSERT_TRUE(conn.ok());
  const std::string key = "clock:{c:x}:cc";
  const RedisValue time = conn.Command({"TIME"});
  ASSERT_EQ(time.elements.size(), 2u);
  const int64_t before =
      std::stoll(time.elements[0].str) * 1000 + std::stoll(time.elements[1].str) / 1000;
  LeaseReply got;
  std::string error;
  const LeaseArgs args{.op = LeaseOp::kAcquire, .token = "tok", .limit = 1, .ttl_ms = 30'000};
  ASSERT_TRUE(Parse(LeaseOp::kAcquire, Eval(conn, key, LeaseOp::kAcquire, "", args), got, error))
      << error;
  EXPECT_EQ(got.code, 1);
  EXPECT_GE(got.now_ms, before);
  EXPECT_LT(got.now_ms, before + 1000);
  EXPECT_EQ(got.expires_at_ms, got.now_ms + 30'000);
  const long long pttl = conn.Command({"PTTL", key}).integer;
  EXPECT_LE(pttl, 30'000);
  EXPECT_GT(pttl, 29'000);
  EXPECT_EQ(
      Show(Stored(conn, key)),
      Show(std::map<std::string, int64_t>{{LeaseMember(got.now_ms, "tok"), got.now_ms + 30'000}}));
}

#undef EXPECT_PTTL_NEAR

}  // namespace
}  // namespace sluice
