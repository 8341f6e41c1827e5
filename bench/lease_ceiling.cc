// The ceiling of acquire + release cycles on one Redis, like for like: what an ideal
// client gets from the same concurrency script and the same ZREM. T threads, each with
// its own hiredis connection, run pipelined rounds: a batch of B acquires (EVALSHA over
// distinct ids), then, for each granted lease, its release (ZREM of the member the
// script's reply names) in one batch. No deadlines, no callbacks, no lease objects:
// only Redis's cost and the round trips are left, so sluice's cycles/s divided by this
// is how much of Redis's capacity sluice's client leaves on the table.
//
// Usage: lease_ceiling <port> <sha of concurrency.lua> [seconds=5] [threads=4] [batch=64]
//                      [ids=10000]
// Prints one JSON line: cycles_per_s, acquires_refused, errors.
#include <hiredis/hiredis.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Totals {
  std::atomic<uint64_t> cycles{0}, refused{0}, errors{0};
};

void Worker(int port, const std::string& sha, int thread, int batch, int ids,
            std::chrono::steady_clock::time_point until, Totals& totals) {
  redisContext* c = redisConnect("127.0.0.1", port);
  if (c == nullptr || c->err) {
    totals.errors.fetch_add(1);
    return;
  }
  uint64_t next = static_cast<uint64_t>(thread) * 7919;
  std::vector<std::string> keys(static_cast<size_t>(batch));
  std::vector<std::string> members;
  char token[32];
  while (std::chrono::steady_clock::now() < until) {
    for (int i = 0; i < batch; ++i) {
      keys[static_cast<size_t>(i)] =
          "sluicebench:{bench:user:" + std::to_string(next++ % static_cast<uint64_t>(ids)) + "}:cc";
      std::snprintf(token, sizeof token, "t%d-%llu", thread, static_cast<unsigned long long>(next));
      redisAppendCommand(c, "EVALSHA %s 1 %s 0 %s %s 1000000000 120000", sha.c_str(),
                         keys[static_cast<size_t>(i)].c_str(), "", token);
    }
    members.clear();
    std::vector<size_t> owners;
    for (int i = 0; i < batch; ++i) {
      void* r = nullptr;
      if (redisGetReply(c, &r) != REDIS_OK || r == nullptr) {
        totals.errors.fetch_add(1);
        redisFree(c);
        return;
      }
      auto* reply = static_cast<redisReply*>(r);
      if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 4 &&
          reply->element[0]->integer == 1) {
        // The member is "<now>:<token>"; the token is what this loop sent.
        std::snprintf(token, sizeof token, "t%d-%llu", thread,
                      static_cast<unsigned long long>(next - static_cast<uint64_t>(batch) +
                                                      static_cast<uint64_t>(i) + 1));
        members.push_back(std::to_string(reply->element[2]->integer) + ":" + token);
        owners.push_back(static_cast<size_t>(i));
      } else if (reply->type == REDIS_REPLY_ARRAY) {
        totals.refused.fetch_add(1);
      } else {
        totals.errors.fetch_add(1);
      }
      freeReplyObject(reply);
    }
    for (size_t m = 0; m < members.size(); ++m) {
      redisAppendCommand(c, "ZREM %s %s", keys[owners[m]].c_str(), members[m].c_str());
    }
    for (size_t m = 0; m < members.size(); ++m) {
      void* r = nullptr;
      if (redisGetReply(c, &r) != REDIS_OK || r == nullptr) {
        totals.errors.fetch_add(1);
        redisFree(c);
        return;
      }
      if (static_cast<redisReply*>(r)->type != REDIS_REPLY_INTEGER ||
          static_cast<redisReply*>(r)->integer != 1) {
        totals.errors.fetch_add(1);  // the release must find its lease
      }
      freeReplyObject(r);
    }
    totals.cycles.fetch_add(static_cast<uint64_t>(batch));
  }
  redisFree(c);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: lease_ceiling <port> <sha> [seconds] [threads] [batch] [ids]\n");
    return 2;
  }
  const int port = std::atoi(argv[1]);
  const std::string sha = argv[2];
  const double seconds = argc > 3 ? std::atof(argv[3]) : 5;
  const int threads = argc > 4 ? std::atoi(argv[4]) : 4;
  const int batch = argc > 5 ? std::atoi(argv[5]) : 64;
  const int ids = argc > 6 ? std::atoi(argv[6]) : 10000;
  if (port <= 0 || seconds <= 0 || threads < 1 || batch < 1 || ids < threads * batch) {
    std::fprintf(stderr, "lease_ceiling: bad arguments (ids must be >= threads * batch)\n");
    return 2;
  }
  Totals totals;
  const auto start = std::chrono::steady_clock::now();
  const auto until = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                 std::chrono::duration<double>(seconds));
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back(Worker, port, sha, t, batch, ids, until, std::ref(totals));
  }
  for (auto& w : workers) w.join();
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "{\"cycles_per_s\":%.0f,\"acquires_refused\":%llu,\"errors\":%llu,\"threads\":%d,"
      "\"batch\":%d}\n",
      static_cast<double>(totals.cycles.load()) / elapsed,
      static_cast<unsigned long long>(totals.refused.load()),
      static_cast<unsigned long long>(totals.errors.load()), threads, batch);
  return totals.errors.load() == 0 ? 0 : 1;
}
