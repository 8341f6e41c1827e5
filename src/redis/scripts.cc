#include "redis/scripts.h"

namespace sluice::internal {

std::vector<Script> AllScripts() {
  return {
      {"fixed_window", kFixedWindowLua},
  };
}

}  // namespace sluice::internal
