// service/routes.h — what each HTTP path of sluiced does: the public listener (checks,
// leases, metrics, health) and the admin listener (bearer token on every call).
#pragma once

#include <string>

#include "service/engine.h"
#include "service/http_server.h"

namespace sluiced {

HttpHandler PublicRoutes(Engine& engine);
// Every call needs `Authorization: Bearer <token>`; with an empty token every call is
// refused (401) — the admin listener is never open by accident.
HttpHandler AdminRoutes(Engine& engine, std::string token);

// Compares in time independent of where the strings differ.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

}  // namespace sluiced
