// The simulated Envoy of service/bench/rlqs_fleet.h against scripted in-process RLQS
// servers (grpc++): what it reports and when, and how it applies what it is answered, as
// Envoy's rate_limit_quota filter does. The fleet test's bounds hold sluiced to the design
// only if the clients behave as Envoys would.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <functional>
#include <mutex>
#include <optional>

#include "envoy/service/rate_limit_quota/v3/rlqs.grpc.pb.h"
#include "service/bench/rlqs_fleet.h"

namespace sluiced {
namespace {

namespace rlqs = envoy::service::rate_limit_quota::v3;
using bench::AssignmentKind;
using bench::FleetOptions;
using bench::FleetResult;
using Reports = rlqs::RateLimitQuotaUsageReports;
using Response = rlqs::RateLimitQuotaResponse;

// An RLQS server that answers the n-th report it receives (from 1, over all its streams)
// with answer(report, n); no answer ends the stream UNAVAILABLE without answering.
class ScriptedRlqs final : public rlqs::RateLimitQuotaService::Service {
 public:
  using Answer = std::function<std::optional<Response>(const Reports&, int)>;
  explicit ScriptedRlqs(Answer answer) : answer_(std::move(answer)) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
  }
  ~ScriptedRlqs() override { server_->Shutdown(std::chrono::system_clock::now()); }

  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }
  std::vector<Reports> received() {
    std::lock_guard lock(mu_);
    return received_;
  }

  grpc::Status StreamRateLimitQuotas(grpc::ServerContext* /*context*/,
                                     grpc::ServerReaderWriter<Response, Reports>* stream) override {
    Reports reports;
    while (stream->Read(&reports)) {
      int n;
      {
        std::lock_guard lock(mu_);
        received_.push_back(reports);
        n = static_cast<int>(received_.size());
      }
      std::optional<Response> response = answer_(reports, n);
      if (!response) return {grpc::StatusCode::UNAVAILABLE, "closing the stream"};
      stream->Write(*response);
    }
    return grpc::Status::OK;
  }

 private:
  Answer answer_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::mutex mu_;
  std::vector<Reports> received_;
};

// One action per bucket of the report, each made by `fill`.
Response ForEachBucket(const Reports& reports,
                       const std::function<void(Response::BucketAction&)>& fill) {
  Response response;
  for (const auto& usage : reports.bucket_quota_usages()) {
    auto* action = response.add_bucket_action();
    *action->mutable_bucket_id() = usage.bucket_id();
    fill(*action);
  }
  return response;
}

Response TokenBucket(const Reports& reports, uint32_t max_tokens, uint32_t tokens_per_second,
                     int64_t ttl_s) {
  return ForEachBucket(reports, [&](Response::BucketAction& a) {
    auto* q = a.mutable_quota_assignment_action();
    q->mutable_assignment_time_to_live()->set_seconds(ttl_s);
    auto* tb = q->mutable_rate_limit_strategy()->mutable_token_bucket();
    tb->set_max_tokens(max_tokens);
    tb->mutable_tokens_per_fill()->set_value(tokens_per_second);
    tb->mutable_fill_interval()->set_seconds(1);
  });
}

Response Blanket(const Reports& reports, envoy::type::v3::RateLimitStrategy::BlanketRule rule,
                 int64_t ttl_s) {
  return ForEachBucket(reports, [&](Response::BucketAction& a) {
    auto* q = a.mutable_quota_assignment_action();
    q->mutable_assignment_time_to_live()->set_seconds(ttl_s);
    q->mutable_rate_limit_strategy()->set_blanket_rule(rule);
  });
}

Response Abandon(const Reports& reports) {
  return ForEachBucket(reports, [](Response::BucketAction& a) { a.mutable_abandon_action(); });
}

// One client at 100 requests/s for 3.5 s, reporting every second.
FleetOptions OneClient(std::vector<std::string> targets, double rate = 100) {
  FleetOptions o;
  o.targets = std::move(targets);
  o.seconds = 3.5;
  o.report_interval = std::chrono::milliseconds(1000);
  o.clients.push_back({.domain = "fleet", .bucket = {{"rule", "hot"}}, .demand = {{0, rate}}});
  return o;
}

const rlqs::RateLimitQuotaUsageReports::BucketQuotaUsage& Usage(const Reports& r) {
  EXPECT_EQ(r.bucket_quota_usages_size(), 1) << r.DebugString();
  return r.bucket_quota_usages(0);
}

TEST(RlqsFleetClient, ReportsAndAppliesATokenBucketAsEnvoy) {
  ScriptedRlqs server([](const Reports& r, int) { return TokenBucket(r, 10, 40, 5); });
  const FleetResult result = bench::RunFleet(OneClient({server.target()}));
  const std::vector<Reports> received = server.received();
  // The subscription at the first request (time_elapsed 0, that request allowed by the
  // no-assignment behaviour), then one report a second with the counts of that second.
  ASSERT_EQ(received.size(), 4u);
  for (const Reports& r : received) {
    EXPECT_EQ(r.domain(), "fleet");
    EXPECT_EQ(Usage(r).bucket_id().bucket().at("rule"), "hot");
  }
  EXPECT_EQ(Usage(received[0]).time_elapsed().seconds(), 0);
  EXPECT_EQ(Usage(received[0]).num_requests_allowed(), 1u);
  EXPECT_EQ(Usage(received[0]).num_requests_denied(), 0u);
  for (std::size_t i = 1; i < received.size(); ++i) {
    const auto& u = Usage(received[i]);
    EXPECT_EQ(u.time_elapsed().seconds(), 1) << i;
    EXPECT_NEAR(static_cast<double>(u.num_requests_allowed() + u.num_requests_denied()), 100, 2)
        << i;
  }
  const auto& s = result.clients[0].seconds;
  // A new bucket starts full (10 tokens); the identical assignments after keep it.
  EXPECT_DOUBLE_EQ(s[0].tokens_created, 10);
  EXPECT_DOUBLE_EQ(s[1].tokens_created + s[2].tokens_created, 0);
  EXPECT_EQ(s[0].assignments + s[1].assignments + s[2].assignments, 3u);
  // Refilled at 40/s, emptied by 100 requests/s: 40 admitted a second once it is empty.
  EXPECT_NEAR(static_cast<double>(s[1].admitted), 40, 2);
  EXPECT_NEAR(static_cast<double>(s[2].admitted), 40, 2);
  EXPECT_EQ(s[1].kind, AssignmentKind::kTokenBucket);
  EXPECT_DOUBLE_EQ(s[1].assigned_rate, 40);
  EXPECT_EQ(result.reports_sent, 4u);
  EXPECT_EQ(result.responses, 4u);
}

TEST(RlqsFleetClient, AnAssignmentExpiresAfterItsTtlAndAnAbandonedBucketSubscribesAgain) {
  ScriptedRlqs server([](const Reports& r, int n) -> std::optional<Response> {
    switch (n) {
      case 1: return Blanket(r, envoy::type::v3::RateLimitStrategy::DENY_ALL, 1);
      case 2: return Response{};  // nothing for the bucket: its DENY_ALL runs out
      case 3: return Abandon(r);
      default: return Blanket(r, envoy::type::v3::RateLimitStrategy::ALLOW_ALL, 10);
    }
  });
  const FleetResult result = bench::RunFleet(OneClient({server.target()}));
  const auto& s = result.clients[0].seconds;
  EXPECT_EQ(s[0].kind, AssignmentKind::kDenyAll);
  EXPECT_EQ(s[1].kind, AssignmentKind::kNone);
  EXPECT_EQ(s[2].kind, AssignmentKind::kAllowAll);
  EXPECT_NEAR(static_cast<double>(s[0].denied), 99, 10);  // allowed until the DENY_ALL arrives
  // Then the no-assignment behaviour (allow): denied only until the TTL, counted from the
  // response's arrival, ran out.
  EXPECT_LE(s[1].denied, 10u);
  EXPECT_GE(s[1].admitted, 90u);
  const std::vector<Reports> received = server.received();
  ASSERT_GE(received.size(), 5u);
  // After the abandon, the next request subscribes the bucket again at once; the next
  // tick's report follows it by under a second: time_elapsed, in whole seconds, is 0.
  EXPECT_EQ(Usage(received[3]).time_elapsed().seconds(), 0);
  EXPECT_EQ(Usage(received[3]).num_requests_allowed(), 1u);
  EXPECT_EQ(Usage(received[4]).time_elapsed().seconds(), 0);
  // (Its counts start at the subscription, which follows the abandon's arrival.)
  EXPECT_GT(Usage(received[4]).num_requests_allowed(), 50u);
  EXPECT_LE(Usage(received[4]).num_requests_allowed(), 99u);
}

TEST(RlqsFleetClient, ReconnectsToTheNextTargetKeepingItsAssignment) {
  // The first server ends the stream on the first periodic report, unanswered.
  ScriptedRlqs first([](const Reports& r, int n) -> std::optional<Response> {
    if (n == 2) return std::nullopt;
    return TokenBucket(r, 20, 50, 10);
  });
  ScriptedRlqs second([](const Reports& r, int) { return TokenBucket(r, 20, 50, 10); });
  FleetOptions options = OneClient({first.target(), second.target()});
  options.no_assignment = bench::NoAssignment::kDenyAll;
  const FleetResult result = bench::RunFleet(options);
  ASSERT_EQ(first.received().size(), 2u);
  EXPECT_EQ(Usage(first.received()[0]).num_requests_denied(), 1u);
  // The next tick opens a stream to the second server and reports the counts since the
  // report the first one took.
  const std::vector<Reports> received = second.received();
  ASSERT_EQ(received.size(), 2u);
  EXPECT_EQ(Usage(received[0]).time_elapsed().seconds(), 1);
  EXPECT_NEAR(static_cast<double>(Usage(received[0]).num_requests_allowed() +
                                  Usage(received[0]).num_requests_denied()),
              100, 2);
  EXPECT_EQ(result.streams, 2u);
  EXPECT_EQ(result.stream_ends, 1u);
  double tokens = 0;
  for (const auto& s : result.clients[0].seconds) {
    EXPECT_EQ(s.kind, AssignmentKind::kTokenBucket);
    tokens += s.tokens_created;
  }
  EXPECT_DOUBLE_EQ(tokens, 20);  // kept across the reconnect: filled once
}

TEST(RlqsFleetClient, AChangedTokenBucketKeepsItsFillRatio) {
  // 100 tokens refilled at 1/s for 20 requests/s, then 200 tokens, then 50.
  ScriptedRlqs server([](const Reports& r, int n) {
    return TokenBucket(r, n == 1 ? 100 : n == 2 ? 200 : 50, 1, 10);
  });
  const FleetResult result = bench::RunFleet(OneClient({server.target()}, 20));
  const auto& s = result.clients[0].seconds;
  EXPECT_DOUBLE_EQ(s[0].tokens_created, 100);
  // At the change about 100 - 19 + 1 tokens are left (fewer when the responses are slow):
  // about 81% of 100, so 81% of 200 after, 81 created; a new full bucket would create 200,
  // keeping the old one none.
  EXPECT_GT(s[1].tokens_created, 50);
  EXPECT_LT(s[1].tokens_created, 95);
  EXPECT_DOUBLE_EQ(s[2].tokens_created, 0);  // a smaller bucket creates none
  EXPECT_EQ(result.denied, 0u);
}

}  // namespace
}  // namespace sluiced
