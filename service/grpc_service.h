// service/grpc_service.h — Envoy's RLS v3 (envoy.service.ratelimit.v3.RateLimitService/
// ShouldRateLimit), Envoy's RLQS v3 (service/rlqs.h), grpc.health.v1.Health (Check,
// Watch) and server reflection
// (grpc.reflection.v1alpha) on sluiced's own HTTP/2 gRPC server (service/h2_server.h):
// a call's thread never waits for Redis; the reply is finished from the check's
// completion.
#pragma once

#include <memory>
#include <string>

#include "service/engine.h"
#include "service/h2_server.h"
#include "service/rlqs.h"
#include "sluice/status.h"

namespace sluiced {

class GrpcServer {
 public:
  // Listens on host:port (port 0: any free port, see port()); `options` gives the
  // bounds and timeouts (its host and port are taken from host_port).
  static sluice::StatusOr<std::unique_ptr<GrpcServer>> Start(Engine& engine,
                                                             const std::string& host_port,
                                                             GrpcServerOptions options = {},
                                                             RlqsOptions rlqs = {});
  int port() const { return server_->port(); }
  // See H2GrpcServer::Drain and open_connections.
  void Drain() { server_->Drain(); }
  std::size_t open_connections() const { return server_->open_connections(); }
  void Stop() { server_->Stop(); }

 private:
  GrpcServer() = default;
  std::shared_ptr<RlqsService> rlqs_;
  std::unique_ptr<H2GrpcServer> server_;
};

}  // namespace sluiced
