// Envoy RLS v3 over gRPC against a running sluiced: a C++ client generated from
// service/proto, and a Python client (Debian's grpcio, stubs generated at test time).
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <condition_variable>
#include <fstream>
#include <set>

#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "grpc/health/v1/health.pb.h"
#include "grpc/reflection/v1alpha/reflection.pb.h"
#include "service/bench/h2_client.h"
#include "service/tests/sluiced_process.h"
#include "testing/redis_server.h"

namespace sluiced {
namespace {

namespace rls = envoy::service::ratelimit::v3;
using testing::Sluiced;
using testing::TempDir;

class Grpc : public ::testing::Test {
 protected:
  void SetUp() override {
    config_.Write("shop.yaml",
                  testing::ReadAll(std::string(SLUICED_SOURCE_DIR) + "/examples/config/shop.yaml"));
    // 2 s: these tests check answers, not deadlines. With 200 ms, a first call (connect,
    // load the scripts) under a loaded parallel ctest run once missed it and sign_in's
    // closed policy answered OVER_LIMIT (ShouldRateLimitFromCpp, 1 run in ~10).
    Start();
  }

  // (Re)starts sluiced, with `env` in its environment and `flags` on its command line,
  // and connects the stub to it.
  void Start(std::vector<std::string> env = {}, std::vector<std::string> flags = {}) {
    sluiced_.reset();
    flags.insert(flags.begin(), {"--deadline-ms", "2000"});
    sluiced_ = std::make_unique<Sluiced>(config_.path(), redis_.url(), std::move(flags),
                                         /*expect_start=*/true, std::move(env));
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(sluiced_->grpc_port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = rls::RateLimitService::NewStub(channel_);
  }

  rls::RateLimitResponse Call(const rls::RateLimitRequest& request,
                              grpc::Status* status_out = nullptr) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    rls::RateLimitResponse response;
    grpc::Status status = stub_->ShouldRateLimit(&context, request, &response);
    if (status_out)
      *status_out = status;
    else
      EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  }

  static rls::RateLimitRequest SignIn(const std::string& account, uint32_t hits = 0) {
    rls::RateLimitRequest r;
    r.set_domain("shop");
    r.set_hits_addend(hits);
    auto* d = r.add_descriptors();
    auto* e = d->add_entries();
    e->set_key("route");
    e->set_value("sign_in");
    e = d->add_entries();
    e->set_key("account");
    e->set_value(account);
    return r;
  }

  // A unary call by method name with grpc++'s generic stub (bytes in, bytes out).
  grpc::Status GenericCall(const std::string& method, const std::string& request,
                           std::string* response = nullptr) {
    grpc::GenericStub stub(channel_);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    grpc::CompletionQueue cq;
    grpc::Slice slice(request);
    grpc::ByteBuffer in(&slice, 1), out;
    auto call = stub.PrepareUnaryCall(&context, method, in, &cq);
    call->StartCall();
    grpc::Status status;
    call->Finish(&out, &status, reinterpret_cast<void*>(1));
    void* tag = nullptr;
    bool ok = false;
    EXPECT_TRUE(cq.Next(&tag, &ok));
    if (response != nullptr) {
      std::vector<grpc::Slice> slices;
      response->clear();
      if (out.Dump(&slices).ok())
        for (const auto& sl : slices)
          response->append(reinterpret_cast<const char*>(sl.begin()), sl.size());
    }
    return status;
  }

  sluice::testing::RedisServer redis_;
  TempDir config_;
  std::unique_ptr<Sluiced> sluiced_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<rls::RateLimitService::Stub> stub_;
};

TEST_F(Grpc, ShouldRateLimitFromCpp) {
  for (int i = 0; i < 3; ++i) {
    rls::RateLimitResponse r = Call(SignIn("alice"));
    ASSERT_EQ(r.overall_code(), rls::RateLimitResponse::OK);
    ASSERT_EQ(r.statuses_size(), 1);
    EXPECT_EQ(r.statuses(0).current_limit().requests_per_unit(), 3u);
    EXPECT_EQ(r.statuses(0).current_limit().unit(), rls::RateLimitResponse::RateLimit::MINUTE);
    EXPECT_EQ(r.statuses(0).current_limit().name(), "sign_in");
    EXPECT_EQ(r.statuses(0).limit_remaining(), static_cast<uint32_t>(2 - i));
    // Whole milliseconds: in the last second of a minute the seconds alone are 0.
    EXPECT_GT(r.statuses(0).duration_until_reset().seconds() * 1000 +
                  r.statuses(0).duration_until_reset().nanos() / 1000000,
              0);
  }
  rls::RateLimitResponse over = Call(SignIn("alice"));
  EXPECT_EQ(over.overall_code(), rls::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(over.statuses(0).code(), rls::RateLimitResponse::OVER_LIMIT);
  std::map<std::string, std::string> headers;
  for (const auto& h : over.response_headers_to_add()) headers[h.key()] = h.value();
  EXPECT_EQ(headers["RateLimit-Policy"], "\"sign_in\";q=3;w=60");
  EXPECT_EQ(headers["RateLimit"].rfind("\"sign_in\";r=0;t=", 0), 0u);
  EXPECT_FALSE(headers["Retry-After"].empty());
}

// gRPC on threads of its own (--grpc-threads 2) instead of the store client's I/O
// thread (the default, which every other test here runs): the same answers, and a clean
// stop with a channel left open.
TEST_F(Grpc, OwnGrpcThreadsAnswerTheSame) {
  Sluiced own(config_.path(), redis_.url(),
              std::vector<std::string>{"--deadline-ms", "2000", "--grpc-threads", "2"});
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(own.grpc_port()),
                                     grpc::InsecureChannelCredentials());
  auto stub = rls::RateLimitService::NewStub(channel);
  auto call = [&](const rls::RateLimitRequest& request) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    rls::RateLimitResponse response;
    EXPECT_TRUE(stub->ShouldRateLimit(&context, request, &response).ok());
    return response;
  };
  for (int i = 0; i < 3; ++i) {
    rls::RateLimitResponse r = call(SignIn("own"));
    EXPECT_EQ(r.overall_code(), rls::RateLimitResponse::OK);
    EXPECT_EQ(r.statuses(0).limit_remaining(), static_cast<uint32_t>(2 - i));
  }
  EXPECT_EQ(call(SignIn("own")).overall_code(), rls::RateLimitResponse::OVER_LIMIT);
}

TEST_F(Grpc, HitsAddendPerRequestAndPerDescriptor) {
  // Per request: 2 of 3.
  rls::RateLimitResponse two = Call(SignIn("bob", 2));
  EXPECT_EQ(two.overall_code(), rls::RateLimitResponse::OK);
  EXPECT_EQ(two.statuses(0).limit_remaining(), 1u);
  // Per descriptor: an explicit 0 reports without spending.
  rls::RateLimitRequest peek = SignIn("bob", 5);
  peek.mutable_descriptors(0)->mutable_hits_addend()->set_value(0);
  rls::RateLimitResponse peeked = Call(peek);
  EXPECT_EQ(peeked.overall_code(), rls::RateLimitResponse::OK);
  EXPECT_EQ(peeked.statuses(0).limit_remaining(), 1u);
  // Per descriptor 1 overrides the request's 5.
  rls::RateLimitRequest one = SignIn("bob", 5);
  one.mutable_descriptors(0)->mutable_hits_addend()->set_value(1);
  rls::RateLimitResponse last = Call(one);
  EXPECT_EQ(last.overall_code(), rls::RateLimitResponse::OK);
  EXPECT_EQ(last.statuses(0).limit_remaining(), 0u);
  EXPECT_EQ(Call(SignIn("bob")).overall_code(), rls::RateLimitResponse::OVER_LIMIT);
}

TEST_F(Grpc, LimitOverrideAndComposite) {
  // Envoy's RateLimitOverride: 1 per hour instead of the configured 10 per minute.
  rls::RateLimitRequest r;
  r.set_domain("shop");
  auto* d = r.add_descriptors();
  auto* e = d->add_entries();
  e->set_key("route");
  e->set_value("checkout");
  e = d->add_entries();
  e->set_key("account");
  e->set_value("ovr");
  d->mutable_limit()->set_requests_per_unit(1);
  d->mutable_limit()->set_unit(envoy::type::v3::HOUR);
  rls::RateLimitResponse first = Call(r);
  EXPECT_EQ(first.overall_code(), rls::RateLimitResponse::OK);
  EXPECT_EQ(first.statuses(0).current_limit().requests_per_unit(), 1u);
  EXPECT_EQ(first.statuses(0).current_limit().unit(), rls::RateLimitResponse::RateLimit::HOUR);
  EXPECT_EQ(Call(r).overall_code(), rls::RateLimitResponse::OVER_LIMIT);
  // Two descriptors, one composite: the tenant's refusal spends nothing globally.
  auto two = [](const std::string& tenant) {
    rls::RateLimitRequest q;
    q.set_domain("shop");
    auto* t = q.add_descriptors()->add_entries();
    t->set_key("tenant");
    t->set_value(tenant);
    auto* g = q.add_descriptors()->add_entries();
    g->set_key("api");
    g->set_value("search");
    return q;
  };
  for (int i = 0; i < 4; ++i) EXPECT_EQ(Call(two("t1")).overall_code(), rls::RateLimitResponse::OK);
  rls::RateLimitResponse refused = Call(two("t1"));
  EXPECT_EQ(refused.overall_code(), rls::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(refused.statuses(0).code(), rls::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(refused.statuses(1).code(), rls::RateLimitResponse::OK);
  rls::RateLimitResponse other = Call(two("t2"));
  EXPECT_EQ(other.overall_code(), rls::RateLimitResponse::OK);
  EXPECT_EQ(other.statuses(1).limit_remaining(), 1u);  // 6 - 4 - 1: the refusal spent nothing
}

// What Envoy's x-ratelimit headers take from a response: among the statuses with a
// current_limit, the one with the least limit_remaining (the first of equals).
const rls::RateLimitResponse::DescriptorStatus* EnvoyHeadline(const rls::RateLimitResponse& r) {
  const rls::RateLimitResponse::DescriptorStatus* least = nullptr;
  for (const auto& s : r.statuses()) {
    if (!s.has_current_limit()) continue;
    if (least == nullptr || s.limit_remaining() < least->limit_remaining()) least = &s;
  }
  return least;
}

TEST_F(Grpc, EveryStatusOfAnAdmittedCompositeCarriesItsState) {
  rls::RateLimitRequest q;
  q.set_domain("shop");
  auto* g = q.add_descriptors()->add_entries();
  g->set_key("api");
  g->set_value("search");
  auto* t = q.add_descriptors()->add_entries();
  t->set_key("tenant");
  t->set_value("t4");
  // search_global 6/min listed first, per_tenant 4/min second.
  rls::RateLimitResponse r = Call(q);
  ASSERT_EQ(r.overall_code(), rls::RateLimitResponse::OK);
  ASSERT_EQ(r.statuses_size(), 2);
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(i);
    EXPECT_TRUE(r.statuses(i).has_current_limit());
    EXPECT_TRUE(r.statuses(i).has_duration_until_reset());
    // Whole milliseconds: in the last second of a minute the seconds alone are 0.
    const int64_t ms = r.statuses(i).duration_until_reset().seconds() * 1000 +
                       r.statuses(i).duration_until_reset().nanos() / 1000000;
    EXPECT_GT(ms, 0);
    EXPECT_LE(ms, 60000);
  }
  EXPECT_EQ(r.statuses(0).limit_remaining(), 5u);
  EXPECT_EQ(r.statuses(1).limit_remaining(), 3u);
  const auto* headline = EnvoyHeadline(r);
  ASSERT_NE(headline, nullptr);
  EXPECT_EQ(headline->current_limit().name(), "per_tenant");
  EXPECT_EQ(headline->limit_remaining(), 3u);
  // The next admitted request: each limit's own state again.
  rls::RateLimitResponse again = Call(q);
  EXPECT_EQ(again.statuses(0).limit_remaining(), 4u);
  EXPECT_EQ(again.statuses(1).limit_remaining(), 2u);
}

TEST_F(Grpc, UnknownDomainEmptyDescriptorsAndBadInput) {
  rls::RateLimitRequest unknown = SignIn("x");
  unknown.set_domain("nope");
  rls::RateLimitResponse r = Call(unknown);
  EXPECT_EQ(r.overall_code(), rls::RateLimitResponse::OK);
  EXPECT_EQ(r.statuses_size(), 1);
  rls::RateLimitRequest empty;
  empty.set_domain("shop");
  rls::RateLimitResponse e = Call(empty);
  EXPECT_EQ(e.overall_code(), rls::RateLimitResponse::OK);
  EXPECT_EQ(e.statuses_size(), 0);
  grpc::Status status;
  rls::RateLimitRequest no_domain = SignIn("x");
  no_domain.set_domain("");
  Call(no_domain, &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "domain must not be empty");
  rls::RateLimitRequest huge = SignIn(std::string(5000, 'v'));
  Call(huge, &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // The service still answers.
  EXPECT_EQ(Call(SignIn("y")).overall_code(), rls::RateLimitResponse::OK);
}

TEST_F(Grpc, ClosedPolicyWhenRedisIsDown) {
  redis_.Kill();
  rls::RateLimitResponse r = Call(SignIn("z"));
  EXPECT_EQ(r.overall_code(), rls::RateLimitResponse::OVER_LIMIT);
  bool reason = false;
  for (const auto& h : r.response_headers_to_add())
    reason |= h.key() == "x-sluice-reason" && h.value() == "store_unavailable";
  EXPECT_TRUE(reason);
  redis_.Start();
}

TEST_F(Grpc, UnknownMethodOversizedMessageAndManyCallsFromCpp) {
  grpc::Status status = GenericCall("/envoy.service.ratelimit.v3.RateLimitService/Nope", "");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(status.error_message(),
            "unknown method /envoy.service.ratelimit.v3.RateLimitService/Nope");
  // Not a RateLimitRequest: INVALID_ARGUMENT.
  status = GenericCall("/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
                       std::string("\xff\xff\xff", 3));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // Over the 1 MiB message limit.
  rls::RateLimitRequest big = SignIn("x");
  big.set_domain(std::string(2 << 20, 'd'));
  Call(big, &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  // 300 calls in flight on one channel (3x the server's concurrent streams).
  std::mutex mu;
  std::condition_variable cv;
  int done = 0, ok = 0;
  struct One {
    grpc::ClientContext context;
    rls::RateLimitRequest request;
    rls::RateLimitResponse response;
  };
  std::vector<std::unique_ptr<One>> calls;
  for (int i = 0; i < 300; ++i) {
    auto one = std::make_unique<One>();
    one->request = SignIn("many-" + std::to_string(i));
    one->context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    One* o = one.get();
    calls.push_back(std::move(one));
    stub_->async()->ShouldRateLimit(&o->context, &o->request, &o->response, [&, o](grpc::Status s) {
      std::lock_guard lock(mu);
      ++done;
      ok += s.ok() && o->response.overall_code() == rls::RateLimitResponse::OK;
      cv.notify_all();
    });
  }
  std::unique_lock lock(mu);
  cv.wait_for(lock, std::chrono::seconds(60), [&] { return done == 300; });
  EXPECT_EQ(done, 300);
  EXPECT_EQ(ok, 300);
}

// sluiced's resident memory (a /proc/<pid>/status field, in bytes).
std::size_t ProcStatusBytes(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0) return std::stoull(line.substr(field.size() + 1)) * 1024;
  return 0;
}

// Calls that send a whole 1 MiB message but never end their stream: sluiced holds at
// most 8 MiB of them per connection (docs/sluiced.md), answering the others RESOURCE_EXHAUSTED,
// so its peak resident memory grows by tens of MiB, not by what the clients send.
TEST_F(Grpc, StreamsWithoutEndStreamHoldBoundedMemory) {
#if defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer keeps freed memory in a quarantine (256 MiB by default), so the
  // refused messages' buffers would stay resident after sluiced let go of them: without
  // it, the peak measures what sluiced holds, as in a build without the sanitizer.
  const char* inherited = std::getenv("ASAN_OPTIONS");
  Start({std::string("ASAN_OPTIONS=") + (inherited ? inherited : "") +
         ":quarantine_size_mb=0:thread_local_quarantine_size_kb=0"});
#endif
  const std::size_t rss_before = ProcStatusBytes(sluiced_->pid(), "VmRSS");
  ASSERT_GT(rss_before, 0u);
  const std::string message(1 << 20, 'd');
  const std::string body = bench::GrpcFramed(message);
  // One message after the other (each sent whole before the next stream starts), so
  // that no bound is reached by messages still arriving side by side: every complete
  // message is held.
  std::vector<std::unique_ptr<bench::H2Client>> clients;
  for (int c = 0; c < 2; ++c) {
    std::string error;
    clients.push_back(bench::H2Client::Connect("127.0.0.1", sluiced_->grpc_port(), error));
    ASSERT_TRUE(clients.back()) << error;
    auto& client = *clients.back();
    for (int i = 0; i < 40; ++i) {
      const int32_t id =
          client.Submit("/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", body, {},
                        /*end_stream=*/false);
      ASSERT_TRUE(client.PumpUntil(
          [&] { return client.call(id)->closed || client.call(id)->body_sent == body.size(); },
          std::chrono::seconds(10)));
    }
  }
  for (auto& c : clients) c->Pump(std::chrono::milliseconds(50));
  int refused = 0;
  for (auto& c : clients)
    for (int32_t id = 1; id < 80; id += 2) {
      const bench::H2Call* call = c->call(id);
      if (call->closed) {
        EXPECT_EQ(call->GrpcStatus(), 8) << call->GrpcMessage();
        ++refused;
      }
    }
  // 7 messages (with their prefixes) fit in 8 MiB per connection.
  EXPECT_GE(refused, 2 * (40 - 7));
  const std::size_t peak = ProcStatusBytes(sluiced_->pid(), "VmHWM");
  EXPECT_LT(peak, rss_before + (std::size_t{48} << 20))
      << "RSS before " << (rss_before >> 20) << " MiB, peak " << (peak >> 20) << " MiB";
  // The service answers as ever.
  EXPECT_EQ(Call(SignIn("after-flood")).overall_code(), rls::RateLimitResponse::OK);
}

// --grpc-max-buffered-mib bounds the request bytes all connections hold together: at 1
// MiB, eight messages of 256 KiB held on eight connections (one each, far below a
// connection's own 8 MiB) do not all fit; those over are answered RESOURCE_EXHAUSTED
// naming the bound, and once the held calls are reset the service answers as ever.
TEST_F(Grpc, RequestBytesOfAllConnectionsAreBoundedByTheFlag) {
  Start({}, {"--grpc-max-buffered-mib", "1"});
  const std::string body = std::string{0, 0, 4, 0, 0} + std::string(256 << 10, 'd');
  std::vector<std::unique_ptr<bench::H2Client>> clients;
  std::vector<int32_t> ids;
  for (int c = 0; c < 8; ++c) {
    std::string error;
    clients.push_back(bench::H2Client::Connect("127.0.0.1", sluiced_->grpc_port(), error));
    ASSERT_TRUE(clients.back()) << error;
    auto& client = *clients.back();
    ids.push_back(client.Submit("/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
                                body, {}, /*end_stream=*/false));
    const int32_t id = ids.back();
    ASSERT_TRUE(client.PumpUntil(
        [&] { return client.call(id)->closed || client.call(id)->body_sent == body.size(); },
        std::chrono::seconds(10)));
  }
  for (auto& c : clients) c->Pump(std::chrono::milliseconds(50));
  int held = 0, refused = 0;
  for (std::size_t c = 0; c < clients.size(); ++c) {
    const bench::H2Call* call = clients[c]->call(ids[c]);
    if (!call->closed) {
      ++held;
      continue;
    }
    EXPECT_EQ(call->GrpcStatus(), 8) << call->GrpcMessage();
    EXPECT_EQ(call->GrpcMessage(), "more than 1048576 request bytes buffered on this server");
    ++refused;
  }
  EXPECT_LE(held, 3);  // 3 messages and their prefixes fit in 1 MiB, a 4th does not
  EXPECT_GE(held, 1);
  EXPECT_EQ(held + refused, 8);
  for (std::size_t c = 0; c < clients.size(); ++c) {
    if (!clients[c]->call(ids[c])->closed) clients[c]->Reset(ids[c]);
    clients[c]->Pump(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(Call(SignIn("after-the-bound")).overall_code(), rls::RateLimitResponse::OK);
}

// A descriptor value that is not UTF-8 under a detailed_metric limit: its series' label
// shows U+FFFD for each odd byte, and the page still passes promtool.
TEST_F(Grpc, DetailedSeriesOfValuesThatAreNotUtf8KeepTheScrapeValid) {
  config_.Write("det.yaml",
                "domain: det\ndescriptors:\n  - key: user\n    detailed_metric: true\n"
                "    rate_limit: {name: per_user, unit: minute, requests_per_unit: 1}\n");
  Start();
  rls::RateLimitRequest r;
  r.set_domain("det");
  auto* e = r.add_descriptors()->add_entries();
  e->set_key("user");
  e->set_value("caf\xc3\x28\xff");
  EXPECT_EQ(Call(r).overall_code(), rls::RateLimitResponse::OK);
  EXPECT_EQ(Call(r).overall_code(), rls::RateLimitResponse::OVER_LIMIT);
  const testing::HttpReply page = testing::Call(sluiced_->metrics_port(), "GET", "/metrics");
  ASSERT_EQ(page.status, 200);
  EXPECT_NE(page.body.find("descriptor=\"user=caf\xef\xbf\xbd(\xef\xbf\xbd\""), std::string::npos)
      << page.body;
  std::string promtool;
  EXPECT_TRUE(testing::PromtoolAccepts(page.body, promtool)) << promtool;
}

TEST_F(Grpc, HealthAndReflection) {
  namespace health = ::grpc::health::v1;
  namespace reflection = ::grpc::reflection::v1alpha;
  std::string out;
  health::HealthCheckResponse reply;
  ASSERT_TRUE(GenericCall("/grpc.health.v1.Health/Check", "", &out).ok());
  ASSERT_TRUE(reply.ParseFromString(out));
  EXPECT_EQ(reply.status(), health::HealthCheckResponse::SERVING);
  health::HealthCheckRequest named;
  named.set_service("envoy.service.ratelimit.v3.RateLimitService");
  ASSERT_TRUE(GenericCall("/grpc.health.v1.Health/Check", named.SerializeAsString(), &out).ok());
  named.set_service("nope");
  EXPECT_EQ(GenericCall("/grpc.health.v1.Health/Check", named.SerializeAsString()).error_code(),
            grpc::StatusCode::NOT_FOUND);

  // Reflection and Watch through the lean client (streams).
  std::string error;
  auto client = bench::H2Client::Connect("127.0.0.1", sluiced_->grpc_port(), error);
  ASSERT_TRUE(client) << error;
  auto reflect = [&](const reflection::ServerReflectionRequest& r) {
    const int32_t id =
        client->Submit("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                       bench::GrpcFramed(r.SerializeAsString()));
    EXPECT_TRUE(
        client->PumpUntil([&] { return client->call(id)->closed; }, std::chrono::seconds(10)));
    EXPECT_EQ(client->call(id)->GrpcStatus(), 0);
    reflection::ServerReflectionResponse response;
    EXPECT_TRUE(response.ParseFromString(client->call(id)->Message()));
    return response;
  };
  reflection::ServerReflectionRequest r;
  r.set_list_services("");
  reflection::ServerReflectionResponse listed = reflect(r);
  std::set<std::string> services;
  for (const auto& sv : listed.list_services_response().service()) services.insert(sv.name());
  EXPECT_EQ(services, (std::set<std::string>{
                          "envoy.service.ratelimit.v3.RateLimitService",
                          "envoy.service.rate_limit_quota.v3.RateLimitQuotaService",
                          "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"}));
  r.set_file_containing_symbol("envoy.service.ratelimit.v3.RateLimitService");
  reflection::ServerReflectionResponse files = reflect(r);
  std::vector<std::string> names;
  for (const auto& bytes : files.file_descriptor_response().file_descriptor_proto()) {
    google::protobuf::FileDescriptorProto file;
    ASSERT_TRUE(file.ParseFromString(bytes));
    names.push_back(file.name());
  }
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names[0], "envoy/service/ratelimit/v3/rls.proto");
  EXPECT_NE(std::find(names.begin(), names.end(), "google/protobuf/duration.proto"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "envoy/type/v3/ratelimit_unit.proto"),
            names.end());
  r.set_file_by_filename("grpc/health/v1/health.proto");
  EXPECT_EQ(reflect(r).file_descriptor_response().file_descriptor_proto_size(), 1);
  r.set_file_containing_symbol("no.such.Symbol");
  EXPECT_EQ(reflect(r).error_response().error_code(), 5);

  // Watch: SERVING, and the stream stays open.
  const int32_t watch = client->Submit("/grpc.health.v1.Health/Watch", bench::GrpcFramed(""));
  ASSERT_TRUE(client->PumpUntil([&] { return !client->call(watch)->data.empty(); },
                                std::chrono::seconds(10)));
  ASSERT_TRUE(reply.ParseFromString(client->call(watch)->Message()));
  EXPECT_EQ(reply.status(), health::HealthCheckResponse::SERVING);
  client->Pump(std::chrono::milliseconds(50));
  EXPECT_FALSE(client->call(watch)->closed);
}

// Descriptor values are bytes: one that is not UTF-8 (Envoy copies header bytes >= 0x80
// into descriptors) is decided like any other, and the limit applies to it. No request
// writes a line to sluiced's log, not even one that fails to parse for a string that is
// not UTF-8 (a health check's service name).
TEST_F(Grpc, DescriptorValuesThatAreNotUtf8AreDecided) {
  const std::string odd = "caf\xc3\x28\xff\x80";
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(Call(SignIn(odd, 1)).overall_code(), rls::RateLimitResponse::OK) << i;
  const rls::RateLimitResponse over = Call(SignIn(odd, 1));
  EXPECT_EQ(over.overall_code(), rls::RateLimitResponse::OVER_LIMIT);
  ASSERT_EQ(over.statuses_size(), 1);
  EXPECT_EQ(over.statuses(0).current_limit().name(), "sign_in");
  // Another such value is another account.
  EXPECT_EQ(Call(SignIn("\xfe", 1)).overall_code(), rls::RateLimitResponse::OK);
  const std::string bad_service("\x0a\x02\xff\xfe", 4);  // HealthCheckRequest{service}
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(GenericCall("/grpc.health.v1.Health/Check", bad_service).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(sluiced_->log().find("libprotobuf"), std::string::npos) << sluiced_->log();
}

TEST_F(Grpc, PythonClientFromDebianGrpcio) {
  TempDir out;
  const std::string cmd = "/usr/bin/python3 " + std::string(SLUICED_SOURCE_DIR) +
                          "/service/tests/rls_client.py " + std::to_string(sluiced_->grpc_port()) +
                          " " + SLUICED_SOURCE_DIR + "/service/proto " + out.path() + " > " +
                          out.path() + "/log.txt 2>&1";
  const int rc = std::system(cmd.c_str());
  const std::string log = testing::ReadAll(out.path() + "/log.txt");
  EXPECT_EQ(rc, 0) << log;
  EXPECT_NE(log.find("python rls client: all checks passed"), std::string::npos) << log;
}

}  // namespace
}  // namespace sluiced
