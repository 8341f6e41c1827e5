// Reservations through the built sluiced against a private redis-server: POST
// /v1/reservations holds each descriptor's estimate (all or nothing) and hands over a
// handle; POST /v1/reservations/{handle}/settle corrects it to the actual, once, on any
// instance (two sluiced on one Redis: reserved on one, settled on the other); a forged or
// garbled handle settles nothing.
#include <nlohmann/json.hpp>

#include <string>

#include "service/tests/sluiced_process.h"
#include "testing/redis_server.h"

namespace sluiced::reservation_test {
namespace {

using nlohmann::json;
using testing::Call;
using testing::HttpReply;
using testing::Sluiced;
using testing::TempDir;

// Tokens per minute per account, a smaller per-model limit, and a concurrency limit
// (which takes no reservations).
constexpr char kConfig[] = R"(domain: ai
descriptors:
  - key: account
    rate_limit: {unit: minute, requests_per_unit: 10000}
  - key: model
    rate_limit: {unit: minute, requests_per_unit: 5000}
  - key: streams
    algorithm: concurrency
    rate_limit: {requests_per_unit: 2}
)";

json Descriptor(const std::string& key, const std::string& value) {
  return {{"entries", json::array({{{"key", key}, {"value", value}}})}};
}

std::string Body(std::vector<json> descriptors, int hits) {
  return json{{"domain", "ai"}, {"hits", hits}, {"descriptors", descriptors}}.dump();
}

std::string Settle(int hits) {
  return json{{"hits", hits}}.dump();
}

class Reservations : public ::testing::Test {
 protected:
  void SetUp() override { config_.Write("ai.yaml", kConfig); }
  void TearDown() override {
    EXPECT_EQ(redis_.KeysWithoutTtl("sluice:*"), std::vector<std::string>{});
  }
  // What is left of `value`'s account budget (a check of 0 hits spends nothing).
  static int64_t Left(const Sluiced& s, const std::string& value) {
    const HttpReply peek =
        Call(s.http_port(), "POST", "/v1/check", Body({Descriptor("account", value)}, 0));
    return json::parse(peek.body)["descriptors"][0]["remaining"];
  }
  sluice::testing::RedisServer redis_;
  TempDir config_;
};

TEST_F(Reservations, ReservedOnOneInstanceSettledOnAnother) {
  Sluiced a(config_.path(), redis_.url(), {"--deadline-ms", "2000"});
  Sluiced b(config_.path(), redis_.url(), {"--deadline-ms", "2000"});
  HttpReply reserved =
      Call(a.http_port(), "POST", "/v1/reservations", Body({Descriptor("account", "acme")}, 4000));
  ASSERT_EQ(reserved.status, 200) << reserved.body;
  const std::string handle = json::parse(reserved.body)["handle"];
  EXPECT_EQ(json::parse(reserved.body)["descriptors"][0]["remaining"], 6000);
  EXPECT_EQ(Left(b, "acme"), 6000) << "held in Redis: every instance sees it";
  // The stream used 3,000 tokens: 1,000 come back, settled through the other instance.
  HttpReply settled =
      Call(b.http_port(), "POST", "/v1/reservations/" + handle + "/settle", Settle(3000));
  ASSERT_EQ(settled.status, 200) << settled.body;
  json s = json::parse(settled.body);
  EXPECT_EQ(s["outcome"], "settled");
  EXPECT_EQ(s["settled_hits"], 3000);
  EXPECT_EQ(s["descriptors"][0]["remaining"], 7000);
  EXPECT_EQ(s["descriptors"][0]["debt"], 0);
  EXPECT_EQ(Left(a, "acme"), 7000);
  // Once only: the first instance's retry of the same settle changes nothing.
  settled = Call(a.http_port(), "POST", "/v1/reservations/" + handle + "/settle", Settle(0));
  ASSERT_EQ(settled.status, 409) << settled.body;
  EXPECT_EQ(json::parse(settled.body)["outcome"], "already_settled");
  EXPECT_EQ(json::parse(settled.body)["settled_hits"], 3000);
  EXPECT_EQ(Left(a, "acme"), 7000);
}

TEST_F(Reservations, SettlingMoreGoesIntoDebtAndRefusedHoldsNothing) {
  Sluiced s(config_.path(), redis_.url(), {"--deadline-ms", "2000"});
  // Two descriptors, one handle: all or nothing.
  const std::string two = Body({Descriptor("account", "big"), Descriptor("model", "m1")}, 3000);
  HttpReply reserved = Call(s.http_port(), "POST", "/v1/reservations", two);
  ASSERT_EQ(reserved.status, 200) << reserved.body;
  const std::string handle = json::parse(reserved.body)["handle"];
  // The stream ran long: 12,000 tokens, over both limits.
  HttpReply settled =
      Call(s.http_port(), "POST", "/v1/reservations/" + handle + "/settle", Settle(12000));
  ASSERT_EQ(settled.status, 200) << settled.body;
  json j = json::parse(settled.body);
  EXPECT_EQ(j["descriptors"][0]["debt"], 2000) << settled.body;
  EXPECT_EQ(j["descriptors"][1]["debt"], 5000) << "bounded at the limit";
  EXPECT_EQ(j["code"], "OVER_LIMIT") << "the next request is refused";
  // Refused (the model limit is in debt): nothing held on the account either.
  const int64_t before = Left(s, "big2");
  reserved = Call(s.http_port(), "POST", "/v1/reservations",
                  Body({Descriptor("account", "big2"), Descriptor("model", "m1")}, 100));
  ASSERT_EQ(reserved.status, 429) << reserved.body;
  EXPECT_FALSE(json::parse(reserved.body).contains("handle"));
  EXPECT_EQ(Left(s, "big2"), before) << "the account's hold was given back";
  // A concurrency limit takes no reservation: the whole request is refused.
  reserved = Call(s.http_port(), "POST", "/v1/reservations",
                  Body({Descriptor("account", "c"), Descriptor("streams", "c")}, 1));
  EXPECT_EQ(reserved.status, 400) << reserved.body;
  EXPECT_EQ(Left(s, "c"), 10000);
}

TEST_F(Reservations, AForgedOrGarbledHandleSettlesNothing) {
  Sluiced s(config_.path(), redis_.url(), {"--deadline-ms", "2000"});
  HttpReply reserved = Call(s.http_port(), "POST", "/v1/reservations",
                            Body({Descriptor("account", "victim")}, 9000));
  ASSERT_EQ(reserved.status, 200) << reserved.body;
  const std::string handle = json::parse(reserved.body)["handle"];
  // Another token in the same layout (one base64url character of the token changed).
  std::string forged = handle;
  const std::size_t token_at = handle.size() - 12;  // inside the ref's token
  forged[token_at] = forged[token_at] == 'A' ? 'B' : 'A';
  HttpReply r = Call(s.http_port(), "POST", "/v1/reservations/" + forged + "/settle", Settle(0));
  EXPECT_TRUE(r.status == 410 || r.status == 404) << r.status << " " << r.body;
  for (const std::string& garbled : {std::string("nothing"), handle.substr(0, 20), handle + "AA"}) {
    r = Call(s.http_port(), "POST", "/v1/reservations/" + garbled + "/settle", Settle(0));
    EXPECT_EQ(r.status, 404) << garbled << ": " << r.body;
  }
  r = Call(s.http_port(), "POST", "/v1/reservations/" + handle + "/settle", R"({"hits": -1})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(Left(s, "victim"), 1000) << "nothing was refunded";
  r = Call(s.http_port(), "POST", "/v1/reservations/" + handle + "/settle", Settle(9000));
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Left(s, "victim"), 1000);
}

}  // namespace
}  // namespace sluiced::reservation_test
