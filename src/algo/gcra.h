// gcra: the in-memory twin of gcra.lua (see algo/algorithm.h for the contract).
// NOT IMPLEMENTED YET: AlgorithmAvailable() reports false, so no limiter can reach it.
#pragma once

#include <cstdint>
#include <optional>

#include "algo/algorithm.h"

namespace sluice::internal {

struct GcraState {};

AlgoReply GcraStep(std::optional<GcraState>& state, const AlgoArgs& args, int64_t now_ms,
                       int64_t& expires_at_ms);

}  // namespace sluice::internal
