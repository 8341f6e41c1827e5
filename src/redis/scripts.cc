#include "redis/scripts.h"

namespace sluice::internal {

std::vector<Script> AllScripts() {
  return {
      {"fixed_window", kFixedWindowLua},
      {"sliding_window", kSlidingWindowLua},
      {"sliding_log", kSlidingLogLua},
      {"token_bucket", kTokenBucketLua},
      {"gcra", kGcraLua},
      {"concurrency", kConcurrencyLua},
      {"composite", kCompositeLua},
      {"batch", kBatchLua},
  };
}

}  // namespace sluice::internal
