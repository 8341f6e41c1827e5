// The operator commands (audit, repair, inspect, top) end to end: the built `sluice`
// binary run as a subprocess against a private redis-server, its exit code, stdout
// (JSON) and stderr checked, and Redis's state compared before and after. Every
// subprocess is bounded in time (killed and failed after kRunTimeout).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string_view>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "sluice/admin.h"
#include "sluice/sluice.h"
#include "testing/redis_fixture.h"
#include "testing/redis_server.h"
#include "testing/status_matchers.h"

using sluice::testing::IsOk;
namespace sluice {
namespace {

using namespace std::chrono_literals;
using testing::RedisServer;
using testing::RedisValue;

constexpr auto kRunTimeout = 30s;

struct Result {
  int exit_code = -1;
  std::string out, err;
  nlohmann::json Json() const {
    auto j = nlohmann::json::parse(out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << "stdout is not JSON:\n" << out << "\nstderr:\n" << err;
    return j;
  }
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("sluice_cli_test_" + std::to_string(getpid()) + "_" + name))
      .string();
}

// Runs `sluice <args…>` with SLUICE_REDIS_URL set to `env_url` (unset when empty),
// SLUICED_REDIS to `service_url` (likewise).
Result Sluice(const std::vector<std::string>& args, const std::string& env_url = "",
              const std::string& service_url = "") {
  const std::string out_path = TempPath("out"), err_path = TempPath("err");
  // Everything the child needs is built here: the child of a process with other
  // threads must not allocate before exec (testing/processes.h, Fork).
  std::string bin = SLUICE_CLI_PATH;
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  argv.push_back(bin.data());
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    if (std::string_view(*e).starts_with("SLUICE_REDIS_URL=")) continue;
    if (std::string_view(*e).starts_with("SLUICED_REDIS=")) continue;
    env.emplace_back(*e);
  }
  if (!env_url.empty()) env.push_back("SLUICE_REDIS_URL=" + env_url);
  if (!service_url.empty()) env.push_back("SLUICED_REDIS=" + service_url);
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int in = open("/dev/null", O_RDONLY);
    dup2(out, 1);
    dup2(err, 2);
    dup2(in, 0);
    execve(bin.c_str(), argv.data(), envp.data());
    _exit(127);
  }
  Result run;
  const auto until = std::chrono::steady_clock::now() + kRunTimeout;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > until) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      ADD_FAILURE() << "sluice did not finish within " << kRunTimeout.count() << " s";
      return run;
    }
    std::this_thread::sleep_for(5ms);
  }
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  run.out = ReadFile(out_path);
  run.err = ReadFile(err_path);
  std::filesystem::remove(out_path);
  std::filesystem::remove(err_path);
  return run;
}

std::shared_ptr<Client> Connect(const RedisServer& server, const std::string& prefix) {
  return testing::ConnectClient(server, {.prefix = prefix, .deadline = 2000ms});
}

// Every key under `prefix` with its serialized value (DUMP) and absolute expiry
// (PEXPIRETIME: -1 none), to prove a command changed nothing it should not.
struct Snapshot {
  std::map<std::string, std::string> dump;
  std::map<std::string, long long> expire_at;
};

Snapshot Take(const RedisServer& server, const std::string& prefix) {
  Snapshot s;
  for (const std::string& key : server.Keys(prefix + ":*")) {
    s.dump[key] = server.Command({"DUMP", key}).str;
    s.expire_at[key] = server.Command({"PEXPIRETIME", key}).integer;
  }
  return s;
}

// 1,000 keys of five limiters and every window algorithm, all with an expiry, then the
// sign-in limiter's keys of accounts 101, 402 and 777 lose theirs (what a buggy
// migration or a hand-made `PERSIST` leaves behind).
//
// Every key must outlive the test however slowly a loaded machine runs it: a key's
// expiry is its window (fixed and sliding windows, logs) or the time its bucket takes to
// refill what was spent (token bucket, GCRA: cost x window / limit, 1 to 3 tokens here).
// With one-day windows the shortest expiry is 2.4 hours; with 600 s windows a cost-1
// bucket key lived 60 s, and a stall of about a minute expired some before the audit.
std::set<std::string> SeedThousandWithThreeLeaks(const RedisServer& server,
                                                 const std::string& prefix) {
  auto client = Connect(server, prefix);
  constexpr auto kDay = std::chrono::hours(24);
  const std::vector<std::pair<std::string, Limit>> limiters = {
      {"signin", {.algorithm = Algorithm::kFixedWindow, .limit = 5, .window = kDay}},
      {"api", {.algorithm = Algorithm::kSlidingWindow, .limit = 100, .window = kDay}},
      {"export", {.algorithm = Algorithm::kSlidingLog, .limit = 10, .window = kDay}},
      {"upload", {.algorithm = Algorithm::kTokenBucket, .limit = 10, .window = kDay}},
      {"search", {.algorithm = Algorithm::kGcra, .limit = 10, .window = kDay}},
  };
  for (const auto& [name, limit] : limiters) {
    auto limiter = client->MakeLimiter(name, limit);
    EXPECT_THAT(limiter, IsOk());
    for (int account = 1; account <= 200; ++account) {
      auto d = limiter->Check("account:" + std::to_string(account), {.cost = 1 + account % 3});
      EXPECT_TRUE(d.ok() && d->allowed);
    }
  }
  EXPECT_EQ(server.Keys(prefix + ":*").size(), 1000u);
  std::set<std::string> leaked;
  // Accounts 402 and 777 are past the 200 seeded per limiter: give them sign-in state too,
  // replacing two of the 1,000 so the total stays exact.
  auto signin = client->MakeLimiter("signin", limiters[0].second);
  EXPECT_THAT(signin, IsOk());
  server.Command({"DEL", prefix + ":{signin:account:199}:fw2"});
  server.Command({"DEL", prefix + ":{signin:account:200}:fw2"});
  for (const char* account : {"account:402", "account:777"}) {
    for (int i = 0; i < 3; ++i) EXPECT_THAT(signin->Check(account), IsOk());
  }
  for (const char* account : {"account:101", "account:402", "account:777"}) {
    const std::string key = prefix + ":{signin:" + account + "}:fw2";
    EXPECT_EQ(server.Command({"PERSIST", key}).integer, 1) << key;
    leaked.insert(key);
  }
  EXPECT_EQ(server.Keys(prefix + ":*").size(), 1000u);
  return leaked;
}

std::set<std::string> LeakedKeys(const nlohmann::json& audit) {
  std::set<std::string> keys;
  for (const auto& group : audit["leaks"]) {
    for (const auto& k : group["keys"]) keys.insert(k.get<std::string>());
  }
  return keys;
}

TEST(CliAudit, ThousandKeysThreeLeaksAuditRepairAudit) {
  RedisServer server;
  const std::string prefix = "sluice";
  const std::set<std::string> leaked = SeedThousandWithThreeLeaks(server, prefix);
  const Snapshot before = Take(server, prefix);

  Result audit = Sluice({"audit", "--redis", server.url(), "--json"});
  EXPECT_EQ(audit.exit_code, 1) << audit.err;
  nlohmann::json a = audit.Json();
  EXPECT_EQ(a["keys_scanned"], 1000);
  EXPECT_EQ(a["sluice_keys"], 1000);
  EXPECT_EQ(a["leaked"], 3);
  EXPECT_EQ(LeakedKeys(a), leaked);
  ASSERT_EQ(a["leaks"].size(), 1u);
  EXPECT_EQ(a["leaks"][0]["limiter"], "signin");
  EXPECT_EQ(a["leaks"][0]["algorithm"], "fixed_window");
  EXPECT_EQ(a["foreign"], 0);
  EXPECT_EQ(a["by_algorithm"]["fixed_window"], 200);
  EXPECT_EQ(a["by_algorithm"]["sliding_log"], 200);

  // The human form names the three keys too.
  Result human = Sluice({"audit", "--redis", server.url()});
  EXPECT_EQ(human.exit_code, 1);
  for (const std::string& key : leaked) EXPECT_NE(human.out.find(key), std::string::npos) << key;

  // Dry run, explicit and by default: reports, changes nothing.
  for (auto args :
       {std::vector<std::string>{"repair", "--redis", server.url(), "--json"},
        std::vector<std::string>{"repair", "--dry-run", "--redis", server.url(), "--json"}}) {
    Result dry = Sluice(args);
    EXPECT_EQ(dry.exit_code, 1) << dry.err;
    nlohmann::json d = dry.Json();
    EXPECT_EQ(d["mode"], "dry_run");
    EXPECT_EQ(d["without_expiry"], 3);
    std::set<std::string> planned;
    for (const auto& k : d["keys"]) {
      planned.insert(k["key"].get<std::string>());
      // A fixed window's (v2, `fw2`) window end was the expiry it lost: the longest
      // window, which its next call shortens to its own.
      EXPECT_EQ(k["ttl_s"].get<int64_t>(), 366 * 24 * 3600);
    }
    EXPECT_EQ(planned, leaked);
    const Snapshot after_dry = Take(server, prefix);
    EXPECT_EQ(after_dry.dump, before.dump);
    EXPECT_EQ(after_dry.expire_at, before.expire_at);
  }

  Result apply = Sluice({"repair", "--apply", "--redis", server.url(), "--json"});
  EXPECT_EQ(apply.exit_code, 0) << apply.err;
  nlohmann::json r = apply.Json();
  EXPECT_EQ(r["expiry_set"], 3);
  EXPECT_EQ(r["had_expiry"], 0);
  EXPECT_TRUE(server.KeysWithoutTtl(prefix + ":*").empty());
  const Snapshot after = Take(server, prefix);
  EXPECT_EQ(after.dump, before.dump) << "a counter value changed";
  for (const auto& [key, at] : before.expire_at) {
    if (leaked.count(key)) {
      EXPECT_GT(after.expire_at.at(key), 0) << key;
    } else {
      EXPECT_EQ(after.expire_at.at(key), at) << "the expiry of " << key << " moved";
    }
  }

  Result again = Sluice({"audit", "--redis", server.url(), "--json"});
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(again.Json()["leaked"], 0);
  // Nothing left to repair: exit 0, nothing changed.
  Result nothing = Sluice({"repair", "--redis", server.url()});
  EXPECT_EQ(nothing.exit_code, 0) << nothing.out;
}

TEST(CliAudit, UrlFromEnvironmentAndExplicitTtl) {
  RedisServer server;
  const std::string prefix = "envtest";
  auto client = Connect(server, prefix);
  auto limiter = client->MakeLimiter("signin", {.limit = 5, .window = 600s});
  ASSERT_THAT(limiter, IsOk());
  ASSERT_THAT(limiter->Check("account:101"), IsOk());
  const std::string key = prefix + ":{signin:account:101}:fw2";
  server.Command({"PERSIST", key});
  // No --redis: SLUICE_REDIS_URL names the server.
  Result audit = Sluice({"audit", "--prefix", prefix, "--json"}, server.url());
  EXPECT_EQ(audit.exit_code, 1) << audit.err;
  EXPECT_EQ(LeakedKeys(audit.Json()), std::set<std::string>{key});
  Result apply = Sluice({"repair", "--apply", "--ttl", "1234", "--prefix", prefix}, server.url());
  EXPECT_EQ(apply.exit_code, 0) << apply.err << apply.out;
  const long long ttl = server.Command({"TTL", key}).integer;
  EXPECT_GT(ttl, 1200);
  EXPECT_LE(ttl, 1234);

  // sluiced's variable, SLUICED_REDIS, names it too; SLUICE_REDIS_URL comes first.
  server.Command({"PERSIST", key});
  const std::string nobody = "redis://127.0.0.1:" + std::to_string(testing::FreeLoopbackPort());
  Result service = Sluice({"audit", "--prefix", prefix, "--json"}, "", server.url());
  EXPECT_EQ(service.exit_code, 1) << service.err;
  EXPECT_EQ(LeakedKeys(service.Json()), std::set<std::string>{key});
  Result both = Sluice({"audit", "--prefix", prefix, "--json"}, server.url(), nobody);
  EXPECT_EQ(both.exit_code, 1) << both.err;
  Result wrong = Sluice({"audit", "--prefix", prefix, "--json"}, nobody, server.url());
  EXPECT_EQ(wrong.exit_code, 2) << wrong.out;
  EXPECT_NE(wrong.err.find("(Redis URL from $SLUICE_REDIS_URL)"), std::string::npos) << wrong.err;
}

// A concurrency set (`:cc`, member `<acquired_at_ms>:<token>`, score = expiry ms).
void SeedLeases(const RedisServer& server, const std::string& key, int live, int stale) {
  const long long now = std::stoll(server.Command({"TIME"}).elements[0].str) * 1000;
  for (int i = 0; i < live; ++i) {
    server.Command({"ZADD", key, std::to_string(now + 60'000 + i),
                    std::to_string(now - 1000) + ":live" + std::to_string(i)});
  }
  for (int i = 0; i < stale; ++i) {
    server.Command({"ZADD", key, std::to_string(now - 30'000 - i),
                    std::to_string(now - 90'000) + ":dead" + std::to_string(i)});
  }
  server.Command({"PEXPIRE", key, "120000"});
}

TEST(CliAudit, StaleLeasesAreReportedWithTheirIds) {
  RedisServer server;
  const std::string prefix = "leases";
  SeedLeases(server, prefix + ":{jobs:worker:7}:cc", 1, 2);
  SeedLeases(server, prefix + ":{jobs:worker:8}:cc", 3, 0);
  Result audit = Sluice({"audit", "--redis", server.url(), "--prefix", prefix, "--json"});
  EXPECT_EQ(audit.exit_code, 1) << audit.err;
  nlohmann::json a = audit.Json();
  EXPECT_EQ(a["leaked"], 0);
  ASSERT_EQ(a["stale_lease_sets"].size(), 1u) << a.dump();
  EXPECT_EQ(a["stale_lease_sets"][0]["id"], "worker:7");
  EXPECT_EQ(a["stale_lease_sets"][0]["limiter"], "jobs");
  EXPECT_EQ(a["stale_lease_sets"][0]["stale"], 2);
  EXPECT_EQ(a["stale_lease_sets"][0]["members"], 3);
  EXPECT_EQ(a["stale_leases"], 2);
  // Largest sets first.
  ASSERT_GE(a["largest_sets"].size(), 2u);
  EXPECT_EQ(a["largest_sets"][0]["members"], 3);

  Result inspect = Sluice({"inspect", "--redis", server.url(), "--prefix", prefix, "--limiter",
                           "jobs", "--id", "worker:7", "--json"});
  EXPECT_EQ(inspect.exit_code, 0) << inspect.err;
  nlohmann::json i = inspect.Json();
  ASSERT_EQ(i["keys"].size(), 1u);
  const auto& cc = i["keys"][0];
  EXPECT_EQ(cc["algorithm"], "concurrency");
  EXPECT_EQ(cc["state"]["live"], 1);
  EXPECT_EQ(cc["state"]["stale"], 2);
  ASSERT_EQ(cc["leases"].size(), 3u);
  int live = 0;
  for (const auto& l : cc["leases"]) {
    EXPECT_GT(l["acquired_at_ms"].get<int64_t>(), 0);
    live += l["live"].get<bool>() ? 1 : 0;
    EXPECT_EQ(l["live"].get<bool>(), l["expires_in_ms"].get<int64_t>() > 0);
  }
  EXPECT_EQ(live, 1);
  // The human form shows the expiry times.
  Result human = Sluice({"inspect", "--redis", server.url(), "--prefix", prefix, "--limiter",
                         "jobs", "--id", "worker:7"});
  EXPECT_EQ(human.exit_code, 0);
  EXPECT_NE(human.out.find("STALE"), std::string::npos) << human.out;
  EXPECT_NE(human.out.find("live, in"), std::string::npos) << human.out;
}

// A store that can evict resets limits without leaving a key behind: audit shows each
// node's memory policy and counts an evicting one as a finding.
TEST(CliAudit, AMemoryPolicyThatCanEvictIsAFinding) {
  RedisServer server;
  Result clean = Sluice({"audit", "--redis", server.url(), "--json"});
  EXPECT_EQ(clean.exit_code, 0) << clean.err;
  nlohmann::json c = clean.Json();
  ASSERT_EQ(c["memory_policy"].size(), 1u) << c.dump();
  EXPECT_EQ(c["memory_policy"][0]["maxmemory_policy"], "noeviction");
  EXPECT_EQ(c["memory_policy"][0]["can_evict"], false);

  ASSERT_EQ(server.Command({"CONFIG", "SET", "maxmemory-policy", "volatile-lru"}).str, "OK");
  Result audit = Sluice({"audit", "--redis", server.url(), "--json"});
  EXPECT_EQ(audit.exit_code, 1) << audit.err;
  nlohmann::json a = audit.Json();
  ASSERT_EQ(a["memory_policy"].size(), 1u) << a.dump();
  EXPECT_EQ(a["memory_policy"][0]["maxmemory_policy"], "volatile-lru");
  EXPECT_EQ(a["memory_policy"][0]["can_evict"], true);
  EXPECT_EQ(a["memory_policy"][0]["evicted_keys"], 0);
  Result human = Sluice({"audit", "--redis", server.url()});
  EXPECT_EQ(human.exit_code, 1);
  EXPECT_NE(human.out.find("maxmemory-policy volatile-lru CAN EVICT"), std::string::npos)
      << human.out;
}

TEST(CliInspect, DecodesEveryAlgorithm) {
  RedisServer server;
  const std::string prefix = "insp";
  auto client = Connect(server, prefix);
  const std::string id = "account:101";
  const std::vector<Limit> limits = {
      {.algorithm = Algorithm::kFixedWindow, .limit = 10, .window = 600s},
      {.algorithm = Algorithm::kSlidingWindow, .limit = 10, .window = 600s},
      {.algorithm = Algorithm::kSlidingLog, .limit = 10, .window = 600s},
      {.algorithm = Algorithm::kTokenBucket, .limit = 10, .window = 600s},
      {.algorithm = Algorithm::kGcra, .limit = 10, .window = 600s},
  };
  for (const Limit& limit : limits) {
    auto limiter = client->MakeLimiter("multi", limit);
    ASSERT_THAT(limiter, IsOk());
    for (int64_t cost : {1, 2}) ASSERT_TRUE(limiter->Check(id, {.cost = cost})->allowed);
  }
  Result run = Sluice({"inspect", "--redis", server.url(), "--prefix", prefix, "--limiter", "multi",
                       "--id", id, "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  nlohmann::json j = run.Json();
  EXPECT_EQ(j["id"], id);
  const int64_t now = j["now_ms"];
  std::map<std::string, nlohmann::json> by;
  for (const auto& k : j["keys"]) {
    EXPECT_FALSE(k.contains("problem")) << k.dump();
    EXPECT_GT(k["ttl_ms"].get<int64_t>(), 0);
    by[k["algorithm"]] = k["state"];
  }
  ASSERT_EQ(by.size(), 5u) << j.dump();
  EXPECT_EQ(by["fixed_window"]["count"], 3);
  EXPECT_GT(by["fixed_window"]["window_end_ms"].get<int64_t>(), now);
  EXPECT_LE(by["fixed_window"]["window_end_ms"].get<int64_t>(), now + 600'000);
  EXPECT_EQ(by["sliding_window"]["current"], 3);
  EXPECT_EQ(by["sliding_window"]["previous"], 0);
  EXPECT_EQ(by["sliding_window"]["window_start_ms"].get<int64_t>() % 600'000, 0);
  EXPECT_EQ(by["sliding_window"]["window_ms"], 600'000);
  EXPECT_EQ(by["sliding_log"]["entries"], 2);
  EXPECT_EQ(by["sliding_log"]["units"], 3);
  // 3 tokens missing at the last write: 3 whole ones, or 2 and a fraction when a ms
  // passed between the two checks (1 token refills per 60 s).
  const int64_t missing = by["token_bucket"]["missing_tokens"];
  const int64_t fraction = by["token_bucket"]["missing_fraction_per_window"];
  EXPECT_TRUE((missing == 3 && fraction == 0) || (missing == 2 && fraction > 0))
      << by["token_bucket"].dump();
  // 3 of 10 tokens refill at 10 per 600 s: full 180 s after the last write.
  EXPECT_NEAR(by["token_bucket"]["full_in_ms"].get<int64_t>(), 180'000, 5'000);
  EXPECT_NEAR(by["gcra"]["full_in_ms"].get<int64_t>(), 180'000, 5'000);
  EXPECT_EQ(by["gcra"]["refill"], 10);  // refill 0: the limit
  EXPECT_EQ(by["gcra"]["window_ms"], 600'000);

  // An id with no state (exit 1, stderr says so), and an id that needs escaping.
  Result none = Sluice({"inspect", "--redis", server.url(), "--prefix", prefix, "--limiter",
                        "multi", "--id", "nobody"});
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.err.find("id \"nobody\" has no keys under limiter \"multi\""), std::string::npos)
      << none.err;
  auto odd = client->MakeLimiter("multi", limits[0]);
  ASSERT_THAT(odd->Check("a {b}%"), IsOk());
  Result escaped = Sluice({"inspect", "--redis", server.url(), "--prefix", prefix, "--limiter",
                           "multi", "--id", "a {b}%", "--json"});
  EXPECT_EQ(escaped.exit_code, 0) << escaped.err;
  EXPECT_EQ(escaped.Json()["encoded_id"], "a%20%7Bb%7D%25");
  EXPECT_EQ(escaped.Json()["keys"].size(), 1u);
}

// A block (LimiterOptions::block_for) is shown beside its algorithm's key, with its end.
TEST(CliInspect, ShowsABlockWithItsEnd) {
  RedisServer server;
  const std::string prefix = "inspb";
  auto client = Connect(server, prefix);
  auto limiter = client->MakeLimiter(
      "signin", {.algorithm = Algorithm::kTokenBucket, .limit = 1, .window = 600s},
      {.block_for = 900s});
  ASSERT_THAT(limiter, IsOk());
  ASSERT_TRUE(limiter->Check("ann")->allowed);
  ASSERT_TRUE(limiter->Check("ann")->blocked);
  Result run = Sluice({"inspect", "--redis", server.url(), "--prefix", prefix, "--limiter",
                       "signin", "--id", "ann", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  nlohmann::json j = run.Json();
  const int64_t now = j["now_ms"];
  int blocks = 0;
  for (const auto& k : j["keys"]) {
    if (!k["state"].contains("blocked_until_ms")) continue;
    ++blocks;
    EXPECT_EQ(k["algorithm"], "token_bucket") << k.dump();
    EXPECT_GT(k["state"]["blocked_until_ms"].get<int64_t>(), now);
    EXPECT_LE(k["state"]["blocked_until_ms"].get<int64_t>(), now + 900'000);
    EXPECT_GT(k["state"]["block_ends_in_ms"].get<int64_t>(), 0);
    EXPECT_GT(k["ttl_ms"].get<int64_t>(), 0);
  }
  EXPECT_EQ(blocks, 1) << j.dump();
  Result human = Sluice({"inspect", "--redis", server.url(), "--prefix", prefix, "--limiter",
                         "signin", "--id", "ann"});
  EXPECT_EQ(human.exit_code, 0) << human.err;
  EXPECT_NE(human.out.find("tb.blk"), std::string::npos) << human.out;
  EXPECT_NE(human.out.find("block_ends_in_ms"), std::string::npos) << human.out;
}

TEST(CliBadInput, ForeignKeysAreReportedAndNeverTouched) {
  RedisServer server;
  const std::string prefix = "shared";
  auto client = Connect(server, prefix);
  auto limiter = client->MakeLimiter("signin", {.limit = 5, .window = 600s});
  ASSERT_THAT(limiter->Check("account:101"), IsOk());
  const std::string sluice_key = prefix + ":{signin:account:101}:fw2";
  server.Command({"PERSIST", sluice_key});
  // Another application's keys under the same prefix, none with an expiry.
  server.Command({"SET", prefix + ":session:abc", "user=7"});
  server.Command({"HSET", prefix + ":{signin:account:102}:fw", "field", "1"});  // wrong type
  server.Command({"SET", prefix + ":{signin:bad%zz}:fw", "1:2"});               // not an encoding
  server.Command({"SET", prefix + ":{signin:x}:other", "1"});                   // unknown suffix
  const std::vector<std::string> foreign = {
      prefix + ":session:abc", prefix + ":{signin:account:102}:fw", prefix + ":{signin:bad%zz}:fw",
      prefix + ":{signin:x}:other"};
  std::map<std::string, std::string> dumps;
  for (const auto& k : foreign) dumps[k] = server.Command({"DUMP", k}).str;

  Result audit = Sluice({"audit", "--redis", server.url(), "--prefix", prefix, "--json"});
  EXPECT_EQ(audit.exit_code, 2) << audit.out;
  nlohmann::json a = audit.Json();
  EXPECT_EQ(a["foreign"], 4);
  EXPECT_EQ(a["leaked"], 1);
  std::set<std::string> reported;
  for (const auto& f : a["foreign_examples"]) reported.insert(f["key"].get<std::string>());
  EXPECT_EQ(reported, std::set<std::string>(foreign.begin(), foreign.end()));
  Result human = Sluice({"audit", "--redis", server.url(), "--prefix", prefix});
  EXPECT_EQ(human.exit_code, 2);
  EXPECT_NE(human.out.find("FOREIGN"), std::string::npos);

  Result apply =
      Sluice({"repair", "--apply", "--redis", server.url(), "--prefix", prefix, "--json"});
  EXPECT_EQ(apply.exit_code, 2) << apply.out;
  EXPECT_EQ(apply.Json()["expiry_set"], 1);
  EXPECT_EQ(apply.Json()["foreign_untouched"], 4);
  EXPECT_GT(server.Command({"TTL", sluice_key}).integer, 0);
  for (const auto& k : foreign) {
    EXPECT_EQ(server.Command({"TTL", k}).integer, -1) << k << " was touched";
    EXPECT_EQ(server.Command({"DUMP", k}).str, dumps[k]) << k << " changed";
  }
}

TEST(CliBadInput, UnreachableRedisIsAClearErrorAndExit2) {
  const std::string url = "redis://127.0.0.1:" + std::to_string(testing::FreeLoopbackPort());
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"audit", "--redis", url, "--json"},
        std::vector<std::string>{"repair", "--apply", "--redis", url},
        std::vector<std::string>{"top", "--once", "--redis", url}}) {
    const std::string& command = args[0];
    Result run = Sluice(args);
    EXPECT_EQ(run.exit_code, 2) << command;
    EXPECT_NE(run.err.find("cannot connect"), std::string::npos) << command << ": " << run.err;
  }
  Result inspect = Sluice({"inspect", "--redis", url, "--limiter", "signin", "--id", "a"});
  EXPECT_EQ(inspect.exit_code, 2);
  EXPECT_NE(inspect.err.find("unavailable"), std::string::npos) << inspect.err;
}

TEST(CliBadInput, WrongPasswordIsPermissionDeniedAndNeverPrinted) {
  RedisServer server({.requirepass = "s3cret-pass"});
  const std::string url = "redis://:not-the-pass@127.0.0.1:" + std::to_string(server.port());
  Result run = Sluice({"audit", "--redis", url});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find("permission_denied"), std::string::npos) << run.err;
  EXPECT_EQ(run.err.find("not-the-pass"), std::string::npos) << run.err;
  EXPECT_EQ(run.out.find("not-the-pass"), std::string::npos);
  // Its --help never shows a password from the environment either.
  Result help = Sluice({"audit", "--help"}, url);
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_EQ(help.out.find("not-the-pass"), std::string::npos) << help.out;
  // The right password works.
  Result ok = Sluice({"audit", "--redis", server.url(), "--json"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

TEST(CliBadInput, InvalidIdsNamesAndFlagsAreUsageErrors) {
  RedisServer server;
  const std::string url = server.url();
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"inspect", "--redis", url, "--limiter", "signin", "--id", ""}, "id is empty"},
      {{"inspect", "--redis", url, "--limiter", "sign in", "--id", "a"}, "limiter name"},
      {{"inspect", "--redis", url, "--limiter", "signin"}, "--id"},
      {{"audit", "--redis", url, "--prefix", "a b"}, "prefix"},
      {{"audit", "--redis", url, "--limiter", "x}y"}, "limiter name"},
      {{"audit", "--redis", "http://127.0.0.1:1"}, "redis"},
      {{"repair", "--redis", url, "--ttl", "0"}, "--ttl"},
      {{"repair", "--redis", url, "--apply", "--dry-run"}, "excludes"},
      {{"top", "--redis", url, "--interval", "0"}, "--interval"},
  };
  for (const Case& c : cases) {
    Result run = Sluice(c.args);
    std::string joined;
    for (const auto& a : c.args) joined += a + " ";
    EXPECT_EQ(run.exit_code, 2) << joined;
    EXPECT_NE(run.err.find(c.says), std::string::npos) << joined << "\nstderr: " << run.err;
  }
}

// `sluice top` in a real terminal (tmux, on its own socket so no other tmux server is
// touched): the seeded hot id shows, and q quits with exit 0.
TEST(CliTop, ShowsTheHotIdUnderTmuxAndQuitsOnQ) {
  ASSERT_EQ(std::system("command -v tmux >/dev/null"), 0)
      << "tmux is missing: run scripts/setup.sh";
  RedisServer server;
  const std::string prefix = "topt";
  SeedLeases(server, prefix + ":{pool:hot:42}:cc", 9, 1);
  SeedLeases(server, prefix + ":{pool:cold:1}:cc", 1, 0);
  auto client = Connect(server, prefix);
  auto fw = client->MakeLimiter("signin", {.limit = 100, .window = 600s});
  ASSERT_THAT(fw->Check("account:hot", {.cost = 77}), IsOk());
  ASSERT_THAT(fw->Check("account:cold", {.cost = 1}), IsOk());

  const std::string socket = "sluice_cli_test_" + std::to_string(getpid());
  const std::string status_file = TempPath("top_status");
  std::filesystem::remove(status_file);
  const std::string tmux = "tmux -L " + socket + " ";
  const std::string command = std::string(SLUICE_CLI_PATH) + " top --redis " + server.url() +
                              " --prefix " + prefix + " --interval 0.2; echo $? > " + status_file;
  ASSERT_EQ(
      std::system(
          (tmux + "-f /dev/null new-session -d -s top -x 200 -y 50 '" + command + "'").c_str()),
      0);
  auto capture = [&] {
    std::string out;
    FILE* p = popen((tmux + "capture-pane -p -t top 2>/dev/null").c_str(), "r");
    if (p == nullptr) return out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    pclose(p);
    return out;
  };
  std::string screen;
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < until) {
    screen = capture();
    if (screen.find("hot:42") != std::string::npos &&
        screen.find("account:hot") != std::string::npos)
      break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_NE(screen.find("hot:42"), std::string::npos) << screen;
  EXPECT_NE(screen.find("account:hot"), std::string::npos) << screen;
  // The hot id is ranked first: its row comes before the cold one.
  EXPECT_LT(screen.find("hot:42"), screen.find("cold:1")) << screen;
  std::system((tmux + "send-keys -t top q").c_str());
  bool quit = false;
  for (auto end = std::chrono::steady_clock::now() + 5s; std::chrono::steady_clock::now() < end;) {
    if (std::filesystem::exists(status_file) && !ReadFile(status_file).empty()) {
      quit = true;
      break;
    }
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_TRUE(quit) << "sluice top did not quit on q";
  if (quit) {
    EXPECT_EQ(ReadFile(status_file), "0\n");
  }
  std::system((tmux + "kill-server 2>/dev/null").c_str());
  std::filesystem::remove(status_file);
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Stale and live leases of one id released by the operator: only that id's set goes,
// one audit record is written (file and stream), and the holders' library sees it.
// sluice bench --processes: forked client processes on one hot id; with --aligned the
// JSON adds the per-window figures. Prefetch never admits more than the limit in a
// window, and the shared path's per-window counts are exact too.
TEST(CliBench, ProcessesOnOneHotIdReportPerWindowFigures) {
  RedisServer server;
  for (const char* mode : {"shared", "prefetch"}) {
    Result run =
        Sluice({"bench",    "--redis",       server.url(), "--keys",    "1",          "--processes",
                "3",        "--concurrency", "8",          "--mode",    mode,         "--limit",
                "3000",     "--window-ms",   "500",        "--aligned", "--duration", "2",
                "--warmup", "0.5",           "--json"});
    ASSERT_EQ(run.exit_code, 0) << mode << ": " << run.err;
    const nlohmann::json j = run.Json();
    ASSERT_TRUE(j.is_object()) << run.out;
    EXPECT_EQ(j["processes"], 3) << mode;
    EXPECT_EQ(j["errors"], 0) << mode << ": " << run.out;
    EXPECT_GE(j["windows_measured"].get<int64_t>(), 2) << mode << ": " << run.out;
    EXPECT_EQ(j["overshoot"], 0) << mode << ": " << run.out;
    EXPECT_EQ(j["overshoot_max"], 0) << mode << ": " << run.out;
    EXPECT_GT(j["store_calls"].get<double>(), 0) << mode << ": " << run.out;
    EXPECT_GT(j["allowed"].get<int64_t>(), 0) << mode << ": " << run.out;
    for (int64_t n : j["admitted_per_window"]) EXPECT_LE(n, 3000) << mode << ": " << run.out;
  }
  Result bad = Sluice({"bench", "--redis", server.url(), "--mode", "nonsense"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--mode"), std::string::npos) << bad.err;
  EXPECT_EQ(server.KeysWithoutTtl("sluicebench:*"), std::vector<std::string>{});
}

TEST(CliRelease, ReleasesEveryLeaseOfOneIdWithOneAuditRecord) {
  RedisServer server;
  const std::string prefix = "rel";
  auto client = Connect(server, prefix);
  auto jobs = client->MakeConcurrencyLimiter("jobs", {.limit = 10});
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  std::vector<Lease> held;
  for (int i = 0; i < 2; ++i) {
    auto a = jobs->Acquire("worker:7");
    ASSERT_TRUE(a.ok() && a->acquired);
    held.push_back(std::move(a->lease));
  }
  auto other = jobs->Acquire("worker:8");
  ASSERT_TRUE(other.ok() && other->acquired);
  const std::string key7 = prefix + ":{jobs:worker:7}:cc", key8 = prefix + ":{jobs:worker:8}:cc";
  SeedLeases(server, key7, 0, 2);  // two holders that died: stale members

  Result audit = Sluice({"audit", "--redis", server.url(), "--prefix", prefix, "--json"});
  EXPECT_EQ(audit.exit_code, 1) << audit.err;
  ASSERT_EQ(audit.Json()["stale_lease_sets"].size(), 1u);
  EXPECT_EQ(audit.Json()["stale_lease_sets"][0]["id"], "worker:7");

  const std::string log = TempPath("audit.jsonl");
  std::filesystem::remove(log);
  // Refused without actor or reason (nothing released, nothing recorded).
  for (const auto& args :
       {std::vector<std::string>{"release", "--redis", server.url(), "--prefix", prefix,
                                 "--limiter", "jobs", "--id", "worker:7", "--reason", "stuck",
                                 "--audit-log", log},
        std::vector<std::string>{"release", "--redis", server.url(), "--prefix", prefix,
                                 "--limiter", "jobs", "--id", "worker:7", "--actor", "alice",
                                 "--reason", "", "--audit-log", log}}) {
    Result refused = Sluice(args);
    EXPECT_EQ(refused.exit_code, 2) << refused.out;
    EXPECT_FALSE(refused.err.empty());
  }
  EXPECT_EQ(server.Command({"ZCARD", key7}).integer, 4);
  EXPECT_FALSE(std::filesystem::exists(log) && !ReadFile(log).empty());

  Result release = Sluice({"release", "--redis", server.url(), "--prefix", prefix, "--limiter",
                           "jobs", "--id", "worker:7", "--actor", "alice", "--reason",
                           "worker 7 stuck after deploy", "--audit-log", log, "--json"});
  ASSERT_EQ(release.exit_code, 0) << release.err;
  nlohmann::json r = release.Json();
  EXPECT_EQ(r["released"], 2) << "the live leases";
  EXPECT_EQ(server.Command({"EXISTS", key7}).integer, 0) << "stale members go too";
  EXPECT_EQ(server.Command({"ZCARD", key8}).integer, 1) << "another id was touched";
  const std::vector<std::string> lines = Lines(ReadFile(log));
  ASSERT_EQ(lines.size(), 1u);
  nlohmann::json record = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(record["actor"], "alice");
  EXPECT_EQ(record["reason"], "worker 7 stuck after deploy");
  EXPECT_EQ(record["id"], "worker:7");
  EXPECT_EQ(record["released"], 2);
  EXPECT_EQ(record["outcome"], "done");
  EXPECT_EQ(server.Command({"XLEN", prefix + ":audit"}).integer, 1);
  // The holders learn it at their next heartbeat.
  (void)held[0].Heartbeat();  // not OK: the lease is gone
  EXPECT_FALSE(held[0].held());
  EXPECT_EQ(held[0].loss(), LeaseLoss::kGone);

  // The audit stream is sluice's (not foreign), and with the stale set gone and the
  // stream expiring, the prefix is clean.
  Result after = Sluice({"audit", "--redis", server.url(), "--prefix", prefix, "--json"});
  EXPECT_EQ(after.exit_code, 0) << after.out;
  EXPECT_EQ(after.Json()["foreign"], 0);
  EXPECT_EQ(after.Json()["by_algorithm"]["audit_log"], 1);
  std::filesystem::remove(log);
}

// --domain/--entry name the limiter and id as sluiced does (docs/sluiced.md, Limiter
// names and ids): the domain and each entry's key joined by '.', the entries as
// key=value joined by ',' with '\\', ',' and '=' escaped. A limiter or id with no key at
// all is an error (exit 1, stderr says which), and a release of it records nothing; an id
// with keys but no live lease is released (0) and recorded.
TEST(CliTarget, DomainAndEntriesNameSluicedsLimiterAndIdAndNoKeysIsAnError) {
  RedisServer server;
  const std::string prefix = "tgt";
  auto client = Connect(server, prefix);
  auto rate = client->MakeLimiter("shop.export.user", {.limit = 5, .window = 600s});
  ASSERT_THAT(rate, IsOk());
  ASSERT_TRUE(rate->Check("export=,user=u\\,42")->allowed);
  auto streams = client->MakeConcurrencyLimiter("shop.streams", {.limit = 3});
  ASSERT_THAT(streams, IsOk());
  auto lease = streams->Acquire("streams=a");
  ASSERT_TRUE(lease.ok() && lease->acquired);
  const std::vector<std::string> at = {"--redis", server.url(), "--prefix", prefix};
  auto with = [&](std::vector<std::string> args) {
    args.insert(args.begin() + 1, at.begin(), at.end());
    return Sluice(args);
  };

  Result found =
      with({"inspect", "--domain", "shop", "--entry", "export=", "--entry", "user=u,42", "--json"});
  ASSERT_EQ(found.exit_code, 0) << found.err;
  EXPECT_EQ(found.Json()["limiter"], "shop.export.user");
  EXPECT_EQ(found.Json()["id"], "export=,user=u\\,42");
  EXPECT_EQ(found.Json()["keys"].size(), 1u);

  Result no_id = with({"inspect", "--domain", "shop", "--entry", "export=", "--entry", "user=u43"});
  EXPECT_EQ(no_id.exit_code, 1) << no_id.err;
  EXPECT_NE(no_id.err.find("id \"export=,user=u43\" has no keys under limiter "
                           "\"shop.export.user\""),
            std::string::npos)
      << no_id.err;
  Result no_limiter =
      with({"inspect", "--limiter", "shop.exprot.user", "--id", "export=,user=u42"});
  EXPECT_EQ(no_limiter.exit_code, 1) << no_limiter.err;
  EXPECT_NE(no_limiter.err.find("limiter \"shop.exprot.user\" has no keys at all"),
            std::string::npos)
      << no_limiter.err;

  const std::string log = TempPath("target_audit.jsonl");
  std::filesystem::remove(log);
  const std::vector<std::string> who = {"--actor", "alice", "--reason", "test", "--audit-log", log};
  auto release = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "release");
    args.insert(args.end(), who.begin(), who.end());
    return with(args);
  };
  Result typo = release({"--domain", "shop", "--entry", "stream=a"});
  EXPECT_EQ(typo.exit_code, 1) << typo.out;
  EXPECT_NE(typo.err.find("limiter \"shop.stream\" has no keys at all"), std::string::npos)
      << typo.err;
  EXPECT_FALSE(std::filesystem::exists(log)) << "nothing released, nothing recorded";
  Result released = release({"--domain", "shop", "--entry", "streams=a", "--json"});
  ASSERT_EQ(released.exit_code, 0) << released.err;
  EXPECT_EQ(released.Json()["limiter"], "shop.streams");
  EXPECT_EQ(released.Json()["released"], 1);
  // An id with keys but no live lease (here a rate key of the same limiter and id) is
  // released all the same: 0 leases, exit 0, recorded.
  auto other = client->MakeLimiter("shop.streams", {.limit = 5, .window = 600s});
  ASSERT_THAT(other, IsOk());
  ASSERT_TRUE(other->Check("streams=b")->allowed);
  Result nothing_live = release({"--domain", "shop", "--entry", "streams=b", "--json"});
  EXPECT_EQ(nothing_live.exit_code, 0) << nothing_live.err;
  EXPECT_EQ(nothing_live.Json()["released"], 0);
  EXPECT_EQ(Lines(ReadFile(log)).size(), 2u) << "both releases recorded";

  // Malformed targets are usage errors.
  EXPECT_EQ(with({"inspect", "--entry", "a=b"}).exit_code, 2);
  EXPECT_EQ(with({"inspect", "--domain", "shop"}).exit_code, 2);
  EXPECT_EQ(with({"inspect", "--domain", "shop", "--entry", "user"}).exit_code, 2);
  EXPECT_EQ(with({"inspect", "--domain", "shop", "--entry", "a=b", "--id", "a=b"}).exit_code, 2);
  EXPECT_EQ(with({"inspect", "--limiter", "shop.user"}).exit_code, 2);
  std::filesystem::remove(log);
}

TEST(CliRelease, AnAuditLogThatCannotBeWrittenStopsTheRelease) {
  RedisServer server;
  const std::string prefix = "rel2";
  SeedLeases(server, prefix + ":{jobs:worker:7}:cc", 2, 0);
  Result run = Sluice({"release", "--redis", server.url(), "--prefix", prefix, "--limiter", "jobs",
                       "--id", "worker:7", "--actor", "alice", "--reason", "test", "--audit-log",
                       "/nonexistent-dir/audit.jsonl"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find("audit log"), std::string::npos) << run.err;
  EXPECT_EQ(server.Command({"ZCARD", prefix + ":{jobs:worker:7}:cc"}).integer, 2);
}

// The record is UTF-8 text (lease.h): actor and reason that are not (surrogates,
// overlong forms, code points past U+10FFFF, C1 controls) are refused before anything is
// released or written; well-formed text of every length class is accepted as it is.
TEST(CliRelease, ActorAndReasonMustBeWellFormedUtf8) {
  RedisServer server;
  const std::string prefix = "rel3";
  const std::string key = prefix + ":{jobs:worker:7}:cc";
  SeedLeases(server, key, 2, 0);
  const std::string log = TempPath("utf8.jsonl");
  std::filesystem::remove(log);
  for (const std::string bad : {"\xed\xa0\x80",      // U+D800, a surrogate
                                "\xed\xbf\xbf",      // U+DFFF
                                "\xe0\x80\xaf",      // '/' overlong in 3 bytes
                                "\xf0\x80\x80\xaf",  // '/' overlong in 4 bytes
                                "\xf4\x90\x80\x80",  // U+110000
                                "\xc2\x85",          // NEL, a C1 control
                                "\xc0\xaf", "ab\xe2\x82"}) {
    for (const bool in_actor : {true, false}) {
      Result run = Sluice({"release", "--redis", server.url(), "--prefix", prefix, "--limiter",
                           "jobs", "--id", "worker:7", "--actor", in_actor ? "ops " + bad : "ops",
                           "--reason", in_actor ? "test" : "why " + bad, "--audit-log", log});
      EXPECT_EQ(run.exit_code, 2) << ::testing::PrintToString(bad) << run.out;
      EXPECT_NE(run.err.find("UTF-8"), std::string::npos) << run.err;
    }
  }
  EXPECT_EQ(server.Command({"ZCARD", key}).integer, 2) << "released on invalid input";
  EXPECT_FALSE(std::filesystem::exists(log) && !ReadFile(log).empty());
  // Two-, three- and four-byte characters at the edges of what is allowed.
  const std::string actor =
      "Jos\xc3\xa9 \xc2\xa0\xe0\xa0\x80\xed\x9f\xbf\xee\x80\x80"
      "\xf0\x90\x80\x80\xf4\x8f\xbf\xbf";
  Result ok = Sluice({"release", "--redis", server.url(), "--prefix", prefix, "--limiter", "jobs",
                      "--id", "worker:7", "--actor", actor, "--reason", "\xe2\x9c\x93 test",
                      "--audit-log", log, "--json"});
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(ok.Json()["released"], 2);
  const std::vector<std::string> lines = Lines(ReadFile(log));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(nlohmann::json::parse(lines[0])["actor"], actor);
  EXPECT_TRUE(server.KeysWithoutTtl(prefix + ":*").empty());
  std::filesystem::remove(log);
}

// A Redis that stalls (CLIENT PAUSE) past ReleaseAll's deadline runs
// the release when it resumes; the record was written before, and says the outcome is
// unknown. After the pause, either nothing was released or a record exists.
TEST(CliRelease, ReleaseAllPastItsDeadlineIsNeverUnrecorded) {
  RedisServer server;
  const std::string prefix = "rel4";
  const std::string key = prefix + ":{jobs:w}:cc";
  SeedLeases(server, key, 2, 0);
  auto client = Connect(server, prefix);
  auto jobs = client->MakeConcurrencyLimiter("jobs", {.limit = 5});
  ASSERT_THAT(jobs, IsOk());
  ASSERT_THAT(jobs->List("w"), IsOk());  // connected
  const std::string log = TempPath("paused.jsonl");
  std::filesystem::remove(log);
  server.Command({"CLIENT", "PAUSE", "700", "ALL"});
  auto r =
      ReleaseAll(*jobs, "w", {.actor = "ops", .reason = "paused redis"}, {.log_path = log}, 100ms);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().ToString();
  EXPECT_NE(r.status().message().find("recorded"), std::string::npos) << r.status().ToString();
  // Redis answers again after the pause and runs what it was sent.
  bool released = false;
  for (auto until = std::chrono::steady_clock::now() + 5s;
       std::chrono::steady_clock::now() < until;) {
    if (server.Command({"EXISTS", key}).integer == 0) {
      released = true;
      break;
    }
    std::this_thread::sleep_for(20ms);
  }
  std::printf("after the pause the leases were %s\n", released ? "released" : "not released");
  const std::vector<std::string> lines = Lines(ReadFile(log));
  EXPECT_TRUE(!released || lines.size() == 1u) << "released without a record";
  ASSERT_EQ(lines.size(), 1u);
  const nlohmann::json record = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(record["outcome"], "unknown");
  EXPECT_EQ(record["error"], "deadline_exceeded");
  EXPECT_EQ(record["actor"], "ops");
  EXPECT_EQ(record["key"], key);
  EXPECT_FALSE(record["op"].get<std::string>().empty());
  EXPECT_TRUE(server.KeysWithoutTtl(prefix + ":*").empty());
  std::filesystem::remove(log);
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// The guarantee repair rests on, through the public admin API: EXPIRE NX never moves an
// existing expiry and never resurrects a key; a foreign key is refused before anything
// is changed.
TEST(AdminApi, ExpireIfNoneLeavesExpiriesAndForeignKeysAlone) {
  RedisServer server;
  const std::string with_ttl = "adm:{signin:a}:fw", without = "adm:{signin:b}:fw",
                    missing = "adm:{signin:c}:fw";
  server.Command({"SET", with_ttl, "1:99999999999999", "PX", "500000"});
  server.Command({"SET", without, "1:99999999999999"});
  const long long expire_at = server.Command({"PEXPIRETIME", with_ttl}).integer;
  auto admin = Admin::Connect({.url = server.url(), .prefix = "adm"});
  ASSERT_TRUE(admin.ok()) << admin.status().ToString();
  const std::vector<std::pair<std::string, std::chrono::seconds>> foreign = {
      {without, 100s}, {"adm:session:x", 100s}};
  auto refused = (*admin)->ExpireIfNone(foreign);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(server.Command({"TTL", without}).integer, -1) << "changed before refusing";

  const std::vector<std::pair<std::string, std::chrono::seconds>> keys = {
      {with_ttl, 100s}, {without, 100s}, {missing, 100s}};
  auto result = (*admin)->ExpireIfNone(keys);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->set, 1);
  EXPECT_EQ(result->had_ttl, 1);
  EXPECT_EQ(result->missing, 1);
  EXPECT_EQ(server.Command({"PEXPIRETIME", with_ttl}).integer, expire_at);
  EXPECT_GT(server.Command({"TTL", without}).integer, 90);
  EXPECT_EQ(server.Command({"EXISTS", missing}).integer, 0);
  auto zero = std::vector<std::pair<std::string, std::chrono::seconds>>{{without, 0s}};
  EXPECT_EQ((*admin)->ExpireIfNone(zero).status().code(), StatusCode::kInvalidArgument);
}

// A key scanned as sluice's and replaced by another application's
// value before the expiry is set (here: a hash under a string suffix) is left alone; the
// type is checked in the script that sets the expiry.
TEST(AdminApi, ExpireIfNoneLeavesAKeyReplacedByAnotherTypeAlone) {
  RedisServer server;
  const std::string replaced = "adm:{signin:d}:fw", log = "adm:{jobs:e}:cc",
                    sluice = "adm:{signin:f}:fw";
  server.Command({"HSET", replaced, "field", "1"});
  server.Command({"SET", log, "not a zset"});
  server.Command({"SET", sluice, "1:99999999999999"});
  auto admin = Admin::Connect({.url = server.url(), .prefix = "adm"});
  ASSERT_TRUE(admin.ok()) << admin.status().ToString();
  const std::vector<std::pair<std::string, std::chrono::seconds>> keys = {
      {replaced, 100s}, {log, 100s}, {sluice, 100s}};
  auto result = (*admin)->ExpireIfNone(keys);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->foreign, 2);
  EXPECT_EQ(result->set, 1);
  EXPECT_EQ(server.Command({"TTL", replaced}).integer, -1) << "a foreign hash got an expiry";
  EXPECT_EQ(server.Command({"TTL", log}).integer, -1) << "a foreign string got an expiry";
  EXPECT_GT(server.Command({"TTL", sluice}).integer, 90);
}

// Seeds `n` fixed-window keys `<prefix>:{api:u<i>}:fw` WITHOUT an expiry, server side.
void SeedLeakedFixedWindows(const RedisServer& server, const std::string& prefix, int n) {
  const std::string seed = R"lua(
    local far = tonumber(ARGV[3])
    for i = tonumber(ARGV[2]), tonumber(ARGV[4]) do
      redis.call('SET', ARGV[1] .. ':{api:u' .. i .. '}:fw', '1:' .. far)
    end
    return 1)lua";
  const long long now_ms = std::stoll(server.Command({"TIME"}).elements[0].str) * 1000;
  for (int from = 0; from < n; from += 50'000) {
    server.Command({"EVAL", seed, "0", prefix, std::to_string(from),
                    std::to_string(now_ms + 3'600'000),
                    std::to_string(std::min(n, from + 50'000) - 1)});
  }
}

// The expiries of a large leak are set in paced script calls, each
// with its own --timeout; all submitted at once under one deadline, 400,000 keys did not
// fit in 0.5 s (Redis sets about half a million expiries a second).
TEST(CliRepair, LargeLeakIsRepairedInPacedCallsEachWithItsOwnTimeout) {
  RedisServer server;
  const std::string prefix = "big";
  constexpr int kLeaked = 400'000;
  SeedLeakedFixedWindows(server, prefix, kLeaked);
  Result apply = Sluice({"repair", "--apply", "--redis", server.url(), "--prefix", prefix,
                         "--timeout", "0.5", "--json"});
  ASSERT_EQ(apply.exit_code, 0) << apply.err;
  nlohmann::json r = apply.Json();
  EXPECT_EQ(r["without_expiry"], kLeaked);
  EXPECT_EQ(r["expiry_set"], kLeaked);
  std::printf("repair of %d leaked keys: %.2f s, peak RSS %lld KiB\n", kLeaked,
              r["elapsed_s"].get<double>(), r["peak_rss_kb"].get<long long>());
  // Every key of the database has an expiry now (INFO keyspace counts them).
  const std::string keyspace = server.Command({"INFO", "keyspace"}).str;
  EXPECT_NE(
      keyspace.find("keys=" + std::to_string(kLeaked) + ",expires=" + std::to_string(kLeaked)),
      std::string::npos)
      << keyspace;
  // An hour left in each window: about that TTL.
  const long long ttl = server.Command({"TTL", prefix + ":{api:u7}:fw"}).integer;
  EXPECT_GT(ttl, 3000);
  EXPECT_LE(ttl, 3600);
}

// A sliding window's state counts the current and the previous window:
// a repaired key must live until the window after the current one ends (a 20 h window
// lives up to 40 h; the old 24 h default expired it while counted units remained). The
// value records its window; one of the earlier 20-byte form, which does not, lives as
// long as the longest window could need. A sliding log lives until its newest entry leaves a
// window of up to 366 days. Derived TTLs from corrupted values are capped like --ttl.
TEST(CliRepair, TtlsCoverTheLongestStateAndAreCapped) {
  RedisServer server;
  const std::string prefix = "ttls";
  auto client = Connect(server, prefix);
  const auto window = std::chrono::hours(20);
  auto sw = client->MakeLimiter(
      "sw", {.algorithm = Algorithm::kSlidingWindow, .limit = 1000, .window = window});
  auto sl = client->MakeLimiter(
      "sl", {.algorithm = Algorithm::kSlidingLog, .limit = 1000, .window = window});
  ASSERT_TRUE(sw.ok() && sl.ok());
  ASSERT_TRUE(sw->Check("a", {.cost = 548})->allowed);
  ASSERT_TRUE(sl->Check("a", {.cost = 548})->allowed);
  const std::string sw_key = prefix + ":{sw:a}:sw", sl_key = prefix + ":{sl:a}:sl";
  ASSERT_EQ(server.Command({"PERSIST", sw_key}).integer, 1);
  ASSERT_EQ(server.Command({"PERSIST", sl_key}).integer, 1);
  // Corrupted values that decode: a window end and a TAT 98 billion seconds away.
  const std::string fw_key = prefix + ":{fw:a}:fw", gcra_key = prefix + ":{g:a}:gcra";
  server.Command({"SET", fw_key, "1:98000000000000000"});
  server.Command({"SET", gcra_key, "98000000000000000"});

  const long long now_s = std::stoll(server.Command({"TIME"}).elements[0].str);
  const long long window_s = 20 * 3600, day_s = 24 * 3600;
  const long long start_s = now_s / window_s * window_s;  // aligned windows
  // The earlier 20-byte form: start (int64), current, previous (int48), little-endian.
  const std::string legacy_key = prefix + ":{sw:legacy}:sw";
  std::string legacy;
  for (auto [v, n] : {std::pair<long long, int>{start_s * 1000, 8}, {548, 6}, {0, 6}}) {
    for (int i = 0; i < n; ++i) legacy.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  server.Command({"SET", legacy_key, legacy});
  Result apply =
      Sluice({"repair", "--apply", "--redis", server.url(), "--prefix", prefix, "--json"});
  ASSERT_EQ(apply.exit_code, 0) << apply.err << apply.out;
  EXPECT_EQ(apply.Json()["expiry_set"], 5);
  const long long sw_ttl = server.Command({"TTL", sw_key}).integer;
  EXPECT_GE(sw_ttl, start_s + 2 * window_s - now_s - 5) << "shorter than the state's life";
  EXPECT_LE(sw_ttl, start_s + 2 * window_s - now_s + 5) << "the value records its window";
  const long long legacy_ttl = server.Command({"TTL", legacy_key}).integer;
  EXPECT_LE(legacy_ttl, 732 * day_s);
  EXPECT_GE(legacy_ttl, start_s + 732 * day_s - now_s - 5);
  const long long sl_ttl = server.Command({"TTL", sl_key}).integer;
  EXPECT_GE(sl_ttl, 366 * day_s - 5);
  EXPECT_LE(sl_ttl, 366 * day_s);
  for (const std::string& key : {fw_key, gcra_key}) {
    EXPECT_GT(server.Command({"TTL", key}).integer, 366 * day_s - 5) << key;
    EXPECT_LE(server.Command({"TTL", key}).integer, 366 * day_s) << key;
  }
  EXPECT_TRUE(server.KeysWithoutTtl(prefix + ":*").empty());
}

// `key`, sluice's and with its expiry, loses the expiry: audit finds nothing wrong before
// and a leak after (exit 1), never a foreign key (exit 2); repair --apply gives it one.
// Returns the TTL repair set, in seconds.
long long LoseTheExpiryThenRepair(const RedisServer& server, const std::string& prefix,
                                  const std::string& key) {
  Result clean = Sluice({"audit", "--redis", server.url(), "--prefix", prefix, "--json"});
  EXPECT_EQ(clean.exit_code, 0) << clean.err << clean.out;
  EXPECT_EQ(clean.Json()["foreign"], 0) << clean.out;
  EXPECT_EQ(server.Command({"PERSIST", key}).integer, 1);
  Result leak = Sluice({"audit", "--redis", server.url(), "--prefix", prefix, "--json"});
  EXPECT_EQ(leak.exit_code, 1) << leak.err << leak.out;
  EXPECT_EQ(leak.Json()["foreign"], 0);
  Result apply =
      Sluice({"repair", "--apply", "--redis", server.url(), "--prefix", prefix, "--json"});
  EXPECT_EQ(apply.exit_code, 0) << apply.err << apply.out;
  EXPECT_EQ(apply.Json()["expiry_set"], 1);
  return server.Command({"TTL", key}).integer;
}

// A quota shares bucket is sluice's: audit counts it (a leak when it lost its expiry, never
// a foreign key) and repair gives it a day, until its next call sets its own expiry.
TEST(CliRepair, AQuotaSharesBucketWithoutAnExpiryIsALeakAndGetsADay) {
  RedisServer server;
  const std::string prefix = "quota";
  auto client = Connect(server, prefix);
  auto shares = client->MakeQuotaShares("rlqs");
  ASSERT_TRUE(shares.ok());
  ASSERT_TRUE(shares
                  ->AssignSync({.id = "b",
                                .client = "c",
                                .demand_milli = 10,
                                .rate_milli = 100,
                                .hold = std::chrono::seconds(30)})
                  .ok());
  const long long ttl = LoseTheExpiryThenRepair(server, prefix, *shares->KeyFor("b"));
  EXPECT_GT(ttl, 24 * 3600 - 5);
  EXPECT_LE(ttl, 24 * 3600);
}

// A reservation is sluice's: audit counts it (a leak when it lost its expiry, never a
// foreign key, which would make audit exit 2), and repair gives it back the time its value
// says it counts until.
TEST(CliRepair, AReservationWithoutAnExpiryIsALeakAndGetsItsOwnEnd) {
  RedisServer server;
  const std::string prefix = "metered";
  auto client = Connect(server, prefix);
  auto tokens = client->MakeLimiter("tokens", {.limit = 1000, .window = 60s});
  ASSERT_TRUE(tokens.ok());
  auto held = tokens->Reserve("acct", 40);
  ASSERT_TRUE(held.ok() && held->decision.allowed);
  const std::vector<std::string> reservations = server.Keys(prefix + ":*:r:*");
  ASSERT_EQ(reservations.size(), 1u);
  const long long ttl = LoseTheExpiryThenRepair(server, prefix, reservations[0]);
  EXPECT_GT(ttl, 50) << "a fixed window's reservation counts until the window ends";
  EXPECT_LE(ttl, 61);
}

// Past the 10,000 leases inspect reads, the rest are counted, not
// assumed live.
TEST(CliInspect, CountsStaleLeasesBeyondTheOnesItLists) {
  RedisServer server;
  const std::string prefix = "many";
  const std::string seed = R"lua(
    local now = tonumber(ARGV[1])
    for i = 1, tonumber(ARGV[2]) do
      redis.call('ZADD', KEYS[1], now - 30000 - i, (now - 90000) .. ':dead' .. i)
    end
    for i = 1, tonumber(ARGV[3]) do
      redis.call('ZADD', KEYS[1], now + 60000 + i, (now - 1000) .. ':live' .. i)
    end
    redis.call('PEXPIRE', KEYS[1], 120000)
    return 1)lua";
  const std::string now =
      std::to_string(std::stoll(server.Command({"TIME"}).elements[0].str) * 1000);
  server.Command({"EVAL", seed, "1", prefix + ":{jobs:dead}:cc", now, "20000", "0"});
  server.Command({"EVAL", seed, "1", prefix + ":{jobs:mixed}:cc", now, "15000", "3"});
  for (const auto& [id, live, stale] :
       {std::tuple{"dead", 0, 20000}, std::tuple{"mixed", 3, 15000}}) {
    Result run = Sluice({"inspect", "--redis", server.url(), "--prefix", prefix, "--limiter",
                         "jobs", "--id", id, "--json"});
    ASSERT_EQ(run.exit_code, 0) << run.err;
    const nlohmann::json j = run.Json();
    ASSERT_EQ(j["keys"].size(), 1u);
    EXPECT_EQ(j["keys"][0]["state"]["live"], live) << id;
    EXPECT_EQ(j["keys"][0]["state"]["stale"], stale) << id;
    EXPECT_EQ(j["keys"][0]["state"]["leases"], live + stale) << id;
  }
  EXPECT_TRUE(server.KeysWithoutTtl(prefix + ":*").empty());
}

// Each refresh of top goes on where the last one stopped, so a set
// of 50 live leases that SCAN returns last among 100,000 keys shows up although every
// refresh reads only 10,000 keys.
TEST(CliTop, SuccessiveRefreshesSampleTheWholeKeyspace) {
  RedisServer server;
  const std::string prefix = "wide";
  const std::string seed = R"lua(
    local now = tonumber(ARGV[2])
    for i = tonumber(ARGV[3]), tonumber(ARGV[4]) do
      if i % 1000 == 0 then
        local key = ARGV[1] .. ':{pool:w' .. i .. '}:cc'
        redis.call('ZADD', key, now + 600000, (now - 1000) .. ':live')
        redis.call('PEXPIRE', key, 900000)
      else
        redis.call('SET', ARGV[1] .. ':{api:u' .. i .. '}:fw', '1:' .. (now + 600000), 'PX', 900000)
      end
    end
    return 1)lua";
  const std::string now =
      std::to_string(std::stoll(server.Command({"TIME"}).elements[0].str) * 1000);
  for (int from = 0; from < 100'000; from += 50'000) {
    server.Command(
        {"EVAL", seed, "0", prefix, now, std::to_string(from), std::to_string(from + 49'999)});
  }
  // The lease set SCAN returns last gets 49 more live leases.
  std::string hot;
  for (const std::string& key : server.Keys(prefix + ":*")) {
    if (key.ends_with(":cc")) hot = key;
  }
  ASSERT_FALSE(hot.empty());
  const std::string seed_more = R"lua(
    for i = 1, 49 do
      redis.call('ZADD', KEYS[1], tonumber(ARGV[1]) + 600000, (tonumber(ARGV[1]) - 1000) .. ':more' .. i)
    end
    return 1)lua";
  server.Command({"EVAL", seed_more, "1", hot, now});
  ASSERT_EQ(server.Command({"ZCARD", hot}).integer, 50);
  const std::string hot_id =
      hot.substr(hot.find(':') + 2 + std::string("pool:").size(),
                 hot.size() - hot.find(':') - 2 - std::string("pool:").size() - 4);

  Result run = Sluice({"top", "--redis", server.url(), "--prefix", prefix, "--json", "--sample",
                       "10000", "--frames", "13", "--interval", "0.1"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json j = run.Json();
  ASSERT_FALSE(j["leases"].empty()) << j.dump();
  EXPECT_EQ(j["leases"][0]["id"], hot_id) << j["leases"].dump();
  EXPECT_EQ(j["leases"][0]["value"], 50);
  EXPECT_GE(j["passes"].get<int64_t>(), 1);
}

// SCAN returns keys again when Redis shrinks its table between two
// calls. Provoked here: after the first batch, every key not yet reported is deleted and
// Redis's cron shrinks the table; the rest of the scan then returns reported keys again.
// With ScanOptions::distinct each key is reported once (and the repeats are counted).
int64_t ScanWhileTheTableShrinks(const RedisServer& server, bool distinct, int64_t& repeats) {
  server.Command({"FLUSHALL"});
  const std::string seed = R"lua(
    for i = 1, tonumber(ARGV[1]) do redis.call('SET', 'dup:{api:u' .. i .. '}:fw', '1:99999999999999', 'PX', 600000) end
    return 1)lua";
  server.Command({"EVAL", seed, "0", "100000"});
  auto admin = Admin::Connect({.url = server.url(), .prefix = "dup", .scan_count = 100});
  EXPECT_THAT(admin, IsOk());
  std::map<std::string, int> seen;
  bool shrunk = false;
  Status s = (*admin)->Scan({.distinct = distinct}, [&](const ScanBatch& batch) {
    for (const ScannedKey& k : batch.keys) ++seen[k.key];
    repeats = batch.repeats;
    if (!shrunk) {
      shrunk = true;
      // Keep what was reported, delete the rest, and let the cron shrink the table.
      std::string keep;
      for (const auto& [key, n] : seen) keep += key + "\n";
      const std::string prune = R"lua(
        local keep = {}
        for k in string.gmatch(ARGV[1], '[^\n]+') do keep[k] = true end
        for i = 1, 100000 do
          local key = 'dup:{api:u' .. i .. '}:fw'
          if not keep[key] then redis.call('UNLINK', key) end
        end
        return 1)lua";
      server.Command({"EVAL", prune, "0", keep});
      std::this_thread::sleep_for(1500ms);
    }
    return true;
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
  int64_t twice = 0;
  for (const auto& [key, n] : seen) twice += n > 1;
  return twice;
}

TEST(AdminApi, DistinctScanReportsEachKeyOnceWhenSCANRepeatsKeys) {
  RedisServer server;
  server.Command({"CONFIG", "SET", "hz", "100"});  // the cron that shrinks tables, 10x as often
  int64_t repeats = 0;
  const int64_t without = ScanWhileTheTableShrinks(server, false, repeats);
  std::printf("keys SCAN returned twice after the table shrank: %lld\n",
              static_cast<long long>(without));
  // Whether the table shrinks during a given scan depends on the server's cron (a loaded
  // machine can be late): up to three distinct scans, each of which must report every
  // key once, until one of them saw SCAN repeat keys.
  int64_t dropped = 0;
  for (int attempt = 0; attempt < 3 && dropped == 0; ++attempt) {
    const int64_t with = ScanWhileTheTableShrinks(server, true, repeats);
    EXPECT_EQ(with, 0);
    dropped = repeats;
  }
  std::printf("distinct: 0 reported twice, %lld repeats dropped\n",
              static_cast<long long>(dropped));
  if (without > 0) {
    EXPECT_GT(dropped, 0);
  }
}

TEST(AdminApi, ConnectRejectsMemoryStoreAndBadPrefix) {
  EXPECT_EQ(Admin::Connect({.url = "memory://"}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Admin::Connect({.prefix = "a:b"}).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice
