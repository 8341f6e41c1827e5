// Debits through the built sluiced against a private redis-server: POST /v1/debit, and
// Envoy's stream-done request over RLS gRPC recognised by a rule's `debit_entry` (the
// descriptor of the limit plus one entry with that key), charged whether it fits or not,
// into a debt of at most one window's worth, refused until the window ends.
#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <thread>

#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "service/tests/sluiced_process.h"
#include "testing/redis_server.h"

namespace sluiced::debit_test {
namespace {

namespace rls = envoy::service::ratelimit::v3;
using nlohmann::json;
using testing::Call;
using testing::HttpReply;
using testing::Sluiced;
using testing::TempDir;

// Tokens per second per account (a second: the test sees the window end), debits of
// stream-done requests marked by a `stream_done` entry; and a concurrency limit, which
// takes none.
constexpr char kConfig[] = R"(domain: ai
descriptors:
  - key: account
    rate_limit: {unit: second, requests_per_unit: 10}
    debit_entry: stream_done
  - key: streams
    algorithm: concurrency
    rate_limit: {requests_per_unit: 2}
)";

std::string Body(const std::string& key, const std::string& value, int hits) {
  json j = {{"domain", "ai"},
            {"descriptors",
             json::array({{{"entries", json::array({{{"key", key}, {"value", value}}})}}})}};
  if (hits > 0) j["hits"] = hits;
  return j.dump();
}

// Waits until the current second has at least 600 ms left: the calls that follow fall in
// one aligned one-second window.
void StartClearOfTheSecondsEnd() {
  for (;;) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count() %
                    1000;
    if (ms < 400) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1000 - ms + 5));
  }
}

class Debit : public ::testing::Test {
 protected:
  void SetUp() override { config_.Write("ai.yaml", kConfig); }
  void TearDown() override {
    EXPECT_EQ(redis_.KeysWithoutTtl("sluice:*"), std::vector<std::string>{});
  }
  sluice::testing::RedisServer redis_;
  TempDir config_;
};

TEST_F(Debit, HttpDebitGoesIntoABoundedDebtUntilTheWindowEnds) {
  Sluiced s(config_.path(), redis_.url(), {"--deadline-ms", "2000"});
  StartClearOfTheSecondsEnd();
  // 25 tokens against 10 per second: charged anyway, 10 below zero at most.
  HttpReply debit = Call(s.http_port(), "POST", "/v1/debit", Body("account", "acme", 25));
  ASSERT_EQ(debit.status, 200) << debit.body;
  json d = json::parse(debit.body)["descriptors"][0];
  EXPECT_EQ(d["debt"], 10) << debit.body;
  EXPECT_EQ(d["allowed"], false);
  EXPECT_EQ(d["remaining"], 0);
  const int64_t retry_ms = d["retry_after_ms"];
  EXPECT_GT(retry_ms, 0);
  EXPECT_LE(retry_ms, 1000);
  EXPECT_EQ(debit.header("retry-after"), "1");
  // The next check is refused until the window ends, then passes.
  EXPECT_EQ(Call(s.http_port(), "POST", "/v1/check", Body("account", "acme", 0)).status, 429);
  std::this_thread::sleep_for(std::chrono::milliseconds(retry_ms + 20));
  HttpReply after = Call(s.http_port(), "POST", "/v1/check", Body("account", "acme", 0));
  EXPECT_EQ(after.status, 200) << after.body;
  // A debit that fits answers what is left, with no debt.
  StartClearOfTheSecondsEnd();
  HttpReply fits = Call(s.http_port(), "POST", "/v1/debit", Body("account", "small", 4));
  ASSERT_EQ(fits.status, 200);
  EXPECT_EQ(json::parse(fits.body)["descriptors"][0]["debt"], 0);
  EXPECT_EQ(json::parse(fits.body)["descriptors"][0]["remaining"], 6);
  // A concurrency limit takes no debits; only POST is served.
  HttpReply streams = Call(s.http_port(), "POST", "/v1/debit", Body("streams", "s", 3));
  EXPECT_EQ(streams.status, 400);
  EXPECT_NE(json::parse(streams.body)["error"].get<std::string>().find("takes no debits"),
            std::string::npos)
      << streams.body;
  // ... refused whole: the other descriptor of the request is not charged either.
  StartClearOfTheSecondsEnd();
  json both = json::parse(Body("account", "whole", 5));
  both["descriptors"].push_back(json::parse(Body("streams", "s", 0))["descriptors"][0]);
  EXPECT_EQ(Call(s.http_port(), "POST", "/v1/debit", both.dump()).status, 400);
  HttpReply untouched = Call(s.http_port(), "POST", "/v1/check", Body("account", "whole", 0));
  EXPECT_EQ(json::parse(untouched.body)["descriptors"][0]["remaining"], 9) << untouched.body;
  EXPECT_EQ(Call(s.http_port(), "GET", "/v1/debit").status, 405);
}

// Envoy's sequence for a metered stream: a check of 0 hits when the request starts (an
// explicit per-descriptor hits_addend of 0: a peek), and at the stream's end the same
// descriptor plus the `stream_done` entry with the tokens as hits_addend (the rate limit
// action with apply_on_stream_done), which the rule's debit_entry charges as a debit.
TEST_F(Debit, EnvoysStreamDoneRequestIsChargedAsADebit) {
  Sluiced s(config_.path(), redis_.url(), {"--deadline-ms", "2000"});
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(s.grpc_port()),
                                     grpc::InsecureChannelCredentials());
  auto stub = rls::RateLimitService::NewStub(channel);
  auto call = [&](bool done, uint64_t hits) {
    rls::RateLimitRequest r;
    r.set_domain("ai");
    auto* d = r.add_descriptors();
    auto* e = d->add_entries();
    e->set_key("account");
    e->set_value("zed");
    if (done) {
      e = d->add_entries();
      e->set_key("stream_done");
      e->set_value("1");
    }
    d->mutable_hits_addend()->set_value(hits);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    rls::RateLimitResponse response;
    const grpc::Status status = stub->ShouldRateLimit(&context, r, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  };
  StartClearOfTheSecondsEnd();
  EXPECT_EQ(call(false, 0).overall_code(), rls::RateLimitResponse::OK);  // the stream starts
  // 7 tokens at its end: fits, 3 left.
  rls::RateLimitResponse first = call(true, 7);
  EXPECT_EQ(first.overall_code(), rls::RateLimitResponse::OK);
  EXPECT_EQ(first.statuses(0).limit_remaining(), 3u);
  EXPECT_EQ(call(false, 0).overall_code(), rls::RateLimitResponse::OK);
  // 30 more at the next stream's end: charged although only 3 fit; the id is in debt.
  EXPECT_EQ(call(true, 30).overall_code(), rls::RateLimitResponse::OVER_LIMIT);
  // The next stream's start is refused until the window ends.
  EXPECT_EQ(call(false, 0).overall_code(), rls::RateLimitResponse::OVER_LIMIT);
  // An extra entry of another key is no debit: no rule matches it.
  rls::RateLimitRequest other;
  other.set_domain("ai");
  auto* d = other.add_descriptors();
  auto* e = d->add_entries();
  e->set_key("account");
  e->set_value("zed");
  e = d->add_entries();
  e->set_key("model");
  e->set_value("m1");
  grpc::ClientContext context;
  rls::RateLimitResponse response;
  ASSERT_TRUE(stub->ShouldRateLimit(&context, other, &response).ok());
  EXPECT_EQ(response.overall_code(), rls::RateLimitResponse::OK);
  EXPECT_FALSE(response.statuses(0).has_current_limit());
}

}  // namespace
}  // namespace sluiced::debit_test
