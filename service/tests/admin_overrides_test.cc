// Runtime overrides end to end: two built sluiced on one private redis-server. An
// override set through one instance's admin API is used by the other's checks within
// its refresh (waited for, bounded; the answer says "override":"runtime"), listed by
// GET /admin/overrides and /admin/config, cleared through the other instance, and each
// action audited; a concurrency limit's cap is overridden too; bad requests are refused
// and write nothing.
#include <nlohmann/json.hpp>

#include <sstream>
#include <string>
#include <vector>

#include "service/tests/audit_lines.h"
#include "service/tests/sluiced_process.h"
#include "testing/eventually.h"
#include "testing/redis_server.h"

namespace sluiced::admin_overrides_test {
namespace {

using nlohmann::json;
using testing::AuditLines;
using testing::Call;
using testing::HttpReply;
using testing::Sluiced;
using testing::TempDir;

constexpr const char* kConfig = R"(domain: support
descriptors:
  - key: account
    rate_limit: {name: per_account, unit: minute, requests_per_unit: 2}
  - key: streams
    descriptors:
      - key: account
        algorithm: concurrency
        lease_ttl: 30s
        rate_limit: {name: streams, requests_per_unit: 1}
)";

const std::string kAuth = "Authorization: Bearer s3cret\r\n";

const json kAccount = json::array({{{"key", "account"}, {"value", "acme"}}});
const json kStreams = json::array({{{"key", "streams"}}, {{"key", "account"}, {"value", "acme"}}});

std::string Check() {
  return json{{"domain", "support"}, {"descriptors", {{{"entries", kAccount}}}}}.dump();
}

json Target(const json& entries) {
  return {{"domain", "support"}, {"entries", entries}, {"actor", "ana"}, {"reason", "ticket 7"}};
}

class AdminOverrides : public ::testing::Test {
 protected:
  void SetUp() override { config_.Write("support.yaml", kConfig); }
  void TearDown() override {
    EXPECT_EQ(redis_.KeysWithoutTtl("sluice:*"), std::vector<std::string>{});
  }
  sluice::testing::RedisServer redis_;
  TempDir config_;
};

TEST_F(AdminOverrides, SetThroughOneInstanceUsedByAnotherThenCleared) {
  const std::vector<std::string> args = {"--deadline-ms", "200", "--admin-token", "s3cret"};
  Sluiced one(config_.path(), redis_.url(), args);
  Sluiced two(config_.path(), redis_.url(), args);
  for (int i = 0; i < 2; ++i)
    ASSERT_EQ(Call(two.http_port(), "POST", "/v1/check", Check()).status, 200);
  ASSERT_EQ(Call(two.http_port(), "POST", "/v1/check", Check()).status, 429);

  json set = Target(kAccount);
  set["limit"] = 500;
  set["ttl_s"] = 86400;
  HttpReply r = Call(one.admin_port(), "POST", "/admin/overrides", set.dump(), kAuth);
  ASSERT_EQ(r.status, 200) << r.body;
  const json answer = json::parse(r.body);
  EXPECT_EQ(answer["override"]["limit"], 500);
  EXPECT_EQ(answer["override"]["window_ms"], 60000) << "the rule's own window";
  EXPECT_EQ(answer["override"]["actor"], "ana");
  EXPECT_EQ(answer["record"]["action"], "override_set");
  EXPECT_EQ(answer["record"]["old"], "limiter");
  EXPECT_EQ(answer["record"]["old_limit"], 2);

  // The other instance's refresh brings it within its bound: waited for, then the answer
  // says which limit applied.
  json d;
  ASSERT_TRUE(sluice::testing::Eventually(
      [&] {
        HttpReply c = Call(two.http_port(), "POST", "/v1/check", Check());
        d = json::parse(c.body, nullptr, false);
        return c.status == 200 && d["descriptors"][0].value("override", "") == "runtime";
      },
      std::chrono::seconds(10)))
      << d;
  EXPECT_EQ(d["descriptors"][0]["limit"]["requests_per_unit"], 500) << d;

  HttpReply listed = Call(two.admin_port(), "GET", "/admin/overrides", "", kAuth);
  ASSERT_EQ(listed.status, 200) << listed.body;
  const json overrides = json::parse(listed.body)["overrides"];
  ASSERT_EQ(overrides.size(), 1u) << listed.body;
  EXPECT_EQ(overrides[0]["domain"], "support");
  EXPECT_EQ(overrides[0]["id"], "account=acme");
  EXPECT_EQ(overrides[0]["reason"], "ticket 7");
  HttpReply config = Call(two.admin_port(), "GET", "/admin/config", "", kAuth);
  ASSERT_EQ(config.status, 200);
  EXPECT_EQ(json::parse(config.body)["runtime_overrides"]["overrides"].size(), 1u) << config.body;

  // Cleared through the other instance: the first one's checks follow within the bound.
  HttpReply cleared =
      Call(two.admin_port(), "POST", "/admin/overrides/clear", Target(kAccount).dump(), kAuth);
  ASSERT_EQ(cleared.status, 200) << cleared.body;
  EXPECT_EQ(json::parse(cleared.body)["cleared"], true);
  ASSERT_TRUE(sluice::testing::Eventually(
      [&] { return Call(one.http_port(), "POST", "/v1/check", Check()).status == 429; },
      std::chrono::seconds(10)));

  const std::vector<json> ones = AuditLines(one), twos = AuditLines(two);
  ASSERT_EQ(ones.size(), 1u) << one.audit_log();
  EXPECT_EQ(ones[0]["action"], "override_set");
  EXPECT_EQ(ones[0]["limit"], 500);
  EXPECT_EQ(ones[0]["outcome"], "done");
  ASSERT_EQ(twos.size(), 1u) << two.audit_log();
  EXPECT_EQ(twos[0]["action"], "override_clear");
  EXPECT_EQ(twos[0]["cleared"], true);
  EXPECT_EQ(twos[0]["old"], "runtime");
  EXPECT_EQ(twos[0]["old_limit"], 500);
}

TEST_F(AdminOverrides, ACapOfZeroRefusesAcquiresAndBadRequestsWriteNothing) {
  Sluiced s(config_.path(), redis_.url(), {"--deadline-ms", "200", "--admin-token", "s3cret"});
  json bad = Target(kAccount);
  bad["limit"] = 5;
  bad["ttl_s"] = 31 * 86400;
  EXPECT_EQ(Call(s.admin_port(), "POST", "/admin/overrides", bad.dump(), kAuth).status, 400);
  bad["ttl_s"] = 60;
  bad["limit"] = -1;
  EXPECT_EQ(Call(s.admin_port(), "POST", "/admin/overrides", bad.dump(), kAuth).status, 400);
  bad["limit"] = 5;
  EXPECT_EQ(Call(s.admin_port(), "POST", "/admin/overrides", bad.dump()).status, 401);
  EXPECT_EQ(AuditLines(s).size(), 0u) << s.audit_log();

  json zero = Target(kStreams);
  zero["limit"] = 0;
  zero["ttl_s"] = 600;
  HttpReply r = Call(s.admin_port(), "POST", "/admin/overrides", zero.dump(), kAuth);
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string acquire = json{{"domain", "support"}, {"entries", kStreams}}.dump();
  HttpReply refused = Call(s.http_port(), "POST", "/v1/leases", acquire);
  EXPECT_EQ(refused.status, 429) << refused.body;
  EXPECT_EQ(json::parse(refused.body)["override"], "runtime") << refused.body;
}

}  // namespace
}  // namespace sluiced::admin_overrides_test
