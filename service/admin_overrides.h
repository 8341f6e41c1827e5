// service/admin_overrides.h — the admin listener's runtime overrides (docs/sluiced.md, Admin
// API): POST /admin/overrides sets one, GET /admin/overrides lists those in force, POST
// /admin/overrides/clear ends one; each set or clear audited (sluice/admin.h). Every call
// here blocks on the store: run it on the engine's blocking pool.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "service/engine.h"
#include "service/http_server.h"

namespace sluiced {

// The override a POST /admin/overrides body asks for: `limit` (an integer >= 0), `ttl_s`
// (1 s to 30 days) and optional `window_ms` (absent: the rule's own). InvalidArgument
// naming the field otherwise.
sluice::StatusOr<sluice::OverrideSpec> ParseOverrideSpec(const std::string& body);

void AdminSetOverride(Engine& engine, const Match& match, const sluice::OverrideSpec& spec,
                      const sluice::AdminAction& action, const Respond& respond);
void AdminClearOverride(Engine& engine, const Match& match, const sluice::AdminAction& action,
                        const Respond& respond);
void AdminListOverrides(Engine& engine, const Respond& respond);

// {"overrides":[{"domain","limiter","id","limit","window_ms","expires_at_ms","set_at_ms",
// "actor","reason"}],"truncated":bool} of the overrides in force now, or {"error": why}
// when the store cannot say (for /admin/config, which shows them beside the rules).
nlohmann::json RuntimeOverridesJson(Engine& engine);

}  // namespace sluiced
