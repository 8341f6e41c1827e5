// The ACL rule sets of docs/design.md ("ACL users"), read from that page so that the
// documented rules are the tested ones: sluice's limiter works under the limiter's set
// (every algorithm, a composite, a lease, an audited release, quota shares; on a cluster with the
// cluster additions), the operator's read-only tools (audit, inspect) under the
// read-only set, and what lies outside a set is refused with a clear NOPERM error
// (repair under the read-only user, another prefix, FLUSHALL), never a crash.
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <future>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "redis/blocking_client.h"
#include "redis/endpoint.h"
#include "redis/resp.h"
#include "sluice/sluice.h"
#include "testing/eventually.h"
#include "testing/redis_cluster.h"
#include "testing/redis_server.h"
#include "testing/status_matchers.h"
#include "tests/run_command.h"

namespace sluice {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;
using testing::IsOk;
using testing::StatusIs;

constexpr const char* kPassword = "acl-test-pw";

// The lines of docs/design.md that start with "ACL SETUSER <user> ", each as arguments,
// in the page's order (the base set first, then the additions by deployment).
std::vector<std::vector<std::string>> DocumentedRules(const std::string& user) {
  std::ifstream in(std::string(SLUICE_SOURCE_DIR) + "/docs/design.md");
  EXPECT_TRUE(in) << "cannot read docs/design.md";
  std::vector<std::vector<std::string>> lines;
  std::string line;
  const std::string head = "ACL SETUSER " + user + " ";
  while (std::getline(in, line)) {
    if (!line.starts_with(head)) continue;
    std::istringstream words(line);
    std::vector<std::string> args;
    for (std::string w; words >> w;) {
      args.push_back(w == ">PASSWORD" ? ">" + std::string(kPassword) : w);
    }
    lines.push_back(std::move(args));
  }
  if (lines.empty()) ADD_FAILURE() << "docs/design.md has no line starting with \"" << head << "\"";
  return lines;
}

class AclTest : public ::testing::Test {
 protected:
  AclTest() {
    for (const char* user : {"sluice-app", "sluice-audit"}) {
      auto rules = DocumentedRules(user);
      if (rules.empty()) continue;                              // DocumentedRules failed the test
      testing::RedisValue ok = server_.Command(rules.front());  // the base set only
      EXPECT_EQ(ok.str, "OK") << user << ": " << ok.str;
    }
  }
  std::string Url(const std::string& user) const {
    return "redis://" + user + ":" + kPassword + "@127.0.0.1:" + std::to_string(server_.port());
  }
  void TearDown() override {
    EXPECT_EQ(server_.KeysWithoutTtl("sluice:*"), std::vector<std::string>{});
  }
  testing::RedisServer server_;
};

TEST_F(AclTest, TheLimiterWorksUnderItsRules) {
  auto client = Client::Create({.url = Url("sluice-app"),
                                .deadline = milliseconds(2000),
                                .on_failure = FailurePolicy::kClosed});
  ASSERT_THAT(client, IsOk());
  std::vector<Limiter> limiters;
  for (auto algorithm : {Algorithm::kFixedWindow, Algorithm::kSlidingWindow, Algorithm::kSlidingLog,
                         Algorithm::kTokenBucket, Algorithm::kGcra}) {
    auto limiter =
        (*client)->MakeLimiter(std::string(AlgorithmName(algorithm)),
                               {.algorithm = algorithm, .limit = 2, .window = seconds(60)});
    ASSERT_THAT(limiter, IsOk());
    for (int i = 0; i < 2; ++i) {
      auto d = limiter->Check("u");
      ASSERT_THAT(d, IsOk());
      EXPECT_EQ(d->source, DecisionSource::kStore) << AlgorithmName(algorithm);
      EXPECT_TRUE(d->allowed) << AlgorithmName(algorithm);
    }
    EXPECT_FALSE(limiter->Check("u")->allowed) << AlgorithmName(algorithm);
    EXPECT_THAT(limiter->Peek("u"), IsOk());
    EXPECT_THAT(limiter->Reset("u"), IsOk());
    limiters.push_back(*std::move(limiter));
  }
  // Several limits in one script.
  std::vector<LimitCheck> checks = {{&limiters[0], "c"}, {&limiters[4], "c"}};
  auto composite = CheckComposite(checks, {});
  ASSERT_THAT(composite, IsOk());
  EXPECT_TRUE(composite->decision.allowed);
  EXPECT_EQ(composite->decision.source, DecisionSource::kStore);
  // A lease, its heartbeat, and an operator's audited release (the stream too).
  auto streams =
      (*client)->MakeConcurrencyLimiter("streams", {.limit = 2, .lease_ttl = seconds(10)});
  ASSERT_THAT(streams, IsOk());
  auto a = streams->Acquire("u");
  ASSERT_THAT(a, IsOk());
  ASSERT_TRUE(a->acquired);
  EXPECT_THAT(a->lease.Heartbeat(), IsOk());
  char log[] = "/tmp/sluice-acl-XXXXXX";
  const int fd = ::mkstemp(log);
  ASSERT_GE(fd, 0);
  ::close(fd);
  auto released = ReleaseAll(*streams, "u", {.actor = "test", .reason = "acl"},
                             {.log_path = log, .stream = true});
  ::unlink(log);
  ASSERT_THAT(released, IsOk());
  EXPECT_EQ(released->released, 1);
  EXPECT_EQ(released->stream_error, "");
  EXPECT_EQ(server_.Command({"XLEN", "sluice:audit"}).integer, 1);
  // A waiting acquire: its ticket, the release's SPUBLISH and the subscriber's SSUBSCRIBE.
  auto one = (*client)->MakeConcurrencyLimiter("one", {.limit = 1, .lease_ttl = seconds(10)});
  ASSERT_THAT(one, IsOk());
  auto held = one->Acquire("w");
  ASSERT_TRUE(held.ok() && held->acquired);
  std::promise<StatusOr<Acquisition>> waited;
  one->AcquireAsync("w", {.wait = seconds(10)},
                    [&waited](StatusOr<Acquisition> w) { waited.set_value(std::move(w)); });
  ASSERT_TRUE(testing::Eventually([&] {
    return server_.Command({"ZCARD", *one->KeyFor("w") + "w"}).integer == 1;
  }));
  server_.Command({"CONFIG", "RESETSTAT"});
  EXPECT_THAT(held->lease.Release(), IsOk());
  auto got = waited.get_future().get();
  ASSERT_THAT(got, IsOk());
  EXPECT_TRUE(got->acquired);
  EXPECT_EQ(server_.CommandCalls("spublish"), 1) << "the release's wake-up was refused";
  // Quota shares: an assignment and a release.
  auto shares = (*client)->MakeQuotaShares("rlqs");
  ASSERT_THAT(shares, IsOk());
  auto grant = shares->AssignSync(
      {.id = "b", .client = "c", .demand_milli = 10, .rate_milli = 100, .hold = seconds(10)});
  ASSERT_THAT(grant, IsOk());
  EXPECT_EQ(grant->grant_milli, 20);
  EXPECT_THAT(shares->AssignSync({.id = "b", .client = "c", .release = true}), IsOk());
}

// A user without a hash command the script reads with (+hget: set up by the docs before
// quota shares kept their sums in the bucket): an assignment is refused with the ACL's
// error and leaves the bucket as it was, never taking the refusal for a value of another
// type and deleting the others' grants.
TEST_F(AclTest, AQuotaAssignmentRefusedByTheAclLeavesTheBucketAsItWas) {
  auto client = Client::Create({.url = Url("sluice-app"), .deadline = milliseconds(2000)});
  ASSERT_THAT(client, IsOk());
  auto shares = *(*client)->MakeQuotaShares("rlqs");
  QuotaShareRequest r{
      .id = "b", .client = "a", .demand_milli = 10, .rate_milli = 100, .hold = seconds(10)};
  ASSERT_THAT(shares.AssignSync(r), IsOk());
  server_.Command({"ACL", "SETUSER", "sluice-app", "-hget"});
  r.client = "b";
  EXPECT_THAT(shares.AssignSync(r), StatusIs(StatusCode::kPermissionDenied, HasSubstr("NOPERM")));
  const std::string key = *shares.KeyFor("b");
  EXPECT_EQ(server_.Command({"HEXISTS", key, "a"}).integer, 1);
  EXPECT_EQ(server_.Command({"HEXISTS", key, "b"}).integer, 0);
}

// A user set up by the docs before the one-value scripts wrote with SETRANGE (no
// +setrange): those scripts fall back to SET … PX, so an upgrade decides as before, with
// every key's expiry, before anyone changes the ACL.
TEST_F(AclTest, AUserWithoutSetrangeStillDecidesEveryOneValueAlgorithm) {
  server_.Command({"ACL", "SETUSER", "sluice-app", "-setrange"});
  auto client = Client::Create({.url = Url("sluice-app"),
                                .deadline = milliseconds(2000),
                                .on_failure = FailurePolicy::kClosed});
  ASSERT_THAT(client, IsOk());
  for (auto algorithm : {Algorithm::kSlidingWindow, Algorithm::kTokenBucket, Algorithm::kGcra}) {
    const std::string name(AlgorithmName(algorithm));
    auto limiter =
        (*client)->MakeLimiter(name, {.algorithm = algorithm, .limit = 3, .window = seconds(60)});
    ASSERT_THAT(limiter, IsOk());
    for (int i = 0; i < 3; ++i) {
      auto d = limiter->Check("u");
      ASSERT_THAT(d, IsOk());
      EXPECT_EQ(d->source, DecisionSource::kStore) << name;
      EXPECT_TRUE(d->allowed) << name;
      EXPECT_EQ(d->remaining, 2 - i) << name;
    }
    auto refused = limiter->Check("u");
    ASSERT_THAT(refused, IsOk());
    EXPECT_FALSE(refused->allowed) << name;
    EXPECT_EQ(refused->source, DecisionSource::kStore) << name;
  }
  // Each id's state was written (3 keys), each with its expiry (TearDown).
  EXPECT_EQ(server_.Command({"DBSIZE"}).integer, 3);
  // Written by the fallback: one SET … PX per admitted request (a refusal writes nothing).
  EXPECT_EQ(server_.CommandCalls("set"), 9);
}

TEST_F(AclTest, WhatLiesOutsideTheLimitersRulesIsRefused) {
  auto endpoint = internal::ParseRedisUrl(Url("sluice-app"));
  ASSERT_THAT(endpoint, IsOk());
  auto redis = internal::BlockingClient::Connect(*endpoint, {});
  ASSERT_THAT(redis, IsOk());
  for (const std::vector<std::string>& command : {std::vector<std::string>{"FLUSHALL"},
                                                  {"SET", "other:x", "1"},
                                                  {"KEYS", "*"},
                                                  {"CONFIG", "GET", "*"},
                                                  {"GET", "another-app:key"}}) {
    auto reply = (*redis)->Command(command);
    ASSERT_THAT(reply, IsOk());
    EXPECT_EQ(reply->type, testing::RedisValue::Type::kError) << command[0];
    EXPECT_THAT(reply->str, HasSubstr("NOPERM")) << command[0];
  }
  // A limiter under another prefix: its scripts' keys are outside ~sluice:*.
  auto other = Client::Create({.url = Url("sluice-app"),
                               .prefix = "other",
                               .deadline = milliseconds(2000),
                               .on_failure = FailurePolicy::kClosed});
  ASSERT_THAT(other, IsOk());
  auto limiter = (*other)->MakeLimiter("x", {.limit = 2, .window = seconds(60)});
  ASSERT_THAT(limiter, IsOk());
  auto d = limiter->Check("u");
  ASSERT_THAT(d, IsOk());
  EXPECT_EQ(d->source, DecisionSource::kFailClosed);
  EXPECT_EQ(server_.Keys("other:*"), std::vector<std::string>{});
}

TEST_F(AclTest, AuditAndInspectWorkUnderTheReadOnlyRules) {
  {
    auto client = Client::Create({.url = Url("sluice-app"), .deadline = milliseconds(2000)});
    ASSERT_THAT(client, IsOk());
    auto limiter = (*client)->MakeLimiter("seen", {.limit = 5, .window = seconds(60)});
    ASSERT_THAT(limiter, IsOk());
    EXPECT_TRUE(limiter->Check("u")->allowed);
    // A quota shares bucket is sluice's too (a hash under `:qs` and its expiry index under
    // `:qx`), not a foreign key.
    auto shares = (*client)->MakeQuotaShares("rlqs");
    ASSERT_THAT(shares, IsOk());
    EXPECT_THAT(
        shares->AssignSync(
            {.id = "b", .client = "c", .demand_milli = 10, .rate_milli = 100, .hold = seconds(60)}),
        IsOk());
  }
  auto admin = Admin::Connect({.url = Url("sluice-audit")});
  ASSERT_THAT(admin, IsOk());
  EXPECT_THAT((*admin)->DbSize(), IsOk());
  int64_t keys = 0;
  ASSERT_THAT((*admin)->Scan({},
                             [&](const ScanBatch& batch) {
                               keys += static_cast<int64_t>(batch.keys.size());
                               for (const ScannedKey& k : batch.keys) {
                                 EXPECT_FALSE(k.foreign()) << k.key;
                               }
                               return true;
                             }),
              IsOk());
  EXPECT_EQ(keys, 3);
  auto state = (*admin)->Inspect("seen", "u");
  ASSERT_THAT(state, IsOk());
  // The CLI end to end: audit finds nothing to report (exit 0).
  auto audit = testing::RunCommand(std::string(SLUICE_CLI_PATH) + " audit --quiet --redis " +
                                   Url("sluice-audit") + " 2>&1");
  EXPECT_EQ(audit.exit_code, 0) << audit.output;
  // The read-only user cannot write through the scripts it may run either.
  auto endpoint = internal::ParseRedisUrl(Url("sluice-audit"));
  ASSERT_THAT(endpoint, IsOk());
  auto redis = internal::BlockingClient::Connect(*endpoint, {});
  ASSERT_THAT(redis, IsOk());
  auto write =
      (*redis)->Command({"EVAL", "return redis.call('SET', KEYS[1], 'x')", "1", "sluice:w"});
  ASSERT_THAT(write, IsOk());
  EXPECT_EQ(write->type, testing::RedisValue::Type::kError);
  // Refused for permissions, in whichever words the server uses inside a script (Redis
  // 7.0: "... can't run this command ..."; Redis 7.2 and later, Valkey: "ACL failure in
  // script: User ... has no permissions to run the 'set' command"): read as the library
  // reads every error reply, and nothing was written.
  EXPECT_THAT(internal::ErrorReplyToStatus(write->str, "acl test"),
              StatusIs(StatusCode::kPermissionDenied))
      << write->str;
  EXPECT_EQ(server_.Command({"EXISTS", "sluice:w"}).integer, 0) << "the refused SET wrote";
}

TEST_F(AclTest, RepairUnderTheReadOnlyUserSaysNoperm) {
  // A key that lost its expiry: what repair would fix.
  server_.Command({"SET", "sluice:{leaked:u}:fw", "1:99999999999999"});
  auto admin = Admin::Connect({.url = Url("sluice-audit")});
  ASSERT_THAT(admin, IsOk());
  const std::vector<std::pair<std::string, seconds>> candidates = {
      {"sluice:{leaked:u}:fw", seconds(60)}};
  auto result = (*admin)->ExpireIfNone(candidates);
  EXPECT_THAT(result, StatusIs(StatusCode::kPermissionDenied, HasSubstr("NOPERM")));
  auto repair = testing::RunCommand(std::string(SLUICE_CLI_PATH) + " repair --apply --redis " +
                                    Url("sluice-audit") + " 2>&1");
  EXPECT_NE(repair.exit_code, 0) << repair.output;
  EXPECT_LT(repair.exit_code, 128) << "a clear error, not a crash: " << repair.output;
  EXPECT_THAT(repair.output, HasSubstr("permission_denied"));
  EXPECT_THAT(repair.output, HasSubstr("ACL refusal, as NOPERM"));
  EXPECT_EQ(server_.Command({"PTTL", "sluice:{leaked:u}:fw"}).integer, -1) << "nothing changed";
  server_.Command({"DEL", "sluice:{leaked:u}:fw"});
}

// On a Redis Cluster the limiter's set plus its cluster additions, on every node: the
// router reads the slot map and every primary decides its slots.
TEST(AclCluster, TheLimiterWorksUnderTheClusterRules) {
  testing::RedisCluster cluster({.primaries = 3});
  for (const auto& node : cluster.nodes()) {
    for (const auto& rules : DocumentedRules("sluice-app")) {
      testing::RedisValue ok = node->Command(rules);
      ASSERT_EQ(ok.str, "OK") << ok.str;
    }
  }
  std::string url = cluster.url();
  url.replace(url.find("//") + 2, 0, std::string("sluice-app:") + kPassword + "@");
  auto client = Client::Create(
      {.url = url, .deadline = milliseconds(2000), .on_failure = FailurePolicy::kClosed});
  ASSERT_THAT(client, IsOk());
  auto limiter = (*client)->MakeLimiter("spread", {.limit = 1, .window = seconds(60)});
  ASSERT_THAT(limiter, IsOk());
  for (int id = 0; id < 30; ++id) {
    auto d = limiter->Check("id-" + std::to_string(id));
    ASSERT_THAT(d, IsOk());
    EXPECT_EQ(d->source, DecisionSource::kStore);
    EXPECT_TRUE(d->allowed);
  }
  EXPECT_EQ(cluster.Keys("sluice:*").size(), 30u);
  EXPECT_EQ(cluster.KeysWithoutTtl("sluice:*"), std::vector<std::string>{});
}

}  // namespace
}  // namespace sluice
