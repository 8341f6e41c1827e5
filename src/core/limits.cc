#include "sluice/limits.h"

#include <string>

namespace sluice {

std::string_view AlgorithmName(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kFixedWindow: return "fixed_window";
  }
  return "unknown";
}

StatusOr<Algorithm> ParseAlgorithm(std::string_view name) {
  if (name == "fixed_window") return Algorithm::kFixedWindow;
  return InvalidArgumentError("unknown algorithm \"" + std::string(name) +
                              "\"; known: fixed_window");
}

Status Limit::Validate() const {
  if (limit < 1 || limit > kMaxLimit) {
    return InvalidArgumentError("limit must be between 1 and " + std::to_string(kMaxLimit) +
                                ", got " + std::to_string(limit));
  }
  if (window.count() < 1 || window > kMaxWindow) {
    return InvalidArgumentError("window must be between 1 ms and " +
                                std::to_string(kMaxWindow.count()) + " ms, got " +
                                std::to_string(window.count()) + " ms");
  }
  return Status::Ok();
}

}  // namespace sluice
