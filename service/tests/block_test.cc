// A rule's block_duration through the built sluiced against a private redis-server: the
// refusal over the limit answers 429 with the block's Retry-After, the id's next checks
// are refused as blocked (whatever the bucket has refilled meanwhile), /admin/inspect
// shows the block with its end, and /admin/reset clears it.
#include <nlohmann/json.hpp>

#include <chrono>
#include <string>
#include <thread>

#include "service/tests/sluiced_process.h"
#include "testing/redis_server.h"

namespace sluiced::block_test {
namespace {

using nlohmann::json;
using testing::Call;
using testing::HttpReply;
using testing::Sluiced;
using testing::TempDir;

// Two sign-in attempts, refilled at two a second, then a 30 s block: the block, not the
// bucket's half second, decides when the next attempt may pass.
constexpr char kConfig[] = R"(domain: auth
descriptors:
  - key: login
    algorithm: token_bucket
    rate_limit: {unit: second, requests_per_unit: 2}
    block_duration: 30s
)";
const std::string kAuth = "Authorization: Bearer s3cret\r\n";

json Entries(const std::string& user) {
  return json::array({{{"key", "login"}, {"value", user}}});
}
std::string CheckBody(const std::string& user) {
  return json{{"domain", "auth"}, {"descriptors", {{{"entries", Entries(user)}}}}}.dump();
}

TEST(BlockDuration, ARefusalAnswers429WithTheBlocksRetryAfterUntilAnAdminReset) {
  sluice::testing::RedisServer redis;
  TempDir config;
  config.Write("auth.yaml", kConfig);
  Sluiced s(config.path(), redis.url(), {"--deadline-ms", "2000", "--admin-token", "s3cret"});
  for (int i = 0; i < 2; ++i)
    ASSERT_EQ(Call(s.http_port(), "POST", "/v1/check", CheckBody("ann")).status, 200);
  HttpReply refused = Call(s.http_port(), "POST", "/v1/check", CheckBody("ann"));
  ASSERT_EQ(refused.status, 429) << refused.body;
  EXPECT_EQ(refused.header("retry-after"), "30") << "the block's, not the bucket's";
  const json d = json::parse(refused.body)["descriptors"][0];
  EXPECT_EQ(d["blocked"], true) << refused.body;
  EXPECT_EQ(d["retry_after_ms"], 30000);
  // The bucket refills a token within 500 ms; the id stays refused.
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  HttpReply held = Call(s.http_port(), "POST", "/v1/check", CheckBody("ann"));
  EXPECT_EQ(held.status, 429) << held.body;
  const json h = json::parse(held.body)["descriptors"][0];
  EXPECT_EQ(h["blocked"], true);
  EXPECT_LE(h["retry_after_ms"].get<int64_t>(), 29400);
  EXPECT_EQ(Call(s.http_port(), "POST", "/v1/check", CheckBody("bob")).status, 200);
  // The block in /admin/inspect: its key beside the bucket's, with its end.
  const std::string which = json{{"domain", "auth"}, {"entries", Entries("ann")}}.dump();
  HttpReply inspect = Call(s.admin_port(), "POST", "/admin/inspect", which, kAuth);
  ASSERT_EQ(inspect.status, 200) << inspect.body;
  bool shown = false;
  const json inspected = json::parse(inspect.body);
  for (const json& k : inspected["keys"]) {
    if (!k["fields"].contains("blocked_until_ms")) continue;
    shown = true;
    EXPECT_NE(k["key"].get<std::string>().find("tb.blk"), std::string::npos) << k;
    EXPECT_GT(k["fields"]["block_ends_in_ms"].get<int64_t>(), 0) << k;
    EXPECT_LE(k["fields"]["block_ends_in_ms"].get<int64_t>(), 30000) << k;
    EXPECT_GT(k["ttl_ms"].get<int64_t>(), 0) << k;
  }
  EXPECT_TRUE(shown) << inspect.body;
  // An audited reset clears the block.
  const json reset = {{"domain", "auth"},
                      {"entries", Entries("ann")},
                      {"actor", "support@example"},
                      {"reason", "forgot password"}};
  HttpReply cleared = Call(s.admin_port(), "POST", "/admin/reset", reset.dump(), kAuth);
  ASSERT_EQ(cleared.status, 200) << cleared.body;
  HttpReply after = Call(s.http_port(), "POST", "/v1/check", CheckBody("ann"));
  EXPECT_EQ(after.status, 200) << after.body;
  EXPECT_EQ(redis.KeysWithoutTtl("sluice:*"), std::vector<std::string>{});
}

}  // namespace
}  // namespace sluiced::block_test
