#include "service/grpc_service.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "service/json_api.h"

namespace sluiced {

namespace rls = envoy::service::ratelimit::v3;

namespace {

bool FromProtoUnit(envoy::type::v3::RateLimitUnit u, Unit& unit) {
  switch (u) {
    case envoy::type::v3::SECOND: unit = Unit::kSecond; return true;
    case envoy::type::v3::MINUTE: unit = Unit::kMinute; return true;
    case envoy::type::v3::HOUR: unit = Unit::kHour; return true;
    case envoy::type::v3::DAY: unit = Unit::kDay; return true;
    case envoy::type::v3::MONTH: unit = Unit::kMonth; return true;
    case envoy::type::v3::YEAR: unit = Unit::kYear; return true;
    default: return false;
  }
}

rls::RateLimitResponse::RateLimit::Unit ToProtoUnit(Unit unit) {
  using R = rls::RateLimitResponse::RateLimit;
  switch (unit) {
    case Unit::kSecond: return R::SECOND;
    case Unit::kMinute: return R::MINUTE;
    case Unit::kHour: return R::HOUR;
    case Unit::kDay: return R::DAY;
    case Unit::kWeek: return R::WEEK;
    case Unit::kMonth: return R::MONTH;
    case Unit::kYear: return R::YEAR;
  }
  return R::UNKNOWN;
}

// The request as the engine takes it, or an error message.
std::string Convert(const rls::RateLimitRequest& in, CheckRequest& out) {
  out.domain = in.domain();
  if (out.domain.empty()) return "domain must not be empty";
  out.hits = in.hits_addend();
  if (in.descriptors_size() > static_cast<int>(kMaxDescriptors))
    return "at most " + std::to_string(kMaxDescriptors) + " descriptors per request";
  for (const auto& d : in.descriptors()) {
    RequestDescriptor rd;
    if (d.entries_size() == 0) return "a descriptor needs at least one entry";
    if (d.entries_size() > static_cast<int>(kMaxEntries))
      return "a descriptor has at most " + std::to_string(kMaxEntries) + " entries";
    for (const auto& e : d.entries()) {
      if (e.key().empty()) return "an entry's key must not be empty";
      if (e.key().size() > kMaxFieldBytes || e.value().size() > kMaxFieldBytes)
        return "an entry's key or value is longer than " + std::to_string(kMaxFieldBytes) +
               " bytes";
      rd.entries.emplace_back(e.key(), e.value());
    }
    if (d.has_hits_addend()) rd.hits = d.hits_addend().value();
    if (d.has_limit()) {
      LimitOverride o;
      o.requests_per_unit = d.limit().requests_per_unit();
      if (!FromProtoUnit(d.limit().unit(), o.unit)) return "limit override needs a unit";
      rd.limit = o;
    }
    out.descriptors.push_back(std::move(rd));
  }
  return {};
}

}  // namespace

class RlsService final : public rls::RateLimitService::CallbackService {
 public:
  explicit RlsService(Engine& engine) : engine_(engine) {}

  grpc::ServerUnaryReactor* ShouldRateLimit(grpc::CallbackServerContext* context,
                                            const rls::RateLimitRequest* request,
                                            rls::RateLimitResponse* response) override {
    engine_.metrics().Request(true);
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    CheckRequest check;
    if (std::string error = Convert(*request, check); !error.empty()) {
      engine_.metrics().BadRequest();
      reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, error));
      return reactor;
    }
    engine_.Check(std::move(check), [reactor, response](CheckResult result) {
      // An unknown domain limits nothing (as envoy-ratelimit answers it): OK.
      response->set_overall_code(result.overall == Code::kOk ? rls::RateLimitResponse::OK
                                                             : rls::RateLimitResponse::OVER_LIMIT);
      for (const auto& s : result.statuses) {
        auto* st = response->add_statuses();
        st->set_code(s.code == Code::kOk ? rls::RateLimitResponse::OK
                                         : rls::RateLimitResponse::OVER_LIMIT);
        if (s.rule && !s.rule->unlimited && s.rule->kind != RuleKind::kConcurrency) {
          auto* limit = st->mutable_current_limit();
          limit->set_requests_per_unit(
              static_cast<uint32_t>(std::min<int64_t>(s.limit, UINT32_MAX)));
          limit->set_unit(ToProtoUnit(s.unit));
          limit->set_name(s.rule->name);
        }
        if (s.decision) {
          st->set_limit_remaining(
              static_cast<uint32_t>(std::min<int64_t>(s.decision->remaining, UINT32_MAX)));
          const int64_t ms = s.decision->reset_after.count();
          st->mutable_duration_until_reset()->set_seconds(ms / 1000);
          st->mutable_duration_until_reset()->set_nanos(static_cast<int32_t>(ms % 1000) * 1000000);
        }
      }
      for (auto& [k, v] : RateLimitHeaders(result)) {
        auto* h = response->add_response_headers_to_add();
        h->set_key(k);
        h->set_value(v);
      }
      if (result.overall == Code::kUnavailable) {
        // A `closed` limit refused because the store failed: not over a limit, say so.
        auto* h = response->add_response_headers_to_add();
        h->set_key("x-sluice-reason");
        h->set_value("store_unavailable");
      }
      reactor->Finish(grpc::Status::OK);
    });
    return reactor;
  }

 private:
  Engine& engine_;
};

sluice::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(Engine& engine,
                                                                const std::string& host_port) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  std::unique_ptr<GrpcServer> server(new GrpcServer());
  server->service_ = std::make_unique<RlsService>(engine);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(host_port, grpc::InsecureServerCredentials(), &server->port_);
  builder.RegisterService(server->service_.get());
  builder.SetMaxReceiveMessageSize(1 << 20);
  server->server_ = builder.BuildAndStart();
  if (!server->server_ || server->port_ == 0) {
    return sluice::UnavailableError("cannot listen for gRPC on " + host_port);
  }
  return server;
}

void GrpcServer::Stop() {
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
}

GrpcServer::~GrpcServer() {
  Stop();
  if (server_) server_->Wait();
}

}  // namespace sluiced
