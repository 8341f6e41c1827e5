// The Lua scripts, embedded at build time from src/algo/*.lua (each file is the only
// copy of its script). The order of AllScripts() is the index Connection::Eval takes.
#pragma once

#include <string_view>
#include <vector>

#include "redis/connection.h"

namespace sluice::internal {

enum ScriptId : int {
  kFixedWindowScript = 0,
};

extern const std::string_view kFixedWindowLua;

// Every script, indexed by ScriptId.
std::vector<Script> AllScripts();

}  // namespace sluice::internal
