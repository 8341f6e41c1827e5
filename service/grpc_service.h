// service/grpc_service.h — Envoy's RLS v3 (envoy.service.ratelimit.v3.RateLimitService/
// ShouldRateLimit) on gRPC's callback API: a call's thread never waits for Redis; the
// reply is finished from the check's completion. Also grpc.health.v1 and reflection.
#pragma once

#include <memory>
#include <string>

#include "service/engine.h"
#include "sluice/status.h"

namespace grpc {
class Server;
}

namespace sluiced {

class RlsService;

class GrpcServer {
 public:
  // Listens on host:port (port 0: any free port, see port()).
  static sluice::StatusOr<std::unique_ptr<GrpcServer>> Start(Engine& engine,
                                                             const std::string& host_port);
  ~GrpcServer();
  int port() const { return port_; }
  void Stop();

 private:
  GrpcServer() = default;
  std::unique_ptr<RlsService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace sluiced
