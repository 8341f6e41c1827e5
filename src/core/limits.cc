#include "sluice/limits.h"

#include <algorithm>
#include <iterator>
#include <string>

namespace sluice {

namespace {

constexpr Algorithm kAll[] = {Algorithm::kFixedWindow, Algorithm::kSlidingWindow,
                              Algorithm::kSlidingLog, Algorithm::kTokenBucket, Algorithm::kGcra};

}  // namespace

std::string_view AlgorithmName(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kFixedWindow: return "fixed_window";
    case Algorithm::kSlidingWindow: return "sliding_window";
    case Algorithm::kSlidingLog: return "sliding_log";
    case Algorithm::kTokenBucket: return "token_bucket";
    case Algorithm::kGcra: return "gcra";
  }
  return "unknown";
}

StatusOr<Algorithm> ParseAlgorithm(std::string_view name) {
  std::string known;
  for (Algorithm a : kAll) {
    if (name == AlgorithmName(a)) return a;
    if (!known.empty()) known += ", ";
    known += AlgorithmName(a);
  }
  return InvalidArgumentError("unknown algorithm \"" + std::string(name) + "\"; known: " + known);
}

Status Limit::Validate() const {
  if (std::find(std::begin(kAll), std::end(kAll), algorithm) == std::end(kAll)) {
    return InvalidArgumentError("unknown algorithm value " +
                                std::to_string(static_cast<int>(algorithm)));
  }
  if (limit < 1 || limit > kMaxLimit) {
    return InvalidArgumentError("limit must be between 1 and " + std::to_string(kMaxLimit) +
                                ", got " + std::to_string(limit));
  }
  if (window.count() < 1 || window > kMaxWindow) {
    return InvalidArgumentError("window must be between 1 ms and " +
                                std::to_string(kMaxWindow.count()) + " ms, got " +
                                std::to_string(window.count()) + " ms");
  }
  if (refill < 0 || refill > kMaxLimit) {
    return InvalidArgumentError("refill must be between 0 and " + std::to_string(kMaxLimit) +
                                ", got " + std::to_string(refill));
  }
  return Status::Ok();
}

}  // namespace sluice
