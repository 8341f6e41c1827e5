#include "service/grpc_service.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/stubs/logging.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>

#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "grpc/health/v1/health.pb.h"
#include "grpc/reflection/v1alpha/reflection.pb.h"
#include "service/json_api.h"

namespace sluiced {

namespace rls = envoy::service::ratelimit::v3;
namespace health = grpc::health::v1;
namespace reflection = grpc::reflection::v1alpha;
namespace pb = google::protobuf;

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

rls::RateLimitResponse ToProto(const CheckResult& result) {
  rls::RateLimitResponse response;
  // An unknown domain limits nothing (as envoy-ratelimit answers it): OK.
  response.set_overall_code(result.overall == Code::kOk ? rls::RateLimitResponse::OK
                                                        : rls::RateLimitResponse::OVER_LIMIT);
  for (const auto& s : result.statuses) {
    auto* st = response.add_statuses();
    st->set_code(s.code == Code::kOk ? rls::RateLimitResponse::OK
                                     : rls::RateLimitResponse::OVER_LIMIT);
    if (s.rule && !s.rule->unlimited && s.rule->kind != RuleKind::kConcurrency) {
      auto* limit = st->mutable_current_limit();
      limit->set_requests_per_unit(static_cast<uint32_t>(std::min<int64_t>(s.limit, UINT32_MAX)));
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
    auto* h = response.add_response_headers_to_add();
    h->set_key(k);
    h->set_value(v);
  }
  if (result.overall == Code::kUnavailable) {
    // A `closed` limit refused because the store failed: not over a limit, say so.
    auto* h = response.add_response_headers_to_add();
    h->set_key("x-sluice-reason");
    h->set_value("store_unavailable");
  }
  return response;
}

constexpr const char* kServices[] = {"envoy.service.ratelimit.v3.RateLimitService",
                                     "envoy.service.rate_limit_quota.v3.RateLimitQuotaService",
                                     "grpc.health.v1.Health",
                                     "grpc.reflection.v1alpha.ServerReflection"};

bool Serves(const std::string& service) {
  if (service.empty()) return true;  // the server as a whole
  for (const char* s : kServices)
    if (service == s) return true;
  return false;
}

// `file` and the files it depends on, each once, as serialized FileDescriptorProtos.
void AddFiles(const pb::FileDescriptor* file, reflection::FileDescriptorResponse& out) {
  std::set<const pb::FileDescriptor*> seen;
  std::vector<const pb::FileDescriptor*> todo{file};
  while (!todo.empty()) {
    const pb::FileDescriptor* f = todo.back();
    todo.pop_back();
    if (!seen.insert(f).second) continue;
    pb::FileDescriptorProto proto;
    f->CopyTo(&proto);
    out.add_file_descriptor_proto(proto.SerializeAsString());
    for (int i = f->dependency_count() - 1; i >= 0; --i) todo.push_back(f->dependency(i));
  }
}

// One ServerReflectionInfo request, answered from the generated descriptor pool (every
// proto sluiced is built with).
GrpcStatus Reflect(std::string_view in, std::vector<std::string>& replies) {
  reflection::ServerReflectionRequest request;
  if (!request.ParseFromArray(in.data(), static_cast<int>(in.size())))
    return {GrpcCode::kInvalidArgument, "cannot parse ServerReflectionRequest"};
  reflection::ServerReflectionResponse response;
  response.set_valid_host(request.host());
  *response.mutable_original_request() = request;
  const pb::DescriptorPool* pool = pb::DescriptorPool::generated_pool();
  auto error = [&response](GrpcCode code, const std::string& message) {
    response.mutable_error_response()->set_error_code(static_cast<int>(code));
    response.mutable_error_response()->set_error_message(message);
  };
  using R = reflection::ServerReflectionRequest;
  switch (request.message_request_case()) {
    case R::kFileByFilename:
      if (const auto* f = pool->FindFileByName(request.file_by_filename()))
        AddFiles(f, *response.mutable_file_descriptor_response());
      else
        error(GrpcCode::kNotFound, "file not found: " + request.file_by_filename());
      break;
    case R::kFileContainingSymbol:
      if (const auto* f = pool->FindFileContainingSymbol(request.file_containing_symbol()))
        AddFiles(f, *response.mutable_file_descriptor_response());
      else
        error(GrpcCode::kNotFound, "symbol not found: " + request.file_containing_symbol());
      break;
    case R::kFileContainingExtension: {
      const auto& ext = request.file_containing_extension();
      const auto* type = pool->FindMessageTypeByName(ext.containing_type());
      const auto* field =
          type != nullptr ? pool->FindExtensionByNumber(type, ext.extension_number()) : nullptr;
      if (field != nullptr)
        AddFiles(field->file(), *response.mutable_file_descriptor_response());
      else
        error(GrpcCode::kNotFound, "extension not found: " + ext.containing_type() + " " +
                                       std::to_string(ext.extension_number()));
      break;
    }
    case R::kAllExtensionNumbersOfType: {
      const auto* type = pool->FindMessageTypeByName(request.all_extension_numbers_of_type());
      if (type == nullptr) {
        error(GrpcCode::kNotFound, "type not found: " + request.all_extension_numbers_of_type());
        break;
      }
      std::vector<const pb::FieldDescriptor*> extensions;
      pool->FindAllExtensions(type, &extensions);
      auto* numbers = response.mutable_all_extension_numbers_response();
      numbers->set_base_type_name(type->full_name());
      for (const auto* e : extensions) numbers->add_extension_number(e->number());
      break;
    }
    case R::kListServices:
      for (const char* s : kServices)
        response.mutable_list_services_response()->add_service()->set_name(s);
      break;
    default: error(GrpcCode::kInvalidArgument, "empty ServerReflectionRequest"); break;
  }
  replies.push_back(response.SerializeAsString());
  return {};
}

// libprotobuf's own messages (a string field that is not UTF-8 in a request that then
// fails to parse, and is answered INVALID_ARGUMENT anyway) would otherwise go to stderr,
// a line per request: they go to sluiced's log at debug level, at most one a second.
// A fatal one (protobuf aborts after it) is always written.
void OnProtobufLog(pb::LogLevel level, const char* file, int line, const std::string& message) {
  if (level == pb::LOGLEVEL_FATAL) {
    spdlog::critical("libprotobuf {}:{}: {}", file, line, message);
    return;
  }
  static std::atomic<int64_t> last_ms{0};
  static std::atomic<uint64_t> suppressed{0};
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  int64_t last = last_ms.load(std::memory_order_relaxed);
  if (now - last < 1000 || !last_ms.compare_exchange_strong(last, now)) {
    suppressed.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const uint64_t more = suppressed.exchange(0, std::memory_order_relaxed);
  spdlog::debug("libprotobuf {}:{}: {}{}", file, line, message,
                more ? " (and " + std::to_string(more) + " more since the last line)" : "");
}

bool ParseHealth(std::string_view in, health::HealthCheckRequest& request) {
  return request.ParseFromArray(in.data(), static_cast<int>(in.size()));
}

std::string HealthReply(health::HealthCheckResponse::ServingStatus status) {
  health::HealthCheckResponse response;
  response.set_status(status);
  return response.SerializeAsString();
}

}  // namespace

sluice::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(Engine& engine,
                                                                const std::string& host_port,
                                                                GrpcServerOptions options,
                                                                RlqsOptions rlqs_options) {
  const auto colon = host_port.rfind(':');
  const std::string port = colon == std::string::npos ? "" : host_port.substr(colon + 1);
  if (colon == std::string::npos || colon == 0 || port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) > 65535)
    return sluice::InvalidArgumentError("expected HOST:PORT for gRPC, not '" + host_port + "'");
  options.host = host_port.substr(0, colon);
  if (options.host.size() > 2 && options.host.front() == '[' && options.host.back() == ']')
    options.host = options.host.substr(1, options.host.size() - 2);
  options.port = static_cast<uint16_t>(std::stoi(port));
  static std::once_flag log_handler;
  std::call_once(log_handler, [] { pb::SetLogHandler(&OnProtobufLog); });

  auto rlqs = RlqsService::Create(engine, rlqs_options);
  if (!rlqs.ok()) return rlqs.status();
  std::vector<GrpcMethod> methods;
  methods.push_back((*rlqs)->Method());
  methods.push_back({.path = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
                     .unary = [&engine](std::string_view in, UnaryReply reply) {
                       engine.metrics().Request(true);
                       rls::RateLimitRequest request;
                       CheckRequest check;
                       std::string error;
                       if (!request.ParseFromArray(in.data(), static_cast<int>(in.size())))
                         error = "cannot parse RateLimitRequest";
                       else
                         error = Convert(request, check);
                       if (!error.empty()) {
                         engine.metrics().BadRequest();
                         return reply.Fail({GrpcCode::kInvalidArgument, std::move(error)});
                       }
                       engine.Check(std::move(check),
                                    [reply = std::move(reply)](CheckResult result) mutable {
                                      reply.Finish(ToProto(result).SerializeAsString());
                                    });
                     }});
  methods.push_back(
      {.path = "/grpc.health.v1.Health/Check",
       .unary = [&engine](std::string_view in, UnaryReply reply) {
         health::HealthCheckRequest request;
         if (!ParseHealth(in, request))
           return reply.Fail({GrpcCode::kInvalidArgument, "cannot parse HealthCheckRequest"});
         if (!Serves(request.service()))
           return reply.Fail({GrpcCode::kNotFound, "unknown service " + request.service()});
         reply.Finish(HealthReply(engine.draining() ? health::HealthCheckResponse::NOT_SERVING
                                                    : health::HealthCheckResponse::SERVING));
       }});
  // Watch: the status once; it never changes while sluiced serves, so the stream then
  // stays open until the client cancels it, or until sluiced stops gracefully: then
  // NOT_SERVING, and the call ends UNAVAILABLE.
  methods.push_back(
      {.path = "/grpc.health.v1.Health/Watch",
       .stream = [](std::string_view in, std::vector<std::string>& replies) -> GrpcStatus {
         health::HealthCheckRequest request;
         if (!ParseHealth(in, request))
           return {GrpcCode::kInvalidArgument, "cannot parse HealthCheckRequest"};
         replies.push_back(HealthReply(Serves(request.service())
                                           ? health::HealthCheckResponse::SERVING
                                           : health::HealthCheckResponse::SERVICE_UNKNOWN));
         return {};
       },
       .finish_on_half_close = false,
       .drain_reply = HealthReply(health::HealthCheckResponse::NOT_SERVING)});
  methods.push_back({.path = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                     .stream = &Reflect});
  auto h2 = H2GrpcServer::Start(std::move(options), std::move(methods));
  if (!h2.ok()) return h2.status();
  std::unique_ptr<GrpcServer> server(new GrpcServer());
  server->rlqs_ = std::move(*rlqs);
  server->server_ = std::move(*h2);
  return server;
}

}  // namespace sluiced
