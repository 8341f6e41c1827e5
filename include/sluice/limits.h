// sluice/limits.h — limit definitions.
//
// A Limit is an argument, not state: the limit in force is sent with every call, so a
// changed Limit (a plan upgrade, a config reload) takes effect on the next check with no
// migration and without resetting what was already counted.
//
// Thread-safety: a plain value.
#pragma once

#include <chrono>
#include <cstdint>
#include <string_view>

#include "sluice/status.h"

namespace sluice {

enum class Algorithm {
  // `limit` requests per `window`. The window opens at the first admitted request of an
  // id (or at multiples of `window` on the clock when `aligned`); its key expires when the
  // window ends.
  kFixedWindow,
};

// "fixed_window" — the name used in configs, the CLI's --algorithm and metrics.
std::string_view AlgorithmName(Algorithm algorithm);
// Parses a name from AlgorithmName(); InvalidArgument naming the known ones otherwise.
StatusOr<Algorithm> ParseAlgorithm(std::string_view name);

// Largest accepted `limit` and `cost`: far above any sane limit, small enough that every
// count stays exact in the scripts' double-precision arithmetic.
inline constexpr int64_t kMaxLimit = int64_t{1} << 40;
// Longest accepted window: 366 days.
inline constexpr std::chrono::milliseconds kMaxWindow{366LL * 24 * 3600 * 1000};

struct Limit {
  Algorithm algorithm = Algorithm::kFixedWindow;
  // Requests (cost units) admitted per window. 1 ≤ limit ≤ kMaxLimit. Default: none.
  int64_t limit = 0;
  // Length of one window. 1 ms ≤ window ≤ kMaxWindow. Default: none.
  std::chrono::milliseconds window{0};
  // Windows start at multiples of `window` on the store's clock instead of at an id's
  // first admitted request. Default: false.
  bool aligned = false;

  // OK, or InvalidArgument naming the field and the accepted range.
  Status Validate() const;
};

}  // namespace sluice
