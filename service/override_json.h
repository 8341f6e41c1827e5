// service/override_json.h — one runtime override as JSON, in one place: the shape of an
// override in sluiced's admin answers (/admin/overrides, with its domain added) and in
// `sluice override … --json` (docs/openapi.yaml, RuntimeOverride).
#pragma once

#include <nlohmann/json.hpp>

#include "sluice/admin.h"

namespace sluiced {

inline nlohmann::json RuntimeOverrideJson(const sluice::RuntimeOverride& o) {
  return {{"limiter", o.limiter},
          {"id", o.id},
          {"limit", o.limit},
          {"window_ms", o.window.count()},
          {"expires_at_ms", o.expires_at_ms},
          {"set_at_ms", o.set_at_ms},
          {"actor", o.actor},
          {"reason", o.reason}};
}

}  // namespace sluiced
