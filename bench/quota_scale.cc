// Quota shares at fleet scale (bench/rlqs_scale.sh; docs/benchmarks.md, docs/rlqs.md).
//
// quota_scale cost <port> <script file> <keys> <clients> [calls]
//   Redis's CPU per quota call: the script (the text of a build's quota_shares.lua, clock
//   in front; <keys> 1 for the hash-only format, 2 for hash + expiry index) on one bucket
//   of <clients> clients, each recorded once, then [calls] renewals spread over them
//   (default max(5000, 2 x clients)), pipelined on one hiredis connection. Prints one JSON
//   line with INFO commandstats' usec_per_call of EVALSHA over the renewals, and the
//   clients the bucket recorded.
//
// quota_scale fleet <port> [clients=10000] [seconds=70] [rate=10000] [wave=1000]
//                   [interval_ms=5000] [instances=3] [deadline_ms=5]
//   A fleet of simulated clients on one bucket through the library (sluice::QuotaShares),
//   as sluiced calls it: <instances> sluice::Client on one Redis (three sluiced), each
//   client on one of them. Each client subscribes (a demand of one request a second) at a
//   moment spread over the first interval, then reports its demand every interval; the
//   demands are skewed (1 to 10 parts) and sum to twice the rate. At 40 s, <wave> new
//   clients subscribe within one second and then report the mean demand. Grants are held
//   2 intervals + 1 s (sluiced's TTL + 1 s). Prints one JSON line: calls, failed calls
//   (what sluiced would answer with the failure policy), refused (full), the highest sum of
//   recorded grants any reply reported, calls granted 0 (in the first interval, the second,
//   then until the wave, then from it), the highest sum of the grants the clients
//   held (sampled each second), the settled sum (mean of the samples from 30 s to the wave, percent
//   of the rate), the wave's calls and failures, how many of the wave were granted a share at their
//   first call, the longest time a wave client waited for a share, the wave's first grants (least,
//   median), the longest time a wave client waited for half its settled share (S * d / D), call
//   latency percentiles, and EVALSHA's usec_per_call over the run.
#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <queue>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "sluice/client.h"
#include "sluice/quota.h"

namespace {

using Clock = std::chrono::steady_clock;

std::string ClientId(int i) {
  char id[40];
  std::snprintf(id, sizeof id, "%016x%016x", 0x5eed0000 + i, i * 2654435761u);
  return id;
}

redisContext* Connect(int port) {
  redisContext* c = redisConnect("127.0.0.1", port);
  if (c == nullptr || c->err) {
    std::fprintf(stderr, "cannot connect to 127.0.0.1:%d\n", port);
    std::exit(2);
  }
  return c;
}

std::string Command(redisContext* c, const std::vector<std::string>& argv) {
  std::vector<const char*> args;
  std::vector<size_t> lens;
  for (const auto& a : argv) {
    args.push_back(a.data());
    lens.push_back(a.size());
  }
  auto* r = static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(args.size()), args.data(), lens.data()));
  if (r == nullptr) {
    std::fprintf(stderr, "redis: %s\n", c->errstr);
    std::exit(2);
  }
  std::string out = r->str ? std::string(r->str, r->len) : std::to_string(r->integer);
  freeReplyObject(r);
  return out;
}

double EvalshaUsecPerCall(redisContext* c) {
  const std::string info = Command(c, {"INFO", "commandstats"});
  const auto at = info.find("cmdstat_evalsha:");
  if (at == std::string::npos) return -1;
  const auto u = info.find("usec_per_call=", at);
  return std::atof(info.c_str() + u + 14);
}

int Cost(int port, const std::string& file, int keys, int clients, int calls) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  redisContext* c = Connect(port);
  Command(c, {"FLUSHALL"});
  const std::string sha = Command(c, {"SCRIPT", "LOAD", text.str()});
  const std::string key = "bench:{rlqs:route/checkout}:qs";
  const std::string index = "bench:{rlqs:route/checkout}:qx";
  const int64_t rate = int64_t{clients} * 1000;  // demand 5.5x the rate: contended
  auto send = [&](int i) {
    std::vector<std::string> argv = {"EVALSHA", sha, std::to_string(keys), key};
    if (keys == 2) argv.push_back(index);
    const std::string demand = std::to_string(1000 * (1 + i % 10));
    for (const std::string& a : {std::string("0"), std::string(""), ClientId(i), demand,
                                 std::to_string(rate), std::string("60000"), std::string("200")})
      argv.push_back(a);
    if (keys == 2) argv.push_back(std::to_string(int64_t{32} << 20));
    std::vector<const char*> args;
    std::vector<size_t> lens;
    for (const auto& a : argv) {
      args.push_back(a.data());
      lens.push_back(a.size());
    }
    redisAppendCommandArgv(c, static_cast<int>(args.size()), args.data(), lens.data());
  };
  auto run = [&](int from, int count) {
    for (int done = 0; done < count;) {
      const int batch = std::min(100, count - done);
      for (int k = 0; k < batch; ++k) send((from + done + k) % clients);
      for (int k = 0; k < batch; ++k) {
        void* r = nullptr;
        if (redisGetReply(c, &r) != REDIS_OK) std::exit(2);
        auto* reply = static_cast<redisReply*>(r);
        if (reply->type == REDIS_REPLY_ERROR) {
          std::fprintf(stderr, "script error: %s\n", reply->str);
          std::exit(2);
        }
        freeReplyObject(reply);
      }
      done += batch;
    }
  };
  run(0, clients);
  Command(c, {"CONFIG", "RESETSTAT"});
  run(0, calls);
  const double usec = EvalshaUsecPerCall(c);
  const std::string recorded = Command(c, {"EVAL", "return redis.call('HLEN', KEYS[1])", "1", key});
  std::printf("{\"clients\":%d,\"recorded\":%lld,\"calls\":%d,\"usec_per_call\":%.2f}\n", clients,
              std::atoll(recorded.c_str()) - (keys == 2 ? 1 : 0), calls, usec);
  redisFree(c);
  return 0;
}

struct Sim {
  std::string id;
  int64_t demand_milli = 0;
  bool wave = false;
  bool subscribed = false;
  int64_t joined_ms = 0;
  int64_t first_share_ms = -1;     // when it first held a grant above 0
  int64_t first_grant_milli = -1;  // its first call's grant
  int64_t half_share_ms = -1;      // when it first held half its share of the settled split
  int64_t grant_milli = 0;
  int64_t held_until_ms = 0;  // the call's start + hold
};

int Fleet(int port, int clients, int seconds, int64_t rate, int wave, int interval_ms,
          int instances, int deadline_ms) {
  redisContext* admin = Connect(port);
  Command(admin, {"FLUSHALL"});
  std::vector<std::shared_ptr<sluice::Client>> fleet;
  std::vector<sluice::QuotaShares> shares;
  for (int i = 0; i < instances; ++i) {
    auto c = sluice::Client::Create({.url = "redis://127.0.0.1:" + std::to_string(port),
                                     .deadline = std::chrono::milliseconds(deadline_ms)});
    if (!c.ok()) {
      std::fprintf(stderr, "%s\n", c.status().ToString().c_str());
      return 2;
    }
    fleet.push_back(*c);
    shares.push_back(*fleet.back()->MakeQuotaShares("rlqs"));
  }
  const int64_t rate_milli = rate * 1000;
  const int64_t hold_ms = 2 * interval_ms + 1000;
  const int64_t wave_at_ms = 40'000;
  // Half a wave client's share once settled: S * d / D, S the rate less the reserve.
  const double settled_share =
      static_cast<double>(rate_milli - rate_milli / 64) * (2.0 * rate_milli / clients) /
      (2.0 * rate_milli + static_cast<double>(wave) * (2.0 * rate_milli / clients));
  std::vector<Sim> sims(static_cast<size_t>(clients + wave));
  // Skewed demands, 1 to 10 parts, summing to twice the rate.
  int64_t parts = 0;
  for (int i = 0; i < clients; ++i) parts += 1 + i % 10;
  for (int i = 0; i < clients + wave; ++i) {
    Sim& s = sims[static_cast<size_t>(i)];
    s.id = ClientId(i);
    s.wave = i >= clients;
    s.demand_milli = s.wave ? 2 * rate_milli / clients : 2 * rate_milli * (1 + i % 10) / parts;
  }
  // Due calls: (when, client).
  using Due = std::pair<int64_t, int>;
  std::priority_queue<Due, std::vector<Due>, std::greater<>> due;
  for (int i = 0; i < clients; ++i) due.push({int64_t{i} * interval_ms / clients, i});
  for (int i = 0; i < wave; ++i) due.push({wave_at_ms + int64_t{i} * 1000 / wave, clients + i});

  std::mutex mu;
  // Calls granted 0: in the first interval, the second, then until the wave, from it.
  int64_t zero[4] = {0, 0, 0, 0};
  int64_t calls = 0, failed = 0, refused = 0, most_recorded = 0, wave_calls = 0, wave_failed = 0,
          wave_first_share = 0;
  std::vector<int64_t> latency_us;
  std::atomic<int64_t> in_flight{0};
  const auto start = Clock::now();
  auto now_ms = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  };
  Command(admin, {"CONFIG", "RESETSTAT"});
  int64_t most_held = 0;
  std::vector<int64_t> settled;
  int64_t next_sample = 1000;
  const int64_t end_ms = int64_t{seconds} * 1000;
  while (true) {
    const int64_t t = now_ms();
    if (t >= end_ms) break;
    while (!due.empty() && due.top().first <= t) {
      const auto [when, i] = due.top();
      due.pop();
      Sim& s = sims[static_cast<size_t>(i)];
      sluice::QuotaShareRequest r{.id = "route/checkout",
                                  .client = s.id,
                                  .demand_milli = s.subscribed ? s.demand_milli : 1000,
                                  .rate_milli = rate_milli,
                                  .hold = std::chrono::milliseconds(hold_ms)};
      const bool first = !s.subscribed;
      if (first) s.joined_ms = when;
      s.subscribed = true;
      const int64_t sent = now_ms();
      const auto sent_at = Clock::now();
      in_flight.fetch_add(1);
      shares[static_cast<size_t>(i % instances)].Assign(r, [&, i, first, sent,
                                                            sent_at](sluice::StatusOr<
                                                                     sluice::QuotaShareGrant>
                                                                         g) {
        const auto us =
            std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - sent_at).count();
        std::lock_guard lock(mu);
        Sim& sim = sims[static_cast<size_t>(i)];
        ++calls;
        if (sim.wave) ++wave_calls;
        latency_us.push_back(us);
        if (!g.ok()) {
          ++failed;
          if (sim.wave) ++wave_failed;
        } else {
          if (g->full) ++refused;
          if (g->grant_milli == 0) {
            ++zero[sent < interval_ms ? 0 : sent < 2 * interval_ms ? 1 : sent < wave_at_ms ? 2 : 3];
          }
          most_recorded = std::max(most_recorded, g->assigned_milli);
          sim.grant_milli = g->grant_milli;
          if (first) sim.first_grant_milli = g->grant_milli;
          if (sim.half_share_ms < 0 && static_cast<double>(g->grant_milli) >= settled_share / 2) {
            sim.half_share_ms = sent;
          }
          sim.held_until_ms = sent + hold_ms;
          if (g->grant_milli > 0 && sim.first_share_ms < 0) {
            sim.first_share_ms = sent;
            if (sim.wave && first) ++wave_first_share;
          }
        }
        in_flight.fetch_sub(1);
      });
      due.push({when + interval_ms, i});
    }
    if (t >= next_sample) {
      next_sample += 1000;
      std::lock_guard lock(mu);
      int64_t held = 0;
      for (const Sim& s : sims)
        if (s.held_until_ms > t) held += s.grant_milli;
      most_held = std::max(most_held, held);
      if (t >= 30'000 && t < wave_at_ms) settled.push_back(held);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  while (in_flight.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const double usec = EvalshaUsecPerCall(admin);
  std::lock_guard lock(mu);
  int64_t wave_wait = 0, wave_without = 0, wave_half_wait = 0, wave_without_half = 0;
  std::vector<int64_t> wave_first;
  for (const Sim& s : sims) {
    if (!s.wave) continue;
    wave_first.push_back(s.first_grant_milli);
    if (s.half_share_ms < 0) {
      ++wave_without_half;
    } else {
      wave_half_wait = std::max(wave_half_wait, s.half_share_ms - s.joined_ms);
    }
    if (s.first_share_ms < 0) {
      ++wave_without;
    } else {
      wave_wait = std::max(wave_wait, s.first_share_ms - s.joined_ms);
    }
  }
  double settled_mean = 0;
  for (int64_t v : settled) settled_mean += static_cast<double>(v);
  if (!settled.empty()) settled_mean /= static_cast<double>(settled.size());
  std::sort(latency_us.begin(), latency_us.end());
  std::sort(wave_first.begin(), wave_first.end());
  auto pct = [&](double p) {
    return latency_us.empty()
               ? 0
               : latency_us[std::min(
                     latency_us.size() - 1,
                     static_cast<size_t>(p * static_cast<double>(latency_us.size())))];
  };
  std::printf(
      "{\"clients\":%d,\"instances\":%d,\"rate\":%lld,\"calls\":%lld,\"failed\":%lld,"
      "\"refused\":%lld,\"granted_0\":[%lld,%lld,%lld,%lld],\"most_recorded_pct\":%.2f,\"most_held_"
      "pct\":%.2f,"
      "\"settled_pct\":%.2f,\"wave\":%d,\"wave_calls\":%lld,\"wave_failed\":%lld,"
      "\"wave_share_at_first_call\":%lld,\"wave_without_share\":%lld,"
      "\"wave_longest_wait_ms\":%lld,\"wave_first_grant_milli_min\":%lld,"
      "\"wave_first_grant_milli_p50\":%lld,\"wave_half_share_longest_wait_ms\":%lld,"
      "\"wave_without_half_share\":%lld,\"p50_us\":%lld,\"p99_us\":%lld,\"max_us\":%lld,"
      "\"usec_per_call\":%.2f}\n",
      clients, instances, static_cast<long long>(rate), static_cast<long long>(calls),
      static_cast<long long>(failed), static_cast<long long>(refused),
      static_cast<long long>(zero[0]), static_cast<long long>(zero[1]),
      static_cast<long long>(zero[2]), static_cast<long long>(zero[3]),
      100.0 * static_cast<double>(most_recorded) / static_cast<double>(rate_milli),
      100.0 * static_cast<double>(most_held) / static_cast<double>(rate_milli),
      100.0 * settled_mean / static_cast<double>(rate_milli), wave,
      static_cast<long long>(wave_calls), static_cast<long long>(wave_failed),
      static_cast<long long>(wave_first_share), static_cast<long long>(wave_without),
      static_cast<long long>(wave_wait),
      static_cast<long long>(wave_first.empty() ? -1 : wave_first.front()),
      static_cast<long long>(wave_first.empty() ? -1 : wave_first[wave_first.size() / 2]),
      static_cast<long long>(wave_half_wait), static_cast<long long>(wave_without_half),
      static_cast<long long>(pct(0.5)), static_cast<long long>(pct(0.99)),
      static_cast<long long>(latency_us.empty() ? 0 : latency_us.back()), usec);
  redisFree(admin);
  return 0;
}

int Arg(int argc, char** argv, int i, int fallback) {
  return argc > i ? std::atoi(argv[i]) : fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "cost" && argc >= 6) {
    const int clients = std::atoi(argv[5]);
    return Cost(std::atoi(argv[2]), argv[3], std::atoi(argv[4]), clients,
                Arg(argc, argv, 6, std::max(5000, 2 * clients)));
  }
  if (mode == "fleet" && argc >= 3) {
    return Fleet(std::atoi(argv[2]), Arg(argc, argv, 3, 10'000), Arg(argc, argv, 4, 70),
                 Arg(argc, argv, 5, 10'000), Arg(argc, argv, 6, 1000), Arg(argc, argv, 7, 5000),
                 Arg(argc, argv, 8, 3), Arg(argc, argv, 9, 5));
  }
  std::fprintf(stderr,
               "usage: quota_scale cost <port> <script file> <keys 1|2> <clients> [calls]\n"
               "       quota_scale fleet <port> [clients] [seconds] [rate] [wave] [interval_ms]"
               " [instances] [deadline_ms]\n");
  return 2;
}
