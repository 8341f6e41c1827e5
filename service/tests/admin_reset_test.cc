// POST /admin/reset end to end: the built sluiced against a private redis-server. A
// refused id of every rate algorithm is admitted again after an audited reset; the
// call's refusals (no token, unknown limit, missing reason, a concurrency limit) change
// nothing and write no record.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "service/tests/audit_lines.h"
#include "service/tests/sluiced_process.h"
#include "testing/redis_server.h"

namespace sluiced::admin_reset_test {
namespace {

using nlohmann::json;
using testing::AuditLines;
using testing::Call;
using testing::HttpReply;
using testing::Sluiced;
using testing::TempDir;

// One rule per algorithm (2 per minute per account) and a concurrency limit.
constexpr const char* kConfig = R"(domain: support
descriptors:
  - key: algo
    value: fixed_window
    descriptors:
      - key: account
        rate_limit: {name: fw, unit: minute, requests_per_unit: 2}
  - key: algo
    value: sliding_window
    descriptors:
      - key: account
        algorithm: sliding_window
        rate_limit: {name: sw, unit: minute, requests_per_unit: 2}
  - key: algo
    value: sliding_log
    descriptors:
      - key: account
        algorithm: sliding_log
        rate_limit: {name: sl, unit: minute, requests_per_unit: 2}
  - key: algo
    value: token_bucket
    descriptors:
      - key: account
        algorithm: token_bucket
        rate_limit: {name: tb, unit: minute, requests_per_unit: 2}
  - key: algo
    value: gcra
    descriptors:
      - key: account
        algorithm: gcra
        rate_limit: {name: gcra, unit: minute, requests_per_unit: 2}
  - key: streams
    descriptors:
      - key: account
        algorithm: concurrency
        lease_ttl: 30s
        rate_limit: {name: streams, requests_per_unit: 1}
)";

const std::string kAuth = "Authorization: Bearer s3cret\r\n";

json Entries(const std::string& algo, const std::string& account) {
  return json::array(
      {{{"key", "algo"}, {"value", algo}}, {{"key", "account"}, {"value", account}}});
}

std::string CheckBody(const std::string& algo, const std::string& account) {
  return json{{"domain", "support"}, {"descriptors", {{{"entries", Entries(algo, account)}}}}}
      .dump();
}

std::string ResetBody(const json& entries, const std::string& actor, const std::string& reason) {
  json j = {{"domain", "support"}, {"entries", entries}};
  if (!actor.empty()) j["actor"] = actor;
  if (!reason.empty()) j["reason"] = reason;
  return j.dump();
}

class AdminReset : public ::testing::Test {
 protected:
  void SetUp() override { config_.Write("support.yaml", kConfig); }
  void TearDown() override {
    EXPECT_EQ(redis_.KeysWithoutTtl("sluice:*"), std::vector<std::string>{});
  }
  sluice::testing::RedisServer redis_;
  TempDir config_;
};

TEST_F(AdminReset, ARefusedIdOfEveryAlgorithmIsAdmittedAgainAndTheResetIsAudited) {
  Sluiced s(config_.path(), redis_.url(), {"--deadline-ms", "200", "--admin-token", "s3cret"});
  std::size_t records = 0;
  for (const std::string algo :
       {"fixed_window", "sliding_window", "sliding_log", "token_bucket", "gcra"}) {
    SCOPED_TRACE(algo);
    const std::string check = CheckBody(algo, "acme");
    for (int i = 0; i < 2; ++i)
      ASSERT_EQ(Call(s.http_port(), "POST", "/v1/check", check).status, 200);
    ASSERT_EQ(Call(s.http_port(), "POST", "/v1/check", check).status, 429) << "locked out";
    // Another account's counter is not touched by the reset.
    const std::string other = CheckBody(algo, "zed");
    for (int i = 0; i < 2; ++i)
      ASSERT_EQ(Call(s.http_port(), "POST", "/v1/check", other).status, 200);

    HttpReply reset =
        Call(s.admin_port(), "POST", "/admin/reset",
             ResetBody(Entries(algo, "acme"), "support@example", "locked out"), kAuth);
    ASSERT_EQ(reset.status, 200) << reset.body;
    const json answer = json::parse(reset.body);
    EXPECT_EQ(answer["remaining"], 2) << reset.body;
    EXPECT_EQ(answer["record"]["action"], "reset");
    EXPECT_EQ(answer["record"]["outcome"], "done");

    HttpReply again = Call(s.http_port(), "POST", "/v1/check", check);
    EXPECT_EQ(again.status, 200) << "admitted again after the reset: " << again.body;
    EXPECT_EQ(json::parse(again.body)["descriptors"][0]["remaining"], 1) << again.body;
    EXPECT_EQ(Call(s.http_port(), "POST", "/v1/check", other).status, 429)
        << "another id keeps its count";

    const std::vector<json> lines = AuditLines(s);
    ASSERT_EQ(lines.size(), ++records) << s.audit_log();
    const json& record = lines.back();
    EXPECT_EQ(record["action"], "reset");
    EXPECT_EQ(record["actor"], "support@example");
    EXPECT_EQ(record["reason"], "locked out");
    EXPECT_EQ(record["algorithm"], algo);
    EXPECT_EQ(record["outcome"], "done");
    EXPECT_FALSE(record["ts"].get<std::string>().empty());
    EXPECT_NE(record["key"].get<std::string>().find("acme"), std::string::npos) << record;
  }
  EXPECT_NE(s.log().find("admin reset"), std::string::npos);
}

TEST_F(AdminReset, RefusedCallsChangeNothingAndWriteNoRecord) {
  Sluiced s(config_.path(), redis_.url(), {"--deadline-ms", "200", "--admin-token", "s3cret"});
  const std::string check = CheckBody("fixed_window", "acme");
  for (int i = 0; i < 2; ++i)
    ASSERT_EQ(Call(s.http_port(), "POST", "/v1/check", check).status, 200);
  const std::string good = ResetBody(Entries("fixed_window", "acme"), "ops", "why");

  EXPECT_EQ(Call(s.admin_port(), "POST", "/admin/reset", good).status, 401) << "no token";
  EXPECT_EQ(
      Call(s.admin_port(), "POST", "/admin/reset", good, "Authorization: Bearer wrong\r\n").status,
      401);
  // No limit matches: 404 (an unknown domain or a descriptor no rule limits).
  HttpReply unknown = Call(s.admin_port(), "POST", "/admin/reset",
                           ResetBody(Entries("nonesuch", "acme"), "ops", "why"), kAuth);
  EXPECT_EQ(unknown.status, 404) << unknown.body;
  json other_domain = json::parse(good);
  other_domain["domain"] = "elsewhere";
  EXPECT_EQ(Call(s.admin_port(), "POST", "/admin/reset", other_domain.dump(), kAuth).status, 404);
  // No actor or reason, a body that is not a descriptor: 400.
  EXPECT_EQ(Call(s.admin_port(), "POST", "/admin/reset",
                 ResetBody(Entries("fixed_window", "acme"), "ops", ""), kAuth)
                .status,
            400);
  EXPECT_EQ(Call(s.admin_port(), "POST", "/admin/reset", "{not json", kAuth).status, 400);
  // A concurrency limit has leases, not a counter: 400 pointing at the release.
  HttpReply concurrency =
      Call(s.admin_port(), "POST", "/admin/reset",
           ResetBody(json::array({{{"key", "streams"}}, {{"key", "account"}, {"value", "acme"}}}),
                     "ops", "why"),
           kAuth);
  EXPECT_EQ(concurrency.status, 400) << concurrency.body;
  EXPECT_NE(concurrency.body.find("/admin/leases/release"), std::string::npos) << concurrency.body;

  EXPECT_EQ(AuditLines(s).size(), 0u) << s.audit_log();
  EXPECT_EQ(Call(s.http_port(), "POST", "/v1/check", check).status, 429)
      << "nothing was reset by a refused call";
}

// The record is written before the store is touched: an audit log sluiced cannot write
// (here a directory where the file should be) refuses the action with the server's error,
// 500 naming the log, and the counter is not reset.
TEST_F(AdminReset, AnAuditLogThatCannotBeWrittenRefusesTheResetWith500) {
  Sluiced s(config_.path(), redis_.url(), {"--deadline-ms", "200", "--admin-token", "s3cret"});
  const std::string check = CheckBody("fixed_window", "acme");
  for (int i = 0; i < 2; ++i)
    ASSERT_EQ(Call(s.http_port(), "POST", "/v1/check", check).status, 200);
  ASSERT_EQ(Call(s.http_port(), "POST", "/v1/check", check).status, 429);
  ASSERT_TRUE(std::filesystem::create_directory(s.audit_log_path()));
  HttpReply reset = Call(s.admin_port(), "POST", "/admin/reset",
                         ResetBody(Entries("fixed_window", "acme"), "ops", "why"), kAuth);
  EXPECT_EQ(reset.status, 500) << reset.body;
  EXPECT_NE(reset.body.find("audit"), std::string::npos) << reset.body;
  EXPECT_EQ(Call(s.http_port(), "POST", "/v1/check", check).status, 429)
      << "the counter was reset without its audit record";
}

}  // namespace
}  // namespace sluiced::admin_reset_test
