// The operator commands and the admin API on a local Redis Cluster:
// audit, repair, inspect, top and release run as the built `sluice` binary against
// redis+cluster://, and must see every primary (SCAN per node) while each script call
// keeps to one slot. Keys are planted on every primary, co-located keys among them.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "run_command.h"
#include "sluice/admin.h"
#include "sluice/sluice.h"
#include "testing/redis_cluster.h"

namespace sluice {
namespace {

using std::chrono::seconds;
using testing::RedisCluster;

class ClusterCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = new RedisCluster(); }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  static std::string Prefix() {
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::string out = "cli";
    for (char c : name)
      out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    return out;
  }
  std::shared_ptr<Client> Connect() {
    auto client = Client::Create({.url = cluster_->url(),
                                  .prefix = Prefix(),
                                  .deadline = seconds(2),
                                  .on_failure = FailurePolicy::kClosed});
    EXPECT_TRUE(client.ok()) << client.status().ToString();
    return client.ok() ? *client : nullptr;
  }
  // Runs `sluice <args> --redis <cluster> --prefix <test's prefix>`; stdout parsed as
  // JSON when `json` (stderr goes to the test's log).
  struct Run {
    int exit_code = -1;
    std::string out;
    nlohmann::json json;
  };
  Run Sluice(const std::vector<std::string>& args, bool json = true) {
    std::string command = std::string(SLUICE_CLI_PATH);
    for (const std::string& a : args) command += " '" + a + "'";
    command += " --redis '" + cluster_->url() + "' --prefix " + Prefix();
    if (json) command += " --json";
    command += " </dev/null";
    command = "timeout 60 " + command;
    testing::CommandRun run = testing::RunCommand(command);
    Run out{run.exit_code, run.output, {}};
    if (json) {
      out.json = nlohmann::json::parse(run.output, nullptr, false);
      EXPECT_FALSE(out.json.is_discarded()) << command << "\n" << run.output;
    }
    return out;
  }
  uint16_t PrimaryOf(const std::string& key) {
    return cluster_->PrimaryPortOf(cluster_->KeySlot(key));
  }
  void TearDown() override {
    EXPECT_EQ(cluster_->KeysWithoutTtl(Prefix() + ":*"), std::vector<std::string>{});
  }

  static RedisCluster* cluster_;
};

RedisCluster* ClusterCli::cluster_ = nullptr;

const LimiterOptions kByTenant{.colocate = LimiterOptions::Colocate{.separator = ':'}};

TEST_F(ClusterCli, AuditFindsLeaksOnEveryPrimaryAndRepairFixesThem) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto api = *client->MakeLimiter("api", {.limit = 100, .window = seconds(600)});
  auto user = *client->MakeLimiter(
      "user", {.algorithm = Algorithm::kSlidingWindow, .limit = 100, .window = seconds(600)},
      kByTenant);
  auto tenant = *client->MakeLimiter(
      "tenant", {.algorithm = Algorithm::kTokenBucket, .limit = 1000, .window = seconds(600)},
      kByTenant);
  std::vector<std::string> api_keys, user_keys;
  for (int i = 0; i < 150; ++i) {
    const std::string id = "acct:" + std::to_string(i);
    ASSERT_TRUE(api.Check(id)->allowed);
    api_keys.push_back(*api.KeyFor(id));
    const std::string t = "t" + std::to_string(i % 15);
    const LimitCheck checks[] = {{&user, t + ":u" + std::to_string(i)}, {&tenant, t}};
    ASSERT_TRUE(CheckComposite(checks, {})->decision.allowed);
    user_keys.push_back(*user.KeyFor(t + ":u" + std::to_string(i)));
  }
  const size_t total = cluster_->Keys(Prefix() + ":*").size();
  ASSERT_EQ(total, 150u + 150u + 15u);
  // Two plain keys and one co-located key lose their expiry on every primary.
  std::set<std::string> leaked;
  std::map<uint16_t, int> plain_on, colocated_on;
  for (const std::string& key : api_keys) {
    if (plain_on[PrimaryOf(key)]++ < 2) leaked.insert(key);
  }
  for (const std::string& key : user_keys) {
    if (colocated_on[PrimaryOf(key)]++ < 1) leaked.insert(key);
  }
  ASSERT_EQ(plain_on.size(), 3u);
  ASSERT_EQ(colocated_on.size(), 3u);
  ASSERT_EQ(leaked.size(), 9u);
  for (const std::string& key : leaked) {
    ASSERT_EQ(cluster_->CommandForKey(key, {"PERSIST", key}).integer, 1) << key;
  }

  Run audit = Sluice({"audit", "--quiet"});
  EXPECT_EQ(audit.exit_code, 1) << audit.out;
  EXPECT_EQ(audit.json["keys_scanned"], total);
  EXPECT_EQ(audit.json["sluice_keys"], total);
  EXPECT_EQ(audit.json["foreign"], 0);
  EXPECT_EQ(audit.json["leaked"], 9);
  std::set<std::string> found;
  for (const auto& group : audit.json["leaks"]) {
    for (const auto& k : group["keys"]) found.insert(k.get<std::string>());
  }
  EXPECT_EQ(found, leaked);
  // One limiter: its co-located keys, and nothing of the others.
  Run one = Sluice({"audit", "--quiet", "--limiter", "user"});
  EXPECT_EQ(one.json["sluice_keys"], 150);
  EXPECT_EQ(one.json["leaked"], 3);

  Run repair = Sluice({"repair", "--apply"});
  EXPECT_EQ(repair.exit_code, 0) << repair.out;
  EXPECT_EQ(repair.json["expiry_set"], 9);
  EXPECT_EQ(cluster_->KeysWithoutTtl(Prefix() + ":*"), std::vector<std::string>{});
  for (const std::string& key : leaked) {
    EXPECT_GT(cluster_->CommandForKey(key, {"TTL", key}).integer, 0) << key;
  }
  Run again = Sluice({"audit", "--quiet"});
  EXPECT_EQ(again.exit_code, 0) << again.out;
  EXPECT_EQ(again.json["leaked"], 0);
}

TEST_F(ClusterCli, InspectReadsAnIdOnAnyPrimary) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto api = *client->MakeLimiter("api", {.limit = 10, .window = seconds(600)});
  auto user = *client->MakeLimiter("user", {.limit = 10, .window = seconds(600)}, kByTenant);
  // An id of each limiter on each primary.
  std::map<uint16_t, std::string> api_ids, user_ids;
  for (int i = 0; api_ids.size() < 3 || user_ids.size() < 3; ++i) {
    ASSERT_LT(i, 1000);
    const std::string id = "t" + std::to_string(i) + ":u" + std::to_string(i);
    api_ids.emplace(PrimaryOf(*api.KeyFor(id)), id);
    user_ids.emplace(PrimaryOf(*user.KeyFor(id)), id);
  }
  for (const auto& [limiter, ids] : {std::pair{&api, &api_ids}, {&user, &user_ids}}) {
    for (const auto& [port, id] : *ids) {
      for (int i = 0; i < 3; ++i) ASSERT_TRUE(limiter->Check(id)->allowed);
      Run inspect = Sluice({"inspect", "--limiter", limiter->name(), "--id", id});
      ASSERT_EQ(inspect.exit_code, 0) << inspect.out;
      ASSERT_EQ(inspect.json["keys"].size(), 1u) << inspect.out;
      EXPECT_EQ(inspect.json["keys"][0]["key"], *limiter->KeyFor(id));
      EXPECT_EQ(inspect.json["keys"][0]["state"]["count"], 3) << inspect.out;
      EXPECT_GT(inspect.json["keys"][0]["ttl_ms"].get<int64_t>(), 0);
    }
  }
  // The admin API (what sluiced's /admin/inspect calls) reads the same.
  auto admin = Admin::Connect({.url = cluster_->url(), .prefix = Prefix()});
  ASSERT_TRUE(admin.ok()) << admin.status().ToString();
  for (const auto& [port, id] : user_ids) {
    auto state = (*admin)->Inspect("user", id);
    ASSERT_TRUE(state.ok()) << state.status().ToString();
    ASSERT_EQ(state->keys.size(), 1u);
    EXPECT_EQ(state->keys[0].used, 3);
    ASSERT_TRUE(state->keys[0].name.has_value());
    EXPECT_EQ(state->keys[0].name->encoded_slot_tag, id.substr(0, id.find(':')));
  }
}

TEST_F(ClusterCli, ReleaseFreesTheLeasesOfAnIdOnAnyPrimary) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto jobs = *client->MakeConcurrencyLimiter("jobs", {.limit = 3});
  std::map<uint16_t, std::string> ids;
  for (int i = 0; ids.size() < 3; ++i) {
    ASSERT_LT(i, 1000);
    const std::string id = "worker:" + std::to_string(i);
    ids.emplace(PrimaryOf(*jobs.KeyFor(id)), id);
  }
  std::vector<Lease> held;
  for (const auto& [port, id] : ids) {
    for (int i = 0; i < 3; ++i) {
      auto a = jobs.Acquire(id);
      ASSERT_TRUE(a.ok() && a->acquired) << id;
      held.push_back(std::move(a->lease));
    }
    EXPECT_FALSE(jobs.Acquire(id)->acquired);
  }
  char dir[] = "/tmp/sluice-cluster-cli-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string log = std::string(dir) + "/audit.jsonl";
  for (const auto& [port, id] : ids) {
    Run release = Sluice({"release", "--limiter", "jobs", "--id", id, "--actor", "test", "--reason",
                          "cluster", "--audit-log", log});
    ASSERT_EQ(release.exit_code, 0) << release.out;
    EXPECT_EQ(release.json["released"], 3) << release.out;
    EXPECT_EQ(release.json["record"]["outcome"], "done");
    EXPECT_TRUE(jobs.Acquire(id)->acquired) << id;
  }
  const std::string stream = Prefix() + ":audit";
  EXPECT_EQ(cluster_->CommandForKey(stream, {"XLEN", stream}).integer, 3);
  std::filesystem::remove_all(dir);
}

TEST_F(ClusterCli, TopListsCountersOfEveryPrimary) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto api = *client->MakeLimiter("api", {.limit = 1000, .window = seconds(600)});
  auto pool = *client->MakeConcurrencyLimiter("pool", {.limit = 100});
  // 30 ids, id i spending 10 + i: all of them fit in the table (--rows 50).
  std::set<uint16_t> primaries;
  std::vector<Lease> held;
  for (int i = 0; i < 30; ++i) {
    const std::string id = "acct:" + std::to_string(i);
    ASSERT_TRUE(api.Check(id, {.cost = 10 + i})->allowed);
    primaries.insert(PrimaryOf(*api.KeyFor(id)));
    if (i % 5 == 0) {
      auto a = pool.Acquire(id);
      ASSERT_TRUE(a.ok() && a->acquired);
      held.push_back(std::move(a->lease));
    }
  }
  ASSERT_EQ(primaries.size(), 3u);
  Run top = Sluice({"top", "--rows", "50", "--scan-count", "10"});
  ASSERT_EQ(top.exit_code, 0) << top.out;
  std::set<uint16_t> seen;
  int counters = 0;
  for (const auto& row : top.json["counters"]) {
    if (row["limiter"] != "api") continue;
    ++counters;
    const std::string id = row["id"].get<std::string>();
    EXPECT_EQ(row["value"], 10 + std::stoi(id.substr(5))) << id;
    seen.insert(PrimaryOf(*api.KeyFor(id)));
  }
  EXPECT_EQ(counters, 30) << top.out;
  EXPECT_EQ(seen, primaries);
  EXPECT_EQ(top.json["leases"].size(), 6u) << top.out;
}

// Admin::Scan over a cluster: every primary in turn, each key once, and a scan stopped
// after any batch goes on from its cursor (`<node>:<cursor>`) without losing a key.
TEST_F(ClusterCli, AdminScanVisitsEveryPrimaryAndResumesFromItsCursor) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto api = *client->MakeLimiter("api", {.limit = 10, .window = seconds(600)});
  auto user = *client->MakeLimiter("user", {.limit = 10, .window = seconds(600)}, kByTenant);
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(api.Check("a" + std::to_string(i))->allowed);
    ASSERT_TRUE(user.Check("t" + std::to_string(i % 9) + ":u" + std::to_string(i))->allowed);
  }
  std::vector<std::string> expected = cluster_->Keys(Prefix() + ":*");
  std::sort(expected.begin(), expected.end());
  ASSERT_EQ(expected.size(), 400u);
  auto admin = Admin::Connect({.url = cluster_->url(), .prefix = Prefix(), .scan_count = 20});
  ASSERT_TRUE(admin.ok()) << admin.status().ToString();
  EXPECT_GE(*(*admin)->DbSize(), 400);
  std::vector<std::string> keys;
  std::string cursor = "0";
  int stops = 0;
  std::set<std::string> cursors;
  do {
    Status s = (*admin)->Scan({.cursor = cursor}, [&](const ScanBatch& batch) {
      for (const ScannedKey& k : batch.keys) {
        EXPECT_TRUE(k.name.has_value()) << k.key;
        EXPECT_GT(k.ttl_ms, 0) << k.key;
        keys.push_back(k.key);
      }
      cursor = batch.cursor;
      cursors.insert(cursor.substr(0, cursor.find(':')));
      return false;  // stop after every batch, go on from its cursor
    });
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_LT(++stops, 10000);
  } while (cursor != "0");
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  EXPECT_EQ(keys, expected);
  // Cursors named every node.
  EXPECT_TRUE(cursors.count("0") && cursors.count("1") && cursors.count("2"));
  // One limiter's keys, both layouts of the pattern, nothing else.
  std::vector<std::string> users;
  ASSERT_TRUE((*admin)
                  ->Scan({.limiter = "user"},
                         [&](const ScanBatch& batch) {
                           for (const ScannedKey& k : batch.keys) users.push_back(k.key);
                           return true;
                         })
                  .ok());
  EXPECT_EQ(users.size(), 200u);
  for (const std::string& key : users) EXPECT_EQ(key.find(Prefix() + ":{@"), 0u) << key;
  EXPECT_EQ((*admin)->Scan({.cursor = "7:0"}, [](const ScanBatch&) { return true; }).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice
