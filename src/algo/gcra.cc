#include "algo/gcra.h"

namespace sluice::internal {

AlgoReply GcraStep(std::optional<GcraState>& state, const AlgoArgs& args, int64_t now_ms,
                       int64_t& expires_at_ms) {
  (void)state;
  (void)args;
  (void)now_ms;
  (void)expires_at_ms;
  return {0, 0, 0, 0};  // unreachable: AlgorithmAvailable(kGcra) is false
}

}  // namespace sluice::internal
