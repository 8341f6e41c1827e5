// service/routes.h — what each HTTP path of sluiced does: the public listener (checks,
// leases, health), the metrics listener (Prometheus text, optionally behind a bearer
// token) and the admin listener (bearer token on every call).
#pragma once

#include <string>

#include "service/engine.h"
#include "service/http_server.h"

namespace sluiced {

// `metrics_listener` is the metrics listener's address, named in the 404 of /metrics
// (metrics show descriptor values: they are not served to every caller).
HttpHandler PublicRoutes(Engine& engine, std::string metrics_listener);
// GET /metrics, formatted on the engine's blocking pool; with a non-empty token every
// call needs `Authorization: Bearer <token>` (401 otherwise).
HttpHandler MetricsRoutes(Engine& engine, std::string token);
// Every call needs `Authorization: Bearer <token>`; with an empty token every call is
// refused (401) — the admin listener is never open by accident.
HttpHandler AdminRoutes(Engine& engine, std::string token);

// Compares in time independent of where the strings differ.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

}  // namespace sluiced
