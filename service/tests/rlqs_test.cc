// Envoy's RLQS v3 against a running sluiced and a private redis-server: a grpc++ client
// generated from service/proto, the lean HTTP/2 client for what grpc++ never sends, and
// a Python client whose messages are a second copy written from Envoy's field numbers.
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <memory>
#include <thread>
#include <vector>

#include "envoy/service/rate_limit_quota/v3/rlqs.grpc.pb.h"
#include "service/bench/h2_client.h"
#include "service/rlqs.h"
#include "service/tests/sluiced_process.h"
#include "testing/redis_server.h"

namespace sluiced {
namespace {

namespace rlqs = envoy::service::rate_limit_quota::v3;
using etype_strategy = envoy::type::v3::RateLimitStrategy;
using testing::Sluiced;
using testing::TempDir;
using Action = rlqs::RateLimitQuotaResponse::BucketAction;

constexpr const char* kMethod =
    "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas";

// Rates per second: hot (100, burst 20, closed), open and local (100; local divided
// among 4 servers), free (unlimited), blocked (0), a two-level bucket (60 a minute).
constexpr const char* kConfig = R"(domain: fleet
descriptors:
  - key: route
    value: hot
    rate_limit: {name: hot_limit, unit: second, requests_per_unit: 100}
    algorithm: token_bucket
    burst: 20
    failure_mode: closed
  - key: route
    value: open
    rate_limit: {name: open_limit, unit: second, requests_per_unit: 100}
    failure_mode: open
  - key: route
    value: local
    rate_limit: {name: local_limit, unit: second, requests_per_unit: 100}
    failure_mode: local
    local_servers: 4
  - key: route
    value: free
    rate_limit: {unlimited: true}
  - key: route
    value: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: route
    value: two
    descriptors:
      - key: tier
        value: gold
        rate_limit: {name: gold_limit, unit: minute, requests_per_unit: 60}
)";

using Bucket = std::vector<std::pair<std::string, std::string>>;

rlqs::RateLimitQuotaUsageReports Report(const std::vector<Bucket>& buckets, uint64_t allowed,
                                        uint64_t denied, int64_t elapsed_s,
                                        const std::string& domain = "fleet") {
  rlqs::RateLimitQuotaUsageReports r;
  r.set_domain(domain);
  for (const Bucket& b : buckets) {
    auto* u = r.add_bucket_quota_usages();
    for (const auto& [k, v] : b) (*u->mutable_bucket_id()->mutable_bucket())[k] = v;
    u->mutable_time_elapsed()->set_seconds(elapsed_s);
    u->set_num_requests_allowed(allowed);
    u->set_num_requests_denied(denied);
  }
  return r;
}

const Bucket kHot = {{"route", "hot"}};

// One client: a grpc++ bidirectional stream.
class Client {
 public:
  explicit Client(int port)
      : channel_(grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                     grpc::InsecureChannelCredentials())),
        stub_(rlqs::RateLimitQuotaService::NewStub(channel_)) {
    context_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    stream_ = stub_->StreamRateLimitQuotas(&context_);
  }
  // Sends a report and reads its answer; fails the test when none comes.
  rlqs::RateLimitQuotaResponse Exchange(const rlqs::RateLimitQuotaUsageReports& report) {
    rlqs::RateLimitQuotaResponse response;
    EXPECT_TRUE(stream_->Write(report));
    EXPECT_TRUE(stream_->Read(&response)) << "no answer to a report";
    return response;
  }
  // One bucket's action for one report of `bucket`.
  Action One(const Bucket& bucket, uint64_t allowed, uint64_t denied, int64_t elapsed_s) {
    const rlqs::RateLimitQuotaResponse r = Exchange(Report({bucket}, allowed, denied, elapsed_s));
    EXPECT_EQ(r.bucket_action_size(), 1) << r.DebugString();
    return r.bucket_action_size() == 1 ? r.bucket_action(0) : Action{};
  }
  // Ends the stream from the client's side and returns the server's final status.
  grpc::Status Finish() {
    stream_->WritesDone();
    rlqs::RateLimitQuotaResponse ignored;
    while (stream_->Read(&ignored)) {
    }
    return stream_->Finish();
  }
  // Reads until the server ends the stream; its final status.
  grpc::Status AwaitEnd() {
    rlqs::RateLimitQuotaResponse ignored;
    while (stream_->Read(&ignored)) {
    }
    return stream_->Finish();
  }
  void Cancel() { context_.TryCancel(); }
  bool Write(const rlqs::RateLimitQuotaUsageReports& report) { return stream_->Write(report); }

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<rlqs::RateLimitQuotaService::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<
      grpc::ClientReaderWriter<rlqs::RateLimitQuotaUsageReports, rlqs::RateLimitQuotaResponse>>
      stream_;
};

// The whole limit of 100/s but the reserve (98.438/s) as Envoy enforces it: 1,575 tokens
// per 16 s.
constexpr double kAllButTheReserve = 1575.0 / 16;

// Tokens per second of a token-bucket action (0 when it is not one).
double RatePerSecond(const Action& a) {
  const auto& s = a.quota_assignment_action().rate_limit_strategy();
  if (!s.has_token_bucket()) return 0;
  return static_cast<double>(s.token_bucket().tokens_per_fill().value()) /
         static_cast<double>(s.token_bucket().fill_interval().seconds());
}

bool IsBlanket(const Action& a, etype_strategy::BlanketRule rule) {
  const auto& s = a.quota_assignment_action().rate_limit_strategy();
  return a.has_quota_assignment_action() && s.strategy_case() == etype_strategy::kBlanketRule &&
         s.blanket_rule() == rule;
}

class Rlqs : public ::testing::Test {
 protected:
  void SetUp() override {
    config_.Write("fleet.yaml", kConfig);
    Start();
  }
  void Start(std::vector<std::string> flags = {}) {
    sluiced_.reset();
    flags.insert(flags.end(), {"--deadline-ms", "300", "--rlqs-report-interval-ms", "1000"});
    sluiced_ = std::make_unique<Sluiced>(config_.path(), redis_.url(), std::move(flags));
  }
  std::unique_ptr<Client> NewClient() { return std::make_unique<Client>(sluiced_->grpc_port()); }

  sluice::testing::RedisServer redis_;
  TempDir config_;
  std::unique_ptr<Sluiced> sluiced_;
};

// The rate Envoy enforces for a grant (tokens_per_fill over the interval's whole seconds)
// is never above it and, from one request a minute on, short of it by less than 1/60 of a
// request a second, whatever the grant (whole tokens a second lost up to a third of a
// fleet's limit where grants were near one a second); the interval's nanos repeat its
// seconds (Envoy compares only the nanos).
TEST(RlqsStrategy, EnforcedRateWithinASixtiethOfTheGrant) {
  for (int64_t grant = 1; grant <= 100'000'000; grant += 1 + grant / 97) {
    etype_strategy s;
    RlqsStrategy(grant, 1'000'000'000, 1000, s);
    ASSERT_TRUE(s.has_token_bucket()) << grant;
    const auto& tb = s.token_bucket();
    ASSERT_GT(tb.fill_interval().seconds(), 0) << grant;
    EXPECT_EQ(tb.fill_interval().nanos(), tb.fill_interval().seconds()) << grant;
    const double milli =
        1000.0 * tb.tokens_per_fill().value() / static_cast<double>(tb.fill_interval().seconds());
    EXPECT_LE(milli, static_cast<double>(grant)) << grant << " " << tb.DebugString();
    if (grant >= 1000 / 60 + 1) {
      EXPECT_LT(static_cast<double>(grant) - milli, 1000.0 / 60)
          << grant << " " << tb.DebugString();
    }
  }
}

// A subscription (time_elapsed 0) gets a token bucket at once, with a TTL of twice the
// report interval; a report of more demand than the limit gets all of it but the
// reserve kept for newcomers (R / 64: 98.4 of 100), and the capacity is the burst's share.
TEST_F(Rlqs, SubscriptionAndReportGetTokenBuckets) {
  auto c = NewClient();
  const Action sub = c->One(kHot, 1, 0, 0);
  EXPECT_EQ(sub.bucket_id().bucket().at("route"), "hot");
  ASSERT_TRUE(sub.quota_assignment_action().rate_limit_strategy().has_token_bucket())
      << sub.DebugString();
  EXPECT_EQ(sub.quota_assignment_action().assignment_time_to_live().seconds(), 2);
  // Demand 1/s, alone, below the limit: twice its demand.
  EXPECT_EQ(RatePerSecond(sub), 2);
  const Action full = c->One(kHot, 50, 150, 1);
  const auto& tb = full.quota_assignment_action().rate_limit_strategy().token_bucket();
  // 98.438/s granted: 1,575 tokens per 16 s (98.4375/s), the closest from below of any
  // interval up to 60 s.
  EXPECT_EQ(tb.tokens_per_fill().value(), 1575u) << full.DebugString();
  EXPECT_EQ(tb.fill_interval().seconds(), 16);
  EXPECT_EQ(tb.max_tokens(), 19u);  // floor(20 * 98.4 / 100)
  EXPECT_EQ(full.quota_assignment_action().assignment_time_to_live().seconds(), 2);
}

// Two clients on one bucket: every grant keeps the sum at or under the limit, and two
// rounds of reports bring them to shares in proportion to their demand.
TEST_F(Rlqs, TwoClientsShareInProportionToDemandAndNeverAboveTheLimit) {
  auto a = NewClient();
  auto b = NewClient();
  double ga = RatePerSecond(a->One(kHot, 1, 0, 0));
  double gb = RatePerSecond(b->One(kHot, 1, 0, 0));
  EXPECT_LE(ga + gb, 100);
  for (int round = 0; round < 3; ++round) {
    ga = RatePerSecond(a->One(kHot, 100, 200, 1));  // 300/s
    EXPECT_LE(ga + gb, 100) << "round " << round;
    gb = RatePerSecond(b->One(kHot, 50, 50, 1));  // 100/s
    EXPECT_LE(ga + gb, 100) << "round " << round;
  }
  // 3/4 and 1/4 of 98.4 (the rest is the reserve for newcomers), floored.
  EXPECT_NEAR(ga, 73.8, 1);
  EXPECT_NEAR(gb, 24.6, 1);
}

// A client that goes away gives its share back at once: another then gets the whole
// limit but the reserve on its next report (without the give-back it would wait for the
// grant's TTL).
TEST_F(Rlqs, AResetStreamGivesItsShareBack) {
  auto a = NewClient();
  auto b = NewClient();
  a->One(kHot, 1, 0, 0);
  b->One(kHot, 1, 0, 0);
  EXPECT_NEAR(RatePerSecond(a->One(kHot, 500, 500, 1)), 96, 1);  // 98.4 less b's 2
  a->Cancel();
  EXPECT_FALSE(a->AwaitEnd().ok());
  double gb = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
  while (gb < kAllButTheReserve && std::chrono::steady_clock::now() < until) {
    gb = RatePerSecond(b->One(kHot, 500, 500, 1));
    if (gb < kAllButTheReserve) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(gb, kAllButTheReserve) << "the reset stream's share was not given back";
}

// A lone client using the whole limit leaves the store's reserve (R / 64) free: a new
// client's subscription is a token bucket at once, not DENY_ALL until its next report; and
// a scale-out under load (8 newcomers beside the heavy client) has every newcomer holding
// a share from its first answer, and its share of the demand by its third report.
TEST_F(Rlqs, NewcomersBesideAHeavyClientGetSharesAtOnce) {
  auto heavy = NewClient();
  heavy->One(kHot, 1, 0, 0);
  EXPECT_NEAR(RatePerSecond(heavy->One(kHot, 500, 500, 1)), 98, 1);  // 1,000/s of 100/s
  auto first = NewClient();
  const Action sub = first->One(kHot, 1, 0, 0);
  EXPECT_GT(RatePerSecond(sub), 0) << sub.DebugString();
  std::vector<std::unique_ptr<Client>> newcomers;
  for (int i = 0; i < 8; ++i) {
    newcomers.push_back(NewClient());
    const Action a = newcomers.back()->One(kHot, 1, 0, 0);
    EXPECT_GT(RatePerSecond(a), 0) << "newcomer " << i << ": " << a.DebugString();
  }
  // Each newcomer reports 100/s, the heavy one 1,000/s: 98.4 * 100 / 1,900 = 5.2/s each.
  std::vector<double> rates(newcomers.size());
  for (int round = 0; round < 3; ++round) {
    double sum = RatePerSecond(heavy->One(kHot, 500, 500, 1));
    sum += RatePerSecond(first->One(kHot, 50, 50, 1));
    for (size_t i = 0; i < newcomers.size(); ++i) {
      rates[i] = RatePerSecond(newcomers[i]->One(kHot, 50, 50, 1));
      sum += rates[i];
    }
    EXPECT_LE(sum, 100) << "round " << round;
  }
  for (size_t i = 0; i < newcomers.size(); ++i) EXPECT_GE(rates[i], 4) << "newcomer " << i;
}

// What is not a shared rate: unlimited and shadow rules allow all, 0 per unit denies
// all, an unknown domain and an unmatched bucket get --rlqs-unmatched (allow_all by
// default), each with a TTL; a two-level bucket matches in key order.
TEST_F(Rlqs, BlanketAnswersAndMatching) {
  auto c = NewClient();
  const rlqs::RateLimitQuotaResponse r = c->Exchange(Report({{{"route", "free"}},
                                                             {{"route", "blocked"}},
                                                             {{"route", "nowhere"}},
                                                             {{"tier", "gold"}, {"route", "two"}}},
                                                            1, 0, 0));
  ASSERT_EQ(r.bucket_action_size(), 4) << r.DebugString();
  EXPECT_TRUE(IsBlanket(r.bucket_action(0), etype_strategy::ALLOW_ALL)) << r.DebugString();
  EXPECT_TRUE(IsBlanket(r.bucket_action(1), etype_strategy::DENY_ALL)) << r.DebugString();
  EXPECT_TRUE(IsBlanket(r.bucket_action(2), etype_strategy::ALLOW_ALL)) << r.DebugString();
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(r.bucket_action(i).quota_assignment_action().assignment_time_to_live().seconds(), 2);
  // 60 a minute: one token a second at most.
  const auto& gold = r.bucket_action(3).quota_assignment_action().rate_limit_strategy();
  ASSERT_TRUE(gold.has_token_bucket()) << r.DebugString();
  EXPECT_LE(RatePerSecond(r.bucket_action(3)), 1.0);
  EXPECT_EQ(r.bucket_action(3).bucket_id().bucket().at("tier"), "gold");

  auto other = NewClient();
  const Action unknown = other->Exchange(Report({kHot}, 1, 0, 0, "elsewhere")).bucket_action(0);
  EXPECT_TRUE(IsBlanket(unknown, etype_strategy::ALLOW_ALL)) << unknown.DebugString();

  Start({"--rlqs-unmatched", "abandon"});
  auto d = NewClient();
  EXPECT_TRUE(d->One({{"route", "nowhere"}}, 1, 0, 0).has_abandon_action());
  Start({"--rlqs-unmatched", "deny_all"});
  auto e = NewClient();
  EXPECT_TRUE(IsBlanket(e->One({{"route", "nowhere"}}, 1, 0, 0), etype_strategy::DENY_ALL));
}

// A bucket reported without requests --rlqs-idle-reports times in a row is abandoned,
// and its share is given back. Until then it keeps a token bucket (its demand counts as a
// subscription's, one request a second), never a DENY_ALL that would refuse its next
// request while the limit has room.
TEST_F(Rlqs, IdleBucketsAreAbandoned) {
  auto a = NewClient();
  auto b = NewClient();
  a->One(kHot, 300, 0, 1);
  b->One(kHot, 1, 0, 0);
  for (int idle = 1; idle < 3; ++idle) {
    const auto action = a->One(kHot, 0, 0, 1);
    EXPECT_FALSE(action.has_abandon_action());
    EXPECT_GE(RatePerSecond(action), 1)
        << "idle report " << idle << ": a token bucket, not " << action.DebugString();
  }
  EXPECT_TRUE(a->One(kHot, 0, 0, 1).has_abandon_action());
  EXPECT_EQ(RatePerSecond(b->One(kHot, 300, 0, 1)), kAllButTheReserve);
  // The next request of an abandoned bucket subscribes it again.
  EXPECT_TRUE(a->One(kHot, 1, 0, 0).quota_assignment_action().has_rate_limit_strategy());
}

// Malformed reports end the stream INVALID_ARGUMENT: bytes that are not a report, an
// empty domain, a second domain on one stream, a bucket id without entries.
TEST_F(Rlqs, MalformedReportsEndTheStream) {
  std::string error;
  auto h2 = bench::H2Client::Connect("127.0.0.1", sluiced_->grpc_port(), error);
  ASSERT_TRUE(h2) << error;
  const int32_t garbage = h2->Submit(kMethod, bench::GrpcFramed("\xff\xff\xff"), {}, false);
  ASSERT_TRUE(h2->PumpUntil([&] { return h2->call(garbage)->closed; }, std::chrono::seconds(5)));
  EXPECT_EQ(h2->call(garbage)->GrpcStatus(), 3);
  EXPECT_NE(h2->call(garbage)->GrpcMessage().find("cannot parse"), std::string::npos);

  // The stream's end carries why, after the earlier reports' answers.
  auto ends_invalid = [&](const std::vector<rlqs::RateLimitQuotaUsageReports>& reports,
                          const std::string& why) {
    auto c = NewClient();
    for (std::size_t i = 0; i + 1 < reports.size(); ++i) c->Exchange(reports[i]);
    c->Write(reports.back());
    const grpc::Status st = c->AwaitEnd();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << why;
    EXPECT_NE(st.error_message().find(why), std::string::npos) << st.error_message();
  };
  ends_invalid({Report({kHot}, 1, 0, 0, "")}, "must name its domain");
  ends_invalid({Report({kHot}, 1, 0, 0), Report({kHot}, 1, 0, 1, "other")}, "one domain");
  ends_invalid({Report({{}}, 1, 0, 0)}, "at least one entry");
  ends_invalid({Report({{{"", "x"}}}, 1, 0, 0)}, "must not be empty");
  ends_invalid({Report({{{"route", std::string(2000, 'x')}}}, 1, 0, 0)}, "longer than");
}

// Redis stopped: each limit's failure policy answers (closed: DENY_ALL; open: ALLOW_ALL;
// local: a share of the limit divided among local_servers), and the metrics say so; back
// to the store's shares once Redis is back.
TEST_F(Rlqs, RedisDownAnswersByPolicyAndComesBack) {
  auto c = NewClient();
  const Bucket open = {{"route", "open"}}, local = {{"route", "local"}};
  c->Exchange(Report({kHot, open, local}, 300, 0, 1));
  redis_.Kill();
  const rlqs::RateLimitQuotaResponse down = c->Exchange(Report({kHot, open, local}, 300, 0, 1));
  ASSERT_EQ(down.bucket_action_size(), 3);
  EXPECT_TRUE(IsBlanket(down.bucket_action(0), etype_strategy::DENY_ALL)) << down.DebugString();
  EXPECT_TRUE(IsBlanket(down.bucket_action(1), etype_strategy::ALLOW_ALL)) << down.DebugString();
  const double local_rate = RatePerSecond(down.bucket_action(2));
  EXPECT_GT(local_rate, 0) << down.DebugString();
  EXPECT_LE(local_rate, 25) << down.DebugString();
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(down.bucket_action(i).quota_assignment_action().assignment_time_to_live().seconds(),
              2);
  const std::string page = testing::Call(sluiced_->metrics_port(), "GET", "/metrics").body;
  EXPECT_NE(page.find("sluiced_rlqs_answers_total{domain=\"fleet\",limit=\"hot_limit\","
                      "source=\"policy_closed\"}"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find("source=\"policy_local\""), std::string::npos) << page;
  redis_.Start();
  double hot = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (hot == 0 && std::chrono::steady_clock::now() < until) {
    hot = RatePerSecond(c->One(kHot, 300, 0, 1));
    if (hot == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(hot, kAllButTheReserve) << "the store's shares did not come back";
}

// Per-limit series only: no bucket value becomes a label; the keys all expire.
TEST_F(Rlqs, MetricsPerLimitAndEveryKeyExpires) {
  auto c = NewClient();
  c->Exchange(Report({kHot, {{"route", "customer-4711"}}}, 40, 60, 1));
  const std::string page = testing::Call(sluiced_->metrics_port(), "GET", "/metrics").body;
  EXPECT_EQ(page.find("customer-4711"), std::string::npos) << page;
  EXPECT_NE(page.find("sluiced_rlqs_rate{domain=\"fleet\",limit=\"hot_limit\"} 100"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find("sluiced_rlqs_clients{domain=\"fleet\",limit=\"hot_limit\"} 1"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find("sluiced_rlqs_assigned_rate{domain=\"fleet\",limit=\"hot_limit\"} 98.438"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find("sluiced_rlqs_reported_requests_total{domain=\"fleet\",limit=\"hot_"
                      "limit\",result=\"denied\"} 60"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find("sluiced_rlqs_streams 1"), std::string::npos) << page;
  const auto keys = redis_.Command({"KEYS", "*"});
  ASSERT_FALSE(keys.elements.empty());
  for (const auto& k : keys.elements) {
    const auto ttl = redis_.Command({"PTTL", k.str});
    EXPECT_GT(ttl.integer, 0) << k.str;
  }
}

// SIGTERM: the stream ends UNAVAILABLE (the client goes to another instance), after
// the answers already given. Its share stays in the store until it expires: the client
// enforces its assignment until the TTL while it reconnects, and a share given back at
// once would be granted to others meanwhile.
TEST_F(Rlqs, DrainEndsStreamsUnavailable) {
  auto c = NewClient();
  c->One(kHot, 1, 0, 0);
  sluiced_->Signal(SIGTERM);
  const grpc::Status st = c->AwaitEnd();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
  ASSERT_EQ(sluiced_->WaitExit(std::chrono::seconds(10)), 0);
  const auto keys = redis_.Command({"KEYS", "*:qs"});
  ASSERT_EQ(keys.elements.size(), 1u);
  EXPECT_EQ(redis_.Command({"HEXISTS", keys.elements[0].str, ""}).integer, 1);  // the sums
  EXPECT_EQ(redis_.Command({"HLEN", keys.elements[0].str}).integer, 2);         // and the client
}

TEST_F(Rlqs, PythonClientFromAnIndependentCopyOfTheMessages) {
  TempDir out;
  const std::string cmd = "timeout 60 /usr/bin/python3 " + std::string(SLUICED_SOURCE_DIR) +
                          "/service/tests/rlqs_client.py " + std::to_string(sluiced_->grpc_port()) +
                          " > " + out.path() + "/log.txt 2>&1";
  const int rc = std::system(cmd.c_str());
  const std::string log = testing::ReadAll(out.path() + "/log.txt");
  EXPECT_EQ(rc, 0) << log;
  EXPECT_NE(log.find("python rlqs client: all checks passed"), std::string::npos) << log;
}

}  // namespace
}  // namespace sluiced
